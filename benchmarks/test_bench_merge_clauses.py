"""Merges with other clauses than the upsert: ours vs delta-rs's merge with the same clauses.

The target and source of ``test_bench_merge`` (``BENCH_MERGE_*`` sizes; here defaulting to
1,500,000 rows in 60 partitions and a 300,000-row source read from a parquet file, half of
its ids matched): "insert the rows whose key is new" (``when_matched="ignore"``), "delete the
rows the source names" (``when_matched="delete", when_not_matched="ignore"``) and "update
only the matched rows" (``when_not_matched="ignore"``). Each timed run works on a fresh
copy (made before any timed run); runs are interleaved, median and min/max of ``REPEATS``;
every run's row count and sum of ``v`` equal delta-rs's.
"""

from __future__ import annotations

import os
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

import benchmarks.test_bench_merge as base
from partitioning.namespace import PartitionedNamespace
from partitioning.tables.write import write_table
from pipelines.read.dataframe import read_partitioned
from pipelines.write.merge import merge_partitioned
from tests.merge_oracle import delta_merge

pytestmark = pytest.mark.bench

REPEATS = 3
CLAUSES = {
    "insert new keys": ("ignore", "insert"),
    "delete matched": ("delete", "ignore"),
    "update matched only": ("update", "ignore"),
}


@pytest.fixture(autouse=True)
def _sizes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(base, "TARGET_ROWS", int(os.environ.get("BENCH_MERGE_TARGET_ROWS", 1_500_000)))
    monkeypatch.setattr(base, "SOURCE_ROWS", int(os.environ.get("BENCH_MERGE_SOURCE_ROWS", 300_000)))
    monkeypatch.setattr(base, "PARTITIONS", int(os.environ.get("BENCH_MERGE_PARTITIONS", 60)))


def test_merge_clauses_vs_delta_rs(spark: SparkSession, tmp_path: Path) -> None:
    from deltalake import DeltaTable, write_deltalake

    target = base.target_rows(0, base.TARGET_ROWS, base.PARTITIONS)
    write_table(PartitionedNamespace.create(str(tmp_path / "ns"), base.SCHEMA, ["p"]), target)
    write_deltalake(str(tmp_path / "delta"), target, partition_by=["p"])
    source_path = str(tmp_path / "source.parquet")
    pq.write_table(base._source(), source_path)
    copies = iter(range(1_000))

    def fresh(kind: str) -> str:
        dst = tmp_path / f"{kind}-{next(copies)}"
        shutil.copytree(tmp_path / kind, dst)
        return str(dst)

    def ours(root: str, modes: tuple[str, str]) -> None:
        merge_partitioned(
            spark.read.parquet(source_path), root, on="id", when_matched=modes[0], when_not_matched=modes[1]
        )

    def theirs(uri: str, modes: tuple[str, str]) -> None:
        delta_merge(uri, pq.read_table(source_path), "t.id = s.id", modes)

    def check(root: str, uri: str) -> None:
        mine = read_partitioned(spark, root).selectExpr("count(*)", "sum(v)").collect()[0]
        other = DeltaTable(uri).to_pyarrow_table(columns=["v"])
        assert mine[0] == other.num_rows
        assert abs(mine[1] - pc.sum(other.column("v")).as_py()) < 1e-6 * max(1.0, abs(mine[1]))

    samples: dict[str, dict[str, list[float]]] = {name: {"ours": [], "delta": []} for name in CLAUSES}
    copies_made = [{name: (fresh("ns"), fresh("delta")) for name in CLAUSES} for _ in range(REPEATS)]
    for run in copies_made:
        for name, modes in CLAUSES.items():
            root, uri = run[name]
            for side, target_path, fn in (("ours", root, ours), ("delta", uri, theirs)):
                start = time.perf_counter()
                fn(target_path, modes)
                samples[name][side].append(time.perf_counter() - start)
            check(root, uri)
    print(
        f"\nmerges of {base.SOURCE_ROWS:,} rows into {base.TARGET_ROWS:,} ({base.PARTITIONS:,} partitions), "
        f"median of {REPEATS}:"
    )
    for name, sides in samples.items():
        med: dict[str, Any] = {side: statistics.median(s) for side, s in sides.items()}
        spread = {side: f"{med[side]:.2f} s ({min(s):.2f} .. {max(s):.2f})" for side, s in sides.items()}
        print(f"  {name:22s} ours {spread['ours']}, delta-rs {spread['delta']}: {med['ours'] / med['delta']:.2f}x")
