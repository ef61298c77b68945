"""Backfilling columns, Spark-free: new or recomputed columns beside each fragment's files.

``plan`` validates the columns and plans the fragments, and holds what tasks run (read a
fragment, compute, check, write one file); ``commit`` commits each partition dataset once
and ``__manifest`` once, backfilling again the tables another writer rewrote meanwhile;
``merge`` is one table's share of that commit (one Lance ``Merge`` version).
:func:`pipelines.backfill.api.backfill_columns` drives them with Spark.

May import: :mod:`partitioning.namespace` and everything below it, and
:mod:`partitioning.tables` (the write's result and checks). Imported by :mod:`pipelines.backfill`.
"""

from partitioning.tables.backfill.commit import BackfillResult, commit_backfill
from partitioning.tables.backfill.plan import (
    TEMP_PREFIX,
    BackfillColumns,
    FragmentWork,
    TablePlan,
    WrittenFragment,
    backfill_plan,
    fragment_works,
    plan_tables,
)

__all__ = [
    "TEMP_PREFIX",
    "BackfillColumns",
    "BackfillResult",
    "FragmentWork",
    "TablePlan",
    "WrittenFragment",
    "backfill_plan",
    "commit_backfill",
    "fragment_works",
    "plan_tables",
]
