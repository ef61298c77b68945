"""Operations on partition tables, Spark-free: writes, rewrites, maintenance and restore.

A write: ``fragments`` (executor side) turns rows into Lance fragments and ``messages``
carries them to the driver, whose ``write`` commits them. ``rewrites`` deletes and adds rows
in one commit (merge, update, replace_where), rebased by ``rebase`` onto other writers'
commits it does not depend on; ``lance_updates`` runs an update Lance's own engine computes
exactly as Spark on each table, then commits ``__manifest`` once. The ``backfill`` package computes columns beside
each fragment's files and commits them (``backfill_columns``). Maintenance:
``maintenance`` (the report and manifest compaction), ``compaction``, ``deletes`` (partition
drops and row deletes), ``vacuum`` and ``vacuum_deletions``. ``restore`` makes the namespace
what an older version was; ``replace`` gives it a new schema, spec and rows in one step
(``REPLACE TABLE ... AS SELECT``, an atomic create).

May import: :mod:`partitioning.namespace` and everything below it. Imported by
:mod:`pipelines` and the jobs; not by search or plan.
"""
