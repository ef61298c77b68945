"""Merges with other clauses than the plain upsert, computed in the driver from the probe of
the source's keys (pipelines.write.set_merge.keyed_merge): "update only the matched rows",
"delete the rows the source names" (and insert the rest, or not), "insert the rows whose key
is new". Each stores what delta-rs's merge with the same clauses stores and counts the rows
as delta-rs does, with rows that move partitions, NULL keys, repeated keys and a target
filter; no Spark join runs."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from partitioning.errors import InvalidInput
from partitioning.namespace import PartitionedNamespace
from partitioning.tables.write import write_table
from pipelines.write.merge import merge_partitioned
from tests import merge_oracle as oracle

SCHEMA = pa.schema([("id", pa.int64()), ("country", pa.string()), ("v", pa.float64()), ("note", pa.string())])
COLUMNS = SCHEMA.names
SPARK_SCHEMA = "id long, country string, v double, note string"


def _rows(ids: list[int | None], countries: list[str], note: str) -> list[dict[str, Any]]:
    return [
        {"id": i, "country": countries[n % len(countries)], "v": None if n % 9 == 4 else n * 0.5, "note": note}
        for n, i in enumerate(ids)
    ]


TARGET = _rows(list(range(0, 300)), ["US", "DE", "FR"], "old")
# matched ids (a third under another country: an update moves them), new ids, two NULL keys
# and a new key twice (both inserted, as in SQL)
SOURCE = _rows([*range(0, 200, 4), *range(1000, 1040), None, None, 5000, 5000], ["DE", "JP", "US", "FR"], "new")


def _delta(
    tmp_path: Path, source: list[dict[str, Any]], modes: tuple[str, str], target_filter: str | None
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    from deltalake import DeltaTable, write_deltalake

    uri = str(tmp_path / "delta")
    write_deltalake(uri, pa.Table.from_pylist(TARGET, schema=SCHEMA), partition_by=["country"])
    predicate = "t.id = s.id" + (f" AND t.{target_filter}" if target_filter else "")
    metrics = oracle.delta_merge(uri, pa.Table.from_pylist(source, schema=SCHEMA), predicate, modes)
    return DeltaTable(uri).to_pyarrow_table().to_pylist(), metrics


def _namespace(tmp_path: Path) -> str:
    root = str(tmp_path / "ns")
    write_table(PartitionedNamespace.create(root, SCHEMA, ["country"]), pa.Table.from_pylist(TARGET, schema=SCHEMA))
    return root


@pytest.mark.parametrize(
    "modes", [("update", "ignore"), ("delete", "insert"), ("delete", "ignore"), ("ignore", "insert")]
)
@pytest.mark.parametrize("target_filter", [None, "country = 'US'"])
def test_the_clauses_store_what_delta_rs_stores(
    spark: SparkSession,
    tmp_path: Path,
    joins: list[int],
    caplog: pytest.LogCaptureFixture,
    modes: tuple[str, str],
    target_filter: str | None,
) -> None:
    root = _namespace(tmp_path)
    caplog.set_level(logging.INFO, logger="lance_partitioned")
    result = merge_partitioned(
        spark.createDataFrame(SOURCE, SPARK_SCHEMA),
        root,
        on="id",
        when_matched=modes[0],
        when_not_matched=modes[1],
        target_filter=target_filter,
    )
    theirs, metrics = _delta(tmp_path, SOURCE, modes, target_filter)
    assert joins == []
    assert oracle.canonical(oracle.stored_rows(root, "country"), COLUMNS) == oracle.canonical(theirs, COLUMNS)
    counted = (result.rows_updated, result.rows_inserted, result.rows_deleted - result.rows_updated)
    assert counted == (
        metrics["num_target_rows_updated"],
        metrics["num_target_rows_inserted"],
        metrics["num_target_rows_deleted"],
    )
    line = next(r.getMessage() for r in caplog.records if ": merge: " in r.getMessage())
    assert line.endswith(
        f"the source's keys probed in the driver, no join (when_matched={modes[0]!r}, "
        f"when_not_matched={modes[1]!r}); rows written by the driver"
    )


@pytest.mark.parametrize("when_matched", ["update", "delete"])
def test_two_source_rows_on_one_matched_row_are_refused(
    spark: SparkSession, tmp_path: Path, joins: list[int], when_matched: str
) -> None:
    root = _namespace(tmp_path)
    before = oracle.canonical(oracle.stored_rows(root, "country"), COLUMNS)
    source = spark.createDataFrame(_rows([7, 7, 2000], ["US"], "new"), SPARK_SCHEMA)
    with pytest.raises(InvalidInput, match=r"matched by more than one source row \(e\.g\. id=7\)"):
        merge_partitioned(source, root, on="id", when_matched=when_matched, when_not_matched="ignore")
    assert joins == []
    assert oracle.canonical(oracle.stored_rows(root, "country"), COLUMNS) == before


def test_an_insert_of_new_keys_takes_repeated_matched_keys(
    spark: SparkSession, tmp_path: Path, joins: list[int]
) -> None:
    # nothing acts on the matched rows: two source rows on one of them is no conflict
    root = _namespace(tmp_path)
    source = _rows([7, 7, 2000, 2001], ["US"], "new")
    result = merge_partitioned(spark.createDataFrame(source, SPARK_SCHEMA), root, on="id", when_matched="ignore")
    theirs, metrics = _delta(tmp_path, source, ("ignore", "insert"), None)
    assert joins == [] and result.rows_inserted == metrics["num_target_rows_inserted"] == 2
    assert oracle.canonical(oracle.stored_rows(root, "country"), COLUMNS) == oracle.canonical(theirs, COLUMNS)


@pytest.mark.parametrize("modes", [("ignore", "insert"), ("delete", "insert"), ("update", "ignore")])
def test_a_two_column_key_stores_what_delta_rs_stores(
    spark: SparkSession, tmp_path: Path, joins: list[int], modes: tuple[str, str]
) -> None:
    # a key of two columns (matched in Arrow, not by the one-integer search); a NULL in either never matches
    source = _rows([*range(0, 120, 3), *range(900, 920), None], ["US", "DE", "FR", "JP"], "new")
    source[3]["country"] = None
    root = _namespace(tmp_path)
    result = merge_partitioned(
        spark.createDataFrame(source, SPARK_SCHEMA),
        root,
        on=["id", "country"],
        when_matched=modes[0],
        when_not_matched=modes[1],
    )
    from deltalake import write_deltalake

    uri = str(tmp_path / "delta")
    write_deltalake(uri, pa.Table.from_pylist(TARGET, schema=SCHEMA), partition_by=["country"])
    metrics = oracle.delta_merge(
        uri, pa.Table.from_pylist(source, schema=SCHEMA), "t.id = s.id AND t.country = s.country", modes
    )
    from deltalake import DeltaTable

    theirs = DeltaTable(uri).to_pyarrow_table().to_pylist()
    assert joins == []
    assert oracle.canonical(oracle.stored_rows(root, "country"), COLUMNS) == oracle.canonical(theirs, COLUMNS)
    assert (result.rows_updated, result.rows_inserted) == (
        metrics["num_target_rows_updated"],
        metrics["num_target_rows_inserted"],
    )
