"""Filter parsing and partition pruning (SPEC-NOTES 12, 14; spec Appendix D; seed 000 section 3.6), Spark-free.

Data is written with ``write_table`` into real Lance datasets. Expected partition sets
come from hand computation and mmh3, never from the pruning code; the property test
checks soundness against a plain-Python SQL (three-valued) evaluation of the filter.
"""

from __future__ import annotations

import datetime as dt
import decimal
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import lance
import mmh3
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from partitioning.errors import InvalidInput
from partitioning.namespace import PartitionedNamespace
from partitioning.spec.partition_spec import PartitionField, PartitionSpec
from partitioning.spec.schema import NamespaceSchema
from partitioning.sql.binding import bind
from partitioning.sql.filters import (
    And,
    Cmp,
    Computed,
    Const,
    Dialect,
    Filter,
    In,
    IsNull,
    Like,
    Not,
    Opaque,
    Or,
    TrueFilter,
    negation_normal_form,
    to_sql,
)
from partitioning.sql.from_sql import parse_filter
from partitioning.sql.nodes import Binary, Column, Literal
from partitioning.sql.rowfilter import arrow_predicate
from partitioning.tables.write import write_table

UTC = dt.UTC
D = dt.date


def ts(*args: int) -> dt.datetime:
    return dt.datetime(*args, tzinfo=UTC)


# -- parser ---------------------------------------------------------------------------------------

PARSE_CASES: list[tuple[str, Filter]] = [
    ("a = 1", Cmp("a", "=", 1)),
    ("a != 1", Cmp("a", "!=", 1)),
    ("a <> 1", Cmp("a", "!=", 1)),
    ("a < 1", Cmp("a", "<", 1)),
    ("a <= 1", Cmp("a", "<=", 1)),
    ("a > 1", Cmp("a", ">", 1)),
    ("a >= 1", Cmp("a", ">=", 1)),
    ("a=-7", Cmp("a", "=", -7)),
    ("a = 1.5", Cmp("a", "=", decimal.Decimal("1.5"))),
    ("a = -2.25e2", Cmp("a", "=", decimal.Decimal("-225"))),
    ("a IN (1, 2, 3)", In("a", (1, 2, 3))),
    ("a in ('x')", In("a", ("x",))),
    ("a NOT IN (1, 2)", Not(In("a", (1, 2)))),
    ("a BETWEEN 1 AND 5", And((Cmp("a", ">=", 1), Cmp("a", "<=", 5)))),
    ("a NOT BETWEEN 1 AND 5", Not(And((Cmp("a", ">=", 1), Cmp("a", "<=", 5))))),
    ("a IS NULL", IsNull("a")),
    ("a is not null", Not(IsNull("a"))),
    ("s LIKE 'p%'", Like("s", "starts", "p")),
    ("s LIKE '%s'", Like("s", "ends", "s")),
    ("s LIKE '%c%'", Like("s", "contains", "c")),
    ("s LIKE 'exact'", Cmp("s", "=", "exact")),
    ("s NOT LIKE 'ab%'", Not(Like("s", "starts", "ab"))),
    ("NOT a = 1", Not(Cmp("a", "=", 1))),
    ("NOT (a = 1 OR b = 2)", Not(Or((Cmp("a", "=", 1), Cmp("b", "=", 2))))),
    ("a = 1 AND b = 2", And((Cmp("a", "=", 1), Cmp("b", "=", 2)))),
    ("a = 1 OR b = 2", Or((Cmp("a", "=", 1), Cmp("b", "=", 2)))),
    ("a = 1 AND b = 2 AND c = 3", And((Cmp("a", "=", 1), Cmp("b", "=", 2), Cmp("c", "=", 3)))),
    # AND binds tighter than OR; parentheses override it
    ("a = 1 OR b = 2 AND c = 3", Or((Cmp("a", "=", 1), And((Cmp("b", "=", 2), Cmp("c", "=", 3)))))),
    ("(a = 1 OR b = 2) AND c = 3", And((Or((Cmp("a", "=", 1), Cmp("b", "=", 2))), Cmp("c", "=", 3)))),
    ("((a = 1))", Cmp("a", "=", 1)),
    ("d = DATE '2025-12-10'", Cmp("d", "=", D(2025, 12, 10))),
    ("d >= date '1969-07-20'", Cmp("d", ">=", D(1969, 7, 20))),
    ("t = TIMESTAMP '2025-12-10T10:00:00Z'", Cmp("t", "=", ts(2025, 12, 10, 10))),
    ("t = TIMESTAMP '2025-12-10T10:00:00'", Cmp("t", "=", ts(2025, 12, 10, 10))),
    ("t = TIMESTAMP '2025-12-10 10:00:00'", Cmp("t", "=", ts(2025, 12, 10, 10))),
    ("t < TIMESTAMP '2025-12-10T12:30:00+02:00'", Cmp("t", "<", ts(2025, 12, 10, 10, 30))),
    ("s = 'it''s'", Cmp("s", "=", "it's")),
    ("s = ''", Cmp("s", "=", "")),
    ("s = 'héllo wörld'", Cmp("s", "=", "héllo wörld")),
    ("`my col` = 1", Cmp("my col", "=", 1)),
    ("5 < a", Cmp("a", ">", 5)),
    ("5 >= a", Cmp("a", "<=", 5)),
    ("'US' = country", Cmp("country", "=", "US")),
    ("DATE '2025-12-10' <= d", Cmp("d", ">=", D(2025, 12, 10))),
    ("b = TRUE", Cmp("b", "=", True)),
    ("b = false", Cmp("b", "=", False)),
    ("a <=> 3", Cmp("a", "<=>", 3)),
    ("A = 1 aNd B iS NuLl", And((Cmp("A", "=", 1), IsNull("B")))),
]


@pytest.mark.parametrize(("text", "expected"), PARSE_CASES, ids=[c[0] for c in PARSE_CASES])
def test_parse_filter(text: str, expected: Filter) -> None:
    got = parse_filter(text)
    assert got == expected
    assert type(got) is type(expected)


def test_parse_timestamp_literals_are_utc_aware() -> None:
    for text in ("TIMESTAMP '2025-12-10T10:00:00Z'", "TIMESTAMP '2025-12-10T10:00:00'"):
        f = parse_filter(f"t = {text}")
        assert isinstance(f, Cmp)
        assert f.value.utcoffset() == dt.timedelta(0)
        assert f.value == ts(2025, 12, 10, 10)


@pytest.mark.parametrize("text", [None, "", "   "])
def test_parse_empty_filter_is_true(text: str | None) -> None:
    assert parse_filter(text) == TrueFilter()


BAD_FILTERS = [
    "a =",
    "a = = 1",
    "(a = 1",
    "a = 1)",
    "a = 1 AND",
    "a IN ()",
    "a IN 1, 2",
    "a ! 1",
    "a = 'unterminated",
    "a NOT = 1",
    "d = DATE 5",
    "a BETWEEN 1",
    "a IS 5",
    "AND a = 1",
    "a = (" * 5000 + "1" + ")" * 5000,
]


@pytest.mark.parametrize("text", BAD_FILTERS, ids=[t[:40] for t in BAD_FILTERS])
def test_bad_filter_is_one_line_invalid_input(text: str) -> None:
    with pytest.raises(InvalidInput) as info:
        parse_filter(text)
    assert isinstance(info.value, ValueError)
    message = str(info.value)
    assert message.strip()
    assert "\n" not in message
    assert parse_filter(text, strict=False) == Opaque(text)


# Valid SQL the pruner reads as "may match" (Opaque) or as a constant: never an error, since
# Spark (or Lance) applies the filter itself and decides.
NOT_PRUNED = [
    ("a = NULL", Const(None)),
    ("NULL <=> NULL", Const(True)),
    ("1 = 2", Const(False)),
    ("1 = 2.0", Opaque("comparison =")),
    ("a LIKE 5", Opaque("LIKE")),
    ("d = DATE '2025-13-45'", Opaque("comparison =")),
    ("t = TIMESTAMP 'yesterday'", Opaque("comparison =")),
    ("abs(a) > 3", Opaque("comparison >")),
    (
        "a % 2 = 0",
        Computed(Binary("%", Column(("a",)), Literal(2, "int")), "=", Literal(0, "int")),
    ),  # evaluated exactly
    ("size(arr) = 2", Opaque("comparison =")),
    ("m.a > 2", Opaque("comparison >")),
    ("s RLIKE 'a.*'", Opaque("RLIKE")),
    ("x IN (SELECT 1)", Opaque("Other")),
    ("transform(arr, x -> x + 1) = array(2)", Opaque("comparison =")),
]


@pytest.mark.parametrize(("text", "expected"), NOT_PRUNED, ids=[c[0] for c in NOT_PRUNED])
def test_sql_the_pruner_does_not_understand_is_opaque_not_an_error(text: str, expected: Filter) -> None:
    assert parse_filter(text) == expected


LIKE_CASES = [
    ("s LIKE 'a_b%'", Like("s", "pattern", "a_b%")),
    ("s LIKE 'a%b'", Like("s", "pattern", "a%b")),
    ("s LIKE '50\\%%'", Like("s", "starts", "50%")),
    ("s LIKE '50!%%' ESCAPE '!'", Like("s", "starts", "50%")),
    ("s LIKE 'a!_b' ESCAPE '!'", Cmp("s", "=", "a_b")),
    ("s NOT LIKE '%x_'", Not(Like("s", "pattern", "%x_"))),
]


@pytest.mark.parametrize(("text", "expected"), LIKE_CASES, ids=[c[0] for c in LIKE_CASES])
def test_like_patterns(text: str, expected: Filter) -> None:
    assert parse_filter(text) == expected


def test_dialects_read_quotes_and_escapes_differently() -> None:
    """Spark: "x" is a string and backslashes escape; DataFusion: "x" is a column, no escapes."""
    spark, datafusion = Dialect(), Dialect.datafusion()
    assert parse_filter('"other col" = 2', datafusion) == Cmp("other col", "=", 2)
    assert parse_filter("\"p\" = 'US'", spark) == Const(False)
    assert parse_filter("s = 'a\\nb'", spark) == Cmp("s", "=", "a\nb")
    assert parse_filter("s = 'a\\nb'", datafusion) == Cmp("s", "=", "a\\nb")
    assert parse_filter("s = 'it\\'s'", spark) == Cmp("s", "=", "it's")
    assert parse_filter("s = 'a' 'b'", spark) == Cmp("s", "=", "ab")
    assert parse_filter("a = 1.5", datafusion) == Cmp("a", "=", 1.5)
    assert parse_filter("a = 1.5", spark) == Cmp("a", "=", decimal.Decimal("1.5"))


def test_timestamp_literals_follow_the_dialect_time_zone() -> None:
    la = Dialect(time_zone="America/Los_Angeles")
    assert parse_filter("t = TIMESTAMP '2025-12-10 00:00:00'", la) == Cmp("t", "=", ts(2025, 12, 10, 8))
    assert parse_filter("t = TIMESTAMP '2025-12-10T00:00:00Z'", la) == Cmp("t", "=", ts(2025, 12, 10))
    assert parse_filter("t = TIMESTAMP_NTZ '2025-12-10 00:00:00'", la) == Cmp("t", "=", dt.datetime(2025, 12, 10))


def test_negation_normal_form() -> None:
    assert negation_normal_form(Not(Cmp("a", "<", 5))) == Cmp("a", ">=", 5)
    assert negation_normal_form(Not(Not(Cmp("a", "=", 5)))) == Cmp("a", "=", 5)
    assert negation_normal_form(Not(And((Cmp("a", "=", 1), Cmp("b", ">", 2))))) == Or(
        (Cmp("a", "!=", 1), Cmp("b", "<=", 2))
    )
    assert negation_normal_form(Not(Or((IsNull("a"), In("b", (1,)))))) == And((Not(IsNull("a")), Not(In("b", (1,)))))
    assert negation_normal_form(Not(Like("s", "starts", "x"))) == Not(Like("s", "starts", "x"))
    assert negation_normal_form(Not(Cmp("a", "<=>", 1))) == Not(Cmp("a", "<=>", 1))


def test_to_sql_round_trips_through_the_parser() -> None:
    cases = [
        "a = 1",
        "(s = 'it''s') AND (d >= DATE '1969-12-31')",
        "a IN (1, 2) OR s IS NULL",
        "NOT (a IN (1, 2))",
        "t < TIMESTAMP '2025-12-10T10:00:00Z'",
    ]
    for text in cases:
        f = parse_filter(text)
        rendered = to_sql(f)
        assert rendered is not None
        assert parse_filter(rendered) == f
    assert to_sql(TrueFilter()) is None
    assert to_sql(Like("s", "starts", "50%_x")) == "(s LIKE '50\\\\%\\\\_x%')"
    assert parse_filter(str(to_sql(Like("s", "starts", "50%_x")))) == Like("s", "starts", "50%_x")


def to_arrow_expression(f: Filter, schema: pa.Schema) -> Any:
    """The exact Arrow predicate of ``f`` (bound to ``schema``, as every reader binds it)."""
    return arrow_predicate(bind(f, schema), schema)


def test_to_arrow_expression_not_in_with_null_is_not_a_match() -> None:
    """NULL NOT IN (1) is NULL in SQL, so the NULL row must not match (Spark drops it too)."""
    table = pa.table({"i": pa.array([1, None, 3], pa.int64())})
    assert table.filter(to_arrow_expression(In("i", (1,)), table.schema)).column("i").to_pylist() == [1]
    assert table.filter(to_arrow_expression(Not(In("i", (1,))), table.schema)).column("i").to_pylist() == [3]
    assert table.filter(to_arrow_expression(Not(In("i", (1, None))), table.schema)).column("i").to_pylist() == []
    # NOT (i <=> 1) is TRUE for NULL
    assert table.filter(to_arrow_expression(Not(Cmp("i", "<=>", 1)), table.schema)).column("i").to_pylist() == [None, 3]


# -- helpers for effectiveness tests ------------------------------------------------------------


def make_ns(root: Path | str, schema: pa.Schema, spec: Any, rows: Sequence[Mapping[str, Any]]) -> PartitionedNamespace:
    ns = PartitionedNamespace.create(str(root), schema, spec)
    write_table(ns, pa.Table.from_pylist(list(rows), schema=schema))
    return ns


def values_by_id(ns: PartitionedNamespace) -> dict[str, tuple[Any, ...]]:
    return {p.object_id: tuple(p.values.values()) for p in ns.partitions()}


def scanned(ns: PartitionedNamespace, f: str | Filter) -> list[tuple[Any, ...]]:
    """The partition values of the tables a filter scans by partition values alone, sorted
    (NULLs first); tests/test_data_skipping.py adds the tables' column statistics."""
    by_id = values_by_id(ns)
    plan = ns.plan_scan(f, column_stats=False)
    ids = [t.object_id for t in plan]
    assert len(ids) == len(set(ids)), f"a table is scanned twice: {ids}"
    return sorted((by_id[i] for i in ids), key=_sort_key)


def all_keys(ns: PartitionedNamespace) -> list[tuple[Any, ...]]:
    return sorted(values_by_id(ns).values(), key=_sort_key)


def _sort_key(key: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple((v is not None, v if v is not None else 0) for v in key)


def ids_of(ns: PartitionedNamespace, wanted: Iterable[tuple[Any, ...]]) -> list[str]:
    wanted = set(wanted)
    return sorted(oid for oid, key in values_by_id(ns).items() if key in wanted)


def bucket_of(data: bytes, n: int) -> int:
    return abs(mmh3.hash(data, 0, signed=True)) % n


def i64(v: int) -> bytes:
    return v.to_bytes(8, "little", signed=True)


# -- Appendix D (single spec) -------------------------------------------------------------------

EVENTS = pa.schema(
    [pa.field("id", pa.int64(), nullable=False), pa.field("event_date", pa.date32()), pa.field("country", pa.string())]
)


@pytest.fixture
def events_ns(tmp_path: Path) -> PartitionedNamespace:
    rows = []
    for k, (day, country) in enumerate(
        (D(2025, 12, d), c) for d in (9, 10, 11) for c in ("US", "CN", "DE", None) for _ in range(2)
    ):
        rows.append({"id": k, "event_date": day, "country": country})
    return make_ns(tmp_path / "events", EVENTS, ["event_date", "country"], rows)


def test_appendix_d_scans_exactly_one_table(events_ns: PartitionedNamespace) -> None:
    assert len(events_ns.partitions()) == 12
    plan = events_ns.plan_scan("event_date = DATE '2025-12-10' AND country = 'US'")
    assert [t.object_id for t in plan] == ids_of(events_ns, [(D(2025, 12, 10), "US")])
    # the string literal of the spec's example query works the same way
    assert scanned(events_ns, "event_date = '2025-12-10' AND country = 'US'") == [(D(2025, 12, 10), "US")]
    task = plan[0]
    table = next(p for p in events_ns.partitions() if p.object_id == task.object_id)
    assert (task.location, task.read_version, task.read_branch, task.read_tag) == (table.location, 1, None, None)
    assert task.spec_id == 1
    assert task.uri.endswith("/" + table.location)


def test_identity_one_field_and_ranges(events_ns: PartitionedNamespace) -> None:
    countries: list[str | None] = [None, "CN", "DE", "US"]
    days = [D(2025, 12, 9), D(2025, 12, 10), D(2025, 12, 11)]
    assert scanned(events_ns, "country = 'DE'") == [(d, "DE") for d in days]
    assert scanned(events_ns, "event_date > DATE '2025-12-10'") == [(days[2], c) for c in countries]
    assert scanned(events_ns, "event_date <= DATE '2025-12-10' AND country IN ('CN', 'US')") == [
        (d, c) for d in days[:2] for c in ("CN", "US")
    ]
    assert scanned(events_ns, "event_date BETWEEN DATE '2025-12-10' AND DATE '2025-12-10'") == [
        (days[1], c) for c in countries
    ]
    assert scanned(events_ns, "country < 'DE'") == [(d, "CN") for d in days]
    assert scanned(events_ns, "event_date = DATE '2030-01-01'") == []
    assert scanned(events_ns, None) == all_keys(events_ns)
    assert scanned(events_ns, "id = 3") == all_keys(events_ns)


def test_null_partition(events_ns: PartitionedNamespace) -> None:
    days = [D(2025, 12, 9), D(2025, 12, 10), D(2025, 12, 11)]
    assert scanned(events_ns, "country IS NULL") == [(d, None) for d in days]
    assert scanned(events_ns, "country = 'US'") == [(d, "US") for d in days]
    assert scanned(events_ns, "NOT (country = 'US')") == [(d, c) for d in days for c in ("CN", "DE")]
    assert scanned(events_ns, "country != 'US'") == [(d, c) for d in days for c in ("CN", "DE")]
    assert scanned(events_ns, "country NOT IN ('US', 'CN')") == [(d, "DE") for d in days]
    assert scanned(events_ns, "country IS NOT NULL") == [(d, c) for d in days for c in ("CN", "DE", "US")]
    assert scanned(events_ns, "country LIKE 'U%'") == [(d, "US") for d in days]
    assert scanned(events_ns, "NOT (country LIKE 'U%')") == [(d, c) for d in days for c in ("CN", "DE")]
    assert scanned(events_ns, Cmp("country", "<=>", None)) == [(d, None) for d in days]
    assert scanned(events_ns, Cmp("country", "<=>", "US")) == [(d, "US") for d in days]


def test_not_null_safe_equal_keeps_the_null_partition(events_ns: PartitionedNamespace) -> None:
    """NOT (country <=> 'US') is TRUE for a NULL country, so the NULL partition must be scanned."""
    days = [D(2025, 12, 9), D(2025, 12, 10), D(2025, 12, 11)]
    assert scanned(events_ns, Not(Cmp("country", "<=>", "US"))) == [(d, c) for d in days for c in (None, "CN", "DE")]


def test_or_with_an_unprunable_leaf_scans_everything(events_ns: PartitionedNamespace) -> None:
    days = [D(2025, 12, 9), D(2025, 12, 10), D(2025, 12, 11)]
    assert scanned(events_ns, "country = 'US' OR id > 5") == all_keys(events_ns)
    assert scanned(events_ns, "country = 'US' OR country = 'CN'") == [(d, c) for d in days for c in ("CN", "US")]
    assert scanned(events_ns, "(country = 'US' OR id > 5) AND event_date = DATE '2025-12-09'") == [
        (days[0], c) for c in (None, "CN", "DE", "US")
    ]


def test_plan_summary_and_text(events_ns: PartitionedNamespace) -> None:
    manifest_version = lance.dataset(f"{events_ns.root}/__manifest").version
    plan = events_ns.plan_scan("country = 'US'")
    assert plan.summary == (
        f"lance_partitioned: scanning 3 of 12 partition tables (spec v1: 3/12) at __manifest v{manifest_version}"
    )
    lines = str(plan).splitlines()
    assert lines[0] == plan.summary
    task_lines = [line for line in lines if "v1$" in line]
    assert len(task_lines) == 3
    for task, line in zip(plan, task_lines, strict=True):
        assert line.rstrip().endswith(task.object_id)
    assert len(lines) == len(task_lines) + 3  # summary, residual, column header
    everything = events_ns.plan_scan(None)
    assert everything.summary == (
        f"lance_partitioned: scanning 12 of 12 partition tables (spec v1: 12/12) at __manifest v{manifest_version}"
    )
    assert len(everything) == 12


# -- seed 000 section 3.6: time transforms ------------------------------------------------------

TS_SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("ts", pa.timestamp("us", tz="UTC"))])
TS_ROWS = [
    ts(2025, 12, 9, 23, 59),
    ts(2025, 12, 10, 0, 0),
    ts(2025, 12, 10, 5, 0),
    ts(2025, 12, 10, 11, 0),
    ts(2025, 12, 11, 0, 0),
    ts(2025, 12, 11, 13, 30),
    ts(2025, 12, 12, 8, 0),
]


@pytest.fixture
def ymd_ns(tmp_path: Path) -> PartitionedNamespace:
    rows = [{"id": k, "ts": t} for k, t in enumerate(TS_ROWS)]
    return make_ns(tmp_path / "ymd", TS_SCHEMA, ["year(ts)", "month(ts)", "day(ts)"], rows)


def test_seed000_time_range_scans_one_day(ymd_ns: PartitionedNamespace) -> None:
    assert all_keys(ymd_ns) == [(2025, 12, 9), (2025, 12, 10), (2025, 12, 11), (2025, 12, 12)]
    f = "ts >= TIMESTAMP '2025-12-10T10:00:00Z' AND ts < TIMESTAMP '2025-12-11T00:00:00Z'"
    plan = ymd_ns.plan_scan(f)
    assert [t.object_id for t in plan] == ids_of(ymd_ns, [(2025, 12, 10)])
    assert scanned(ymd_ns, f.replace("Z'", "'")) == [(2025, 12, 10)]


def test_time_equality_and_inclusive_ranges(ymd_ns: PartitionedNamespace) -> None:
    assert scanned(ymd_ns, "ts = TIMESTAMP '2025-12-11T13:30:00Z'") == [(2025, 12, 11)]
    assert scanned(ymd_ns, "ts IN (TIMESTAMP '2025-12-09T23:59:00Z', TIMESTAMP '2025-12-12T08:00:00Z')") == [
        (2025, 12, 9),
        (2025, 12, 12),
    ]
    assert scanned(ymd_ns, "ts >= TIMESTAMP '2025-12-11T05:00:00Z'") == [(2025, 12, 11), (2025, 12, 12)]
    assert scanned(ymd_ns, "ts <= TIMESTAMP '2025-12-10T00:00:00Z'") == [(2025, 12, 9), (2025, 12, 10)]
    # an exclusive upper bound at the first instant of a day excludes that day
    assert scanned(ymd_ns, "ts < TIMESTAMP '2025-12-11T00:00:00Z'") == [(2025, 12, 9), (2025, 12, 10)]
    # an offset literal is converted to UTC: 2025-12-11T01:00+02:00 is 2025-12-10T23:00Z
    assert scanned(ymd_ns, "ts = TIMESTAMP '2025-12-11T01:00:00+02:00'") == [(2025, 12, 10)]


def test_time_exclusive_lower_bound_keeps_its_own_day(ymd_ns: PartitionedNamespace) -> None:
    """ts > 10:00 on 2025-12-10 matches the 11:00 row of that day, so day 10 must be scanned."""
    assert scanned(ymd_ns, "ts > TIMESTAMP '2025-12-10T10:00:00Z'") == [(2025, 12, 10), (2025, 12, 11), (2025, 12, 12)]


def test_time_exclusive_upper_bound_mid_day_keeps_its_own_day(ymd_ns: PartitionedNamespace) -> None:
    """ts < 10:00 on 2025-12-10 matches the 00:00 and 05:00 rows of that day."""
    assert scanned(ymd_ns, "ts < TIMESTAMP '2025-12-10T10:00:00Z'") == [(2025, 12, 9), (2025, 12, 10)]


def test_time_tuple_range_across_a_year_boundary(tmp_path: Path) -> None:
    days = [ts(2024, 12, 30, 12), ts(2024, 12, 31, 23), ts(2025, 1, 1, 1), ts(2025, 1, 2), ts(2025, 2, 1)]
    ns = make_ns(
        tmp_path / "ny",
        TS_SCHEMA,
        ["year(ts)", "month(ts)", "day(ts)"],
        [{"id": i, "ts": t} for i, t in enumerate(days)],
    )
    f = "ts >= TIMESTAMP '2024-12-31T12:00:00Z' AND ts <= TIMESTAMP '2025-01-01T05:00:00Z'"
    assert scanned(ns, f) == [(2024, 12, 31), (2025, 1, 1)]
    assert scanned(ns, "ts >= TIMESTAMP '2025-01-01T00:00:00Z'") == [(2025, 1, 1), (2025, 1, 2), (2025, 2, 1)]


def test_day_alone_cannot_prune_a_range(tmp_path: Path) -> None:
    ns = make_ns(tmp_path / "day", TS_SCHEMA, ["day(ts)"], [{"id": i, "ts": t} for i, t in enumerate(TS_ROWS)])
    assert all_keys(ns) == [(9,), (10,), (11,), (12,)]
    assert scanned(ns, "ts >= TIMESTAMP '2025-12-11T05:00:00Z'") == [(9,), (10,), (11,), (12,)]
    assert scanned(ns, "ts = TIMESTAMP '2025-12-11T13:30:00Z'") == [(11,)]


def test_date_source_with_time_transforms(tmp_path: Path) -> None:
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("d", pa.date32())])
    dates = [D(1969, 12, 31), D(1970, 1, 1), D(2025, 12, 9), D(2025, 12, 10), D(2025, 12, 11)]
    ns = make_ns(
        tmp_path / "d", schema, ["year(d)", "month(d)", "day(d)"], [{"id": i, "d": d} for i, d in enumerate(dates)]
    )
    assert scanned(ns, "d = DATE '2025-12-10'") == [(2025, 12, 10)]
    assert scanned(ns, "d < DATE '1970-01-01'") == [(1969, 12, 31)]
    assert scanned(ns, "d >= DATE '2025-12-10' AND d < DATE '2025-12-11'") == [(2025, 12, 10)]
    assert scanned(ns, "d > DATE '2025-12-10'") == [(2025, 12, 11)]


# -- bucket / multi_bucket ------------------------------------------------------------------------

USERS = pa.schema([pa.field("user_id", pa.int64()), pa.field("name", pa.string())])


@pytest.fixture
def bucket_ns(tmp_path: Path) -> PartitionedNamespace:
    rows = [{"user_id": u, "name": f"u{u}"} for u in range(-20, 60)] + [{"user_id": None, "name": "anon"}]
    return make_ns(tmp_path / "bucket", USERS, ["bucket[16](user_id)"], rows)


def test_bucket_equality_scans_exactly_one_bucket(bucket_ns: PartitionedNamespace) -> None:
    expected = abs(mmh3.hash((42).to_bytes(8, "little", signed=True), 0, signed=True)) % 16
    assert len(all_keys(bucket_ns)) == 17  # 16 buckets + NULL
    plan = bucket_ns.plan_scan("user_id = 42")
    assert [t.object_id for t in plan] == ids_of(bucket_ns, [(expected,)])
    assert scanned(bucket_ns, "user_id = -7") == [(bucket_of(i64(-7), 16),)]


def test_bucket_in_scans_exactly_those_buckets(bucket_ns: PartitionedNamespace) -> None:
    expected = sorted({(bucket_of(i64(1), 16),), (bucket_of(i64(2), 16),)})
    assert scanned(bucket_ns, "user_id IN (1, 2)") == expected
    assert scanned(bucket_ns, "user_id = 1 OR user_id = 2") == expected


def test_bucket_null_and_unprunable_predicates(bucket_ns: PartitionedNamespace) -> None:
    assert scanned(bucket_ns, "user_id IS NULL") == [(None,)]
    assert scanned(bucket_ns, "user_id > 10") == all_keys(bucket_ns)
    assert scanned(bucket_ns, "user_id != 42") == all_keys(bucket_ns)


def test_multi_bucket(tmp_path: Path) -> None:
    schema = pa.schema([pa.field("a", pa.int64()), pa.field("b", pa.string())])
    rows = [{"a": a, "b": b} for a in range(6) for b in ("x", "y", "z")]
    ns = make_ns(tmp_path / "mb", schema, ["multi_bucket[8](a, b)"], rows)
    existing = {bucket_of(i64(a) + b.encode(), 8) for a in range(6) for b in ("x", "y", "z")}
    assert all_keys(ns) == [(b,) for b in sorted(existing)]
    one = bucket_of(i64(1) + b"x", 8)
    plan = ns.plan_scan("a = 1 AND b = 'x'")
    assert [t.object_id for t in plan] == ids_of(ns, [(one,)])
    assert scanned(ns, "b = 'x' AND a = 1") == [(one,)]
    assert scanned(ns, "a = 1") == all_keys(ns)
    assert scanned(ns, "b = 'x'") == all_keys(ns)
    two = sorted({(bucket_of(i64(1) + b"x", 8),), (bucket_of(i64(2) + b"x", 8),)})
    assert scanned(ns, "a IN (1, 2) AND b = 'x'") == two


# -- truncate ---------------------------------------------------------------------------------------

NUMS = pa.schema([pa.field("n", pa.int64()), pa.field("s", pa.string())])
N_VALUES = [-25, -11, -5, 3, 12, 17, 25, 31, 48, None]


@pytest.fixture
def trunc_int_ns(tmp_path: Path) -> PartitionedNamespace:
    return make_ns(tmp_path / "ti", NUMS, ["truncate[10](n)"], [{"n": n, "s": "x"} for n in N_VALUES])


def test_truncate_int_layout(trunc_int_ns: PartitionedNamespace) -> None:
    # truncation toward zero: -25 -> -20, -11 -> -10, -5 -> 0
    assert all_keys(trunc_int_ns) == [(None,), (-20,), (-10,), (0,), (10,), (20,), (30,), (40,)]


def test_truncate_int_equality_in_and_ranges(trunc_int_ns: PartitionedNamespace) -> None:
    assert scanned(trunc_int_ns, "n = 17") == [(10,)]
    assert scanned(trunc_int_ns, "n = -11") == [(-10,)]
    assert scanned(trunc_int_ns, "n IN (3, 25)") == [(0,), (20,)]
    assert scanned(trunc_int_ns, "n >= 25") == [(20,), (30,), (40,)]
    assert scanned(trunc_int_ns, "n > 25") == [(20,), (30,), (40,)]
    assert scanned(trunc_int_ns, "n < 12") == [(-20,), (-10,), (0,), (10,)]
    assert scanned(trunc_int_ns, "n BETWEEN 12 AND 17") == [(10,)]
    assert scanned(trunc_int_ns, "n IS NULL") == [(None,)]


def test_truncate_int_upper_bound_on_negatives(trunc_int_ns: PartitionedNamespace) -> None:
    """n = -11 is in partition -10 (truncation toward zero), and -11 < -10."""
    assert scanned(trunc_int_ns, "n < -10") == [(-20,), (-10,)]
    assert scanned(trunc_int_ns, "n <= -11") == [(-20,), (-10,)]


def test_truncate_string(tmp_path: Path) -> None:
    strings = ["abc", "abd", "ab", "a", "acx", "b", "", "xyz", None]
    ns = make_ns(tmp_path / "ts", NUMS, ["truncate[2](s)"], [{"n": i, "s": s} for i, s in enumerate(strings)])
    assert all_keys(ns) == [(None,), ("",), ("a",), ("ab",), ("ac",), ("b",), ("xy",)]
    assert scanned(ns, "s LIKE 'ab%'") == [("ab",)]
    assert scanned(ns, "s LIKE 'abc%'") == [("ab",)]
    assert scanned(ns, "s LIKE 'a%'") == [("a",), ("ab",), ("ac",)]
    assert scanned(ns, "s = 'abc'") == [("ab",)]
    assert scanned(ns, "s IN ('abc', 'b')") == [("ab",), ("b",)]
    assert scanned(ns, "s >= 'b'") == [("b",), ("xy",)]
    assert scanned(ns, "s LIKE '%c'") == all_keys(ns)


# -- expression fields ------------------------------------------------------------------------------


def test_expression_field_equality_prunes(tmp_path: Path) -> None:
    nschema = NamespaceSchema.from_arrow(NUMS)
    spec = PartitionSpec(
        1, [PartitionField("n_mod", [nschema.id_of("n")], expression="col0 % 10", result_type="int64")]
    )
    values = list(range(-15, 16))
    ns = make_ns(tmp_path / "expr", nschema.arrow, spec, [{"n": n, "s": "x"} for n in values])
    # DataFusion's % truncates toward zero: -13 % 10 = -3
    assert all_keys(ns) == [(m,) for m in range(-9, 10)]
    assert scanned(ns, "n = 13") == [(3,)]
    assert scanned(ns, "n = -13") == [(-3,)]
    assert scanned(ns, "n IN (4, 25)") == [(4,), (5,)]
    assert scanned(ns, "n > 3") == all_keys(ns)


# -- soundness property test ---------------------------------------------------------------------

PROP_SCHEMA = pa.schema(
    [
        pa.field("rid", pa.int64()),
        pa.field("i", pa.int64()),
        pa.field("s", pa.string()),
        pa.field("d", pa.date32()),
        pa.field("ts", pa.timestamp("us", tz="UTC")),
    ]
)
LAYOUTS: dict[str, list[str]] = {
    "identity": ["i", "s", "d"],
    "identity_ts": ["ts"],
    "ts_ymdh": ["year(ts)", "month(ts)", "day(ts)", "hour(ts)"],
    "ts_ymd": ["year(ts)", "month(ts)", "day(ts)"],
    "d_ymd": ["year(d)", "month(d)", "day(d)"],
    "bucket": ["bucket[4](i)", "bucket[3](s)", "bucket[3](ts)"],
    "truncate": ["truncate[10](i)", "truncate[2](s)"],
    "multi_bucket": ["multi_bucket[4](i, s)"],
}

ints = st.integers(-30, 30) | st.sampled_from([-(2**40), 2**40, -1, 0, 1, 9, 10, -10])
strings = st.sampled_from(["", "a", "ab", "abc", "b", "é", "éa", "ü€x", "x'y", "A%_"]) | st.text(
    alphabet="abé€", max_size=4
)
dates = st.dates(D(1969, 12, 25), D(1970, 1, 5)) | st.dates(D(2025, 12, 8), D(2026, 1, 2))
timestamps = st.datetimes(dt.datetime(1969, 12, 31, 20), dt.datetime(1970, 1, 1, 4), timezones=st.just(UTC)) | (
    st.datetimes(dt.datetime(2025, 12, 9), dt.datetime(2026, 1, 1, 2), timezones=st.just(UTC))
)
COLUMN_VALUES: dict[str, st.SearchStrategy[Any]] = {"i": ints, "s": strings, "d": dates, "ts": timestamps}


@st.composite
def row_lists(draw: st.DrawFn) -> list[dict[str, Any]]:
    n = draw(st.integers(1, 14))
    rows = []
    for rid in range(n):
        row: dict[str, Any] = {"rid": rid}
        for col, values in COLUMN_VALUES.items():
            row[col] = draw(st.none() | values)
        rows.append(row)
    return rows


def _literal(draw: st.DrawFn, col: str, rows: Sequence[Mapping[str, Any]]) -> Any:
    present = [r[col] for r in rows if r[col] is not None]
    fresh = COLUMN_VALUES[col]
    if col == "ts":
        # also literals in another zone (converted to UTC by the engine)
        fresh = fresh | timestamps.map(lambda t: t.astimezone(dt.timezone(dt.timedelta(hours=-5))))
        if present:
            # the first and last instants of a present value's hour and day, and a microsecond around it
            base = draw(st.sampled_from(present))
            fresh = fresh | st.sampled_from(
                [
                    base.replace(minute=0, second=0, microsecond=0),
                    base.replace(hour=0, minute=0, second=0, microsecond=0),
                    base + dt.timedelta(microseconds=1),
                    base - dt.timedelta(microseconds=1),
                ]
            )
    if present:
        return draw(st.sampled_from(present) | fresh)
    return draw(fresh)


@st.composite
def leaf_filters(draw: st.DrawFn, rows: Sequence[Mapping[str, Any]]) -> Filter:
    col = draw(st.sampled_from(["i", "s", "d", "ts"]))
    kinds = ["cmp", "cmp", "cmp", "in", "notin", "isnull", "notnull"] + (["like"] * 2 if col == "s" else [])
    kind = draw(st.sampled_from(kinds))
    if kind == "cmp":
        op = draw(st.sampled_from(["=", "!=", "<", "<=", ">", ">=", "<=>"]))
        return Cmp(col, op, _literal(draw, col, rows))
    if kind in ("in", "notin"):
        n = draw(st.integers(1, 3))
        values = In(col, tuple(_literal(draw, col, rows) for _ in range(n)))
        return values if kind == "in" else Not(values)
    if kind == "isnull":
        return IsNull(col)
    if kind == "notnull":
        return Not(IsNull(col))
    text = _literal(draw, "s", rows)
    cut = draw(st.integers(0, len(text)))
    like_kind = draw(st.sampled_from(["starts", "ends", "contains"]))
    return Like("s", like_kind, text[:cut] if like_kind == "starts" else text[cut:])


@st.composite
def filters_for(draw: st.DrawFn, rows: Sequence[Mapping[str, Any]], depth: int = 2) -> Filter:
    """A random filter tree over the generated rows' columns: leaves, NOT, AND, OR."""
    if depth == 0 or draw(st.integers(0, 2)) == 0:
        return draw(leaf_filters(rows))
    kind = draw(st.sampled_from(["not", "and", "or"]))
    if kind == "not":
        return Not(draw(filters_for(rows, depth - 1)))
    children = (draw(filters_for(rows, depth - 1)), draw(filters_for(rows, depth - 1)))
    return And(children) if kind == "and" else Or(children)


def sql_eval(f: Filter, row: Mapping[str, Any]) -> bool | None:
    """SQL three-valued evaluation of a filter on one row (plain Python)."""
    if isinstance(f, TrueFilter):
        return True
    if isinstance(f, Cmp):
        x = row[f.column]
        if f.op == "<=>":
            return x is None if f.value is None else (x is not None and x == f.value)
        if x is None:
            return None
        ops: dict[str, Callable[[Any, Any], bool]] = {
            "=": lambda a, b: a == b,
            "!=": lambda a, b: a != b,
            "<": lambda a, b: a < b,
            "<=": lambda a, b: a <= b,
            ">": lambda a, b: a > b,
            ">=": lambda a, b: a >= b,
        }
        return ops[f.op](x, f.value)
    if isinstance(f, In):
        x = row[f.column]
        if x is None:
            return None
        if x in f.values:
            return True
        return None if any(v is None for v in f.values) else False
    if isinstance(f, IsNull):
        return row[f.column] is None
    if isinstance(f, Like):
        x = row[f.column]
        if x is None:
            return None
        return {"starts": x.startswith, "ends": x.endswith, "contains": x.__contains__}[f.kind](f.text)
    if isinstance(f, Not):
        inner = sql_eval(f.child, row)
        return None if inner is None else not inner
    results = [sql_eval(c, row) for c in f.children]
    if isinstance(f, And):
        if any(r is False for r in results):
            return False
        return None if any(r is None for r in results) else True
    if any(r is True for r in results):
        return True
    return None if any(r is None for r in results) else False


def matching(f: Filter, rows: Iterable[Mapping[str, Any]]) -> set[int]:
    return {r["rid"] for r in rows if sql_eval(f, r) is True}


SOUNDNESS = settings(
    deadline=None,
    database=None,
    derandomize=True,
    phases=(Phase.explicit, Phase.generate),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def lost_rows(
    ns: PartitionedNamespace, rows: Sequence[Mapping[str, Any]], filters: Sequence[Filter], label: str
) -> list[str]:
    """Check every table reads back its rows, then list each filter whose plan misses a match."""
    rows_of = {p.object_id: ns.open_table(p).to_table().to_pylist() for p in ns.partitions()}
    stored = sorted((r for rs in rows_of.values() for r in rs), key=lambda r: r["rid"])
    assert stored == pa.Table.from_pylist(list(rows), schema=PROP_SCHEMA).to_pylist(), (
        f"{label}: the written rows do not read back"
    )
    failures = []
    for f in filters:
        expected = matching(f, rows)
        kept = {t.object_id for t in ns.plan_scan(f)}
        got = matching(f, (r for oid in kept for r in rows_of[oid]))
        if got != expected:
            lost = [r for r in rows if r["rid"] in expected - got]
            failures.append(f"{label}: filter {to_sql(f)} lost rows {lost}")
    return failures


@settings(SOUNDNESS, max_examples=25)
@given(rows=row_lists(), data=st.data())
def test_pruning_is_sound(rows: list[dict[str, Any]], data: st.DataObject) -> None:
    """Rows matching a filter in the whole namespace all live in the tables the plan keeps."""
    filters = [data.draw(filters_for(rows), label=f"filter{k}") for k in range(8)]
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, layout in LAYOUTS.items():
            ns = make_ns(Path(tmp) / name, PROP_SCHEMA, layout, rows)
            failures += lost_rows(ns, rows, filters, f"layout {name} ({layout})")
    assert not failures, "\n".join(failures)


@settings(max_examples=60, deadline=None, database=None, derandomize=True)
@given(rows=row_lists(), data=st.data())
def test_to_arrow_expression_has_sql_semantics(rows: list[dict[str, Any]], data: st.DataObject) -> None:
    """The Arrow predicate used on unpushable scans matches SQL three-valued logic."""
    table = pa.Table.from_pylist(rows, schema=PROP_SCHEMA)
    f = data.draw(filters_for(rows), label="filter")
    got = set(table.filter(to_arrow_expression(f, table.schema)).column("rid").to_pylist())
    assert got == matching(f, rows), f"filter {to_sql(f)}"


@st.composite
def version_histories(draw: st.DrawFn) -> list[str]:
    """2-3 partition spec versions, drawn from the layouts, consecutive ones different."""
    names = sorted(LAYOUTS)
    first = draw(st.sampled_from(names))
    history = [first]
    for _ in range(draw(st.integers(1, 2))):
        history.append(draw(st.sampled_from([n for n in names if n != history[-1]])))
    return history


def _aliased(layout: str) -> list[str]:
    """A layout's fields named after the layout, so every version's fields are distinct."""
    return [f"{expr} AS {layout}_{k}" for k, expr in enumerate(LAYOUTS[layout])]


@settings(SOUNDNESS, max_examples=25)
@given(rows=row_lists(), history=version_histories(), data=st.data())
def test_pruning_is_sound_across_spec_versions(
    rows: list[dict[str, Any]], history: list[str], data: st.DataObject
) -> None:
    """With rows spread over 2-3 spec versions, every matching row lives in a kept table."""
    cuts = sorted(data.draw(st.lists(st.integers(0, len(rows)), min_size=len(history) - 1, max_size=len(history) - 1)))
    chunks = [rows[a:b] for a, b in zip([0, *cuts], [*cuts, len(rows)], strict=True)]
    filters = [data.draw(filters_for(rows), label=f"filter{k}") for k in range(8)]
    with tempfile.TemporaryDirectory() as tmp:
        ns = PartitionedNamespace.create(str(Path(tmp) / "ns"), PROP_SCHEMA, _aliased(history[0]))
        for version, (layout, chunk) in enumerate(zip(history, chunks, strict=True), start=1):
            if version > 1:
                ns.evolve_partition_spec(_aliased(layout))
            if chunk:
                write_table(ns, pa.Table.from_pylist(chunk, schema=PROP_SCHEMA))
        assert sorted(ns.specs) == list(range(1, len(history) + 1))
        failures = lost_rows(ns, rows, filters, f"versions {history}")
    assert not failures, "\n".join(failures)


def test_property_histories_prune_something() -> None:
    """Guard against a vacuous property: a two-version namespace does prune per version."""
    rows = [
        {"rid": 0, "i": 1, "s": "a", "d": D(2025, 12, 10), "ts": None},
        {"rid": 1, "i": 2, "s": "b", "d": D(2025, 12, 11), "ts": None},
        {"rid": 2, "i": 1, "s": "b", "d": D(2025, 12, 10), "ts": None},
        {"rid": 3, "i": 3, "s": "c", "d": D(2025, 12, 12), "ts": None},
    ]
    with tempfile.TemporaryDirectory() as tmp:
        ns = PartitionedNamespace.create(str(Path(tmp) / "ns"), PROP_SCHEMA, _aliased("identity"))
        write_table(ns, pa.Table.from_pylist(rows[:2], schema=PROP_SCHEMA))
        ns.evolve_partition_spec(_aliased("d_ymd"))
        write_table(ns, pa.Table.from_pylist(rows[2:], schema=PROP_SCHEMA))
        plan = ns.plan_scan("i = 1 AND d = DATE '2025-12-10'")
        assert sorted((t.spec_id, t.object_id) for t in plan) == sorted(
            (p.spec_id, p.object_id)
            for p in ns.partitions()
            if (p.spec_id == 1 and p.values["identity_0"] == 1) or (p.spec_id == 2 and p.values["d_ymd_2"] == 10)
        )
        assert len(plan.tasks) == 2


@pytest.mark.parametrize(
    ("sql", "ids"),
    [
        ("f IN (0.5, 2)", [0, 1]),
        ("i IN (1, 2.0)", [0, 1]),
        ("i IN (1.5, 3)", [2]),
        ("d IN (1.5, 2)", [0, 1]),
        ("NOT (d IN (1.5, 2))", [3]),
        ("NOT (f IN (0.5, 2))", [2]),
    ],
)
def test_arrow_in_with_mixed_number_literals(sql: str, ids: list[int]) -> None:
    """IN lists mixing integer and decimal literals compare numerically, NULL rows never match."""
    table = pa.table(
        {
            "rid": [0, 1, 2, 3],
            "f": [0.5, 2.0, 3.0, None],
            "i": [1, 2, 3, None],
            "d": pa.array(
                [decimal.Decimal("1.50"), decimal.Decimal("2.00"), None, decimal.Decimal("0.10")], pa.decimal128(10, 2)
            ),
        }
    )
    assert table.filter(to_arrow_expression(parse_filter(sql), table.schema)).column("rid").to_pylist() == ids
