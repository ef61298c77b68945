"""Spark's own doors through the JVM layer (issue 30): column pruning, COUNT(*) from metadata,
the pruning line of every scan, the switch back to the Python source, and one-line errors.

Oracles: Spark's own answers on plain DataFrames of the same rows, numpy sums, Spark's
physical plan (what the scan reads, whether a task reads rows), and the driver's log.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from subprocess_runs import run_ok, spark_submit

from partitioning import PartitionedNamespace
from partitioning.tables.write import write_table

DIM = 768
REPO = Path(__file__).resolve().parents[1]


def _plan(df) -> str:  # type: ignore[no-untyped-def]
    return df._jdf.queryExecution().executedPlan().toString()  # classic-only (the local[2] suite)


@pytest.fixture(scope="module")
def vectors(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, np.ndarray]:
    root = str(tmp_path_factory.mktemp("vectors") / "ns")
    rng = np.random.default_rng(30)
    n = 600
    emb = rng.random((n, DIM), dtype=np.float32)
    schema = pa.schema([("id", pa.int64()), ("c", pa.string()), ("emb", pa.list_(pa.float32(), DIM))])
    ns = PartitionedNamespace.create(root, schema, ["c"])
    flat = pa.FixedSizeListArray.from_arrays(pa.array(emb.reshape(-1)), DIM)
    write_table(ns, pa.table({"id": np.arange(n), "c": [["a", "b", "c"][i % 3] for i in range(n)], "emb": flat}))
    return root, emb


def test_a_scan_reads_only_the_columns_a_query_needs(spark: SparkSession, vectors: tuple[str, np.ndarray]) -> None:
    root, emb = vectors
    df = spark.read.format("lance_partitioned").load(root)
    summed = df.select("id").agg(F.sum("id"))
    assert "ReadSchema: struct<id:bigint>" in _plan(summed)
    assert summed.collect()[0][0] == sum(range(len(emb)))
    firsts = df.where("c = 'b'").select(F.element_at("emb", 1).alias("x"), "id")
    assert "ReadSchema: struct<id:bigint,emb:array<float>>" in _plan(firsts)  # c: applied by the scan
    got = sorted((r.id, r.x) for r in firsts.collect())
    want = sorted((i, float(emb[i, 0])) for i in range(len(emb)) if i % 3 == 1)
    assert got == want


def test_count_star_is_answered_from_metadata(spark: SparkSession, vectors: tuple[str, np.ndarray]) -> None:
    root, emb = vectors
    df = spark.read.format("lance_partitioned").load(root)
    for query, want in ((df, len(emb)), (df.where("c IN ('a', 'c')"), 400), (df.where("c = 'zz'"), 0)):
        counted = query.groupBy().count()
        assert "LocalTableScan" in _plan(counted) and "BatchScan" not in _plan(counted)
        assert counted.collect()[0][0] == want == query.count()
    by_rows = df.where("id > 10").groupBy().count()  # not a partition column: the scan reads rows
    assert "BatchScan" in _plan(by_rows) and by_rows.collect()[0][0] == len(emb) - 11


def test_the_switch_gives_the_python_source_back(spark: SparkSession, tmp_path: Path) -> None:
    """``spark.lance_partitioned.jvm.enabled=false`` (and a Spark the jar was not built for):
    the Python data source as it is, same rows, no per-scan pruning."""
    root = str(tmp_path / "ns")
    ns = PartitionedNamespace.create(root, pa.schema([("id", pa.int64()), ("c", pa.string())]), ["c"])
    write_table(ns, pa.table({"id": list(range(9)), "c": [["a", "b", "c"][i % 3] for i in range(9)]}))
    spark.conf.set("spark.lance_partitioned.jvm.enabled", "false")
    try:
        df = spark.read.format("lance_partitioned").load(root).where("c = 'a'")
        plan = _plan(df)
        assert "LancePartitionedScan" not in plan and "(Python)" in plan
        assert sorted(r.id for r in df.collect()) == [0, 3, 6]
    finally:
        spark.conf.set("spark.lance_partitioned.jvm.enabled", "true")
    assert "scanning 1 of 3 partition tables" in _plan(
        spark.read.format("lance_partitioned").load(root).where("c = 'a'")
    )


def test_errors_through_the_doors_are_one_line(spark: SparkSession, tmp_path: Path) -> None:
    root = str(tmp_path / "ns")
    ns = PartitionedNamespace.create(root, pa.schema([("id", pa.int64()), ("c", pa.string())]), ["c"])
    write_table(ns, pa.table({"id": [1], "c": ["a"]}))
    cases = [
        (
            lambda: spark.read.format("lance_partitioned").option("bogus", "1").load(root).collect(),
            "unknown read option 'bogus'",
        ),
        (lambda: spark.read.format("lance_partitioned").option("versionAsOf", "x").load(root), "versionAsOf must be"),
        (lambda: spark.read.format("lance_partitioned").load(str(tmp_path / "nothing")), "no namespace at"),
        (
            lambda: (
                spark.createDataFrame([(1, "a", 2)], "id long, c string, z long")
                .write.format("lance_partitioned")
                .mode("append")
                .save(root)
            ),
            "'z' are not in the namespace schema",
        ),
    ]
    for action, message in cases:
        with pytest.raises(PySparkException) as info:
            action()
        text = str(info.value)
        assert message in text, text
        assert "Traceback" not in text
        line = next(ln for ln in text.splitlines() if message in ln)
        assert len(line) < 600, line


def test_every_scan_logs_its_pruning_line(tmp_path: Path) -> None:
    """Under spark-submit with the project's log4j configuration, one INFO line per scan."""
    root = str(tmp_path / "ns")
    ns = PartitionedNamespace.create(root, pa.schema([("id", pa.int64()), ("c", pa.string())]), ["c"])
    write_table(ns, pa.table({"id": list(range(6)), "c": ["a", "b", "c"] * 2}))
    script = tmp_path / "scan.py"
    script.write_text(
        "import sys\n"
        "from pipelines import build_session\n"
        "spark = build_session('pruning line')\n"
        "df = spark.read.format('lance_partitioned').load(sys.argv[1])\n"
        "print(df.where(\"c = 'b'\").count(), df.where(\"c IN ('a', 'c')\").count())\n"
    )
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    proc = run_ok(spark_submit(script, root, master="local[1]"), cwd=REPO, env=env, timeout=300)
    assert proc.stdout.strip().splitlines()[-1] == "2 4"
    lines = [ln for ln in proc.stderr.splitlines() if "INFO lance_partitioned: scanning" in ln]
    assert [ln.split("lance_partitioned: ", 1)[1].split(" (")[0] for ln in lines] == [
        "scanning 1 of 3 partition tables",
        "scanning 2 of 3 partition tables",
    ], proc.stderr[-2000:]
