"""update_rows, replace_where, merge_schema, merge refusals, concurrency and the merge job,
each checked against rows computed by hand or in plain Python over the before-image."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

import pipelines.write.merge as merge_module
import pipelines.write.rewrite as rewrite
from jobs import merge as merge_job
from partitioning.errors import ConcurrentModification, InvalidInput, SchemaError
from partitioning.namespace import PartitionedNamespace
from partitioning.tables.write import write_table
from pipelines.write.dataframe import write_partitioned
from pipelines.write.merge import merge_partitioned
from pipelines.write.rewrite import update_rows
from tests import merge_oracle as oracle

SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.int32()), ("v", pa.int64())])
COLUMNS = ["id", "p", "v"]
ROWS = [{"id": i, "p": i % 3, "v": i * 10} for i in range(9)] + [{"id": None, "p": 1, "v": None}]


def _namespace(root: str, rows: list[dict[str, Any]] = ROWS) -> PartitionedNamespace:
    ns = PartitionedNamespace.create(root, SCHEMA, ["p"])
    write_table(ns, pa.Table.from_pylist(rows, schema=SCHEMA))
    return ns.refresh()


def _stored(root: str) -> list[tuple[Any, ...]]:
    return oracle.canonical(oracle.stored_rows(root, "p"), COLUMNS)


def _source(spark: SparkSession, rows: list[tuple[Any, ...]]) -> Any:
    return spark.createDataFrame(rows, "id long, p int, v long")


def test_update_rows_moves_rows_and_matches_python(spark: SparkSession, tmp_path: Any) -> None:
    root = str(tmp_path / "ns")
    _namespace(root)
    result = update_rows(root, set={"p": "p + 1", "v": "v + id"}, where="v >= 40 OR id IS NULL", spark=spark)
    expected = oracle.update(
        ROWS,
        lambda r: {**r, "p": r["p"] + 1, "v": None if r["v"] is None else r["v"] + r["id"]},
        lambda r: r["id"] is None or (r["v"] is not None and r["v"] >= 40),
    )
    assert _stored(root) == oracle.canonical(expected, COLUMNS)
    assert result.rows_updated == 6
    assert result.partitions_created == 1  # p = 3


def test_update_rows_prunes_to_the_where_partitions(spark: SparkSession, tmp_path: Any) -> None:
    root = str(tmp_path / "ns")
    ns = _namespace(root)
    before = {t.object_id: t.read_version for t in ns.partitions()}
    update_rows(root, set={"v": "-v"}, where="p = 2", spark=spark)
    after = {t.object_id: t.read_version for t in ns.refresh().partitions()}
    changed = {oid for oid in before if before[oid] != after[oid]}
    assert changed == {t.object_id for t in ns.partitions() if t.values == {"p": 2}}
    expected = oracle.update(ROWS, lambda r: {**r, "v": -r["v"]}, lambda r: r["p"] == 2)
    assert _stored(root) == oracle.canonical(expected, COLUMNS)


def test_update_rows_refuses_unknown_columns_and_bad_sql(spark: SparkSession, tmp_path: Any) -> None:
    root = str(tmp_path / "ns")
    version = _namespace(root).manifest_version
    with pytest.raises(InvalidInput, match="'nope' is not in the namespace"):
        update_rows(root, set={"nope": "1"}, spark=spark)
    with pytest.raises(InvalidInput, match="update_rows"):
        update_rows(root, set={"v": "no_such_function(v)"}, spark=spark)
    assert PartitionedNamespace.load(root).manifest_version == version


def test_replace_where_replaces_exactly_the_matching_rows(spark: SparkSession, tmp_path: Any) -> None:
    root = str(tmp_path / "ns")
    ns = _namespace(root)
    untouched = {t.object_id: t.read_version for t in ns.partitions() if t.values == {"p": 0}}
    new = _source(spark, [(100, 1, 25), (101, 2, None)])
    result = write_partitioned(new, root, mode="overwrite", replace_where="p IN (1, 2) AND (v > 20 OR v IS NULL)")
    kept = [r for r in ROWS if not (r["p"] in (1, 2) and (r["v"] is None or r["v"] > 20))]
    incoming = [{"id": 100, "p": 1, "v": 25}, {"id": 101, "p": 2, "v": None}]
    assert _stored(root) == oracle.canonical([*kept, *incoming], COLUMNS)
    assert result.rows_written == 2 and result.rows_deleted == 5
    after = {t.object_id: t.read_version for t in ns.refresh().partitions() if t.values == {"p": 0}}
    assert after == untouched


def test_replace_where_refuses_rows_outside_the_predicate(spark: SparkSession, tmp_path: Any) -> None:
    root = str(tmp_path / "ns")
    version = _namespace(root).manifest_version
    new = _source(spark, [(100, 1, 1), (101, 2, 2), (102, None, 3)])
    with pytest.raises(InvalidInput, match=r"2 row\(s\) of the DataFrame do not match"):
        write_partitioned(new, root, mode="overwrite", replace_where="p = 1")
    with pytest.raises(InvalidInput, match="replace_where needs mode='overwrite'"):
        write_partitioned(new, root, mode="append", replace_where="p = 1")
    assert PartitionedNamespace.load(root).manifest_version == version
    assert _stored(root) == oracle.canonical(ROWS, COLUMNS)


def test_merge_schema_adds_and_widens_columns(spark: SparkSession, tmp_path: Any) -> None:
    root = str(tmp_path / "ns")
    schema = pa.schema([("id", pa.int32()), ("p", pa.int32())])
    ns = PartitionedNamespace.create(root, schema, ["p"])
    write_table(ns, pa.table({"id": pa.array([1], pa.int32()), "p": pa.array([0], pa.int32())}))
    wider = spark.createDataFrame([(3_000_000_000, 0, "x")], "id long, p int, tag string")
    with pytest.raises(SchemaError, match="tag"):
        write_partitioned(wider, root)
    write_partitioned(wider, root, merge_schema=True)
    ns.refresh()
    assert ns.schema.field("id").type == pa.int64() and ns.schema.field("tag").type == pa.string()
    assert _stored_plain(root) == [(1, 0, None), (3_000_000_000, 0, "x")]
    more = spark.createDataFrame([(4, 1, "y", 1.5)], "id long, p int, tag string, score double")
    more.write.format("lance_partitioned").option("mergeSchema", "true").mode("append").save(root)
    assert ns.refresh().schema.names == ["id", "p", "tag", "score"]
    assert (4, 1, "y", 1.5) in _stored_plain(root)


def _stored_plain(root: str) -> list[tuple[Any, ...]]:
    ns = PartitionedNamespace.load(root)
    names = ns.schema.names
    rows = []
    for t in ns.partitions():
        data = ns.open_table(t).to_table()
        rows.extend(tuple(r.get(n) for n in names if n in data.column_names) for r in data.to_pylist())
    return sorted(rows, key=lambda r: r[0])


def test_duplicate_source_keys_are_refused_and_nothing_changes(spark: SparkSession, tmp_path: Any) -> None:
    root = str(tmp_path / "ns")
    version = _namespace(root).manifest_version
    src = _source(spark, [(3, 0, 1), (3, 0, 2), (4, 1, 1)])
    with pytest.raises(InvalidInput, match=r"matched by more than one source row \(e.g. id=3\)"):
        merge_partitioned(src, root, on="id")
    assert PartitionedNamespace.load(root).manifest_version == version
    assert _stored(root) == oracle.canonical(ROWS, COLUMNS)
    # ignored matches do not count; duplicate keys that match nothing are both inserted
    merge_partitioned(
        _source(spark, [(3, 0, 1), (3, 0, 2), (50, 0, 1), (50, 0, 2)]), root, on="id", when_matched="ignore"
    )
    assert len(oracle.stored_rows(root)) == len(ROWS) + 2


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"on": "nope"}, "merge key 'nope' is not a namespace column"),
        ({"on": "id", "when_matched": "upsert"}, "when_matched='upsert' is not one of: update, delete, ignore"),
        ({"on": "id", "when_matched": "delete", "set": {"v": "1"}}, "set= applies to when_matched='update'"),
        ({"on": "id", "when_matched": "ignore", "matched_condition": "true"}, "matched_condition has no effect"),
        ({"on": "id", "set": {"v": "no_such_function(source.v)"}}, "merge"),
        ({"on": "id", "set": {"w": "1"}}, "set: 'w' is not a namespace column"),
    ],
)
def test_bad_merge_input_gets_one_line(spark: SparkSession, tmp_path: Any, kwargs: dict, message: str) -> None:
    root = str(tmp_path / "ns")
    version = _namespace(root).manifest_version
    with pytest.raises(InvalidInput, match=message) as info:
        merge_partitioned(_source(spark, [(1, 0, 1)]), root, **kwargs)
    assert "\n" not in str(info.value)
    assert PartitionedNamespace.load(root).manifest_version == version


def test_insert_needs_every_column_in_the_source(spark: SparkSession, tmp_path: Any) -> None:
    root = str(tmp_path / "ns")
    _namespace(root)
    with pytest.raises(InvalidInput, match="no column 'v'"):
        merge_partitioned(spark.createDataFrame([(1, 0)], "id long, p int"), root, on="id")
    merge_partitioned(
        spark.createDataFrame([(1, 0)], "id long, p int"), root, on="id", when_not_matched="ignore", set={"v": "7"}
    )
    assert {r["v"] for r in oracle.stored_rows(root) if r["id"] == 1} == {7}


def _inject_once(monkeypatch: pytest.MonkeyPatch, action: Any) -> list[int]:
    """Run ``action`` (a real concurrent commit) the first time the merge commits, after it has
    read the target and written its fragments (every way a merge goes commits through here)."""
    calls: list[int] = []
    real = rewrite.commit_rewrite

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            action()
        return real(*args, **kwargs)

    monkeypatch.setattr(rewrite, "commit_rewrite", wrapped)
    return calls


def test_merge_racing_an_append_to_its_partitions_reruns_and_loses_nothing(
    spark: SparkSession, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = str(tmp_path / "ns")
    ns = _namespace(root)
    late = [{"id": 20, "p": 2, "v": 1}, {"id": 21, "p": 0, "v": 1}]
    calls = _inject_once(monkeypatch, lambda: write_table(ns, pa.Table.from_pylist(late, schema=SCHEMA)))
    source = [(20, 2, 99), (1, 1, 11), (30, 0, 3)]
    merge_partitioned(_source(spark, source), root, on="id")
    assert len(calls) == 2  # the append changed a partition the merge read: it ran again
    src_rows = [dict(zip(COLUMNS, r, strict=True)) for r in source]
    expected = oracle.merge([*ROWS, *late], src_rows, ["id"], oracle.Case())
    assert _stored(root) == oracle.canonical(expected, COLUMNS)


def test_a_rerun_reads_again_only_the_partitions_that_changed(
    spark: SparkSession, tmp_path: Any, monkeypatch: pytest.MonkeyPatch, spark_tasks: None
) -> None:
    """An append to p = 2 during the first round: the second round reads the p = 2 table
    again and takes the other tables' rows from the first round; the result is exact and
    reports its two rounds and its time."""
    root = str(tmp_path / "ns")
    ns = _namespace(root)
    late = [{"id": 20, "p": 2, "v": 1}]
    _inject_once(monkeypatch, lambda: write_table(ns, pa.Table.from_pylist(late, schema=SCHEMA)))
    reads: list[list[str]] = []
    real = merge_module.matched_target

    def spied(session: Any, namespace: Any, read: Any, *args: Any) -> Any:
        reads.append(sorted(read))
        return real(session, namespace, read, *args)

    monkeypatch.setattr(merge_module, "matched_target", spied)
    source = [(20, 2, 99), (1, 1, 11)]
    every = {c: f"source.`{c}`" for c in COLUMNS}  # the default, spelled out: the join path, which caches
    result = merge_partitioned(_source(spark, source), root, on="id", set=every)
    by_value = {next(iter(t.values.values())): t.object_id for t in PartitionedNamespace.load(root).partitions()}
    assert reads == [sorted(by_value.values()), [by_value[2]]]
    assert result.rounds == 2 and result.seconds > 0 and "after 2 rounds" in result.summary()
    expected = oracle.merge([*ROWS, *late], [dict(zip(COLUMNS, r, strict=True)) for r in source], ["id"], oracle.Case())
    assert _stored(root) == oracle.canonical(expected, COLUMNS)


def test_merge_racing_a_merge_on_the_same_partitions_loses_no_update(
    spark: SparkSession, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = str(tmp_path / "ns")
    _namespace(root)
    first = [(1, 1, 100), (2, 2, 200)]
    second = [(1, 1, 111), (5, 2, 555)]
    calls = _inject_once(monkeypatch, lambda: rewrite_merge(spark, root, first))
    merge_partitioned(
        _source(spark, second), root, on="id", set={"v": "target.v + source.v"}, when_not_matched="ignore"
    )
    assert len(calls) == 3  # outer attempt, inner merge, outer attempt again
    assign = oracle.Case(assignments=({}, lambda s, t: {**t, "v": t["v"] + s["v"]}), when_not_matched="ignore")
    after_first = oracle.merge(ROWS, [dict(zip(COLUMNS, r, strict=True)) for r in first], ["id"], oracle.Case())
    expected = oracle.merge(after_first, [dict(zip(COLUMNS, r, strict=True)) for r in second], ["id"], assign)
    assert _stored(root) == oracle.canonical(expected, COLUMNS)


def rewrite_merge(spark: SparkSession, root: str, rows: list[tuple[Any, ...]]) -> None:
    merge_partitioned(_source(spark, rows), root, on="id")


def test_keys_that_hold_the_partition_column_read_only_those_partitions(
    spark: SparkSession, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = str(tmp_path / "ns")
    ns = _namespace(root)
    late = [{"id": 40, "p": 2, "v": 1}]
    calls = _inject_once(monkeypatch, lambda: write_table(ns, pa.Table.from_pylist(late, schema=SCHEMA)))
    merge_partitioned(_source(spark, [(3, 0, 33), (60, 0, 6)]), root, on=["id", "p"])
    assert len(calls) == 1  # p = 2 was not read, so the append there is no conflict
    source = [{"id": 3, "p": 0, "v": 33}, {"id": 60, "p": 0, "v": 6}]
    expected = oracle.merge([*ROWS, *late], source, ["id", "p"], oracle.Case())
    assert _stored(root) == oracle.canonical(expected, COLUMNS)


def test_a_merge_that_keeps_losing_fails_with_nothing_committed(
    spark: SparkSession, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = str(tmp_path / "ns")
    ns = _namespace(root)
    real = rewrite.commit_rewrite

    def always(*args: Any, **kwargs: Any) -> Any:
        # a row with a key of the source: the merge cannot be rebased onto it (an unrelated
        # append would be, tests/test_rebase.py)
        write_table(ns, pa.Table.from_pylist([{"id": 1, "p": 0, "v": 10}], schema=SCHEMA))
        return real(*args, **kwargs)

    monkeypatch.setattr(rewrite, "commit_rewrite", always)
    with pytest.raises(ConcurrentModification, match="kept changing"):
        merge_partitioned(_source(spark, [(1, 0, 5)]), root, on="id", max_attempts=2)
    assert {r["v"] for r in oracle.stored_rows(root) if r["id"] == 1} == {10}


def test_merge_job_upserts_a_parquet_source(spark: SparkSession, tmp_path: Any, capsys: Any) -> None:
    root = str(tmp_path / "ns")
    _namespace(root)
    path = str(tmp_path / "changes")
    _source(spark, [(1, 2, 7), (77, 0, 7)]).write.parquet(path)
    code = merge_job.main(["--root", root, "--source", path, "--format", "parquet", "--on", "id"])
    assert code == 0
    assert "merge: 1 updated, 1 inserted, 0 deleted" in capsys.readouterr().out
    expected = oracle.merge(ROWS, [{"id": 1, "p": 2, "v": 7}, {"id": 77, "p": 0, "v": 7}], ["id"], oracle.Case())
    assert _stored(root) == oracle.canonical(expected, COLUMNS)
    assert merge_job.main(["--root", root, "--source", path, "--format", "parquet", "--on", "id", "--set", "v"]) == 2


def test_history_records_merge_update_and_replace_where(spark: SparkSession, tmp_path: Any) -> None:
    from partitioning.storage.history import history_table

    root = str(tmp_path / "ns")
    _namespace(root)
    merge_partitioned(_source(spark, [(1, 2, 5), (40, 0, 4)]), root, on="id", target_filter="p <> 2")
    update_rows(root, set={"v": "v * 2"}, where="p = 0", spark=spark)
    write_partitioned(_source(spark, [(9, 1, 9)]), root, mode="overwrite", replace_where="p = 1")
    newest = history_table(root, limit=3).to_pylist()
    assert [h["operation"] for h in newest] == ["WRITE", "UPDATE", "MERGE"]
    replace, update, merge = (dict(h["parameters"]) for h in newest)
    assert merge == {
        "on": "id",
        "when_matched": "update",
        "when_not_matched": "insert",
        "when_not_matched_by_source": "ignore",
        "target_filter": "p <> 2",
    }
    metrics = dict(newest[2]["metrics"])
    assert (metrics["rows_updated"], metrics["rows_added"], metrics["rows_removed"]) == (1, 2, 1)
    assert update == {"set": '{"v": "v * 2"}', "where": "p = 0"}
    assert dict(newest[1]["metrics"])["rows_updated"] == sum(1 for r in oracle.stored_rows(root) if r["p"] == 0)
    assert replace == {"mode": "overwrite", "replace_where": "p = 1"}
