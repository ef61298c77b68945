"""Spark's own doors: SQL MERGE INTO and UPDATE, and a one-column aggregate beside vectors.

- ``MERGE INTO`` (a catalog table) of ``SOURCE_ROWS`` rows into ``TARGET_ROWS`` rows in
  ``PARTITIONS`` identity partitions, against delta-rs's ``merge`` and ``merge_partitioned``
  on the same rows, each on a fresh copy, interleaved, median (min .. max) of ``REPEATS``.
  Targets: at most 3x delta-rs and 1.2x Spark's floor: the join any Spark ``MERGE INTO``
  plans, on the same rows in parquet, written to Spark's ``noop`` sink (with the session
  extension the statement runs in the upsert engine, no join).
- SQL ``UPDATE`` of 1 row in 97 (a non-partition column) through the engine, through
  Spark's row-level update and delta-rs's ``update``.
- ``SELECT sum(id)`` of a table with a 768-dim vector column through the format (the JVM
  layer reads the one column) against the same query through the Python source's own
  planning (``read_partitioned``, which reads every column). Target: at most 0.3x.

Run with ``make bench``; sizes from ``BENCH_DOORS_*``.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from benchmarks.conftest import Timing
from benchmarks.test_bench_merge import SCHEMA, target_rows
from partitioning.namespace import PartitionedNamespace
from partitioning.tables.write import write_table
from pipelines.read.dataframe import read_partitioned
from pipelines.write.merge import merge_partitioned

pytestmark = pytest.mark.bench

TARGET_ROWS = int(os.environ.get("BENCH_DOORS_TARGET_ROWS", 1_000_000))
SOURCE_ROWS = int(os.environ.get("BENCH_DOORS_SOURCE_ROWS", 100_000))
PARTITIONS = int(os.environ.get("BENCH_DOORS_PARTITIONS", 100))
VECTOR_ROWS = int(os.environ.get("BENCH_DOORS_VECTOR_ROWS", 300_000))
DIM = 768
REPEATS = 3


def _target(start: int, stop: int) -> pa.Table:
    return target_rows(start, stop, PARTITIONS)


def _source() -> pa.Table:
    rng = np.random.default_rng(30)
    updates = rng.choice(TARGET_ROWS, SOURCE_ROWS // 2, replace=False).astype(np.int64)
    inserts = np.arange(TARGET_ROWS, TARGET_ROWS + SOURCE_ROWS - len(updates), dtype=np.int64)
    ids = np.concatenate([updates, inserts])
    p = (ids % PARTITIONS).astype(np.int32)
    return pa.table(
        {"id": ids, "p": p, "v": np.full(len(ids), -1.0), "s": pa.array(["merged"] * len(ids))}, schema=SCHEMA
    )


def _timed(fn: Callable[[], object], samples: list[float]) -> None:
    start = time.perf_counter()
    fn()
    samples.append(time.perf_counter() - start)


def test_sql_merge_vs_delta_rs_and_merge_partitioned(spark: SparkSession, tmp_path: Path) -> None:
    from deltalake import DeltaTable, write_deltalake

    warehouse = tmp_path / "warehouse"
    base_ns, base_delta = warehouse / "db" / "base", tmp_path / "delta"
    ns = PartitionedNamespace.create(str(base_ns), SCHEMA, ["p"])
    table = _target(0, TARGET_ROWS)
    write_table(ns, table)
    write_deltalake(str(base_delta), table, partition_by=["p"])
    source_path = str(tmp_path / "source.parquet")
    pq.write_table(_source(), source_path)
    target_parquet = str(tmp_path / "target-parquet")
    pq.write_to_dataset(table, target_parquet, partition_cols=["p"])
    spark.conf.set("spark.sql.catalog.bench", "lance_partitioned.LanceCatalog")
    spark.conf.set("spark.sql.catalog.bench.warehouse", str(warehouse))
    spark.read.parquet(source_path).createOrReplaceTempView("bench_source")
    expected = TARGET_ROWS + SOURCE_ROWS - SOURCE_ROWS // 2

    def fresh(name: str, base: Path) -> str:
        dst = (warehouse / "db" / name) if base == base_ns else tmp_path / name
        shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(base, dst)
        return str(dst)

    samples: dict[str, list[float]] = {
        "SQL MERGE INTO": [],
        "merge_partitioned": [],
        "delta-rs merge": [],
        "Spark floor": [],
    }
    for n in range(REPEATS + 1):  # the first round warms up, untimed
        sql_root = fresh("sql", base_ns)
        python_root, delta_uri = fresh("python", base_ns), fresh("delta-run", base_delta)

        def sql_merge() -> None:
            spark.sql(
                "MERGE INTO bench.db.sql t USING bench_source s ON t.id = s.id "
                "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
            )

        def python_merge(root: str = python_root) -> None:
            merge_partitioned(spark.read.parquet(source_path), root, on="id")

        def delta_merge(uri: str = delta_uri) -> None:
            merger = DeltaTable(uri).merge(
                pq.read_table(source_path), predicate="t.id = s.id", source_alias="s", target_alias="t"
            )
            merger.when_matched_update_all().when_not_matched_insert_all().execute()

        def spark_floor() -> None:
            # The least any Spark MERGE INTO does: read the target and the source, join them on
            # the key and write the changed and new rows, here on parquet into Spark's no-op sink.
            target, source = spark.read.parquet(target_parquet), spark.read.parquet(source_path)
            changed = source.alias("s").join(target.alias("t"), F.col("s.id") == F.col("t.id"), "left")
            changed.select("s.*", F.col("t.id").isNull().alias("new")).write.format("noop").mode("overwrite").save()

        runs = {
            "SQL MERGE INTO": sql_merge,
            "merge_partitioned": python_merge,
            "delta-rs merge": delta_merge,
            "Spark floor": spark_floor,
        }
        for name, run in runs.items():
            scratch: list[float] = []
            _timed(run, scratch if n == 0 else samples[name])
        counted = read_partitioned(spark, sql_root).agg(F.count("*"), F.sum("v")).collect()[0]
        assert counted[0] == expected
    timings = {name: Timing(tuple(s)) for name, s in samples.items()}
    sql, python, delta, floor = (
        timings[k].median for k in ("SQL MERGE INTO", "merge_partitioned", "delta-rs merge", "Spark floor")
    )
    print(
        f"\n[doors] MERGE {SOURCE_ROWS:,} rows into {TARGET_ROWS:,} ({PARTITIONS} partitions), {REPEATS} interleaved:"
    )
    for name, t in timings.items():
        print(f"  {name:18s} {t}")
    print(f"  SQL / delta-rs {sql / delta:.2f}x (target <= 3); SQL / merge_partitioned {sql / python:.2f}x")
    print(f"  Spark floor / delta-rs {floor / delta:.2f}x; SQL / Spark floor {sql / floor:.2f}x (target <= 1.2)")
    last = PartitionedNamespace.load(str(warehouse / "db" / "sql")).history().to_pylist()[0]
    assert dict(last["parameters"]).get("on") == "id", last  # the upsert engine took it, not Spark's join


def test_sql_update_vs_delta_rs(spark: SparkSession, tmp_path: Path) -> None:
    """SQL ``UPDATE ... SET v = v * 2 WHERE s = 's3'`` (1 row in 97, not a partition column)
    through the engine (Lance's own ``update``), through Spark's row-level update (the session
    extension's rule off) and delta-rs's ``update``, each on a fresh copy, interleaved."""
    from deltalake import DeltaTable, write_deltalake

    warehouse = tmp_path / "warehouse"
    base_ns, base_delta = warehouse / "db" / "base", tmp_path / "delta"
    table = _target(0, TARGET_ROWS)
    write_table(PartitionedNamespace.create(str(base_ns), SCHEMA, ["p"]), table)
    write_deltalake(str(base_delta), table, partition_by=["p"])
    spark.conf.set("spark.sql.catalog.bench_update", "lance_partitioned.LanceCatalog")
    spark.conf.set("spark.sql.catalog.bench_update.warehouse", str(warehouse))
    expected = float(pa.compute.sum(table.column("v")).as_py()) + float(
        pa.compute.sum(table.filter(pa.compute.equal(table.column("s"), "s3")).column("v")).as_py()
    )
    samples: dict[str, list[float]] = {"SQL UPDATE": [], "Spark's row-level UPDATE": [], "delta-rs update": []}
    for n in range(REPEATS + 1):  # the first round warms up, untimed
        roots = {}
        for name in ("engine", "spark"):
            shutil.rmtree(warehouse / "db" / name, ignore_errors=True)
            shutil.copytree(base_ns, warehouse / "db" / name)
            roots[name] = str(warehouse / "db" / name)
        delta_uri = str(tmp_path / "delta-run")
        shutil.rmtree(delta_uri, ignore_errors=True)
        shutil.copytree(base_delta, delta_uri)

        def spark_update() -> None:
            spark.conf.set("spark.lance_partitioned.sql.update.enabled", "false")
            try:
                spark.sql("UPDATE bench_update.db.spark SET v = v * 2 WHERE s = 's3'")
            finally:
                spark.conf.unset("spark.lance_partitioned.sql.update.enabled")

        runs = {
            "SQL UPDATE": lambda: spark.sql("UPDATE bench_update.db.engine SET v = v * 2 WHERE s = 's3'"),
            "Spark's row-level UPDATE": spark_update,
            "delta-rs update": lambda uri=delta_uri: DeltaTable(uri).update({"v": "v * 2"}, predicate="s = 's3'"),
        }
        for name, run in runs.items():
            scratch: list[float] = []
            _timed(run, scratch if n == 0 else samples[name])
        for root in roots.values():
            got = read_partitioned(spark, root).agg(F.sum("v")).collect()[0][0]
            assert got == expected, (root, got, expected)
    timings = {name: Timing(tuple(s)) for name, s in samples.items()}
    ours, spark_path, delta = (t.median for t in timings.values())
    print(f"\n[doors] UPDATE 1 row in 97 of {TARGET_ROWS:,} ({PARTITIONS} partitions), {REPEATS} interleaved:")
    for name, t in timings.items():
        print(f"  {name:26s} {t}")
    print(f"  SQL UPDATE / delta-rs {ours / delta:.2f}x; Spark's row-level UPDATE / delta-rs {spark_path / delta:.2f}x")


def test_one_column_beside_vectors(spark: SparkSession, tmp_path: Path) -> None:
    root = str(tmp_path / "vectors")
    schema = pa.schema([("id", pa.int64()), ("c", pa.string()), ("emb", pa.list_(pa.float32(), DIM))])
    ns = PartitionedNamespace.create(root, schema, ["c"])
    rng = np.random.default_rng(7)
    chunk = 50_000
    for start in range(0, VECTOR_ROWS, chunk):
        n = min(chunk, VECTOR_ROWS - start)
        flat = pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * DIM, dtype=np.float32)), DIM)
        ids = np.arange(start, start + n)
        write_table(ns.refresh(), pa.table({"id": ids, "c": [f"c{i % 8}" for i in ids], "emb": flat}, schema=schema))
    want = VECTOR_ROWS * (VECTOR_ROWS - 1) // 2

    def pruned() -> None:
        got = spark.read.format("lance_partitioned").load(root).select("id").agg(F.sum("id")).collect()[0][0]
        assert got == want

    def with_vectors() -> None:
        # the same sum, with the vectors read too (count(emb) needs every vector's null flag)
        frame = spark.read.format("lance_partitioned").load(root)
        got, count = frame.select("id", "emb").agg(F.sum("id"), F.count("emb")).collect()[0]
        assert (got, count) == (want, VECTOR_ROWS)

    samples: dict[str, list[float]] = {"one column (id)": [], "the vectors read too": []}
    pruned(), with_vectors()
    for _ in range(REPEATS):
        _timed(pruned, samples["one column (id)"])
        _timed(with_vectors, samples["the vectors read too"])
    timings = {name: Timing(tuple(s)) for name, s in samples.items()}
    ours, base = (t.median for t in timings.values())
    print(f"\n[doors] sum(id) of {VECTOR_ROWS:,} rows beside a {DIM}-dim vector column, {REPEATS} interleaved:")
    for name, t in timings.items():
        print(f"  {name:32s} {t}")
    print(f"  ratio {ours / base:.2f}x (target <= 0.3)")


ROUTE_ROWS = int(os.environ.get("BENCH_DOORS_ROUTE_ROWS", 120_000))
ROUTE_PARTITIONS = 240
ROUTE_DIM = 384


def test_every_sql_route_plans_like_the_format(spark: SparkSession, tmp_path: Path) -> None:
    """``count(id)`` and a 1-of-240 ``WHERE`` through each SQL route (a session-catalog table,
    the ``lance`` catalog, a temp view of the format) against the format route, each as a
    ratio of summing the vector column's first element over the whole table (what a route
    that lost its pushdown costs). Target: every route within 1.3x of the format's ratio."""
    root = str(tmp_path / "routes")
    schema = pa.schema([("id", pa.int64()), ("p", pa.int32()), ("vec", pa.list_(pa.float32(), ROUTE_DIM))])
    ns = PartitionedNamespace.create(root, schema, ["p"])
    rng = np.random.default_rng(46)
    for start in range(0, ROUTE_ROWS, 40_000):
        n = min(40_000, ROUTE_ROWS - start)
        ids = np.arange(start, start + n)
        flat = pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * ROUTE_DIM, dtype=np.float32)), ROUTE_DIM)
        part = pa.array((ids % ROUTE_PARTITIONS).astype(np.int32))
        write_table(ns.refresh(), pa.table({"id": ids, "p": part, "vec": flat}, schema=schema))
    warehouse = tmp_path / "wh"
    shutil.copytree(root, warehouse / "b" / "routes")
    spark.conf.set("spark.sql.catalog.bench_routes", "lance_partitioned.LanceCatalog")
    spark.conf.set("spark.sql.catalog.bench_routes.warehouse", str(warehouse))
    spark.sql(f"CREATE TABLE IF NOT EXISTS bench_session_routes USING lance_partitioned LOCATION '{root}'")
    spark.read.format("lance_partitioned").load(root).createOrReplaceTempView("bench_format_routes")
    routes = {
        "format (temp view)": "bench_format_routes",
        "session catalog USING": "bench_session_routes",
        "lance catalog": "bench_routes.b.routes",
    }
    queries = {
        "count(id)": ("SELECT count(id) FROM {t}", ROUTE_ROWS),
        "WHERE p = 7": ("SELECT sum(id) FROM {t} WHERE p = 7", int(np.arange(7, ROUTE_ROWS, ROUTE_PARTITIONS).sum())),
    }

    def full() -> None:
        spark.sql("SELECT sum(vec[0]) FROM bench_format_routes").collect()

    samples: dict[str, list[float]] = {"full sum(vec[0])": []}
    runs: dict[str, Callable[[], None]] = {}
    for route, table in routes.items():
        for name, (sql, want) in queries.items():

            def run(sql: str = sql.format(t=table), want: int = want) -> None:
                assert spark.sql(sql).collect()[0][0] == want

            runs[f"{name} via {route}"] = run
            samples[f"{name} via {route}"] = []
    full()
    for run in runs.values():
        run()
    for _ in range(REPEATS):
        _timed(full, samples["full sum(vec[0])"])
        for label, run in runs.items():
            _timed(run, samples[label])
    timings = {label: Timing(tuple(s)) for label, s in samples.items()}
    base = timings["full sum(vec[0])"].median
    print(f"\n[doors] SQL routes on {ROUTE_ROWS:,} rows, {ROUTE_PARTITIONS} partitions, a {ROUTE_DIM}-dim vector:")
    for label, t in timings.items():
        print(f"  {label:42s} {t}  {t.median / base:.3f}x of the full scan")
    for name in queries:
        reference = timings[f"{name} via format (temp view)"].median
        for route in routes:
            ratio = timings[f"{name} via {route}"].median / reference
            print(f"  {name} via {route}: {ratio:.2f}x the format route (target <= 1.3)")
