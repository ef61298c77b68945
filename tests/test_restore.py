"""Restore (issue 15, item 5): one new ``__manifest`` commit makes the namespace what it
was at an older version. Oracles: the pyarrow tables the test wrote, read back with plain
Lance at each table row's ``read_version``, and Lance's own version list."""

from __future__ import annotations

import datetime as dt
import time

import lance
import pyarrow as pa
import pytest

from partitioning import PartitionedNamespace
from partitioning.errors import ConcurrentModification, InvalidInput
from partitioning.storage.manifest import ManifestStore
from partitioning.tables.deletes import delete_rows
from partitioning.tables.restore import restore
from partitioning.tables.vacuum import vacuum
from partitioning.tables.write import write_table
from pipelines import read_partitioned
from pipelines.maintenance.history import history
from pipelines.maintenance.history import restore as spark_restore

SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("c", pa.string())])


def _input(ids: range, countries: tuple[str, ...] = ("US", "FR")) -> pa.Table:
    return pa.table({"id": pa.array(list(ids), pa.int64()), "c": [countries[i % len(countries)] for i in ids]})


def _lance_rows(root: str) -> list[tuple[int, str]]:
    """Every visible row: each table row of the latest __manifest read with plain Lance."""
    out = []
    for row in ManifestStore(root).dataset().to_table(filter="object_type = 'table'").to_pylist():
        ds = lance.dataset(f"{root}/{row['location']}", version=row["read_version"])
        out.extend((r["id"], r["c"]) for r in ds.to_table(columns=["id", "c"]).to_pylist())
    return sorted(out)


def _expected(*tables: pa.Table) -> list[tuple[int, str]]:
    return sorted((r["id"], r["c"]) for t in tables for r in t.to_pylist())


def _latest(root: str) -> int:
    return int(lance.dataset(f"{root}/__manifest").version)


def test_restore_brings_back_an_earlier_version(spark, tmp_path) -> None:
    root = str(tmp_path / "ns")
    ns = PartitionedNamespace.create(root, SCHEMA, ["c"])
    first = _input(range(0, 20))
    write_table(ns, first)
    v1 = ns.refresh().manifest_version
    time.sleep(0.05)
    between = dt.datetime.now(dt.UTC)
    time.sleep(0.05)
    write_table(ns.refresh(), _input(range(100, 110), ("US", "DE")))
    delete_rows(root, "id < 5")
    ns.refresh().evolve_partition_spec(["c", "bucket[2](id)"])
    ns.refresh().add_columns({"note": "string"})
    write_table(ns.refresh(), _input(range(200, 204)))
    assert _lance_rows(root) != _expected(first)

    result = restore(root, version=v1)
    assert result.restored_version == v1 and result.changed and result.manifest_version == _latest(root)
    assert _lance_rows(root) == _expected(first)
    restored = PartitionedNamespace.load(root)
    assert restored.schema.names == ["id", "c"] and sorted(restored.specs) == [1]
    assert restored.namespace_schema.next_field_id == 3  # "note" had id 2; it is never handed out again
    read = read_partitioned(spark, root).orderBy("id").collect()
    assert [(r.id, r.c) for r in read] == _expected(first)
    # properties and rows change atomically: staged, applied by the rows commit, written out
    steps = history(spark, root, limit=3).collect()[::-1]
    assert [(r.operation, r.parameters.get("step")) for r in steps] == [
        ("RESTORE", "stage"),
        ("RESTORE", None),
        ("RESTORE", "finish"),
    ]
    assert steps[-1].version == result.manifest_version
    assert {r.parameters["version"] for r in steps} == {str(v1)}
    assert not [k for k in lance.dataset(f"{root}/__manifest").metadata if k.startswith("lance_partitioned.staged")]

    # writes go on from the restored state; the undone rows stay undone
    write_table(PartitionedNamespace.load(root), _input(range(300, 302)))
    assert _lance_rows(root) == _expected(first, _input(range(300, 302)))

    # by time, in the session time zone (UTC in the tests), through the Spark entry point
    assert spark.conf.get("spark.sql.session.timeZone") == "UTC"
    again = spark_restore(root, timestamp=between.replace(tzinfo=None).isoformat(), spark=spark)
    assert again.restored_version == v1
    assert _lance_rows(root) == _expected(first)


def test_restore_to_the_latest_version_changes_nothing(tmp_path) -> None:
    root = str(tmp_path / "ns")
    ns = PartitionedNamespace.create(root, SCHEMA, ["c"])
    write_table(ns, _input(range(4)))
    latest = _latest(root)
    result = restore(root, version=latest)
    assert (result.changed, result.manifest_version, _latest(root)) == (False, latest, latest)
    assert "already the latest; nothing changed" in result.summary()


def test_bad_versions_and_times_are_one_line_and_change_nothing(tmp_path) -> None:
    root = str(tmp_path / "ns")
    ns = PartitionedNamespace.create(root, SCHEMA, ["c"])
    write_table(ns, _input(range(4)))
    latest = _latest(root)
    cases = [
        (dict(version=latest + 5), f"has no __manifest version {latest + 5}; the readable versions are 2..{latest}"),
        (dict(version=0), "__manifest version must be a positive integer, got 0"),
        (dict(version="2"), "__manifest version must be a positive integer, got '2'"),
        (dict(timestamp="2001-01-01T00:00:00Z"), "is before the first commit of"),
        (dict(timestamp="2001-01-01 00:00:00"), "has no time zone"),
        (dict(), "restore needs exactly one of version= or timestamp="),
        (dict(version=1, timestamp="2001-01-01T00:00:00Z"), "restore needs exactly one of version= or timestamp="),
    ]
    for kwargs, message in cases:
        with pytest.raises(InvalidInput) as info:
            restore(root, **kwargs)  # type: ignore[arg-type]
        assert message in str(info.value) and "\n" not in str(info.value), (kwargs, str(info.value))
    assert _latest(root) == latest


def test_restore_of_a_vacuumed_table_version_is_refused(tmp_path) -> None:
    """Lance's own cleanup (what vacuum runs) removed the table version the old manifest
    reads: one line naming the partition and version, and no commit. A vacuumed
    ``__manifest`` version is one line as well."""
    root = str(tmp_path / "ns")
    ns = PartitionedNamespace.create(root, SCHEMA, ["c"])
    write_table(ns, _input(range(4), ("US",)))
    old = ns.refresh().manifest_version
    (table,) = ns.partitions()
    write_table(ns, _input(range(4, 8), ("US",)))
    lance.dataset(table.uri).cleanup_old_versions(older_than=dt.timedelta(0), error_if_tagged_old_versions=False)
    assert table.read_version not in [v["version"] for v in lance.dataset(table.uri).versions()]
    latest = _latest(root)
    with pytest.raises(InvalidInput) as info:
        restore(root, version=old)
    text = str(info.value)
    assert "\n" not in text
    assert f"partition table {table.object_id} at version {table.read_version} is gone" in text
    assert _latest(root) == latest

    vacuum(root, dt.timedelta(0), allow_short_retention=True)
    with pytest.raises(
        InvalidInput, match=r"has no __manifest version 1; the readable versions are \d+\.\.\d+ \(versions before"
    ):
        restore(root, version=1)


def test_a_commit_racing_a_restore_is_never_lost(tmp_path) -> None:
    """A write lands between the restore's read and its commit: the restore's commit
    conflicts and it starts again on the new state (the write is in the history, before
    the restore); with one attempt it fails and the write stays, properties and all."""
    root = str(tmp_path / "ns")
    ns = PartitionedNamespace.create(root, SCHEMA, ["c"])
    first = _input(range(10))
    write_table(ns, first)
    v1 = ns.refresh().manifest_version
    ns.refresh().add_columns({"note": "string"})
    write_table(ns.refresh(), _input(range(10, 15), ("DE",)))
    racing = _input(range(50, 53), ("IT",))
    raced: list[int] = []

    def race() -> None:
        if not raced:
            write_table(PartitionedNamespace.load(root), racing)
            raced.append(_latest(root))

    with pytest.raises(ConcurrentModification, match="lost 1 races"):
        restore(root, version=v1, max_attempts=1, before_commit=race)
    after = PartitionedNamespace.load(root)
    assert after.schema.names == ["id", "c", "note"]  # its staged properties were never applied
    assert _lance_rows(root) == _expected(first, _input(range(10, 15), ("DE",)), racing)

    raced.clear()
    result = restore(root, version=v1, before_commit=race)
    assert result.attempts == 2
    rows = after.history().to_pylist()
    assert (rows[0]["version"], rows[0]["operation"]) == (result.manifest_version, "RESTORE")
    # the racing write committed, then the restore (its staged properties, never applied, are
    # removed after the lost race: RESTORE step=unstage) started again and undid it
    (write,) = [r for r in rows if r["version"] == raced[0]]
    assert write["operation"] == "WRITE" and dict(write["metrics"])["rows_added"] == racing.num_rows
    between = [r for r in rows if raced[0] < r["version"] <= result.manifest_version]
    assert {r["operation"] for r in between} == {"RESTORE"}
    assert [dict(r["parameters"]).get("step") for r in between[::-1]] == ["stage", "unstage", "stage", None, "finish"]
    assert _lance_rows(root) == _expected(first)
