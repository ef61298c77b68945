"""Structured Streaming into a namespace (issue 36): the ``lance_partitioned`` sink and ``foreachBatch``.

Oracles: the input as pandas reads it (files) or as Spark's rate source defines it (values
0, 1, 2, ... with none skipped); the stored side read with pylance at the versions
``__manifest`` records; the query id from the checkpoint's own ``metadata`` file.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path

import lance
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from pyspark.errors import PySparkException

from partitioning.namespace import PartitionedNamespace
from partitioning.service.arrow import write_arrow
from partitioning.state import commit_rows
from pipelines import batch_write_id, compact, register_data_source, write_partitioned

SCHEMA = "id long, country string, amount double"
COUNTRIES = ["US", "DE", "FR"]


@pytest.fixture(autouse=True)
def _source(spark):
    register_data_source(spark)


def add_files(directory: Path, first: int, files: int, rows: int = 30) -> pd.DataFrame:
    directory.mkdir(parents=True, exist_ok=True)
    frames = []
    for i in range(first, first + files):
        ids = np.arange(i * rows, (i + 1) * rows, dtype=np.int64)
        frame = pd.DataFrame({"id": ids, "country": [COUNTRIES[x % 3] for x in ids], "amount": ids / 8})
        frame.to_parquet(directory / f"part-{i:04d}.parquet", index=False)
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)


def stored(root: Path, columns: list[str] | None = None) -> pd.DataFrame:
    ns = PartitionedNamespace.load(str(root))
    frames = [
        lance.dataset(t.uri, version=t.read_version).to_table(columns=columns).to_pandas() for t in ns.partitions()
    ]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def fragments(root: Path) -> dict[str, int]:
    ns = PartitionedNamespace.load(str(root))
    return {
        t.values["country"]: len(lance.dataset(t.uri, version=t.read_version).get_fragments()) for t in ns.partitions()
    }


def query_id(checkpoint: Path) -> str:
    return json.loads((checkpoint / "metadata").read_text())["id"]


def stream_files(spark, source: Path, root: Path, checkpoint: Path, *, per_batch: int = 1, **options: str):
    reader = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", per_batch).parquet(str(source))
    writer = reader.writeStream.format("lance_partitioned").option("checkpointLocation", str(checkpoint))
    for key, value in {"partition_by": "country", **options}.items():
        writer = writer.option(key, value)
    return writer.outputMode("append").trigger(availableNow=True).start(str(root))


def unrecord(checkpoint: Path, batch: int) -> None:
    """Spark's checkpoint as a driver that died after the sink's commit leaves it: the batch's
    offsets recorded, its commit not."""
    (checkpoint / "commits" / str(batch)).unlink()
    (checkpoint / "commits" / f".{batch}.crc").unlink(missing_ok=True)


def write_ids(root: Path) -> list[str]:
    history = PartitionedNamespace.load(str(root)).history().to_pylist()
    return [dict(r["parameters"]).get("write_id") for r in history if r["operation"] == "WRITE"]


def assert_same_rows(got: pd.DataFrame, want: pd.DataFrame) -> None:
    got = got.sort_values("id").reset_index(drop=True)[list(want.columns)]
    pd.testing.assert_frame_equal(got, want.sort_values("id").reset_index(drop=True), check_dtype=False)


def test_a_file_stream_lands_each_micro_batch_in_one_commit(spark, tmp_path):
    expected = add_files(tmp_path / "in", 0, 4)
    root, checkpoint = tmp_path / "ns", tmp_path / "ck"
    stream_files(spark, tmp_path / "in", root, checkpoint, auto_compact_after="0").awaitTermination()
    assert_same_rows(stored(root), expected)
    assert sorted(write_ids(root)) == sorted(f"{query_id(checkpoint)}-{b}" for b in range(4))
    assert fragments(root) == dict.fromkeys(COUNTRIES, 4)  # one fragment per partition and batch

    more = add_files(tmp_path / "in", 4, 2)  # restarted from its checkpoint: only the new files
    stream_files(spark, tmp_path / "in", root, checkpoint, per_batch=5).awaitTermination()
    assert_same_rows(stored(root), pd.concat([expected, more]))
    assert sorted(write_ids(root)) == sorted(f"{query_id(checkpoint)}-{b}" for b in range(5))


def test_a_batch_replayed_after_its_manifest_commit_adds_nothing(spark, tmp_path):
    """Spark recorded the batch's offsets but not its commit (the driver died after our
    __manifest commit): the restart replays it, and the sink skips it."""
    expected = add_files(tmp_path / "in", 0, 3)
    root, checkpoint = tmp_path / "ns", tmp_path / "ck"
    stream_files(spark, tmp_path / "in", root, checkpoint).awaitTermination()
    version = PartitionedNamespace.load(str(root)).manifest_version
    unrecord(checkpoint, 2)
    query = stream_files(spark, tmp_path / "in", root, checkpoint)
    query.awaitTermination()
    assert [p["batchId"] for p in query.recentProgress] == [2]
    assert PartitionedNamespace.load(str(root)).manifest_version == version
    assert_same_rows(stored(root), expected)


def test_a_rate_stream_on_a_processing_time_trigger_lands_every_value_once(spark, tmp_path):
    root, checkpoint = tmp_path / "ns", tmp_path / "ck"
    for run in range(2):
        query = (
            spark.readStream.format("rate")
            .option("rowsPerSecond", 40)
            .load()
            .selectExpr("value", "timestamp", "CAST(value % 4 AS INT) AS shard")
            .writeStream.format("lance_partitioned")
            .option("checkpointLocation", str(checkpoint))
            .option("partition_by", "bucket[4](value)" if run == 0 else '["bucket[4](value)"]')
            .trigger(processingTime="300 milliseconds")
            .start(str(root))
        )
        deadline = time.monotonic() + 120
        while sum(p["numInputRows"] > 0 for p in query.recentProgress) < 3:
            assert time.monotonic() < deadline and query.isActive, query.exception()
            time.sleep(0.2)
        query.stop()
        values = stored(root)["value"].tolist()
        assert len(values) == len(set(values)) > 0
        assert sorted(values) == list(range(len(values)))  # the rate source skips none
        assert (stored(root)["shard"] == stored(root)["value"] % 4).all()


def test_trigger_once_writes_everything_in_one_commit(spark, tmp_path):
    expected = add_files(tmp_path / "in", 0, 3)
    root, checkpoint = tmp_path / "ns", tmp_path / "ck"
    query = (
        spark.readStream.schema(SCHEMA)
        .parquet(str(tmp_path / "in"))
        .writeStream.format("lance_partitioned")
        .option("checkpointLocation", str(checkpoint))
        .option("partition_by", "country")
        .trigger(once=True)
        .start(str(root))
    )
    query.awaitTermination()
    assert_same_rows(stored(root), expected)
    assert write_ids(root) == [f"{query_id(checkpoint)}-0"]


def test_small_appends_are_compacted_as_the_stream_goes(spark, tmp_path):
    expected = add_files(tmp_path / "in", 0, 12, rows=9)
    for option, bound in (("4", 4), ("0", 12)):
        root, checkpoint = tmp_path / f"ns{option}", tmp_path / f"ck{option}"
        stream_files(spark, tmp_path / "in", root, checkpoint, auto_compact_after=option).awaitTermination()
        assert_same_rows(stored(root), expected)
        counts = fragments(root)
        if option == "0":
            assert counts == dict.fromkeys(COUNTRIES, bound)
        else:
            assert max(counts.values()) <= bound
            ops = [r["operation"] for r in PartitionedNamespace.load(str(root)).history().to_pylist()]
            assert ops.count("COMPACT") >= 3  # each of the three partitions compacted at least once


def test_merge_schema_adds_the_streams_new_columns(spark, tmp_path):
    root = tmp_path / "ns"
    write_arrow(str(root), pa.table({"id": [0], "country": ["US"], "amount": [0.0]}), partition_by=["country"])
    source = tmp_path / "in"
    source.mkdir()
    pd.DataFrame({"id": [1, 2], "country": ["US", "DE"], "amount": [1.0, 2.0], "note": ["a", "b"]}).to_parquet(
        source / "p.parquet", index=False
    )

    def run(checkpoint: str, **options: str):
        reader = spark.readStream.schema(SCHEMA + ", note string").parquet(str(source))
        writer = reader.writeStream.format("lance_partitioned").option("checkpointLocation", str(tmp_path / checkpoint))
        for key, value in options.items():
            writer = writer.option(key, value)
        query = writer.trigger(availableNow=True).start(str(root))
        query.awaitTermination()

    with pytest.raises(PySparkException) as refused:
        run("ck1")
    assert "note" in str(refused.value)
    run("ck2", mergeSchema="true")
    got = stored(root).sort_values("id")
    assert got["note"].tolist() == [None, "a", "b"]


@pytest.mark.parametrize(
    ("options", "mode", "needle"),
    [
        ({"partition_by": "country", "write_id": "x"}, "append", "a stream's write id is <query id>-<batch id>"),
        ({"partition_by": "country", "colour": "red"}, "append", "unknown lance_partitioned streaming write option"),
        ({"partition_by": "country"}, "complete", "outputMode('append') only"),
        ({"partition_by": "country", "auto_compact_after": "-1"}, "append", "auto_compact_after must be"),
    ],
)
def test_bad_stream_options_are_one_line_and_create_nothing(spark, tmp_path, options, mode, needle):
    add_files(tmp_path / "in", 0, 1)
    frame = spark.readStream.schema(SCHEMA).parquet(str(tmp_path / "in"))
    if mode == "complete":
        frame = frame.groupBy("country").count()
    writer = frame.writeStream.format("lance_partitioned").option("checkpointLocation", str(tmp_path / "ck"))
    for key, value in options.items():
        writer = writer.option(key, value)
    with pytest.raises(PySparkException) as caught:
        writer.outputMode(mode).trigger(availableNow=True).start(str(tmp_path / "ns")).awaitTermination()
    text = str(caught.value)
    assert needle in text and "Traceback" not in text
    assert not (tmp_path / "ns" / "__manifest").exists()


def test_a_stream_a_batch_writer_and_compaction_at_once_keep_every_row(spark, tmp_path):
    source, root, checkpoint = tmp_path / "in", tmp_path / "ns", tmp_path / "ck"
    streamed = [add_files(source, 0, 2)]
    query = (
        spark.readStream.schema(SCHEMA)
        .option("maxFilesPerTrigger", 1)
        .parquet(str(source))
        .writeStream.format("lance_partitioned")
        .option("checkpointLocation", str(checkpoint))
        .option("partition_by", "country")
        .option("auto_compact_after", "3")
        .trigger(processingTime="100 milliseconds")
        .start(str(root))
    )
    deadline = time.monotonic() + 120
    while not (root / "__manifest").exists() or not stored(root).shape[0]:
        assert time.monotonic() < deadline and query.isActive, query.exception()
        time.sleep(0.2)
    batches = []
    errors: list[BaseException] = []

    def compactions() -> None:
        try:
            for _ in range(4):
                compact(str(root), spark=spark)
                time.sleep(0.3)
        except BaseException as exc:  # reported by the test below
            errors.append(exc)

    thread = threading.Thread(target=compactions)
    thread.start()
    for i in range(4):
        streamed.append(add_files(source, 2 + 2 * i, 2))
        ids = np.arange(100_000 + 20 * i, 100_000 + 20 * (i + 1))
        batch = pd.DataFrame({"id": ids, "country": [COUNTRIES[x % 3] for x in ids], "amount": ids / 8})
        write_partitioned(spark.createDataFrame(batch, SCHEMA), str(root), mode="append")
        batches.append(batch)
    thread.join()
    query.processAllAvailable()
    query.stop()
    assert errors == []
    assert_same_rows(stored(root), pd.concat(streamed + batches))


def test_foreach_batch_with_batch_write_id_lands_every_row_once(spark, tmp_path):
    expected = add_files(tmp_path / "in", 0, 3)
    root, checkpoint = tmp_path / "ns", tmp_path / "ck"
    used: list[str] = []

    def each(batch_df, batch_id: int) -> None:
        write_id = batch_write_id(batch_df, batch_id)
        used.append(write_id)
        write_partitioned(batch_df, str(root), mode="append", partition_by=["country"], write_id=write_id)

    def run() -> None:
        reader = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(tmp_path / "in"))
        reader.writeStream.foreachBatch(each).option("checkpointLocation", str(checkpoint)).trigger(
            availableNow=True
        ).start().awaitTermination()

    run()
    unrecord(checkpoint, 2)  # replayed: write_partitioned skips it
    run()
    assert used == [f"{query_id(checkpoint)}-{b}" for b in (0, 1, 2, 2)]
    assert used[-1] == batch_write_id(None, 2, checkpoint_location=str(checkpoint))  # type: ignore[arg-type]
    assert_same_rows(stored(root), expected)
    assert len(write_ids(root)) == 3


def test_stream_write_ids_keep_one_entry_per_query(tmp_path, monkeypatch):
    """A stream's batch ids are kept as one watermark per query: other writers' ids stay in
    the history however many batches a stream commits, and only the most recent queries
    are remembered."""
    root = str(tmp_path / "ns")
    write_arrow(root, pa.table({"id": [0], "k": ["a"]}), partition_by=["k"], write_id="job-42")
    query = "0b9c2a6e-52f1-4d6b-9d6e-2d6a4c1f0e11"
    for batch in range(commit_rows.WRITE_ID_HISTORY + 5):
        write_arrow(root, pa.table({"id": [batch + 1], "k": ["a"]}), write_id=f"{query}-{batch}")
    ns = PartitionedNamespace.load(root)
    assert ns.write_id_committed("job-42")
    assert ns.write_id_committed(f"{query}-7") and not ns.write_id_committed(f"{query}-105")
    again = write_arrow(root, pa.table({"id": [-1], "k": ["a"]}), write_id=f"{query}-3")
    assert again.skipped and ns.refresh().manifest_version == again.manifest_version

    monkeypatch.setattr(commit_rows, "STREAM_HISTORY", 2)
    others = [f"{i:08d}-0000-4000-8000-000000000000" for i in range(3)]
    for other in others:
        write_arrow(root, pa.table({"id": [1000], "k": ["b"]}), write_id=f"{other}-0")
    kept = commit_rows.stream_watermarks(PartitionedNamespace.load(root)._state)
    assert kept == {others[1]: 0, others[2]: 0}


def test_the_stream_sink_keeps_its_lease_files_tidy(spark, tmp_path):
    add_files(tmp_path / "in", 0, 2)
    root = tmp_path / "ns"
    stream_files(spark, tmp_path / "in", root, tmp_path / "ck").awaitTermination()
    leases = [p.name for p in (root / "_writes").glob("*")] if (root / "_writes").exists() else []
    assert not [name for name in leases if name.endswith(".json")]
    shutil.rmtree(tmp_path / "in")
