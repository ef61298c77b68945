"""Replace and overwrite through SQL keep Iceberg's and Delta's promises (issue 46), on classic Spark.

tests/replace_scenarios.py makes each failure for real (in analysis, in a task, at the
commit) and checks every version of the table against plain pylance reads and the bytes
of its files; the same scenarios run on Spark Connect (tests/connect_scenarios.py) and on
``local-cluster`` (tests/cluster_scenarios.py).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import replace_scenarios
from pyspark.sql import SparkSession


@pytest.fixture(scope="module")
def warehouse(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    path = str(tmp_path_factory.mktemp("warehouse"))
    spark.conf.set("spark.sql.catalog.lance", "lance_partitioned.LanceCatalog")
    spark.conf.set("spark.sql.catalog.lance.warehouse", path)
    spark.sql("CREATE NAMESPACE IF NOT EXISTS lance.replaces")
    yield path


@pytest.mark.parametrize("scenario", replace_scenarios.SCENARIOS, ids=lambda s: s.__name__)
def test_replace_scenarios(spark: SparkSession, warehouse: str, scenario: object) -> None:
    checks = list(scenario(spark, warehouse, "replaces"))  # type: ignore[operator]
    assert len(checks) >= 5
    bad = [f"{label}: got {got!r}, want {want!r}" for label, got, want in checks if got != want]
    assert not bad, "\n".join(bad)
