"""The usual first-hour mistakes get a line that says what to do; reports say what happened."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from jobs import vacuum as vacuum_job
from partitioning import PartitionedNamespace
from partitioning.errors import InvalidInput
from partitioning.tables.vacuum import vacuum
from pipelines import drop_partitions, read_partitioned, write_partitioned


def _namespace(spark: SparkSession, root: Path) -> pd.DataFrame:
    rows = pd.DataFrame({"id": range(300), "country": [("US", "DE", "FR")[i % 3] for i in range(300)]})
    write_partitioned(spark.createDataFrame(rows), str(root), partition_by=["country"])
    return rows


def test_history_lists_only_versions_that_read_or_say_which_do(spark: SparkSession, tmp_path: Path) -> None:
    root = tmp_path / "ns"
    _namespace(spark, root)
    latest = PartitionedNamespace.load(str(root)).manifest_version
    with pytest.raises(InvalidInput) as err:
        read_partitioned(spark, str(root), manifest_version=1)
    assert str(err.value) == (
        f"{root}: __manifest version 1 is the first step of creating the namespace and holds no partition spec "
        f"yet; the readable versions are 2..{latest}"
    )
    with pytest.raises(InvalidInput, match=rf"has no __manifest version 99; the readable versions are 2\.\.{latest}$"):
        read_partitioned(spark, str(root), manifest_version=99)
    assert read_partitioned(spark, str(root), manifest_version=2).count() == 0


def test_drop_partitions_reports_the_rows_it_dropped(spark: SparkSession, tmp_path: Path) -> None:
    root = tmp_path / "ns"
    rows = _namespace(spark, root)
    report = drop_partitions(str(root), "country IN ('US', 'FR')", spark=spark)
    assert (report.tables, report.rows) == (2, int(rows["country"].isin(["US", "FR"]).sum()))
    assert f"dropped 2 partition tables ({report.rows:,} rows)" in report.summary()


def test_vacuum_names_its_retention_in_hours_and_the_jobs_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "ns"
    PartitionedNamespace.create(str(root), pa.schema([("id", pa.int64()), ("c", pa.string())]), ["c"])
    with pytest.raises(InvalidInput) as err:
        vacuum(str(root), dt.timedelta(hours=1))
    assert str(err.value).startswith("vacuum retention 1 hour is under 24 hours;")
    assert "allow_short_retention=True, or --allow-short-retention to jobs/vacuum.py" in str(err.value)
    assert vacuum_job.main(["--root", str(root), "--retain-hours", "1.5"]) == 2
    out = capsys.readouterr()
    assert out.err.splitlines() == [
        "error: --retain-hours 1.5 is under 24 hours; it could delete files of long writes in progress and "
        "versions readers still use (add --allow-short-retention to do it anyway)"
    ]
    assert vacuum_job.main(["--root", str(root), "--retain-hours", "1.5", "--allow-short-retention"]) == 0


def test_a_relative_root_shows_the_real_error(spark: SparkSession) -> None:
    df = spark.createDataFrame([(1, "US")], "id long, country string")
    with pytest.raises(Exception) as err:
        df.write.format("lance_partitioned").option("partition_by", "bucket(id)").mode("append").save("rel/x")
    assert "bucket" in str(err.value) and "parameter" in str(err.value)
    assert "Spark server" not in str(err.value)


def test_partition_by_creates_a_namespace_and_a_mismatch_says_what_to_do(spark: SparkSession, tmp_path: Path) -> None:
    root = str(tmp_path / "ns")
    df = spark.createDataFrame([(1, "US"), (2, "DE")], "id long, country string")
    df.write.format("lance_partitioned").partitionBy("country").mode("append").save(root)
    ns = PartitionedNamespace.load(root)
    assert [ns.namespace_schema.field_by_id(i).name for f in ns.current_spec.fields for i in f.source_ids] == [
        "country"
    ]
    df.write.format("lance_partitioned").partitionBy("country").mode("append").save(root)
    assert spark.read.format("lance_partitioned").load(root).count() == 4
    with pytest.raises(Exception) as err:
        df.write.format("lance_partitioned").partitionBy("id").mode("append").save(root)
    first = str(err.value).splitlines()[0]
    assert f"the namespace at {root} is partitioned as (country), not (id); drop .partitionBy()" in first


def test_a_long_operation_over_many_tables_prints_progress_lines(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import time

    from partitioning import progress as progress_module

    monkeypatch.setattr(progress_module, "INTERVAL", 0.05)
    seen = []
    for n in progress_module.progress("vacuum /data/events", range(6), 6):
        time.sleep(0.03)
        seen.append(n)
    assert seen == list(range(6))
    lines = capsys.readouterr().err.splitlines()
    assert lines and lines[-1].startswith("vacuum /data/events: 6 of 6 partition tables (100%), ")
    assert all(ln.startswith("vacuum /data/events: ") for ln in lines)
    for _ in progress_module.progress("quick", range(3), 3):
        pass
    assert capsys.readouterr().err == ""  # a short operation prints nothing


def test_ctas_in_the_session_catalog_needs_a_location_and_says_so(spark: SparkSession, tmp_path: Path) -> None:
    spark.range(6).selectExpr("id", "cast(id % 2 as string) c").createOrReplaceTempView("ctas_src")
    with pytest.raises(Exception) as err:
        spark.sql("CREATE TABLE ctas_managed USING lance_partitioned PARTITIONED BY (c) AS SELECT * FROM ctas_src")
    first = str(err.value).splitlines()[0]
    assert "CREATE TABLE ... USING lance_partitioned needs LOCATION '<namespace root>'" in first
    assert "spark.sql.catalog.lance=lance_partitioned.LanceCatalog" in first
    root = str(tmp_path / "ctas")
    try:
        spark.sql(
            f"CREATE TABLE ctas_at USING lance_partitioned PARTITIONED BY (c) LOCATION '{root}' "
            "AS SELECT * FROM ctas_src"
        )
        assert sorted(r.id for r in spark.table("ctas_at").collect()) == list(range(6))
        ns = PartitionedNamespace.load(root)
        assert [ns.namespace_schema.field_by_id(i).name for f in ns.current_spec.fields for i in f.source_ids] == ["c"]
    finally:
        spark.sql("DROP TABLE IF EXISTS ctas_at")
