"""Maintenance, Spark-free: compaction, vacuum, partition drop, row delete, manifest compaction.

Each operation that changes what readers see ends in ONE ``__manifest`` commit, so every
``read_version`` it moves moves atomically, and readers of an older manifest version
keep seeing the old data (old dataset versions stay until :func:`vacuum`).

Compaction is split so Spark can run the rewrites on executors:
:func:`plan_compaction` (driver) -> :func:`rewrite` (one task each, anywhere) ->
:func:`commit_compaction` (driver). :func:`compact_local` runs all three in-process
(:func:`rewrite_all`: the bins on threads).

An operation given a root string also takes ``storage_options`` (Lance's, e.g.
``aws_endpoint``); given a loaded :class:`PartitionedNamespace` it uses the namespace's
own. Compaction tasks carry them (:class:`CompactionTask`), so executors reach the store.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import lance
import pyarrow as pa

from partitioning.errors import (
    ConcurrentModification,
    CorruptNamespace,
    InvalidInput,
    PartitioningError,
    first_line,
    translate_lance_errors,
)
from partitioning.namespace import PartitionedNamespace, PartitionTable, TableCommit, open_partition_table
from partitioning.progress import progress
from partitioning.sql.engine import matching_rows
from partitioning.sql.filters import Dialect, Filter, TrueFilter, parse_filter, referenced_columns
from partitioning.sql.timezones import as_utc
from partitioning.state.scan import ScanTask
from partitioning.state.upkeep import compact_manifest
from partitioning.storage.datasets import (
    commit_rewrites,
    compact_fragments,
    dataset_columns,
    latest_keeping_indexes,
    reconcile,
    restore_as_latest,
)
from partitioning.storage.guard import Guard, guarded
from partitioning.storage.history import Operation
from partitioning.storage.leases import ended_marks, list_leases, protected_bases, protected_since, vacuum_lease
from partitioning.storage.manifest import MANIFEST_DIR, contained, filesystem_of, join_uri, location_problem
from partitioning.storage.orphans import (
    delete_files,
    find_orphans,
    made_here,
    merged,
    recorded_read_versions,
    referenced_data_files,
    remove_empty_dirs,
    table_files,
)
from partitioning.tables.rewrites import PARALLEL_COMMITS, delete_and_append

__all__ = [
    "CompactionResult",
    "CompactionTask",
    "MaintenanceReport",
    "commit_compaction",
    "compact_local",
    "delete_rows",
    "drop_partitions",
    "optimize_manifest",
    "plan_compaction",
    "rewrite",
    "rewrite_all",
    "vacuum",
]

DEFAULT_TARGET_ROWS = 1_048_576
MIN_RETENTION = dt.timedelta(hours=24)
DEFAULT_RETENTION = dt.timedelta(days=7)
COMMIT_ATTEMPTS = 8


@dataclass(frozen=True)
class MaintenanceReport:
    """What a maintenance operation did (or, with ``dry_run``, would do)."""

    operation: str
    root: str
    manifest_version: int | None
    tables: int = 0
    rows: int = 0
    fragments_before: int = 0
    fragments_after: int = 0
    deleted: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()
    dry_run: bool = False
    foreign_versions: tuple[str, ...] = ()  # vacuum: unreferenced dataset versions other Lance clients made, kept

    def summary(self) -> str:
        head = f"{self.operation} {self.root}"
        if self.operation == "compact":
            body = (
                f"{self.tables} tables, {self.fragments_before} fragments -> {self.fragments_after}, "
                f"{self.rows:,} rows rewritten"
            )
        elif self.operation == "vacuum":
            body = f"{'would delete' if self.dry_run else 'deleted'} {len(self.deleted)} items"
        elif self.operation == "drop_partitions":
            body = f"dropped {self.tables} partition tables ({self.rows:,} rows)"
        elif self.operation == "delete_rows":
            body = f"deleted {self.rows:,} rows from {self.tables} partition tables"
        else:
            body = f"{self.fragments_before} fragments -> {self.fragments_after}"
        tail = f", __manifest v{self.manifest_version}" if self.manifest_version is not None else ""
        why = "in use or not written by Lance" if self.operation == "vacuum" else "changed concurrently"
        skipped = f" ({len(self.skipped)} {why}, left as they were)" if self.skipped else ""
        foreign = (
            f"; kept {len(self.foreign_versions)} sets of dataset versions other Lance clients committed"
            if self.foreign_versions
            else ""
        )
        return f"{head}: {body}{tail}{skipped}{foreign}"


# -- compaction -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class CompactionTask:
    """Rewrite some fragments of one table (as of its ``read_version``) into fewer."""

    object_id: str
    uri: str
    read_version: int
    fragment_ids: tuple[int, ...]
    target_rows: int
    storage_options: tuple[tuple[str, str], ...] = ()
    rows: int = 0  # live rows of the bin, as planned
    size_bytes: int = 0  # bytes of the bin's data files, as planned (0 where Lance does not record a size)


@dataclass(frozen=True)
class CompactionResult:
    task: CompactionTask
    rewrite: str  # Lance's RewriteResult as JSON: old and new fragments, old row addresses
    fragments: int
    rows: int


def plan_compaction(
    ns: PartitionedNamespace,
    filter: str | Filter | None = None,
    *,
    target_rows_per_fragment: int = DEFAULT_TARGET_ROWS,
    time_zone: str = "UTC",
    dialect: Dialect | None = None,
) -> list[CompactionTask]:
    """Bins of small fragments (or fragments with deleted rows) to rewrite, per selected table.

    ``filter`` only selects partition tables (compaction never changes rows), read as
    DataFusion SQL with zone-less timestamps in ``time_zone``, or in ``dialect``.
    A bin holds consecutive small fragments up to ``target_rows_per_fragment`` rows, all
    covered by the same index segments (as Lance's own planner does: a new fragment is
    wholly indexed or not, so indexed rows are never mixed with unindexed ones); a bin of
    one fragment is rewritten only if it has deletions to drop.
    """
    if target_rows_per_fragment < 1:
        raise InvalidInput(f"target_rows_per_fragment must be at least 1, got {target_rows_per_fragment}")
    opts = tuple(sorted((ns.storage_options or {}).items()))
    tasks = []
    for task in ns.plan_scan(filter, time_zone=time_zone, dialect=dialect):
        if task.read_branch is not None or task.read_tag is not None or task.read_version is None:
            continue
        ds = _open(task.uri, task.read_version, ns.storage_options)
        coverage = _index_coverage(ds, task.object_id)
        bins: list[_Bin] = [_Bin()]
        for fragment in ds.get_fragments():
            meta = fragment.metadata
            deleted = meta.deletion_file is not None
            rows = fragment.count_rows() if deleted else meta.physical_rows
            if rows >= target_rows_per_fragment and not deleted:
                bins.append(_Bin())
                continue
            last = bins[-1]
            full = last.rows + rows > target_rows_per_fragment
            if full or (last.ids and coverage.get(last.ids[0]) != coverage.get(fragment.fragment_id)):
                bins.append(last := _Bin())
            last.add(fragment.fragment_id, rows, deleted, sum(f.file_size_bytes or 0 for f in meta.files))
        for b in bins:
            if len(b.ids) > 1 or (len(b.ids) == 1 and b.deleted):
                tasks.append(
                    CompactionTask(
                        task.object_id,
                        task.uri,
                        task.read_version,
                        tuple(b.ids),
                        target_rows_per_fragment,
                        opts,
                        b.rows,
                        b.size_bytes,
                    )
                )
    return tasks


class _Bin:
    """Consecutive fragments planned into one rewrite, with running totals."""

    def __init__(self) -> None:
        self.ids: list[int] = []
        self.rows = 0
        self.size_bytes = 0
        self.deleted = False

    def add(self, fragment_id: int, rows: int, deleted: bool, size_bytes: int) -> None:
        self.ids.append(fragment_id)
        self.rows += rows
        self.size_bytes += size_bytes
        self.deleted = self.deleted or deleted


def _index_coverage(ds: lance.LanceDataset, object_id: str) -> dict[int, frozenset[str]]:
    """Fragment id -> the index segments (uuids) covering it; fragments no index covers are absent."""
    out: dict[int, set[str]] = {}
    with translate_lance_errors(f"list the indexes of partition table {object_id}"):
        for index in ds.describe_indices():
            for segment in index.segments:
                for fid in segment.fragment_ids:
                    out.setdefault(int(fid), set()).add(str(segment.uuid))
    return {fid: frozenset(uuids) for fid, uuids in out.items()}


def rewrite(task: CompactionTask) -> CompactionResult:
    """Executor side: rewrite the bin's live rows as new uncommitted fragments (a Lance
    compaction task, :func:`partitioning.storage.datasets.compact_fragments`)."""
    ds = _open(task.uri, task.read_version, dict(task.storage_options) or None)
    with translate_lance_errors(f"compact {task.object_id}"):
        text, rows = compact_fragments(ds, task.fragment_ids, task.target_rows)
    return CompactionResult(task, text, len(json.loads(text)["new_fragments"]), rows)


def rewrite_all(tasks: Sequence[CompactionTask], *, threads: int | None = None) -> list[CompactionResult]:
    """:func:`rewrite` of every task, ``threads`` bins at a time (default: one per core; Lance
    releases the GIL while it rewrites); results in the order of ``tasks``."""
    work = list(tasks)
    workers = max(1, min(len(work), threads if threads is not None else os.cpu_count() or 1))
    label = f"compact {work[0].uri.rstrip('/').rsplit('/', 1)[0]}" if work else "compact"
    if workers == 1:
        return list(progress(label, (rewrite(t) for t in work), len(work), unit="bins"))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(progress(label, pool.map(rewrite, work), len(work), unit="bins"))


def commit_compaction(
    ns: PartitionedNamespace, results: Iterable[CompactionResult], *, guard: Guard | None = None
) -> MaintenanceReport:
    """Driver side: one dataset version per table, then ONE ``__manifest`` commit, on the
    protected path of ``guard`` (:mod:`partitioning.storage.guard`; the caller's lease from before planning).

    A table whose ``read_version`` moved since planning (a concurrent write) is left as
    it was and reported as skipped; nothing of its data is lost. Each committed version
    keeps the table's indexes covering the rows they covered, remapped to the rewritten
    fragments (:func:`partitioning.storage.datasets.commit_rewrites`).
    """
    started = time.monotonic()
    by_table: dict[str, list[CompactionResult]] = {}
    for r in results:
        by_table.setdefault(r.task.object_id, []).append(r)
    skipped: list[str] = []
    for _ in range(COMMIT_ATTEMPTS):
        ns.refresh(guard=guard)
        current = ns.tables_by_id(by_table)
        commits, before, after, rows = [], 0, 0, 0
        for object_id, parts in sorted(by_table.items()):
            table = current.get(object_id)
            planned = parts[0].task.read_version
            if table is None or table.read_version != planned:
                skipped.append(object_id)
                continue
            head = latest_keeping_indexes(table.uri, planned, ns.storage_options)
            removed = sum(len(p.task.fragment_ids) for p in parts)
            fragments = len(head.get_fragments())
            before += fragments
            after += fragments - removed + sum(p.fragments for p in parts)
            rows += sum(p.rows for p in parts)
            version = commit_rewrites(table.uri, head, [p.rewrite for p in parts], ns.storage_options)
            commits.append(TableCommit(table.spec_id, table.values, table.location, version, table.object_id))
        by_table = {k: v for k, v in by_table.items() if k not in skipped}
        if not commits:
            return MaintenanceReport("compact", ns.root, ns.manifest_version, skipped=tuple(skipped))
        metrics = {"partitions_touched": len(commits), "rows_rewritten": rows}
        metrics.update(files_before=before, files_after=after, partitions_skipped=len(skipped))
        try:
            version = ns.commit_once(commits, operation=Operation("COMPACT", {}, metrics).timed(started), guard=guard)
        except ConcurrentModification:
            continue
        return MaintenanceReport("compact", ns.root, version, len(commits), rows, before, after, skipped=tuple(skipped))
    raise ConcurrentModification(f"compaction of {ns.root} lost {COMMIT_ATTEMPTS} __manifest races; nothing changed")


def compact_local(
    ns: PartitionedNamespace,
    filter: str | Filter | None = None,
    *,
    target_rows_per_fragment: int = DEFAULT_TARGET_ROWS,
    time_zone: str = "UTC",
) -> MaintenanceReport:
    """:func:`plan_compaction`, :func:`rewrite_all` (one thread per core) and
    :func:`commit_compaction` in this process, on the protected path (:mod:`partitioning.storage.guard`):
    the lease is taken before the plan reads the tables, so vacuum keeps them and the new fragments."""
    with guarded(ns.root, ns.storage_options) as guard:
        ns.refresh(guard=guard)
        tasks = plan_compaction(ns, filter, target_rows_per_fragment=target_rows_per_fragment, time_zone=time_zone)
        if not tasks:
            return MaintenanceReport("compact", ns.root, ns.manifest_version)
        return commit_compaction(ns, rewrite_all(tasks), guard=guard)


# -- drop partitions and delete rows -------------------------------------------------------------
RowMatcher = Callable[[pa.Table, str], list[int]]
"""Indexes of the rows of an Arrow table a SQL filter selects (DataFusion, or Spark's where)."""


def _identity_columns(ns: PartitionedNamespace, spec_id: int) -> dict[str, str]:
    """Column name -> identity partition field id, for one spec version."""
    schema = ns.namespace_schema
    out = {}
    for f in ns.specs[spec_id].fields:
        if f.transform is not None and str(f.transform) == "identity" and len(f.source_ids) == 1:
            source = schema.top_level_field_by_id(f.source_ids[0])
            if source is not None:
                out[source.name] = f.field_id
    return out


def _datafusion(table: pa.Table, filter_sql: str) -> list[int]:
    return matching_rows(table, filter_sql)


def drop_partitions(
    root: str | PartitionedNamespace,
    filter: str,
    *,
    matcher: RowMatcher | None = None,
    dialect: Dialect | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> MaintenanceReport:
    """Remove whole partition tables whose identity partition values satisfy ``filter``.

    The filter may use only identity partition columns, so a table is dropped only when
    every row in it matches. It is applied to each table's partition values by
    ``matcher`` (Spark's where, from :mod:`pipelines.maintenance.operations`) or, without one, by
    DataFusion. ONE ``__manifest`` commit removes the tables and any namespace left
    empty; their files remain for time travel until :func:`vacuum`.
    """
    started = time.monotonic()
    ns = _namespace(root, storage_options)
    d = dialect or Dialect.datafusion()
    parsed = parse_filter(filter, d, strict=False)
    if isinstance(parsed, TrueFilter):
        raise InvalidInput("drop_partitions needs a filter on identity partition columns, e.g. \"country = 'US'\"")
    match = matcher or _datafusion
    with guarded(ns.root, ns.storage_options) as guard:
        return _drop(ns, filter, d, match, guard, started)


def _drop(
    ns: PartitionedNamespace, filter: str, d: Dialect, match: RowMatcher, guard: Guard, started: float
) -> MaintenanceReport:
    for _ in range(COMMIT_ATTEMPTS):
        ns.refresh(guard=guard)
        planned = [t.object_id for t in ns.plan_scan(filter, dialect=d)]
        tables = ns.tables_by_id(planned)
        candidates = [tables[oid] for oid in planned]
        doomed: list[str] = []
        for spec_id in sorted({t.spec_id for t in candidates}):
            columns = _identity_columns(ns, spec_id)
            names = ns.schema.names
            outside = sorted(set(referenced_columns(filter, names, d.case_sensitive, d)) - set(columns))
            if outside:
                raise InvalidInput(
                    f"drop_partitions: column {outside[0]!r} is not an identity partition column of spec "
                    f"v{spec_id} (those are: {', '.join(sorted(columns)) or 'none'}); use delete_rows for row filters"
                )
            group = [t for t in candidates if t.spec_id == spec_id]
            values = pa.table(
                {c: pa.array([t.values[fid] for t in group], ns.schema.field(c).type) for c, fid in columns.items()}
            )
            doomed.extend(group[i].object_id for i in match(values, filter))
        if not doomed:
            return MaintenanceReport("drop_partitions", ns.root, ns.manifest_version)
        dropped = Operation("DROP_PARTITIONS", {"filter": filter}, {"partitions_removed": len(doomed)})
        try:
            version = ns.remove_tables(doomed, operation=dropped.timed(started), guard=guard)
        except ConcurrentModification:
            continue
        rows = _rows_of([tables[oid] for oid in doomed], ns)
        return MaintenanceReport(
            "drop_partitions", ns.root, version, tables=len(doomed), rows=rows, deleted=tuple(doomed)
        )
    raise ConcurrentModification(f"drop_partitions on {ns.root} lost {COMMIT_ATTEMPTS} __manifest races")


def hours_text(span: dt.timedelta) -> str:
    """``span`` in hours as a person writes it: ``24 hours``, ``1.5 hours``, ``1 hour``."""
    hours = span.total_seconds() / 3600
    shown = f"{hours:g}"
    return f"{shown} hour" if shown in ("1", "-1") else f"{shown} hours"


def _rows_of(tables: Sequence[PartitionTable], ns: PartitionedNamespace) -> int:
    """The rows of these tables at their pinned versions, from fragment metadata."""

    def count(table: PartitionTable) -> int:
        with translate_lance_errors(f"count rows of partition table {table.object_id}", missing=CorruptNamespace):
            return int(ns.open_table(table).count_rows())

    if not tables:
        return 0
    with ThreadPoolExecutor(max_workers=min(8, len(tables))) as pool:
        return sum(pool.map(count, tables))


def rows_to_delete_datafusion(
    ns: PartitionedNamespace, tasks: Sequence[ScanTask], filter_sql: str
) -> dict[str, list[int]]:
    """Row addresses per table that ``filter_sql`` (DataFusion SQL) selects, read with the
    namespace's reconciliation (renamed columns by id, missing ones as NULL)."""
    schema = ns.namespace_schema
    needed = referenced_columns(filter_sql, schema.arrow.names, False, Dialect.datafusion())
    out: dict[str, list[int]] = {}
    for task in tasks:
        assert task.read_version is not None
        ds = _open(task.uri, task.read_version, ns.storage_options)
        mapping = dataset_columns(ds.schema, schema)
        with translate_lance_errors(f"scan partition table {task.object_id}", missing=CorruptNamespace):
            table = ds.to_table(columns=[mapping[c] for c in needed if c in mapping], with_row_address=True)
        view = reconcile(table, mapping, needed, schema, task.object_id)
        rows = matching_rows(view, filter_sql)
        if rows:
            out[task.object_id] = table.column("_rowaddr").take(pa.array(rows, pa.int64())).to_pylist()
    return out


RowFinder = Callable[[PartitionedNamespace, Sequence[ScanTask], str], Mapping[str, Sequence[int]]]


def delete_rows(
    root: str | PartitionedNamespace,
    filter: str,
    *,
    find_rows: RowFinder | None = None,
    dialect: Dialect | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> MaintenanceReport:
    """Delete the rows matching ``filter`` with Lance deletes, in the pruned tables only.

    ``find_rows`` says which rows of the candidate tables match (Spark's where, from
    :mod:`pipelines.maintenance.operations`); without it the filter is DataFusion SQL applied in
    this process (zone-less timestamps are UTC, as in a Lance scan). Each table that
    loses rows gets a new version (its schema first brought up to the namespace schema,
    metadata-only), then ONE ``__manifest`` commit moves them all.
    """
    started = time.monotonic()
    ns = _namespace(root, storage_options)
    d = dialect or Dialect.datafusion()
    if isinstance(parse_filter(filter, d, strict=False), TrueFilter):
        raise InvalidInput("delete_rows needs a filter; to remove everything, overwrite the namespace")
    finder = find_rows or rows_to_delete_datafusion
    with guarded(ns.root, ns.storage_options) as guard:
        return _delete(ns, filter, d, finder, guard, started)


def _delete(
    ns: PartitionedNamespace, filter: str, d: Dialect, finder: RowFinder, guard: Guard, started: float
) -> MaintenanceReport:
    for _ in range(COMMIT_ATTEMPTS):
        ns.refresh(guard=guard)
        tasks = list(ns.plan_scan(filter, dialect=d))
        tables = ns.tables_by_id(t.object_id for t in tasks)
        for task in tasks:
            if task.read_version is None or task.read_branch is not None or task.read_tag is not None:
                raise InvalidInput(f"delete_rows: table {task.object_id} is read from a branch or tag; not supported")
        planned = {t.object_id for t in tasks}
        found = {oid: sorted(set(a)) for oid, a in finder(ns, tasks, filter).items() if a and oid in planned}
        rows = sum(len(a) for a in found.values())
        if not found:
            return MaintenanceReport("delete_rows", ns.root, ns.manifest_version)
        deleted = Operation("DELETE", {"filter": filter}, {"rows_removed": rows, "partitions_touched": len(found)})
        versions = _delete_addresses(ns, [tables[oid] for oid in found], found)
        commits = [
            TableCommit(tables[oid].spec_id, tables[oid].values, tables[oid].location, version, oid)
            for oid, version in versions.items()
        ]
        try:
            version = ns.commit_once(commits, operation=deleted.timed(started), guard=guard)
        except ConcurrentModification:
            continue
        return MaintenanceReport("delete_rows", ns.root, version, tables=len(commits), rows=rows)
    raise ConcurrentModification(f"delete_rows on {ns.root} lost {COMMIT_ATTEMPTS} __manifest races")


def _delete_addresses(
    ns: PartitionedNamespace, tables: Sequence[PartitionTable], addresses: Mapping[str, Sequence[int]]
) -> dict[str, int]:
    """One marked dataset version per table without the rows at ``addresses`` (in parallel)."""
    schema = ns.namespace_schema

    def one(table: PartitionTable) -> int:
        base = ns.open_table(table)
        return delete_and_append(table.uri, schema, base, [], addresses[table.object_id], ns.storage_options)

    with ThreadPoolExecutor(max_workers=max(1, min(PARALLEL_COMMITS, len(tables)))) as pool:
        return dict(zip([t.object_id for t in tables], pool.map(one, tables), strict=True))


# -- vacuum ---------------------------------------------------------------------------------------
def _retained_versions(manifest: lance.LanceDataset, cutoff: dt.datetime) -> list[int]:
    """The ``__manifest`` versions a reader may still pick: those after ``cutoff`` and the
    one current at it."""
    versions = sorted(manifest.versions(), key=lambda v: v["version"])
    retained = [v["version"] for v in versions if _aware(v["timestamp"]) >= cutoff]
    older = [v["version"] for v in versions if _aware(v["timestamp"]) < cutoff]
    return older[-1:] + retained


@dataclass(frozen=True)
class _Deletion:
    """One item of a vacuum plan: Lance files (and then their empty directories), or dataset versions."""

    item: str
    files: tuple[str, ...] = ()
    dirs: tuple[str, ...] = ()
    versions: tuple[str, tuple[int, ...]] | None = None
    restore: int | None = None  # restored as the latest version first, if the latest is among ``versions``
    location: str | None = None  # the partition table directory this deletion is in, if any
    stamp: dt.datetime | None = None  # when the newest file it deletes was written (None: unknown)
    stamps: tuple[dt.datetime, ...] = ()  # per version in ``versions``: when it was committed
    lease: str | None = None  # the lease file it removes (an expired lease)
    data_file: bool = False  # one data file no version referenced when planned


def _dataset_or_none(uri: str, opts: Mapping[str, str] | None) -> lance.LanceDataset | None:
    """The dataset at ``uri``, or None when nothing is there (deleted by an earlier vacuum)."""
    try:
        return lance.dataset(uri, storage_options=dict(opts) if opts else None)
    except (ValueError, OSError, RuntimeError) as exc:
        if table_files(uri, opts) is None or "not found" in str(exc).lower():
            return None
        raise PartitioningError(f"vacuum: cannot open {uri}: {first_line(exc)}") from exc


def _dangling(
    ds: lance.LanceDataset,
    infos: Sequence[Mapping[str, Any]],
    newest: int,
    recorded: set[int | None],
    cutoff: dt.datetime,
    since: dt.datetime | None,
) -> tuple[list[int], list[int], int | None]:
    """The versions after ``newest`` (the newest read_version a retained ``__manifest`` version
    records), which writes that died before their ``__manifest`` commit leave behind:
    (this project's, older than ``cutoff`` and ``since``, to delete; other clients', kept;
    the version to restore as the latest first when the latest is to go, else None).

    Authorship is :func:`partitioning.storage.orphans.made_here`. A latest version that is a
    ``Restore`` stays: it holds an older version's content (vacuum's own restore is one).
    """
    above = {int(v["version"]): _aware(v["timestamp"]) for v in infos if v["version"] > newest}
    if not above:
        return [], [], None
    ours = made_here(ds, newest, recorded)
    foreign = sorted(v for v in above if v not in ours)
    doomed = sorted(v for v, t in above.items() if v in ours and t < cutoff and (since is None or t < since))
    latest = max(above)
    if doomed and doomed[-1] == latest and isinstance(_operation(ds, latest), lance.LanceOperation.Restore):
        doomed.pop()
    if not doomed or doomed[-1] != latest:
        return doomed, foreign, None
    return doomed, foreign, max(v for v in [newest, *above] if v not in doomed)


def _operation(ds: lance.LanceDataset, version: int) -> Any:
    try:
        txn = ds.read_transaction(version)
    except (OSError, ValueError, RuntimeError, TypeError):
        return None
    return txn.operation if txn is not None else None


def _table_dir(
    root: str, uri: str, item: str, limit: dt.datetime | None, opts: Mapping[str, str] | None = None
) -> tuple[_Deletion | None, str | None]:
    """The deletion of one unreferenced table directory, or why it is kept (None, None if it is gone).

    Only Lance's files go, and only when every one is older than ``limit``.
    """
    try:
        contained(root, uri)
    except PartitioningError:
        return None, f"{uri}: outside the root (a link?), left in place"
    listed = table_files(uri, opts)
    if listed is None:
        return None, None
    if limit is not None and listed.newest is not None and listed.newest >= limit:
        return None, f"{uri}: written since {limit.isoformat()} (a write in progress may use it)"
    kept = f"{uri}: {', '.join(listed.foreign)} not written by Lance, left in place" if listed.foreign else None
    if not listed.files and listed.foreign:
        return None, kept
    location = uri[len(root.rstrip("/")) + 1 :] if uri.startswith(root.rstrip("/") + "/") else None
    files = tuple(f for f, _ in listed.files)
    return _Deletion(item, files, listed.dirs, location=location, stamp=listed.newest), kept


def vacuum(
    root: str | PartitionedNamespace,
    retain: dt.timedelta = DEFAULT_RETENTION,
    *,
    dry_run: bool = False,
    allow_short_retention: bool = False,
    now: dt.datetime | None = None,
    storage_options: Mapping[str, str] | None = None,
    before_delete: Callable[[], None] | None = None,
) -> MaintenanceReport:
    """Delete what no reader within ``retain`` and no write in progress can reach.

    What goes (``cutoff = now - retain``):

    - files of failed writes (``ns.orphans()``): Lance data files no dataset version
      references, and table directories no ``__manifest`` version mentions, older than
      ``cutoff``;
    - directories of partition tables no retained ``__manifest`` version refers to
      (dropped partitions), where a retained version is one after ``cutoff`` or the one
      current at it;
    - dataset versions below the newest one a retained manifest version reads that no
      retained manifest version reads;
    - dataset versions after that newest one (left by writes that committed datasets and
      then failed before their ``__manifest`` commit) that this project committed
      (:func:`partitioning.storage.orphans.made_here`) before ``cutoff``; if the latest version is
      one, the newest version kept is first restored as the latest (a marked Lance
      ``Restore``, so a plain Lance reader opens the recorded content). Those other Lance
      clients committed are kept and listed in the report's ``foreign_versions``;
    - ``__manifest`` versions older than the one current at ``cutoff``;
    - write leases whose heartbeat stopped :data:`partitioning.storage.leases.LEASE_TTL` ago.

    Writes in progress: each holds a lease under ``<root>/_writes``
    (:mod:`partitioning.storage.leases`). While any lease is live, no file modified and no
    dataset version committed at or after the earliest live lease's start is deleted,
    whatever ``retain`` says (a write's files all postdate its lease; a write that takes
    its lease after vacuum listed the leases writes files newer than ``now``). And a
    commit checks that every data file it references exists, so a write whose files
    went anyway fails without committing; nothing committed becomes unreadable.

    What never goes: anything outside the root (each target is checked with
    :func:`partitioning.storage.manifest.contained`), a ``__manifest`` row's location that is not
    one table directory under the root (never followed), and anything in a table
    directory that Lance does not write (:data:`partitioning.storage.orphans.LANCE_ENTRIES`; such
    entries are reported in ``skipped``). A target already gone counts as deleted, so a
    vacuum that died half-way can simply run again.

    Operations that commit references to existing files (a restore's to old table
    versions, a merge's to the version it read) record the ``__manifest`` versions they
    build on in their lease (its *bases*). Right before deleting, vacuum stores its own
    lease, then reads the live leases and the latest ``__manifest`` version again and
    spares whatever that version or a live lease's base references (and those
    ``__manifest`` versions themselves), whatever it planned; an operation whose lease is
    stored after that waits for this vacuum to end before it commits
    (:mod:`partitioning.storage.guard`). That re-check applies every rule above again (leases'
    starts, their bases, the latest version's references, the data files versions
    committed since the plan use) with the leases judged on the real clock: ``now`` plans
    as of another time (a what-if, or a test's), but whether a write is in progress is a
    fact of the present. ``before_delete`` is called right before the first deletion (a
    hook for tests).

    ``retain`` under :data:`MIN_RETENTION` (24 hours) is refused unless
    ``allow_short_retention`` is set; leases are honoured either way.
    """
    if retain < dt.timedelta(0):
        raise InvalidInput(f"vacuum retention {hours_text(retain)} is negative")
    if retain < MIN_RETENTION and not allow_short_retention:
        raise InvalidInput(
            f"vacuum retention {hours_text(retain)} is under {hours_text(MIN_RETENTION)}; it could delete files of "
            "long writes in progress and versions readers still use (pass allow_short_retention=True, or "
            "--allow-short-retention to jobs/vacuum.py, to do it anyway)"
        )
    ns = _namespace(root, storage_options).refresh()
    now = _aware(now) if now is not None else dt.datetime.now(dt.UTC)
    cutoff = now - retain
    leases = list_leases(ns.root, ns.storage_options)
    since = protected_since(leases, now)
    file_cutoff = min(cutoff, since) if since is not None else cutoff
    opts = dict(ns.storage_options) if ns.storage_options else None
    latest_locations = {t.location for t in ns.partitions()}
    with translate_lance_errors(f"vacuum {ns.root}: read {MANIFEST_DIR}"):
        manifest = lance.dataset(join_uri(ns.root, MANIFEST_DIR), storage_options=opts)
        recorded = recorded_read_versions(ns.root, ns.storage_options)
        kept_versions = _retained_versions(manifest, cutoff)
    bases = protected_bases(leases, now)  # versions writes in progress build on (a restore's target)
    retained = merged(recorded[v] for v in {*kept_versions, *bases} if v in recorded)
    known = merged(recorded.values())
    plan: list[_Deletion] = []
    kept: list[str] = []
    foreign: list[str] = []

    for orphan in find_orphans(ns.root, ns.storage_options, recorded=recorded):
        if orphan.kind == "data_file":
            fs, path = filesystem_of(orphan.uri, opts)
            mtime = fs.get_file_info(path).mtime
            if mtime is not None and _aware(mtime) < file_cutoff:
                location = orphan.uri[len(ns.root.rstrip("/")) + 1 :].rsplit("/data/", 1)[0]
                item = f"data_file {orphan.uri}"
                plan.append(_Deletion(item, (orphan.uri,), stamp=_aware(mtime), location=location, data_file=True))
        elif orphan.kind == "table_dir":
            deletion, why = _table_dir(ns.root, orphan.uri, f"table_dir {orphan.uri}", file_cutoff, opts)
            plan.extend([deletion] if deletion is not None else [])
            kept.extend([why] if why is not None else [])

    for location in progress(f"vacuum {ns.root}", sorted(known), len(known)):
        uri = join_uri(ns.root, location)
        if location not in retained and location not in latest_locations:
            item = f"table_dir {uri} (no retained __manifest version refers to it)"
            deletion, why = _table_dir(ns.root, uri, item, since, opts)
            plan.extend([deletion] if deletion is not None else [])
            kept.extend([why] if why is not None else [])
            continue
        needed = retained.get(location, set())
        if None in needed or not needed:
            continue
        ds = _dataset_or_none(uri, opts)
        if ds is None:
            continue
        newest = max(v for v in needed if v is not None)
        infos = ds.versions()
        stamps = {int(v["version"]): _aware(v["timestamp"]) for v in infos}
        doomed = sorted(
            v["version"]
            for v in infos
            if v["version"] < newest
            and v["version"] not in needed
            and (since is None or _aware(v["timestamp"]) < since)
        )
        if doomed:
            item = f"versions {uri} {_ranges(doomed)} (no retained read_version)"
            plan.append(
                _Deletion(
                    item, versions=(uri, tuple(doomed)), location=location, stamps=tuple(stamps[v] for v in doomed)
                )
            )
        with translate_lance_errors(f"vacuum {ns.root}: read the history of {uri}"):
            dangling, others, restore = _dangling(ds, infos, newest, known.get(location, set()), cutoff, since)
        if dangling:
            item = f"versions {uri} {_ranges(dangling)} (after every retained read_version: a write that failed)"
            plan.append(
                _Deletion(
                    item,
                    versions=(uri, tuple(dangling)),
                    restore=restore,
                    location=location,
                    stamps=tuple(stamps[v] for v in dangling),
                )
            )
        if others:
            foreign.append(f"versions {uri} {_ranges(others)} (after every retained read_version, another client's)")

    if kept_versions:
        infos = manifest.versions()
        stamps = {int(v["version"]): _aware(v["timestamp"]) for v in infos}
        doomed = sorted(v["version"] for v in infos if v["version"] < kept_versions[0] and v["version"] not in bases)
        if doomed:
            item = f"versions {manifest.uri} {_ranges(doomed)}"
            plan.append(
                _Deletion(item, versions=(manifest.uri, tuple(doomed)), stamps=tuple(stamps[v] for v in doomed))
            )
    for lease in leases:
        if not lease.live(now):
            plan.append(_Deletion(f"lease {lease.uri} (expired)", (lease.uri,), lease=lease.uri))
    for mark in ended_marks(ns.root, now, ns.storage_options):
        plan.append(_Deletion(f"lease end mark {mark}", (mark,), lease=mark))

    if not dry_run:
        # the protected path's other half (partitioning.storage.guard): from here on, an operation
        # whose lease is stored after this one waits for this vacuum before committing
        with vacuum_lease(ns.root, ns.storage_options):
            plan, spared = _spare_protected(ns.root, opts, manifest.uri, plan)
            kept.extend(spared)
            if before_delete is not None:
                before_delete()
            for deletion in plan:
                kept.extend(f"{uri}: outside the root" for uri in delete_files(ns.root, deletion.files, opts))
                remove_empty_dirs(ns.root, deletion.dirs, opts)
                if deletion.versions is not None:
                    _cleanup_versions(ns.root, *deletion.versions, opts, restore=deletion.restore)
    return MaintenanceReport(
        "vacuum",
        ns.root,
        None,
        deleted=tuple(d.item for d in plan),
        skipped=tuple(kept),
        dry_run=dry_run,
        foreign_versions=tuple(foreign),
    )


def _spare_protected(
    root: str, opts: Mapping[str, str] | None, manifest_uri: str, plan: list[_Deletion]
) -> tuple[list[_Deletion], list[str]]:
    """``plan`` without what a write in progress or the latest ``__manifest`` version needs,
    read now (after vacuum's own lease is stored): what the latest version or a live
    lease's base references, what is newer than the earliest live lease, and live leases.
    Leases are judged on the real clock: ``now`` lets vacuum plan as of another time, but
    whether a write is in progress right now is a fact of the present. Also what was spared."""
    real_now = dt.datetime.now(dt.UTC)
    leases = list_leases(root, opts)
    protection = _Protection(
        bases=protected_bases(leases, real_now),
        since=protected_since(leases, real_now),
        live={lease.uri for lease in leases if lease.live(real_now)},
        refs={},
        manifest_uri=manifest_uri,
    )
    with translate_lance_errors(f"vacuum {root}: read {MANIFEST_DIR}"):
        latest = lance.dataset(manifest_uri, storage_options=dict(opts) if opts else None)
        protection.refs.update(_references(latest, {int(latest.version), *protection.bases}))
    for location in sorted({d.location for d in plan if d.data_file and d.location is not None}):
        ds = _dataset_or_none(join_uri(root, location), opts)
        if ds is not None:
            with translate_lance_errors(f"vacuum {root}: read the versions of {location}"):
                protection.referenced[location] = referenced_data_files(ds)
    out: list[_Deletion] = []
    spared: list[str] = []
    for deletion in plan:
        kept = protection.spare(deletion)
        if kept is deletion:
            out.append(deletion)
            continue
        spared.append(f"{deletion.item}: a write in progress or the latest __manifest version needs it, kept")
        if kept is not None:
            out.append(kept)
    return out, spared


def _references(latest: lance.LanceDataset, versions: Iterable[int]) -> dict[str, set[int | None]]:
    """Table location -> read versions, over the ``__manifest`` versions given (those gone are skipped)."""
    out: dict[str, set[int | None]] = {}
    for version in sorted(versions):
        try:
            ds = latest if version == latest.version else latest.checkout_version(version)
        except (OSError, ValueError, RuntimeError):
            continue  # an earlier vacuum removed it; it references nothing now
        rows = ds.to_table(columns=["object_id", "location", "read_version"], filter="object_type = 'table'")
        for row in rows.to_pylist():
            if location_problem(row["object_id"], row["location"]) is None:
                out.setdefault(row["location"], set()).add(row["read_version"])
    return out


@dataclass(frozen=True)
class _Protection:
    """What vacuum must not delete, as read right before deleting."""

    bases: set[int]  # __manifest versions live leases build on
    since: dt.datetime | None  # the earliest start of a live write lease
    live: set[str]  # live lease files
    refs: dict[str, set[int | None]]  # table location -> read versions the latest version and the bases reference
    manifest_uri: str
    referenced: dict[str, set[str]] = dataclasses.field(default_factory=dict)  # location -> data files in use now

    def spare(self, deletion: _Deletion) -> _Deletion | None:
        """``deletion`` itself when it touches nothing protected, a smaller one, or None."""
        if deletion.lease is not None:
            return None if deletion.lease in self.live else deletion
        if deletion.data_file:
            name = deletion.files[0].rsplit("/", 1)[-1]
            if name in self.referenced.get(deletion.location or "", set()):
                return None  # a version committed since the plan uses it
        if deletion.versions is None:
            if not deletion.data_file and deletion.location is not None and deletion.location in self.refs:
                return None
            if self.since is not None and (deletion.stamp is None or deletion.stamp >= self.since):
                return None
            return deletion
        uri, versions = deletion.versions
        if uri == self.manifest_uri:
            keep: set[int | None] = set(self.bases)
        else:
            keep = set(self.refs.get(deletion.location or "", set()))
            if None in keep:
                return None
        stamps = deletion.stamps or (None,) * len(versions)
        remaining = tuple(
            v
            for v, t in zip(versions, stamps, strict=True)
            if v not in keep and (self.since is None or (t is not None and t < self.since))
        )
        if remaining == versions:
            return deletion
        if not remaining or deletion.restore is not None:
            return None  # a dangling-version cleanup that would need another restore target: next time
        kept = tuple(t for v, t in zip(versions, stamps, strict=True) if v in remaining and t is not None)
        return dataclasses.replace(
            deletion, versions=(uri, remaining), stamps=kept, item=f"versions {uri} {_ranges(list(remaining))}"
        )


def _cleanup_versions(
    root: str, uri: str, versions: Sequence[int], opts: Mapping[str, str] | None, *, restore: int | None = None
) -> None:
    """Lance's own cleanup of ``versions`` of the dataset at ``uri`` (inside ``root``); a dataset gone is fine.

    Lance never removes the latest version: if it is among ``versions``, version ``restore``
    is first restored as the latest (a marked ``Restore``); if something was committed
    meanwhile, the latest is not among them and nothing is restored.
    """
    contained(root, uri)
    ds = _dataset_or_none(uri, opts)
    if ds is None:
        return
    with translate_lance_errors(f"vacuum {root}: clean up versions {_ranges(list(versions))} of {uri}"):
        if restore is not None and ds.version in versions:
            ds = restore_as_latest(uri, restore, opts)[0]
        ds.cleanup_old_versions(versions=list(versions), error_if_tagged_old_versions=False)


def optimize_manifest(
    root: str | PartitionedNamespace, *, storage_options: Mapping[str, str] | None = None
) -> MaintenanceReport:
    """Compact the ``__manifest`` table's own fragments now; rows are unchanged.

    Commits also do this by themselves when it is due (:mod:`partitioning.state.upkeep`). The
    compaction is one ``__manifest`` version recording ``OPTIMIZE_MANIFEST`` (``trigger``
    ``user``); a concurrent commit that wins the race makes it raise
    :class:`ConcurrentModification` with nothing changed.
    """
    ns = _namespace(root, storage_options)
    opts = dict(ns.storage_options) if ns.storage_options else None
    ds = ns._store.dataset()
    before = len(ds.get_fragments())
    done = compact_manifest(ds, trigger="user", storage_options=opts)
    ns.refresh()
    return MaintenanceReport(
        "optimize_manifest",
        ns.root,
        ns.manifest_version,
        fragments_before=before,
        fragments_after=done.fragments_after if done is not None else before,
    )


# -- helpers --------------------------------------------------------------------------------------
def _namespace(root: str | PartitionedNamespace, storage_options: Mapping[str, str] | None) -> PartitionedNamespace:
    """``root`` itself if it is a loaded namespace (its own storage options), else loaded with ``storage_options``."""
    return root if isinstance(root, PartitionedNamespace) else PartitionedNamespace.load(root, storage_options)


def _open(uri: str, version: int, storage_options: Mapping[str, str] | None) -> lance.LanceDataset:
    """The table at its recorded version; a version vacuum removed is one CorruptNamespace line."""
    return open_partition_table(uri, version, None, None, storage_options)


def _ranges(versions: Sequence[int]) -> str:
    """``[1, 2, 3, 7]`` -> ``"1-3, 7"``."""
    out: list[str] = []
    start = prev = versions[0]
    for v in [*versions[1:], None]:
        if v is not None and v == prev + 1:
            prev = v
            continue
        out.append(str(start) if start == prev else f"{start}-{prev}")
        if v is not None:
            start = prev = v
    return ", ".join(out)


def _aware(t: Any) -> dt.datetime:
    assert isinstance(t, dt.datetime)
    return as_utc(t)
