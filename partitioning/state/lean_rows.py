"""A large ``__manifest`` version looked up without reading all of it.

Reading every column of a 20,000-partition ``__manifest`` (40,000 rows) takes about
12 ms in a fresh process, most of it the long ``object_id`` and ``location`` strings,
while a commit into one partition needs three of its rows. :class:`LeanRows` reads the
partition columns and each row's address first (about 5 ms; ``object_type`` would add
2-5 ms), narrows them with the same vectorised filters as :mod:`partitioning.state.lookup` to
the rows holding the keys or a prefix of them, and fetches those whole rows by address
in one read; the type of each is then told from the row. Lookups by id, and of who holds a location, read the
``object_id`` and ``location`` columns, once. Every answer is exact: candidates are a
superset, matched the way a full read is.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

import lance
import pyarrow as pa
import pyarrow.compute as pc

from partitioning.spec.partition_spec import PartitionSpec
from partitioning.state.lookup import match_namespace_rows, match_table_rows, prefix_mask
from partitioning.storage.manifest import ROW_ADDRESS, ManifestStore

__all__ = ["LEAN_MIN_ROWS", "MAX_FETCH", "LeanRows", "plain_row"]

# A version with fewer rows is read whole (it is cheap, and every lookup then needs no read).
LEAN_MIN_ROWS = 4_096
# More candidates than this for one lookup: the caller reads the whole version instead.
MAX_FETCH = 512


class LeanRows:
    """One ``__manifest`` version (``ds``, opened at it) read a few columns and rows at a time.

    Shared by every user of the version's state: what it has read is kept, under a lock."""

    def __init__(self, ds: lance.LanceDataset, partition_columns: Sequence[str]) -> None:
        self._ds = ds
        self._columns = list(partition_columns)
        self._lock = threading.Lock()
        self._keys: pa.Table | None = None
        self._ids: pa.Table | None = None
        self._rows: dict[int, dict[str, Any]] = {}

    @property
    def keys(self) -> pa.Table:
        """Every partition column and the row address of every row."""
        with self._lock:
            if self._keys is None:
                self._keys = ManifestStore.rows_of(self._ds, self._columns, with_row_address=True)
            return self._keys

    def _fetch(self, addresses: Iterable[int]) -> list[dict[str, Any]]:
        """Whole rows (with their address) at ``addresses``, in that order."""
        wanted = list(dict.fromkeys(addresses))
        with self._lock:
            missing = [a for a in wanted if a not in self._rows]
        if missing:
            got = ManifestStore.rows_of(
                self._ds, filter=f"{ROW_ADDRESS} IN ({', '.join(str(int(a)) for a in missing)})", with_row_address=True
            )
            with self._lock:
                for row in got.to_pylist():
                    self._rows[row[ROW_ADDRESS]] = row
        with self._lock:
            return [self._rows[a] for a in wanted if a in self._rows]

    def _around(self, spec: PartitionSpec, keys: Collection[Any]) -> list[dict[str, Any]] | None:
        """The whole rows that may be the tables of ``keys`` or namespaces above them
        (:func:`partitioning.state.lookup.prefix_mask`), read in one fetch that serves both
        lookups of a commit; None when more than :data:`MAX_FETCH`."""
        keys_table = self.keys
        mask = prefix_mask(keys_table, spec, keys)
        addresses = keys_table.column(ROW_ADDRESS) if mask is None else keys_table.column(ROW_ADDRESS).filter(mask)
        if len(addresses) > MAX_FETCH:
            return None
        return _plain(self._fetch(addresses.to_pylist()))

    def table_rows(self, spec: PartitionSpec, keys: Collection[Any]) -> dict[Any, dict[str, Any]] | None:
        """As :func:`partitioning.state.lookup.table_rows_for_keys` over the whole version; None when
        the keys narrow to more than :data:`MAX_FETCH` rows."""
        if not keys:
            return {}
        rows = self._around(spec, keys)
        return None if rows is None else match_table_rows(rows, spec, keys)

    def namespace_rows(self, spec: PartitionSpec, keys: Collection[Any]) -> dict[tuple[str, Any], str] | None:
        """As :func:`partitioning.state.lookup.namespace_rows` for ``keys``; None when too many candidates."""
        rows = self._around(spec, keys)
        return None if rows is None else match_namespace_rows(rows, spec, keys)

    def rows_by_id(self, object_ids: Collection[str]) -> dict[str, list[dict[str, Any]]] | None:
        """The rows with these ids (each id: its rows, with their addresses; several if another
        client duplicated it); None when too many.

        An id among the rows a key lookup already fetched is answered from them (a copy of
        it under another type or other partition values, which only a damaged manifest
        holds, is not looked for); any other id is looked up in the ``object_id`` column,
        read once, which also tells that an id is absent."""
        wanted = set(object_ids)
        out: dict[str, list[dict[str, Any]]] = {}
        with self._lock:
            for row in self._rows.values():
                if row["object_id"] in wanted:
                    out.setdefault(row["object_id"], []).append(row)
        rest = wanted - out.keys()
        if not rest:
            return out
        more = self._by_id_column(rest)
        return None if more is None else {**out, **more}

    def _ids_and_locations(self) -> pa.Table:
        """``object_id``, ``location`` and the address of every row: one scan, read once (a new
        partition's commit needs both: that its ids are in no row, and its location in none)."""
        with self._lock:
            if self._ids is None:
                self._ids = ManifestStore.rows_of(self._ds, ["object_id", "location"], with_row_address=True)
            return self._ids

    def _by_id_column(self, object_ids: Collection[str]) -> dict[str, list[dict[str, Any]]] | None:
        ids = self._ids_and_locations()
        mask = pc.is_in(ids.column("object_id"), value_set=pa.array(sorted(object_ids), pa.string()))
        addresses = ids.column(ROW_ADDRESS).filter(mask)
        if len(addresses) > MAX_FETCH:
            return None
        out: dict[str, list[dict[str, Any]]] = {}
        for row in self._fetch(addresses.to_pylist()):
            out.setdefault(row["object_id"], []).append(row)
        return out

    def location_holders(self, locations: Collection[str]) -> list[tuple[str, str]]:
        """``(object_id, location)`` of every row whose location is one of ``locations``."""
        ids = self._ids_and_locations()
        held = ids.filter(pc.is_in(ids.column("location"), value_set=pa.array(sorted(locations), pa.string())))
        return list(zip(held.column("object_id").to_pylist(), held.column("location").to_pylist(), strict=True))


def plain_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """A fetched row without its address column, as a full read gives it."""
    return {k: v for k, v in row.items() if k != ROW_ADDRESS}


def _plain(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [plain_row(r) for r in rows]
