"""Maintenance: compaction, row deletes, partition drops, vacuum, manifest compaction and their jobs.

Expected rows are written out by hand (or taken from the data as it was before the
operation), never computed by the code under test.
"""

from __future__ import annotations

import datetime as dt
import inspect
import os
import time
from pathlib import Path

import lance
import pyarrow as pa
import pytest
from chispa import assert_df_equality
from lance.namespace import DirectoryNamespace
from lance_namespace import ListNamespacesRequest, ListTablesRequest

from jobs import compact as compact_job
from jobs import delete as delete_job
from jobs import vacuum as vacuum_job
from partitioning import PartitionedNamespace
from partitioning.errors import InvalidInput
from partitioning.namespace import PartitionTable
from partitioning.storage.datasets import commit_version, write_new_fragments
from partitioning.storage.manifest import ManifestStore
from partitioning.tables.compaction import commit_compaction, compact_local, plan_compaction, rewrite
from partitioning.tables.deletes import delete_rows, drop_partitions
from partitioning.tables.maintenance import optimize_manifest
from partitioning.tables.vacuum import vacuum
from partitioning.tables.write import write_table
from pipelines import read_partitioned
from pipelines.maintenance.operations import compact

SCHEMA = pa.schema(
    [pa.field("id", pa.int64(), nullable=False), pa.field("country", pa.string()), pa.field("v", pa.int64())]
)
SPARK_SCHEMA = "id long, country string, v long"
Row = tuple[int, str | None, int]


# -- helpers --------------------------------------------------------------------------------------
def _table(rows: list[Row]) -> pa.Table:
    return pa.Table.from_pylist([{"id": i, "country": c, "v": v} for i, c, v in rows], schema=SCHEMA)


def _write(ns: PartitionedNamespace, rows: list[Row], **kwargs) -> None:
    write_table(ns, _table(rows), **kwargs)


def _rows(ns: PartitionedNamespace) -> list[Row]:
    """Every visible row, each table read at its read_version, sorted by id."""
    out = []
    for p in ns.partitions():
        out.extend((r["id"], r["country"], r["v"]) for r in ns.open_table(p).to_table().to_pylist())
    return sorted(out)


def _by_country(ns: PartitionedNamespace) -> dict[str | None, PartitionTable]:
    return {p.values["country"]: p for p in ns.partitions()}


def _nulls_last(value: str | None) -> tuple[bool, str]:
    return (value is None, value or "")


def _fragments(ns: PartitionedNamespace, p: PartitionTable) -> list:
    return ns.open_table(p).get_fragments()


def _manifest(root: str) -> lance.LanceDataset:
    return lance.dataset(f"{root}/__manifest")


def _manifest_versions(root: str) -> list[int]:
    return [v["version"] for v in _manifest(root).versions()]


def _dataset_versions(uri: str) -> list[int]:
    return sorted(v["version"] for v in lance.dataset(uri).versions())


def _files(root: str) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in Path(root).rglob("*") if p.is_file())


def _aware(t: dt.datetime) -> dt.datetime:
    return t.replace(tzinfo=dt.UTC) if t.tzinfo is None else t


def _df(spark, rows: list[Row]):
    return spark.createDataFrame(rows, SPARK_SCHEMA)


def _assert_reads(spark, root: str, expected: list[Row], manifest_version: int | None = None) -> None:
    actual = read_partitioned(spark, root, manifest_version=manifest_version).select("id", "country", "v")
    assert_df_equality(actual, _df(spark, expected), ignore_row_order=True, ignore_nullable=True, ignore_metadata=True)


# -- compaction -----------------------------------------------------------------------------------
US_200 = [(i, "US", i * 10) for i in range(200)]
CN_6 = [(1000, "CN", 1), (1001, "CN", 2), (1002, "CN", 3), (1003, "CN", 4), (1004, "CN", 5), (1005, "CN", 6)]
FR_2 = [(2000, "FR", 7), (2001, "FR", 8)]


def test_spark_compaction_rewrites_small_fragments_in_one_manifest_commit(spark, tmp_path):
    """A partition made of 200 small appends becomes one fragment; a filter limits the compaction
    to its partitions; data, time travel and the single manifest commit are checked; compacting
    again is a no-op."""
    root = str(tmp_path / "ns")
    ns = PartitionedNamespace.create(root, SCHEMA, ["country"])
    for row in US_200:
        _write(ns, [row])  # 200 appends, each its own write and __manifest commit
    for k in range(3):
        _write(ns, CN_6[2 * k : 2 * k + 2])
    for row in FR_2:
        _write(ns, [row])
    expected = sorted(US_200 + CN_6 + FR_2)
    ns.refresh()
    start = _by_country(ns)
    assert [len(_fragments(ns, start[c])) for c in ("US", "CN", "FR")] == [200, 3, 2]
    assert _rows(ns) == expected

    # a filter compacts only the partitions it selects
    v0 = ns.manifest_version
    report = compact(root, "country = 'CN'", spark=spark)
    ns.refresh()
    assert report.manifest_version == v0 + 1 == ns.manifest_version
    assert (report.tables, report.fragments_before, report.fragments_after, report.rows) == (1, 3, 1, 6)
    after_filter = _by_country(ns)
    assert after_filter["US"].read_version == start["US"].read_version
    assert after_filter["FR"].read_version == start["FR"].read_version
    assert after_filter["CN"].read_version != start["CN"].read_version
    assert [len(_fragments(ns, after_filter[c])) for c in ("US", "CN", "FR")] == [200, 1, 2]
    assert _rows(ns) == expected

    # everything else, in exactly one new __manifest version
    old = ns.manifest_version
    versions_before = _manifest_versions(root)
    report = compact(root, spark=spark)
    ns.refresh()
    assert report.operation == "compact"
    assert report.manifest_version == old + 1 == ns.manifest_version
    assert _manifest_versions(root) == [*versions_before, old + 1]
    assert (report.tables, report.fragments_before, report.fragments_after, report.rows) == (2, 202, 2, 202)
    assert report.skipped == ()
    assert (
        report.summary() == f"compact {root}: 2 tables, 202 fragments -> 2, 202 rows rewritten, __manifest v{old + 1}"
    )
    latest = _by_country(ns)
    assert [len(_fragments(ns, latest[c])) for c in ("US", "CN", "FR")] == [1, 1, 1]
    assert latest["CN"].read_version == after_filter["CN"].read_version
    assert _rows(ns) == expected
    _assert_reads(spark, root, expected)

    # a reader of the manifest version before the compaction still sees the old fragments
    before = PartitionedNamespace.load(root, manifest_version=old)
    old_tables = _by_country(before)
    assert old_tables["US"].read_version == start["US"].read_version
    assert [len(_fragments(before, old_tables[c])) for c in ("US", "CN", "FR")] == [200, 1, 2]
    assert _rows(before) == expected
    _assert_reads(spark, root, expected, manifest_version=old)

    # already compact: nothing to do, no new manifest version
    again = compact(root, spark=spark)
    assert (again.manifest_version, again.tables, again.fragments_before) == (old + 1, 0, 0)
    assert _manifest_versions(root) == [*versions_before, old + 1]


def test_compaction_drops_deleted_rows_and_deletion_files(tmp_path):
    """Rows removed by delete_rows are gone after compaction, and so are the deletion files
    (also for a single fragment whose only reason to be rewritten is its deletions)."""
    root = str(tmp_path / "ns")
    ns = PartitionedNamespace.create(root, SCHEMA, ["country"])
    _write(ns, [(1, "US", 10), (2, "US", 20), (3, "US", 30), (10, "CN", 100), (11, "CN", 110), (12, "CN", 120)])
    _write(ns, [(4, "US", 40), (5, "US", 50), (6, "US", 60)])
    _write(ns, [(7, "US", 70), (8, "US", 80), (9, "US", 90)])
    deleted = delete_rows(root, "v IN (20, 50, 60, 110)")
    assert (deleted.rows, deleted.tables) == (4, 2)
    ns.refresh()
    tables = _by_country(ns)
    assert [f.metadata.deletion_file is not None for f in _fragments(ns, tables["US"])] == [True, True, False]
    assert [f.metadata.deletion_file is not None for f in _fragments(ns, tables["CN"])] == [True]

    report = compact_local(ns)
    ns.refresh()
    assert (report.tables, report.fragments_before, report.fragments_after, report.rows) == (2, 4, 2, 8)
    assert _rows(ns) == [
        (1, "US", 10),
        (3, "US", 30),
        (4, "US", 40),
        (7, "US", 70),
        (8, "US", 80),
        (9, "US", 90),
        (10, "CN", 100),
        (12, "CN", 120),
    ]
    for p in ns.partitions():
        fragments = _fragments(ns, p)
        assert [f.metadata.deletion_file for f in fragments] == [None]
        assert ns.open_table(p).count_rows() == {"US": 6, "CN": 2}[p.values["country"]]


def test_a_write_between_plan_and_commit_skips_that_partition(tmp_path):
    """A write committed to a partition after planning makes the compaction leave it as it was;
    the other partitions are compacted and no row is lost."""
    root = str(tmp_path / "ns")
    ns = PartitionedNamespace.create(root, SCHEMA, ["country"])
    _write(ns, [(1, "US", 10), (2, "CN", 20)])
    _write(ns, [(3, "US", 30), (4, "CN", 40)])
    ns.refresh()
    planned = _by_country(ns)
    tasks = plan_compaction(ns)
    assert sorted(t.object_id for t in tasks) == sorted([planned["US"].object_id, planned["CN"].object_id])
    results = [rewrite(t) for t in tasks]

    writer = PartitionedNamespace.load(root)
    _write(writer, [(5, "US", 50)])
    written_version = _by_country(writer)["US"].read_version
    assert written_version != planned["US"].read_version

    report = commit_compaction(ns, results)
    ns.refresh()
    assert report.skipped == (planned["US"].object_id,)
    assert (report.tables, report.fragments_before, report.fragments_after) == (1, 2, 1)
    assert report.manifest_version == writer.manifest_version + 1 == ns.manifest_version
    assert "(1 changed concurrently, left as they were)" in report.summary()
    tables = _by_country(ns)
    assert tables["US"].read_version == written_version
    assert len(_fragments(ns, tables["US"])) == 3
    assert len(_fragments(ns, tables["CN"])) == 1
    assert _rows(ns) == [(1, "US", 10), (2, "CN", 20), (3, "US", 30), (4, "CN", 40), (5, "US", 50)]


# -- delete_rows ----------------------------------------------------------------------------------
ROWS_8 = [
    (1, "US", 10),
    (2, "US", 20),
    (3, "US", 30),
    (4, "US", 40),
    (5, "CN", 50),
    (6, "CN", 60),
    (7, "CN", 70),
    (8, None, 80),
]


@pytest.fixture
def eight_rows(tmp_path) -> str:
    root = str(tmp_path / "ns")
    _write(PartitionedNamespace.create(root, SCHEMA, ["country"]), ROWS_8)
    return root


def test_delete_rows_removes_exactly_the_matching_rows_in_one_commit(eight_rows):
    """Only the matching rows go; only tables that lost rows get a new read_version; one
    manifest commit each; time travel still shows the rows; appends after a delete work."""
    root = eight_rows
    ns = PartitionedNamespace.load(root)
    v0 = ns.manifest_version
    start = _by_country(ns)

    report = delete_rows(root, "country = 'US' AND v >= 30")
    ns.refresh()
    assert (report.operation, report.rows, report.tables) == ("delete_rows", 2, 1)
    assert report.manifest_version == v0 + 1 == ns.manifest_version
    assert _manifest_versions(root)[-2:] == [v0, v0 + 1]
    after = _by_country(ns)
    assert after["US"].read_version != start["US"].read_version
    assert after["CN"].read_version == start["CN"].read_version
    assert after[None].read_version == start[None].read_version
    assert _rows(ns) == [(1, "US", 10), (2, "US", 20), (5, "CN", 50), (6, "CN", 60), (7, "CN", 70), (8, None, 80)]
    assert _rows(PartitionedNamespace.load(root, manifest_version=v0)) == ROWS_8

    # a filter on a non-partition column
    report = delete_rows(root, "v = 60")
    ns.refresh()
    assert (report.rows, report.tables, report.manifest_version) == (1, 1, v0 + 2)
    latest = _by_country(ns)
    assert latest["CN"].read_version != after["CN"].read_version
    assert latest["US"].read_version == after["US"].read_version
    assert latest[None].read_version == after[None].read_version
    assert _rows(ns) == [(1, "US", 10), (2, "US", 20), (5, "CN", 50), (7, "CN", 70), (8, None, 80)]

    # appending keeps the deletion file of the old fragment
    _write(ns, [(9, "US", 90), (10, "CN", 100)])
    ns.refresh()
    tables = _by_country(ns)
    assert [f.metadata.deletion_file is not None for f in _fragments(ns, tables["US"])] == [True, False]
    assert _rows(ns) == [
        (1, "US", 10),
        (2, "US", 20),
        (5, "CN", 50),
        (7, "CN", 70),
        (8, None, 80),
        (9, "US", 90),
        (10, "CN", 100),
    ]


def test_delete_rows_with_no_match_changes_nothing(eight_rows):
    """A filter no row matches makes no manifest commit."""
    v0 = PartitionedNamespace.load(eight_rows).manifest_version
    report = delete_rows(eight_rows, "v = 12345")
    assert (report.rows, report.tables, report.manifest_version) == (0, 0, v0)
    assert _manifest_versions(eight_rows)[-1] == v0
    assert _rows(PartitionedNamespace.load(eight_rows)) == ROWS_8


def test_delete_rows_unknown_column_is_a_value_error_naming_it(eight_rows):
    """A filter on a column the namespace does not have is bad input (ValueError) naming the column."""
    v0 = PartitionedNamespace.load(eight_rows).manifest_version
    with pytest.raises(ValueError, match="nope"):
        delete_rows(eight_rows, "nope = 1")
    assert _manifest_versions(eight_rows)[-1] == v0
    assert _rows(PartitionedNamespace.load(eight_rows)) == ROWS_8


# -- drop_partitions ------------------------------------------------------------------------------
def test_drop_partitions_removes_the_table_and_its_namespace_rows(eight_rows):
    """`country = 'US'` removes that table and its namespace row in one commit; its files stay
    readable by time travel until vacuum."""
    root = eight_rows
    ns = PartitionedNamespace.load(root)
    v0 = ns.manifest_version
    us = _by_country(ns)["US"]
    ids_before = set(_manifest(root).to_table().column("object_id").to_pylist())
    assert {us.object_id, us.object_id.rsplit("$", 1)[0]} <= ids_before

    report = drop_partitions(root, "country = 'US'")
    ns.refresh()
    assert (report.operation, report.tables, report.deleted) == ("drop_partitions", 1, (us.object_id,))
    assert report.manifest_version == v0 + 1 == ns.manifest_version
    assert sorted(_by_country(ns), key=_nulls_last) == ["CN", None]
    ids_after = set(_manifest(root).to_table().column("object_id").to_pylist())
    assert ids_after == ids_before - {us.object_id, us.object_id.rsplit("$", 1)[0]}
    assert _rows(ns) == [(5, "CN", 50), (6, "CN", 60), (7, "CN", 70), (8, None, 80)]

    # files remain until vacuum: time travel still reads the dropped rows
    assert os.path.isdir(us.uri)
    old = PartitionedNamespace.load(root, manifest_version=v0)
    assert _rows(old) == ROWS_8


def test_drop_partitions_refuses_non_identity_columns(eight_rows):
    """A filter on a non-partition column is InvalidInput (a ValueError) naming the column and
    pointing at delete_rows; nothing changes."""
    v0 = PartitionedNamespace.load(eight_rows).manifest_version
    with pytest.raises(InvalidInput) as exc:
        drop_partitions(eight_rows, "v = 10")
    assert isinstance(exc.value, ValueError)
    assert "'v'" in str(exc.value)
    assert "use delete_rows" in str(exc.value)
    with pytest.raises(InvalidInput, match="'v'"):
        drop_partitions(eight_rows, "country = 'US' AND v = 10")
    assert _manifest_versions(eight_rows)[-1] == v0
    assert _rows(PartitionedNamespace.load(eight_rows)) == ROWS_8


def test_drop_partitions_drops_the_null_partition_only_with_is_null(eight_rows):
    """Comparisons never match a NULL partition value; `country IS NULL` does."""
    root = eight_rows
    ns = PartitionedNamespace.load(root)
    v0 = ns.manifest_version
    null_table = _by_country(ns)[None]
    for f in ("country != 'CN' AND country != 'US'", "country NOT IN ('CN', 'US')", "country = 'XX'"):
        report = drop_partitions(root, f)
        assert (report.tables, report.manifest_version) == (0, v0), f
    assert sorted(_by_country(ns.refresh()), key=_nulls_last) == ["CN", "US", None]

    report = drop_partitions(root, "country IS NULL")
    ns.refresh()
    assert (report.tables, report.deleted, report.manifest_version) == (1, (null_table.object_id,), v0 + 1)
    assert sorted(_by_country(ns)) == ["CN", "US"]
    assert _rows(ns) == ROWS_8[:7]


# -- vacuum ---------------------------------------------------------------------------------------
def test_vacuum_refuses_short_retention_without_the_flag(eight_rows):
    """Under 24 hours of retention needs allow_short_retention (as Iceberg's orphan-file removal);
    it is InvalidInput (ValueError); the default is 7 days."""
    for retain in (dt.timedelta(0), dt.timedelta(hours=1), dt.timedelta(hours=23, minutes=59)):
        with pytest.raises(ValueError, match="allow_short_retention"):
            vacuum(eight_rows, retain)
    with pytest.raises(ValueError, match="negative"):
        vacuum(eight_rows, dt.timedelta(hours=-1), allow_short_retention=True)
    files = _files(eight_rows)
    assert vacuum(eight_rows, dt.timedelta(hours=24)).deleted == ()
    assert vacuum(eight_rows).deleted == ()
    assert inspect.signature(vacuum).parameters["retain"].default == dt.timedelta(days=7)
    assert _files(eight_rows) == files


def _vacuum_scenario(root: str) -> dict:
    """Writes, a compaction, a partition drop and three failed writes; returns what the tests need.

    Manifest version ``m`` is current before the last write; ``cutoff`` lies between it and
    the next version. The failed writes: fragments in the US table never committed (an orphan
    data file), a new partition table never committed (an orphan table dir), and a CN dataset
    version whose manifest commit was lost (after ``m``).
    """
    ns = PartitionedNamespace.create(root, SCHEMA, ["country"])
    _write(ns, [(1, "US", 10), (2, "US", 20), (3, "CN", 30), (4, "FR", 40)])
    _write(ns, [(5, "US", 50), (6, "CN", 60)])
    assert compact_local(ns).tables == 2
    compacted = _by_country(ns)
    # Lance's compaction commit first reserves fragment ids in a version of its own.
    reserved = [("version", compacted[c].uri) for c in ("US", "CN")]
    fr = _by_country(ns)["FR"]
    assert drop_partitions(ns, "country = 'FR'").tables == 1
    us = _by_country(ns)["US"]
    lost = write_new_fragments(_table([(90, "US", 900)]), us.uri, ns.namespace_schema)
    orphan_file = f"{us.uri}/data/{lost[0].to_json()['files'][0]['path']}"
    ghost = f"{root}/0badf00d_v1$ghostnamespace000$dataset"
    write_new_fragments(_table([(91, "DE", 910)]), ghost, ns.namespace_schema)
    _write(ns, [(7, "CN", 70)])
    m = ns.manifest_version
    at_m = PartitionedNamespace.load(root, manifest_version=m)
    time.sleep(0.1)
    _write(ns, [(8, "US", 80)])
    assert ns.manifest_version == m + 1
    cn = _by_country(ns)["CN"]
    lost_commit = write_new_fragments(_table([(92, "CN", 920)]), cn.uri, ns.namespace_schema)
    commit_version(cn.uri, ns.namespace_schema, lost_commit, None, base=ns.open_table(cn))

    ts = {v["version"]: _aware(v["timestamp"]) for v in _manifest(root).versions()}
    assert ts[m] < ts[m + 1]
    orphans = sorted((o.kind, o.uri) for o in ns.orphans())
    assert orphans == sorted([("data_file", orphan_file), ("table_dir", ghost), ("version", cn.uri), *reserved])
    assert os.path.isfile(orphan_file)
    assert os.path.isdir(fr.uri)
    return {
        "ns": ns,
        "m": m,
        "at_m": {c: p.read_version for c, p in _by_country(at_m).items()},
        "cutoff": ts[m] + (ts[m + 1] - ts[m]) / 2,
        "fr": fr,
        "orphan_file": orphan_file,
        "ghost": ghost,
    }


ROWS_AT_M = [(1, "US", 10), (2, "US", 20), (3, "CN", 30), (5, "US", 50), (6, "CN", 60), (7, "CN", 70)]
ROWS_LATEST = [*ROWS_AT_M, (8, "US", 80)]


def test_vacuum_dry_run_lists_but_deletes_nothing(tmp_path):
    """dry_run reports the orphan file and table dir and the dropped table, and touches no file."""
    root = str(tmp_path / "ns")
    s = _vacuum_scenario(root)
    files = _files(root)
    versions = _manifest_versions(root)
    report = vacuum(root, dt.timedelta(0), dry_run=True, allow_short_retention=True)
    assert report.dry_run is True
    assert f"data_file {s['orphan_file']}" in report.deleted
    assert f"table_dir {s['ghost']}" in report.deleted
    assert f"table_dir {s['fr'].uri} (no retained __manifest version refers to it)" in report.deleted
    assert report.summary() == f"vacuum {root}: would delete {len(report.deleted)} items"
    assert _files(root) == files
    assert _manifest_versions(root) == versions
    assert _rows(PartitionedNamespace.load(root)) == ROWS_LATEST
    assert _rows(PartitionedNamespace.load(root, manifest_version=versions[0] + 1)) == []


def test_vacuum_removes_failed_writes_and_dropped_tables_and_keeps_time_travel(tmp_path):
    """With the cutoff between manifest versions m and m+1, vacuum deletes the orphan file and
    table dir and the dropped table's directory; time travel to m and the latest data still read."""
    root = str(tmp_path / "ns")
    s = _vacuum_scenario(root)
    retain = dt.timedelta(minutes=5)
    report = vacuum(root, retain, allow_short_retention=True, now=s["cutoff"] + retain)
    assert report.dry_run is False
    assert f"data_file {s['orphan_file']}" in report.deleted
    assert f"table_dir {s['ghost']}" in report.deleted
    assert f"table_dir {s['fr'].uri} (no retained __manifest version refers to it)" in report.deleted
    assert not os.path.exists(s["orphan_file"])
    assert not os.path.exists(s["ghost"])
    assert not os.path.exists(s["fr"].uri)
    assert sorted(o.kind for o in s["ns"].orphans()) == ["version"]  # the lost CN commit is newer than m
    assert _rows(PartitionedNamespace.load(root, manifest_version=s["m"])) == ROWS_AT_M
    assert _rows(PartitionedNamespace.load(root)) == ROWS_LATEST


def test_vacuum_removes_versions_older_than_the_retained_manifest_version(tmp_path):
    """Manifest versions before m, and dataset versions older than what m reads, are deleted
    (the cutoff is ``now - retain``); what m and the latest version read is kept."""
    root = str(tmp_path / "ns")
    s = _vacuum_scenario(root)
    ns = s["ns"]
    retain = dt.timedelta(minutes=5)
    vacuum(root, retain, allow_short_retention=True, now=s["cutoff"] + retain)
    assert _manifest_versions(root) == [s["m"], s["m"] + 1]
    for country, p in _by_country(ns.refresh()).items():
        versions = _dataset_versions(p.uri)
        assert min(versions) == s["at_m"][country], (country, versions)
        assert p.read_version in versions
    assert _rows(PartitionedNamespace.load(root, manifest_version=s["m"])) == ROWS_AT_M
    assert _rows(PartitionedNamespace.load(root)) == ROWS_LATEST


def test_vacuum_with_zero_retention_keeps_only_the_latest_needed_versions(tmp_path):
    """retain=0 keeps the latest manifest version and, per table, its read_version (and the
    newer uncommitted one); the latest data still reads correctly."""
    root = str(tmp_path / "ns")
    s = _vacuum_scenario(root)
    ns = s["ns"]
    report = vacuum(root, dt.timedelta(0), allow_short_retention=True)
    assert not os.path.exists(s["orphan_file"])
    assert not os.path.exists(s["ghost"])
    assert not os.path.exists(s["fr"].uri)
    assert f"table_dir {s['fr'].uri} (no retained __manifest version refers to it)" in report.deleted
    assert _manifest_versions(root) == [ns.refresh().manifest_version]
    for country, p in _by_country(ns).items():
        versions = _dataset_versions(p.uri)
        assert p.read_version in versions, (country, p.read_version, versions)
        assert min(versions) == p.read_version, (country, p.read_version, versions)
    assert _rows(ns) == ROWS_LATEST


# -- optimize_manifest ----------------------------------------------------------------------------
def test_optimize_manifest_compacts_the_manifest_and_keeps_every_row(tmp_path):
    """Many commits leave many __manifest fragments; afterwards there are fewer, the partitions are
    identical and pylance's DirectoryNamespace still lists the namespaces."""
    root = str(tmp_path / "ns")
    ns = PartitionedNamespace.create(root, SCHEMA, ["country"])
    rows = [(i, f"c{i:02d}", i) for i in range(12)]
    for row in rows:
        _write(ns, [row])
    _write(ns, [(100, "c00", 100)])
    store = ManifestStore(root)
    tables = store.dataset().to_table(filter="object_type = 'table'").column("object_id").to_pylist()
    for object_id in tables[:12]:  # one table row rewritten per commit, without upkeep (as another client's)
        ds = store.dataset()
        store.merge_rows(ds, ds.to_table(filter=f"object_id = '{object_id}'"))
    before_fragments = len(_manifest(root).get_fragments())
    assert before_fragments >= 12
    ns.refresh()
    partitions = [(p.object_id, p.location, dict(p.values), p.read_version) for p in ns.partitions()]
    manifest_rows = _manifest(root).to_table().sort_by("object_id").to_pylist()

    report = optimize_manifest(root)
    ns.refresh()
    assert report.operation == "optimize_manifest"
    assert report.fragments_before == before_fragments
    assert report.fragments_after == len(_manifest(root).get_fragments()) == 1
    assert report.manifest_version == ns.manifest_version
    assert [(p.object_id, p.location, dict(p.values), p.read_version) for p in ns.partitions()] == partitions
    assert _manifest(root).to_table().sort_by("object_id").to_pylist() == manifest_rows
    assert _rows(ns) == sorted([*rows, (100, "c00", 100)])

    listing = DirectoryNamespace(root=root)
    assert listing.list_namespaces(ListNamespacesRequest(id=[])).namespaces == ["v1"]
    children = listing.list_namespaces(ListNamespacesRequest(id=["v1"])).namespaces
    assert sorted(children) == sorted(p[0].split("$")[1] for p in partitions)
    assert listing.list_tables(ListTablesRequest(id=["v1", children[0]])).tables == ["dataset"]


# -- jobs -----------------------------------------------------------------------------------------
@pytest.fixture
def job_root(tmp_path) -> str:
    root = str(tmp_path / "ns")
    ns = PartitionedNamespace.create(root, SCHEMA, ["country"])
    _write(ns, [(1, "US", 10), (2, "CN", 20), (3, "FR", 30)])
    _write(ns, [(4, "US", 40), (5, "CN", 50)])
    _write(ns, [(6, "US", 60)])
    return root


def test_jobs_compact_delete_and_vacuum_print_their_summaries(spark, job_root, capsys):
    """compact, delete (rows and --drop-partitions) and vacuum (--dry-run, then zero retention)
    run in sequence, each exiting 0 and printing its summary; the data stays right."""
    root = job_root
    v = PartitionedNamespace.load(root).manifest_version

    assert compact_job.main(["--root", root]) == 0
    assert capsys.readouterr().out.strip() == (
        f"compact {root}: 2 tables, 5 fragments -> 2, 5 rows rewritten, __manifest v{v + 1}"
    )
    assert delete_job.main(["--root", root, "--filter", "v = 40"]) == 0
    assert capsys.readouterr().out.strip() == (
        f"delete_rows {root}: deleted 1 rows from 1 partition tables, __manifest v{v + 2}"
    )
    fr = _by_country(PartitionedNamespace.load(root))["FR"]
    assert delete_job.main(["--root", root, "--filter", "country = 'FR'", "--drop-partitions"]) == 0
    assert capsys.readouterr().out.strip() == (
        f"drop_partitions {root}: dropped 1 partition tables (1 rows), __manifest v{v + 3}"
    )
    expected = [(1, "US", 10), (2, "CN", 20), (5, "CN", 50), (6, "US", 60)]
    assert _rows(PartitionedNamespace.load(root)) == expected

    files = _files(root)
    argv = ["--root", root, "--allow-short-retention", "--retain-hours", "0"]
    assert vacuum_job.main([*argv, "--dry-run"]) == 0
    lines = capsys.readouterr().out.rstrip().splitlines()
    assert f"  table_dir {fr.uri} (no retained __manifest version refers to it)" in lines
    assert lines[-1] == f"vacuum {root}: would delete {len(lines) - 1} items"
    assert _files(root) == files

    assert vacuum_job.main(argv) == 0
    deleted = capsys.readouterr().out.rstrip().splitlines()
    assert deleted[-1] == f"vacuum {root}: deleted {len(lines) - 1} items"
    assert deleted[:-1] == lines[:-1]
    assert not os.path.exists(fr.uri)
    assert _manifest_versions(root) == [v + 3]
    ns = PartitionedNamespace.load(root)
    for p in ns.partitions():
        versions = _dataset_versions(p.uri)
        assert p.read_version in versions, (p.values["country"], p.read_version, versions)
    assert _rows(ns) == expected


@pytest.mark.parametrize(
    ("job", "argv", "needle"),
    [
        (compact_job, ["--filter", "nope = 1"], "nope"),
        (delete_job, ["--filter", "nope = 1"], "nope"),
        (delete_job, ["--filter", "v = 1", "--drop-partitions"], "use delete_rows"),
        (vacuum_job, ["--retain-hours", "0"], "add --allow-short-retention"),
    ],
    ids=["compact-unknown-column", "delete-unknown-column", "drop-non-partition-column", "vacuum-short-retention"],
)
def test_jobs_bad_input_is_one_error_line_and_exit_2(request, job_root, capsys, job, argv, needle):
    """Bad input prints one `error:` line on stderr, exits 2 and changes nothing."""
    if job is compact_job:
        request.getfixturevalue("spark")  # the compact job runs on the test session
    root = job_root
    v = PartitionedNamespace.load(root).manifest_version
    files = _files(root)
    assert job.main(["--root", root, *argv]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert err.startswith("error: ")
    assert "\n" not in err
    assert needle in err
    assert captured.out == ""
    assert PartitionedNamespace.load(root).manifest_version == v
    assert _files(root) == files


def test_vacuum_and_orphans_accept_a_relative_root(tmp_path, monkeypatch):
    """A root given as a relative path (as the jobs' docstrings show) works for vacuum and orphans."""
    monkeypatch.chdir(tmp_path)
    ns = PartitionedNamespace.create("warehouse/rel", SCHEMA, ["country"])
    _write(ns, [(1, "US", 10), (2, "CN", 20)])
    _write(ns, [(3, "US", 30)])
    assert ns.orphans() == []
    report = vacuum("warehouse/rel", dt.timedelta(0), allow_short_retention=True)
    (us,) = [p for p in ns.partitions() if p.values["country"] == "US"]
    assert report.deleted == (
        f"versions {us.uri} 1 (no retained read_version)",
        f"versions {tmp_path}/warehouse/rel/__manifest 1-{ns.manifest_version - 1}",
    )
    assert _rows(PartitionedNamespace.load("warehouse/rel")) == [(1, "US", 10), (2, "CN", 20), (3, "US", 30)]
