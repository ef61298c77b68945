"""Spark's ``PARTITIONED BY`` transforms and the spec's partition fields, both ways.

Spark hands a catalog's ``createTable`` its transforms; the JVM layer sends them as JSON
(``{"name": ..., "args": [{"col": [...]} | {"lit": ..., "type": ...}]}``). They map onto
the spec honestly:

============================  ==========================================================
``c``, ``identity(c)``        identity
``bucket(N, c)``              ``bucket[N]``; with several columns ``multi_bucket[N]``
``truncate(W, c)``            ``truncate[W]`` (``truncate(c, W)`` too)
``year/month/day/hour(ts)``   the spec's date parts (calendar year, month 1-12, ...)
``years/months/days/hours``   refused: in Spark and Iceberg they count years, months,
                              days or hours since 1970, which is not the spec's date part
============================  ==========================================================

:func:`describe_partitioning` goes the other way, for ``Table.partitioning()`` (what
``DESCRIBE TABLE`` shows).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from partitioning.errors import SpecError
from partitioning.spec.partition_by import spec_of_parts
from partitioning.spec.partition_spec import PartitionSpec
from partitioning.spec.schema import NamespaceSchema
from partitioning.spec.transforms import (
    BucketTransform,
    DayTransform,
    HourTransform,
    IdentityTransform,
    MonthTransform,
    MultiBucketTransform,
    Transform,
    TruncateTransform,
    YearTransform,
)

__all__ = ["describe_partitioning", "partition_spec", "transform_of"]

_TIME = {"year": YearTransform, "month": MonthTransform, "day": DayTransform, "hour": HourTransform}
_EPOCH_COUNTS = {"years": "year", "months": "month", "days": "day", "hours": "hour"}
_ALLOWED = "c, identity(c), bucket(N, c[, ...]), truncate(W, c), year(ts), month(ts), day(ts), hour(ts)"


def _columns_and_literals(t: Mapping[str, Any]) -> tuple[list[str], list[Any]]:
    cols, lits = [], []
    for arg in t.get("args") or []:
        if "col" in arg:
            parts = arg["col"]
            if len(parts) != 1:
                raise SpecError(
                    f"partition transform {t.get('name')}: nested field {'.'.join(parts)} cannot be a source"
                )
            cols.append(str(parts[0]))
        elif "lit" in arg:
            lits.append(arg["lit"])
    return cols, lits


def _int_literal(name: str, lits: list[Any]) -> int:
    if len(lits) != 1:
        raise SpecError(f"partition transform {name} takes one number, e.g. {name}(16, c)")
    try:
        return int(lits[0])
    except (TypeError, ValueError):
        raise SpecError(f"partition transform {name}: {lits[0]!r} is not a whole number") from None


def transform_of(t: Mapping[str, Any]) -> tuple[Transform, list[str]]:
    """The spec's transform and source columns of one Spark transform, or one line refusing it."""
    name = str(t.get("name", "")).lower()
    cols, lits = _columns_and_literals(t)
    if not cols:
        raise SpecError(f"partition transform {name}(...) names no column")
    if name == "identity" and not lits and len(cols) == 1:
        return IdentityTransform(), cols
    if name == "bucket":
        n = _int_literal(name, lits)
        return (BucketTransform(n) if len(cols) == 1 else MultiBucketTransform(n)), cols
    if name == "truncate" and len(cols) == 1:
        return TruncateTransform(_int_literal(name, lits)), cols
    if name in _TIME and len(cols) == 1 and not lits:
        return _TIME[name](), cols
    if name in _EPOCH_COUNTS:
        part = _EPOCH_COUNTS[name]
        raise SpecError(
            f"PARTITIONED BY {name}({cols[0]}) counts {name} since 1970 (Spark's and Iceberg's meaning), not "
            f"the spec's {part}({cols[0]}) (the calendar {part}); write {part}({cols[0]})"
        )
    raise SpecError(f"PARTITIONED BY {name}({', '.join(cols)}) is not a partition transform; allowed: {_ALLOWED}")


def partition_spec(transforms: Sequence[Mapping[str, Any]], schema: NamespaceSchema) -> PartitionSpec:
    """The first spec of a table created with these Spark transforms."""
    return spec_of_parts([(*transform_of(t), None) for t in transforms], schema)


def describe_partitioning(spec: PartitionSpec, schema: NamespaceSchema) -> list[dict[str, Any]]:
    """The current spec's fields as Spark transforms: name, source columns, parameter."""
    out = []
    for f in spec.fields:
        cols = [
            s.name if s is not None else f"#{i}" for s, i in zip(f.source_fields(schema), f.source_ids, strict=True)
        ]
        if f.transform is None:
            out.append({"name": "expression", "columns": cols, "text": f.expression})
            continue
        t = f.transform
        param = getattr(t, "num_buckets", None) or getattr(t, "width", None)
        name = "bucket" if isinstance(t, MultiBucketTransform) else t.name
        out.append({"name": name, "columns": cols, "param": param})
    return out
