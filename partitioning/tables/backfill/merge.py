"""One partition table's share of a backfill: its new files committed as ONE Lance ``Merge``.

:func:`merged_or_rewritten` lists the dataset's fragments with the files the tasks wrote
(:mod:`partitioning.tables.backfill.plan`), points a replaced column's new copy at its Lance field id
(the old files' copy is tombstoned, Lance's ``-2``) and commits one version on the version
``__manifest`` records now, dropping indexes on replaced columns. Fragments another writer
only appended are kept (left NULL); a fragment it read that another writer rewrote makes the
table :class:`Rewritten`, for :func:`partitioning.tables.backfill.commit.commit_backfill` to
backfill again. Lance's own commit conflicts are retried, never shown.
"""

from __future__ import annotations

import json
import pickle
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import lance
from lance import LanceOperation
from lance.fragment import FragmentMetadata
from lance.schema import LanceSchema

from partitioning.errors import ConcurrentModification, PartitioningError, translate_lance_errors
from partitioning.namespace import TableCommit
from partitioning.spec.field_ids import field_id_of
from partitioning.stats.bounds import StatsChange, TableStats
from partitioning.storage.alignment import COMMIT_MESSAGE, is_aligned, latest_keeping_indexes
from partitioning.storage.datasets import DEFAULT_COMMIT_ATTEMPTS
from partitioning.tables.backfill.plan import TEMP_PREFIX, BackfillColumns, TablePlan, WrittenFragment

__all__ = ["Committed", "Rewritten", "merged_or_rewritten"]

_TOMBSTONE = -2


class Rewritten(ConcurrentModification):
    """A fragment the backfill read was rewritten (compaction, update) before its commit."""

    def __init__(self, message: str, object_id: str) -> None:
        super().__init__(message)
        self.object_id = object_id


@dataclass(frozen=True)
class Committed:
    commit: TableCommit
    left_null: int
    dropped: tuple[str, ...]


def merged_or_rewritten(
    plan: TablePlan,
    recorded: int | None,
    written: Mapping[int, WrittenFragment],
    columns: BackfillColumns,
    storage_options: Mapping[str, str] | None,
) -> Committed | Rewritten:
    try:
        return _merged(plan, recorded, written, columns, storage_options)
    except Rewritten as exc:
        return exc


def _stats_change(
    recorded: int, written: Iterable[WrittenFragment], columns: BackfillColumns, left: int
) -> StatsChange:
    """The table keeps its statistics but for the backfilled columns, whose statistics are the
    values written when every fragment got them; otherwise (rows left NULL in fragments
    appended meanwhile, a fragment without statistics) they are forgotten."""
    arrow = columns.after.arrow
    ids = frozenset(str(field_id_of(arrow.field(n))) for n in columns.names)
    parts = [TableStats.from_message(w.stats) if w.stats else None for w in written]
    if left or any(p is None for p in parts):
        return StatsChange(TableStats(0), recorded, forget=ids)
    whole = TableStats(0)
    for p in parts:
        assert p is not None
        whole = whole.merged(p)
    known = {fid: c for fid, c in whole.columns.items() if fid in ids}
    return StatsChange(TableStats(0), recorded, forget=ids, replace=known)


def _files(meta: Any) -> list[str]:
    return [f.path for f in meta.files]


def _merged(
    plan: TablePlan,
    recorded: int | None,
    written: Mapping[int, WrittenFragment],
    columns: BackfillColumns,
    storage_options: Mapping[str, str] | None,
) -> Committed:
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
            stats = _stats_change(recorded, written.values(), columns, left)
            return Committed(TableCommit(t.spec_id, t.values, t.location, int(ds.version), oid, stats), left, dropped)
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
