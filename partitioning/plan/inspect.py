"""Metadata tables of a partitioned namespace, Spark-free: partitions and files (pyiceberg ``inspect`` style).

:func:`partitions_table` has one row per partition table and :func:`files_table` one
per fragment, both as Arrow tables. Every number comes from Lance metadata, never from
scanning data:

- ``partitions_table`` opens each selected table at the version its ``__manifest`` row
  records and reads the summary Lance computes from that version's manifest
  (``LanceDataset.get_version()["metadata"]``: live rows, rows in deletion files,
  fragments, bytes of data files) and its commit time; index names come from
  ``describe_indices()``, which reads only the manifest's index section.
- ``files_table`` walks the fragments of the same versions (``physical_rows``, the
  deletion file's ``num_deleted_rows``, each data file's ``file_size_bytes``).

A data file whose size the manifest does not record (files written by old Lance
versions) is measured with one stat. Tables are opened in parallel threads sharing one
``lance.Session`` (pylance releases the GIL while it reads a manifest). Opening is
almost all of the time: about 120 µs of CPU per table on local disk, plus about 40 µs
of Python per table for the version summary, the index names and the row; loading and
pruning ``__manifest`` is about 6 µs per table. 10,000 tables take about 1.7 s on a
busy 2-core machine (``benchmarks/test_bench_inspect.py``).

``last_updated`` is the commit time of the recorded version (Lance's manifest
timestamp). pylance returns it as a naive *local* time, so it is converted from the
local zone to UTC here.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import lance
import pyarrow as pa
import pyarrow.compute as pc

from partitioning.errors import PartitioningError, first_line, translate_lance_errors
from partitioning.namespace import PartitionedNamespace
from partitioning.sql.filters import Dialect
from partitioning.sql.from_sql import parse_filter
from partitioning.state.partition_tables import open_partition_table
from partitioning.state.scan import ScanTask
from partitioning.storage.datasets import live_rows
from partitioning.storage.manifest import ManifestStore, partition_column
from partitioning.storage.paths import join_uri
from partitioning.storage.roots import filesystem_of

__all__ = ["PARALLEL_OPENS", "files_schema", "files_table", "partition_type", "partitions_schema", "partitions_table"]

PARALLEL_OPENS = 8
_SUMMARY_KEYS = frozenset(
    {"total_rows", "total_deletion_file_rows", "total_fragments", "total_files_size", "total_data_files"}
)
_T = TypeVar("_T")
_R = TypeVar("_R")


@dataclass(frozen=True)
class _TableStats:
    rows: int
    deleted: int
    fragments: int
    size: int
    updated: dt.datetime
    indexes: tuple[str, ...]


@dataclass(frozen=True)
class _Fragment:
    fragment_id: int
    paths: tuple[str, ...]
    physical_rows: int
    deleted: int
    size: int


def partition_type(ns: PartitionedNamespace) -> pa.StructType:
    """One child per partition field of every spec version (first seen order), typed like its
    ``__manifest`` column; a row's fields of other spec versions are NULL."""
    seen: dict[str, pa.Field] = {}
    for _, spec in sorted(ns.specs.items()):
        for f in spec.fields:
            if f.field_id not in seen:
                seen[f.field_id] = pa.field(f.field_id, f.arrow_result_type(ns.namespace_schema))
    return pa.struct(list(seen.values()))


def partitions_schema(partition: pa.StructType) -> pa.Schema:
    return pa.schema(
        [
            pa.field("spec_id", pa.int32(), nullable=False),
            pa.field("partition", partition, nullable=False),
            pa.field("object_id", pa.string(), nullable=False),
            pa.field("location", pa.string(), nullable=False),
            pa.field("read_version", pa.int64()),
            pa.field("row_count", pa.int64(), nullable=False),
            pa.field("deleted_rows", pa.int64(), nullable=False),
            pa.field("fragment_count", pa.int64(), nullable=False),
            pa.field("size_bytes", pa.int64(), nullable=False),
            pa.field("last_updated", pa.timestamp("us", tz="UTC"), nullable=False),
            pa.field("indexes", pa.list_(pa.string()), nullable=False),
        ]
    )


def files_schema(partition: pa.StructType) -> pa.Schema:
    return pa.schema(
        [
            pa.field("object_id", pa.string(), nullable=False),
            pa.field("spec_id", pa.int32(), nullable=False),
            pa.field("partition", partition, nullable=False),
            pa.field("read_version", pa.int64()),
            pa.field("fragment_id", pa.int64(), nullable=False),
            pa.field("path", pa.string()),
            pa.field("data_files", pa.list_(pa.string()), nullable=False),
            pa.field("physical_rows", pa.int64(), nullable=False),
            pa.field("deleted_rows", pa.int64(), nullable=False),
            pa.field("row_count", pa.int64(), nullable=False),
            pa.field("size_bytes", pa.int64(), nullable=False),
        ]
    )


def partitions_table(
    ns_or_root: PartitionedNamespace | str,
    *,
    filter: str | None = None,
    manifest_version: int | None = None,
    storage_options: Mapping[str, str] | None = None,
    dialect: Dialect | None = None,
    time_zone: str = "UTC",
) -> pa.Table:
    """One row per partition table the filter may select (all without one), ordered by object id.

    Columns: ``spec_id``, ``partition`` (struct named after the partition fields),
    ``object_id``, ``location``, ``read_version``, ``row_count`` (live rows),
    ``deleted_rows``, ``fragment_count``, ``size_bytes`` (data files), ``last_updated``
    (commit time of ``read_version``) and ``indexes`` (names). ``filter`` is SQL pruned
    like a read (SPEC-NOTES 14), DataFusion SQL by default or ``dialect``'s; a text the
    parser cannot read, or an unknown column, is one :class:`InvalidInput` line.
    """
    ns, tasks = _plan(ns_or_root, filter, manifest_version, storage_options, dialect, time_zone)
    ptype = partition_type(ns)
    schema = partitions_schema(ptype)
    session = lance.Session()
    stats = _parallel(lambda t: _table_stats(t, ns.storage_options, session), tasks)
    partitions = _partitions(ns, tasks, ptype)
    return pa.Table.from_arrays(
        [
            pa.array([t.spec_id for t in tasks], pa.int32()),
            partitions,
            pa.array([t.object_id for t in tasks], pa.string()),
            pa.array([t.location for t in tasks], pa.string()),
            pa.array([t.read_version for t in tasks], pa.int64()),
            pa.array([s.rows for s in stats], pa.int64()),
            pa.array([s.deleted for s in stats], pa.int64()),
            pa.array([s.fragments for s in stats], pa.int64()),
            pa.array([s.size for s in stats], pa.int64()),
            pa.array([s.updated for s in stats], pa.timestamp("us", tz="UTC")),
            pa.array([list(s.indexes) for s in stats], pa.list_(pa.string())),
        ],
        schema=schema,
    )


def files_table(
    ns_or_root: PartitionedNamespace | str,
    *,
    filter: str | None = None,
    manifest_version: int | None = None,
    storage_options: Mapping[str, str] | None = None,
    dialect: Dialect | None = None,
    time_zone: str = "UTC",
) -> pa.Table:
    """One row per fragment of each partition table the filter may select, at its ``read_version``.

    ``path`` is the fragment's first data file (its full URI) and ``data_files`` all of
    them (a fragment has several after columns were added with data); ``row_count`` is
    ``physical_rows - deleted_rows`` and ``size_bytes`` the bytes of its data files, so
    per table they sum to :func:`partitions_table`'s numbers. Arguments as there.
    """
    ns, tasks = _plan(ns_or_root, filter, manifest_version, storage_options, dialect, time_zone)
    ptype = partition_type(ns)
    session = lance.Session()
    per_table = _parallel(lambda t: _fragments(t, ns.storage_options, session), tasks)
    owner = [i for i, frags in enumerate(per_table) for _ in frags]
    frags = [f for fs in per_table for f in fs]
    partitions = _partitions(ns, tasks, ptype).take(pa.array(owner, pa.int64()))
    return pa.Table.from_arrays(
        [
            pa.array([tasks[i].object_id for i in owner], pa.string()),
            pa.array([tasks[i].spec_id for i in owner], pa.int32()),
            partitions,
            pa.array([tasks[i].read_version for i in owner], pa.int64()),
            pa.array([f.fragment_id for f in frags], pa.int64()),
            pa.array([f.paths[0] if f.paths else None for f in frags], pa.string()),
            pa.array([list(f.paths) for f in frags], pa.list_(pa.string())),
            pa.array([f.physical_rows for f in frags], pa.int64()),
            pa.array([f.deleted for f in frags], pa.int64()),
            pa.array([f.physical_rows - f.deleted for f in frags], pa.int64()),
            pa.array([f.size for f in frags], pa.int64()),
        ],
        schema=files_schema(ptype),
    )


# -- planning -------------------------------------------------------------------------------------
def _plan(
    ns_or_root: PartitionedNamespace | str,
    filter: str | None,
    manifest_version: int | None,
    storage_options: Mapping[str, str] | None,
    dialect: Dialect | None,
    time_zone: str,
) -> tuple[PartitionedNamespace, list[ScanTask]]:
    if isinstance(ns_or_root, PartitionedNamespace):
        ns = ns_or_root
        if manifest_version is not None and manifest_version != ns.manifest_version:
            ns = PartitionedNamespace.load(ns.root, ns.storage_options, manifest_version=manifest_version)
    else:
        ns = PartitionedNamespace.load(ns_or_root, storage_options, manifest_version=manifest_version)
    d = dialect or Dialect.datafusion(time_zone)
    return ns, list(ns.plan_scan(parse_filter(filter, d, strict=True), dialect=d))


def _partitions(ns: PartitionedNamespace, tasks: Sequence[ScanTask], ptype: pa.StructType) -> pa.StructArray:
    """The ``partition`` struct of each task, from its ``__manifest`` row (no per-value Python)."""
    if not tasks:
        return pa.array([], ptype)
    columns = [partition_column(f.name) for f in ptype]
    ds = ManifestStore(ns.root, ns.storage_options).dataset(ns.manifest_version)
    rows = ManifestStore.rows_of(ds, ["object_id", *columns], "object_type = 'table'")
    position = {oid: i for i, oid in enumerate(rows.column("object_id").to_pylist())}
    rows = rows.take(pa.array([position[t.object_id] for t in tasks], pa.int64()))
    spec_ids = pa.array([t.spec_id for t in tasks], pa.int32())
    children = []
    for f, column in zip(ptype, columns, strict=True):
        owners = pa.array([s for s, spec in ns.specs.items() if f.name in spec.field_ids], pa.int32())
        values = rows.column(column).combine_chunks().cast(f.type)
        children.append(pc.if_else(pc.is_in(spec_ids, owners), values, pa.nulls(len(tasks), f.type)))
    return pa.StructArray.from_arrays(children, fields=list(ptype))


def _parallel(fn: Callable[[_T], _R], items: Sequence[_T]) -> list[_R]:
    """``fn`` over ``items`` in :data:`PARALLEL_OPENS` threads, in order. Each thread takes runs
    of items (a future per item costs about as much CPU as reading a small manifest)."""
    if len(items) <= 1:
        return [fn(i) for i in items]
    workers = min(PARALLEL_OPENS, len(items))
    size = -(-len(items) // (workers * 4))
    runs = [items[i : i + size] for i in range(0, len(items), size)]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return [r for run in pool.map(lambda run: [fn(i) for i in run], runs) for r in run]


# -- per table ------------------------------------------------------------------------------------
def _open(task: ScanTask, storage_options: Mapping[str, str] | None, session: lance.Session) -> lance.LanceDataset:
    """``task``'s table at its recorded version; any failure is reported by
    :func:`partitioning.state.partition_tables.open_partition_table` (one line naming the table and version)."""
    opts = dict(storage_options) if storage_options else None
    if task.read_branch is None and task.read_tag is None:
        try:
            return lance.LanceDataset(task.uri, version=task.read_version, storage_options=opts, session=session)
        except (OSError, RuntimeError, ValueError):
            pass
    return open_partition_table(task.uri, task.read_version, task.read_branch, task.read_tag, storage_options)


def _table_stats(task: ScanTask, storage_options: Mapping[str, str] | None, session: lance.Session) -> _TableStats:
    ds = _open(task, storage_options, session)
    try:  # no context manager per table: at 10,000 tables its cost shows
        version = ds.get_version()
        summary = version["metadata"]
        indexes = tuple(sorted(d.name for d in ds.describe_indices()))
        if _SUMMARY_KEYS <= summary.keys():
            rows, deleted = int(summary["total_rows"]), int(summary["total_deletion_file_rows"])
            fragments, size = int(summary["total_fragments"]), int(summary["total_files_size"])
            if size == 0 and int(summary["total_data_files"]) > 0:  # sizes not recorded: measure them
                size = sum(f.size for f in _fragments_of(ds, task.uri, storage_options))
        else:
            frags = _fragments_of(ds, task.uri, storage_options)
            deleted = sum(f.deleted for f in frags)
            rows, fragments = sum(f.physical_rows for f in frags) - deleted, len(frags)
            size = sum(f.size for f in frags)
    except (OSError, RuntimeError, ValueError) as exc:
        raise _translated(f"read the metadata of partition table {task.object_id}", exc) from exc
    return _TableStats(rows, deleted, fragments, size, _commit_time(version["timestamp"]), indexes)


def _translated(action: str, exc: Exception) -> PartitioningError:
    try:
        with translate_lance_errors(action):
            raise exc
    except PartitioningError as translated:
        return translated
    return PartitioningError(f"{action}: {first_line(exc)}")


def _commit_time(t: Any) -> dt.datetime:
    """pylance reports a version's time as a naive local time (``datetime.fromtimestamp``)."""
    if not isinstance(t, dt.datetime):
        raise PartitioningError(f"Lance reported version time {t!r}, which is not a datetime")
    return t.astimezone(dt.UTC)


def _fragments(task: ScanTask, storage_options: Mapping[str, str] | None, session: lance.Session) -> list[_Fragment]:
    ds = _open(task, storage_options, session)
    with translate_lance_errors(f"read the fragments of partition table {task.object_id}"):
        return _fragments_of(ds, task.uri, storage_options)


def _fragments_of(ds: lance.LanceDataset, uri: str, storage_options: Mapping[str, str] | None) -> list[_Fragment]:
    out = []
    unknown: list[str] = []
    sizes: dict[str, int] = {}
    fragments = ds.get_fragments()
    metas = [f.metadata for f in fragments]
    for meta in metas:
        for data_file in meta.files:
            path = join_uri(uri, f"data/{data_file.path}")
            if data_file.file_size_bytes:
                sizes[path] = int(data_file.file_size_bytes)
            else:
                unknown.append(path)
    sizes.update(_stat(unknown, storage_options))
    for fragment, meta in zip(fragments, metas, strict=True):
        paths = tuple(join_uri(uri, f"data/{d.path}") for d in meta.files)
        deleted = meta.physical_rows - live_rows(fragment, meta)
        out.append(_Fragment(meta.id, paths, meta.physical_rows, deleted, sum(sizes[p] for p in paths)))
    return out


def _stat(paths: Iterable[str], storage_options: Mapping[str, str] | None) -> dict[str, int]:
    """Sizes of data files whose size the manifest does not record (one stat each)."""
    paths = list(paths)
    if not paths:
        return {}
    fs, _ = filesystem_of(paths[0], storage_options)
    located = [filesystem_of(p, storage_options)[1] for p in paths]
    with translate_lance_errors(f"stat {len(paths)} data files"):
        infos = fs.get_file_info(located)
    return {p: int(i.size or 0) for p, i in zip(paths, infos, strict=True)}
