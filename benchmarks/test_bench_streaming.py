"""Structured Streaming into a namespace, against Spark's own parquet file sink (Spark local[2]).

**Sustained rows/s**: the same parquet input files streamed with ``trigger(availableNow=True)``
and ``maxFilesPerTrigger``, into 100 partitions: the ``lance_partitioned`` sink (one
``__manifest`` commit per batch, automatic compaction on) against
``writeStream.format("parquet").partitionBy("p")``. Rows over the wall time from
``start()`` to the end of the query; runs interleaved, each into a fresh target and
checkpoint; median (min .. max) of ``REPEATS``. Shapes (``BENCH_STREAM_SHAPES``:
``files/rows_per_file/files_per_batch``): large batches (40 files of 50,000 rows, 4 a
batch) and small ones (60 files of 2,000 rows, 1 a batch). Every run is checked: the rows
read back equal the input's count and the sum of ``id``.

**Open + plan after many micro-batches**: ``MICRO_BATCHES`` files of 200 rows streamed one
file a batch (a real stream: each batch one commit, compaction as it goes), against the same
files in ONE batch; then ``PartitionedNamespace.load`` + ``plan_scan`` with a partition
filter (later opens in a process, which find the latest version from the one seen before; a
process's first open, which starts from ``__manifest``'s version hint; the same with nothing
of the namespace decoded in the process; and without the hint, listing every version as
Lance does), and a full read of every
row with pylance; the opens interleaved 60 times, apart from the reads (interleaved 15
times), since an open timed right after a read runs cold. Partitions:
``BENCH_STREAM_PLAN_PARTITIONS`` (100 and 10).
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from benchmarks.conftest import interleaved_samples, spread
from partitioning.namespace import PartitionedNamespace
from partitioning.state import loading
from partitioning.storage import manifest as latest
from pipelines import register_data_source

pytestmark = pytest.mark.bench

REPEATS = int(os.environ.get("BENCH_STREAM_REPEATS", 3))
SHAPES = [
    tuple(int(x) for x in s.split("/"))
    for s in os.environ.get("BENCH_STREAM_SHAPES", "40/50000/4,60/2000/1").split(",")
]
MICRO_BATCHES = int(os.environ.get("BENCH_STREAM_MICRO_BATCHES", 500))
PLAN_PARTITIONS = [int(x) for x in os.environ.get("BENCH_STREAM_PLAN_PARTITIONS", "100,10").split(",")]
SCHEMA = "id long, p int, v double, name string"


def make_input(directory: Path, files: int, rows: int, partitions: int) -> int:
    directory.mkdir(parents=True)
    for i in range(files):
        ids = np.arange(i * rows, (i + 1) * rows, dtype=np.int64)
        table = pa.table(
            {
                "id": ids,
                "p": (ids % partitions).astype(np.int32),
                "v": ids / 7.0,
                "name": pa.array([f"user-{x % 9973}" for x in ids]),
            }
        )
        pq.write_table(table, directory / f"part-{i:05d}.parquet")
    return files * rows


def stream(spark: SparkSession, source: Path, target: Path, per_batch: int, fmt: str) -> float:
    """Seconds from ``start()`` to the end of an availableNow stream of ``source`` into ``target``."""
    shutil.rmtree(target, ignore_errors=True)
    shutil.rmtree(f"{target}-ck", ignore_errors=True)
    frame = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", per_batch).parquet(str(source))
    writer = frame.writeStream.option("checkpointLocation", f"{target}-ck").trigger(availableNow=True)
    if fmt == "parquet":
        writer = writer.format("parquet").partitionBy("p")
    else:
        writer = writer.format("lance_partitioned").option("partition_by", "p")
    started = time.perf_counter()
    writer.start(str(target)).awaitTermination()
    return time.perf_counter() - started


def check(spark: SparkSession, target: Path, fmt: str, rows: int) -> None:
    if fmt == "parquet":
        got = spark.read.parquet(str(target)).selectExpr("count(*)", "sum(id)").first()
        count, total = got[0], got[1]
    else:
        ns = PartitionedNamespace.load(str(target))
        tables = [lance.dataset(t.uri, version=t.read_version).to_table(columns=["id"]) for t in ns.partitions()]
        count = sum(t.num_rows for t in tables)
        total = sum(int(pa.compute.sum(t["id"]).as_py() or 0) for t in tables)
    assert (count, total) == (rows, rows * (rows - 1) // 2)


@pytest.mark.parametrize(("files", "rows_per_file", "per_batch"), SHAPES)
def test_stream_rows_per_second_vs_parquet_sink(
    spark: SparkSession, tmp_path: Path, files: int, rows_per_file: int, per_batch: int
) -> None:
    register_data_source(spark)
    rows = make_input(tmp_path / "in", files, rows_per_file, 100)
    seconds: dict[str, list[float]] = {"lance_partitioned": [], "parquet": []}
    for _ in range(REPEATS):
        for fmt in seconds:
            target = tmp_path / fmt
            seconds[fmt].append(stream(spark, tmp_path / "in", target, per_batch, fmt))
            check(spark, target, fmt, rows)
    ours, theirs = (float(np.median(seconds[k])) for k in ("lance_partitioned", "parquet"))
    batches = -(-files // per_batch)
    print(
        f"\n{rows:,} rows in {batches} micro-batches into 100 partitions: "
        f"lance_partitioned {rows / ours:,.0f} rows/s ({spread(seconds['lance_partitioned'])}), "
        f"parquet sink {rows / theirs:,.0f} rows/s ({spread(seconds['parquet'])}): {theirs / ours:.2f}x"
    )


def forget_decoded(root: str) -> None:
    """Drop the decoded ``__manifest`` versions of ``root`` only (others stay warm)."""
    with loading._cache_lock:
        keys = [k for k in loading._cache if k[0] == root]
        assert keys, f"nothing of {root} was decoded"
        for key in keys:
            del loading._cache[key]


@pytest.mark.parametrize("partitions", PLAN_PARTITIONS)
def test_open_and_plan_after_many_micro_batches(spark: SparkSession, tmp_path: Path, partitions: int) -> None:
    register_data_source(spark)
    rows = make_input(tmp_path / "in", MICRO_BATCHES, 200, partitions)
    small, big = tmp_path / "small", tmp_path / "big"
    took = stream(spark, tmp_path / "in", small, 1, "lance_partitioned")
    stream(spark, tmp_path / "in", big, MICRO_BATCHES, "lance_partitioned")
    for root in (small, big):
        check(spark, root, "lance_partitioned", rows)
    where = f"p = {partitions // 2}"

    def open_plan(root: Path) -> int:
        ns = PartitionedNamespace.load(str(root))
        return len(ns.plan_scan(where))

    def first_open_plan(root: Path) -> int:
        # as a process that never opened this namespace: it starts from the hint file
        latest._SEEN.pop(str(root / "__manifest"), None)
        return open_plan(root)

    def cold_open_plan(root: Path) -> int:
        # nothing of this namespace in the process: no last-seen version, no decoded state
        forget_decoded(str(root))
        return first_open_plan(root)

    def listed_open_plan(root: Path) -> int:
        # as before the hint: Lance lists every version
        hint = root / "__manifest" / latest.HINT_FILE
        saved = hint.read_bytes()
        hint.unlink()
        try:
            return first_open_plan(root)
        finally:
            hint.write_bytes(saved)

    def read_all(root: Path) -> int:
        ns = PartitionedNamespace.load(str(root))
        return sum(
            lance.dataset(t.uri, version=t.read_version).to_table(columns=["v"]).num_rows for t in ns.partitions()
        )

    # the opens are timed apart from the reads: one right after a 200 ms read runs cold
    timing = interleaved_samples(
        {
            "plan small": lambda: open_plan(small),
            "plan big": lambda: open_plan(big),
            "first plan small": lambda: first_open_plan(small),
            "first plan big": lambda: first_open_plan(big),
            "cold plan small": lambda: cold_open_plan(small),
            "cold plan big": lambda: cold_open_plan(big),
            "listed plan small": lambda: listed_open_plan(small),
            "listed plan big": lambda: listed_open_plan(big),
        },
        repeats=60,
    )
    timing.update(
        interleaved_samples({"read small": lambda: read_all(small), "read big": lambda: read_all(big)}, repeats=15)
    )
    fragments = {
        name: max(
            len(lance.dataset(t.uri, version=t.read_version).get_fragments())
            for t in PartitionedNamespace.load(str(root)).partitions()
        )
        for name, root in (("small", small), ("big", big))
    }
    versions = PartitionedNamespace.load(str(small)).manifest_version
    print(
        f"\n{MICRO_BATCHES} micro-batches ({took:.0f} s, __manifest v{versions}) vs one batch, "
        f"{partitions} partitions: "
        f"open + plan {timing['plan small'].show_ms()} vs {timing['plan big'].show_ms()} = "
        f"{timing['plan small'].median / timing['plan big'].median:.2f}x; a process's first open + plan "
        f"{timing['first plan small'].show_ms()} vs {timing['first plan big'].show_ms()} = "
        f"{timing['first plan small'].median / timing['first plan big'].median:.2f}x; cold (no decoded state "
        f"either) {timing['cold plan small'].show_ms()} vs {timing['cold plan big'].show_ms()} = "
        f"{timing['cold plan small'].median / timing['cold plan big'].median:.2f}x; listing every version "
        f"(no hint) {timing['listed plan small'].show_ms()} vs {timing['listed plan big'].show_ms()} = "
        f"{timing['listed plan small'].median / timing['listed plan big'].median:.2f}x; read every row "
        f"{timing['read small'].show_ms()} vs {timing['read big'].show_ms()} = "
        f"{timing['read small'].median / timing['read big'].median:.2f}x; most fragments in a partition "
        f"{fragments['small']} vs {fragments['big']}"
    )
