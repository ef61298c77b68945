"""The user's configuration wins: ``build_session`` fills in spark-conf/ only where the user set nothing."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from pyspark.find_spark_home import _find_spark_home
from pyspark.sql import SparkSession
from subprocess_runs import run_ok, user_python

from pipelines.session import _submit_args_conf, build_session, conf_to_apply, read_spark_defaults

REPO = Path(__file__).resolve().parent.parent


def test_spark_submit_conf_and_properties_file_win(tmp_path: Path) -> None:
    """``spark-submit --properties-file spark-conf/spark-defaults.conf --conf ...``: every ``--conf`` is
    what the job sees, the properties file fills the rest, and the workers run the user's Python."""
    python = user_python(tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    env.update(SPARK_LOCAL_IP="127.0.0.1", SPARK_HOME=_find_spark_home())
    proc = run_ok(
        [
            str(Path(sys.executable).parent / "spark-submit"),
            "--master",
            "local[1]",
            "--properties-file",
            "spark-conf/spark-defaults.conf",
            "--conf",
            "spark.sql.shuffle.partitions=7",
            "--conf",
            "spark.ui.enabled=true",
            "--conf",
            "spark.ui.port=0",
            "--conf",
            f"spark.pyspark.python={python}",
            "tests/session_conf_probe.py",
        ],
        cwd=REPO,
        env=env,
    )
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen == {
        "shuffle": "7",
        "ui": "true",
        "python": str(python),
        "worker": "wrapped",
        "time_zone": "UTC",
    }


def test_an_existing_session_is_returned_as_it_is(spark: SparkSession) -> None:
    key = "spark.sql.shuffle.partitions"
    before = spark.conf.get(key)
    spark.conf.set(key, "11")
    try:
        again = build_session("another app")
        assert again.conf.get(key) == "11"
        assert again._jsparkSession.equals(spark._jsparkSession)
    finally:
        spark.conf.set(key, before)


def test_conf_to_apply_leaves_what_the_user_set() -> None:
    ours = read_spark_defaults()
    conf = conf_to_apply({"spark.sql.shuffle.partitions": "7", "spark.ui.enabled": "true"}, {})
    assert "spark.sql.shuffle.partitions" not in conf
    assert "spark.ui.enabled" not in conf
    assert conf["spark.sql.session.timeZone"] == ours["spark.sql.session.timeZone"] == "UTC"
    assert conf["spark.pyspark.python"] == sys.executable
    assert conf["spark.driver.extraJavaOptions"].endswith("spark-conf/log4j2.properties")


def test_pyspark_python_in_the_environment_counts_as_set() -> None:
    conf = conf_to_apply({}, {"PYSPARK_PYTHON": "/opt/venv/bin/python"})
    assert "spark.pyspark.python" not in conf
    assert conf["spark.pyspark.driver.python"] == sys.executable
    conf = conf_to_apply({}, {"PYSPARK_PYTHON": "/a", "PYSPARK_DRIVER_PYTHON": "/b"})
    assert "spark.pyspark.python" not in conf
    assert "spark.pyspark.driver.python" not in conf


def test_the_callers_extra_conf_is_applied_last() -> None:
    conf = conf_to_apply({"spark.sql.shuffle.partitions": "7"}, {}, {"spark.sql.shuffle.partitions": "3"})
    assert conf["spark.sql.shuffle.partitions"] == "3"


def test_pyspark_submit_args_are_the_users(tmp_path: Path) -> None:
    props = tmp_path / "user.conf"
    props.write_text("spark.sql.shuffle.partitions 9\nspark.executor.memory=2g\n")
    args = (
        f"--master local[3] --conf spark.sql.shuffle.partitions=4 -c spark.ui.enabled=true "
        f"--conf=spark.a=b --properties-file {props} --driver-memory 2g pyspark-shell"
    )
    assert _submit_args_conf(args) == {
        "spark.master": "local[3]",
        "spark.sql.shuffle.partitions": "4",
        "spark.ui.enabled": "true",
        "spark.a": "b",
        "spark.executor.memory": "2g",
        "spark.driver.memory": "2g",
    }


def test_properties_files_in_every_java_properties_form(tmp_path: Path) -> None:
    path = tmp_path / "spark-defaults.conf"
    path.write_text("# comment\n! also a comment\n\nspark.a   b\nspark.c=d\nspark.e: f\nspark.g  h i\nspark.k\n")
    assert read_spark_defaults(path) == {
        "spark.a": "b",
        "spark.c": "d",
        "spark.e": "f",
        "spark.g": "h i",
        "spark.k": "",
    }


def test_session_conf_without_the_repositorys_spark_conf(tmp_path, monkeypatch) -> None:
    """Installed from a wheel there is no spark-conf/ beside the package: the defaults are
    only the interpreter, not a FileNotFoundError (the EMR and Databricks recipes)."""
    import sys

    import pipelines.session as session

    monkeypatch.setattr(session, "CONF_DIR", tmp_path / "spark-conf")
    monkeypatch.setattr(session, "DEFAULTS_FILE", tmp_path / "spark-conf" / "spark-defaults.conf")
    monkeypatch.setattr(session, "UDF_JAR", tmp_path / "build" / "lance-partitioned-udfs.jar")
    assert session.session_conf() == {
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        # a wheel installs the quiet daemon module too (setup.cfg py_modules)
        "spark.python.daemon.module": "lance_partitioned_daemon",
    }
