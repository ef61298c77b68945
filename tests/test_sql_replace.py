"""Replace and overwrite through SQL keep Iceberg's and Delta's promises (issue 46), on classic Spark.

tests/replace_scenarios.py makes each failure for real (in analysis, in a task, at the
commit) and checks every version of the table against plain pylance reads and the bytes
of its files; the same scenarios run on Spark Connect (tests/connect_scenarios.py) and on
``local-cluster`` (tests/cluster_scenarios.py).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import lance
import pytest
import replace_scenarios
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

NS = "replacing.replaces"


@pytest.fixture(scope="module")
def warehouse(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    path = str(tmp_path_factory.mktemp("warehouse"))
    # a catalog of its own: Spark keeps a catalog's first warehouse for the whole session
    spark.conf.set("spark.sql.catalog.replacing", "lance_partitioned.LanceCatalog")
    spark.conf.set("spark.sql.catalog.replacing.warehouse", path)
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {NS}")
    yield path


@pytest.mark.parametrize("scenario", replace_scenarios.SCENARIOS, ids=lambda s: s.__name__)
def test_replace_scenarios(spark: SparkSession, warehouse: str, scenario: object) -> None:
    checks = list(scenario(spark, warehouse, NS))  # type: ignore[operator]
    assert len(checks) >= 5
    bad = [f"{label}: got {got!r}, want {want!r}" for label, got, want in checks if got != want]
    assert not bad, "\n".join(bad)


def test_show_partitions_and_the_metadata_tables(spark: SparkSession, warehouse: str) -> None:
    name = f"{NS}.shown"
    spark.sql(f"CREATE TABLE {name} (id BIGINT, country STRING, day DATE) PARTITIONED BY (country, year(day))")
    rows = [(1, "US", "2025-01-02"), (2, "US", "2025-03-04"), (3, "DE", "2024-05-06"), (4, None, None)]
    values = ", ".join(f"({i}, {_lit(c)}, {_lit(d, 'DATE ')})" for i, c, d in rows)
    spark.sql(f"INSERT INTO {name} VALUES {values}")
    spark.sql(f"INSERT INTO {name} VALUES (5, 'DE', DATE '2024-07-08')")
    want = sorted({f"country={c or 'null'}/day_year={d[:4] if d else 'null'}" for _, c, d in rows})
    assert sorted(r[0] for r in spark.sql(f"SHOW PARTITIONS {name}").collect()) == want
    only_us = spark.sql(f"SHOW PARTITIONS {name} PARTITION (country = 'US')").collect()
    assert [r[0] for r in only_us] == ["country=US/day_year=2025"]

    root = os.path.join(warehouse, "replaces", "shown")
    manifest = lance.dataset(f"{root}/__manifest")
    history = spark.sql(f"SELECT version, operation FROM {name}.history").collect()
    assert [r.version for r in history] == sorted((v["version"] for v in manifest.versions()), reverse=True)
    assert [r.operation for r in history][:2] == ["WRITE", "WRITE"]
    partitions = spark.sql(f"SELECT partition, row_count FROM {name}.partitions").collect()
    assert sum(r.row_count for r in partitions) == 5 and len(partitions) == len(want)
    fragments = sum(
        len(lance.dataset(f"{root}/{t['location']}", version=t["read_version"]).get_fragments())
        for t in manifest.to_table(filter="object_type = 'table'").to_pylist()
    )
    assert spark.sql(f"SELECT count(*) FROM {name}.files").collect()[0][0] == fragments
    first = spark.sql(f"SELECT version FROM {name}.history VERSION AS OF 3").collect()
    assert max(r.version for r in first) == 3


def _lit(value: object, prefix: str = "") -> str:
    return "NULL" if value is None else f"{prefix}'{value}'"


def test_overwrite_by_a_condition_on_other_columns_replaces_the_rows_it_selects(
    spark: SparkSession, warehouse: str
) -> None:
    """``writeTo(t).overwrite(condition)`` as Delta's replaceWhere; oracle: the same on plain Python rows."""
    name = f"{NS}.overwritten"
    spark.sql(f"CREATE TABLE {name} (id BIGINT, country STRING, amount DOUBLE) PARTITIONED BY (country)")
    rows = [(1, "US", 1.0), (2, "US", 20.0), (3, "DE", 3.0), (4, "DE", 40.0), (5, "FR", None)]
    spark.createDataFrame(rows, "id long, country string, amount double").writeTo(name).append()
    new = [(10, "US", 15.0), (11, "JP", 99.0)]
    spark.createDataFrame(new, "id long, country string, amount double").writeTo(name).overwrite(F.col("amount") > 10)
    kept = [r for r in rows if not (r[2] is not None and r[2] > 10)]  # NULL does not match: kept
    assert sorted(tuple(r) for r in spark.table(name).collect()) == sorted(kept + new)
    before = sorted(tuple(r) for r in spark.table(name).collect())
    outside = spark.createDataFrame([(12, "US", 1.0)], "id long, country string, amount double")
    with pytest.raises(Exception) as err:
        outside.writeTo(name).overwrite(F.col("amount") > 10)
    assert str(err.value) == (
        "[LANCE_INVALID_INPUT] overwrite of "
        f"{warehouse}/replaces/overwritten: 1 row(s) do not match the overwrite's condition (amount > 10.0D); "
        "nothing was written"
    )
    assert sorted(tuple(r) for r in spark.table(name).collect()) == before
