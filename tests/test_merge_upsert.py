"""A default merge (update every column of a matched row, insert the rest) is "delete the
matched rows, append the source" (pipelines.write.upsert): the target's keys are probed in
the driver, no join runs in Spark. Its rows are delta-rs's for the same merge, with rows
that move partitions, NULL keys and a source read from parquet; a key two target rows hold
goes through the join (each row updated, as delta-rs does); two source rows on one target
row are refused in the join path's words."""

from __future__ import annotations

import decimal
import logging
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from partitioning.errors import InvalidInput
from partitioning.namespace import PartitionedNamespace
from partitioning.tables.write import write_table
from pipelines.write.merge import merge_partitioned
from tests import merge_oracle as oracle

SCHEMA = pa.schema(
    [("id", pa.int64()), ("country", pa.string()), ("amount", pa.decimal128(10, 2)), ("note", pa.string())]
)
COLUMNS = SCHEMA.names


def _rows(ids: list[int | None], countries: list[str], note: str) -> list[dict[str, Any]]:
    return [
        {
            "id": i,
            "country": countries[n % len(countries)],
            "amount": None if n % 7 == 3 else decimal.Decimal(n) * decimal.Decimal("1.25"),
            "note": note,
        }
        for n, i in enumerate(ids)
    ]


def _delta(tmp_path: Path, target: list[dict[str, Any]], source: list[dict[str, Any]]) -> list[dict[str, Any]]:
    from deltalake import DeltaTable, write_deltalake

    uri = str(tmp_path / "delta")
    write_deltalake(uri, pa.Table.from_pylist(target, schema=SCHEMA), partition_by=["country"])
    merger = DeltaTable(uri).merge(
        pa.Table.from_pylist(source, schema=SCHEMA), "t.id = s.id", source_alias="s", target_alias="t"
    )
    merger.when_matched_update_all().when_not_matched_insert_all().execute()
    return DeltaTable(uri).to_pyarrow_table().to_pylist()


def _unreferenced(root: str) -> list[str]:
    """Data files under ``root`` that no version of their Lance dataset references (asked of Lance)."""
    import lance

    found = []
    for data in Path(root).rglob("data"):
        if not data.is_dir():
            continue
        table = data.parent
        referenced: set[str] = set()
        if (table / "_versions").is_dir():
            ds = lance.dataset(str(table))
            for version in ds.versions():
                for fragment in ds.checkout_version(version["version"]).get_fragments():
                    referenced.update(f.path for f in fragment.metadata.files)
        found += [str(f) for f in data.glob("*.lance") if f.name not in referenced]
    return found


def _merge_line(caplog: pytest.LogCaptureFixture) -> str:
    """The one INFO line the merge logged."""
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO and ": merge: " in r.getMessage()]
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize("source_from", ["parquet", "driver"])
def test_an_upsert_stores_what_delta_rs_stores(
    spark: SparkSession, tmp_path: Path, joins: list[int], source_from: str, caplog: pytest.LogCaptureFixture
) -> None:
    target = _rows(list(range(0, 400)), ["US", "DE", "FR"], "old")
    # half update existing ids (a third of those under another country: they move), half are new;
    # two rows without a key, which match nothing and are inserted
    source = _rows([*range(100, 300, 2), *range(1000, 1100), None, None], ["DE", "JP", "US", "FR"], "new")
    root = str(tmp_path / "ns")
    write_table(PartitionedNamespace.create(root, SCHEMA, ["country"]), pa.Table.from_pylist(target, schema=SCHEMA))
    if source_from == "parquet":
        pq.write_table(pa.Table.from_pylist(source, schema=SCHEMA), tmp_path / "source.parquet")
        df = spark.read.parquet(str(tmp_path / "source.parquet"))
    else:
        df = spark.createDataFrame(pa.Table.from_pylist(source, schema=SCHEMA).to_pandas())
        df = df.selectExpr("CAST(id AS bigint) AS id", "country", "CAST(amount AS decimal(10,2)) AS amount", "note")
    caplog.set_level(logging.INFO, logger="lance_partitioned")
    result = merge_partitioned(df, root, on="id")
    assert joins == []
    assert (result.rows_updated, result.rows_inserted) == (100, 102)
    line = _merge_line(caplog)
    assert "100 rows updated, 102 inserted" in line
    assert line.endswith("upsert: the source's keys probed in the driver, no join; rows written by the driver")
    stored = oracle.canonical(oracle.stored_rows(root, "country"), COLUMNS)
    assert stored == oracle.canonical(_delta(tmp_path, target, source), COLUMNS)


def test_a_key_two_target_rows_hold_goes_through_the_join(
    spark: SparkSession, tmp_path: Path, joins: list[int], caplog: pytest.LogCaptureFixture
) -> None:
    target = [*_rows([1, 2, 3], ["US"], "old"), *_rows([2], ["DE"], "twin")]
    source = _rows([2, 9], ["FR"], "new")
    root = str(tmp_path / "ns")
    write_table(PartitionedNamespace.create(root, SCHEMA, ["country"]), pa.Table.from_pylist(target, schema=SCHEMA))
    caplog.set_level(logging.INFO, logger="lance_partitioned")
    merge_partitioned(
        spark.createDataFrame(source, "id long, country string, amount decimal(10,2), note string"), root, on="id"
    )
    assert joins == [1]
    assert _merge_line(caplog).endswith(
        "Spark joins the source with the target read in the driver (the target's keys were not probed in the "
        "driver (more than 50,000,000 rows, a table not readable here, or a key two target rows hold))"
    )
    assert _unreferenced(root) == []  # the fragments written while probing were removed
    stored = oracle.canonical(oracle.stored_rows(root, "country"), COLUMNS)
    assert stored == oracle.canonical(_delta(tmp_path, target, source), COLUMNS)


def test_two_source_rows_on_one_target_row_are_refused(spark: SparkSession, tmp_path: Path, joins: list[int]) -> None:
    target = _rows([1, 2, 3], ["US"], "old")
    root = str(tmp_path / "ns")
    write_table(PartitionedNamespace.create(root, SCHEMA, ["country"]), pa.Table.from_pylist(target, schema=SCHEMA))
    source = spark.createDataFrame(
        _rows([2, 2, 7, 7], ["US"], "new"), "id long, country string, amount decimal(10,2), note string"
    )
    with pytest.raises(
        InvalidInput, match=r"^merge: 1 target row\(s\) are matched by more than one source row \(e.g. id=2\)"
    ):
        merge_partitioned(source, root, on="id")
    assert joins == []
    assert oracle.canonical(oracle.stored_rows(root, "country"), COLUMNS) == oracle.canonical(target, COLUMNS)
    assert _unreferenced(root) == []  # nothing written


def test_a_target_beyond_the_probe_bound_goes_through_the_join(
    spark: SparkSession, tmp_path: Path, joins: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Beyond PROBE_MAX_ROWS target rows the driver does not read the keys: Spark's tasks do."""
    import pipelines.write.upsert as upsert

    monkeypatch.setattr(upsert, "PROBE_MAX_ROWS", 50)
    target = _rows(list(range(60)), ["US", "DE"], "old")
    source = _rows([5, 70], ["FR"], "new")
    root = str(tmp_path / "ns")
    write_table(PartitionedNamespace.create(root, SCHEMA, ["country"]), pa.Table.from_pylist(target, schema=SCHEMA))
    schema = "id long, country string, amount decimal(10,2), note string"
    merge_partitioned(spark.createDataFrame(source, schema), root, on="id")
    assert joins == [1]
    stored = oracle.canonical(oracle.stored_rows(root, "country"), COLUMNS)
    assert stored == oracle.canonical(_delta(tmp_path, target, source), COLUMNS)


@pytest.mark.parametrize(
    ("options", "reason"),
    [
        ({"matched_condition": "source.note <> target.note"}, "a matched_condition"),
        ({"when_not_matched": "ignore", "set": {"note": "source.note"}}, "set= with when_not_matched='ignore'"),
        ({"when_not_matched_by_source": "delete"}, "when_not_matched_by_source='delete'"),
    ],
)
def test_the_merge_line_names_why_spark_joins(
    spark: SparkSession,
    tmp_path: Path,
    joins: list[int],
    caplog: pytest.LogCaptureFixture,
    options: dict[str, str],
    reason: str,
) -> None:
    root = str(tmp_path / "ns")
    target = _rows([1, 2, 3], ["US"], "old")
    write_table(PartitionedNamespace.create(root, SCHEMA, ["country"]), pa.Table.from_pylist(target, schema=SCHEMA))
    caplog.set_level(logging.INFO, logger="lance_partitioned")
    source = spark.createDataFrame(
        _rows([2, 9], ["US"], "new"), "id long, country string, amount decimal(10,2), note string"
    )
    merge_partitioned(source, root, on="id", **options)
    assert joins == [1]
    assert _merge_line(caplog).endswith(f"({reason})")


def test_an_upsert_opens_each_target_table_once(
    spark: SparkSession, tmp_path: Path, joins: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    # the tables the probe opened at the versions read are the ones their commit starts from
    import lance

    target = _rows(list(range(0, 300)), ["US", "DE", "FR"], "old")
    source = _rows([*range(0, 300, 3), *range(1000, 1030)], ["US", "DE", "FR"], "new")
    root = str(tmp_path / "ns")
    write_table(PartitionedNamespace.create(root, SCHEMA, ["country"]), pa.Table.from_pylist(target, schema=SCHEMA))
    tables = {t.uri.rstrip("/"): t.read_version for t in PartitionedNamespace.load(root).partitions()}
    opens: list[tuple[str, Any]] = []
    real = lance.dataset

    def counted(uri: Any, *args: Any, **kwargs: Any) -> Any:
        if str(uri).rstrip("/") in tables:
            opens.append((str(uri).rstrip("/"), kwargs.get("version")))
        return real(uri, *args, **kwargs)

    monkeypatch.setattr(lance, "dataset", counted)
    df = spark.createDataFrame(pa.Table.from_pylist(source, schema=SCHEMA).to_pandas())
    df = df.selectExpr("CAST(id AS bigint) AS id", "country", "CAST(amount AS decimal(10,2)) AS amount", "note")
    result = merge_partitioned(df, root, on="id")
    assert joins == [] and (result.rows_updated, result.rows_inserted) == (100, 30)
    assert sorted(opens) == sorted(tables.items())
    stored = oracle.canonical(oracle.stored_rows(root, "country"), COLUMNS)
    assert stored == oracle.canonical(_delta(tmp_path, target, source), COLUMNS)
