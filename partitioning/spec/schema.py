"""The namespace schema: pyarrow with ``lance:field_id`` on every field, its JSON text, its evolution.

:class:`NamespaceSchema` reads and writes the JsonArrowSchema text stored under the
``schema`` key (type spellings in :mod:`partitioning.spec.arrow_json`, field ids in
:mod:`partitioning.spec.field_ids`) and evolves purely: each change returns a new schema,
and :func:`check_widening` allows only the type promotions every old value survives.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import pyarrow as pa

from partitioning.errors import CorruptNamespace, SchemaError
from partitioning.spec.arrow_json import field_from_json, field_to_json
from partitioning.spec.field_ids import (
    DATASET_FIELD_ID_KEY,
    FIELD_ID_KEY,
    all_field_ids,
    field_id_of,
    strip_lance_metadata,
    walk_fields,
    with_field_ids,
)

NEXT_FIELD_ID_KEY = "lance:next_field_id"


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
        start = max([*all_field_ids(list(schema)), -1]) + 1
        if next_field_id is not None:
            start = max(start, next_field_id)
        counter = [start]
        fields = [with_field_ids(f, counter) for f in schema]
        ids = all_field_ids(fields)
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
        missing = [f.name for f in walk_fields(fields) if field_id_of(f) is None]
        if missing:
            raise CorruptNamespace(f"namespace schema field {missing[0]!r} has no {FIELD_ID_KEY}")
        return cls.from_arrow(pa.schema(fields), next_field_id=next_id)

    # -- lookups ----------------------------------------------------------------------
    def field_by_id(self, field_id: int) -> pa.Field | None:
        for f in walk_fields(list(self.arrow)):
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
        return all_field_ids(list(self.arrow))

    @cached_property
    def plain(self) -> pa.Schema:
        """The Arrow schema without field-id metadata."""
        return pa.schema([strip_lance_metadata(f) for f in self.arrow])

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
        fresh = [strip_lance_metadata(f) for f in new]
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


def _check_names(schema: pa.Schema) -> None:
    seen: set[str] = set()
    for name in schema.names:
        if not name:
            raise SchemaError("column names must not be empty")
        if name in seen:
            raise SchemaError(f"duplicate column name {name!r}")
        seen.add(name)
