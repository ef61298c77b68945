"""The columns of a join: its type and keys checked, and Spark's ``USING`` output names and schema.

The output holds the keys once, then the left and the right non-key columns. A non-key
name on both sides appears twice, as in Spark, unless suffixes tell the two apart; a
reader that cannot hold duplicate names asks for :func:`distinct_suffixes`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import pyarrow as pa

from partitioning.errors import InvalidInput
from partitioning.spec.schema import NamespaceSchema

__all__ = [
    "JOIN_TYPES",
    "distinct_suffixes",
    "duplicate_names",
    "join_output_names",
    "join_output_schema",
    "validate_join",
]


JoinType = Literal["inner", "left", "right", "full"]
JOIN_TYPES: tuple[str, ...] = ("inner", "left", "right", "full")


def normalize_on(on: str | Sequence[str]) -> tuple[str, ...]:
    keys = (on,) if isinstance(on, str) else tuple(on)
    if not keys or not all(isinstance(k, str) and k for k in keys):
        raise InvalidInput(f"join keys 'on' must be a non-empty list of column names, got {on!r}")
    dupes = sorted({k for k in keys if keys.count(k) > 1})
    if dupes:
        raise InvalidInput(f"join key {dupes[0]!r} is given twice in 'on'")
    return keys


Suffixes = tuple[str, str]


def check_suffixes(suffixes: Sequence[str] | None) -> Suffixes | None:
    """``None``, or a pair of strings (left, right) as a tuple."""
    if suffixes is None:
        return None
    if isinstance(suffixes, str) or len(suffixes) != 2 or not all(isinstance(x, str) for x in suffixes):
        raise InvalidInput(f"suffixes must be two strings (left, right), e.g. ('_left', '_right'); got {suffixes!r}")
    return suffixes[0], suffixes[1]


def shared_columns(left: NamespaceSchema, right: NamespaceSchema, on: Sequence[str]) -> list[str]:
    """The left non-key columns whose name (ignoring case, as Spark does) is also a right non-key column."""
    right_rest = {c.lower() for c in right.arrow.names if c not in on}
    return [c for c in left.arrow.names if c not in on and c.lower() in right_rest]


def join_output_names(
    left: NamespaceSchema, right: NamespaceSchema, on: Sequence[str], suffixes: Sequence[str] | None = None
) -> list[str]:
    """The names of Spark's ``left.join(right, on=[...])`` columns: the keys once, the left then the
    right non-key columns. A non-key name on both sides appears twice, as in Spark, unless
    ``suffixes=(l, r)`` is given: then both get their side's suffix (names compared ignoring case)."""
    pair = check_suffixes(suffixes)
    shared = {c.lower() for c in shared_columns(left, right, on)}

    def named(c: str, suffix: str) -> str:
        return c + suffix if pair is not None and c.lower() in shared else c

    names = list(on)
    names += [named(c, pair[0] if pair else "") for c in left.arrow.names if c not in on]
    names += [named(c, pair[1] if pair else "") for c in right.arrow.names if c not in on]
    return names


def validate_join(
    left: NamespaceSchema,
    right: NamespaceSchema,
    on: str | Sequence[str],
    how: str,
    suffixes: Sequence[str] | None = None,
) -> tuple[tuple[str, ...], JoinType]:
    """Check the join type, the keys and the suffixes; return the keys and the join type.

    Non-key columns on both sides are allowed (Spark keeps both); ``suffixes``, when given,
    must make every output name distinct (ignoring case).
    """
    if how not in JOIN_TYPES:
        raise InvalidInput(f"unknown join type {how!r}; allowed: {', '.join(JOIN_TYPES)}")
    keys = normalize_on(on)
    for label, schema in (("left", left), ("right", right)):
        for k in keys:
            if schema.arrow.get_field_index(k) < 0:
                raise InvalidInput(
                    f"unknown join key {k!r}: the {label} side has no such column; "
                    f"{label} columns are: {', '.join(schema.arrow.names)}"
                )
    pair = check_suffixes(suffixes)
    if pair is not None:
        own = {d.lower() for schema in (left, right) for d in duplicate_names(schema.arrow.names)}
        dupes = [d for d in duplicate_names(join_output_names(left, right, keys, pair)) if d.lower() not in own]
        if dupes:
            raise InvalidInput(
                f"suffixes {pair!r} leave duplicate output column(s) {', '.join(map(repr, dupes))}; "
                "choose suffixes that make every column name distinct"
            )
    return keys, how  # type: ignore[return-value]


def duplicate_names(names: Sequence[str]) -> list[str]:
    """The names that occur more than once, ignoring case (Spark's default), in order of first repeat."""
    seen: set[str] = set()
    out: list[str] = []
    for n in names:
        if n.lower() in seen and n not in out:
            out.append(n)
        seen.add(n.lower())
    return out


def distinct_suffixes(left: NamespaceSchema, right: NamespaceSchema, on: Sequence[str]) -> Suffixes:
    """Suffixes that make every output name distinct, for a reader that cannot hold duplicate names."""
    n = 0
    while True:
        pair = (f"__lance_left{n or ''}", f"__lance_right{n or ''}")
        names = join_output_names(left, right, on, pair)
        if len(set(names)) == len(names):
            return pair
        n += 1


def join_output_schema(
    left: NamespaceSchema, right: NamespaceSchema, on: Sequence[str], suffixes: Sequence[str] | None = None
) -> pa.Schema:
    """Spark's ``USING`` output: the keys once, then the left and the right non-key columns (all
    nullable), named by :func:`join_output_names` (so possibly twice without ``suffixes``)."""
    fields = [left.arrow.field(k) for k in on]
    fields += [f for f in left.arrow if f.name not in on]
    fields += [f for f in right.arrow if f.name not in on]
    names = join_output_names(left, right, on, suffixes)
    return pa.schema([pa.field(n, f.type, nullable=True) for n, f in zip(names, fields, strict=True)])
