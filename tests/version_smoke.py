"""The smoke scenarios of one PySpark version: ``python version_smoke.py <classic|connect> <work> <jar>``.

Run by tests/test_spark_versions.py (``make test-matrix``) with that version's ``pyspark``
first on ``PYTHONPATH`` and the one jar the wheel carries (compiled against the project's
own PySpark). Steps: a session, ``write_partitioned``, ``format(...)`` with ``.where``
pruning ("scanning 1 of 6 partition tables"), catalog SQL with DML (tests/connect_scenarios.py's
``sql_doors``), ``merge_partitioned`` and ``update_partitioned`` (its ``merges_and_updates``)
and one ``availableNow`` file stream. Oracles: plain pylance and the rows the scenarios
write. Prints one JSON line per step (``{"step", "ok", "secs", "detail"}``), then ``DONE``.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

import lance
import pyarrow as pa
import pyarrow.parquet as pq

MODE, WORK, JAR = sys.argv[1], os.path.abspath(sys.argv[2]), sys.argv[3]
CONNECT_CONF: dict[str, str] = {}
if MODE == "connect":
    os.environ["SPARK_REMOTE"] = "local[2]"
    with socket.socket() as sock:  # another process may hold Connect's default port
        sock.bind(("127.0.0.1", 0))
        PORT = sock.getsockname()[1]
    CONNECT_CONF["spark.connect.grpc.binding.port"] = str(PORT)
    from pyspark.sql.connect.client import core

    core.DefaultChannelBuilder.default_port = staticmethod(lambda: PORT)  # type: ignore[method-assign]

import connect_scenarios as cs  # noqa: E402
import pyspark  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

import pipelines  # noqa: E402
from partitioning import PartitionedNamespace  # noqa: E402
from pipelines.session import build_session, is_connect  # noqa: E402

CHECKS: list[tuple[str, Any, Any]] = []
cs.check = lambda label, got, want: CHECKS.append((label, got, want))


def step(name: str, fn: Callable[[], Any]) -> None:
    CHECKS.clear()
    started = time.perf_counter()
    try:
        detail = fn()
        bad = [f"{label}: got {got!r}, want {want!r}" for label, got, want in CHECKS if got != want]
        ok, detail = not bad and detail is not False, bad or detail
    except Exception as exc:  # a failed step is reported, and the next ones still run
        ok = False
        detail = f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:400]}"
        traceback.print_exc(file=sys.stderr)
    secs = round(time.perf_counter() - started, 1)
    print(json.dumps({"step": name, "ok": ok, "secs": secs, "detail": detail}, default=str), flush=True)


def stored_ids(root: str) -> list[int]:
    out: list[int] = []
    for p in PartitionedNamespace.load(root).partitions():
        out += lance.dataset(p.uri, version=p.read_version).to_table(columns=["id"])["id"].to_pylist()
    return sorted(out)


def main() -> None:
    os.makedirs(WORK, exist_ok=True)
    os.chdir(WORK)
    print(json.dumps({"pyspark": pyspark.__version__, "pipelines": pipelines.__file__, "mode": MODE}), flush=True)
    started = time.perf_counter()
    spark = build_session(
        f"version smoke {MODE}",
        master="local[2]",
        extra_conf={
            "spark.jars": JAR,
            "spark.plugins": "lance_partitioned.QuietErrors",
            "spark.sql.catalog.lance": "lance_partitioned.LanceCatalog",
            "spark.sql.catalog.lance.warehouse": os.path.join(WORK, "warehouse"),
            "spark.sql.shuffle.partitions": "4",
            **CONNECT_CONF,
        },
    )
    session_ok = is_connect(spark) == (MODE == "connect")
    print(json.dumps({"step": "session", "ok": session_ok, "secs": round(time.perf_counter() - started, 1)}))
    root = os.path.join(WORK, "events")

    def write() -> Any:
        df = spark.range(0, 600).withColumn("p", (F.col("id") % 6).cast("int"))
        report = pipelines.write_partitioned(df, root, partition_by=["p"])
        cs.check("rows plain Lance reads", stored_ids(root), list(range(600)))
        return {"rows_written": report.rows_written}

    def read() -> Any:
        df = spark.read.format("lance_partitioned").load(root)
        df.createOrReplaceTempView("events")
        got = sorted(r[0] for r in spark.sql("SELECT id FROM events WHERE p = 3").collect())
        plan = str(spark.sql("EXPLAIN SELECT id FROM events WHERE p = 3").collect()[0][0])
        cs.check("where rows", got, list(range(3, 600, 6)))
        cs.check("the plan prunes", "scanning 1 of 6 partition tables" in plan, True)
        cs.check("df.where count", df.where("p = 3").count(), 100)
        return [line.strip() for line in plan.splitlines() if "partition tables" in line][:1]

    def sql_catalog() -> Any:
        cs.sql_doors(spark)
        return f"{len(CHECKS)} checks"

    def merge() -> Any:
        cs.merges_and_updates(spark)
        return f"{len(CHECKS)} checks"

    def stream() -> Any:
        pipelines.register_data_source(spark)
        source, target = os.path.join(WORK, "stream-in"), os.path.join(WORK, "stream-out")
        os.makedirs(source, exist_ok=True)
        rows = cs.rows(range(20))
        columns = {k: [r[j] for r in rows] for j, k in enumerate(("id", "country", "amount"))}
        pq.write_table(pa.table(columns), f"{source}/part-0.parquet")
        query = (
            spark.readStream.schema(cs.SCHEMA)
            .parquet(source)
            .writeStream.format("lance_partitioned")
            .option("checkpointLocation", os.path.join(WORK, "checkpoint"))
            .option("partition_by", "country")
            .trigger(availableNow=True)
            .start(target)
        )
        query.awaitTermination()
        cs.check("file stream rows", cs.stored(target), sorted(rows))
        return [r["operation"] for r in PartitionedNamespace.load(target).history().to_pylist()]

    steps = (("write", write), ("read", read), ("sql", sql_catalog), ("merge", merge), ("stream", stream))
    for name, fn in steps:
        step(name, fn)
    spark.stop()
    print("DONE", flush=True)


if __name__ == "__main__":
    main()
