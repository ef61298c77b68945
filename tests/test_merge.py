"""merge_partitioned against independent oracles: plain Python over the before-image
(random cases) and delta-rs's own MERGE on the same rows (every mode combination)."""

from __future__ import annotations

import itertools
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pyspark.sql import SparkSession

from partitioning.errors import InvalidInput
from partitioning.namespace import PartitionedNamespace
from partitioning.tables.write import write_table
from pipelines.write.merge import merge_partitioned
from tests import merge_oracle as oracle
from tests.properties import spark_settings

SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.int32()), ("v", pa.int64())])
SPARK_SCHEMA = "id long, p int, v long"
COLUMNS = ["id", "p", "v"]

CONDITIONS = [
    None,
    ("source.v > target.v", lambda s, t: s["v"] is not None and t["v"] is not None and s["v"] > t["v"]),
]
ASSIGNMENTS = [
    None,
    (
        {"v": "source.v + coalesce(target.v, 0)"},
        lambda s, t: {**t, "v": None if s["v"] is None else s["v"] + (t["v"] or 0)},
    ),
    ({"p": "source.p"}, lambda s, t: {**t, "p": s["p"]}),
]
FILTERS = [None, ("p <> 1", lambda t: t["p"] is not None and t["p"] != 1)]


def _namespace(root: str, rows: list[dict[str, Any]]) -> None:
    ns = PartitionedNamespace.create(root, SCHEMA, ["p"])
    if rows:
        write_table(ns, pa.Table.from_pylist(rows, schema=SCHEMA))


def _run(spark: SparkSession, root: str, target: list, source: list, case: oracle.Case) -> None:
    _namespace(root, target)
    before = PartitionedNamespace.load(root).manifest_version
    src = spark.createDataFrame([(r["id"], r["p"], r["v"]) for r in source], SPARK_SCHEMA)
    try:
        expected = oracle.merge(target, source, ["id"], case)
    except oracle.Duplicate:
        with pytest.raises(InvalidInput, match="more than one source row"):
            merge_partitioned(src, root, on="id", **case.kwargs())
        assert PartitionedNamespace.load(root).manifest_version == before
        assert oracle.canonical(oracle.stored_rows(root, "p"), COLUMNS) == oracle.canonical(target, COLUMNS)
        return
    merge_partitioned(src, root, on="id", **case.kwargs())
    got = oracle.stored_rows(root, "p")
    assert oracle.canonical(got, COLUMNS) == oracle.canonical(expected, COLUMNS)


def _rows(ids: Any, size: int) -> Any:
    return st.lists(
        st.fixed_dictionaries({"id": ids, "p": st.integers(0, 3), "v": st.one_of(st.none(), st.integers(-5, 5))}),
        max_size=size,
    )


@st.composite
def cases(draw: Any) -> tuple[list, list, oracle.Case]:
    target = draw(_rows(st.one_of(st.none(), st.integers(0, 12)), 14), label="target")
    source = draw(_rows(st.one_of(st.none(), st.integers(0, 16)), 8), label="source")
    when_matched = draw(st.sampled_from(["update", "delete", "ignore"]))
    case = oracle.Case(
        when_matched=when_matched,
        when_not_matched=draw(st.sampled_from(["insert", "ignore"])),
        when_not_matched_by_source=draw(st.sampled_from(["ignore", "delete"])),
        condition=None if when_matched == "ignore" else draw(st.sampled_from(CONDITIONS)),
        assignments=draw(st.sampled_from(ASSIGNMENTS)) if when_matched == "update" else None,
        target_filter=draw(st.sampled_from(FILTERS)),
    )
    return target, source, case


@spark_settings(4)
@given(case=cases())
def test_random_merges_match_the_python_oracle(
    spark: SparkSession, tmp_path_factory: Any, case: Any, path: str
) -> None:
    _run(spark, str(tmp_path_factory.mktemp("m") / "ns"), *case)


@pytest.mark.slow
@spark_settings(80)
@given(case=cases())
def test_random_merges_match_the_python_oracle_many(spark: SparkSession, tmp_path_factory: Any, case: Any) -> None:
    _run(spark, str(tmp_path_factory.mktemp("m") / "ns"), *case)


TARGET = [
    {"id": 1, "p": 0, "v": 10},
    {"id": 2, "p": 1, "v": 20},
    {"id": 3, "p": 2, "v": 30},
    {"id": 4, "p": 0, "v": None},
    {"id": None, "p": 1, "v": 50},
    {"id": 6, "p": 3, "v": 60},
]
SOURCE = [
    {"id": 1, "p": 0, "v": 11},  # matched, same partition
    {"id": 2, "p": 3, "v": 5},  # matched, moves from p=1 to p=3
    {"id": 4, "p": 2, "v": 44},  # matched, target v NULL
    {"id": 7, "p": 1, "v": 70},  # not matched: insert
    {"id": None, "p": 0, "v": 99},  # NULL key: never matches
]
COMBINATIONS = list(itertools.product(["update", "delete", "ignore"], ["insert", "ignore"], ["ignore", "delete"]))


def _delta_merge(tmp_path: Any, case: oracle.Case) -> list[dict[str, Any]]:
    """delta-rs runs the same MERGE on the same rows: the second oracle."""
    from deltalake import DeltaTable, write_deltalake

    uri = str(tmp_path / "delta")
    write_deltalake(uri, pa.Table.from_pylist(TARGET, schema=SCHEMA), partition_by=["p"])
    merger = DeltaTable(uri).merge(
        pa.Table.from_pylist(SOURCE, schema=SCHEMA),
        predicate="target.id = source.id",
        source_alias="source",
        target_alias="target",
    )
    predicate = case.condition[0] if case.condition else None
    if case.when_matched == "update":
        merger = merger.when_matched_update_all(predicate=predicate)
    elif case.when_matched == "delete":
        merger = merger.when_matched_delete(predicate=predicate)
    if case.when_not_matched == "insert":
        merger = merger.when_not_matched_insert_all()
    if case.when_not_matched_by_source == "delete":
        merger = merger.when_not_matched_by_source_delete()
    merger.execute()
    return DeltaTable(uri).to_pyarrow_table().to_pylist()


@pytest.fixture(params=["driver", "tasks"])
def path(request: pytest.FixtureRequest) -> str:
    """Which way the merge reads and writes rows: the driver's small path or Spark's tasks."""
    if request.param == "tasks":
        request.getfixturevalue("spark_tasks")
    return str(request.param)


@pytest.mark.parametrize(("when_matched", "when_not_matched", "by_source"), COMBINATIONS)
def test_every_mode_combination_matches_delta_rs(
    spark: SparkSession, tmp_path: Any, when_matched: str, when_not_matched: str, by_source: str, path: str
) -> None:
    conditional = when_matched == "update" and when_not_matched == "insert"
    case = oracle.Case(when_matched, when_not_matched, by_source, condition=CONDITIONS[1] if conditional else None)
    root = str(tmp_path / "ns")
    _namespace(root, TARGET)
    src = spark.createDataFrame([(r["id"], r["p"], r["v"]) for r in SOURCE], SPARK_SCHEMA)
    result = merge_partitioned(src, root, on="id", **case.kwargs())
    got = oracle.canonical(oracle.stored_rows(root, "p"), COLUMNS)
    assert got == oracle.canonical(_delta_merge(tmp_path, case), COLUMNS)
    assert got == oracle.canonical(oracle.merge(TARGET, SOURCE, ["id"], case), COLUMNS)
    if when_matched == "update" and when_not_matched == "insert":
        # id 1: 11 > 10 updates; id 2: 5 > 20 fails; id 4: target NULL fails. Inserts: 7 and the NULL key.
        assert (result.rows_updated, result.rows_inserted) == (1, 2)
