"""A backfill's commit: each partition dataset once (a Lance ``Merge``), then ``__manifest`` once.

The fragments the tasks wrote (:mod:`partitioning.tables.backfill`) keep every data file
they had and gain one. Per table, :func:`_merged` lists the dataset's fragments with the
new files, points a replaced column's new copy at its Lance field id (the old files'
copy is tombstoned, Lance's ``-2``) and commits ONE ``Merge`` version. Indexes on other
columns are kept; a Lance index on a replaced column would describe the old values, so
it is dropped from that partition (a second version), and the namespace's index
definition stays for :func:`pipelines.search.indexes.optimize_indexes` to rebuild it.

New columns reach the namespace schema atomically with the rows: the new schema is
staged first (a root property readers ignore, :mod:`partitioning.storage.staged`) and the
``__manifest`` commit pointing at the new dataset versions applies it. A crash before
that leaves nothing visible.

Concurrency: a table whose recorded version moved while the tasks ran is rebased when
the other commit only appended fragments (they are left NULL in the new columns and
counted in :attr:`BackfillResult.rows_left_null`) or only deleted rows (its deletion
vectors are kept); when it rewrote a fragment the backfill read (compaction, update),
that table is :class:`Rewritten`: the caller's ``recompute`` runs the backfill again for
those tables only (at their new versions) and the commit goes on with the rest; without
it the commit raises :class:`~partitioning.errors.ConcurrentModification`: nothing is
visible, and running the backfill again is safe.
"""

from __future__ import annotations

import json
import pickle
import random
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import lance
from lance import LanceOperation
from lance.fragment import FragmentMetadata
from lance.schema import LanceSchema

from partitioning.errors import ConcurrentModification, PartitioningError, translate_lance_errors
from partitioning.namespace import PartitionedNamespace, TableCommit
from partitioning.state.commits import finish_properties, stage_properties, unstage_properties
from partitioning.storage.alignment import COMMIT_MESSAGE, is_aligned, latest_keeping_indexes
from partitioning.storage.datasets import DEFAULT_COMMIT_ATTEMPTS
from partitioning.storage.guard import Guard
from partitioning.storage.history import Operation
from partitioning.storage.manifest import SCHEMA_KEY
from partitioning.tables.backfill import TEMP_PREFIX, BackfillColumns, TablePlan, WrittenFragment
from partitioning.tables.write import PARALLEL_COMMITS, CommitResult, already_committed

__all__ = ["BackfillResult", "Recompute", "Rewritten", "commit_backfill"]

_TOMBSTONE = -2
RERUNS = 4  # times the tables another writer rewrote are backfilled again before the commit gives up

Recompute = Callable[[Sequence[str]], tuple[list[TablePlan], list[WrittenFragment]]]
"""Backfill these tables (object ids) again at the versions ``__manifest`` records now."""


class Rewritten(ConcurrentModification):
    """A fragment the backfill read was rewritten (compaction, update) before its commit."""

    def __init__(self, message: str, object_id: str) -> None:
        super().__init__(message)
        self.object_id = object_id


@dataclass(frozen=True)
class BackfillResult(CommitResult):
    """What a backfill did: the columns it added and replaced, the fragments and rows it
    computed, the bytes of the new files; ``rows_left_null``: rows appended by another
    writer while it ran (its commit kept them, without values in the new columns);
    ``indexes_dropped``: (partition table, index) pairs dropped because they indexed a
    replaced column."""

    columns_added: tuple[str, ...] = ()
    columns_replaced: tuple[str, ...] = ()
    fragments_backfilled: int = 0
    rows_backfilled: int = 0
    bytes_written: int = 0
    rows_left_null: int = 0
    indexes_dropped: tuple[tuple[str, str], ...] = ()
    seconds: float = 0.0

    def summary(self) -> str:
        if self.skipped:
            return super().summary()
        parts = [f"added {', '.join(self.columns_added)}" if self.columns_added else ""]
        parts.append(f"replaced {', '.join(self.columns_replaced)}" if self.columns_replaced else "")
        what = "; ".join(p for p in parts if p)
        tail = f"; {self.rows_left_null:,} rows appended meanwhile left NULL" if self.rows_left_null else ""
        dropped = f"; {len(self.indexes_dropped)} indexes on replaced columns dropped" if self.indexes_dropped else ""
        return (
            f"{self.root}: backfill ({what}): {self.rows_backfilled:,} rows in {self.fragments_backfilled} fragments "
            f"of {self.partitions_touched} partitions, {self.bytes_written:,} bytes written, "
            f"__manifest v{self.manifest_version}, {self.seconds:.1f} s{tail}{dropped}"
        )


@dataclass(frozen=True)
class _Committed:
    commit: TableCommit
    left_null: int
    dropped: tuple[str, ...]


def commit_backfill(
    ns: PartitionedNamespace,
    columns: BackfillColumns,
    plans: Sequence[TablePlan],
    written: Sequence[WrittenFragment],
    *,
    write_id: str | None,
    guard: Guard | None,
    operation: Operation,
    started: float,
    attempts: int = DEFAULT_COMMIT_ATTEMPTS,
    recompute: Recompute | None = None,
) -> BackfillResult:
    """Commit what the tasks wrote: one version per table, then ONE visible ``__manifest``
    commit (see the module's docstring). ``recompute`` backfills again the tables another
    writer rewrote meanwhile (at most :data:`RERUNS` times)."""
    plans, written = list(plans), list(written)
    last: ConcurrentModification | None = None
    reruns = 0
    attempt = 0
    while attempt < attempts:
        attempt += 1
        by_table = _by_table(plans, written)
        rows, written_bytes = sum(w.rows for w in written), sum(w.bytes_written for w in written)
        ns.refresh(guard=guard)
        skipped = already_committed(ns, "backfill", write_id)
        if skipped is not None:
            return BackfillResult(**{**skipped.__dict__})
        if ns.namespace_schema.to_json() != columns.before.to_json():
            raise ConcurrentModification(
                f"the schema of {ns.root} changed while the backfill ran; nothing was committed, run it again"
            )
        now = ns.tables_by_id(p.table.object_id for p in plans)
        gone = [p.table.object_id for p in plans if p.table.object_id not in now]
        if gone:
            raise ConcurrentModification(
                f"partition table {gone[0]} was removed while the backfill ran; nothing was committed, run it again"
            )

        with ThreadPoolExecutor(max_workers=max(1, min(PARALLEL_COMMITS, len(plans)))) as pool:
            versions = [now[p.table.object_id].read_version for p in plans]
            tables = [by_table[p.table.object_id] for p in plans]
            outcomes = list(
                pool.map(
                    _merged_or_rewritten,
                    plans,
                    versions,
                    tables,
                    [columns] * len(plans),
                    [ns.storage_options] * len(plans),
                )
            )
        rewritten = [o for o in outcomes if isinstance(o, Rewritten)]
        if rewritten:
            if recompute is None or reruns >= RERUNS:
                raise ConcurrentModification(
                    f"backfill of {ns.root}: {rewritten[0]} (another writer rewrote it {reruns + 1} time(s)); "
                    "nothing was committed, run it again"
                ) from rewritten[0]
            reruns += 1
            attempt -= 1  # a rerun is not a lost commit race
            again = {o.object_id for o in rewritten}
            fresh_plans, fresh = recompute(sorted(again))
            plans = [p for p in plans if p.table.object_id not in again] + fresh_plans
            written = [w for w in written if w.object_id not in again] + fresh
            continue
        done = [o for o in outcomes if isinstance(o, _Committed)]
        recorded_op = operation.with_metrics(
            rows_backfilled=rows,
            bytes_added=written_bytes,
            files_added=len(written),
            partitions_touched=len(done),
            columns_added=len(columns.added),
            columns_replaced=len(columns.replaced),
        ).timed(started)
        token = None
        try:
            token = _stage(ns, columns, operation) if columns.added else None
            version = ns.commit_once(
                [d.commit for d in done], write_id=write_id, operation=recorded_op, guard=guard, applied=token
            )
        except ConcurrentModification as exc:
            last = exc
            if token is not None:
                unstage_properties(ns._store, token, operation)
            time.sleep(random.uniform(0.01, 0.05) * attempt)
            continue
        if token is not None:
            finish_properties(ns._store, operation)
            ns.refresh()
        return BackfillResult(
            root=ns.root,
            mode="backfill",
            manifest_version=version,
            partitions_touched=len(done),
            fragments_written=len(written),
            attempts=attempt,
            write_id=write_id,
            columns_added=columns.added,
            columns_replaced=columns.replaced,
            fragments_backfilled=len(written),
            rows_backfilled=rows,
            bytes_written=written_bytes,
            rows_left_null=sum(d.left_null for d in done),
            indexes_dropped=tuple((d.commit.object_id or "", name) for d in done for name in d.dropped),
            seconds=time.monotonic() - started,
        )
    raise ConcurrentModification(
        f"backfill of {ns.root} gave up after {attempts} __manifest commit attempts lost to concurrent writers; "
        f"nothing of it is visible (last conflict: {last})"
    ) from last


def _by_table(plans: Sequence[TablePlan], written: Sequence[WrittenFragment]) -> dict[str, dict[int, WrittenFragment]]:
    """The written fragments by table and fragment id; every planned fragment must be there."""
    by_table: dict[str, dict[int, WrittenFragment]] = {}
    for w in written:
        by_table.setdefault(w.object_id, {})[w.fragment_id] = w
    for plan in plans:
        missing = [fid for fid, _ in plan.fragments if fid not in by_table.get(plan.table.object_id, {})]
        if missing:
            raise PartitioningError(f"backfill of {plan.label}: fragment {missing[0]} was not written")
    return by_table


def _merged_or_rewritten(
    plan: TablePlan,
    recorded: int | None,
    written: Mapping[int, WrittenFragment],
    columns: BackfillColumns,
    storage_options: Mapping[str, str] | None,
) -> _Committed | Rewritten:
    try:
        return _merged(plan, recorded, written, columns, storage_options)
    except Rewritten as exc:
        return exc


def _stage(ns: PartitionedNamespace, columns: BackfillColumns, operation: Operation) -> str:
    """Stage the namespace's properties with the new schema; the token to apply."""
    props = {**ns._state.metadata, SCHEMA_KEY: columns.after.to_json()}
    token = stage_properties(ns._store, ns._store.dataset(ns.manifest_version), props, operation)
    ns.refresh()
    return token


def _files(meta: Any) -> list[str]:
    return [f.path for f in meta.files]


def _merged(
    plan: TablePlan,
    recorded: int | None,
    written: Mapping[int, WrittenFragment],
    columns: BackfillColumns,
    storage_options: Mapping[str, str] | None,
) -> _Committed:
    """Commit one table's new files as ONE Lance ``Merge`` on the version ``__manifest``
    records now (``recorded``), or raise :class:`ConcurrentModification`."""
    uri, oid = plan.table.uri, plan.table.object_id
    if recorded is None:
        raise ConcurrentModification(f"{plan.label} is read from a branch or tag now; nothing was committed")
    opts = dict(storage_options) if storage_options else None
    with translate_lance_errors(f"backfill {plan.label}"):
        read_files = plan.files
        schema = pickle.loads(next(iter(written.values())).lance_schema)
        remap, dead = _replacement_ids(schema, columns)
        final = _without_temp(schema)
        names = columns.before.arrow.names
        last: ConcurrentModification | None = None
        for _ in range(DEFAULT_COMMIT_ATTEMPTS):
            moved = recorded != plan.table.read_version
            try:  # its Restore of the recorded version can lose to another commit: look again
                with translate_lance_errors(f"open partition table {oid}"):
                    head = latest_keeping_indexes(uri, recorded if moved else plan.version, opts)
            except ConcurrentModification as exc:
                last = exc
                continue
            if moved and (not is_aligned(head, columns.before) or _ids(head.lance_schema) != _ids(schema, names)):
                raise ConcurrentModification(
                    f"{plan.label} changed its columns while the backfill ran; nothing was committed, run it again"
                )
            fragments, left, now = [], 0, set()
            for fragment in head.get_fragments():
                meta, fid = fragment.metadata, fragment.fragment_id
                now.add(fid)
                if fid not in read_files:
                    left += fragment.count_rows()
                    fragments.append(meta)
                    continue
                if tuple(_files(meta)) != read_files[fid]:
                    raise Rewritten(f"{plan.label}: fragment {fid} was rewritten (compacted or updated)", oid)
                fragments.append(_with_new_file(written[fid].fragment, meta, remap, dead))
            if left and set(read_files) - now:
                raise Rewritten(f"{plan.label}: fragments were rewritten (compacted or updated)", oid)
            try:
                with translate_lance_errors(f"commit the backfill of {plan.label}"):
                    ds = lance.LanceDataset.commit(
                        uri,
                        LanceOperation.Merge(fragments, final),
                        read_version=head.version,
                        storage_options=opts,
                        commit_message=COMMIT_MESSAGE,
                    )
            except ConcurrentModification as exc:  # Lance's own conflict check: look at the table again
                last = exc
                continue
            if ds.version != head.version + 1:
                last = ConcurrentModification(f"{uri}: another commit landed before version {ds.version}")
                continue
            dropped = tuple(i.name for i in ds.describe_indices() if set(i.fields) & dead) if dead else ()
            for name in dropped:
                ds.drop_index(name)
            if dropped:
                ds = lance.dataset(uri, storage_options=opts)
            t = plan.table
            return _Committed(TableCommit(t.spec_id, t.values, t.location, int(ds.version), oid), left, dropped)
    raise ConcurrentModification(
        f"backfill of {plan.label}: other commits to its dataset kept landing first "
        f"({DEFAULT_COMMIT_ATTEMPTS} attempts); nothing was committed, run it again"
    ) from last


def _flat(fields: Sequence[Any]) -> list[Any]:
    out = []
    for f in fields:
        out.append(f)
        out.extend(_flat(f.children()))
    return out


def _ids(schema: LanceSchema, only: Sequence[str] | None = None) -> list[tuple[str, int]]:
    """(name, Lance id) of every field, pre-order; ``only``: of these top-level columns."""
    fields = [f for f in schema.fields() if only is None or f.name() in only]
    return [(f.name(), f.id()) for f in _flat(fields)]


def _replacement_ids(schema: LanceSchema, columns: BackfillColumns) -> tuple[dict[int, int], set[int]]:
    """Lance field ids: each temporary column's (and its children's) -> the replaced
    column's; and the replaced ids, to tombstone in the old files."""
    remap: dict[int, int] = {}
    for name in columns.replaced:
        temp, old = schema.field(TEMP_PREFIX + name), schema.field(name)
        if temp is None or old is None:
            raise PartitioningError(f"backfill: the written files have no column {name!r} to replace")
        new_ids, old_ids = [f.id() for f in _flat([temp])], [f.id() for f in _flat([old])]
        if len(new_ids) != len(old_ids):
            raise PartitioningError(f"backfill: column {name!r} was written with a different shape")
        remap.update(zip(new_ids, old_ids, strict=True))
    return remap, set(remap.values())


def _without_temp(schema: LanceSchema) -> LanceSchema:
    """``schema`` without the temporary columns (Lance keeps its fields as flat protos, in
    pre-order; the others keep their ids)."""
    flat = _flat(schema.fields())
    doomed = {f.id() for top in schema.fields() if top.name().startswith(TEMP_PREFIX) for f in _flat([top])}
    if not doomed:
        return schema
    reduced: Any = schema.__reduce__()
    metadata, *protos = reduced[1]
    if len(protos) != len(flat):
        raise PartitioningError("backfill: cannot read the Lance schema's fields")
    kept = [p for f, p in zip(flat, protos, strict=True) if f.id() not in doomed]
    return LanceSchema._from_protos(metadata, *kept)


def _with_new_file(written: Mapping[str, Any], head: Any, remap: Mapping[int, int], dead: set[int]) -> FragmentMetadata:
    """The written fragment, its new file pointed at the replaced columns' ids and the old
    files' copies tombstoned, with ``head``'s deletion vector (rows deleted meanwhile stay deleted)."""
    meta = json.loads(json.dumps(written))
    old = set(_files(head))
    for data_file in meta["files"]:
        if data_file["path"] in old:
            data_file["fields"] = [_TOMBSTONE if i in dead else i for i in data_file["fields"]]
        else:
            data_file["fields"] = [remap.get(i, i) for i in data_file["fields"]]
    meta["deletion_file"] = head.to_json().get("deletion_file")
    return FragmentMetadata.from_json(json.dumps(meta))
