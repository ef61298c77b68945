"""The ``lance_partitioned`` Python data source: what Spark calls to read and write.

``datasource`` registers it; ``reader`` fixes a read plan from the DataFrame's options and
``slices`` reads one partition table slice as Spark's batches; ``nearest`` is its vector
search option; ``writer`` is its write side.

May import: columns, search, the session modules, :mod:`partitioning`. Imported by read,
write, maintenance and jvm.
"""
