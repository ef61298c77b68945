"""Join key groupings: for one key, a function of the partition values every spec version can compute.

For every join key (a column with the same Arrow type on both sides) the planner looks
at the single-source partition fields on that key in every spec version present on
either side, and looks for one *grouping function* that every version can compute from
its partition values, such that rows with equal keys always get equal group values:

- ``identity`` in every version: the group is the value itself;
- ``bucket[N]`` / ``bucket[M]`` (any mix, across sides and versions): the group is
  ``bucket % G`` with ``G`` the gcd of the bucket counts (``G == 1`` is useless);
- ``year`` / ``month`` / ``day`` / ``hour`` of the same column: the group is the tuple of
  the time fields every version has (that tuple must include ``year``, or all versions
  must have the same time fields);
- ``truncate[W]`` with the same ``W`` everywhere: the truncated value;
- a version with ``identity`` on the key derives any of these from its value, with the
  transform's Arrow implementation.

A grouping covers the spec versions present on both sides of the join
(:func:`partitioning.plan.join.plan_join`); :func:`key_grouping` picks the finest one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import reduce
from itertools import product
from typing import Any, Literal

import pyarrow as pa

from partitioning.namespace import PartitionTable
from partitioning.spec.partition_spec import PartitionSpec
from partitioning.spec.scalar_hash import is_hashable_type
from partitioning.spec.transforms import (
    BucketTransform,
    DayTransform,
    HourTransform,
    IdentityTransform,
    MonthTransform,
    Transform,
    TruncateTransform,
    YearTransform,
)

__all__ = ["KeyGrouping"]


TIME_PARTS: tuple[str, ...] = ("year", "month", "day", "hour")

_TIME_TRANSFORMS: dict[str, Transform] = {
    "year": YearTransform(),
    "month": MonthTransform(),
    "day": DayTransform(),
    "hour": HourTransform(),
}

Side = Literal["left", "right"]
Version = tuple[str, int]  # (side, spec_id)
Sources = dict[Version, tuple[tuple[str, bool], ...]]  # per version: (field_id, from identity) per component


@dataclass(frozen=True)
class KeyFields:
    """The single-source partition fields of one spec version on one key column."""

    identity: str | None = None
    buckets: dict[int, str] = field(default_factory=dict)  # N -> field_id
    truncates: dict[int, str] = field(default_factory=dict)  # W -> field_id
    times: dict[str, str] = field(default_factory=dict)  # part -> field_id

    @property
    def empty(self) -> bool:
        return self.identity is None and not (self.buckets or self.truncates or self.times)

    def describe(self) -> str:
        parts = ["identity"] if self.identity is not None else []
        parts += [f"bucket[{n}]" for n in sorted(self.buckets)]
        parts += [f"truncate[{w}]" for w in sorted(self.truncates)]
        parts += [p for p in TIME_PARTS if p in self.times]
        return "+".join(parts) if parts else "no partition field on it"


def key_fields(spec: PartitionSpec, source_id: int) -> KeyFields:
    out = KeyFields()
    identity = None
    for f in spec.fields:
        t = f.transform
        if t is None or t.multi_source or f.source_ids != (source_id,):
            continue
        if isinstance(t, IdentityTransform):
            identity = identity or f.field_id
        elif isinstance(t, BucketTransform):
            out.buckets.setdefault(t.num_buckets, f.field_id)
        elif isinstance(t, TruncateTransform):
            out.truncates.setdefault(t.width, f.field_id)
        elif t.name in _TIME_TRANSFORMS:
            out.times.setdefault(t.name, f.field_id)
    return KeyFields(identity, out.buckets, out.truncates, out.times)


@dataclass(frozen=True)
class KeyGrouping:
    """How one join key contributes to a table's group value.

    ``kind`` is ``identity``, ``bucket`` (``param`` = G), ``truncate`` (``param`` = W) or
    ``time`` (``param`` = the time parts). ``sources[(side, spec_id)]`` lists, per
    component, the partition field it is read from and whether that field is the
    key's identity field (then the component is derived with the Arrow transform).
    """

    key: str
    key_type: pa.DataType
    kind: str
    param: Any
    sources: Mapping[Version, tuple[tuple[str, bool], ...]] = field(repr=False)

    def describe(self) -> str:
        if self.kind == "identity":
            return f"{self.key} (identity)"
        if self.kind == "bucket":
            return f"{self.key} (bucket % {self.param})"
        if self.kind == "truncate":
            return f"{self.key} (truncate[{self.param}])"
        return f"{self.key} ({'/'.join(self.param)})"

    def group_values(self, side: Side, spec_id: int, tables: Sequence[PartitionTable]) -> list[Any]:
        """This key's group value for each table (all of one side and spec version)."""
        components = []
        for i, (field_id, from_identity) in enumerate(self.sources[(side, spec_id)]):
            values = [t.values.get(field_id) for t in tables]
            components.append(self._component(i, values, from_identity))
        if self.kind == "time":
            return [None if any(c is None for c in row) else row for row in zip(*components, strict=True)]
        return components[0]

    def _component(self, i: int, values: list[Any], from_identity: bool) -> list[Any]:
        if self.kind == "identity" or (self.kind == "truncate" and not from_identity):
            return values
        if self.kind == "bucket" and not from_identity:
            return [None if v is None else int(v) % self.param for v in values]
        if self.kind == "time" and not from_identity:
            return [None if v is None else int(v) for v in values]
        transform: Transform
        if self.kind == "bucket":
            transform = BucketTransform(self.param)
        elif self.kind == "truncate":
            transform = TruncateTransform(self.param)
        else:
            transform = _TIME_TRANSFORMS[self.param[i]]
        return transform.apply(pa.array(values, type=self.key_type)).to_pylist()


def joinable_type(t: pa.DataType) -> bool:
    """Key types whose equality is the same in Spark, in partition values and in Arrow's join."""
    return is_hashable_type(t) and not pa.types.is_floating(t)


def _time_parts(t: pa.DataType) -> set[str]:
    if pa.types.is_timestamp(t):
        return set(TIME_PARTS)
    if pa.types.is_date(t):
        return {"year", "month", "day"}
    return set()


def _label(v: Version) -> str:
    return f"{v[0]} v{v[1]}"


def _source(kf: KeyFields, direct: str | None) -> tuple[str, bool]:
    """Read a component from the field ``direct``, or derive it from the identity field."""
    if direct is not None:
        return direct, False
    assert kf.identity is not None
    return kf.identity, True


def key_grouping(
    key: str, key_type: pa.DataType, versions: Mapping[Version, KeyFields]
) -> tuple[KeyGrouping | None, str]:
    """The finest grouping of ``key`` every version can compute, or None and why not."""
    if not versions:
        return None, f"key {key!r}: no partition tables to join"
    missing = [v for v, kf in versions.items() if kf.empty]
    if missing:
        return None, f"key {key!r}: {', '.join(_label(v) for v in missing)} has no partition field on it"
    sources: Sources
    if all(kf.identity is not None for kf in versions.values()):
        sources = {v: (_source(kf, None),) for v, kf in versions.items()}
        return KeyGrouping(key, key_type, "identity", None, sources), ""
    derived = [kf for kf in versions.values() if kf.identity is None]
    notes = []

    # time hierarchy: the time fields every version has (identity versions have them all)
    available = [set(kf.times) for kf in derived]
    common = _time_parts(key_type).intersection(*available)
    if common and ("year" in common or all(a == available[0] for a in available)):
        parts = tuple(p for p in TIME_PARTS if p in common)
        sources = {v: tuple(_source(kf, kf.times.get(p)) for p in parts) for v, kf in versions.items()}
        return KeyGrouping(key, key_type, "time", parts, sources), ""
    if any(available):
        have = "/".join(p for p in TIME_PARTS if p in common) or "none"
        notes.append(f"the time fields every version has ({have}) do not include year")

    # truncate with the same width everywhere
    widths = set.intersection(*(set(kf.truncates) for kf in derived))
    if widths:
        w = max(widths)
        sources = {v: (_source(kf, kf.truncates.get(w)),) for v, kf in versions.items()}
        return KeyGrouping(key, key_type, "truncate", w, sources), ""
    if any(kf.truncates for kf in derived):
        notes.append("truncate widths differ")

    # buckets: bucket % G, G the largest gcd of one bucket count per version
    if all(kf.buckets for kf in derived):
        g = max(reduce(math.gcd, combo) for combo in product(*(sorted(kf.buckets) for kf in derived)))
        if g > 1:
            sources = {
                v: (_source(kf, next((f for n, f in sorted(kf.buckets.items()) if n % g == 0), None)),)
                for v, kf in versions.items()
            }
            return KeyGrouping(key, key_type, "bucket", g, sources), ""
        counts = sorted({n for kf in derived for n in kf.buckets})
        notes.append(f"bucket counts {', '.join(map(str, counts))} have no common divisor > 1")
    desc = ", ".join(f"{_label(v)} {kf.describe()}" for v, kf in versions.items())
    return None, f"key {key!r}: no common grouping of {desc}" + (f" ({'; '.join(notes)})" if notes else "")
