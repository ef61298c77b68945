"""Partition specs and fields: frozen models with exact spec-JSON round-trip.

(De)serialization goes through the ``lance_namespace_urllib3_client`` models
(SPEC-NOTES 2), so the JSON has exactly the spec's shape with unset keys omitted.
Specs built from the text users write (``"day(ts)"``) come from
:mod:`partitioning.spec.partition_by`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import pyarrow as pa
from lance_namespace_urllib3_client.models import PartitionField as _ClientField
from lance_namespace_urllib3_client.models import PartitionSpec as _ClientSpec
from pydantic import ValidationError

from partitioning.errors import SpecError
from partitioning.spec.arrow_json import type_from_json, type_to_json
from partitioning.spec.expression import evaluate_expression, validate_expression
from partitioning.spec.expression_safety import check_expression
from partitioning.spec.field_ids import field_id_of
from partitioning.spec.schema import NamespaceSchema
from partitioning.spec.transforms import (
    BucketTransform,
    IdentityTransform,
    MultiBucketTransform,
    Transform,
    TruncateTransform,
    parse_transform,
    transform_from_json,
)

__all__ = ["PartitionField", "PartitionSpec"]


_FIELD_ID_RE = re.compile(r"^[A-Za-z0-9_]+$")
_TypeLike: TypeAlias = pa.DataType | Mapping[str, Any] | str


def _type_json(t: _TypeLike) -> dict[str, Any]:
    if isinstance(t, pa.DataType):
        return type_to_json(t)[0]
    if isinstance(t, str):
        return {"type": t}
    return dict(t)


def _compact(d: Any) -> str:
    return json.dumps(d, separators=(",", ":"), sort_keys=True)


@dataclass(frozen=True)
class PartitionField:
    """One partition field: a transform or a DataFusion expression over source field ids."""

    field_id: str
    source_ids: tuple[int, ...]
    transform: Transform | None = None
    expression: str | None = None
    result_type: dict[str, Any] = field(default_factory=dict)

    def __init__(
        self,
        field_id: str,
        source_ids: Iterable[int],
        transform: Transform | str | None = None,
        expression: str | None = None,
        result_type: _TypeLike | None = None,
    ) -> None:
        if not isinstance(field_id, str) or not _FIELD_ID_RE.match(field_id):
            raise SpecError(f"field_id {field_id!r} must be a non-empty string of letters, digits and '_'")
        ids = tuple(source_ids)
        if not ids or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids):
            raise SpecError(f"partition field {field_id!r}: source_ids must be a non-empty list of field ids")
        if (transform is None) == (expression is None):
            raise SpecError(f"partition field {field_id!r}: exactly one of 'transform' or 'expression' must be given")
        parsed = parse_transform(transform) if transform is not None else None
        if parsed is not None:
            if not parsed.multi_source and len(ids) != 1:
                raise SpecError(
                    f"partition field {field_id!r}: {parsed} takes one source column, got source_ids {list(ids)}"
                )
            if result_type is None and not _result_follows_source(parsed):
                result_type = parsed.result_type([])
        if result_type is None:
            raise SpecError(f"partition field {field_id!r}: result_type is required")
        rt = _type_json(result_type)
        if parsed is not None and not _result_follows_source(parsed):
            expected = type_to_json(parsed.result_type([]))[0]
            if rt != expected:
                raise SpecError(
                    f"partition field {field_id!r}: result_type {_compact(rt)} is inconsistent with "
                    f"transform {parsed}, which returns {_compact(expected)}"
                )
        object.__setattr__(self, "field_id", field_id)
        object.__setattr__(self, "source_ids", ids)
        object.__setattr__(self, "transform", parsed)
        object.__setattr__(self, "expression", expression)
        object.__setattr__(self, "result_type", rt)

    def __hash__(self) -> int:
        return hash(_compact(self.to_dict()))

    def __str__(self) -> str:
        how = str(self.transform) if self.transform is not None else f"expression {self.expression!r}"
        return f"{self.field_id}={how}({', '.join(str(i) for i in self.source_ids)})"

    # -- JSON -------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        client = _ClientField.from_dict(self._raw_dict())
        assert client is not None
        return client.to_dict()

    def _raw_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"field_id": self.field_id, "source_ids": list(self.source_ids)}
        if self.transform is not None:
            d["transform"] = self.transform.to_json()
        if self.expression is not None:
            d["expression"] = self.expression
        d["result_type"] = self.result_type
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> PartitionField:
        try:
            client = _ClientField.from_dict(dict(d))
        except ValidationError as exc:
            raise SpecError(f"invalid partition field {d.get('field_id')!r}: {_pydantic_line(exc)}") from exc
        assert client is not None
        raw = client.to_dict()
        transform = transform_from_json(raw["transform"]) if raw.get("transform") is not None else None
        return cls(
            raw["field_id"],
            raw["source_ids"],
            transform=transform,
            expression=raw.get("expression"),
            result_type=raw["result_type"],
        )

    # -- binding to a schema ------------------------------------------------------------
    @property
    def signature(self) -> tuple[tuple[int, ...], str]:
        """What the spec's field-id reuse rule compares: source ids and transform/expression."""
        how = _compact(self.transform.to_json()) if self.transform is not None else f"expr:{self.expression}"
        return self.source_ids, how

    def source_fields(self, schema: NamespaceSchema) -> list[pa.Field | None]:
        """The top-level source columns, or None for an id no longer in the schema."""
        return [schema.top_level_field_by_id(i) for i in self.source_ids]

    def arrow_result_type(self, schema: NamespaceSchema) -> pa.DataType:
        if self.transform is not None and _result_follows_source(self.transform):
            src = self.source_fields(schema)[0]
            if src is not None:
                return src.type
        meta = None
        if self.result_type.get("type") == "timestamp":
            meta = {"lance:timestamp_unit": "us"}
        return type_from_json(self.result_type, meta)

    def validate(self, schema: NamespaceSchema) -> None:
        """Check this field against the namespace schema; raise a one-line SpecError."""
        sources = []
        for sid in self.source_ids:
            f = schema.top_level_field_by_id(sid)
            if f is None:
                nested = schema.field_by_id(sid)
                if nested is not None:
                    raise SpecError(
                        f"partition field {self.field_id!r}: source id {sid} is the nested field "
                        f"{nested.name!r}; partition sources must be top-level columns"
                    )
                known = ", ".join(f"{fld.name}={field_id_of(fld)}" for fld in schema.arrow)
                raise SpecError(
                    f"partition field {self.field_id!r}: unknown source id {sid}; schema field ids are {known}"
                )
            sources.append(f)
        if self.transform is not None:
            try:
                self.transform.check_sources(sources)
            except SpecError as exc:
                raise SpecError(f"partition field {self.field_id!r}: {exc}") from exc
            if _result_follows_source(self.transform):
                expected = type_to_json(sources[0].type)[0]
                if self.result_type != expected:
                    raise SpecError(
                        f"partition field {self.field_id!r}: result_type {_compact(self.result_type)} is "
                        f"inconsistent with {self.transform} of column {sources[0].name!r}, "
                        f"which returns {_compact(expected)}"
                    )
        else:
            assert self.expression is not None
            try:
                validate_expression(self.expression, [f.type for f in sources], self.arrow_result_type(schema))
            except SpecError as exc:
                raise SpecError(f"partition field {self.field_id!r}: {exc}") from exc

    def check_expression(self, schema: NamespaceSchema) -> None:
        """For an expression field, refuse one that is not a pure, bounded scalar function
        (without evaluating it); a source dropped from ``schema`` is typed NULL, as in :meth:`apply`."""
        if self.expression is None:
            return
        types = [f.type if f is not None else pa.null() for f in self.source_fields(schema)]
        try:
            check_expression(self.expression, types)
        except SpecError as exc:
            raise SpecError(f"partition field {self.field_id!r}: {exc}") from exc

    def apply(
        self,
        columns: Sequence[pa.Array | pa.ChunkedArray | None],
        schema: NamespaceSchema,
        *,
        length: int | None = None,
    ) -> pa.Array:
        """Partition values for one array per source id (``None`` for a dropped source column).

        A dropped source column reads as NULL (the spec's "column removal resistant"
        rule). ``length`` gives the row count when every source is dropped.
        """
        if length is None:
            length = next((len(c) for c in columns if c is not None), 0)
        result_type = self.arrow_result_type(schema)
        present = [c for c in columns if c is not None]
        if self.transform is not None:
            if not present or (not self.transform.multi_source and columns[0] is None):
                return pa.nulls(length, result_type)
            return self.transform.apply(*present).cast(result_type)
        assert self.expression is not None
        arrays = [c if c is not None else pa.nulls(length) for c in columns]
        try:
            check_expression(self.expression, [a.type for a in arrays])
        except SpecError as exc:
            raise SpecError(f"partition field {self.field_id!r}: {exc}") from exc
        try:
            return evaluate_expression(self.expression, arrays, result_type)
        except SpecError:
            if len(present) == len(columns):
                raise
            # The expression rejects an untyped NULL where its dropped column stood;
            # a NULL-safe expression of a NULL column is NULL.
            return pa.nulls(length, result_type)


def _result_follows_source(t: Transform) -> bool:
    return isinstance(t, IdentityTransform | TruncateTransform)


def _pydantic_line(exc: ValidationError) -> str:
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err.get("loc", ()))
    return f"{loc}: {err.get('msg')}" if loc else str(err.get("msg"))


@dataclass(frozen=True)
class PartitionSpec:
    """A versioned partition spec: ``partition_spec_v<id>`` in ``__manifest`` metadata."""

    spec_id: int
    fields: tuple[PartitionField, ...]

    def __init__(self, spec_id: int, fields: Iterable[PartitionField]) -> None:
        if not isinstance(spec_id, int) or isinstance(spec_id, bool) or spec_id < 1:
            raise SpecError(f"spec id must be an integer >= 1, got {spec_id!r}")
        flds = tuple(fields)
        seen: set[str] = set()
        for f in flds:
            if not isinstance(f, PartitionField):
                raise SpecError(f"spec fields must be PartitionField objects, got {f!r}")
            if f.field_id in seen:
                raise SpecError(f"duplicate partition field_id {f.field_id!r} in spec v{spec_id}")
            seen.add(f.field_id)
        object.__setattr__(self, "spec_id", spec_id)
        object.__setattr__(self, "fields", flds)

    def __str__(self) -> str:
        return f"v{self.spec_id}[{', '.join(str(f) for f in self.fields)}]"

    @property
    def field_ids(self) -> list[str]:
        return [f.field_id for f in self.fields]

    def max_values(self, schema: NamespaceSchema) -> int | None:
        """How many partition values the spec can produce at most, NULL included, when every
        field is bounded (``bucket[N]``: N + 1, a boolean: 3); None otherwise."""
        bound = 1
        for f in self.fields:
            if isinstance(f.transform, BucketTransform | MultiBucketTransform) and f.expression is None:
                bound *= f.transform.num_buckets + 1
            elif pa.types.is_boolean(f.arrow_result_type(schema)):
                bound *= 3
            else:
                return None
        return bound

    def field(self, field_id: str) -> PartitionField:
        for f in self.fields:
            if f.field_id == field_id:
                return f
        raise SpecError(f"spec v{self.spec_id} has no partition field {field_id!r}; fields: {self.field_ids}")

    # -- JSON -------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {"id": self.spec_id, "fields": [f.to_dict() for f in self.fields]}

    def to_json(self) -> str:
        """Compact JSON, as stored under ``partition_spec_v<N>`` (Appendix E's spelling)."""
        return json.dumps(self.to_dict(), separators=(",", ":"), ensure_ascii=False)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> PartitionSpec:
        if not isinstance(d, Mapping):
            raise SpecError(f"a partition spec must be a JSON object, got {type(d).__name__}")
        try:
            client = _ClientSpec.from_dict(dict(d))
        except ValidationError as exc:
            raise SpecError(f"invalid partition spec: {_pydantic_line(exc)}") from exc
        assert client is not None
        return cls(client.id, [PartitionField.from_dict(f.to_dict()) for f in client.fields])

    @classmethod
    def from_json(cls, text: str | bytes | Mapping[str, Any]) -> PartitionSpec:
        if isinstance(text, Mapping):
            return cls.from_dict(text)
        try:
            d = json.loads(text)
        except (json.JSONDecodeError, TypeError) as exc:
            raise SpecError(f"partition spec is not valid JSON: {exc}") from exc
        return cls.from_dict(d)

    @classmethod
    def coerce(cls, spec: PartitionSpec | str | Mapping[str, Any]) -> PartitionSpec:
        """Accept a PartitionSpec, its JSON text, or its JSON object."""
        if isinstance(spec, PartitionSpec):
            return spec
        return cls.from_json(spec)

    def validate(self, schema: NamespaceSchema) -> None:
        for f in self.fields:
            f.validate(schema)

    def check_expressions(self, schema: NamespaceSchema) -> None:
        """:meth:`PartitionField.check_expression` for every field (used when a spec is loaded)."""
        for f in self.fields:
            f.check_expression(schema)

    def with_id(self, spec_id: int) -> PartitionSpec:
        return PartitionSpec(spec_id, self.fields)
