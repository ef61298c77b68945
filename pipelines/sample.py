"""A generated sample of click events, used by ``make run`` and the benchmarks."""

from __future__ import annotations

import datetime as dt

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

COUNTRIES = ("US", "CN", "DE", "FR", "IN", "BR", "JP", "GB", "MX", "KR")


def sample_events(
    spark: SparkSession,
    rows: int,
    *,
    days: int = 3,
    countries: int = 3,
    start: dt.datetime = dt.datetime(2025, 12, 10, tzinfo=dt.UTC),
    seed: int = 7,
) -> DataFrame:
    """``rows`` events over ``days`` days from ``countries`` countries (deterministic for a seed).

    Columns: event_id, ts (UTC timestamp), country, user_id, amount, payload.
    """
    if countries > len(COUNTRIES):
        raise ValueError(f"countries must be at most {len(COUNTRIES)}, got {countries}")
    seconds = days * 86_400
    names = F.array(*[F.lit(c) for c in COUNTRIES[:countries]])
    return spark.range(rows).select(
        F.col("id").alias("event_id"),
        F.timestamp_seconds(F.lit(int(start.timestamp())) + (F.abs(F.hash("id", F.lit(seed))) % seconds)).alias("ts"),
        F.element_at(names, (F.abs(F.hash("id", F.lit(seed + 1))) % countries + 1).cast("int")).alias("country"),
        (F.abs(F.hash("id", F.lit(seed + 2))) % 100_000).cast("long").alias("user_id"),
        (F.abs(F.hash("id", F.lit(seed + 3))) % 100_000 / 100).cast("decimal(10,2)").alias("amount"),
        F.sha2(F.col("id").cast("string"), 256).alias("payload"),
    )
