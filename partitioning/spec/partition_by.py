"""Partition specs from the text users write (``"day(ts)"``, ``"bucket[16](user_id) AS b"``), with their warnings.

:func:`parse_partition_by` reads the strings, :func:`spec_of_parts` builds and validates
the spec with Iceberg-style default field ids, and :func:`time_hierarchy_gaps` names the
month/day/hour fields whose coarser part is missing (logged as a warning when a spec is built).
"""

from __future__ import annotations

import itertools
import logging
import re
from collections.abc import Sequence

from partitioning.errors import SpecError
from partitioning.spec.field_ids import field_id_of
from partitioning.spec.partition_spec import PartitionField, PartitionSpec
from partitioning.spec.schema import NamespaceSchema
from partitioning.spec.transforms import IdentityTransform, Transform, parse_transform

__all__ = ["check_same_spec", "parse_partition_by", "spec_of_parts", "time_hierarchy_gaps"]

_log = logging.getLogger(__name__)

_PARTITION_BY_RE = re.compile(
    r"^\s*(?P<transform>[a-z_]+(?:\s*\[\s*-?\d+\s*\])?)\s*\(\s*(?P<cols>[^()]*)\)\s*(?:as\s+(?P<alias>\w+))?\s*$",
    re.IGNORECASE,
)
_PLAIN_RE = re.compile(r"^\s*(?P<col>[^\s()]+)\s*(?:as\s+(?P<alias>\w+))?\s*$", re.IGNORECASE)


def _default_field_id(transform: Transform, cols: Sequence[str]) -> str:
    base = "_".join(re.sub(r"\W", "_", c) for c in cols)
    suffix = {"identity": "", "truncate": "_trunc", "bucket": "_bucket", "multi_bucket": "_bucket"}.get(
        transform.name, f"_{transform.name}"
    )
    return base + suffix


def parse_partition_by(exprs: Sequence[str], schema: NamespaceSchema, *, spec_id: int = 1) -> PartitionSpec:
    """Build a spec from strings like ``"day(ts)"``, ``"bucket[16](user_id)"``, ``"country"``.

    ``"... AS name"`` sets the field_id; otherwise it is derived Iceberg-style
    (``ts_day``, ``user_id_bucket``, ``country``).
    """
    if isinstance(exprs, str):
        exprs = [exprs]
    parts: list[tuple[Transform, list[str], str | None]] = []
    for text in exprs:
        m = _PARTITION_BY_RE.match(text)
        if m:
            transform = parse_transform(m.group("transform"))
            cols = [c.strip() for c in m.group("cols").split(",") if c.strip()]
            alias = m.group("alias")
        else:
            plain = _PLAIN_RE.match(text)
            if not plain:
                raise SpecError(
                    f"cannot parse partition expression {text!r}; write e.g. 'day(ts)', "
                    "'bucket[16](user_id)', 'truncate[4](name)' or a column name"
                )
            transform, cols, alias = IdentityTransform(), [plain.group("col")], plain.group("alias")
        if not cols:
            raise SpecError(f"partition expression {text!r} names no column")
        parts.append((transform, cols, alias))
    return spec_of_parts(parts, schema, spec_id=spec_id)


def spec_of_parts(
    parts: Sequence[tuple[Transform, Sequence[str], str | None]], schema: NamespaceSchema, *, spec_id: int = 1
) -> PartitionSpec:
    """A spec from (transform, source column names, field id or None) triples, field ids
    derived as :func:`parse_partition_by` derives them; validated against ``schema``."""
    fields = []
    for transform, cols, alias in parts:
        source_fields = [schema.field_by_name(c) for c in cols]
        source_ids = [field_id_of(f) for f in source_fields]
        transform.check_sources(source_fields)
        result = transform.result_type([f.type for f in source_fields])
        fields.append(
            PartitionField(
                alias or _default_field_id(transform, cols),
                [i for i in source_ids if i is not None],
                transform=transform,
                result_type=result,
            )
        )
    spec = PartitionSpec(spec_id, fields)
    spec.validate(schema)
    for line in time_hierarchy_gaps(spec.fields, schema):
        _log.warning("%s", line)
    return spec


# month is 1-12, day the day of the month (1-31), hour 0-23: each repeats unless the
# next coarser part of the same column is a partition field too.
_TIME_PARTS = ("year", "month", "day", "hour")
_REPEATS = {
    "month": "every year's December",
    "day": "the 10th of every month",
    "hour": "the 13:00 hour of every day",
}
_MEANING = {"month": "1-12", "day": "the day of the month, 1-31", "hour": "0-23"}


def time_hierarchy_gaps(fields: Sequence[PartitionField], schema: NamespaceSchema) -> list[str]:
    """One line per column whose month/day/hour field lacks the next coarser part (month
    without year, day without month, hour without day), which puts rows that are far apart
    in time into one partition; a column that is also an identity field is exact and skipped."""
    parts: dict[int, set[str]] = {}
    for f in fields:
        if f.transform is not None and len(f.source_ids) == 1:
            parts.setdefault(f.source_ids[0], set()).add(f.transform.name)
    lines = []
    for source_id, names in parts.items():
        if "identity" in names:
            continue
        source = schema.top_level_field_by_id(source_id)
        col = source.name if source is not None else f"field {source_id}"
        for coarser, part in itertools.pairwise(_TIME_PARTS):
            if part in names and coarser not in names:
                finest = max(_TIME_PARTS.index(n) for n in names if n in _TIME_PARTS)
                chain = ", ".join(f"{p}({col})" for p in _TIME_PARTS[: finest + 1])
                lines.append(
                    f"partition spec: {part}({col}) without {coarser}({col}) puts {_REPEATS[part]} into one "
                    f"partition ({part} is {_MEANING[part]}); partition by {chain} instead"
                )
                break
    return lines


def check_same_spec(root: str, current: PartitionSpec, wanted: PartitionSpec, hint: str) -> None:
    """Refuse a write into an existing namespace that asks for other partitioning than its
    current spec (the same fields and transforms, in order), in one line ending in ``hint``."""
    if [f.signature for f in wanted.fields] != [f.signature for f in current.fields]:
        raise SpecError(f"the namespace at {root} is partitioned as {current}, not {wanted}; {hint}")
