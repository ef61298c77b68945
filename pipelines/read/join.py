"""Storage-partitioned join (SPJ) of two partitioned namespaces, as one shuffle-free scan.

:func:`join_partitioned` plans the join with :mod:`partitioning.plan.join` on the
driver. When the two sides are partitioned compatibly on the join keys, the result is
read from the ``lance_partitioned_join`` Python Data Source (:mod:`pipelines.read.join_source`):
each input partition holds whole partition groups (the left and right partition tables
whose rows can match), and ``read()`` reads both sides of each group with the side's
filter and joins them locally in Arrow. Spark's physical plan is then a single scan, with
no Exchange for the join inputs. Otherwise the join is Spark's own shuffle (or
broadcast) join of :func:`pipelines.read.dataframe.read_partitioned` of both sides, and one
log line on the ``lance_partitioned`` logger says why SPJ was not used.

Both paths read each namespace at the same ``__manifest`` version, and both return
Spark's ``left.join(right, on=[...], how=...)`` columns: the keys once (for a full
join the left key if not NULL, else the right), the left non-key columns, then the
right non-key columns. A non-key column name on both sides appears twice, as in
Spark, unless ``suffixes=`` renames both copies.

A Python Data Source cannot return two columns of one name (PySpark hands its Arrow
batches back by column name), so the SPJ scan names such columns with internal
suffixes and :func:`join_partitioned` renames them back with ``toDF``, a projection
that adds no Exchange.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence

from pyspark.sql import DataFrame, SparkSession

from partitioning.namespace import PartitionedNamespace
from partitioning.plan.join import JoinPlan, plan_namespace_join
from partitioning.plan.join_columns import (
    JoinType,
    check_suffixes,
    distinct_suffixes,
    join_output_names,
    shared_columns,
    validate_join,
)
from partitioning.storage.roots import storage_option_pairs
from pipelines.read.dataframe import dialect_options, read_partitioned, session_dialect
from pipelines.read.join_source import FORMAT, MAX_PARTITIONS, LancePartitionedJoinDataSource
from pipelines.session_calls import default_parallelism, register_bound
from pipelines.shared_roots import driver_root

__all__ = ["join_partitioned", "join_partitioned_with_plan"]

log = logging.getLogger("lance_partitioned")


def join_partitioned(
    spark: SparkSession,
    left_root: str,
    right_root: str,
    on: str | Sequence[str],
    how: JoinType = "inner",
    *,
    filter_left: str | None = None,
    filter_right: str | None = None,
    suffixes: Sequence[str] | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> DataFrame:
    """``left JOIN right USING (on)`` of two partitioned namespaces, without a shuffle when possible.

    The result has exactly the columns of Spark's ``left.join(right, on=[...], how=how)``
    of the two (filtered) namespaces: the keys once, the left non-key columns, then the
    right ones. A non-key column name present on both sides (ignoring case, as Spark
    does) therefore appears twice by default (``suffixes=None``), which Spark can show,
    collect and write as CSV but cannot write as parquet or reference by name; pass
    ``suffixes=("_left", "_right")`` to rename both copies (``a`` becomes ``a_left`` and
    ``a_right``; other columns keep their names). Suffixes that would still leave two
    equal names are refused.

    ``how`` is ``inner``, ``left``, ``right`` or ``full``; ``filter_left`` / ``filter_right``
    are SQL filters applied to each side before the join (and used to prune its
    partition tables). The storage-partitioned join is used when at least one join key
    has the same type on both sides and a common grouping of the partition fields on it
    in every spec version present on both sides (after pruning); see
    :mod:`partitioning.plan.join`. If any version is incompatible the WHOLE join falls
    back to Spark's join: an outer join's unmatched rows can only be decided against the
    whole other side, so a per-version fallback would only be sound for inner joins.

    ``storage_options`` (Lance's, e.g. ``aws_endpoint``) open both namespaces and reach
    the tasks. Relative roots are made absolute here, and refused on a cluster whose
    executors do not share this machine's files.
    """
    df, _ = join_partitioned_with_plan(
        spark,
        left_root,
        right_root,
        on,
        how,
        filter_left=filter_left,
        filter_right=filter_right,
        suffixes=suffixes,
        storage_options=storage_options,
    )
    return df


def join_partitioned_with_plan(
    spark: SparkSession,
    left_root: str,
    right_root: str,
    on: str | Sequence[str],
    how: JoinType = "inner",
    *,
    filter_left: str | None = None,
    filter_right: str | None = None,
    suffixes: Sequence[str] | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> tuple[DataFrame, JoinPlan]:
    """:func:`join_partitioned`, also returning the plan (``plan.compatible``, ``plan.reason``)."""
    left_root, right_root = driver_root(spark, left_root), driver_root(spark, right_root)
    left = PartitionedNamespace.load(left_root, storage_options)
    right = PartitionedNamespace.load(right_root, storage_options)
    validate_join(left.namespace_schema, right.namespace_schema, on, how, suffixes)
    dialect = session_dialect(spark)
    plan = plan_namespace_join(
        left, right, on, how, filter_left=filter_left, filter_right=filter_right, dialect=dialect
    )
    pair = check_suffixes(suffixes)
    names = join_output_names(left.namespace_schema, right.namespace_schema, plan.on, pair)
    if not plan.compatible:
        log.warning(plan.summary)
        lhs = read_partitioned(
            spark,
            left_root,
            filter=filter_left,
            manifest_version=left.manifest_version,
            storage_options=storage_options,
        )
        rhs = read_partitioned(
            spark,
            right_root,
            filter=filter_right,
            manifest_version=right.manifest_version,
            storage_options=storage_options,
        )
        if pair is not None:
            shared = {c.lower() for c in shared_columns(left.namespace_schema, right.namespace_schema, plan.on)}
            lhs, rhs = _suffixed(lhs, shared, plan.on, pair[0]), _suffixed(rhs, shared, plan.on, pair[1])
        return lhs.join(rhs, on=list(plan.on), how=plan.how), plan
    log.info(plan.summary)
    register_bound(spark, LancePartitionedJoinDataSource)
    options = {
        "max_partitions": str(_default_partitions(spark)),
        "left": left_root,
        "right": right_root,
        "left_version": str(left.manifest_version),
        "right_version": str(right.manifest_version),
        "on": json.dumps(list(plan.on)),
        "how": plan.how,
        **dialect_options(dialect),
        **storage_option_pairs(storage_options),
    }
    if filter_left:
        options["filter_left"] = filter_left
    if filter_right:
        options["filter_right"] = filter_right
    scan_suffixes = pair
    if scan_suffixes is None and len(set(names)) < len(names):
        scan_suffixes = distinct_suffixes(left.namespace_schema, right.namespace_schema, plan.on)
    if scan_suffixes is not None:
        options["suffixes"] = json.dumps(list(scan_suffixes))
    df = spark.read.format(FORMAT).options(**options).load()
    return (df if df.columns == names else df.toDF(*names)), plan


def _suffixed(df: DataFrame, shared: set[str], on: Sequence[str], suffix: str) -> DataFrame:
    """``df`` with ``suffix`` added to its non-key columns named (ignoring case) in ``shared``."""
    renames = {c: c + suffix for c in df.columns if c not in on and c.lower() in shared}
    return df.withColumnsRenamed(renames) if renames and suffix else df


def _default_partitions(spark: SparkSession) -> int:
    """Twice the cluster's cores: enough tasks to balance groups of different sizes, few enough
    that per-task overhead does not dominate small joins."""
    slots = default_parallelism(spark)
    return MAX_PARTITIONS if slots is None else max(1, 2 * slots)
