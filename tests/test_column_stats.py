"""Column statistics per partition table, Spark-free: what they record, and that skipping by them is sound.

Oracles: plain Python's ``min``/``max`` over the values a column holds, and DuckDB evaluating
the same filter text over the rows the tables hold (read back with pylance): every partition
holding a matching row must be in the plan. Tests with Spark's answers and every door are in
tests/test_data_skipping.py; the differential suite (tests/test_differential.py) runs its
filters over tables written in several appends, so merged statistics are checked there too.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
from pathlib import Path
from typing import Any

import duckdb
import lance
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from partitioning import NamespaceSchema, PartitionedNamespace
from partitioning.stats.bounds import STATS_KEY, STRING_PREFIX, TableStats, collect_stats
from partitioning.tables.deletes import delete_rows
from partitioning.tables.write import write_table

SCHEMA = pa.schema(
    [
        pa.field("p", pa.int32()),
        pa.field("id", pa.int64()),
        pa.field("x", pa.float64()),
        pa.field("d", pa.decimal128(9, 2)),
        pa.field("s", pa.string()),
        pa.field("day", pa.date32()),
        pa.field("ts", pa.timestamp("us")),
        pa.field("b", pa.bool_()),
    ]
)
FLOATS = st.one_of(
    st.none(),
    st.sampled_from([math.nan, math.inf, -math.inf, 0.0, -0.0]),
    st.floats(-1e6, 1e6, allow_nan=False).map(lambda v: round(v, 2)),
)
STRINGS = st.one_of(
    st.none(),
    st.sampled_from(["", "a", "ab", "b", "\U0010ffff" * 40, "z" * 40, "\uffff"]),
    st.text(alphabet=st.sampled_from("ab\u00e9\U0001f600\U0010ffff"), max_size=40),
)
T0 = dt.datetime(2024, 3, 10, 1, 30)


def _row(draw: st.DrawFn, k: int) -> dict[str, Any]:
    n = draw(st.integers(-50, 50))
    maybe = draw(st.booleans())
    return {
        "p": draw(st.integers(0, 4)),
        "id": n if maybe or k % 3 else None,
        "x": draw(FLOATS),
        "d": None if n % 5 == 0 else decimal.Decimal(n * 37) / 100,
        "s": draw(STRINGS),
        "day": dt.date(2024, 1, 1) + dt.timedelta(days=n),
        "ts": None if n % 7 == 0 else T0 + dt.timedelta(minutes=n * 97),
        "b": None if n % 4 == 0 else n > 0,
    }


@st.composite
def tables(draw: st.DrawFn) -> list[dict[str, Any]]:
    return [_row(draw, k) for k in range(draw(st.integers(1, 40)))]


def _literal(column: str, v: Any) -> str:
    if isinstance(v, float):
        return f"'{v!r}'" if math.isnan(v) or math.isinf(v) else repr(v)
    if isinstance(v, decimal.Decimal):
        return str(v)
    if isinstance(v, str):
        return "'" + v.replace("'", "''") + "'"
    if isinstance(v, dt.datetime):
        return f"TIMESTAMP '{v.isoformat(sep=' ')}'"
    if isinstance(v, dt.date):
        return f"DATE '{v.isoformat()}'"
    return str(v).upper() if isinstance(v, bool) else str(v)


@st.composite
def filters(draw: st.DrawFn, rows: list[dict[str, Any]]) -> str:
    def leaf() -> str:
        column = draw(st.sampled_from([c for c in SCHEMA.names if c != "p"]))
        seen = [r[column] for r in rows if r[column] is not None]
        if not seen or draw(st.integers(0, 6)) == 0:
            return f"{column} IS {draw(st.sampled_from(['', 'NOT ']))}NULL"
        v = draw(st.sampled_from(seen))
        if column == "s" and draw(st.booleans()):
            prefix = v[: draw(st.integers(0, len(v)))]
            return f"s LIKE '{prefix}%'"
        if column == "x" and draw(st.integers(0, 4)) == 0:
            v = math.nan
        if column == "id" and isinstance(v, int):
            v += draw(st.integers(-2, 2))
        if draw(st.integers(0, 4)) == 0:
            others = [_literal(column, draw(st.sampled_from(seen))) for _ in range(2)]
            return f"{column} IN ({_literal(column, v)}, {', '.join(others)})"
        op = draw(st.sampled_from(["=", "<", "<=", ">", ">=", "!="]))
        return f"{column} {op} {_literal(column, v)}"

    parts = [leaf() for _ in range(draw(st.integers(1, 3)))]
    return f" {draw(st.sampled_from(['AND', 'OR']))} ".join(f"({p})" for p in parts)


def _namespace(root: Path, rows: list[dict[str, Any]], appends: int) -> PartitionedNamespace:
    ns = PartitionedNamespace.create(str(root), SCHEMA, ["p"])
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    step = max(1, math.ceil(len(rows) / appends))
    for start in range(0, len(rows), step):
        write_table(ns, table.slice(start, step))
    return PartitionedNamespace.load(str(root))


def _stored(ns: PartitionedNamespace) -> pa.Table:
    return pa.concat_tables([ns.open_table(t).to_table() for t in ns.partitions()])


def _partitions_matching(rows: pa.Table, f: str) -> set[int]:
    con = duckdb.connect()
    con.register("t", rows)
    return {r[0] for r in con.execute(f"SELECT DISTINCT p FROM t WHERE {f}").fetchall()}


@settings(
    max_examples=40,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_skipping_never_loses_a_matching_partition(tmp_path_factory: pytest.TempPathFactory, data: Any) -> None:
    rows = data.draw(tables())
    root = tmp_path_factory.mktemp("stats") / "ns"
    ns = _namespace(root, rows, data.draw(st.integers(1, 3)))
    if data.draw(st.booleans()):
        delete_rows(ns, "id > 10")
        ns = PartitionedNamespace.load(str(root))
    stored = _stored(ns)
    by_id = {t.object_id: t.values["p"] for t in ns.partitions()}
    for _ in range(4):
        f = data.draw(filters(rows))
        kept = {by_id[t.object_id] for t in ns.plan_scan(f)}
        missed = _partitions_matching(stored, f) - kept
        assert not missed, f"{f}: partitions {missed} hold matching rows and were skipped"


def _values(rows: list[dict[str, Any]], column: str) -> list[Any]:
    return [r[column] for r in rows if r[column] is not None]


def test_statistics_are_the_columns_bounds_and_counts() -> None:
    rows = [
        {"p": 1, "id": 7, "x": math.nan, "d": decimal.Decimal("1.50"), "s": "b" * 50, "day": dt.date(2024, 1, 2)},
        {"p": 1, "id": -3, "x": -0.0, "d": None, "s": "ab", "day": None, "ts": T0, "b": True},
        {"p": 1, "id": None, "x": 2.5, "d": decimal.Decimal("-0.25"), "s": None, "day": dt.date(2023, 5, 1)},
        {"p": 1, "id": 4, "x": math.inf, "d": decimal.Decimal("9.99"), "s": "", "b": False},
    ]
    schema = NamespaceSchema.from_arrow(SCHEMA).arrow
    stats = collect_stats(pa.Table.from_pylist(rows, schema=SCHEMA), schema)
    by_name = {f.name: stats.columns[f.metadata[b"lance:field_id"].decode()] for f in schema}
    assert stats.rows == 4
    assert (by_name["id"].lo, by_name["id"].hi, by_name["id"].nulls) == (-3, 7, 1)
    x = by_name["x"]
    assert (x.nans, x.values, x.lo, x.hi) == (1, 3, -0.0, None)  # +inf is no bound: unbounded above
    assert (by_name["d"].lo, by_name["d"].hi) == (min(_values(rows, "d")), max(_values(rows, "d")))
    s = by_name["s"]
    assert s.lo == "" and len(s.hi) == STRING_PREFIX and s.hi > "b" * 50 and s.hi.startswith("b" * 31)
    day = by_name["day"]
    epoch = dt.date(1970, 1, 1)
    assert (day.lo, day.hi) == ((dt.date(2023, 5, 1) - epoch).days, (dt.date(2024, 1, 2) - epoch).days)
    assert (by_name["ts"].nulls, by_name["ts"].values, by_name["b"].lo, by_name["b"].hi) == (3, 1, False, True)
    back = TableStats.from_json(stats.to_json(5), 5)
    assert back == stats
    assert TableStats.from_json(stats.to_json(5), 6) is None


@given(values=st.lists(st.text(max_size=60), min_size=1, max_size=8))
@settings(max_examples=200, deadline=None, database=None, derandomize=True)
def test_string_bounds_enclose_every_value_in_utf8_order(values: list[str]) -> None:
    schema = NamespaceSchema.from_arrow(pa.schema([pa.field("s", pa.string())])).arrow
    c = next(iter(collect_stats(pa.table({"s": values}, schema=schema), schema).columns.values()))
    encoded = [v.encode("utf-8") for v in values]
    assert c.lo.encode("utf-8") <= min(encoded) and len(c.lo) <= STRING_PREFIX
    assert c.hi is None or (c.hi.encode("utf-8") >= max(encoded) and len(c.hi) <= STRING_PREFIX)


@pytest.mark.parametrize(
    "metadata",
    [
        "not json",
        '{"lance_partitioned.stats": 5}',
        '{"lance_partitioned.stats": "{\\"version\\": true, \\"rows\\": 1, \\"columns\\": {}}"}',
        '{"lance_partitioned.stats": "{\\"version\\": 1, \\"rows\\": -1, \\"columns\\": {}}"}',
        '{"lance_partitioned.stats": "{\\"version\\": 1, \\"rows\\": 2, \\"columns\\": {\\"1\\": '
        '{\\"type\\": \\"int64\\", \\"nulls\\": 0, \\"nans\\": 0, \\"values\\": 2, \\"lo\\": \\"a\\", '
        '\\"hi\\": 99999999999999999999999}}}"}',
        "[1, 2]",
    ],
)
def test_a_table_row_with_unreadable_statistics_is_always_read(tmp_path: Path, metadata: str) -> None:
    ns = _namespace(tmp_path / "ns", [{"p": 1, "id": 5}, {"p": 2, "id": 500}], 1)
    target = next(t for t in ns.partitions() if t.values["p"] == 1)
    manifest = lance.dataset(str(tmp_path / "ns" / "__manifest"))
    manifest.update({"metadata": "'" + metadata.replace("'", "''") + "'"}, where=f"object_id = '{target.object_id}'")
    ns = PartitionedNamespace.load(str(tmp_path / "ns"))
    assert {t.object_id for t in ns.plan_scan("id = 1000")} == {target.object_id}
    assert {t.object_id for t in ns.plan_scan("id = 5")} == {target.object_id}


def test_statistics_hold_for_one_table_version(tmp_path: Path) -> None:
    """A writer that moves a row's ``read_version`` and keeps its ``metadata`` (another engine
    committing the row as it found it) leaves statistics that no longer hold: the table is read."""
    ns = _namespace(tmp_path / "ns", [{"p": 1, "id": 5}, {"p": 2, "id": 500}], 1)
    target = next(t for t in ns.partitions() if t.values["p"] == 1)
    assert json.loads(json.loads(_metadata(tmp_path, target.object_id))[STATS_KEY])["version"] == target.read_version
    schema = lance.dataset(target.uri).schema
    row = pa.Table.from_pylist([{"p": 1, "id": 9000}], schema=schema)
    appended = lance.write_dataset(row, target.uri, mode="append")
    manifest = lance.dataset(str(tmp_path / "ns" / "__manifest"))
    manifest.update({"read_version": str(appended.version)}, where=f"object_id = '{target.object_id}'")
    ns = PartitionedNamespace.load(str(tmp_path / "ns"))
    assert {t.object_id for t in ns.plan_scan("id = 9000")} == {target.object_id}
    assert len(ns.plan_scan("id = 500")) == 2  # the moved table is read whatever the filter
    assert len(ns.plan_scan("id = 500", column_stats=False)) == 2


def _metadata(root: Path, object_id: str) -> str:
    rows = lance.dataset(str(root / "ns" / "__manifest")).to_table(filter=f"object_id = '{object_id}'")
    return rows.column("metadata")[0].as_py()


def without_column_stats(root: str) -> None:
    """Make every table row of ``root`` look written before column statistics (``metadata`` ``{}``)."""
    lance.dataset(str(Path(root, "__manifest"))).update({"metadata": "'{}'"}, where="object_type = 'table'")


@pytest.mark.parametrize(
    "f",
    [
        "x > 5",
        "x >= 5",
        "x = 'NaN'",
        "x != 1.0",
        "x > 'Infinity'",
        "x >= 'Infinity'",
        "x < '-Infinity'",
        "x = 0.0",
        "x = -0.0",
        "x <= -0.0",
        "x IS NOT NULL",
        "x IS NULL",
    ],
)
def test_float_edges_follow_sparks_order(tmp_path: Path, f: str) -> None:
    """NaN is above every number and equals NaN; -0.0 equals 0.0; an infinite value is no bound."""
    rows = [
        {"p": 1, "x": 1.0},
        {"p": 1, "x": math.nan},
        {"p": 2, "x": -0.0},
        {"p": 3, "x": math.inf},
        {"p": 4, "x": None},
        {"p": 5, "x": 0.0},
        {"p": 6, "x": -math.inf},
    ]
    ns = _namespace(tmp_path / "ns", rows, 1)
    by_id = {t.object_id: t.values["p"] for t in ns.partitions()}
    kept = {by_id[t.object_id] for t in ns.plan_scan(f)}
    wanted = _partitions_matching(_stored(ns), f)
    assert wanted <= kept, f"{f}: partitions {wanted - kept} hold matching rows and were skipped"
    assert len(kept) < len(by_id) or f in ("x IS NOT NULL", "x != 1.0")  # the statistics do skip


def test_a_writer_told_to_record_none_leaves_tables_read_by_every_filter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LANCE_PARTITIONED_COLUMN_STATS", "0")
    ns = _namespace(tmp_path / "ns", [{"p": 1, "id": 5}, {"p": 2, "id": 500}], 1)
    assert all(STATS_KEY not in _metadata(tmp_path, t.object_id) for t in ns.partitions())
    assert len(ns.plan_scan("id = 5")) == 2
    monkeypatch.delenv("LANCE_PARTITIONED_COLUMN_STATS")
    write_table(ns, pa.Table.from_pylist([{"p": 1, "id": 6}], schema=SCHEMA))
    ns = PartitionedNamespace.load(str(tmp_path / "ns"))
    assert len(ns.plan_scan("id = 5")) == 2  # an append cannot vouch for the rows before it
    write_table(ns, pa.Table.from_pylist([{"p": 3, "id": 7}], schema=SCHEMA))
    assert len(PartitionedNamespace.load(str(tmp_path / "ns")).plan_scan("id = 5")) == 2  # p=3 skipped
