"""Describing a namespace: runtime properties (SPEC-NOTES 17) and a readable layout."""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Sequence
from typing import Any

from partitioning.errors import NamespaceNotFound
from partitioning.storage.locations import spec_id_of
from partitioning.storage.manifest import partition_column
from partitioning.state.namespace_state import NamespaceState

__all__ = ["describe_namespace", "format_partition_value", "layout"]


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
