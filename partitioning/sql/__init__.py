"""SQL filter text and row filters, Spark-free: the bottom of the house.

Filter text (Spark's or DataFusion's dialect) becomes tokens (``tokens``), read by a cursor
(``cursor``) into parsed expressions (``parse`` for the grammar, ``atoms`` for literals,
columns, casts and calls, ``nodes`` for what they build), then the filter tree pruning reads
(``filters``; ``from_sql`` builds it from text, ``predicates`` from the predicates Spark
pushes through the JVM layer). ``binding`` types a filter against a schema the way Spark
coerces, once; ``rowfilter`` applies a bound filter to Arrow rows exactly or to a Lance scan
as a superset, with ``arith`` for comparisons of integer arithmetic; ``assign`` computes
``SET`` values in Arrow where they are exactly Spark's; ``engine`` runs a SQL filter with
DataFusion; ``timezones`` reads time zones and date/time literal text as Spark does.

May import: :mod:`partitioning.errors` only. Imported by every other package.
"""
