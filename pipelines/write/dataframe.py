"""``write_partitioned``: a DataFrame into a partitioned namespace, one atomic commit.

Executors add the partition columns (Spark Column transforms), cluster the rows by
them, and write Lance fragments with ``mapInArrow``; the driver then commits every
touched dataset and makes ONE ``__manifest`` commit (:mod:`partitioning.tables.write`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

import pyarrow as pa
from pyspark.sql import DataFrame

from partitioning.errors import (
    InvalidInput,
    NamespaceAlreadyExists,
    SpecError,
)
from partitioning.namespace import PartitionedNamespace
from partitioning.spec.partition_by import check_same_spec, parse_partition_by
from partitioning.spec.partition_spec import PartitionSpec
from partitioning.spec.schema import NamespaceSchema
from partitioning.storage.guard import guarded
from partitioning.storage.manifest import ManifestStore
from partitioning.storage.paths import check_namespace_root, check_new_root
from partitioning.storage.unborn import discard_unborn
from partitioning.tables.fragments import DEFAULT_MAX_ROWS_PER_FILE
from partitioning.tables.write import WRITE_MODES, CommitResult, already_committed, commit_write
from pipelines.columns.schema import merge_spark_schema, namespace_schema_from_spark
from pipelines.session_calls import describe_jobs
from pipelines.shared_roots import driver_root
from pipelines.source.datasource import register_data_source
from pipelines.write.fragments import write_fragments

__all__ = ["write_partitioned"]

Mode = Literal["append", "overwrite", "overwrite_partitions", "error", "ignore"]


def _resolve_namespace(
    df: DataFrame,
    root: str,
    mode: str,
    spec: PartitionSpec | str | Mapping[str, Any] | None,
    partition_by: Sequence[str] | None,
    schema: pa.Schema | NamespaceSchema | None,
    storage_options: Mapping[str, str] | None,
) -> tuple[PartitionedNamespace | None, str, bool]:
    """Load or create the namespace: (it, the effective mode, whether this call created it);
    (None, reason, False) when the mode says to skip.

    A root that is not a namespace must be missing or empty, and a namespace root must
    not also be a plain Lance dataset: both are refused before anything is written.
    """
    if ManifestStore(root, storage_options).exists():
        check_namespace_root(root, storage_options)
        if mode == "error":
            raise NamespaceAlreadyExists(
                f"a namespace already exists at {root} (mode='error'); "
                "use mode='append', 'overwrite' or 'overwrite_partitions'"
            )
        if mode == "ignore":
            return None, f"a namespace already exists at {root} (mode='ignore')", False
        ns = PartitionedNamespace.load(root, storage_options)
        wanted = _requested_spec(spec, partition_by, ns.namespace_schema)
        if wanted is not None:
            check_same_spec(root, ns.current_spec, wanted, "omit partition_by/spec to write with the current spec")
        return ns, mode, False
    check_new_root(root, storage_options)
    if spec is None and not partition_by:
        raise SpecError(f"no namespace at {root}; pass partition_by=[...] (or spec=) to create it")
    ns_schema = schema if schema is not None else namespace_schema_from_spark(df.schema)
    if isinstance(ns_schema, pa.Schema):
        ns_schema = NamespaceSchema.from_arrow(ns_schema)
    first = _requested_spec(spec, partition_by, ns_schema)
    assert first is not None
    ns = PartitionedNamespace.create(root, ns_schema, first, storage_options)
    return ns, "append" if mode in ("error", "ignore") else mode, True


def _requested_spec(
    spec: PartitionSpec | str | Mapping[str, Any] | None,
    partition_by: Sequence[str] | None,
    schema: NamespaceSchema,
) -> PartitionSpec | None:
    if spec is not None and partition_by:
        raise SpecError("pass either spec= or partition_by=, not both")
    if spec is not None:
        return PartitionSpec.coerce(spec)
    if partition_by:
        return parse_partition_by(list(partition_by), schema)
    return None


def write_partitioned(
    df: DataFrame,
    root: str,
    *,
    mode: Mode = "append",
    partition_by: Sequence[str] | None = None,
    spec: PartitionSpec | str | Mapping[str, Any] | None = None,
    schema: pa.Schema | NamespaceSchema | None = None,
    max_rows_per_file: int = DEFAULT_MAX_ROWS_PER_FILE,
    max_bytes_per_file: int | None = None,
    cluster: bool = True,
    max_open_writers: int = 32,
    write_id: str | None = None,
    replace_where: str | None = None,
    merge_schema: bool = False,
    storage_options: Mapping[str, str] | None = None,
) -> CommitResult:
    """Write ``df`` into the partitioned namespace at ``root``.

    Modes (Spark's words): ``append``; ``overwrite`` replaces all data, atomically
    (partitions not written are removed); ``overwrite_partitions`` replaces only the
    partitions present in ``df`` (dynamic overwrite); ``error``/``ignore`` fail or do
    nothing when the namespace exists, and create it otherwise.

    A missing namespace is created from ``partition_by`` (e.g. ``["day(ts)",
    "bucket[16](user_id)"]``) or ``spec``, with ``schema`` defaulting to ``df``'s.
    ``schema`` (a ``pa.Schema`` or :class:`NamespaceSchema`) is how to get a vector
    column: ``pa.field("v", pa.list_(pa.float32(), d))`` takes ``array<float>``,
    ``array<double>`` and ``VectorUDT`` columns, refusing the whole write (nothing
    committed) when any non-NULL vector does not have ``d`` elements. Without it an
    ``array<float>`` column becomes a variable-length list (Spark has no dimension).
    ``cluster`` repartitions by partition first, so each partition gets one fragment per
    task (a task buffers at most ``max_rows_per_file`` rows, flushing its largest
    partition beyond that), unless the first rows of the input tasks (100,000 in all)
    hold at most ``max_open_writers`` partition values (not sampled when the spec cannot
    produce more, e.g. ``bucket[16]``, and Spark estimates the input at 64 MiB or more): then, as without ``cluster``,
    no shuffle runs and every input task writes its own fragments, keeping at most
    ``max_open_writers`` partition buffers. A retried job with the same ``write_id``
    never adds its data twice. The driver holds a write lease under ``root`` (refreshed
    by a background thread) from before the tasks run until the commit returns, so a
    concurrent vacuum keeps the fragments (:mod:`partitioning.storage.leases`). A relative ``root``
    is made absolute here, and refused on a cluster whose executors do not share this
    machine's files (:func:`pipelines.shared_roots.driver_root`).

    ``replace_where`` (with ``mode="overwrite"``, Delta's option): atomically replaces
    the rows matching the predicate (Spark SQL over the namespace's columns) with
    ``df``; a row of ``df`` that does not match refuses the write, with how many, and
    nothing changes. ``merge_schema``: ``df``'s columns missing from the namespace are
    added (new field ids) and narrower namespace types are widened to ``df``'s
    (int -> bigint, float -> double, decimal precision), as schema-evolution commits
    made just before the data's commit; without it such a ``df`` is refused.
    """
    if mode not in WRITE_MODES:
        raise SpecError(f"unknown mode {mode!r}; allowed: {', '.join(WRITE_MODES)}")
    if max_rows_per_file < 1 or max_open_writers < 1:
        raise SpecError("max_rows_per_file and max_open_writers must be at least 1")
    if replace_where is not None and mode != "overwrite":
        raise InvalidInput(f"replace_where needs mode='overwrite', not {mode!r}")
    sizes = {
        "max_rows_per_file": max_rows_per_file,
        "max_bytes_per_file": max_bytes_per_file,
        "cluster": cluster,
        "max_open_writers": max_open_writers,
    }
    # in a session started without the jar: the JVM layer (and its log filter) for this write
    # and the session's later format("lance_partitioned") calls (once per session)
    register_data_source(df.sparkSession)
    root = driver_root(df.sparkSession, root)
    ns, effective, created = _resolve_namespace(df, root, mode, spec, partition_by, schema, storage_options)
    if ns is None:
        return CommitResult(root, mode, None, skipped=effective, write_id=write_id)
    if not created:
        return _write_into(df, ns, mode, effective, write_id, replace_where, merge_schema, sizes)
    try:
        return _write_into(df, ns, mode, effective, write_id, replace_where, merge_schema, sizes)
    except BaseException:
        # the namespace comes into existence with its first successful write
        discard_unborn(ns.root, ns.manifest_version, ns.storage_options)
        raise


def _write_into(
    df: DataFrame,
    ns: PartitionedNamespace,
    mode: str,
    effective: str,
    write_id: str | None,
    replace_where: str | None,
    merge_schema: bool,
    sizes: dict[str, Any],
) -> CommitResult:
    skipped = already_committed(ns, mode, write_id)
    if skipped is not None:
        return skipped
    if merge_schema:
        ns = merge_spark_schema(df.schema, ns)
    if replace_where is not None:
        from pipelines.write.rewrite import replace_where as replace_rows

        return replace_rows(df, ns, replace_where, write_id=write_id, **sizes)
    label = ns.root.rstrip("/").rsplit("/", 1)[-1]
    with guarded(ns.root, ns.storage_options, write_id=write_id, bases=(ns.manifest_version,)) as guard:
        messages, writer = write_fragments(df, ns, plan_layout=True, **sizes)
        with describe_jobs(df.sparkSession, f"lance_partitioned: commit ({label})"):
            return commit_write(
                ns,
                messages,
                mode=effective,  # type: ignore[arg-type]
                spec_id=writer.planner.spec_id,
                schema=writer.schema,
                write_id=write_id,
                max_rows_per_file=sizes["max_rows_per_file"],
                naming_seed=writer.planner.seed,
                guard=guard,
            )
