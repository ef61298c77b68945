"""History and restore from Spark: ``DESCRIBE HISTORY`` and ``RESTORE`` of a namespace.

:func:`history` is the namespace's history (:func:`partitioning.storage.history.history_table`)
as a DataFrame, newest first; :func:`restore` is :func:`partitioning.tables.restore.restore`
with a zone-less ``timestamp`` read in the session time zone.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import (
    DoubleType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from partitioning.storage.history import history_table
from partitioning.tables.restore import RestoreResult
from partitioning.tables.restore import restore as restore_namespace
from pipelines.shared_roots import driver_root

__all__ = ["HISTORY_SPARK_SCHEMA", "history", "restore"]

HISTORY_SPARK_SCHEMA = StructType(
    [
        StructField("version", LongType(), False),
        StructField("timestamp", TimestampType(), False),
        StructField("operation", StringType(), False),
        StructField("parameters", MapType(StringType(), StringType()), True),
        StructField("metrics", MapType(StringType(), DoubleType()), True),
    ]
)


def history(
    spark: SparkSession, root: str, *, limit: int | None = None, storage_options: Mapping[str, str] | None = None
) -> DataFrame:
    """One row per ``__manifest`` version, newest first: ``version``, ``timestamp``,
    ``operation``, ``parameters`` (map of strings) and ``metrics`` (map of doubles);
    at most ``limit`` rows. Versions made before operations were recorded are ``UNKNOWN``."""
    table = history_table(driver_root(spark, root), limit=limit, storage_options=storage_options)
    rows = [
        (r["version"], r["timestamp"], r["operation"], dict(r["parameters"]), dict(r["metrics"]))
        for r in table.to_pylist()
    ]
    return spark.createDataFrame(rows, HISTORY_SPARK_SCHEMA)


def restore(
    root: str,
    *,
    version: int | None = None,
    timestamp: dt.datetime | dt.date | str | None = None,
    spark: SparkSession | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> RestoreResult:
    """Restore ``root`` to ``__manifest`` ``version`` or to the version current at ``timestamp``
    (one new commit, ``RESTORE`` in the history). With ``spark`` a zone-less ``timestamp``
    is read in the session time zone; without, it needs a zone."""
    zone = str(spark.conf.get("spark.sql.session.timeZone", "UTC")) if spark is not None else None
    target = driver_root(spark, root) if spark is not None else root
    return restore_namespace(
        target, version=version, timestamp=timestamp, time_zone=zone, storage_options=storage_options
    )
