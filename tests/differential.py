"""Random tables, partition layouts and Spark SQL filters for the differential suite.

Everything here is data: rows with awkward values (NULLs, NaN, +-0.0, +-inf, empty and
odd strings, decimals at full precision, instants near day, month, year and DST
boundaries), a layout drawn from every transform kind, and filters spelled as the
Spark SQL a user would type. The oracle is Spark's own ``src.where(f)`` on a plain
DataFrame of the same rows (tests/test_differential.py).
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
from hypothesis import strategies as st

UTC = dt.UTC
ZONES = ("UTC", "America/Los_Angeles", "Asia/Kolkata", "Pacific/Chatham")

ARROW = pa.schema(
    [
        ("k", pa.int64()),
        ("i", pa.int32()),
        ("l", pa.int64()),
        ("s", pa.string()),
        ("d", pa.date32()),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("ntz", pa.timestamp("us")),
        ("f", pa.float64()),
        ("r", pa.float32()),
        ("dec", pa.decimal128(38, 2)),
        ("dsm", pa.decimal128(10, 4)),
        ("b", pa.bool_()),
        ("bin", pa.binary()),
    ]
)
SPARK = (
    "k long, i int, l long, s string, d date, ts timestamp, ntz timestamp_ntz, f double, r float, "
    "dec decimal(38,2), dsm decimal(10,4), b boolean, bin binary"
)

# Partition layouts covering every transform kind (each a list of partition_by strings).
LAYOUTS: dict[str, list[str]] = {
    "identity_string_date": ["s", "d"],
    "identity_float_bool": ["f", "b"],
    "identity_int_decimal": ["i", "dsm"],
    "identity_ntz_binary": ["ntz", "bin"],
    "time_ymdh": ["year(ts)", "month(ts)", "day(ts)", "hour(ts)"],
    "time_ntz_day_date_month": ["day(ntz)", "month(d)"],
    "bucket_long_string": ["bucket[4](l)", "bucket[3](s)"],
    "bucket_float_decimal": ["bucket[4](f)", "bucket[3](dec)"],
    "multi_bucket": ["multi_bucket[5](i, s)"],
    "truncate": ["truncate[2](s)", "truncate[10](l)", "truncate[100](dec)"],
    "truncate_decimal_int": ["truncate[3](i)", "truncate[50](dsm)"],
    "identity_timestamp": ["ts", "r"],
}
EXPRESSION_LAYOUTS: dict[str, list[dict[str, Any]]] = {
    # an expression field: murmur3 of an int the long reduces to, as a signed bucket; the rows
    # hold Long.MinValue, which a plain CAST(... AS INT) refuses as Spark's ANSI mode does
    "expression": [{"expression": "murmur3(CAST(col0 % 1000000 AS INT)) % 5", "source": "l", "type": "int32"}],
}

_STRINGS = ["", "a", "ab", "abc", "a%b", "a_b", "x'y", "back\\slash", "new\nline", "ü", "US", "us", "ZZ", " a"]
_BASE_INSTANTS = [
    dt.datetime(2025, 12, 31, 23, 30, tzinfo=UTC),  # year boundary (UTC)
    dt.datetime(2026, 1, 1, 0, 0, tzinfo=UTC),
    dt.datetime(2025, 3, 9, 10, 0, tzinfo=UTC),  # Los Angeles DST starts at 10:00Z
    dt.datetime(2025, 11, 2, 9, 0, tzinfo=UTC),  # Los Angeles DST ends at 09:00Z
    dt.datetime(2025, 4, 5, 13, 45, tzinfo=UTC),  # Chatham DST ends
    dt.datetime(2025, 6, 30, 18, 30, tzinfo=UTC),  # Kolkata midnight
    dt.datetime(2025, 2, 28, 23, 59, 59, 999999, tzinfo=UTC),
]
_FLOATS = [0.0, -0.0, math.nan, math.inf, -math.inf, 1.5, -1.5, 0.1, 1e300, 2.0**53 + 2]
_DECIMALS = [
    decimal.Decimal("0.00"),
    decimal.Decimal("-0.01"),
    decimal.Decimal("1.25"),
    decimal.Decimal("123456789012345678901234567890123456.78"),
    decimal.Decimal("-999999999999999999999999999999999999.99"),
    decimal.Decimal("99.99"),
]
_SMALL_DECIMALS = [decimal.Decimal(x) for x in ("0.0000", "1.2500", "-0.0001", "123456.7891", "-99.5000")]


@st.composite
def rows(draw: st.DrawFn) -> list[dict[str, Any]]:
    n = draw(st.integers(4, 30))
    out = []
    for k in range(n):

        def maybe(strategy: st.SearchStrategy[Any], nulls: float = 0.15) -> Any:
            return None if draw(st.floats(0, 1)) < nulls else draw(strategy)

        instant = maybe(
            st.builds(
                lambda base, minutes: base + dt.timedelta(minutes=minutes),
                st.sampled_from(_BASE_INSTANTS),
                st.sampled_from([-61, -1, 0, 1, 30, 59, 60, 1441]),
            )
        )
        out.append(
            {
                "k": k,
                "i": maybe(st.sampled_from([0, 1, -1, 2, 7, 99, -(2**31), 2**31 - 1])),
                "l": maybe(st.sampled_from([0, 5, -5, 10, 19, 2**53 + 1, -(2**63), 2**63 - 1])),
                "s": maybe(st.sampled_from(_STRINGS)),
                "d": maybe(st.sampled_from([dt.date(2025, 12, 31), dt.date(2026, 1, 1), dt.date(2025, 3, 9)])),
                "ts": instant,
                "ntz": None
                if instant is None
                else draw(st.sampled_from([instant, instant + dt.timedelta(hours=7)])).replace(tzinfo=None),
                "f": maybe(st.sampled_from(_FLOATS)),
                "r": maybe(st.sampled_from([0.0, -0.0, math.nan, 0.1, 1.5, -2.25, 16777217.0])),
                "dec": maybe(st.sampled_from(_DECIMALS)),
                "dsm": maybe(st.sampled_from(_SMALL_DECIMALS)),
                "b": maybe(st.booleans()),
                "bin": maybe(st.sampled_from([b"", b"\x00", b"\x03", b"ab", b"\xff\x00"])),
            }
        )
    return out


def arrow_table(data: Sequence[dict[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(list(data), schema=ARROW)


def spark_rows(data: Sequence[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [tuple(r[name] for name in ARROW.names) for r in data]


# -- literals, spelled as Spark SQL ----------------------------------------------------------------


def sql_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n") + "'"


def sql_float(x: float, suffix: str = "D") -> str:
    if math.isnan(x):
        return "CAST('NaN' AS DOUBLE)"
    if math.isinf(x):
        return f"CAST('{'-' if x < 0 else ''}Infinity' AS DOUBLE)"
    return repr(x) + suffix


@st.composite
def literal(draw: st.DrawFn, column: str, data: Sequence[dict[str, Any]]) -> str:
    """A literal for ``column``: a value of the data (or near one), in one of Spark's spellings."""
    seen = [r[column] for r in data if r[column] is not None]
    if column in ("i", "l"):
        v = draw(st.sampled_from(seen)) if seen and draw(st.booleans()) else draw(st.integers(-20, 20))
        v += draw(st.sampled_from([0, 0, 0, 1, -1]))
        kind = draw(st.sampled_from(["int", "int", "decimal", "double", "half"]))
        if kind == "decimal":
            return f"{v}.0"
        if kind == "double":
            return f"{v}D" if abs(v) < 2**53 else str(v)
        if kind == "half":
            return f"{v}.5"
        return str(v)
    if column == "s":
        v = draw(st.sampled_from(seen or _STRINGS))
        return sql_string(v)
    if column == "d":
        v = draw(st.sampled_from(seen or [dt.date(2026, 1, 1)])) + dt.timedelta(days=draw(st.integers(-1, 1)))
        kind = draw(st.sampled_from(["date", "date", "string", "timestamp"]))
        if kind == "string":
            return f"'{v.isoformat()}'"
        if kind == "timestamp":
            return f"TIMESTAMP '{v.isoformat()} {draw(st.sampled_from(['00:00:00', '12:00:00']))}'"
        return f"DATE '{v.isoformat()}'"
    if column in ("ts", "ntz"):
        base = draw(st.sampled_from(seen or [dt.datetime(2026, 1, 1)]))
        v = base + dt.timedelta(minutes=draw(st.sampled_from([0, 0, -1, 1, 60, -60])))
        wall = v.replace(tzinfo=None) if v.tzinfo is None else v.astimezone(UTC).replace(tzinfo=None)
        kind = draw(st.sampled_from(["plain", "plain", "zulu", "ntz", "date", "string"]))
        text = wall.isoformat(sep=" ")
        if kind == "zulu":
            return f"TIMESTAMP '{text}Z'"
        if kind == "ntz":
            return f"TIMESTAMP_NTZ '{text}'"
        if kind == "date":
            return f"DATE '{wall.date().isoformat()}'"
        if kind == "string":
            return f"'{text}'"
        return f"TIMESTAMP '{text}'"
    if column in ("f", "r"):
        v = draw(st.sampled_from(seen or _FLOATS))
        kind = draw(st.sampled_from(["double", "double", "decimal", "string"]))
        if kind == "decimal" and math.isfinite(v) and abs(v) < 1e15:
            return repr(float(v)) if "e" not in repr(float(v)) else sql_float(v)
        if kind == "string" and math.isnan(v):
            return "'NaN'"
        return sql_float(v)
    if column in ("dec", "dsm"):
        v = draw(st.sampled_from(seen or _DECIMALS))
        kind = draw(st.sampled_from(["decimal", "decimal", "int", "wider"]))
        if kind == "int":
            return str(int(v))
        if kind == "wider" and len(v.as_tuple().digits) < 38:
            return format(v, "f") + "5"
        return format(v, "f")
    if column == "b":
        return draw(st.sampled_from(["TRUE", "FALSE"]))
    if column == "bin":
        v = draw(st.sampled_from(seen or [b"ab"]))
        return f"X'{v.hex()}'"
    raise AssertionError(column)


_COLUMNS = ["i", "l", "s", "d", "ts", "ntz", "f", "r", "dec", "dsm", "b", "bin"]
_OPAQUE = [
    "abs(CAST(i AS BIGINT)) > 3",  # abs(i) overflows on Int.MinValue under ANSI, in Spark too
    "l % 2 = 0",
    "length(s) > 1",
    "coalesce(i, 0) > 1",
    "upper(s) = 'US'",
    "hour(ts) = 0",
    "s RLIKE '^a'",
    "f + 1 > 2",
]


@st.composite
def leaf(draw: st.DrawFn, data: Sequence[dict[str, Any]]) -> str:
    column = draw(st.sampled_from(_COLUMNS))
    kind = draw(st.sampled_from(["cmp", "cmp", "cmp", "flip", "in", "notin", "between", "null", "nullsafe", "other"]))
    if column == "s" and draw(st.integers(0, 3)) == 0:
        kind = "like"
    if column == "b" and draw(st.booleans()):
        return draw(st.sampled_from(["b", "NOT b", "b IS TRUE", "b IS NOT FALSE"]))
    lit = literal(column, data)
    if kind in ("cmp", "flip"):
        op = draw(st.sampled_from(["=", "<>", "<", "<=", ">", ">=", "!="]))
        value = draw(lit)
        if kind == "flip":
            return f"{value} {op} {column}"
        return f"{column} {op} {value}"
    if kind in ("in", "notin"):
        values = [draw(lit) for _ in range(draw(st.integers(1, 3)))]
        if draw(st.integers(0, 5)) == 0:
            values.append("NULL")
        return f"{column} {'NOT ' if kind == 'notin' else ''}IN ({', '.join(values)})"
    if kind == "between":
        return f"{column} {draw(st.sampled_from(['', 'NOT ']))}BETWEEN {draw(lit)} AND {draw(lit)}"
    if kind == "null":
        return f"{column} IS {draw(st.sampled_from(['', 'NOT ']))}NULL"
    if kind == "nullsafe":
        return f"{column} <=> {draw(st.sampled_from([draw(lit), 'NULL']))}"
    if kind == "like":
        seen = [r["s"] for r in data if r["s"]] or ["ab"]
        text = draw(st.sampled_from(seen))
        cut = draw(st.integers(0, len(text)))
        pattern = draw(
            st.sampled_from(
                [
                    text[:cut].replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%",
                    "%" + text[cut:].replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_"),
                    "%" + text[cut : cut + 1].replace("\\", "\\\\") + "%",
                    text[:1] + "_%",
                ]
            )
        )
        return f"s {draw(st.sampled_from(['', 'NOT ']))}LIKE {sql_string(pattern)}"
    return draw(st.sampled_from(_OPAQUE))


@st.composite
def filters(draw: st.DrawFn, data: Sequence[dict[str, Any]], depth: int = 2) -> str:
    if depth == 0 or draw(st.integers(0, 2)) == 0:
        return draw(leaf(data))
    kind = draw(st.sampled_from(["not", "and", "or"]))
    if kind == "not":
        return f"NOT ({draw(filters(data, depth - 1))})"
    joiner = " AND " if kind == "and" else " OR "
    return "(" + joiner.join(draw(filters(data, depth - 1)) for _ in range(draw(st.integers(2, 3)))) + ")"
