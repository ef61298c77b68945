"""Failed and concurrent writes: nothing half-written is visible, nothing committed is lost."""

from __future__ import annotations

import datetime as dt
import multiprocessing as mp
import os
import re
from collections import Counter

import lance
import pyarrow as pa
import pytest
from pyspark.errors import PySparkException
from pyspark.sql import functions as F

from partitioning import PartitionedNamespace, PartitioningError
from partitioning.tables.write import write_table
from pipelines import register_data_source
from pipelines.write.dataframe import write_partitioned

pytestmark = pytest.mark.slow

SCHEMA = pa.schema(
    [pa.field("id", pa.int64(), nullable=False), pa.field("day", pa.date32()), pa.field("c", pa.string())]
)


def _visible_ids(root: str) -> list[int]:
    ns = PartitionedNamespace.load(root)
    ids: list[int] = []
    for p in ns.partitions():
        ids.extend(ns.open_table(p).to_table(columns=["id"]).column("id").to_pylist())
    return sorted(ids)


def _manifest_version(root: str) -> int:
    return lance.dataset(f"{root}/__manifest").version


def _events(spark, start: int, n: int):
    return spark.range(start, start + n).select(
        F.col("id"),
        F.date_add(F.lit("2025-12-10").cast("date"), (F.col("id") % 3).cast("int")).alias("day"),
        F.element_at(
            F.array(F.lit("US"), F.lit("CN"), F.lit("DE"), F.lit("FR")), (F.col("id") % 4 + 1).cast("int")
        ).alias("c"),
    )


@pytest.fixture
def seeded(spark, tmp_path):
    root = str(tmp_path / "ns")
    write_partitioned(_events(spark, 0, 120), root, partition_by=["day", "c"])
    return root


def test_a_task_failure_leaves_nothing_visible(spark, tmp_path):
    """Fragments written by a task of a failed job are never committed; orphans() reports them.

    The failing row comes last in one task, after ~10 MB of wide rows, so the JVM cannot
    run ahead of the Python writer: earlier batches are written as fragments before the
    task fails.
    """
    root = str(tmp_path / "ns")
    wide = F.repeat(F.lit("x"), 10_000)
    write_partitioned(_events(spark, 0, 120).withColumn("payload", wide), root, partition_by=["day", "c"])
    before_version = _manifest_version(root)
    before_ids = _visible_ids(root)
    failing = (
        _events(spark, 1000, 1000)
        .coalesce(1)
        .withColumn("payload", wide)
        .withColumn("c", F.when(F.col("id") == 1999, F.raise_error(F.lit("boom in a task"))).otherwise(F.col("c")))
    )
    old = spark.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch")
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "20")
    try:
        with pytest.raises(PartitioningError, match="boom in a task"):
            write_partitioned(failing, root, cluster=False, max_open_writers=1)
    finally:
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", old)
    assert _manifest_version(root) == before_version
    assert _visible_ids(root) == before_ids
    orphans = PartitionedNamespace.load(root).orphans()
    assert {o.kind for o in orphans} == {"data_file"}
    assert len(orphans) >= 1


def test_a_crash_between_dataset_commits_and_the_manifest_commit(spark, seeded, monkeypatch):
    """Dataset versions committed without a manifest commit stay invisible, and later writes skip them."""
    before_version = _manifest_version(seeded)
    before_ids = _visible_ids(seeded)
    before_tables = {p.location: p.read_version for p in PartitionedNamespace.load(seeded).partitions()}

    def crash(self, *args, **kwargs):
        raise RuntimeError("driver died before the __manifest commit")

    with monkeypatch.context() as patch:
        patch.setattr(PartitionedNamespace, "commit_once", crash)
        with pytest.raises(RuntimeError, match="driver died"):
            write_partitioned(_events(spark, 2000, 200), seeded)

    assert _manifest_version(seeded) == before_version
    assert _visible_ids(seeded) == before_ids
    ns = PartitionedNamespace.load(seeded)
    advanced = [loc for loc, rv in before_tables.items() if lance.dataset(f"{seeded}/{loc}").version > rv]
    assert sorted(advanced) == sorted(before_tables)  # every dataset was committed ahead of the manifest
    orphan_versions = {o.uri.rsplit("/", 1)[-1] for o in ns.orphans() if o.kind == "version"}
    assert orphan_versions == set(before_tables)

    result = write_partitioned(_events(spark, 3000, 30), seeded)
    assert result.rows_written == 30
    assert _visible_ids(seeded) == sorted([*before_ids, *range(3000, 3030)])


def test_retried_job_with_the_same_write_id_adds_nothing(spark, seeded):
    first = write_partitioned(_events(spark, 700, 50), seeded, write_id="job-42")
    again = write_partitioned(_events(spark, 700, 50), seeded, write_id="job-42")
    assert first.skipped is None and first.rows_written == 50
    assert again.skipped == f"write_id 'job-42' was already committed at __manifest v{first.manifest_version}"
    assert Counter(_visible_ids(seeded))[700] == 1
    assert len(_visible_ids(seeded)) == 170


# -- concurrency: separate processes -------------------------------------------------------------

WRITERS = 4
ROUNDS = 5
ROWS = 24


def _writer(root: str, writer: int) -> list[int]:
    ns = PartitionedNamespace.load(root)
    attempts = []
    for r in range(ROUNDS):
        base = (writer * ROUNDS + r) * ROWS
        ids = list(range(base, base + ROWS))
        table = pa.table(
            {
                "id": ids,
                "day": [dt.date(2025, 12, 10 + i % 2) for i in ids],
                "c": [("US", "CN", "DE")[i % 3] for i in ids],
            },
            schema=SCHEMA,
        )
        attempts.append(write_table(ns, table).attempts)
    return attempts


def test_concurrent_writers_lose_nothing(tmp_path):
    """4 processes x 5 appends to the same (initially missing) partitions."""
    root = str(tmp_path / "ns")
    PartitionedNamespace.create(root, SCHEMA, ["day", "c"])
    with mp.get_context("spawn").Pool(WRITERS) as pool:
        attempts = pool.starmap(_writer, [(root, w) for w in range(WRITERS)])
    ns = PartitionedNamespace.load(root)
    assert sorted(len(a) for a in attempts) == [ROUNDS] * WRITERS
    assert _visible_ids(root) == list(range(WRITERS * ROUNDS * ROWS))
    keys = [p.key for p in ns.partitions()]
    assert sorted(keys) == sorted({(dt.date(2025, 12, 10 + d), c) for d in (0, 1) for c in ("US", "CN", "DE")})
    for p in ns.partitions():
        table = ns.open_table(p).to_table()
        assert set(table.column("c").to_pylist()) == {p.values["c"]}
        assert set(table.column("day").to_pylist()) == {p.values["day"]}
    assert _manifest_version(root) >= 1 + WRITERS * ROUNDS


def _break_data_dir(root: str, country: str) -> None:
    """Make the partitions' ``data`` directories files, so writing fragments there fails in Lance."""
    for table in PartitionedNamespace.load(root).partitions():
        if table.values["c"] == country:
            data = os.path.join(table.uri, "data")
            os.rename(data, data + ".moved")
            with open(data, "w") as fh:
                fh.write("in the way")


def test_a_lance_error_in_a_task_is_one_line_naming_the_partition(spark, seeded):
    _break_data_dir(seeded, "US")
    before = _manifest_version(seeded)
    us = _events(spark, 5000, 8).where("c = 'US'")
    with pytest.raises(PartitioningError) as info:
        write_partitioned(us, seeded)
    message = str(info.value)
    assert "\n" not in message and "Traceback" not in message
    assert re.match(r"partition day=2025-12-1\d, c='US': write fragments to ", message)
    assert isinstance(info.value.__cause__, PySparkException)
    assert _manifest_version(seeded) == before


def test_a_lance_error_in_a_data_source_task_is_one_line_naming_the_partition(spark, seeded):
    register_data_source(spark)
    _break_data_dir(seeded, "US")
    before = _manifest_version(seeded)
    with pytest.raises(PySparkException) as info:
        _events(spark, 5000, 8).where("c = 'US'").write.format("lance_partitioned").mode("append").save(seeded)
    text = str(info.value)
    assert "Traceback" not in text
    (line,) = [ln for ln in text.splitlines() if "partitioning.errors" in ln]
    assert "c='US'" in line and "write fragments to" in line
    assert _manifest_version(seeded) == before
