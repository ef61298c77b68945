"""Spark-free doors for the tools next to Spark: ``partitioning.dataset`` and ``write_arrow``.

The oracle is DuckDB (and Polars) querying the Arrow table that was written, with the same
SQL; what they get through ``dataset`` must be the same rows.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import duckdb
import lance
import polars as pl
import pyarrow as pa
import pytest

from partitioning import (
    InvalidInput,
    NamespaceNotFound,
    PartitionedNamespace,
    SchemaError,
    SpecError,
    dataset,
    write_arrow,
)

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("country", pa.string()),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("amount", pa.float64()),
        ("tag", pa.string()),
    ]
)


def _source(n: int = 400) -> pa.Table:
    start = dt.datetime(2025, 12, 9, tzinfo=dt.UTC)
    return pa.table(
        {
            "id": list(range(n)),
            "country": [("US", "DE", "FR", None)[i % 4] for i in range(n)],
            "ts": [start + dt.timedelta(minutes=20 * i) for i in range(n)],
            "amount": [None if i % 11 == 0 else (i % 37) * 1.5 for i in range(n)],
            "tag": [f"t{i % 5}" for i in range(n)],
        },
        schema=SCHEMA,
    )


FILTERS = [
    None,
    "country = 'US'",
    "country IS NULL",
    "country IN ('DE', 'FR') AND amount > 20",
    "ts >= TIMESTAMP '2025-12-11 00:00:00' AND ts < TIMESTAMP '2025-12-13 00:00:00'",
    "amount IS NULL OR tag = 't3'",
    "NOT (country = 'US') AND id % 7 = 0",
    "id BETWEEN 10 AND 30",
    "tag LIKE 't1%' AND country <> 'FR'",
    "amount * 2 > 50 AND country = 'DE'",
    "country = 'US' OR country IS NULL",
    "id IN (1, 2, 3, 250, 251, 399)",
    "NOT (id IN (1, 2, 3)) AND tag = 't0'",
    "ts < TIMESTAMP '2025-12-10 00:00:00'",
    "country > 'E'",
    "amount >= 0 AND amount <= 10",
    "tag <> 't2' AND (country = 'FR' OR amount IS NULL)",
    "id = 399",
    "country = 'XX'",
    "amount IS NOT NULL AND ts >= TIMESTAMP '2025-12-14 00:00:00'",
]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> str:
    root = str(tmp_path_factory.mktemp("arrow") / "ns")
    source = _source()
    write_arrow(root, source.slice(0, 250), partition_by=["country", "day(ts)"])
    write_arrow(root, source.slice(250))  # a second commit, into the existing spec
    return root


def _sorted(table: pa.Table) -> list[dict]:
    return sorted(table.to_pylist(), key=lambda r: r["id"])


@pytest.mark.parametrize("where", FILTERS)
def test_duckdb_over_the_stream_answers_as_over_the_written_table(root: str, where: str | None) -> None:
    source = _source()  # noqa: F841 - DuckDB reads it by name
    clause = f" WHERE {where}" if where else ""
    want = duckdb.sql(f"SELECT id, country, amount FROM source{clause}").to_arrow_table()
    reader = dataset(root, filter=where, columns=["id", "country", "amount"])  # noqa: F841
    got = duckdb.sql("SELECT * FROM reader").to_arrow_table()
    assert _sorted(got) == _sorted(want)


def test_polars_reads_the_stream_and_the_version_is_a_snapshot(root: str) -> None:
    got = pl.from_arrow(dataset(root, filter="country = 'FR'", version=None))
    want = pl.from_arrow(_source()).filter(pl.col("country") == "FR")
    assert sorted(got["id"].to_list()) == sorted(want["id"].to_list())
    first = PartitionedNamespace.load(root).history().column("version").to_pylist()
    before = pl.from_arrow(dataset(root, columns=["id"], version=min(v for v in first if v > 2)))
    assert sorted(before["id"].to_list()) == list(range(250))


def test_the_stream_reads_committed_versions_only(root: str, tmp_path: Path) -> None:
    ns = PartitionedNamespace.load(root)
    table = ns.partitions()[0]
    lance.write_dataset(lance.dataset(table.uri).to_table().slice(0, 1), table.uri, mode="append")  # not committed
    assert dataset(root, columns=["id"]).read_all().num_rows == 400


def test_bad_columns_and_roots_are_one_line_errors(root: str, tmp_path: Path) -> None:
    with pytest.raises(SchemaError, match=r"'nope'.*columns are"):
        dataset(root, columns=["id", "nope"])
    with pytest.raises(NamespaceNotFound):
        dataset(str(tmp_path / "none"))
    with pytest.raises(NamespaceNotFound, match="partition_by"):
        write_arrow(str(tmp_path / "new"), _source(3))
    with pytest.raises(SpecError, match="partitioned as"):
        write_arrow(root, _source(3), partition_by=["tag"])


def test_a_failed_first_write_leaves_no_namespace(tmp_path: Path) -> None:
    """The namespace is created for the write; the write fails (a partition value over the
    spec's size bound): nothing of the namespace is left."""
    root = tmp_path / "ns"
    too_long = pa.table({"k": ["x" * 100_000], "v": [1]})
    with pytest.raises(InvalidInput, match="bytes"):
        write_arrow(str(root), too_long, partition_by=["k"])
    assert not (root / "__manifest").exists()
    with pytest.raises(NamespaceNotFound):
        PartitionedNamespace.load(str(root))


def test_a_retry_with_the_same_write_id_adds_nothing(tmp_path: Path) -> None:
    root = str(tmp_path / "ns")
    first = write_arrow(root, _source(20), partition_by=["tag"], write_id="job-1")
    again = write_arrow(root, _source(20), write_id="job-1")
    assert again.manifest_version == first.manifest_version
    assert dataset(root).read_all().num_rows == 20


def test_every_filter_reads_what_read_partitioned_reads(spark, root: str) -> None:
    """The same 20 filters through Spark's door (``read_partitioned``, Spark SQL) and the
    Arrow stream (DataFusion SQL) read by Polars and by DuckDB: the filters are written in
    the SQL both read alike."""
    from pipelines import read_partitioned

    for where in FILTERS:
        spark_ids = sorted(r.id for r in read_partitioned(spark, root, filter=where, columns=["id"]).collect())
        polars_ids = sorted(pl.from_arrow(dataset(root, filter=where, columns=["id"]).read_all())["id"].to_list())
        reader = dataset(root, filter=where, columns=["id"])  # noqa: F841 - DuckDB reads it by name
        duckdb_ids = sorted(i for (i,) in duckdb.sql("SELECT id FROM reader").fetchall())
        assert polars_ids == duckdb_ids == spark_ids, where
