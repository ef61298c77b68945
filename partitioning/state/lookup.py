"""Find the ``__manifest`` rows a commit touches without decoding the others.

A commit into a table of 20,000 partitions touches one or a few of them. These
functions narrow the manifest's Arrow columns with vectorised filters first (a superset
of the rows wanted: a column whose values cannot be compared exactly in Arrow is not
used to narrow) and build Python objects only for the few candidates left, matching
them exactly the way :attr:`partitioning.state.namespace_state.NamespaceState.by_key` does.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from partitioning.spec.partition_spec import PartitionSpec
from partitioning.spec.values import canonical_float
from partitioning.storage.locations import PartitionKey, spec_id_of
from partitioning.storage.manifest import partition_column

__all__ = [
    "candidate_mask",
    "candidate_rows",
    "existing_locations",
    "match_namespace_rows",
    "match_table_rows",
    "namespace_mask",
    "namespace_rows",
    "prefix_mask",
    "rows_by_id",
    "table_rows_for_keys",
]


def _exact_python_type(t: pa.DataType) -> type | None:
    """The Python type whose values Arrow compares exactly with a column of type ``t`` (None: do not narrow)."""
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return str
    if pa.types.is_integer(t):
        return int
    if pa.types.is_date32(t):
        return dt.date
    if pa.types.is_boolean(t):
        return bool
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return bytes
    return None


def _narrowing(column: pa.ChunkedArray | pa.Array, values: Iterable[Any]) -> pa.Array | None:
    """Rows of ``column`` equal to one of ``values`` (NULL matching NULL), or None when the
    values cannot be compared exactly in Arrow (the caller keeps every row then)."""
    wanted = _exact_python_type(column.type)
    if wanted is None:
        return None
    present, has_null = set(), False
    for v in values:
        if v is None:
            has_null = True
            continue
        if type(v) is not wanted:
            return None
        present.add(v)
    try:
        value_set = pa.array(sorted(present, key=repr), type=column.type)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        return None
    mask = pc.is_in(column, value_set=value_set, skip_nulls=True)
    mask = pc.fill_null(mask, False)
    return pc.or_(mask, pc.is_null(column)) if has_null else mask


def candidate_mask(rows: pa.Table, columns: Sequence[str], keys: Collection[PartitionKey]) -> pa.Array | None:
    """Which rows of ``rows`` may hold one of ``keys`` in ``columns`` (a superset); None: all may."""
    mask = None
    for i, name in enumerate(columns):
        narrowed = _narrowing(rows.column(name), {k[i] for k in keys})
        if narrowed is not None:
            mask = narrowed if mask is None else pc.and_(mask, narrowed)
    return mask


def candidate_rows(rows: pa.Table, columns: Sequence[str], keys: Collection[PartitionKey]) -> pa.Table:
    """The rows of ``rows`` that may hold one of ``keys`` in ``columns`` (a superset)."""
    if not keys or rows.num_rows == 0:
        return rows.slice(0, 0)
    mask = candidate_mask(rows, columns, keys)
    return rows if mask is None else rows.filter(mask)


def _key_of(row: Mapping[str, Any], spec: PartitionSpec, level: int | None = None) -> PartitionKey:
    fields = spec.fields if level is None else spec.fields[:level]
    return tuple(canonical_float(row.get(partition_column(f.field_id))) for f in fields)


def table_rows_for_keys(
    rows: pa.Table, spec: PartitionSpec, keys: Collection[PartitionKey]
) -> dict[PartitionKey, dict[str, Any]]:
    """The table row of spec ``spec`` of each key in ``keys`` that exists, found among
    ``rows`` (the whole manifest, or that spec's rows of
    :attr:`partitioning.state.namespace_state.NamespaceState.table_rows`)."""
    columns = [partition_column(f.field_id) for f in spec.fields]
    wanted = set(keys)
    return match_table_rows(candidate_rows(rows, columns, wanted).to_pylist(), spec, wanted)


def match_table_rows(
    rows: Iterable[dict[str, Any]], spec: PartitionSpec, keys: Collection[PartitionKey]
) -> dict[PartitionKey, dict[str, Any]]:
    """Among candidate ``rows``, the table row of spec ``spec`` of each key in ``keys``."""
    wanted = set(keys)
    out: dict[PartitionKey, dict[str, Any]] = {}
    for row in rows:
        if row.get("object_type", "table") != "table" or spec_id_of(row["object_id"]) != spec.spec_id:
            continue
        key = _key_of(row, spec)
        if key in wanted:
            out[key] = row
    return out


def namespace_rows(
    manifest: pa.Table, spec: PartitionSpec, keys: Collection[PartitionKey] | None
) -> dict[tuple[str, PartitionKey], str]:
    """The partition namespaces of ``spec`` above any of ``keys`` (None: every one):
    ``(parent id, key prefix) -> name``, the names :class:`partitioning.storage.locations.LocationPlanner` reuses."""
    if not spec.fields or (keys is not None and not keys):
        return {}
    columns = [partition_column(f.field_id) for f in spec.fields]
    mask = namespace_mask(manifest, spec, keys, by_id=True)
    return match_namespace_rows(manifest.select(["object_id", *columns]).filter(mask).to_pylist(), spec, keys)


def namespace_mask(
    manifest: pa.Table, spec: PartitionSpec, keys: Collection[PartitionKey] | None, *, by_id: bool
) -> pa.Array:
    """Which rows may be namespaces of ``spec`` above ``keys`` (a superset; ``by_id``: narrowed
    by the ``object_id`` column too, which ``manifest`` then holds)."""
    mask = pc.equal(manifest.column("object_type"), "namespace")
    if by_id:
        mask = pc.and_(mask, pc.starts_with(manifest.column("object_id"), f"v{spec.spec_id}$"))
    around = prefix_mask(manifest, spec, keys)
    return mask if around is None else pc.and_(mask, around)


def prefix_mask(rows: pa.Table, spec: PartitionSpec, keys: Collection[PartitionKey] | None) -> pa.Array | None:
    """Which rows may hold one of ``keys``, or a prefix of one, in ``spec``'s partition columns
    (each column a key's value or NULL): the keys' tables and the namespaces above them, a
    superset whatever their type; None when every row may."""
    mask = None
    for i, name in enumerate(partition_column(f.field_id) for f in spec.fields):
        column = rows.column(name)
        narrowed = _narrowing(column, {k[i] for k in keys}) if keys is not None else None
        if narrowed is not None:
            around = pc.or_(narrowed, pc.is_null(column))
            mask = around if mask is None else pc.and_(mask, around)
    return mask


def match_namespace_rows(
    rows: Iterable[Mapping[str, Any]], spec: PartitionSpec, keys: Collection[PartitionKey] | None
) -> dict[tuple[str, PartitionKey], str]:
    """Among candidate ``rows``, the partition namespaces of ``spec`` above any of ``keys``."""
    if not spec.fields or (keys is not None and not keys):
        return {}
    prefixes = None if keys is None else {k[:level] for k in keys for level in range(1, len(spec.fields) + 1)}
    out = {}
    for row in rows:
        if row.get("object_type", "namespace") != "namespace":
            continue
        parts = row["object_id"].split("$")
        if parts[0] != f"v{spec.spec_id}" or len(parts) < 2:
            continue
        prefix = _key_of(row, spec, len(parts) - 1)
        if prefixes is None or prefix in prefixes:
            out[("$".join(parts[:-1]), prefix)] = parts[-1]
    return out


def rows_by_id(manifest: pa.Table, object_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
    """The manifest rows with these object ids, as dicts (ids not present are absent)."""
    wanted = sorted(set(object_ids))
    if not wanted:
        return {}
    mask = pc.is_in(manifest.column("object_id"), value_set=pa.array(wanted, pa.string()))
    return {r["object_id"]: r for r in manifest.filter(mask).to_pylist()}


def existing_locations(table_rows: pa.Table | None, spec: PartitionSpec) -> dict[PartitionKey, tuple[str, str]]:
    """``key -> (object_id, location)`` of every table of ``spec`` (its rows of
    :attr:`partitioning.state.namespace_state.NamespaceState.table_rows`), decoding only those columns."""
    if table_rows is None or table_rows.num_rows == 0:
        return {}
    columns = [partition_column(f.field_id) for f in spec.fields]
    ids = table_rows.column("object_id").to_pylist()
    locations = table_rows.column("location").to_pylist()
    values = [[canonical_float(v) for v in table_rows.column(c).to_pylist()] for c in columns]
    keys = zip(*values, strict=True) if values else ((),) * len(ids)
    return {tuple(k): (i, loc) for k, i, loc in zip(keys, ids, locations, strict=True)}
