"""Column statistics per partition table, and the data skipping they allow.

``bounds`` collects a table's statistics from the rows a write adds (per column: NULL and
NaN counts, the lowest and highest value), merges them as commits add and delete rows, and
keeps them as JSON in the table's ``__manifest`` row, valid for one table version.
``skipping`` judges, from those statistics, which tables a filter can match.

May import: spec, sql, :mod:`partitioning.errors`. Imported by state and tables.
"""
