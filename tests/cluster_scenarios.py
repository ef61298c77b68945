"""Scenarios on a multi-JVM ``local-cluster`` master, run by tests/test_cluster.py in a subprocess.

Usage: ``python tests/cluster_scenarios.py <work dir>``. The executors run in their own
working directories (``SPARK_WORKER_DIR``), so a relative root that reaches a task
unresolved writes somewhere else than the driver reads. Every answer is compared with an
oracle that does not use this project: the source rows in Python, Spark's own join of
the source DataFrames, and Lance's reader on the partition datasets. Prints one JSON
object: ``{"mismatches": [...], "timings": {...}}``.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import lance
import mmh3
from pyspark import TaskContext
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

import pipelines.columns.murmur3 as sm3
import pipelines.read.local as local_read
from partitioning.storage.manifest import ManifestStore
from pipelines import (
    backfill_columns,
    compact,
    delete_rows,
    join_partitioned,
    merge_partitioned,
    read_partitioned,
    update_rows,
    write_partitioned,
)
from pipelines.session import UDF_JAR

ORDERS = [(i, ["US", "CN", "DE"][i % 3], i * 10) for i in range(60)]
CUSTOMERS = [(c, f"name{c}") for c in ["US", "CN", "DE", "FR"]]
LOCAL_ROWS = local_read.LOCAL_MAX_ROWS


def _lance_rows(root: str) -> list[tuple[Any, ...]]:
    """The committed rows, read with Lance at each manifest row's read_version."""
    out: list[tuple[Any, ...]] = []
    rows = ManifestStore(root).dataset().to_table(filter="object_type = 'table'").to_pylist()
    for row in rows:
        ds = lance.dataset(os.path.join(root, row["location"]), version=row["read_version"])
        out.extend(tuple(r.values()) for r in ds.to_table().to_pylist())
    return sorted(out)


def _data_files(root: str) -> set[str]:
    return {str(p) for p in Path(root).glob("*/data/*.lance")}


def _new_fragment(root: str, before: set[str]) -> bool:
    return bool(_data_files(root) - before)


def _doubled(batch: Any) -> Any:
    import pandas as pd

    return pd.DataFrame({"amount2": batch["amount"] * 2})


def _executor_jvm() -> int:
    """The pid of the JVM that started this Python worker (worker -> daemon -> JVM)."""
    pid = os.getpid()
    for _ in range(4):
        stat = Path(f"/proc/{pid}/stat").read_text()
        pid = int(stat.rsplit(")", 1)[1].split()[1])
        if "java" in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"):
            return pid
    raise RuntimeError("no executor JVM above this worker")


def main(work: str) -> int:
    os.chdir(work)
    mismatches: list[str] = []
    timings: dict[str, float] = {}
    executor_dirs: list[str] = []

    def check(name: str, got: Any, want: Any) -> None:
        if got != want:
            mismatches.append(f"{name}: got {got!r}, want {want!r}")

    start = time.monotonic()
    spark = (
        SparkSession.builder.master("local-cluster[2,1,1024]")
        .config("spark.task.maxFailures", "4")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "1")
        .config("spark.sql.execution.python.udf.maxRecordsPerBatch", "1")
        .config("spark.executorEnv.PYSPARK_PYTHON", sys.executable)
        .config("spark.pyspark.python", sys.executable)
        .config("spark.jars", str(UDF_JAR))
        .getOrCreate()
    )
    timings["start"] = time.monotonic() - start
    absolute = os.path.join(work, "rel", "orders")
    try:
        t = time.monotonic()
        orders = spark.createDataFrame(ORDERS, "id long, country string, amount long").repartition(2)
        write_partitioned(orders, "rel/orders", partition_by=["country"])
        customers = spark.createDataFrame(CUSTOMERS, "country string, name string")
        write_partitioned(customers, "rel/customers", partition_by=["country"])
        check("lance rows after write", _lance_rows(absolute), sorted(ORDERS))
        check("read", sorted(tuple(r) for r in read_partitioned(spark, "rel/orders").collect()), sorted(ORDERS))
        us = sorted(tuple(r) for r in read_partitioned(spark, "rel/orders", filter="country = 'US'").collect())
        check("pruned read", us, sorted(r for r in ORDERS if r[1] == "US"))
        local_read.LOCAL_MAX_ROWS = 0  # read by the executors' tasks, as a read over the local bounds is
        try:
            by_tasks = sorted(
                tuple(r) for r in read_partitioned(spark, "rel/orders", filter="country = 'US'").collect()
            )
        finally:
            local_read.LOCAL_MAX_ROWS = LOCAL_ROWS
        check("pruned read by the executors", by_tasks, us)
        timings["write and read"] = time.monotonic() - t

        t = time.monotonic()
        write_partitioned(orders.where("id < 6"), "rel/orders")  # more fragments to compact
        compact("rel/orders", spark=spark, local_max_rows=0)  # the executors rewrite, not the driver
        delete_rows("rel/orders", "id % 7 = 0 OR id < 6", spark=spark)
        left = [r for r in ORDERS if not (r[0] % 7 == 0 or r[0] < 6)]
        check("lance rows after compact and delete", _lance_rows(absolute), sorted(left))
        timings["compact and delete"] = time.monotonic() - t

        t = time.monotonic()
        joined = join_partitioned(spark, "rel/orders", "rel/customers", on="country")
        remaining = spark.createDataFrame(left, "id long, country string, amount long")
        oracle = remaining.join(customers, on="country")
        check("join columns", joined.columns, oracle.columns)
        check("join rows", sorted(tuple(r) for r in joined.collect()), sorted(tuple(r) for r in oracle.collect()))
        timings["join"] = time.monotonic() - t

        t = time.monotonic()
        check("java murmur3 registered", sm3.java_murmur3(spark), True)
        words = [None, "", *(f"user_{i}" * (i % 4) + "é" * (i % 3) for i in range(1, 40))]
        strings = spark.createDataFrame(list(enumerate(words)), "i int, s string").repartition(2)
        hashed = sm3.with_murmur3(strings, F.col("s"), "h", T.StringType()).select("i", "h")
        want = [(i, None if w is None else mmh3.hash(w.encode(), 0, signed=True)) for i, w in enumerate(words)]
        check("java murmur3 on the executors", sorted(tuple(r) for r in hashed.collect()), want)
        timings["java murmur3"] = time.monotonic() - t

        t = time.monotonic()

        # a task fails on its first attempt after the writer has written fragments: rows
        # reach the writer one at a time, max_open_writers=1 writes a partition's fragment
        # when the next partition starts, and the last row's UDF waits for such a file
        def fail_first_attempt(country: str) -> str:
            ctx = TaskContext.get()
            if ctx is not None and ctx.attemptNumber() == 0 and country == "ZZ":
                deadline = time.monotonic() + 60
                while not _new_fragment(absolute, before):
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.2)
                raise RuntimeError("injected failure after fragments were written")
            return country

        before = _data_files(absolute)
        flaky = F.udf(fail_first_attempt, "string")
        batch = [(100 + i, c, i) for i, c in enumerate(["AA", "BB", "CC", "ZZ"])]
        df = spark.createDataFrame(batch, "id long, country string, amount long").coalesce(1)
        write_partitioned(df.withColumn("country", flaky("country")), "rel/orders", cluster=False, max_open_writers=1)
        left += batch
        check("rows after a retried task", _lance_rows(absolute), sorted(left))
        check("the failed attempt wrote fragments", len(_data_files(absolute) - before) > len(batch), True)

        # the executor JVM running the first attempt is killed mid-write
        def kill_executor(country: str) -> str:
            ctx = TaskContext.get()
            if ctx is not None and ctx.attemptNumber() == 0 and ctx.stageAttemptNumber() == 0 and country == "YY":
                os.kill(_executor_jvm(), signal.SIGKILL)
            return country

        killer = F.udf(kill_executor, "string")
        batch = [(200 + i, c, i) for i, c in enumerate(["XX", "YY"])]
        df = spark.createDataFrame(batch, "id long, country string, amount long").coalesce(1)
        write_partitioned(df.withColumn("country", killer("country")), "rel/orders", cluster=False, max_open_writers=1)
        left += batch
        check("rows after a killed executor", _lance_rows(absolute), sorted(left))
        check(
            "read after faults",
            sorted(tuple(r) for r in read_partitioned(spark, "rel/orders").collect()),
            sorted(left),
        )
        timings["faults"] = time.monotonic() - t

        t = time.monotonic()
        # the JVM layer: Spark's own doors, planned in the driver, read and written by the executors
        reused = spark.read.format("lance_partitioned").load(absolute)
        de = sorted(tuple(r) for r in reused.where("country = 'DE'").collect())
        check("format .where on the cluster", de, sorted(r for r in left if r[1] == "DE"))
        check("the reused DataFrame unfiltered", reused.count(), len(left))
        spark.conf.set("spark.sql.catalog.lance", "lance_partitioned.LanceCatalog")
        spark.conf.set("spark.sql.catalog.lance.warehouse", os.path.join(work, "warehouse"))
        spark.sql("CREATE TABLE lance.t (id bigint, country string, amount bigint) PARTITIONED BY (country)")
        spark.sql("INSERT INTO lance.t SELECT * FROM VALUES (1, 'US', 10), (2, 'DE', 20), (3, 'US', 30) AS v(a, b, c)")
        spark.sql("UPDATE lance.t SET amount = amount + 1 WHERE country = 'US'")
        spark.createDataFrame(
            [(2, "DE", 200), (4, "FR", 40)], "id long, country string, amount long"
        ).createOrReplaceTempView("src")
        spark.sql(
            "MERGE INTO lance.t t USING src s ON t.id = s.id "
            "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
        )
        spark.sql("DELETE FROM lance.t WHERE id = 3")
        table_root = os.path.join(work, "warehouse", "t")
        check("SQL DML on the cluster", _lance_rows(table_root), [(1, "US", 11), (2, "DE", 200), (4, "FR", 40)])
        timings["sql doors"] = time.monotonic() - t

        t = time.monotonic()
        import replace_scenarios

        replaces = replace_scenarios.across_doors(spark, os.path.join(work, "warehouse"))
        check("replace scenarios ran", len(replaces) > 20, True)
        for label, got, want in replaces:
            check(f"replace: {label}", got, want)
        timings["replaces"] = time.monotonic() - t

        t = time.monotonic()
        # merge and update read their target in the executors' tasks (a merge keeps only the
        # rows the source's keys match there); the small-change path is off for this
        import pipelines.write.small as small

        small.SMALL_MAX_ROWS = small.SMALL_MAX_TABLES = small.SMALL_WRITE_BYTES = -1
        source = [(7, "DE", 700), (8, "US", 800), (1000, "FR", 1)]  # 7 was deleted, 8 is kept (moves), 1000 is new
        merge_partitioned(spark.createDataFrame(source, "id long, country string, amount long"), "rel/orders", on="id")
        by_id = {r[0]: r for r in left}
        by_id.update({r[0]: r for r in source})
        update_rows("rel/orders", set={"amount": "amount + 1"}, where="id % 2 = 0", spark=spark)
        left = sorted((i, c, a + 1 if i % 2 == 0 else a) for i, c, a in by_id.values())
        check("merge and update through the executors", _lance_rows(absolute), left)
        timings["merge and update"] = time.monotonic() - t

        t = time.monotonic()
        # a backfill computes in the executors' Python workers and writes beside the files
        backfill_columns(spark, "rel/orders", _doubled, read_columns=["amount"], output_schema={"amount2": "int64"})
        backfill_columns(spark, "rel/orders", {"tag": "concat(country, ':', CAST(id AS STRING))"})
        want = sorted((i, c, a, a * 2, f"{c}:{i}") for i, c, a in left)
        check("backfill through the executors", _lance_rows(absolute), want)
        timings["backfill"] = time.monotonic() - t

        cwd = spark.sparkContext.parallelize(range(8), 8).map(lambda _: os.getcwd()).distinct().collect()
        executor_dirs = sorted(set(cwd) - {work})
        stray = sorted(str(p) for d in executor_dirs for p in Path(d).rglob("rel"))
        check("directories under the executors' working directories", stray, [])
    finally:
        spark.stop()
    print(json.dumps({"mismatches": mismatches, "timings": timings, "executor_dirs": executor_dirs}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
