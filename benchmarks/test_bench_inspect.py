"""Metadata tables at scale: ``partitions_table`` over 10,000 partition tables in at most 2 s.

Issue #15 asks for the partitions table of a 10,000-partition namespace in <= 2 s,
computed from Lance metadata (no data scanned). The namespace is built Spark-free
(``write_table`` with an identity column of 10,000 values, 3 rows each: about 20-25 s
here); the timed call opens every table at its recorded version (a Lance manifest read,
about 120 us of CPU each) in parallel threads. Also printed, for where the time goes:
loading and pruning ``__manifest`` alone, and ``files_table`` (every fragment listed).
Run with ``make bench``.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import pyarrow as pa
import pytest

from partitioning import PartitionedNamespace
from partitioning.plan.inspect import files_table, partitions_table
from partitioning.tables.write import write_table

pytestmark = [pytest.mark.bench, pytest.mark.slow]

PARTITIONS = 10_000
ROWS_PER_PARTITION = 3
REPEATS = 3
LIMIT_SECONDS = 2.0


def _timed(fn: Callable[[], object]) -> list[float]:
    samples = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return samples


def _show(name: str, samples: list[float]) -> None:
    print(
        f"{name:<34} median {statistics.median(samples):.3f} s  min {min(samples):.3f} s  max {max(samples):.3f} s"
        f"  ({statistics.median(samples) / PARTITIONS * 1e6:.0f} us per partition)"
    )


def test_partitions_table_of_10000_partitions(tmp_path) -> None:
    root = str(tmp_path / "ns")
    schema = pa.schema([("k", pa.int64()), ("v", pa.float64())])
    keys = [k for k in range(PARTITIONS) for _ in range(ROWS_PER_PARTITION)]
    data = pa.table({"k": pa.array(keys, pa.int64()), "v": pa.array([float(i) for i in range(len(keys))])})
    start = time.perf_counter()
    write_table(PartitionedNamespace.create(root, schema, ["k"]), data)
    print(f"\nbuilt {PARTITIONS:,} partitions in {time.perf_counter() - start:.1f} s")

    table = partitions_table(root)
    assert table.num_rows == PARTITIONS
    assert table.column("row_count").to_pylist() == [ROWS_PER_PARTITION] * PARTITIONS
    assert sorted(p["k"] for p in table.column("partition").to_pylist()) == list(range(PARTITIONS))

    plan = _timed(lambda: PartitionedNamespace.load(root).plan_scan(None))
    samples = _timed(lambda: partitions_table(root))
    files = _timed(lambda: files_table(root))
    _show("load __manifest + plan (no opens)", plan)
    _show("partitions_table", samples)
    _show("files_table", files)
    assert statistics.median(samples) <= LIMIT_SECONDS, (
        f"partitions_table of {PARTITIONS:,} partitions took {statistics.median(samples):.2f} s (median)"
    )
