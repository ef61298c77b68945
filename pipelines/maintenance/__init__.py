"""Maintenance, history and metadata tables from Spark.

``operations`` runs compaction, vacuum, deletes and drops with Spark SQL filters;
``history`` gives ``DESCRIBE HISTORY`` and ``RESTORE``; ``inspect`` the partitions and files
metadata tables as DataFrames.

May import: write, source, columns, the session modules, :mod:`partitioning`. Imported by
:mod:`pipelines` (the public names) and the jobs.
"""
