"""Compaction, Spark-free: rewrite small fragments (or fragments with deleted rows) into fewer.

Split so Spark can run the rewrites on executors: :func:`plan_compaction` (driver) ->
:func:`rewrite` (one task each, anywhere) -> :func:`commit_compaction` (driver), which makes
ONE ``__manifest`` commit. :func:`compact_local` runs all three in-process
(:func:`rewrite_all`: the bins on threads); :func:`auto_compact` is its small form after a
stream's micro-batch. Tasks carry the namespace's storage options
(:class:`CompactionTask`), so executors reach the store.
"""

from __future__ import annotations

import json
import os
import time
import zlib
from collections.abc import Collection, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import lance

from partitioning.errors import ConcurrentModification, InvalidInput, translate_lance_errors
from partitioning.namespace import PartitionedNamespace, TableCommit
from partitioning.progress import progress
from partitioning.sql.filters import Dialect, Filter
from partitioning.stats.bounds import StatsChange, TableStats
from partitioning.storage.alignment import latest_keeping_indexes
from partitioning.storage.datasets import commit_rewrites, compact_fragments
from partitioning.storage.guard import Guard, guarded
from partitioning.storage.history import Operation
from partitioning.tables.maintenance import COMMIT_ATTEMPTS, MaintenanceReport, open_recorded

__all__ = [
    "CompactionResult",
    "CompactionTask",
    "auto_compact",
    "commit_compaction",
    "compact_local",
    "due_for_compaction",
    "plan_compaction",
    "rewrite",
    "rewrite_all",
]


DEFAULT_TARGET_ROWS = 1_048_576


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
    only: Collection[str] | None = None,
) -> list[CompactionTask]:
    """Bins of small fragments (or fragments with deleted rows) to rewrite, per selected table.

    ``filter`` only selects partition tables (compaction never changes rows), read as
    DataFusion SQL with zone-less timestamps in ``time_zone``, or in ``dialect``.
    A bin holds consecutive small fragments up to ``target_rows_per_fragment`` rows, all
    covered by the same index segments (as Lance's own planner does: a new fragment is
    wholly indexed or not, so indexed rows are never mixed with unindexed ones); a bin of
    one fragment is rewritten only if it has deletions to drop. ``only``: these partition
    tables (object ids) among the selected ones; no other table is opened.
    """
    if target_rows_per_fragment < 1:
        raise InvalidInput(f"target_rows_per_fragment must be at least 1, got {target_rows_per_fragment}")
    opts = tuple(sorted((ns.storage_options or {}).items()))
    tasks = []
    for task in ns.plan_scan(filter, time_zone=time_zone, dialect=dialect):
        if task.read_branch is not None or task.read_tag is not None or task.read_version is None:
            continue
        if only is not None and task.object_id not in only:
            continue
        ds = open_recorded(task.uri, task.read_version, ns.storage_options)
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
    ds = open_recorded(task.uri, task.read_version, dict(task.storage_options) or None)
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

    A table whose ``read_version`` moved since planning, or whose dataset a writer committed
    to meanwhile (its commit to ``__manifest`` still to come), is left as it was and reported
    as skipped; nothing of its data is lost. Each committed version
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
            fragments = len(head.get_fragments())
            try:
                version = commit_rewrites(table.uri, head, [p.rewrite for p in parts], ns.storage_options)
            except ConcurrentModification:  # a writer is committing to this table: the rewrite is left out
                skipped.append(object_id)
                continue
            removed = sum(len(p.task.fragment_ids) for p in parts)
            before += fragments
            after += fragments - removed + sum(p.fragments for p in parts)
            rows += sum(p.rows for p in parts)
            kept = StatsChange(TableStats(0), planned)  # the same rows, in fewer files
            commits.append(TableCommit(table.spec_id, table.values, table.location, version, table.object_id, kept))
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
    only: Collection[str] | None = None,
) -> MaintenanceReport:
    """:func:`plan_compaction`, :func:`rewrite_all` (one thread per core) and
    :func:`commit_compaction` in this process, on the protected path (:mod:`partitioning.storage.guard`):
    the lease is taken before the plan reads the tables, so vacuum keeps them and the new
    fragments. ``only``: just these partition tables (object ids; see :func:`plan_compaction`)."""
    with guarded(ns.root, ns.storage_options) as guard:
        ns.refresh(guard=guard)
        tasks = plan_compaction(
            ns, filter, target_rows_per_fragment=target_rows_per_fragment, time_zone=time_zone, only=only
        )
        if not tasks:
            return MaintenanceReport("compact", ns.root, ns.manifest_version)
        return commit_compaction(ns, rewrite_all(tasks), guard=guard)


def due_for_compaction(ns: PartitionedNamespace, object_ids: Iterable[str], every: int) -> list[str]:
    """Which of ``object_ids`` (tables a small append just touched) to compact now: those whose
    recorded dataset version reaches a multiple of ``every``, offset per table (crc32 of its
    id) so that a stream touching many tables compacts a few of them per commit, not all at
    once. A table appended to once per commit is thus looked at every ``every`` appends."""
    if every < 1:
        return []
    due = []
    for oid, table in ns.tables_by_id(object_ids).items():
        if table.read_version is not None and (table.read_version + zlib.crc32(oid.encode())) % every == 0:
            due.append(oid)
    return sorted(due)


def auto_compact(
    ns: PartitionedNamespace,
    object_ids: Iterable[str],
    *,
    every: int,
    target_rows_per_fragment: int = DEFAULT_TARGET_ROWS,
) -> MaintenanceReport | None:
    """Compact the tables :func:`due_for_compaction` picks (after a stream's micro-batch), on
    the protected path of :func:`compact_local`; None when none is due. A compaction that
    loses its races to other writers raises :class:`ConcurrentModification`, for the caller
    to log: the append it follows is committed either way."""
    due = due_for_compaction(ns, object_ids, every)
    if not due:
        return None
    return compact_local(ns, target_rows_per_fragment=target_rows_per_fragment, only=set(due))
