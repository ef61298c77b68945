"""Maintenance driven by Spark: compaction rewrites run as Spark tasks, one per bin of
small fragments; the driver then makes the dataset commits and ONE ``__manifest`` commit.

The other operations (:func:`delete_rows`, :func:`drop_partitions`, :func:`vacuum`,
:func:`optimize_manifest`) are metadata-sized and run on the driver.
"""

from __future__ import annotations

import logging

from pyspark.sql import SparkSession

from partitioning.filters import Filter
from partitioning.maintenance import (
    DEFAULT_TARGET_ROWS,
    MaintenanceReport,
    commit_compaction,
    compact_local,
    delete_rows,
    drop_partitions,
    optimize_manifest,
    plan_compaction,
    rewrite,
    vacuum,
)
from partitioning.namespace import PartitionedNamespace
from pipelines.write import _spark_errors

__all__ = ["compact", "delete_rows", "drop_partitions", "optimize_manifest", "vacuum"]

log = logging.getLogger("lance_partitioned")


def compact(
    root: str,
    filter: str | Filter | None = None,
    *,
    target_rows_per_fragment: int = DEFAULT_TARGET_ROWS,
    spark: SparkSession | None = None,
) -> MaintenanceReport:
    """Rewrite small fragments of the partitions ``filter`` selects, in parallel on the executors.

    Uses ``spark`` or the active session; without one it runs in this process.
    Readers of older ``__manifest`` versions keep seeing the old fragments.
    """
    ns = PartitionedNamespace.load(root)
    session = spark or SparkSession.getActiveSession()
    if session is None:
        log.info("compact %s: no SparkSession, compacting in this process", root)
        return compact_local(ns, filter, target_rows_per_fragment=target_rows_per_fragment)
    tasks = plan_compaction(ns, filter, target_rows_per_fragment=target_rows_per_fragment)
    if not tasks:
        return MaintenanceReport("compact", ns.root, ns.manifest_version)
    sc = session.sparkContext
    sc.setJobDescription(
        f"lance_partitioned: compact {len(tasks)} fragment bins ({root.rstrip('/').rsplit('/', 1)[-1]})"
    )
    try:
        with _spark_errors(root):
            results = sc.parallelize(tasks, len(tasks)).map(rewrite).collect()
    finally:
        sc.setJobDescription(None)  # type: ignore[arg-type]
    return commit_compaction(ns, results)
