"""The namespace schema: JsonArrowSchema text <-> pyarrow, with ``lance:field_id`` on every field.

Type spellings are pylance's own (SPEC-NOTES 3b). Where pylance's spelling loses
information (timestamp unit and zone, time and duration units), the missing part is
kept in field metadata so that every type round-trips exactly.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import pyarrow as pa

from partitioning.errors import CorruptNamespace, SchemaError

FIELD_ID_KEY = "lance:field_id"
TIMESTAMP_UNIT_KEY = "lance:timestamp_unit"
TIMESTAMP_TZ_KEY = "lance:timestamp_tz"
TIME_UNIT_KEY = "lance:time_unit"
NEXT_FIELD_ID_KEY = "lance:next_field_id"
# Lance consumes ``lance:field_id`` when it writes a dataset (pylance 14 drops the key), so
# partition datasets carry the namespace id of each top-level column under this key.
DATASET_FIELD_ID_KEY = "lance_partitioned:field_id"
# Arrow rebuilds a map's "entries" field, so its id is parked on the map field in memory.
MAP_ENTRIES_ID_KEY = "lance:map_entries_field_id"
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


def _children(t: pa.DataType) -> list[pa.Field]:
    if pa.types.is_struct(t):
        return [t.field(i) for i in range(t.num_fields)]
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return [t.value_field]
    if pa.types.is_map(t):
        return [t.key_field, t.item_field]
    return []


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
        children = [field_to_json(c) for c in _children(f.type)]
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


def _validation_line(exc: Any) -> str:
    """One line for a pydantic ValidationError: where in the JSON, and what is wrong there."""
    errors = exc.errors()
    if not errors:
        return str(exc).splitlines()[0]
    err = errors[0]
    where = ".".join(str(p) for p in err.get("loc", ())) or str(getattr(exc, "title", "value"))
    shown = repr(err.get("input"))
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{where}: {err.get('msg')}, got {shown}{more}"


def _walk(fields: list[pa.Field]) -> Iterator[pa.Field]:
    for f in fields:
        yield f
        yield from _walk(_children(f.type))


def _all_ids(fields: list[pa.Field]) -> list[int]:
    ids: list[int] = []
    for f in _walk(fields):
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


def _with_id(f: pa.Field, counter: list[int]) -> pa.Field:
    """Pre-order: a field gets its id before its children do."""
    meta = {k.decode(): v.decode() for k, v in (f.metadata or {}).items()}
    if FIELD_ID_KEY not in meta:
        meta[FIELD_ID_KEY] = str(counter[0])
        counter[0] += 1
    t = f.type
    if pa.types.is_struct(t):
        t = pa.struct([_with_id(c, counter) for c in _children(t)])
    elif pa.types.is_list(t) and not pa.types.is_fixed_size_list(t):
        t = pa.list_(_with_id(t.value_field, counter))
    elif pa.types.is_large_list(t):
        t = pa.large_list(_with_id(t.value_field, counter))
    elif pa.types.is_fixed_size_list(t):
        t = pa.list_(_with_id(t.value_field, counter), t.list_size)
    elif pa.types.is_map(t):
        if MAP_ENTRIES_ID_KEY not in meta:
            meta[MAP_ENTRIES_ID_KEY] = str(counter[0])
            counter[0] += 1
        t = pa.map_(_with_id(t.key_field, counter), _with_id(t.item_field, counter))
    return f.with_type(t).with_metadata(meta)


@dataclass(frozen=True)
class NamespaceSchema:
    """The shared schema of a partitioned namespace, with stable field ids.

    ``next_field_id`` is the first id never handed out; it only grows, so an id is
    never reused even after its column is dropped.
    """

    arrow: pa.Schema
    next_field_id: int

    def __reduce__(self) -> tuple[Any, ...]:
        # pyarrow's pickle drops a fixed-size list's child field metadata (its field id);
        # the IPC form keeps every field's metadata.
        return _schema_from_ipc, (self.arrow.serialize().to_pybytes(), self.next_field_id)

    @classmethod
    def from_arrow(cls, schema: pa.Schema, next_field_id: int | None = None) -> NamespaceSchema:
        """Assign ids depth-first, pre-order, to every field that lacks one."""
        _check_names(schema)
        start = max([*_all_ids(list(schema)), -1]) + 1
        if next_field_id is not None:
            start = max(start, next_field_id)
        counter = [start]
        fields = [_with_id(f, counter) for f in schema]
        ids = _all_ids(fields)
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            raise SchemaError(f"duplicate lance:field_id {dupes[0]} in schema")
        for f in fields:
            field_to_json(f)  # raises SchemaError for unsupported types, naming the column
        return cls(pa.schema(fields, metadata=schema.metadata), counter[0])

    # -- JSON -------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "fields": [field_to_json(f) for f in self.arrow],
            "metadata": {NEXT_FIELD_ID_KEY: str(self.next_field_id)},
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | Mapping[str, Any]) -> NamespaceSchema:
        """Parse JsonArrowSchema text (as stored under the ``schema`` key)."""
        from lance_namespace_urllib3_client.models import JsonArrowSchema
        from pydantic import ValidationError

        try:
            d = json.loads(text) if isinstance(text, str) else dict(text)
            JsonArrowSchema.from_dict(d)  # shape check against the client spec model
            fields = [field_from_json(f) for f in d["fields"]]
            meta = d.get("metadata") or {}
            next_id = int(meta.get(NEXT_FIELD_ID_KEY, 0))
        except SchemaError:
            raise
        except ValidationError as exc:
            raise CorruptNamespace(f"namespace schema JSON is invalid: {_validation_line(exc)}") from exc
        except KeyError as exc:
            raise CorruptNamespace(f"namespace schema JSON is invalid: a field lacks the key {exc}") from exc
        except RecursionError as exc:
            raise CorruptNamespace("namespace schema JSON is invalid: it nests too deeply") from exc
        except (ValueError, TypeError, AttributeError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise CorruptNamespace(f"namespace schema JSON is invalid: {first}") from exc
        missing = [f.name for f in _walk(fields) if field_id_of(f) is None]
        if missing:
            raise CorruptNamespace(f"namespace schema field {missing[0]!r} has no {FIELD_ID_KEY}")
        return cls.from_arrow(pa.schema(fields), next_field_id=next_id)

    # -- lookups ----------------------------------------------------------------------
    def field_by_id(self, field_id: int) -> pa.Field | None:
        for f in _walk(list(self.arrow)):
            if field_id_of(f) == field_id:
                return f
        return None

    def top_level_field_by_id(self, field_id: int) -> pa.Field | None:
        for f in self.arrow:
            if field_id_of(f) == field_id:
                return f
        return None

    def field_by_name(self, name: str) -> pa.Field:
        idx = self.arrow.get_field_index(name)
        if idx < 0:
            raise SchemaError(f"unknown column {name!r}; columns are: {', '.join(self.arrow.names)}")
        return self.arrow.field(idx)

    def id_of(self, name: str) -> int:
        fid = field_id_of(self.field_by_name(name))
        assert fid is not None
        return fid

    @property
    def field_ids(self) -> list[int]:
        return _all_ids(list(self.arrow))

    @cached_property
    def plain(self) -> pa.Schema:
        """The Arrow schema without field-id metadata."""
        return pa.schema([_strip(f) for f in self.arrow])

    @cached_property
    def dataset_arrow(self) -> pa.Schema:
        """What partition datasets are written with: plain types, each top-level column
        tagged with its namespace id under :data:`DATASET_FIELD_ID_KEY`."""
        fields = []
        for f, plain in zip(self.arrow, self.plain, strict=True):
            meta = dict(plain.metadata or {})
            meta[DATASET_FIELD_ID_KEY.encode()] = str(field_id_of(f)).encode()
            fields.append(plain.with_metadata(meta))
        return pa.schema(fields)

    # -- evolution (pure: each returns a new schema) ---------------------------------------
    def with_columns(self, new: Sequence[pa.Field]) -> NamespaceSchema:
        """Append nullable columns; they get fresh ids (nested children included)."""
        if not new:
            raise SchemaError("add_columns needs at least one column")
        for f in new:
            if f.name in self.arrow.names:
                raise SchemaError(f"column {f.name!r} already exists; columns are: {', '.join(self.arrow.names)}")
            if not f.nullable:
                raise SchemaError(f"new column {f.name!r} must be nullable: existing partitions have no values for it")
        fresh = [_strip(f) for f in new]
        return NamespaceSchema.from_arrow(pa.schema([*self.arrow, *fresh]), next_field_id=self.next_field_id)

    def with_renamed(self, old: str, new: str) -> NamespaceSchema:
        """Rename a top-level column; its id (and every spec that uses it) is unchanged."""
        f = self.field_by_name(old)
        if not new:
            raise SchemaError("column names must not be empty")
        if new in self.arrow.names:
            raise SchemaError(f"cannot rename {old!r} to {new!r}: column {new!r} already exists")
        idx = self.arrow.get_field_index(old)
        return NamespaceSchema(self.arrow.set(idx, f.with_name(new)), self.next_field_id)

    def without(self, name: str) -> NamespaceSchema:
        """Drop a top-level column; ``next_field_id`` keeps its id (and its children's) retired."""
        self.field_by_name(name)
        if len(self.arrow) == 1:
            raise SchemaError(f"cannot drop {name!r}: it is the only column")
        return NamespaceSchema(self.arrow.remove(self.arrow.get_field_index(name)), self.next_field_id)

    def with_widened(self, name: str, new_type: pa.DataType) -> NamespaceSchema:
        """Promote a top-level column's type (see :func:`check_widening`)."""
        f = self.field_by_name(name)
        check_widening(name, f.type, new_type)
        idx = self.arrow.get_field_index(name)
        return NamespaceSchema(self.arrow.set(idx, f.with_type(new_type)), self.next_field_id)


def _schema_from_ipc(data: bytes, next_field_id: int) -> NamespaceSchema:
    return NamespaceSchema(pa.ipc.read_schema(pa.py_buffer(data)), next_field_id)


_INT_ORDER = [pa.int8(), pa.int16(), pa.int32(), pa.int64()]
WIDENINGS = "int8/int16/int32 -> a wider signed int, float32 -> float64, decimal(p,s) -> decimal(p',s) with p' > p"


def check_widening(name: str, old: pa.DataType, new: pa.DataType) -> None:
    """Allow only promotions that every old value survives exactly."""
    ok = False
    if old in _INT_ORDER and new in _INT_ORDER:
        ok = _INT_ORDER.index(new) > _INT_ORDER.index(old)
    elif old == pa.float32():
        ok = new == pa.float64()
    elif pa.types.is_decimal(old) and pa.types.is_decimal(new):
        ok = new.scale == old.scale and new.precision > old.precision and new.bit_width >= old.bit_width
    if not ok:
        raise SchemaError(f"cannot widen column {name!r} from {old} to {new}; allowed: {WIDENINGS}")


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


def dataset_field_id(f: pa.Field) -> int | None:
    """The namespace id a partition dataset's column was written for, if recorded."""
    raw = (f.metadata or {}).get(DATASET_FIELD_ID_KEY.encode())
    return int(raw) if raw is not None else None


def _strip(f: pa.Field) -> pa.Field:
    meta = {k: v for k, v in (f.metadata or {}).items() if not k.startswith(b"lance:")}
    t = f.type
    if pa.types.is_struct(t):
        t = pa.struct([_strip(c) for c in _children(t)])
    elif pa.types.is_fixed_size_list(t):
        t = pa.list_(_strip(t.value_field), t.list_size)
    elif pa.types.is_large_list(t):
        t = pa.large_list(_strip(t.value_field))
    elif pa.types.is_list(t):
        t = pa.list_(_strip(t.value_field))
    elif pa.types.is_map(t):
        t = pa.map_(_strip(t.key_field), _strip(t.item_field))
    return f.with_type(t).with_metadata(meta or None)


def _check_names(schema: pa.Schema) -> None:
    seen: set[str] = set()
    for name in schema.names:
        if not name:
            raise SchemaError("column names must not be empty")
        if name in seen:
            raise SchemaError(f"duplicate column name {name!r}")
        seen.add(name)
