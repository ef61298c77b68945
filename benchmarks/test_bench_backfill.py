"""Backfilling columns vs rewriting the table with them, same rows, same run (Spark local[2]).

Two new columns are computed from ``id``: an 8-byte ``bucket`` and a ``DIM``-dim float32
``emb`` (numpy, the same function in both arms). ``backfill_columns`` stores them beside
each fragment's files; the baseline reads the whole namespace, adds the same columns in
Spark's tasks (``mapInArrow``) and writes it back with ``write_partitioned(mode="overwrite")``,
what an Iceberg or Delta user does (after adding the columns, so the vector keeps its
dimension). Each run works on a copy of the namespace made
before the first timed run; runs are interleaved; median (min .. max) of ``REPEATS``.
Bytes: the backfill's new files, and the files the overwrite adds, against the new
columns' raw size (8 + 4 * DIM bytes a row). Every run is checked: rows and the sum of
``bucket`` read back equal numpy's.

Shapes (``BENCH_BACKFILL_SHAPES``, ``rows/partitions`` comma separated): the issue's
5,000,000 rows in 1,500 partitions, and 1,000,000 rows in 20 partitions.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from benchmarks.conftest import spread
from partitioning.namespace import PartitionedNamespace
from partitioning.tables.write import write_table
from pipelines.backfill.api import backfill_columns
from pipelines.read.dataframe import read_partitioned
from pipelines.write.dataframe import write_partitioned

pytestmark = pytest.mark.bench

DIM = 384
REPEATS = int(os.environ.get("BENCH_BACKFILL_REPEATS", 3))
SHAPES = [
    tuple(int(x) for x in s.split("/"))
    for s in os.environ.get("BENCH_BACKFILL_SHAPES", "5000000/1500,1000000/20").split(",")
]
SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.int32()), ("v", pa.float64())])
OUT = pa.schema([("bucket", pa.int64()), ("emb", pa.list_(pa.float32(), DIM))])
_STEP = np.arange(DIM, dtype=np.float32) / DIM


def new_columns(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The two new columns of a batch holding ``id``: the same work in both arms."""
    ids = batch.column("id").to_numpy()
    emb = (ids % 1009).astype(np.float32)[:, None] / np.float32(1009) + _STEP[None, :]
    return pa.record_batch(
        {"bucket": pa.array(ids * 2), "emb": pa.FixedSizeListArray.from_arrays(pa.array(emb.ravel()), DIM)}
    )


def _base(path: Path, rows: int, partitions: int) -> None:
    ns = PartitionedNamespace.create(str(path), SCHEMA, ["p"])
    for start in range(0, rows, 2_000_000):
        ids = np.arange(start, min(rows, start + 2_000_000), dtype=np.int64)
        write_table(
            ns,
            pa.table({"id": ids, "p": (ids % partitions).astype(np.int32), "v": ids / 3.0}, schema=SCHEMA),
        )


def _files(root: str) -> dict[str, int]:
    return {str(p): p.stat().st_size for p in Path(root).rglob("*.lance") if "__manifest" not in p.parts}


@pytest.mark.parametrize(("rows", "partitions"), SHAPES)
def test_backfill_vs_overwrite(spark: SparkSession, tmp_path: Path, rows: int, partitions: int) -> None:
    base = tmp_path / "base"
    _base(base, rows, partitions)
    copies = {(kind, i): tmp_path / f"{kind}-{i}" for kind in ("backfill", "overwrite") for i in range(REPEATS)}
    for dst in copies.values():
        shutil.copytree(base, dst)
    expected_sum = int(np.arange(rows, dtype=np.int64).sum() * 2)

    def backfill(root: str) -> int:
        result = backfill_columns(spark, root, new_columns, read_columns=["id"], output_schema=OUT, batch_rows=16_384)
        assert result.skipped is None and result.rows_left_null == 0
        return result.bytes_written

    def overwrite(root: str) -> int:
        before = _files(root)
        ns = PartitionedNamespace.load(root)
        arrow = pa.schema([*ns.schema, *OUT])
        ns.add_columns(list(OUT))  # the vector's dimension is the namespace's, as for the backfill

        def add(batches):  # type: ignore[no-untyped-def]
            for b in batches:
                extra = new_columns(b)
                emb = extra.column("emb").flatten()
                lists = pa.ListArray.from_arrays(pa.array(np.arange(0, len(emb) + 1, DIM, dtype=np.int32)), emb)
                yield pa.RecordBatch.from_arrays([*b.columns, extra.column("bucket"), lists], names=arrow.names)

        spark_schema = "id long, p int, v double, bucket long, emb array<float>"
        df = read_partitioned(spark, root).select(*SCHEMA.names).mapInArrow(add, spark_schema)
        write_partitioned(df, root, mode="overwrite")
        after = _files(root)
        return sum(size for path, size in after.items() if path not in before)

    def check(root: str) -> None:
        got = read_partitioned(spark, root).selectExpr("count(*)", "sum(bucket)", "sum(emb[383])").collect()[0]
        assert got[0] == rows and got[1] == expected_sum

    for kind, run in (("backfill", backfill), ("overwrite", overwrite)):
        warm = tmp_path / f"warm-{kind}"  # Spark's Python workers started and warm for both arms
        _base(warm, 2_000, 4)
        run(str(warm))
    seconds: dict[str, list[float]] = {"backfill": [], "overwrite": []}
    written: dict[str, list[int]] = {"backfill": [], "overwrite": []}
    for i in range(REPEATS):
        for kind, run in (("backfill", backfill), ("overwrite", overwrite)):
            root = str(copies[(kind, i)])
            start = time.perf_counter()
            written[kind].append(run(root))
            seconds[kind].append(time.perf_counter() - start)
            check(root)
            shutil.rmtree(root)
    raw = rows * (8 + 4 * DIM)
    ratio = np.median(seconds["backfill"]) / np.median(seconds["overwrite"])
    print(f"\n{rows:,} rows in {partitions:,} partitions, + bucket (int64) and emb ({DIM} x float32):")
    for kind in seconds:
        share = np.median(written[kind]) / raw
        print(f"  {kind:9} {spread(seconds[kind])}, {int(np.median(written[kind])):,} bytes ({share:.2f}x raw)")
    print(f"  time ratio backfill / overwrite: {ratio:.2f}x; new columns raw {raw:,} bytes")
    assert np.median(written["backfill"]) <= 1.1 * raw
