"""The one way this project builds a SparkSession: settings from ``spark-conf/``.

Jobs run under ``spark-submit`` (which supplies the master); tests pass
``master="local[2]"``. Python workers always use this interpreter, so they see the
same pandas/pyarrow/pylance as the driver.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Mapping
from pathlib import Path

from pyspark.sql import SparkSession

CONF_DIR = Path(__file__).resolve().parent.parent / "spark-conf"
DEFAULTS_FILE = CONF_DIR / "spark-defaults.conf"


def read_spark_defaults(path: Path = DEFAULTS_FILE) -> dict[str, str]:
    """Parse a ``spark-defaults.conf`` file (``key  value`` lines, ``#`` comments)."""
    conf: dict[str, str] = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, _, value = line.partition(" ")
        conf[key.strip()] = value.strip()
    return conf


def session_conf(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """spark-defaults.conf with the interpreter and log4j paths made absolute."""
    conf = read_spark_defaults()
    conf["spark.pyspark.python"] = sys.executable
    conf["spark.pyspark.driver.python"] = sys.executable
    conf["spark.driver.extraJavaOptions"] = f"-Dlog4j2.configurationFile={CONF_DIR / 'log4j2.properties'}"
    conf.update(extra or {})
    return conf


def build_session(
    app_name: str, *, master: str | None = None, extra_conf: Mapping[str, str] | None = None
) -> SparkSession:
    """Get or create the SparkSession for a job or test run.

    ``master`` is only for callers outside ``spark-submit`` (tests, benchmarks);
    under ``spark-submit`` it comes from the command line.
    """
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
        if master.startswith("local"):
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    for key, value in session_conf(extra_conf).items():
        builder = builder.config(key, value)
    with warnings.catch_warnings():
        # Launching the JVM forks and immediately execs; pylance's fork warning does not apply.
        warnings.filterwarnings("ignore", message="lance is not fork-safe", category=UserWarning)
        spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark
