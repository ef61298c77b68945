"""``readStream`` out of a namespace (issue 36): a snapshot, then what each ``__manifest`` version appends.

One namespace feeds another through the ``lance_partitioned`` source and sink; both sides
are read with pylance at the versions ``__manifest`` records, and the expected rows are
the pyarrow tables the test wrote.
"""

from __future__ import annotations

import lance
import pyarrow as pa
import pytest
from pyspark.errors import PySparkException

from partitioning.namespace import PartitionedNamespace
from partitioning.service.arrow import write_arrow
from pipelines import compact, delete_rows, register_data_source


@pytest.fixture(autouse=True)
def _source(spark):
    register_data_source(spark)


def rows(start: int, count: int) -> pa.Table:
    ids = list(range(start, start + count))
    return pa.table({"id": ids, "k": [["a", "b", "c"][i % 3] for i in ids], "x": [i * 0.5 for i in ids]})


def stored_ids(root) -> list[int]:
    ns = PartitionedNamespace.load(str(root))
    out: list[int] = []
    for t in ns.partitions():
        out.extend(lance.dataset(t.uri, version=t.read_version).to_table(columns=["id"])["id"].to_pylist())
    return sorted(out)


def feed(spark, source, target, checkpoint, **options: str) -> None:
    reader = spark.readStream.format("lance_partitioned")
    for key, value in options.items():
        reader = reader.option(key, value)
    query = (
        reader.load(str(source))
        .writeStream.format("lance_partitioned")
        .option("checkpointLocation", str(checkpoint))
        .option("partition_by", "k")
        .trigger(availableNow=True)
        .start(str(target))
    )
    query.awaitTermination()


def test_a_namespace_feeds_another_snapshot_then_appends(spark, tmp_path):
    source, target, checkpoint = tmp_path / "src", tmp_path / "dst", tmp_path / "ck"
    write_arrow(str(source), rows(0, 30), partition_by=["k"])
    write_arrow(str(source), rows(30, 30))
    feed(spark, source, target, checkpoint)
    assert stored_ids(target) == list(range(60))

    write_arrow(str(source), rows(60, 9))
    compact(str(source), spark=spark)  # rewrites fragments, changes no row: passed over
    write_arrow(str(source), rows(69, 3))
    feed(spark, source, target, checkpoint)
    assert stored_ids(target) == list(range(72))
    got = spark.read.format("lance_partitioned").load(str(target)).orderBy("id").collect()
    assert [(r.id, r.k, r.x) for r in got] == [(i, ["a", "b", "c"][i % 3], i * 0.5) for i in range(72)]

    feed(spark, source, target, checkpoint)  # nothing new: nothing read, nothing written
    assert stored_ids(target) == list(range(72))


def test_a_change_that_is_not_an_append_fails_the_stream_or_is_skipped(spark, tmp_path):
    source, target = tmp_path / "src", tmp_path / "dst"
    write_arrow(str(source), rows(0, 12), partition_by=["k"])
    feed(spark, source, target, tmp_path / "ck")
    delete_rows(str(source), "id = 4", spark=spark)
    deleted_at = PartitionedNamespace.load(str(source)).manifest_version
    write_arrow(str(source), rows(12, 3))
    with pytest.raises(PySparkException) as caught:
        feed(spark, source, target, tmp_path / "ck")
    text = str(caught.value)
    assert f"__manifest version {deleted_at} (DELETE)" in text and "on_change=skip" in text
    assert "Traceback" not in text
    assert stored_ids(target) == list(range(12))

    feed(spark, source, target, tmp_path / "ck", on_change="skip")
    assert stored_ids(target) == list(range(15))  # the delete passed over, the append read


def test_starting_version_reads_from_there(spark, tmp_path):
    source = tmp_path / "src"
    write_arrow(str(source), rows(0, 6), partition_by=["k"])
    write_arrow(str(source), rows(6, 6))
    second = PartitionedNamespace.load(str(source)).manifest_version
    write_arrow(str(source), rows(12, 6))
    feed(spark, source, tmp_path / "from", tmp_path / "ck1", startingVersion=str(second))
    assert stored_ids(tmp_path / "from") == list(range(6, 18))

    feed(spark, source, tmp_path / "latest", tmp_path / "ck2", startingVersion="latest")
    assert stored_ids(tmp_path / "latest") == []
    write_arrow(str(source), rows(18, 3))
    feed(spark, source, tmp_path / "latest", tmp_path / "ck2", startingVersion="latest")
    assert stored_ids(tmp_path / "latest") == [18, 19, 20]


@pytest.mark.parametrize(
    ("options", "needle"),
    [
        ({"startingVersion": "999"}, "startingVersion must be 'latest' or a __manifest version from 1 to"),
        ({"on_change": "ignore"}, "option on_change 'ignore' is not one of: fail, skip"),
        ({"colour": "red"}, "unknown read option 'colour'"),
    ],
)
def test_bad_stream_read_options_are_one_line(spark, tmp_path, options, needle):
    write_arrow(str(tmp_path / "src"), rows(0, 3), partition_by=["k"])
    with pytest.raises(PySparkException) as caught:
        feed(spark, tmp_path / "src", tmp_path / "dst", tmp_path / "ck", **options)
    assert needle in str(caught.value) and "Traceback" not in str(caught.value)


def test_a_batch_read_refuses_the_stream_options(spark, tmp_path):
    write_arrow(str(tmp_path / "src"), rows(0, 3), partition_by=["k"])
    with pytest.raises(PySparkException) as caught:
        spark.read.format("lance_partitioned").option("startingVersion", "1").load(str(tmp_path / "src")).collect()
    assert "startingVersion is for spark.readStream only" in str(caught.value)
