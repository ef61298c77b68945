"""Backfilling columns from Spark: new or recomputed columns without rewriting data files.

``api`` is ``backfill_columns`` (validate, plan the fragments, run the tasks, commit);
``compute`` runs the values in Spark tasks, from a Python function or from Spark SQL
expressions. The Spark-free parts are :mod:`partitioning.tables.backfill` (its plan,
commit and per-table merge).

May import: maintenance, columns, the session modules, :mod:`partitioning`.
"""
