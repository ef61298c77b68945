"""Hypothesis settings for properties checked through a SparkSession: few examples, no
deadline (a Spark job's time varies), reproducible (derandomized, no example database)."""

from __future__ import annotations

from hypothesis import HealthCheck, Phase, settings


def spark_settings(examples: int) -> settings:
    return settings(
        max_examples=examples,
        deadline=None,
        database=None,
        derandomize=True,
        phases=(Phase.explicit, Phase.generate),
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
    )
