"""Timestamp travel (issue 15, item 4): the table as of a time is the last ``__manifest``
version committed at or before it. The oracles are the wall clock around each commit
and Lance's own version list of ``__manifest``."""

from __future__ import annotations

import datetime as dt
import itertools
import time
import zoneinfo

import lance
import pyarrow as pa
import pytest
from pyspark.errors import PySparkException

from partitioning import PartitionedNamespace
from partitioning.errors import InvalidInput
from partitioning.storage.history import version_at
from partitioning.tables.write import write_table
from pipelines import read_partitioned, register_data_source

SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("c", pa.string())])


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _rows(ids: range) -> pa.Table:
    return pa.table({"id": pa.array(list(ids), pa.int64()), "c": ["US" if i % 2 else "FR" for i in ids]})


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    """A namespace written three times; per write the wall-clock time just before it and
    the manifest version and row count right after it."""
    root = str(tmp_path_factory.mktemp("travel") / "ns")
    ns = PartitionedNamespace.create(root, SCHEMA, ["c"])
    steps = [(_now(), ns.manifest_version, 0)]
    for n, ids in enumerate((range(0, 10), range(10, 15), range(15, 40))):
        time.sleep(0.05)
        before = _now()
        time.sleep(0.05)
        write_table(ns, _rows(ids))
        steps.append((before, ns.refresh().manifest_version, ids.stop))
        assert n < 3
    return root, steps


def _lance_versions(root: str) -> list[tuple[int, dt.datetime]]:
    out = []
    for v in lance.dataset(f"{root}/__manifest").versions():
        t = v["timestamp"]
        out.append((int(v["version"]), t.replace(tzinfo=dt.UTC) if t.tzinfo is None else t))
    return sorted(out)


def test_between_commits_reads_the_earlier_version(history):
    root, steps = history
    for (_, version, _), (before_next, _, _) in itertools.pairwise(steps):
        assert version_at(root, before_next) == version
    assert version_at(root, _now()) == steps[-1][1]


def test_exactly_at_a_commit_time_reads_that_commit(history):
    root, _ = history
    versions = _lance_versions(root)
    assert len(versions) >= 4
    for (previous, _), (version, at) in itertools.pairwise(versions):
        assert version_at(root, at) == version
        assert version_at(root, at - dt.timedelta(microseconds=1)) == previous
        assert version_at(root, at + dt.timedelta(microseconds=1)) == version


def test_before_the_first_commit_is_one_line_naming_it(history):
    root, _ = history
    first = _lance_versions(root)[0][1]
    with pytest.raises(InvalidInput, match=r"is before the first commit of .* \(" + first.isoformat()[:19]):
        version_at(root, first - dt.timedelta(seconds=1))


def test_zone_less_times_need_a_zone_and_bad_text_is_refused(history):
    root, steps = history
    before_third = steps[3][0]
    local = before_third.astimezone(zoneinfo.ZoneInfo("America/Los_Angeles")).replace(tzinfo=None)
    assert version_at(root, local.isoformat(), time_zone="America/Los_Angeles") == steps[2][1]
    assert version_at(root, before_third.isoformat().replace("+00:00", "Z")) == steps[2][1]
    with pytest.raises(InvalidInput, match="has no time zone"):
        version_at(root, local.isoformat())
    with pytest.raises(InvalidInput, match=r"timestamp 'yesterday' is not a time"):
        version_at(root, "yesterday", time_zone="UTC")


def test_read_partitioned_as_of_reads_in_the_session_time_zone(spark, history):
    root, steps = history
    for before_next, (_, _, rows) in zip([s[0] for s in steps[1:]], steps, strict=False):
        assert read_partitioned(spark, root, as_of=before_next).count() == rows
    previous = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "Asia/Kolkata")
    try:
        text = steps[3][0].astimezone(zoneinfo.ZoneInfo("Asia/Kolkata")).strftime("%Y-%m-%d %H:%M:%S.%f")
        assert read_partitioned(spark, root, as_of=text).count() == steps[2][2]
    finally:
        spark.conf.set("spark.sql.session.timeZone", previous)
    with pytest.raises(InvalidInput, match="manifest_version or as_of, not both"):
        read_partitioned(spark, root, manifest_version=1, as_of=_now())


def test_the_data_source_option_and_its_errors(spark, history):
    root, steps = history
    register_data_source(spark)
    at = steps[2][0].isoformat()
    df = spark.read.format("lance_partitioned").option("timestampAsOf", at).load(root)
    assert sorted(r.id for r in df.collect()) == list(range(steps[1][2]))
    zone_less = steps[2][0].replace(tzinfo=None).isoformat()
    utc = spark.read.format("lance_partitioned").option("timestampAsOf", zone_less).option("timeZone", "UTC")
    assert utc.load(root).count() == steps[1][2]
    # without the option a zone-less time is read in the session time zone, as TIMESTAMP AS OF is
    local = steps[2][0].astimezone(dt.timezone(dt.timedelta(hours=5, minutes=30))).replace(tzinfo=None)
    spark.conf.set("spark.sql.session.timeZone", "Asia/Kolkata")
    try:
        kolkata = spark.read.format("lance_partitioned").option("timestampAsOf", local.isoformat()).load(root)
        assert kolkata.count() == steps[1][2]
    finally:
        spark.conf.set("spark.sql.session.timeZone", "UTC")
    both = spark.read.format("lance_partitioned").option("timestampAsOf", at).option("versionAsOf", 1)
    with pytest.raises(PySparkException, match="versionAsOf or timestampAsOf, not both"):
        both.load(root).count()


def test_a_dataframe_as_of_a_future_time_stays_pinned(spark, tmp_path):
    root = str(tmp_path / "ns")
    ns = PartitionedNamespace.create(root, SCHEMA, ["c"])
    write_table(ns, _rows(range(4)))
    register_data_source(spark)
    future = (_now() + dt.timedelta(days=1)).isoformat()
    df = spark.read.format("lance_partitioned").option("timestampAsOf", future).load(root)
    assert df.count() == 4
    write_table(ns.refresh(), _rows(range(4, 9)))
    assert df.count() == 4
    assert spark.read.format("lance_partitioned").option("timestampAsOf", future).load(root).count() == 9
