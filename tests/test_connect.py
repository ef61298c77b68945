"""Spark Connect: every operation and every job on a Connect session, and what works on both kinds.

The Connect run is a subprocess (``tests/connect_scenarios.py``): a Connect session cannot
start beside this run's classic one. It starts through ``build_session`` with
``SPARK_REMOTE=local[2]``, as a user would, so the same run checks that the user's
``PYSPARK_SUBMIT_ARGS`` and ``PYSPARK_PYTHON`` win and that a new user's terminal stays
quiet (no incubator-module warning, no data source re-registration warning).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSourceRegistration
from subprocess_runs import run_ok, user_python

from pipelines import read_partitioned, register_data_source, write_partitioned
from pipelines.session import is_connect
from pipelines.session_calls import default_parallelism, describe_jobs

TESTS = Path(__file__).resolve().parent


def test_every_operation_and_job_on_spark_connect(tmp_path: Path) -> None:
    env = dict(
        os.environ,
        SPARK_REMOTE="local[2]",
        PYSPARK_PYTHON=str(user_python(tmp_path)),
        PYSPARK_SUBMIT_ARGS="--conf spark.sql.shuffle.partitions=5 pyspark-shell",
        SPARK_LOCAL_IP="127.0.0.1",
    )
    env.pop("PYSPARK_DRIVER_PYTHON", None)
    work = tmp_path / "work"
    work.mkdir()
    proc = run_ok([sys.executable, str(TESTS / "connect_scenarios.py"), str(work)], cwd=work, env=env, timeout=900)
    assert proc.stdout.rstrip().endswith("DONE"), proc.stderr[-4000:]
    results = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert len(results) >= 45
    bad = [f"{r['label']}: got {r['got']!r}, want {r['want']!r}" for r in results if r["got"] != r["want"]]
    assert not bad, "\n".join(bad)
    assert "Using incubator modules" not in proc.stderr
    assert "replaced a previously registered data source" not in proc.stderr
    assert "Cannot modify the value of the Spark config" not in proc.stderr


def _jobs(spark: SparkSession) -> list[tuple[str, str]]:
    """(description, tags) of every job this run's Spark recorded."""
    store = spark.sparkContext._jsc.sc().statusStore().jobsList(None)
    jobs = [store.apply(i) for i in range(store.size())]
    return [
        (str(j.description().get()) if j.description().isDefined() else "", str(j.jobTags().mkString(",")))
        for j in jobs
    ]


def test_classic_jobs_carry_the_description_and_the_tag(spark: SparkSession, tmp_path: Path) -> None:
    sc = spark.sparkContext
    sc.setJobDescription("the user's own description")
    try:
        df = spark.createDataFrame([(i, ("US", "DE")[i % 2]) for i in range(10)], "id long, country string")
        write_partitioned(df, str(tmp_path / "tagged"), partition_by=["country"])
        assert sc.getLocalProperty("spark.job.description") == "the user's own description"
    finally:
        sc.setJobDescription(None)  # type: ignore[arg-type]
    assert spark.getTags() == set()
    # ten rows the driver made are collected and written by the driver (pipelines.write.small)
    ours = [(d, t) for d, t in _jobs(spark) if d == "lance_partitioned: collect rows (tagged)"]
    assert ours, _jobs(spark)[-5:]
    # a classic session's tag reaches the job as spark-session-<session uuid>-<tag>
    assert all(any(x.endswith("-lance_partitioned:_collect_rows_tagged") for x in t.split(",")) for _, t in ours)


def test_describe_jobs_restores_the_session_after_a_failure(spark: SparkSession) -> None:
    try:
        with describe_jobs(spark, "lance_partitioned: failing, step"):
            assert "lance_partitioned:_failing_step" in spark.getTags()
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    assert spark.getTags() == set()
    assert spark.sparkContext.getLocalProperty("spark.job.description") is None


def test_the_data_source_is_registered_once_per_session(spark: SparkSession, tmp_path: Path, monkeypatch) -> None:
    """Spark warns on every re-registration: a session registers the format once, and a new
    session (which has its own registry) registers it again."""
    from partitioning import PartitionedNamespace
    from partitioning.tables.write import write_table

    root = str(tmp_path / "ns")
    schema = pa.schema([("id", pa.int64()), ("country", pa.string())])
    write_table(
        PartitionedNamespace.create(root, schema, ["country"]), pa.table({"id": [1, 2], "country": ["US", "DE"]})
    )
    calls: list[str] = []
    original = DataSourceRegistration.register

    def counting(self, dataSource):
        calls.append(dataSource.name())
        return original(self, dataSource)

    monkeypatch.setattr(DataSourceRegistration, "register", counting)
    session = spark.newSession()
    register_data_source(session)
    register_data_source(session)
    assert read_partitioned(session, root).count() == 2
    assert session.read.format("lance_partitioned").load(root).count() == 2
    assert calls == ["lance_partitioned"]
    other = spark.newSession()
    # a plan the driver reads (pipelines/read/local.py) registers the format too, so that a
    # later format("lance_partitioned") in that session finds it; once
    assert read_partitioned(other, root, filter="country = 'US'").count() == 1
    assert calls == ["lance_partitioned", "lance_partitioned"]
    register_data_source(other)
    assert other.read.format("lance_partitioned").load(root).where("country = 'DE'").count() == 1
    assert calls == ["lance_partitioned", "lance_partitioned"]


def test_classic_session_helpers(spark: SparkSession) -> None:
    assert is_connect(spark) is False
    assert default_parallelism(spark) == 2
