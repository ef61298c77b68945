"""Save modes and options of df.write.format("lance_partitioned"), held to Spark's parquet."""

from __future__ import annotations

import os
from contextlib import contextmanager

import lance
import pytest
from pyspark.errors import PySparkException
from pyspark.sql import functions as F

from partitioning import PartitionedNamespace
from pipelines import register_data_source

pytestmark = pytest.mark.slow

SESSION_MODE = "spark.sql.sources.partitionOverwriteMode"


@pytest.fixture(scope="module")
def registered(spark):
    register_data_source(spark)
    return spark


@contextmanager
def session_conf(spark, key: str, value: str | None):
    old = spark.conf.get(key, None)
    if value is None:
        spark.conf.unset(key)
    else:
        spark.conf.set(key, value)
    try:
        yield
    finally:
        if old is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, old)


def _rows(spark, start: int, n: int, countries: tuple[str, ...]):
    names = F.array(*[F.lit(c) for c in countries])
    return spark.range(start, start + n).select(
        F.col("id"), F.element_at(names, (F.col("id") % len(countries) + 1).cast("int")).alias("country")
    )


def _ours(root: str) -> set[tuple[int, str]]:
    ns = PartitionedNamespace.load(root)
    out = set()
    for p in ns.partitions():
        out.update((r["id"], r["country"]) for r in ns.open_table(p).to_table().to_pylist())
    return out


def _parquet(spark, path: str) -> set[tuple[int, str]]:
    return {(r["id"], r["country"]) for r in spark.read.parquet(path).collect()}


def _both(spark, tmp_path, overwrite_option: str | None):
    """Append then overwrite the same rows into parquet (partitionBy) and lance_partitioned."""
    root, pq = str(tmp_path / "ns"), str(tmp_path / "pq")
    first = _rows(spark, 0, 30, ("US", "CN", "DE"))
    first.write.format("lance_partitioned").mode("append").option("partition_by", "country").save(root)
    first.write.mode("append").partitionBy("country").parquet(pq)
    second = _rows(spark, 100, 4, ("US", "FR"))
    ours = second.write.format("lance_partitioned").mode("overwrite")
    theirs = second.write.mode("overwrite").partitionBy("country")
    if overwrite_option is not None:
        ours = ours.option("partitionOverwriteMode", overwrite_option)
        theirs = theirs.option("partitionOverwriteMode", overwrite_option)
    ours.save(root)
    theirs.parquet(pq)
    return _ours(root), _parquet(spark, pq)


@pytest.mark.parametrize(
    ("session", "option", "dynamic"),
    [
        ("dynamic", None, True),
        ("DYNAMIC", None, True),
        ("static", None, False),
        (None, None, False),
        ("dynamic", "static", False),
        ("static", "dynamic", True),
        (None, "Dynamic", True),
    ],
)
def test_overwrite_follows_the_session_setting_and_the_option_wins_like_parquet(
    registered, tmp_path, session, option, dynamic
):
    with session_conf(registered, SESSION_MODE, session):
        ours, parquet = _both(registered, tmp_path, option)
    assert ours == parquet
    kept_cn = {(i, "CN") for i in range(30) if i % 3 == 1}
    assert (kept_cn <= ours) is dynamic
    assert {(100, "US"), (101, "FR"), (102, "US"), (103, "FR")} <= ours


def test_a_writer_without_a_path_names_the_supported_routes(registered, tmp_path):
    """Spark 4.3 gives a Python data source writer no options (not even the path) for
    INSERT INTO / INSERT OVERWRITE / writeTo() on a catalog table."""
    try:
        with pytest.raises(PySparkException, match=r"no path.*save\(root\).*write_partitioned") as info:
            registered.range(3).writeTo("modes_t").using("lance_partitioned").create()
    finally:
        registered.sql("DROP TABLE IF EXISTS modes_t")
    assert "Traceback" not in str(info.value)


@pytest.mark.parametrize(
    ("option", "value", "expected"),
    [
        ("partitionOverwriteMode", "dynamik", r"'dynamik' is not a partition overwrite mode; allowed: static, dynamic"),
        ("partiton_by", "country", r"unknown lance_partitioned write option 'partiton_by'; allowed: partition_by, "),
        ("max_rows_per_file", "many", r"option max_rows_per_file must be a positive integer, got 'many'"),
    ],
)
def test_bad_options_are_one_line_errors_and_nothing_is_written(registered, tmp_path, option, value, expected):
    root = str(tmp_path / "ns")
    _rows(registered, 0, 30, ("US", "CN", "DE")).write.format("lance_partitioned").mode("append").option(
        "partition_by", "country"
    ).save(root)
    version = lance.dataset(f"{root}/__manifest").version
    before = _ours(root)
    with pytest.raises(PySparkException, match=expected) as info:
        _rows(registered, 100, 4, ("US",)).write.format("lance_partitioned").mode("overwrite").option(
            option, value
        ).save(root)
    assert "Traceback" not in str(info.value)
    assert lance.dataset(f"{root}/__manifest").version == version
    assert _ours(root) == before


def test_spark_refuses_partition_by_and_error_ignore_modes_before_the_writer(registered, tmp_path):
    """Spark 4.3 hands a Python data source neither .partitionBy() nor these save modes."""
    root = str(tmp_path / "ns")
    df = _rows(registered, 0, 6, ("US", "CN"))
    with pytest.raises(PySparkException, match="partitioning or clustering columns do not match"):
        df.write.format("lance_partitioned").mode("append").partitionBy("country").save(root)
    for mode in ("error", "errorifexists", "ignore"):
        with pytest.raises(PySparkException, match="UNSUPPORTED_DATA_SOURCE_SAVE_MODE"):
            df.write.format("lance_partitioned").mode(mode).option("partition_by", "country").save(root)
    assert not os.path.exists(root)


def test_missing_partition_by_names_the_option_and_write_partitioned(registered, tmp_path):
    root = str(tmp_path / "ns")
    with pytest.raises(PySparkException) as info:
        _rows(registered, 0, 3, ("US",)).write.format("lance_partitioned").mode("append").save(root)
    text = str(info.value)
    assert "give its partitioning: PARTITIONED BY (...) in SQL, .partitionBy(...) or .option('partition_by'" in text
    assert "partition_by=[...] to pipelines.write_partitioned" in text
    assert "Traceback" not in text
    assert not os.path.exists(root)


def test_a_task_error_is_one_line_without_the_worker_traceback(registered, tmp_path):
    root = str(tmp_path / "ns")
    _rows(registered, 0, 6, ("US", "CN")).write.format("lance_partitioned").mode("append").option(
        "partition_by", "country"
    ).save(root)
    bad = registered.range(3).select(F.lit("abc").alias("id"), F.lit("US").alias("country"))
    with pytest.raises(PySparkException) as info:
        bad.write.format("lance_partitioned").mode("append").save(root)
    text = str(info.value)
    assert "partitioning.errors.SchemaError: column 'id': cannot cast string to int64" in text
    assert "Traceback" not in text
    assert len([line for line in text.splitlines() if line.strip()]) <= 3


def test_partition_by_option_must_match_an_existing_namespace(registered, tmp_path):
    root = str(tmp_path / "ns")
    df = _rows(registered, 0, 6, ("US", "CN"))
    df.write.format("lance_partitioned").mode("append").option("partition_by", "country").save(root)
    df.write.format("lance_partitioned").mode("append").option("partition_by", "country").save(root)
    with pytest.raises(PySparkException, match=r"is partitioned as .*omit option partition_by"):
        df.write.format("lance_partitioned").mode("append").option("partition_by", "bucket[4](id)").save(root)
    ns = PartitionedNamespace.load(root)
    assert sum(ns.open_table(p).count_rows() for p in ns.partitions()) == 12
