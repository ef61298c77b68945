"""Airflow: a nightly ingest -> compact -> vacuum of one lance_partitioned namespace.

Each task is a ``spark-submit`` of one of this repository's jobs (``jobs/ingest.py``,
``jobs/compact.py``, ``jobs/vacuum.py``) through ``SparkSubmitOperator`` from
``apache-airflow-providers-apache-spark``. Copy this file into the DAGs folder and set:

- the Airflow connection ``spark_default`` (or ``LANCE_PARTITIONED_SPARK_CONN``): the
  cluster's master, e.g. ``yarn`` on EMR;
- ``LANCE_PARTITIONED_JOBS``: a directory on the Airflow worker holding the ``jobs/*.py``
  files (spark-submit uploads the application file);
- ``LANCE_PARTITIONED_ARCHIVE``: the packed virtualenv with the package installed (see
  README, "EMR"), unpacked on every node as ``./environment``;
- ``LANCE_PARTITIONED_ROOT`` and ``LANCE_PARTITIONED_INPUT``: the namespace root and where
  each day's files land (``{{ ds }}`` is the run's date).

Tasks run in cluster deploy mode, so the driver also uses the archive's Python. The
ingest's ``--write-id`` makes a retried run add nothing twice; compaction and vacuum are
safe to retry. Lance finds object store credentials as the AWS SDK does (instance
profile, environment); ``AWS_REGION`` is passed to the driver and the executors.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

try:
    from airflow.sdk import DAG  # Airflow 3
except ImportError:  # Airflow 2
    from airflow import DAG

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JOBS = os.environ.get("LANCE_PARTITIONED_JOBS", os.path.join(_REPO, "jobs"))
ARCHIVE = os.environ.get(
    "LANCE_PARTITIONED_ARCHIVE", "s3://my-bucket/artifacts/lance_partitioned_venv.tar.gz#environment"
)
ROOT = os.environ.get("LANCE_PARTITIONED_ROOT", "s3://my-bucket/warehouse/events")
INPUT = os.environ.get("LANCE_PARTITIONED_INPUT", "s3://my-bucket/landing/events/{{ ds }}/")
REGION = os.environ.get("AWS_REGION", "us-east-1")
SPARK_CONN = os.environ.get("LANCE_PARTITIONED_SPARK_CONN", "spark_default")

PYTHON = "./environment/bin/python"  # inside the unpacked archive, on every node
SUBMIT = {
    "conn_id": SPARK_CONN,
    "deploy_mode": "cluster",
    "archives": ARCHIVE,
    "conf": {
        "spark.pyspark.python": PYTHON,
        "spark.pyspark.driver.python": PYTHON,
        "spark.yarn.appMasterEnv.AWS_REGION": REGION,
        "spark.executorEnv.AWS_REGION": REGION,
        "spark.sql.session.timeZone": "UTC",
    },
}

INGEST_ARGS = [
    "--root", ROOT,
    "--input", INPUT,
    "--format", "parquet",
    "--partition-by", "year(ts)", "month(ts)", "day(ts)", "country",
    "--mode", "append",
    "--write-id", "ingest-{{ ds }}",
]  # fmt: skip
COMPACT_ARGS = ["--root", ROOT, "--filter", "ts >= TIMESTAMP '{{ ds }}T00:00:00Z'"]
VACUUM_ARGS = ["--root", ROOT, "--retain-hours", "168"]


def job(name: str) -> str:
    return os.path.join(JOBS, f"{name}.py")


with DAG(
    dag_id="lance_partitioned_events",
    schedule="@daily",
    start_date=datetime(2025, 12, 1),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": 2, "retry_delay": timedelta(minutes=10)},
    tags=["lance_partitioned"],
) as dag:
    ingest = SparkSubmitOperator(
        task_id="ingest",
        name="lance_partitioned-ingest",
        application=job("ingest"),
        application_args=INGEST_ARGS,
        **SUBMIT,
    )
    compact = SparkSubmitOperator(
        task_id="compact",
        name="lance_partitioned-compact",
        application=job("compact"),
        application_args=COMPACT_ARGS,
        **SUBMIT,
    )
    vacuum = SparkSubmitOperator(
        task_id="vacuum",
        name="lance_partitioned-vacuum",
        application=job("vacuum"),
        application_args=VACUUM_ARGS,
        **SUBMIT,
    )
    ingest >> compact >> vacuum
