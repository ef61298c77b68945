"""``update_rows`` run by Lance's own ``update`` on each partition table
(partitioning.tables.lance_updates). Spark is the oracle: every value and every row Lance's
DataFusion selects is compared with Spark's own answer on the same rows, ANSI on and off;
whatever DataFusion would compute differently (integer overflow, float comparisons) is not
handed to it; a Lance update that fails or loses a race leaves nothing visible."""

from __future__ import annotations

import datetime as dt
import decimal
import logging
from typing import Any

import lance
import pyarrow as pa
import pytest
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession

import partitioning.tables.lance_updates as lance_updates
import pipelines.write.rewrite as rewrite
from partitioning.namespace import PartitionedNamespace
from partitioning.sql.assign import lance_assignments
from partitioning.sql.binding import bind
from partitioning.sql.from_sql import parse_filter
from partitioning.sql.rowfilter import exact_lance_filter
from partitioning.tables.write import write_table
from pipelines import update_rows
from pipelines.read_options import session_dialect
from tests import merge_oracle as oracle
from tests.test_column_stats import without_column_stats
from tests.test_update_arrow import (
    CUTOFFS,
    EXPRESSIONS,
    REFUSED,
    ROWS,
    SCHEMA,
    SPARK_TYPES,
    TABLE,
    _same,
    assert_updated_as,
)

TAKEN = "Lance's update on"

# filters over every kind of column: those rendered must select exactly Spark's rows
FILTERS = [
    "s = 'ß'",
    "s > 'a' AND s < '日本'",
    "s IS NULL OR n IN (7, -1)",
    "NOT (n IN (0, 7))",
    "n NOT IN (1, NULL)",
    "s LIKE 'a%'",
    "flag",
    "NOT flag",
    "flag = FALSE OR id >= 9007199254740993",
    "b <= -1 AND id <> -1",
    "dec = 1.25 OR dec < -3",
    "d >= DATE '2024-02-29'",
    "ts < TIMESTAMP '2025-03-30 03:00:00'",
    "id <=> 7",
    "s <=> NULL",
    "x > 0",  # a DOUBLE comparison: not rendered (NaN, -0.0)
    "n % 2 = 1",
    "(id div 3) % 2 = 0 AND n % -3 <> 1",
    "n + 1 > 0",  # may overflow: not rendered
    "upper(s) = 'X'",
]


def _with_more(table: pa.Table) -> pa.Table:
    decs = [decimal.Decimal(v) for v in ("1.25", "-3.50", "0.00", "99999999.99", "-0.01", "1.20", "7.00")]
    dates = [dt.date(2024, 2, 29), dt.date(1970, 1, 1), dt.date(2024, 3, 1), dt.date(1, 1, 1)] + [None] * 3
    table = table.append_column("rk", pa.array(range(table.num_rows), pa.int64()))
    table = table.append_column(pa.field("dec", pa.decimal128(10, 2)), pa.array(decs, pa.decimal128(10, 2)))
    return table.append_column(pa.field("d", pa.date32()), pa.array(dates, pa.date32()))


@pytest.mark.parametrize("ansi", [True, False])
def test_every_value_and_row_lance_gives_is_sparks(spark: SparkSession, tmp_path: Any, ansi: bool) -> None:
    session = spark.newSession()
    session.conf.set("spark.sql.ansi.enabled", str(ansi).lower())
    session.conf.set("spark.sql.session.timeZone", "UTC")
    dialect = session_dialect(session)
    data = _with_more(TABLE)
    df = session.createDataFrame(data)
    columns = {n: n for n in data.schema.names}
    rendered = 0
    for column, text in EXPRESSIONS:
        values = lance_assignments({column: text}, data.schema, dialect, columns)
        if values is None:
            continue
        try:
            expected = [r[0] for r in df.selectExpr(f"CAST(({text}) AS {SPARK_TYPES[column]})").collect()]
        except PySparkException:
            pytest.fail(f"{text}: Spark refuses it, Lance was given {values}")
        path = str(tmp_path / f"v{rendered}_{ansi}")
        dataset = lance.write_dataset(data, path)
        dataset.update(values)
        got = lance.dataset(path).to_table().sort_by("rk").column(column).to_pylist()
        want = expected  # in the rows' order: createDataFrame and collect keep it
        assert all(_same(o, s) for o, s in zip(got, want, strict=True)), (text, values, got, want)
        rendered += 1
    assert rendered >= 12
    integer_arithmetic = [(c, t) for c, t in EXPRESSIONS if c in ("id", "n") and any(o in t for o in "+-*")]
    for column, text in REFUSED + integer_arithmetic:  # DataFusion wraps where ANSI raises
        assert lance_assignments({column: text}, data.schema, dialect, columns) is None, text
    path = str(tmp_path / f"filters_{ansi}")
    dataset = lance.write_dataset(data, path)
    exact = 0
    for text in FILTERS:
        condition = exact_lance_filter(bind(parse_filter(text, dialect), data.schema, dialect), data.schema, columns)
        if condition is None:
            continue
        want = sorted((r.n for r in df.where(text).collect()), key=str)
        got = sorted(dataset.to_table(columns=["n"], filter=condition).column("n").to_pylist(), key=str)
        assert got == want, (text, condition)
        exact += 1
    assert exact == len(FILTERS) - 3


def _namespace(root: str) -> None:
    write_table(PartitionedNamespace.create(root, SCHEMA, ["p"]), TABLE)


def _arrow_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the update did not run in Lance")

    monkeypatch.setattr(rewrite, "_update_in_arrow", refused)
    monkeypatch.setattr(rewrite, "small_target", refused)


@pytest.mark.parametrize("zone", ["Europe/Berlin", "Asia/Kolkata"])
def test_update_rows_runs_lance_update_and_stores_sparks_values(
    spark: SparkSession, tmp_path: Any, zone: str, monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    root = str(tmp_path / "ns")
    _namespace(root)
    where = f"ts < TIMESTAMP '{CUTOFFS[zone]}' AND s IS NOT NULL"  # Berlin's: in the hour its clocks skip
    sets = {"x": "x * 1.1 + id", "s": "s || '!'", "n": "7"}
    session = spark.newSession()
    session.conf.set("spark.sql.session.timeZone", zone)
    spark_schema = "id long, n int, b byte, x double, s string, flag boolean, ts timestamp, p int"
    df = session.createDataFrame(TABLE.to_pylist(), spark_schema)
    chosen = {r.id: r for r in df.where(where).selectExpr("id", *(f"{e} AS {c}" for c, e in sets.items())).collect()}
    _arrow_refused(monkeypatch)
    before = PartitionedNamespace.load(root).manifest_version
    with caplog.at_level(logging.INFO, logger="lance_partitioned"):
        result = update_rows(root, set=sets, where=where, spark=session)
    assert any(TAKEN in r.getMessage() for r in caplog.records)
    assert result.rows_updated == len(chosen) > 0
    ns = PartitionedNamespace.load(root)
    assert ns.manifest_version == before + 1
    assert ns.history(limit=1).column("operation").to_pylist() == ["UPDATE"]
    assert_updated_as(root, chosen)


@pytest.mark.parametrize(
    ("sets", "where"),
    [
        ({"p": "p + 1"}, "id = 7"),  # a row moves partition
        ({"n": "n + 1"}, "id = 7"),  # integer arithmetic (ANSI raises, DataFusion wraps)
        ({"x": "x + 1"}, "x > 0"),  # a DOUBLE comparison
        ({"x": "abs(x)"}, "id = 7"),  # a function
    ],
)
def test_what_lance_would_not_compute_as_spark_takes_the_other_path(
    spark: SparkSession, tmp_path: Any, caplog: Any, sets: dict[str, str], where: str
) -> None:
    root = str(tmp_path / "ns")
    _namespace(root)
    df = spark.createDataFrame(TABLE.drop_columns(["ts"]).to_pylist())
    changed = df.selectExpr(
        "id", *(f"CASE WHEN coalesce({where}, false) THEN {e} ELSE {c} END AS {c}" for c, e in sets.items())
    ).collect()
    with caplog.at_level(logging.INFO, logger="lance_partitioned"):
        update_rows(root, set=sets, where=where, spark=spark)
    assert not any(TAKEN in r.getMessage() for r in caplog.records)
    stored = {r["id"]: r for r in oracle.stored_rows(root, "p")}
    for row in changed:
        for column in sets:
            assert _same(stored[row.id][column], row[column]), (row, stored[row.id])


def test_a_lance_update_failing_on_one_table_leaves_nothing_half_done(
    spark: SparkSession, tmp_path: Any, monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    """Two tables updated by Lance, the third fails: the other path updates every row once
    (onto the versions the first two left, which no ``__manifest`` version references)."""
    root = str(tmp_path / "ns")
    _namespace(root)
    original = lance.LanceDataset.update
    calls: list[str] = []

    def failing(self: lance.LanceDataset, *args: Any, **kwargs: Any) -> Any:
        calls.append(self.uri)
        if len(calls) == 3:
            raise OSError("injected: the object store went away")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(lance.LanceDataset, "update", failing)
    before = PartitionedNamespace.load(root).manifest_version
    with caplog.at_level(logging.INFO, logger="lance_partitioned"):
        result = update_rows(root, set={"x": "x + 1"}, where="s IS NOT NULL", spark=spark)
    assert len(calls) == 3 and not any(TAKEN in r.getMessage() for r in caplog.records)
    assert any("injected" in r.getMessage() for r in caplog.records)
    assert result.rows_updated == sum(r["s"] is not None for r in ROWS)
    assert PartitionedNamespace.load(root).manifest_version == before + 1
    stored = {r["id"]: r["x"] for r in oracle.stored_rows(root, "p")}
    for row in ROWS:
        want = row["x"] + 1 if row["s"] is not None and row["x"] is not None else row["x"]
        assert _same(stored[row["id"]], want), (row, stored[row["id"]])


def test_an_append_landing_before_the_commit_reruns_the_update(
    spark: SparkSession, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another writer appends a row the update selects between Lance's table commits and
    ``__manifest``'s: the update runs again on the new state and updates that row too, and
    every row once."""
    root = str(tmp_path / "ns")
    _namespace(root)
    extra = TABLE.slice(6, 1).to_pylist()[0] | {"id": 1000, "x": 5.0}
    original = lance_updates._commit
    appended: list[int] = []

    def racing(*args: Any, **kwargs: Any) -> Any:
        if not appended:
            write_table(PartitionedNamespace.load(root), pa.Table.from_pylist([extra], SCHEMA))
            appended.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(lance_updates, "_commit", racing)
    result = update_rows(root, set={"x": "x + 1"}, where="s = '\u0301e'", spark=spark)
    assert appended and result.rounds == 2
    stored = {r["id"]: r["x"] for r in oracle.stored_rows(root, "p")}
    assert stored[1000] == 6.0 and stored[7] == -1.5e-300 + 1
    assert len(stored) == len(ROWS) + 1


def test_a_copy_of_a_namespace_is_updated_by_lance_only_at_its_own_versions(
    spark: SparkSession, tmp_path: Any, caplog: Any
) -> None:
    """A table whose latest Lance version is not the one ``__manifest`` records (another
    client's commit) is not updated by Lance: Lance would rebase onto that commit."""
    root = str(tmp_path / "ns")
    _namespace(root)
    ns = PartitionedNamespace.load(root)
    table = next(t for t in ns.partitions() if list(t.values.values()) == [0])
    lance.dataset(table.uri).delete("id = 0")  # a foreign commit nobody recorded
    with caplog.at_level(logging.INFO, logger="lance_partitioned"):
        update_rows(root, set={"s": "'z'"}, where="id = 0", spark=spark)
    assert not any(TAKEN in r.getMessage() for r in caplog.records)
    stored = {r["id"]: r["s"] for r in oracle.stored_rows(root, "p")}
    assert stored[0] == "z"


def test_only_the_tables_holding_a_matching_row_get_a_version(spark: SparkSession, tmp_path: Any, caplog: Any) -> None:
    """Lance commits a version even when no row matches: each table is probed first, so a
    point update changes one table, and one matching nothing changes none (no version left
    behind that ``__manifest`` does not record)."""
    root = str(tmp_path / "ns")
    _namespace(root)
    before = {t.object_id: t.read_version for t in PartitionedNamespace.load(root).partitions()}
    for where, touched in (("id = 7", 1), ("id = 123456", 0)):
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="lance_partitioned"):
            result = update_rows(root, set={"s": "'z'"}, where=where, spark=spark)
        assert any(TAKEN in r.getMessage() for r in caplog.records)
        assert (result.partitions_touched, result.rows_updated) == (touched, touched)
    tables = PartitionedNamespace.load(root).partitions()
    assert sum(before[t.object_id] != t.read_version for t in tables) == 1
    assert all(lance.dataset(t.uri).version == t.read_version for t in tables)
    assert {r["id"]: r["s"] for r in oracle.stored_rows(root, "p")}[7] == "z"


def test_a_broad_update_takes_the_unprobed_tables_as_matching(
    spark: SparkSession, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When the first tables probed all match, the rest are updated unprobed: one that holds
    no matching row gets a version with the same rows, recorded like the others, so no
    Lance version is left that ``__manifest`` does not record."""
    root = str(tmp_path / "ns")
    _namespace(root)
    without_column_stats(root)  # as written before them: the filter on id keeps every table
    monkeypatch.setattr(lance_updates, "PROBED_FIRST", 1)
    tables = sorted(PartitionedNamespace.load(root).partitions(), key=lambda t: t.object_id)
    (first,) = tables[0].values.values()
    ids = [r["id"] for r in TABLE.to_pylist() if r["p"] == first and r["id"] is not None]
    before = {t.object_id: t.read_version for t in tables}
    result = update_rows(root, set={"s": "'z'"}, where=f"id IN ({', '.join(map(str, ids))})", spark=spark)
    assert result.rows_updated == len(ids) and result.partitions_touched == len(tables)
    after = PartitionedNamespace.load(root).partitions()
    assert all(before[t.object_id] != t.read_version for t in after)
    assert all(lance.dataset(t.uri).version == t.read_version for t in after)
    stored = {r["id"]: r["s"] for r in oracle.stored_rows(root, "p")}
    assert stored == {r["id"]: ("z" if r["id"] in ids else r["s"]) for r in TABLE.to_pylist()}


def test_a_table_whose_columns_lag_the_namespace_is_not_lances(spark: SparkSession, tmp_path: Any, caplog: Any) -> None:
    """After ``n`` is widened to BIGINT (metadata only) a table still stores INT: DataFusion
    would compute in the stored type, so the other path updates it (and aligns the table);
    the next update of that table alone is Lance's."""
    root = str(tmp_path / "ns")
    _namespace(root)
    PartitionedNamespace.load(root).widen_column("n", "int64")
    for taken in (False, True):
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="lance_partitioned"):
            update_rows(root, set={"x": "x + 1", "n": "n"}, where="id = 7 AND p = 0", spark=spark)
        assert any(TAKEN in r.getMessage() for r in caplog.records) == taken
    stored = {r["id"]: r for r in oracle.stored_rows(root, "p")}
    assert stored[7]["x"] == -1.5e-300 + 2 and stored[7]["n"] == 7
