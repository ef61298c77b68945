"""Reading a ``__manifest`` version's rows, in full or only what changed since an earlier read.

A commit that lost a race reads the version that won it. Most of that version is what the
loser had already read: fragments with the same data files and deletions hold the same
rows at the same addresses. :func:`read_rows` with ``previous`` reads only the fragments
that are new, and for a fragment that only gained deletions, only which of its rows are
still live (Lance's row addresses, no column data). The result is the rows, in the order
and with the addresses a full read gives.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import lance
import pyarrow as pa
import pyarrow.compute as pc

from partitioning.errors import translate_lance_errors
from partitioning.storage.alignment import fragment_state
from partitioning.storage.manifest import ROW_ADDRESS, ManifestStore

__all__ = ["ReadRows", "read_rows"]


@dataclass(frozen=True)
class ReadRows:
    """One ``__manifest`` version's rows as Lance read them: each row's address
    (``fragment id << 32 | offset``) and each fragment's files and deletions."""

    uri: str
    version: int
    rows: pa.Table
    addresses: pa.Array
    fragments: Mapping[int, tuple[Any, ...]]


def read_rows(ds: lance.LanceDataset, previous: ReadRows | None = None) -> ReadRows:
    """Every row of ``ds``'s version with its address; given ``previous`` (a read of an older
    version of the same ``__manifest`` with the same columns), only what changed is read."""
    fragments = ds.get_fragments()
    states = {f.fragment_id: fragment_state(f.metadata) for f in fragments}
    usable = (
        previous is not None
        and previous.uri == ds.uri
        and previous.version < ds.version
        and previous.rows.schema.remove_metadata() == ds.schema.remove_metadata()
    )
    if not usable or previous is None:
        read = ManifestStore.rows_of(ds, with_row_address=True)
        return ReadRows(ds.uri, ds.version, read.drop_columns([ROW_ADDRESS]), _one_chunk(read), states)
    fragment_of = pc.shift_right(previous.addresses, 32)
    pieces: list[pa.Table] = []
    addresses: list[pa.Array] = []
    for f in fragments:
        before = previous.fragments.get(f.fragment_id)
        now = states[f.fragment_id]
        if before is None or before[0] != now[0] or before[2] != now[2]:
            with translate_lance_errors(f"read {ds.uri}"):
                read = f.to_table(with_row_address=True)
            pieces.append(read.drop_columns([ROW_ADDRESS]).replace_schema_metadata(None))
            addresses.append(_one_chunk(read))
            continue
        mask = pc.equal(fragment_of, f.fragment_id)
        if before != now:
            with translate_lance_errors(f"read {ds.uri}"):
                live = f.to_table(columns=[], with_row_address=True).column(ROW_ADDRESS)
            mask = pc.and_(mask, pc.is_in(previous.addresses, value_set=live))
        pieces.append(previous.rows.filter(mask).replace_schema_metadata(None))
        addresses.append(previous.addresses.filter(mask))
    rows = pa.concat_tables(pieces) if pieces else previous.rows.slice(0, 0)
    all_addresses = pa.concat_arrays(addresses) if addresses else previous.addresses.slice(0, 0)
    return ReadRows(ds.uri, ds.version, rows.replace_schema_metadata(ds.schema.metadata), all_addresses, states)


def _one_chunk(read: pa.Table) -> pa.Array:
    return read.column(ROW_ADDRESS).combine_chunks()
