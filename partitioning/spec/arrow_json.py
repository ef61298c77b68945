"""Arrow types and fields as JsonArrowSchema spells them (pylance's names), and the type names users write.

Type spellings are pylance's own (SPEC-NOTES 3b). Where pylance's spelling loses
information (timestamp unit and zone, time and duration units), the missing part is
kept in field metadata so that every type round-trips exactly. :func:`parse_type` reads
the names a user gives a new column: pylance's (``int64``) or Spark SQL's (``bigint``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from partitioning.errors import SchemaError
from partitioning.spec.field_ids import (
    FIELD_ID_KEY,
    MAP_ENTRIES_ID_KEY,
    children_of,
    field_id_of,
)

__all__ = [
    "ALLOWED_TYPE_NAMES",
    "TIMESTAMP_TZ_KEY",
    "TIMESTAMP_UNIT_KEY",
    "TIME_UNIT_KEY",
    "field_from_json",
    "field_to_json",
    "parse_type",
    "type_from_json",
    "type_to_json",
]


TIMESTAMP_UNIT_KEY = "lance:timestamp_unit"
TIMESTAMP_TZ_KEY = "lance:timestamp_tz"
TIME_UNIT_KEY = "lance:time_unit"
_UNIT_KEYS = (TIMESTAMP_UNIT_KEY, TIMESTAMP_TZ_KEY, TIME_UNIT_KEY)

_SIMPLE: dict[str, pa.DataType] = {
    "null": pa.null(),
    "bool": pa.bool_(),
    "int8": pa.int8(),
    "int16": pa.int16(),
    "int32": pa.int32(),
    "int64": pa.int64(),
    "uint8": pa.uint8(),
    "uint16": pa.uint16(),
    "uint32": pa.uint32(),
    "uint64": pa.uint64(),
    "float16": pa.float16(),
    "float32": pa.float32(),
    "float64": pa.float64(),
    "utf8": pa.string(),
    "large_utf8": pa.large_string(),
    "binary": pa.binary(),
    "large_binary": pa.large_binary(),
    "date32": pa.date32(),
    "date64": pa.date64(),
}

_SIMPLE_NAMES = {str(v): k for k, v in _SIMPLE.items()}

ALLOWED_TYPE_NAMES = (
    *_SIMPLE,
    "timestamp",
    "time32",
    "time64",
    "duration",
    "decimal128",
    "decimal256",
    "fixed_size_binary",
    "struct",
    "list",
    "large_list",
    "fixed_size_list",
    "map",
)


def _type_key(t: pa.DataType) -> str | None:
    return _SIMPLE_NAMES.get(str(t)) if not isinstance(t, pa.DictionaryType) else None


def type_to_json(t: pa.DataType) -> tuple[dict[str, Any], dict[str, str]]:
    """Spell an Arrow type as a JsonArrowDataType dict, plus the field metadata it needs.

    Nested child fields carry no field ids here; :func:`field_to_json` adds them.
    """
    key = _type_key(t)
    if key is not None:
        return {"type": key}, {}
    if pa.types.is_timestamp(t):
        meta = {TIMESTAMP_UNIT_KEY: t.unit}
        if t.tz is not None:
            meta[TIMESTAMP_TZ_KEY] = t.tz
        return {"type": "timestamp"}, meta
    if pa.types.is_time32(t) or pa.types.is_time64(t) or pa.types.is_duration(t):
        name = "time32" if pa.types.is_time32(t) else "time64" if pa.types.is_time64(t) else "duration"
        return {"type": name}, {TIME_UNIT_KEY: t.unit}
    if pa.types.is_decimal(t):
        name = "decimal128" if isinstance(t, pa.Decimal128Type) else "decimal256"
        return {"type": name, "length": t.precision * 1000 + t.scale}, {}
    if pa.types.is_fixed_size_binary(t):
        return {"type": "fixed_size_binary", "length": t.byte_width}, {}
    raise SchemaError(
        f"type {t} is not supported in a namespace schema; allowed types: {', '.join(ALLOWED_TYPE_NAMES)}"
    )


def type_from_json(d: Mapping[str, Any], metadata: Mapping[str, str] | None = None) -> pa.DataType:
    """Inverse of :func:`type_to_json` for non-nested types (``metadata`` is the field's)."""
    metadata = metadata or {}
    name = d.get("type")
    if name in _SIMPLE:
        return _SIMPLE[name]
    if name == "timestamp":
        return pa.timestamp(metadata.get(TIMESTAMP_UNIT_KEY, "us"), tz=metadata.get(TIMESTAMP_TZ_KEY))
    if name in ("time32", "time64", "duration"):
        default = {"time32": "ms", "time64": "us", "duration": "us"}[name]
        unit = metadata.get(TIME_UNIT_KEY, default)
        return {"time32": pa.time32, "time64": pa.time64, "duration": pa.duration}[name](unit)
    if name in ("decimal128", "decimal256"):
        length = int(d["length"])
        ctor = pa.decimal128 if name == "decimal128" else pa.decimal256
        return ctor(length // 1000, length % 1000)
    if name == "fixed_size_binary":
        return pa.binary(int(d["length"]))
    raise SchemaError(f"unknown type {name!r}; allowed types: {', '.join(ALLOWED_TYPE_NAMES)}")


def _is_nested(t: pa.DataType) -> bool:
    return pa.types.is_nested(t)


def field_to_json(f: pa.Field) -> dict[str, Any]:
    """A JsonArrowField dict for an Arrow field, keeping its metadata (field ids included)."""
    meta = {k.decode(): v.decode() for k, v in (f.metadata or {}).items()}
    if _is_nested(f.type):
        if pa.types.is_struct(f.type):
            name = "struct"
        elif pa.types.is_large_list(f.type):
            name = "large_list"
        elif pa.types.is_fixed_size_list(f.type):
            name = "fixed_size_list"
        elif pa.types.is_map(f.type):
            name = "map"
        elif pa.types.is_list(f.type):
            name = "list"
        else:
            raise SchemaError(f"column {f.name!r}: type {f.type} is not supported in a namespace schema")
        children = [field_to_json(c) for c in children_of(f.type)]
        if name == "map":
            entries: dict[str, Any] = {
                "name": "entries",
                "nullable": False,
                "type": {"type": "struct", "fields": children},
            }
            entries_id = meta.pop(MAP_ENTRIES_ID_KEY, None)
            if entries_id is not None:
                entries["metadata"] = {FIELD_ID_KEY: entries_id}
            children = [entries]
        type_json: dict[str, Any] = {"type": name, "fields": children}
        if pa.types.is_fixed_size_list(f.type):
            type_json["length"] = f.type.list_size
    else:
        try:
            type_json, extra = type_to_json(f.type)
        except SchemaError as exc:
            raise SchemaError(f"column {f.name!r}: {exc}") from exc
        meta.update(extra)
    out: dict[str, Any] = {"name": f.name, "nullable": f.nullable, "type": type_json}
    if meta:
        out["metadata"] = meta
    return out


def field_from_json(d: Mapping[str, Any]) -> pa.Field:
    """Inverse of :func:`field_to_json`."""
    meta = dict(d.get("metadata") or {})
    t = d["type"]
    name = t.get("type")
    children = [field_from_json(c) for c in t.get("fields") or []]
    if name == "struct":
        arrow_type: pa.DataType = pa.struct(children)
    elif name in ("list", "large_list", "fixed_size_list"):
        if len(children) != 1:
            raise SchemaError(f"column {d.get('name')!r}: a {name} needs exactly one child field")
        if name == "list":
            arrow_type = pa.list_(children[0])
        elif name == "large_list":
            arrow_type = pa.large_list(children[0])
        else:
            arrow_type = pa.list_(children[0], int(t["length"]))
    elif name == "map":
        entries = children[0].type if children else None
        if entries is None or not pa.types.is_struct(entries) or entries.num_fields != 2:
            raise SchemaError(f"column {d.get('name')!r}: a map needs one 'entries' struct of key and value")
        arrow_type = pa.map_(entries.field(0), entries.field(1))
        entries_id = field_id_of(children[0])
        if entries_id is not None:
            meta[MAP_ENTRIES_ID_KEY] = str(entries_id)
    else:
        arrow_type = type_from_json(t, meta)
        for k in _UNIT_KEYS:
            meta.pop(k, None)
    return pa.field(d["name"], arrow_type, nullable=bool(d.get("nullable", True)), metadata=meta or None)


_TYPE_WORDS: dict[str, pa.DataType] = {
    **_SIMPLE,
    "boolean": pa.bool_(),
    "tinyint": pa.int8(),
    "byte": pa.int8(),
    "smallint": pa.int16(),
    "short": pa.int16(),
    "int": pa.int32(),
    "integer": pa.int32(),
    "bigint": pa.int64(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "string": pa.string(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "timestamp_ntz": pa.timestamp("us"),
}


def parse_type(text: str) -> pa.DataType:
    """A column type from its name: pylance's (``int64``, ``utf8``) or Spark SQL's
    (``bigint``, ``string``), or ``decimal(p,s)``."""
    word = text.strip().lower().replace(" ", "")
    if word in _TYPE_WORDS:
        return _TYPE_WORDS[word]
    for prefix in ("decimal128(", "decimal("):
        if word.startswith(prefix) and word.endswith(")"):
            try:
                precision, scale = (int(x) for x in word[len(prefix) : -1].split(","))
                return pa.decimal128(precision, scale)
            except ValueError as exc:
                raise SchemaError(f"bad decimal type {text!r}; expected decimal(precision,scale)") from exc
    raise SchemaError(f"unknown type {text!r}; allowed: {', '.join(sorted(_TYPE_WORDS))}, decimal(p,s)")
