"""Commits that delete rows and add rows in one ``__manifest`` commit: merge, update, replace_where.

An operation reads some partition tables at the manifest's versions (its *read set*),
decides which rows go (Lance row addresses) and writes the rows that come in as new
fragments (:class:`partitioning.tables.fragments.FragmentWriter`, like any write). Then
:func:`commit_rewrite` commits, per touched table, ONE dataset version holding the
recorded version's fragments with deletion vectors for the rows that go, plus the new
fragments, and makes ONE ``__manifest`` commit for all of them.

Isolation: before each commit attempt the read set is planned again on the latest
manifest. Tables outside it may change meanwhile (appends to other partitions): the
commit is rebased on them. When a table in it changed (another commit moved its
``read_version``) or a new table joined it (another writer created a partition the
operation's filter covers), the read set's :class:`~partitioning.tables.rebase.Touches` (the
rows the operation would change) decides: if the other commits only added rows it would
not change and left the rows it deletes alone (:func:`partitioning.tables.rebase.conflict`),
the commit is rebased onto them too; otherwise (or without ``touches``) the attempt raises
:class:`ReadSetChanged` and the caller runs the operation again on the new state. That is
serializable for the rows an operation reads, like Delta's WriteSerializable with its
conflict detection.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import lance
import pyarrow as pa
from lance import LanceOperation
from lance.fragment import FragmentMetadata

from partitioning.errors import ConcurrentModification, InvalidInput, translate_lance_errors
from partitioning.namespace import PartitionedNamespace, TableCommit
from partitioning.spec.schema import NamespaceSchema
from partitioning.spec.values import canonical_float
from partitioning.sql.filters import Dialect, Filter
from partitioning.state.partition_tables import PartitionTable
from partitioning.stats.bounds import StatsChange, TableStats
from partitioning.storage.alignment import COMMIT_MESSAGE, align_schema, is_aligned, latest_keeping_indexes, renumber
from partitioning.storage.datasets import DEFAULT_COMMIT_ATTEMPTS, commit_version, offsets_by_fragment
from partitioning.storage.guard import Guard
from partitioning.storage.history import Operation
from partitioning.storage.intents import Intent
from partitioning.storage.paths import table_uri
from partitioning.tables.messages import Pending, check_files, check_rejected, group_messages, place_pending
from partitioning.tables.rebase import Touches, conflict
from partitioning.tables.write import PARALLEL_COMMITS, CommitResult, already_committed

__all__ = ["ReadSet", "ReadSetChanged", "RewriteResult", "Touches", "commit_rewrite", "delete_and_append"]

_log = logging.getLogger(__name__)


class ReadSetChanged(ConcurrentModification):
    """A table the operation read changed before its commit; run the operation again."""


@dataclass(frozen=True)
class ReadSet:
    """The partition tables an operation reads: those ``filter`` plans, narrowed by ``keys``.

    ``keys`` maps a spec id to (field ids, the value tuples of those fields the operation
    can touch); a table of that spec is read only when its values for those fields are
    one of the tuples. Specs without an entry are not narrowed. ``touches``: the rows the
    operation would change, so a commit can be rebased onto other writers' rows
    (:mod:`partitioning.tables.rebase`); None: any change to a table read is a conflict.
    """

    filter: str | Filter | None
    dialect: Dialect
    keys: Mapping[int, tuple[tuple[str, ...], frozenset[tuple[Any, ...]]]] = field(default_factory=dict)
    touches: Touches | None = None

    def plan(self, ns: PartitionedNamespace) -> dict[str, int]:
        """object_id -> read_version of every table this read set covers in ``ns``'s state."""
        tasks = list(ns.plan_scan(self.filter, dialect=self.dialect))
        values = ns.tables_by_id(t.object_id for t in tasks if t.spec_id in self.keys)
        out: dict[str, int] = {}
        for task in tasks:
            if task.read_version is None or task.read_branch is not None or task.read_tag is not None:
                raise InvalidInput(
                    f"partition table {task.object_id} is read from a branch or tag; rows cannot be changed there"
                )
            narrowed = self.keys.get(task.spec_id)
            if narrowed is not None:
                fids, wanted = narrowed
                table = values[task.object_id]
                if tuple(canonical_float(table.values.get(f)) for f in fids) not in wanted:
                    continue
            out[task.object_id] = task.read_version
        return out

    def changed(
        self, ns: PartitionedNamespace, read: Mapping[str, int], deletions: Mapping[str, Sequence[int]] | None = None
    ) -> str | None:
        """Why a commit of the operation that used the plan ``read`` and deletes ``deletions``
        cannot go on ``ns`` (the latest state), or None. With :attr:`touches`, other
        writers' changes it does not depend on are not a reason (it is rebased onto them)."""
        now = self.plan(ns)
        if self.touches is not None:
            reason = conflict(ns, read, now, deletions or {}, self.touches)
            if reason is None and now != dict(read):
                moved = sum(1 for oid, v in now.items() if read.get(oid) != v)
                _log.info("lance_partitioned: %s: rebased onto %d changed partition table(s)", ns.root, moved)
            return reason
        for object_id, version in read.items():
            if object_id not in now:
                return f"partition table {object_id} was removed"
            if now[object_id] != version:
                return f"partition table {object_id} moved from version {version} to {now[object_id]}"
        added = sorted(set(now) - set(read))
        if added:
            return f"partition table {added[0]} was created"
        return None


@dataclass(frozen=True)
class RewriteResult(CommitResult):
    """A :class:`CommitResult` that also counts rows: an updated row is deleted and written,
    so ``rows_deleted`` and ``rows_written`` include ``rows_updated``. ``rounds``: how many
    times the operation ran (a round whose read partitions changed before its commit runs
    again); ``seconds``: its wall time, the waits included; ``intent``: whether it took an
    exclusive intent (:mod:`partitioning.storage.intents`) to finish."""

    rows_deleted: int = 0
    rows_updated: int = 0
    rows_inserted: int = 0
    rounds: int = 1
    seconds: float = 0.0
    intent: bool = False

    def summary(self) -> str:
        if self.skipped:
            return super().summary()
        tail = f" after {self.rounds} rounds{' (with an intent)' if self.intent else ''}" if self.rounds > 1 else ""
        return (
            f"{self.root}: {self.mode}: {self.rows_updated:,} rows updated, {self.rows_inserted:,} inserted, "
            f"{self.rows_deleted - self.rows_updated:,} deleted, in {self.partitions_touched} partitions "
            f"({self.partitions_created} new), __manifest v{self.manifest_version}, {self.seconds:.1f} s{tail}"
        )


def delete_and_append(
    uri: str,
    schema: NamespaceSchema,
    base: lance.LanceDataset,
    fragments: Sequence[FragmentMetadata],
    addresses: Sequence[int],
    storage_options: Mapping[str, str] | None,
    *,
    attempts: int = DEFAULT_COMMIT_ATTEMPTS,
    base_on_main: bool = False,
) -> int:
    """Commit ONE version of ``uri``: ``base``'s fragments minus the rows at ``addresses``
    (Lance deletion vectors; a fragment losing every row is dropped) plus ``fragments``.

    Like :func:`partitioning.storage.datasets.commit_version`, the version never depends on versions
    committed after ``base``. Indexes other clients built since are first carried over
    onto ``base``'s content when still valid (:func:`partitioning.storage.alignment.latest_keeping_indexes`);
    the Lance ``Update`` on top keeps them (deleted rows are masked, new fragments are
    unindexed). Returns the version. ``base_on_main``: as in :func:`partitioning.storage.datasets.commit_version`.
    """
    kept = {f.fragment_id for f in base.get_fragments()}
    offsets = offsets_by_fragment(addresses)
    unknown = sorted(set(offsets) - kept)
    if unknown:
        raise ConcurrentModification(
            f"{uri}: fragment {unknown[0]} of the rows to delete is not in version {base.version}"
        )
    last: ConcurrentModification | None = None
    for attempt in range(attempts):
        try:
            opened = base if base_on_main and attempt == 0 else None
            head = latest_keeping_indexes(uri, base.version, storage_options, opened=opened)
            if not is_aligned(head, schema):
                head = align_schema(uri, head, schema, storage_options)
            updated, removed = [], []
            with translate_lance_errors(f"delete rows from {uri}"):
                for fragment in head.get_fragments():
                    gone = offsets.get(fragment.fragment_id)
                    if not gone or fragment.fragment_id not in kept:
                        continue
                    meta = fragment.delete_rows(gone)
                    if meta is None:
                        removed.append(fragment.fragment_id)
                    else:
                        updated.append(meta)
            new = renumber(fragments, schema.dataset_arrow, head.lance_schema)
            return _commit_update(uri, head, removed, updated, new, storage_options)
        except ConcurrentModification as exc:
            last = exc
            time.sleep(random.uniform(0.005, 0.02) * (attempt + 1))
    raise ConcurrentModification(f"gave up committing {uri} after {attempts} attempts: {last}") from last


def _commit_update(
    uri: str,
    head: lance.LanceDataset,
    removed: list[int],
    updated: list[FragmentMetadata],
    new: list[FragmentMetadata],
    storage_options: Mapping[str, str] | None,
) -> int:
    """A Lance Update on ``head`` (the latest version); :class:`ConcurrentModification` if
    any other commit landed between ``head`` and it, since Lance would have rebased this
    one onto that commit's data."""
    with translate_lance_errors(f"commit {uri}"):
        ds = lance.LanceDataset.commit(
            head,  # its open store and caches; ``read_version`` pins what it commits on
            LanceOperation.Update(removed_fragment_ids=removed, updated_fragments=updated, new_fragments=new),
            read_version=head.version,
            storage_options=dict(storage_options) if storage_options else None,
            commit_message=COMMIT_MESSAGE,
        )
    if ds.version != head.version + 1:
        raise ConcurrentModification(f"{uri}: another commit landed before version {ds.version}; committing again")
    return int(ds.version)


@dataclass
class _Change:
    """One table's change; ``table`` (its manifest entry, None for a new table) is opened
    at its recorded version in the commit threads, not one by one before them."""

    commit: TableCommit | None
    uri: str
    table: PartitionTable | None
    fragments: list[FragmentMetadata]
    addresses: Sequence[int]


def _changes(
    ns: PartitionedNamespace,
    pending: dict[str, Pending],
    deletions: Mapping[str, Sequence[int]],
    spec_id: int,
    schema: NamespaceSchema,
    max_rows_per_file: int,
) -> tuple[list[_Change], int]:
    """One change per touched table (new fragments and/or deleted rows); and how many tables are new."""
    spec = ns.specs[spec_id]
    tables = ns.tables_by_id(oid for oid, addresses in deletions.items() if addresses)
    changes: dict[str, _Change] = {}
    created = 0
    for entry, values, existing in place_pending(ns, pending, spec_id, schema, max_rows_per_file):
        created += existing is None
        uri = table_uri(ns.root, entry.object_id, entry.location)
        stats = entry.stats_change(existing.read_version if existing is not None else None)
        commit = TableCommit(spec.spec_id, values, entry.location, -1, entry.object_id, stats)
        changes[entry.object_id] = _Change(commit, uri, existing, list(entry.fragments), ())
    for object_id, addresses in deletions.items():
        if not addresses:
            continue
        table = tables.get(object_id)
        if table is None:
            raise ReadSetChanged(f"partition table {object_id} was removed")
        change = changes.get(object_id)
        if change is None:
            kept = StatsChange(TableStats(0), table.read_version)
            commit = TableCommit(table.spec_id, table.values, table.location, -1, object_id, kept)
            changes[object_id] = _Change(commit, table.uri, table, [], addresses)
        else:
            change.addresses = addresses
    return list(changes.values()), created


def _commit_one(
    change: _Change, ns: PartitionedNamespace, schema: NamespaceSchema, opened: Mapping[str, lance.LanceDataset]
) -> TableCommit:
    assert change.commit is not None
    table = change.table
    main = table is not None and table.read_branch is None and table.read_tag is None
    base = None
    if table is not None:
        held = opened.get(table.object_id) if main else None
        base = held if held is not None and held.version == table.read_version else ns.open_table(table)
    uri, opts = change.uri, ns.storage_options
    if base is None or not change.addresses:
        version = commit_version(uri, schema, change.fragments, opts, base=base, verify=False, base_on_main=main)
    else:
        version = delete_and_append(uri, schema, base, change.fragments, change.addresses, opts, base_on_main=main)
    return dataclasses.replace(change.commit, read_version=version)


def commit_rewrite(
    ns: PartitionedNamespace,
    messages: pa.Table,
    deletions: Mapping[str, Sequence[int]],
    *,
    read_set: ReadSet,
    read: Mapping[str, int],
    mode: str,
    spec_id: int,
    schema: NamespaceSchema,
    write_id: str | None = None,
    operation: Operation,
    started: float | None = None,
    max_attempts: int = DEFAULT_COMMIT_ATTEMPTS,
    max_rows_per_file: int = 1_048_576,
    rows_updated: int = 0,
    guard: Guard | None = None,
    intent: Intent | None = None,
    opened: Mapping[str, lance.LanceDataset] | None = None,
) -> RewriteResult:
    """Driver side of an operation that deletes ``deletions`` (object_id -> row addresses
    of the versions in ``read``) and adds the fragments in ``messages``: one dataset
    version per touched table, then ONE ``__manifest`` commit. ``opened``: tables the
    operation opened already, by object id; one still at the version a commit starts from
    is not opened again.

    Raises :class:`ReadSetChanged` when ``read_set`` no longer plans to exactly ``read``
    (the caller re-runs the operation); other manifest races are rebased and retried. The
    commit goes through ``guard``'s protected path (:mod:`partitioning.storage.guard`) and removes
    the operation's ``intent``.
    """
    spec = ns.specs[spec_id]
    pending = group_messages(check_rejected(messages, schema), spec.field_ids)
    outside = sorted(set(deletions) - set(read))
    if outside:
        raise InvalidInput(f"rows to delete in partition table {outside[0]}, which the operation did not read")
    last: ConcurrentModification | None = None
    for attempt in range(1, max_attempts + 1):
        check_files(ns.root, pending.values(), spec.field_ids, ns.storage_options)
        ns.refresh(guard=guard)
        skipped = already_committed(ns, mode, write_id)
        if skipped is not None:
            return RewriteResult(**{**skipped.__dict__})
        if ns.namespace_schema.to_json() != schema.to_json():
            raise ConcurrentModification(
                f"the schema of {ns.root} changed while this operation ran; nothing was committed, run it again"
            )
        difference = read_set.changed(ns, read, deletions)
        if difference is not None:
            raise ReadSetChanged(f"{ns.root}: {difference} while this operation ran")
        changes, created = _changes(ns, pending, deletions, spec_id, schema, max_rows_per_file)
        with ThreadPoolExecutor(max_workers=max(1, min(PARALLEL_COMMITS, len(changes)))) as pool:
            commits = list(pool.map(lambda c: _commit_one(c, ns, schema, opened or {}), changes))
        written = sum(p.rows for p in pending.values())
        files = [f for p in pending.values() for fragment in p.fragments for f in fragment.files]
        recorded = operation.with_metrics(
            rows_added=written,
            rows_removed=sum(len(a) for a in deletions.values()),
            rows_updated=rows_updated,
            bytes_added=sum(int(f.file_size_bytes or 0) for f in files),
            files_added=len(files),
            partitions_touched=len(commits),
            partitions_created=created,
        )
        if started is not None:
            recorded = recorded.timed(started)
        try:
            manifest_version = ns.commit_once(
                commits, write_id=write_id, operation=recorded, guard=guard, intent=intent
            )
        except ConcurrentModification as exc:
            last = exc
            time.sleep(random.uniform(0.01, 0.05) * attempt)
            continue
        return RewriteResult(
            root=ns.root,
            mode=mode,
            manifest_version=manifest_version,
            rows_written=written,
            partitions_touched=len(commits),
            partitions_created=created,
            fragments_written=sum(len(p.fragments) for p in pending.values()),
            attempts=attempt,
            write_id=write_id,
            rows_deleted=sum(len(a) for a in deletions.values()),
            rows_updated=rows_updated,
            rows_inserted=written - rows_updated,
        )
    raise ConcurrentModification(
        f"{mode} on {ns.root} gave up after {max_attempts} __manifest commit attempts lost to concurrent writers; "
        f"nothing of it is visible (last conflict: {last})"
    ) from last
