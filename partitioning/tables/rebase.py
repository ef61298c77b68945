"""Rebasing a row-level change onto commits that landed after it read its tables.

An update, delete, merge or replace-where reads partition tables at the versions
``__manifest`` recorded (its read set), decides which rows go (Lance row addresses) and
which come in, and commits. When other writers committed to those tables meanwhile, the
change need not run again if nothing it depended on changed, like Delta's
WriteSerializable with its conflict detection and Iceberg's conflict detection filter:

- every fragment it deletes rows from is still there with the same files (no compaction
  moved its rows) and every row it deletes is still there (another delete or update
  removed other rows only);
- no row of the fragments that are new since (appends, rows another update or a
  compaction wrote) is one it would change: :class:`Touches` evaluates its condition (and,
  for a merge, its source keys) on those rows only;
- every other fragment it read changed at most by losing rows (another delete).

:func:`conflict` says which of these fails (one line), or None: the commit then goes on
the latest recorded versions, keeping the other writers' rows
(:func:`partitioning.tables.rewrites.commit_rewrite`). A table created since, inside the read
set, is all new rows; a table removed since conflicts only if the change deletes from it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import lance
import pyarrow as pa
import pyarrow.compute as pc

from partitioning.errors import CorruptNamespace, InvalidInput, translate_lance_errors
from partitioning.namespace import PartitionedNamespace
from partitioning.sql.binding import bind
from partitioning.sql.filters import Dialect, Filter, TrueFilter, columns_of, is_exactly_understood
from partitioning.sql.from_sql import parse_filter
from partitioning.sql.rowfilter import arrow_predicate
from partitioning.storage.alignment import dataset_columns, reconcile

__all__ = ["Touches", "conflict"]

_OFFSET_BITS = 32


@dataclass(frozen=True, eq=False)
class Touches:
    """The rows a change would change: those ``condition`` selects (a bound filter, Spark's
    semantics; :class:`TrueFilter`: every row) and, with ``keys`` (key columns, no NULLs),
    whose key is one of ``keys``' rows.

    ``blind_appends``: for a change whose condition cannot be known here (a SQL ``MERGE``,
    whose ``ON`` never reaches the connector), rows another writer only appended (no row
    of the table deleted or moved since) are ordered after the change, as Delta's
    WriteSerializable orders a blind ``INSERT`` after a ``MERGE``; they are not checked."""

    condition: Filter
    keys: pa.Table | None = None
    blind_appends: bool = False

    @classmethod
    def of_sql(cls, text: str | None, dialect: Dialect, schema: pa.Schema, keys: pa.Table | None = None) -> Touches:
        """The rows ``text`` (SQL in ``dialect``) selects; a condition this process cannot
        evaluate exactly counts every row (any new row then conflicts)."""
        try:
            bound = bind(parse_filter(text, dialect), schema, dialect)
            if not is_exactly_understood(bound):
                return cls(TrueFilter(), keys)
            arrow_predicate(bound, schema)  # refuses what it cannot evaluate exactly
        except InvalidInput:
            return cls(TrueFilter(), keys)
        return cls(bound, keys)

    @classmethod
    def of_filter(cls, condition: Filter, schema: pa.Schema, *, blind_appends: bool = False) -> Touches:
        """The rows a bound ``condition`` selects (every row where it is not exactly understood)."""
        try:
            if is_exactly_understood(condition):
                arrow_predicate(condition, schema)
                return cls(condition, blind_appends=blind_appends)
        except InvalidInput:
            pass
        return cls(TrueFilter(), blind_appends=blind_appends)

    def columns(self, schema: pa.Schema) -> list[str]:
        named = columns_of(self.condition)
        if self.keys is not None:
            named.update(self.keys.column_names)
        return [n for n in schema.names if n in named]

    def count(self, rows: pa.Table, schema: pa.Schema) -> int:
        """How many of ``rows`` (the :meth:`columns`, reconciled to the namespace schema) it touches."""
        if not isinstance(self.condition, TrueFilter):
            rows = rows.filter(arrow_predicate(self.condition, schema))
        if self.keys is None or rows.num_rows == 0:
            return rows.num_rows
        names = self.keys.column_names
        try:
            keys = self.keys.cast(pa.schema([schema.field(n) for n in names]))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, KeyError):
            return rows.num_rows  # keys that do not compare as the table's: every row counts
        if len(names) == 1:
            return int(pc.sum(pc.is_in(rows.column(names[0]), value_set=keys.column(0))).as_py() or 0)
        return rows.select(names).join(keys.group_by(names).aggregate([]), names, join_type="left semi").num_rows


def conflict(
    ns: PartitionedNamespace,
    read: Mapping[str, int],
    now: Mapping[str, int],
    deletions: Mapping[str, Sequence[int]],
    touches: Touches,
) -> str | None:
    """Why the change that read ``read`` (object_id -> version) and deletes ``deletions``
    cannot commit on ``now`` (the same read set planned on ``ns``, the latest state), or None."""
    for object_id in read:
        if object_id not in now and deletions.get(object_id):
            return f"partition table {object_id}, which this change deletes rows from, was removed"
    moved = {oid: v for oid, v in now.items() if read.get(oid) != v}
    tables = ns.tables_by_id(moved)
    for object_id, version in sorted(moved.items()):
        table = tables.get(object_id)
        if table is None:
            return f"partition table {object_id} changed"
        reason = _table_conflict(
            ns, table.uri, object_id, read.get(object_id), version, deletions.get(object_id, ()), touches
        )
        if reason is not None:
            return reason
    return None


def _state(fragment: Any) -> str:
    return json.dumps(fragment.metadata.to_json(), sort_keys=True, default=str)


def _table_conflict(
    ns: PartitionedNamespace,
    uri: str,
    object_id: str,
    before: int | None,
    after: int,
    addresses: Sequence[int],
    touches: Touches,
) -> str | None:
    options = dict(ns.storage_options) if ns.storage_options else None
    with translate_lance_errors(f"open partition table {object_id}", missing=CorruptNamespace):
        then = [] if before is None else lance.dataset(uri, before, storage_options=options).get_fragments()
        old = {f.fragment_id: _state(f) for f in then}
        ds = lance.dataset(uri, after, storage_options=options)
        current = {f.fragment_id: f for f in ds.get_fragments()}
    by_fragment: dict[int, set[int]] = {}
    for address in addresses:
        by_fragment.setdefault(int(address) >> _OFFSET_BITS, set()).add(int(address))
    for fid, mine in sorted(by_fragment.items()):
        fragment = current.get(fid)
        unchanged = fragment is not None and _state(fragment) == old.get(fid)
        if not unchanged and (fragment is None or fid not in old or _files(fragment) != _files_of(old[fid])):
            return f"partition table {object_id}: fragment {fid}, which this change deletes rows from, was rewritten"
        if not unchanged and not mine <= _live(ds, fragment, object_id):
            return f"partition table {object_id}: rows this change deletes were deleted after version {before}"
    new = []
    for fid, fragment in current.items():
        if fid not in old:
            new.append(fragment)
        elif _state(fragment) != old[fid] and _files(fragment) != _files_of(old[fid]):
            return f"partition table {object_id}: fragment {fid} was rewritten in place after version {before}"
    if not new or (touches.blind_appends and all(_state(current[fid]) == state for fid, state in old.items())):
        return None
    schema = ns.namespace_schema
    needed = touches.columns(schema.arrow)
    if not needed:  # every row counts
        touched = sum(f.count_rows() for f in new)
        return None if not touched else _touched(object_id, touched, before)
    mapping = dataset_columns(ds.schema, schema)
    with translate_lance_errors(f"scan partition table {object_id}", missing=CorruptNamespace):
        rows = ds.scanner(columns=[mapping[c] for c in needed if c in mapping], fragments=new).to_table()
    view = reconcile(rows, mapping, needed, schema, object_id)
    touched = touches.count(view, pa.schema([schema.arrow.field(c) for c in needed]))
    return None if not touched else _touched(object_id, touched, before)


def _touched(object_id: str, rows: int, before: int | None) -> str:
    since = "since it was created" if before is None else f"after version {before}"
    return f"partition table {object_id}: {rows} row(s) committed {since} are rows this change would change"


def _live(ds: lance.LanceDataset, fragment: Any, object_id: str) -> set[int]:
    """The row addresses of ``fragment``'s rows that are not deleted in ``ds``."""
    with translate_lance_errors(f"scan partition table {object_id}", missing=CorruptNamespace):
        rows = ds.scanner(columns=[], with_row_address=True, fragments=[fragment]).to_table()
    return {int(a) for a in rows.column("_rowaddr").to_pylist()}


def _files(fragment: Any) -> list[str]:
    return sorted(f.path for f in fragment.metadata.files)


def _files_of(state: str) -> list[str]:
    return sorted(f["path"] for f in json.loads(state)["files"])
