"""Describing a namespace: runtime properties (SPEC-NOTES 17), a readable layout and its indexes."""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from partitioning.errors import NamespaceNotFound
from partitioning.spec.schema import NamespaceSchema
from partitioning.state.namespace_state import NamespaceState
from partitioning.state.partition_tables import PartitionTable, open_partition_table
from partitioning.storage.alignment import dataset_columns
from partitioning.storage.locations import spec_id_of
from partitioning.storage.manifest import partition_column

__all__ = ["children", "describe_namespace", "format_partition_value", "layout", "list_indexes"]


def format_partition_value(value: Any) -> str | None:
    """A partition value as a runtime-property string (SPEC-NOTES 17)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return format(value, "f")
    if isinstance(value, bytes):
        return value.hex()
    return str(value)


def describe_namespace(state: NamespaceState, root: str, id_list: Sequence[str]) -> dict[str, str]:
    """Runtime properties of a namespace: the root, ``v<N>``, or a partition namespace."""
    ids = list(id_list)
    if not ids:
        return dict(state.metadata)
    object_id = "$".join(ids)
    row = state.rows_by_id.get(object_id)
    if row is None or row["object_type"] != "namespace":
        raise NamespaceNotFound(f"namespace {object_id!r} not found in {root}")
    spec_id = spec_id_of(object_id)
    spec = state.specs.get(spec_id)
    if spec is None:
        raise NamespaceNotFound(f"namespace {object_id!r} has no partition spec v{spec_id}")
    if len(ids) == 1:
        return {"partition_spec": spec.to_json()}
    level_field = spec.fields[len(ids) - 2]
    value = format_partition_value(row.get(partition_column(level_field.field_id)))
    return {} if value is None else {f"partition.{level_field.field_id}": value}


def children(state: NamespaceState, root: str, id_list: Sequence[str]) -> tuple[list[str], list[str]]:
    """The child namespaces and the tables directly under a namespace (``[]``: the root),
    each sorted by name, as this ``__manifest`` version records them. A namespace the
    version does not hold raises :class:`NamespaceNotFound`."""
    ids = list(id_list)
    if ids:
        describe_namespace(state, root, ids)
    prefix = "$".join(ids) + "$" if ids else ""
    rows = state.manifest.select(["object_id", "object_type"])
    if prefix:
        rows = rows.filter(pc.starts_with(rows.column("object_id"), prefix))
    namespaces: set[str] = set()
    tables: set[str] = set()
    for object_id, kind in zip(
        rows.column("object_id").to_pylist(), rows.column("object_type").to_pylist(), strict=True
    ):
        name = object_id[len(prefix) :]
        if "$" not in name:
            (namespaces if kind == "namespace" else tables).add(name)
    return sorted(namespaces), sorted(tables)


def layout(state: NamespaceState, root: str) -> str:
    """A readable tree of spec versions, partition namespaces and tables."""
    lines = [f"{root}  (__manifest v{state.version})"]
    for spec_id, spec in sorted(state.specs.items()):
        lines.append(f"  v{spec_id}: {spec}")
    parts = list(state.tables)
    for p in parts:
        vals = ", ".join(f"{k}={_show(v)}" for k, v in p.values.items())
        lines.append(f"    {p.object_id}  [{vals}]  read_version={p.read_version}  -> {p.location}")
    if not parts:
        lines.append("    (no partition tables yet)")
    return "\n".join(lines)


def _show(value: Any) -> str:
    text = format_partition_value(value)
    return "NULL" if text is None else text


def list_indexes(
    tables: Iterable[PartitionTable], schema: NamespaceSchema, storage_options: Mapping[str, str] | None
) -> pa.Table:
    """One row per (partition table, index): name, type, column, indexed and unindexed rows."""
    rows: dict[str, list[object]] = {k: [] for k in _LIST_SCHEMA.names}
    for t in tables:
        if t.read_version is None:
            continue
        ds = open_partition_table(t.uri, t.read_version, None, None, storage_options)
        names = {v: k for k, v in dataset_columns(ds.schema, schema).items()}
        total = ds.count_rows()
        for d in ds.describe_indices():
            try:
                stats = ds.stats.index_stats(d.name)
                kind, indexed, unindexed = (
                    str(stats["index_type"]),
                    stats["num_indexed_rows"],
                    stats["num_unindexed_rows"],
                )
            except (OSError, ValueError, RuntimeError, KeyError):
                kind, indexed, unindexed = d.type_url.rsplit(".", 1)[-1], d.num_rows_indexed, total - d.num_rows_indexed
            for key, value in zip(
                _LIST_SCHEMA.names,
                [
                    t.object_id,
                    t.location,
                    t.read_version,
                    d.name,
                    kind.upper(),
                    names.get(d.field_names[0], d.field_names[0]),
                    indexed,
                    unindexed,
                ],
                strict=True,
            ):
                rows[key].append(value)
    return pa.table(rows, schema=_LIST_SCHEMA)


_LIST_SCHEMA = pa.schema(
    [
        ("object_id", pa.string()),
        ("location", pa.string()),
        ("read_version", pa.int64()),
        ("index_name", pa.string()),
        ("index_type", pa.string()),
        ("column", pa.string()),
        ("indexed_rows", pa.int64()),
        ("unindexed_rows", pa.int64()),
    ]
)
