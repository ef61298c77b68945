"""Indexes of a partitioned namespace, Spark-free: define, plan, build a segment, commit, list.

The flow mirrors compaction (:mod:`partitioning.tables.maintenance`): the driver plans one
:class:`IndexTask` per partition table (at the ``read_version`` the manifest records),
:func:`build_segment` runs anywhere (a Spark task) and returns a picklable Lance
``Index`` without committing it, and :func:`commit_indexes` commits each dataset and
then makes ONE ``__manifest`` commit. A table written to since its task was planned is
re-based when the fragments the segment covers are unchanged (the new rows stay
searchable, unindexed), and rebuilt in this process otherwise; nothing is lost.
The shared model and index definitions live in :mod:`partitioning.search.index_model`.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, cast

import lance
import pyarrow as pa
from lance import LanceOperation
from lance.dataset import Index

from partitioning.errors import ConcurrentModification, InvalidInput, translate_lance_errors
from partitioning.namespace import PartitionedNamespace, TableCommit
from partitioning.search.index_model import IndexSpec, VectorModel, load_model, model_kwargs
from partitioning.spec.field_ids import field_id_of
from partitioning.spec.vectors import is_vector_type, vector_dimension
from partitioning.state.partition_tables import open_partition_table
from partitioning.state.scan import ScanTask
from partitioning.stats.bounds import StatsChange, TableStats
from partitioning.storage.alignment import COMMIT_MESSAGE, dataset_columns, latest_keeping_indexes
from partitioning.storage.guard import Guard
from partitioning.storage.history import Operation

__all__ = [
    "METRICS",
    "SCALAR_INDEX_TYPES",
    "VECTOR_INDEX_TYPES",
    "IndexBuild",
    "IndexReport",
    "IndexTask",
    "build_segment",
    "column_name",
    "commit_indexes",
    "define_scalar_index",
    "define_vector_index",
    "plan_index_tasks",
    "sample_vectors",
]

VECTOR_INDEX_TYPES = ("IVF_PQ", "IVF_FLAT", "IVF_SQ", "IVF_HNSW_SQ", "IVF_HNSW_PQ")
SCALAR_INDEX_TYPES = ("BTREE", "BITMAP", "INVERTED", "ZONEMAP", "BLOOMFILTER")
METRICS = ("l2", "cosine", "dot")
COMMIT_ATTEMPTS = 8
DEFAULT_SAMPLE_SIZE = 65_536


@dataclass(frozen=True)
class IndexTask:
    """Build one segment of index ``spec`` over ``fragment_ids`` of one table at ``read_version``."""

    root: str
    object_id: str
    uri: str
    read_version: int
    column: str  # the column's name in this dataset
    spec: str  # IndexSpec JSON
    fragment_ids: tuple[int, ...]
    rows: int
    full: bool  # a full build replaces every segment of the index; else a delta segment is added
    storage_options: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class IndexBuild:
    task: IndexTask
    index: Index


@dataclass(frozen=True)
class IndexReport:
    operation: str
    root: str
    manifest_version: int | None
    names: tuple[str, ...] = ()
    tables: int = 0
    rebuilt: tuple[str, ...] = ()

    def summary(self) -> str:
        tail = f", __manifest v{self.manifest_version}" if self.manifest_version is not None else ""
        again = f" ({len(self.rebuilt)} rebuilt after a concurrent change)" if self.rebuilt else ""
        return (
            f"{self.operation} {self.root}: {', '.join(self.names) or 'no index'} on {self.tables} tables{tail}{again}"
        )


def _column(ns: PartitionedNamespace, column: str) -> pa.Field:
    if column not in ns.schema.names:
        raise InvalidInput(f"unknown column {column!r}; columns are: {', '.join(ns.schema.names)}")
    return ns.schema.field(column)


def _field_id(ns: PartitionedNamespace, column: str) -> int:
    fid = field_id_of(ns.namespace_schema.arrow.field(column))
    if fid is None:
        raise InvalidInput(f"column {column!r} has no field id in the namespace schema")
    return int(fid)


def define_vector_index(
    ns: PartitionedNamespace, column: str, index_type: str, metric: str, name: str | None, params: Mapping[str, int]
) -> IndexSpec:
    """The validated definition of a vector index (no model yet); each refusal is one line."""
    field = _column(ns, column)
    if not is_vector_type(field.type):
        raise InvalidInput(
            f"column {column!r} is {field.type}, not a vector column (a fixed-size list of float16/32/64)"
        )
    kind = str(index_type).upper()
    if kind not in VECTOR_INDEX_TYPES:
        raise InvalidInput(f"unknown vector index_type {index_type!r}; allowed: {', '.join(VECTOR_INDEX_TYPES)}")
    how = str(metric).lower()
    if how not in METRICS:
        raise InvalidInput(f"unknown metric {metric!r}; allowed: {', '.join(METRICS)}")
    allowed = {"num_partitions", "sample_size", "max_iters"}
    allowed |= {"num_sub_vectors"} if kind.endswith("PQ") else set()
    allowed |= {"m", "ef_construction"} if "HNSW" in kind else set()
    for key, value in params.items():
        if key not in allowed:
            raise InvalidInput(f"unknown index parameter {key!r} for {kind}; allowed: {', '.join(sorted(allowed))}")
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidInput(f"index parameter {key}={value!r} must be a positive integer")
    dim = vector_dimension(field.type)
    nsub = params.get("num_sub_vectors")
    if kind.endswith("PQ"):
        nsub = nsub or next(s for s in (dim // 8, dim // 4, dim // 2, 1) if s >= 1 and dim % s == 0)
        if dim % nsub:
            raise InvalidInput(f"num_sub_vectors={nsub} must divide the dimension {dim} of column {column!r}")
    full = dict(params, **({"num_sub_vectors": nsub} if nsub else {}))
    return IndexSpec(name or f"{column}_idx", _field_id(ns, column), kind, how, tuple(sorted(full.items())))


def define_scalar_index(ns: PartitionedNamespace, column: str, index_type: str, name: str | None) -> IndexSpec:
    _column(ns, column)
    kind = str(index_type).upper()
    if kind not in SCALAR_INDEX_TYPES:
        raise InvalidInput(f"unknown scalar index_type {index_type!r}; allowed: {', '.join(SCALAR_INDEX_TYPES)}")
    return IndexSpec(name or f"{column}_idx", _field_id(ns, column), kind)


def column_name(ns: PartitionedNamespace, spec: IndexSpec) -> str:
    for f in ns.namespace_schema.arrow:
        if field_id_of(f) == spec.column_id:
            return str(f.name)
    raise InvalidInput(f"index {spec.name!r}: its column (field id {spec.column_id}) was dropped from the namespace")


def _covered(ds: lance.LanceDataset, name: str) -> set[int] | None:
    """Fragment ids the segments of index ``name`` cover, or None if ``ds`` has no such index."""
    for d in ds.describe_indices():
        if d.name == name:
            return {int(f) for seg in d.segments for f in seg.fragment_ids}
    return None


def _fragments_to_index(ds: lance.LanceDataset, spec: IndexSpec, incremental: bool) -> tuple[tuple[int, ...], bool]:
    """(fragment ids, full build?) for one dataset."""
    ids = tuple(f.fragment_id for f in ds.get_fragments())
    covered = _covered(ds, spec.name) if incremental and spec.is_vector else None
    if covered is None:
        return ids, True
    return tuple(i for i in ids if i not in covered), False


def plan_index_tasks(
    ns: PartitionedNamespace, spec: IndexSpec, scan: Sequence[ScanTask], *, incremental: bool, replace: bool = True
) -> list[IndexTask]:
    """One task per selected table that has rows (and, ``incremental``, unindexed fragments)."""
    column = column_name(ns, spec)
    opts = tuple(sorted((ns.storage_options or {}).items()))
    out = []
    for t in scan:
        if t.read_version is None or t.read_branch is not None or t.read_tag is not None:
            continue
        ds = open_partition_table(t.uri, t.read_version, None, None, ns.storage_options)
        mapping = dataset_columns(ds.schema, ns.namespace_schema)
        if column not in mapping:
            continue
        if not replace and _covered(ds, spec.name) is not None:
            raise InvalidInput(f"partition table {t.object_id} already has an index {spec.name!r}; pass replace=True")
        ids, full = _fragments_to_index(ds, spec, incremental)
        rows = sum(f.metadata.physical_rows or 0 for f in ds.get_fragments() if f.fragment_id in set(ids))
        if ids and rows:
            out.append(
                IndexTask(
                    ns.root, t.object_id, t.uri, t.read_version, mapping[column], spec.to_json(), ids, rows, full, opts
                )
            )
    return out


def sample_vectors(task: IndexTask, fraction: float, seed: int) -> pa.Array:
    """Executor side: about ``fraction`` of the table's non-NULL vectors, at random."""
    ds = open_partition_table(task.uri, task.read_version, None, None, dict(task.storage_options) or None)
    n = ds.count_rows()
    want = min(n, max(1, math.ceil(n * fraction)))
    picks = sorted(random.Random(f"{seed}:{task.object_id}").sample(range(n), want))
    with translate_lance_errors(f"sample {task.object_id}"):
        col = ds.take(picks, columns=[task.column]).column(task.column).combine_chunks()
    return col.filter(col.is_valid())


def build_segment(task: IndexTask) -> IndexBuild:
    """Executor side: build (not commit) one index segment with the recorded model."""
    spec = IndexSpec.from_json(task.spec)
    opts = dict(task.storage_options) or None
    model: VectorModel | None = load_model(task.root, spec.model, opts) if spec.model else None
    ds = open_partition_table(task.uri, task.read_version, None, None, opts)
    kwargs = model_kwargs(spec, model) if spec.is_vector else {}
    with translate_lance_errors(f"build index {spec.name!r} of {task.object_id}"):
        index = ds.create_index_uncommitted(
            task.column, spec.index_type, name=spec.name, replace=True, fragment_ids=list(task.fragment_ids), **kwargs
        )
        if spec.index_type == "INVERTED":
            index = ds.merge_existing_index_segments([index])
    return IndexBuild(task, index)


def _segments(ds: lance.LanceDataset, name: str) -> list[Index]:
    return [
        Index(
            seg.uuid,
            d.name,
            list(d.fields),
            seg.dataset_version_at_last_update,
            cast(Any, set(seg.fragment_ids)),  # pylance accepts a set for the bitmap
            seg.index_version,
        )
        for d in ds.describe_indices()
        if d.name == name
        for seg in d.segments
    ]


def _unchanged(head: lance.LanceDataset, build: IndexBuild) -> bool:
    """Whether every fragment the segment covers is in ``head`` exactly as the task read it."""
    then = head.checkout_version(build.task.read_version)
    state = {f.fragment_id: f.metadata.to_json() for f in then.get_fragments()}
    now = {f.fragment_id: f.metadata.to_json() for f in head.get_fragments()}
    return all(fid in now and now[fid] == state.get(fid) for fid in build.task.fragment_ids)


def _commit_one(
    uri: str, head: lance.LanceDataset, build: IndexBuild, opts: Mapping[str, str] | None
) -> lance.LanceDataset:
    spec = IndexSpec.from_json(build.task.spec)
    existing = _segments(head, spec.name)
    if any(seg.uuid == build.index.uuid for seg in existing):
        return head
    live = {f.fragment_id for f in head.get_fragments()}
    removed = existing if build.task.full else [s for s in existing if not set(s.fragment_ids) & live]
    with translate_lance_errors(f"commit index {spec.name!r} to {uri}"):
        return lance.LanceDataset.commit(
            uri,
            LanceOperation.CreateIndex([build.index], removed),
            read_version=head.version,
            storage_options=dict(opts) if opts else None,
            commit_message=COMMIT_MESSAGE,
        )


def commit_indexes(
    ns: PartitionedNamespace, builds: Iterable[IndexBuild], names: Sequence[str] = (), *, guard: Guard | None = None
) -> IndexReport:
    """Driver side: commit each dataset's new segments, then ONE ``__manifest`` commit
    (``INDEX`` in the history, ``duration_ms`` from this call to the commit), on the
    protected path of ``guard`` (:mod:`partitioning.storage.guard`)."""
    started = time.monotonic()
    by_table: dict[str, list[IndexBuild]] = {}
    for b in builds:
        by_table.setdefault(b.task.object_id, []).append(b)
    rebuilt: set[str] = set()
    for _ in range(COMMIT_ATTEMPTS):
        ns.refresh(guard=guard)
        current = {t.object_id: t for t in ns.partitions()}
        commits = []
        for object_id, parts in sorted(by_table.items()):
            table = current.get(object_id)
            if table is None or table.read_version is None:
                continue
            head = latest_keeping_indexes(table.uri, table.read_version, ns.storage_options)
            for build in parts:
                if not _unchanged(head, build):
                    build = _rebuild(ns, head, build)
                    rebuilt.add(object_id)
                head = _commit_one(table.uri, head, build, ns.storage_options)
            kept = StatsChange(TableStats(0), table.read_version)  # an index leaves the rows as they were
            commits.append(TableCommit(table.spec_id, table.values, table.location, int(head.version), object_id, kept))
        if not commits:
            return IndexReport("index", ns.root, ns.manifest_version, tuple(names))
        built = Operation("INDEX", {"indexes": ",".join(names)}, {"partitions_touched": len(commits)})
        try:
            version = ns.commit_once(
                commits, operation=built.with_metrics(partitions_rebuilt=len(rebuilt)).timed(started), guard=guard
            )
        except ConcurrentModification:
            continue
        return IndexReport("index", ns.root, version, tuple(names), len(commits), tuple(sorted(rebuilt)))
    raise ConcurrentModification(f"index build on {ns.root} lost {COMMIT_ATTEMPTS} __manifest races; nothing changed")


def _rebuild(ns: PartitionedNamespace, head: lance.LanceDataset, build: IndexBuild) -> IndexBuild:
    """The segment built again, in this process, on ``head`` (its fragments changed since the task)."""
    spec = IndexSpec.from_json(build.task.spec)
    ids, full = _fragments_to_index(head, spec, not build.task.full)
    task = replace(build.task, read_version=int(head.version), fragment_ids=ids, full=full)
    return build_segment(task)
