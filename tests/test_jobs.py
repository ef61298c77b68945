"""The spark-submit jobs, run in-process against the test session."""

from __future__ import annotations

import datetime as dt

import pytest

from jobs import demo, evolve, ingest, query
from partitioning import PartitionedNamespace

pytestmark = pytest.mark.slow


def _rows(ns: PartitionedNamespace) -> int:
    return sum(ns.open_table(p).count_rows() for p in ns.partitions())


@pytest.fixture
def inputs(spark, tmp_path):
    df = spark.createDataFrame(
        [(i, dt.datetime(2025, 12, 10 + i % 3, 12, tzinfo=dt.UTC), ("US", "CN")[i % 2], i * 7) for i in range(60)],
        "event_id long, ts timestamp, country string, user_id long",
    )
    paths = {}
    for fmt in ("parquet", "json", "csv"):
        path = str(tmp_path / f"in_{fmt}")
        writer = df.coalesce(1).write.mode("overwrite")
        if fmt == "csv":
            writer = writer.option("header", "true")
        getattr(writer, fmt)(path)
        paths[fmt] = path
    return paths


@pytest.mark.parametrize("fmt", ["parquet", "json", "csv"])
def test_ingest_creates_and_appends(spark, tmp_path, inputs, fmt, capsys):
    root = str(tmp_path / f"ns_{fmt}")
    args = ["--root", root, "--input", inputs[fmt], "--format", fmt, "--partition-by", "day(ts)", "country"]
    if fmt == "json":  # JSON carries timestamps as text; the schema says what they are
        args += ["--schema", "event_id long, ts timestamp, country string, user_id long"]
    assert ingest.main(args) == 0
    out = capsys.readouterr().out
    assert "ingest: 60 rows, 6 partitions touched (6 new), __manifest v3" in out
    assert ingest.main(args[:6] + args[9:]) == 0
    ns = PartitionedNamespace.load(root)
    assert _rows(ns) == 120
    assert sorted(p.values["country"] for p in ns.partitions()) == ["CN"] * 3 + ["US"] * 3


def test_ingest_write_id_makes_a_retry_a_no_op(tmp_path, inputs, capsys):
    root = str(tmp_path / "ns")
    base = ["--root", root, "--input", inputs["parquet"], "--format", "parquet", "--write-id", "nightly-2025-12-10"]
    assert ingest.main([*base, "--partition-by", "country"]) == 0
    assert ingest.main(base) == 0
    assert "nothing written: write_id 'nightly-2025-12-10' was already committed" in capsys.readouterr().out
    assert _rows(PartitionedNamespace.load(root)) == 60


def test_ingest_bad_input_is_one_line_and_exit_2(tmp_path, inputs, capsys):
    root = str(tmp_path / "ns")
    assert ingest.main(["--root", root, "--input", inputs["parquet"], "--format", "parquet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: no namespace at {root}; pass partition_by=[...] (or spec=) to create it"
    assert (
        ingest.main(["--root", root, "--input", inputs["json"], "--format", "json", "--partition-by", "hour(day)"]) == 2
    )
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: unknown column 'day'; columns are: ")
    assert "\n" not in err


def test_demo_writes_and_counts_back(tmp_path, capsys):
    root = str(tmp_path / "events")
    assert demo.main(["--root", root, "--rows", "3000", "--days", "2", "--countries", "2"]) == 0
    out = capsys.readouterr().out
    assert f"{root}: 3,000 rows into 4 partitions (4 new, 4 fragments), mode=overwrite" in out
    assert out.rstrip().endswith("3,000")
    assert _rows(PartitionedNamespace.load(root)) == 3000


def test_query_prints_the_pruning_summary_and_writes_the_rows(spark, tmp_path, inputs, capsys):
    root = str(tmp_path / "ns")
    args = ["--root", root, "--input", inputs["parquet"], "--format", "parquet", "--partition-by", "country"]
    assert ingest.main(args) == 0
    out = str(tmp_path / "us.parquet")
    assert query.main(["--root", root, "--filter", "country = 'US'", "--columns", "event_id", "--output", out]) == 0
    printed = capsys.readouterr().out
    assert "lance_partitioned: scanning 1 of 2 partition tables (spec v1: 1/2) at __manifest v3" in printed
    rows = spark.read.parquet(out)
    assert rows.columns == ["event_id"]
    assert sorted(r.event_id for r in rows.collect()) == list(range(0, 60, 2))


def test_query_bad_filter_is_one_line_and_exit_2(tmp_path, inputs, capsys):
    root = str(tmp_path / "ns")
    assert (
        ingest.main(["--root", root, "--input", inputs["parquet"], "--format", "parquet", "--partition-by", "country"])
        == 0
    )
    capsys.readouterr()
    assert query.main(["--root", root, "--filter", "country = = 'US'"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: filter \"country = = 'US'\": [PARSE_SYNTAX_ERROR] Syntax error at or near '='")
    assert "\n" not in err


def test_evolve_subcommands_change_spec_and_schema(tmp_path, inputs, capsys):
    """Every evolve subcommand, in the order a user would run them, each printing its result."""
    root = str(tmp_path / "ns")
    assert (
        ingest.main(["--root", root, "--input", inputs["parquet"], "--format", "parquet", "--partition-by", "country"])
        == 0
    )
    capsys.readouterr()

    def ok(*argv: str) -> str:
        assert evolve.main(list(argv)) == 0
        return capsys.readouterr().out

    out = ok("add-partition-field", "--root", root, "bucket[4](user_id) AS user_bucket")
    assert out.startswith("partition spec v2[country=identity(2), user_bucket=bucket[4](3)]\n")
    assert '"num_buckets":4' in out
    out = ok("drop-partition-field", "--root", root, "country")
    assert out.startswith("partition spec v3[user_bucket=bucket[4](3)]\n")
    out = ok("replace-spec", "--root", root, "day(ts)", "country")
    assert out.startswith("partition spec v4[ts_day=day(1), country=identity(2)]\n")
    out = ok("add-column", "--root", root, "channel:string", "price:decimal(10,2)")
    assert "     4  channel  string" in out
    assert "     5  price  decimal128(10, 2)" in out
    assert "next field id 6" in out
    out = ok("rename-column", "--root", root, "channel", "source")
    assert "     4  source  string" in out
    out = ok("widen-column", "--root", root, "price", "decimal(12,2)")
    assert "     5  price  decimal128(12, 2)" in out
    out = ok("drop-column", "--root", root, "source")
    assert "source" not in out
    assert "next field id 6" in out
    ns = PartitionedNamespace.load(root)
    assert sorted(ns.specs) == [1, 2, 3, 4]
    assert ns.schema.names == ["event_id", "ts", "country", "user_id", "price"]
    assert _rows(ns) == 60


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["drop-column", "country"], "error: cannot drop column 'country' (field id 2): partition field 'country'"),
        (["drop-partition-field", "nope"], "error: no partition field 'nope' in the current spec v1; its fields are: "),
        (["add-column", "x"], "error: bad column 'x'; expected NAME:TYPE"),
        (["add-column", "x:varchar9"], "error: unknown type 'varchar9'; allowed: "),
        (["widen-column", "user_id", "int"], "error: cannot widen column 'user_id' from int64 to int32; allowed: "),
        (["rename-column", "nope", "x"], "error: unknown column 'nope'; columns are: event_id, ts, country, user_id"),
        (["replace-spec", "hour(nope)"], "error: unknown column 'nope'"),
    ],
)
def test_evolve_bad_requests_are_one_line_and_exit_2(tmp_path, inputs, capsys, argv, message):
    root = str(tmp_path / "ns")
    assert (
        ingest.main(["--root", root, "--input", inputs["parquet"], "--format", "parquet", "--partition-by", "country"])
        == 0
    )
    capsys.readouterr()
    assert evolve.main([argv[0], "--root", root, *argv[1:]]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(message)
    assert "\n" not in err
    ns = PartitionedNamespace.load(root)
    assert sorted(ns.specs) == [1]
    assert ns.schema.names == ["event_id", "ts", "country", "user_id"]
