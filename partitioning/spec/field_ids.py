"""Field ids on Arrow fields: reading them, handing them out depth-first, and stripping them.

Every field of a namespace schema, nested ones included, carries a stable id under
``lance:field_id`` in its metadata. Partition datasets carry each top-level column's id
under :data:`DATASET_FIELD_ID_KEY` instead, because Lance consumes ``lance:field_id``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

__all__ = [
    "DATASET_FIELD_ID_KEY",
    "FIELD_ID_KEY",
    "MAP_ENTRIES_ID_KEY",
    "all_field_ids",
    "children_of",
    "dataset_field_id",
    "field_id_of",
    "strip_lance_metadata",
    "walk_fields",
    "with_field_ids",
]


FIELD_ID_KEY = "lance:field_id"

# Lance consumes ``lance:field_id`` when it writes a dataset (pylance 14 drops the key), so
# partition datasets carry the namespace id of each top-level column under this key.
DATASET_FIELD_ID_KEY = "lance_partitioned:field_id"

# Arrow rebuilds a map's "entries" field, so its id is parked on the map field in memory.
MAP_ENTRIES_ID_KEY = "lance:map_entries_field_id"


def children_of(t: pa.DataType) -> list[pa.Field]:
    """The child fields of a struct, list or map type (none for other types)."""
    if pa.types.is_struct(t):
        return [t.field(i) for i in range(t.num_fields)]
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return [t.value_field]
    if pa.types.is_map(t):
        return [t.key_field, t.item_field]
    return []


def walk_fields(fields: list[pa.Field]) -> Iterator[pa.Field]:
    """Every field and, after it, its descendants (pre-order)."""
    for f in fields:
        yield f
        yield from walk_fields(children_of(f.type))


def all_field_ids(fields: list[pa.Field]) -> list[int]:
    """Every field id in the fields and their descendants, map entries included."""
    ids: list[int] = []
    for f in walk_fields(fields):
        fid = field_id_of(f)
        if fid is not None:
            ids.append(fid)
        raw = (f.metadata or {}).get(MAP_ENTRIES_ID_KEY.encode())
        if raw is not None:
            ids.append(int(raw))
    return ids


def field_id_of(f: pa.Field) -> int | None:
    raw = (f.metadata or {}).get(FIELD_ID_KEY.encode())
    return int(raw) if raw is not None else None


def with_field_ids(f: pa.Field, counter: list[int]) -> pa.Field:
    """The field with an id from ``counter`` on it and each descendant that lacks one.

    Pre-order: a field gets its id before its children do.
    """
    meta = {k.decode(): v.decode() for k, v in (f.metadata or {}).items()}
    if FIELD_ID_KEY not in meta:
        meta[FIELD_ID_KEY] = str(counter[0])
        counter[0] += 1
    t = f.type
    if pa.types.is_struct(t):
        t = pa.struct([with_field_ids(c, counter) for c in children_of(t)])
    elif pa.types.is_list(t) and not pa.types.is_fixed_size_list(t):
        t = pa.list_(with_field_ids(t.value_field, counter))
    elif pa.types.is_large_list(t):
        t = pa.large_list(with_field_ids(t.value_field, counter))
    elif pa.types.is_fixed_size_list(t):
        t = pa.list_(with_field_ids(t.value_field, counter), t.list_size)
    elif pa.types.is_map(t):
        if MAP_ENTRIES_ID_KEY not in meta:
            meta[MAP_ENTRIES_ID_KEY] = str(counter[0])
            counter[0] += 1
        t = pa.map_(with_field_ids(t.key_field, counter), with_field_ids(t.item_field, counter))
    return f.with_type(t).with_metadata(meta)


def dataset_field_id(f: pa.Field) -> int | None:
    """The namespace id a partition dataset's column was written for, if recorded."""
    raw = (f.metadata or {}).get(DATASET_FIELD_ID_KEY.encode())
    return int(raw) if raw is not None else None


def strip_lance_metadata(f: pa.Field) -> pa.Field:
    """The field and its descendants without ``lance:`` metadata (field ids and kept units)."""
    meta = {k: v for k, v in (f.metadata or {}).items() if not k.startswith(b"lance:")}
    t = f.type
    if pa.types.is_struct(t):
        t = pa.struct([strip_lance_metadata(c) for c in children_of(t)])
    elif pa.types.is_fixed_size_list(t):
        t = pa.list_(strip_lance_metadata(t.value_field), t.list_size)
    elif pa.types.is_large_list(t):
        t = pa.large_list(strip_lance_metadata(t.value_field))
    elif pa.types.is_list(t):
        t = pa.list_(strip_lance_metadata(t.value_field))
    elif pa.types.is_map(t):
        t = pa.map_(strip_lance_metadata(t.key_field), strip_lance_metadata(t.item_field))
    return f.with_type(t).with_metadata(meta or None)
