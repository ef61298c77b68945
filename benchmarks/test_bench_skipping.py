"""Data skipping by column statistics: lookups on a non-partition column, and what statistics cost a write.

Targets: on 1,500 day partitions holding 5M rows whose ids grow with time, a point lookup
``id = X`` at most 0.05x a full scan, and a range over 1% of the ids at most 0.1x, through
``read_partitioned(filter=)`` and ``format("lance_partitioned").load(root).where()``. The full
scan is the same query on a copy of the namespace whose table rows carry no statistics (as
every table written before them): each of the 1,500 tables is opened and scanned with the
filter. Collecting statistics costs at most 5% of a write's time (the same write with the
collection switched off, interleaved, two shapes of data). Run with ``make bench`` or
``.venv/bin/python -m pytest -q -p no:cacheprovider -m bench benchmarks/test_bench_skipping.py -s``.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest

import partitioning.tables.fragments as fragments
from benchmarks.conftest import interleaved_samples
from partitioning import PartitionedNamespace
from partitioning.tables.write import write_table
from pipelines import read_partitioned, register_data_source

pytestmark = pytest.mark.bench

ROWS = int(os.environ.get("BENCH_SKIP_ROWS", "5000000"))
DAYS = int(os.environ.get("BENCH_SKIP_DAYS", "1500"))
WRITE_ROWS = int(os.environ.get("BENCH_SKIP_WRITE_ROWS", "2000000"))


def _events(rows: int, days: int, *, strings: bool = False) -> pa.Table:
    rng = np.random.default_rng(7)
    ids = np.arange(rows, dtype=np.int64)
    columns = {
        "day": pa.array((ids * days // rows).astype(np.int32)),
        "id": pa.array(ids),
        "user": pa.array(rng.integers(0, 1_000_000, rows)),
        "amount": pa.array(rng.normal(100, 30, rows)),
    }
    if strings:
        columns["country"] = pa.array(np.array(["US", "DE", "IN", "BR", "JP", "FR"])[rng.integers(0, 6, rows)])
        columns["note"] = pa.array([f"event {i} of user {i % 7919}" for i in range(rows)])
    return pa.table(columns)


def _without_statistics(root: str, copy: str) -> None:
    shutil.copytree(root, copy)
    lance.dataset(str(Path(copy, "__manifest"))).update({"metadata": "'{}'"}, where="object_type = 'table'")


def test_lookups_on_a_clustered_id(spark, tmp_path):
    root, bare = str(tmp_path / "events"), str(tmp_path / "bare")
    table = _events(ROWS, DAYS)
    ns = PartitionedNamespace.create(root, table.schema, ["day"])
    write_table(ns, table)
    _without_statistics(root, bare)
    register_data_source(spark)
    x = ROWS // 2 + 17
    lo = ROWS // 3
    queries = {"point id = X": f"id = {x}", "1% range": f"id BETWEEN {lo} AND {lo + ROWS // 100 - 1}"}
    expected = {"point id = X": 1, "1% range": ROWS // 100}
    print(f"\n[skipping] {ROWS:,} rows in {DAYS:,} day partitions, ids growing with time; median (min .. max) of 5")
    for label, f in queries.items():
        for door in ("read_partitioned", ".where"):

            def run(path: str, door: str = door, f: str = f, label: str = label) -> None:
                if door == "read_partitioned":
                    df = read_partitioned(spark, path, filter=f)
                else:
                    df = spark.read.format("lance_partitioned").load(path).where(f)
                assert len(df.toArrow()) == expected[label]

            t = interleaved_samples({"skipping": lambda: run(root), "full scan": lambda: run(bare)}, repeats=5)
            ratio = t["skipping"].median / t["full scan"].median
            target = 0.05 if label.startswith("point") else 0.1
            print(
                f"  {label:<14} {door:<17} {t['skipping']} vs full scan {t['full scan']}: "
                f"{ratio:.3f}x (target <= {target})"
            )
    plans = {label: PartitionedNamespace.load(root).plan_scan(f) for label, f in queries.items()}
    for label, plan in plans.items():
        print(f"  {label}: {plan.summary}")
    assert len(plans["point id = X"]) == 1


def _cost(label: str, write: Callable[[str], object], tmp_path: Path, monkeypatch, repeats: int) -> None:
    """``write`` into a fresh root with statistics collected and with them switched off
    (``LANCE_PARTITIONED_COLUMN_STATS=0``, read where the writer is made), interleaved."""
    runs = 0

    def run(with_stats: bool) -> None:
        nonlocal runs
        runs += 1
        monkeypatch.setenv(fragments.COLUMN_STATS_ENV, "1" if with_stats else "0")
        root = str(tmp_path / f"w{runs}")
        write(root)
        shutil.rmtree(root)

    t = interleaved_samples({"with": lambda: run(True), "without": lambda: run(False)}, repeats=repeats)
    cost = t["with"].median / t["without"].median - 1
    print(f"\n{label}: with {t['with']}, without {t['without']}: {cost:+.1%} (target <= +5%)")


@pytest.mark.parametrize("shape", ["narrow ints", "mixed strings"])
def test_statistics_cost_at_write(tmp_path, monkeypatch, shape):
    table = _events(WRITE_ROWS, 100, strings=shape == "mixed strings")
    label = f"[statistics at write] {shape}, {WRITE_ROWS:,} rows into 100 partitions"
    _cost(
        label,
        lambda root: write_table(PartitionedNamespace.create(root, table.schema, ["day"]), table),
        tmp_path,
        monkeypatch,
        9,
    )


@pytest.mark.parametrize("shape", ["narrow ints", "mixed strings"])
def test_statistics_cost_of_a_spark_write(spark, tmp_path, monkeypatch, shape):
    """The same through ``write_partitioned`` of a DataFrame read from parquet files (the
    driver's choice travels to the tasks with the writer it pickles)."""
    import pyarrow.parquet as pq

    from pipelines import write_partitioned

    table = _events(WRITE_ROWS, 100, strings=shape == "mixed strings")
    source = tmp_path / "source"
    source.mkdir()
    for i, start in enumerate(range(0, table.num_rows, 500_000)):
        pq.write_table(table.slice(start, 500_000), source / f"part-{i}.parquet")
    label = f"[statistics at a Spark write] {shape}, {WRITE_ROWS:,} rows from parquet into 100 partitions"
    _cost(
        label,
        lambda root: write_partitioned(spark.read.parquet(str(source)), root, partition_by=["day"]),
        tmp_path,
        monkeypatch,
        7,
    )
