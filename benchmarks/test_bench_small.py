"""Small changes (issue 31): a merge, update, delete and append of a few rows, in a warm session.

Each operation runs three ways on fresh copies of the same rows, interleaved, median
(min .. max) of ``REPEATS``: ours as shipped (the driver's small path,
:mod:`pipelines.write.small`), ours forced through Spark's tasks (the path before it), and
delta-rs doing the same operation on a Delta table partitioned the same way. Two shapes:
``narrow`` (3 rows of id, country, price; a 2-row source) and ``vectors`` (2,000 rows
with a 128-dim vector and a string, 8 partitions; a 20-row source). Target: every small
operation well under a second.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

import pipelines.write.small as small
from benchmarks.conftest import Timing
from partitioning.namespace import PartitionedNamespace
from partitioning.tables.write import write_table
from pipelines import delete_rows, merge_partitioned, update_rows, write_partitioned

pytestmark = pytest.mark.bench

REPEATS = 5
DIM = 128


def _narrow() -> tuple[pa.Table, pa.Table]:
    schema = pa.schema([("id", pa.int64()), ("country", pa.string()), ("price", pa.float64())])
    target = pa.table({"id": [1, 2, 3], "country": ["US", "FR", "US"], "price": [1.0, 2.0, 3.0]}, schema=schema)
    source = pa.table({"id": [1, 4], "country": ["US", "DE"], "price": [9.0, 4.0]}, schema=schema)
    return target, source


def _vectors() -> tuple[pa.Table, pa.Table]:
    rng = np.random.default_rng(31)

    def rows(ids: np.ndarray) -> pa.Table:
        flat = pa.array(rng.random(len(ids) * DIM, dtype=np.float32))
        return pa.table(
            {
                "id": ids,
                "country": [f"c{i % 8}" for i in ids],
                "price": (ids % 100).astype(np.float64),
                "text": [f"row {i}" for i in ids],
                "emb": pa.FixedSizeListArray.from_arrays(flat, DIM),
            }
        )

    return rows(np.arange(2_000)), rows(np.arange(1_990, 2_010))


SHAPES = {"narrow": _narrow, "vectors": _vectors}
SPARK_TYPES = {
    "int64": "long",
    "string": "string",
    "double": "double",
    f"fixed_size_list<item: float>[{DIM}]": "array<float>",
}


def _delta_ops(base: str) -> dict[str, Callable[[str, pa.Table], None]]:
    from deltalake import DeltaTable, write_deltalake

    def merge(uri: str, source: pa.Table) -> None:
        merger = DeltaTable(uri).merge(source, "t.id = s.id", source_alias="s", target_alias="t")
        merger.when_matched_update_all().when_not_matched_insert_all().execute()

    return {
        "merge": merge,
        "update": lambda uri, _: DeltaTable(uri).update({"price": "price + 1"}, predicate="id = 2"),
        "delete": lambda uri, _: DeltaTable(uri).delete("id = 3"),
        "append": lambda uri, source: write_deltalake(uri, source, mode="append"),
    }


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_small_changes_vs_tasks_and_delta_rs(
    spark: SparkSession, tmp_path: Path, shape: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from deltalake import write_deltalake

    target, source = SHAPES[shape]()
    base_ns, base_delta = tmp_path / "ns", tmp_path / "delta"
    write_table(PartitionedNamespace.create(str(base_ns), target.schema, ["country"]), target)
    plain = pa.schema([f.with_type(pa.list_(pa.float32())) if f.name == "emb" else f for f in target.schema])
    write_deltalake(str(base_delta), target.cast(plain), partition_by=["country"])
    delta_source = source.cast(plain)
    rows = [tuple(r.values()) for r in source.to_pylist()]
    spark_schema = ", ".join(f"{f.name} {SPARK_TYPES[str(f.type)]}" for f in source.schema)

    def ours(op: str, root: str) -> None:
        src = spark.createDataFrame(rows, spark_schema)
        if op == "merge":
            merge_partitioned(src, root, on="id")
        elif op == "update":
            update_rows(root, set={"price": "price + 1"}, where="id = 2", spark=spark)
        elif op == "delete":
            delete_rows(root, "id = 3", spark=spark)
        else:
            write_partitioned(src, root, mode="append")

    def tasks(op: str, root: str) -> None:
        with monkeypatch.context() as m:
            m.setattr(small, "SMALL_MAX_TABLES", -1)
            m.setattr(small, "SMALL_WRITE_BYTES", -1)
            m.setattr(small, "SMALL_MAX_ROWS", -1)
            ours(op, root)

    delta = _delta_ops(str(base_delta))
    print(f"\n[small] {shape}: {target.num_rows:,} target rows, {source.num_rows} source rows, {REPEATS} interleaved")
    for op in ("merge", "update", "delete", "append"):
        samples: dict[str, list[float]] = {"ours": [], "Spark tasks": [], "delta-rs": []}
        for n in range(REPEATS + 1):  # the first round warms up, untimed
            copies = {}
            for name, base in (("ours", base_ns), ("Spark tasks", base_ns), ("delta-rs", base_delta)):
                copies[name] = str(tmp_path / f"run-{name}")
                shutil.rmtree(copies[name], ignore_errors=True)
                shutil.copytree(base, copies[name])
            runs: dict[str, Callable[[str], None]] = {
                "ours": lambda root, op=op: ours(op, root),
                "Spark tasks": lambda root, op=op: tasks(op, root),
                "delta-rs": lambda uri, op=op: delta[op](uri, delta_source),
            }
            for name, run in runs.items():
                start = time.perf_counter()
                run(copies[name])
                if n:
                    samples[name].append(time.perf_counter() - start)
        timings = {name: Timing(tuple(s)) for name, s in samples.items()}
        ratio = timings["ours"].median / timings["delta-rs"].median
        speedup = timings["Spark tasks"].median / timings["ours"].median
        print(
            f"  {op:7s} ours {timings['ours']}  Spark tasks {timings['Spark tasks']}  delta-rs {timings['delta-rs']}"
            f"  -> {ratio:.1f}x delta-rs, {speedup:.1f}x faster than the tasks"
        )
        assert timings["ours"].median < 1.0
