"""A large ``__manifest`` version is looked up a few columns and rows at a time (``partitioning.state.lean_rows``).

Every test lowers the size from which a version is read lean to 0, so that small
namespaces take that path. Oracles: ``__manifest`` read whole with Lance's own reader
(rows and ``_rowaddr``), and the partition tables read back with Lance.
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pytest
from wide_namespace import START, day_rows, wide_namespace

import partitioning.state.loading as loading_module
import partitioning.state.namespace_state as state_module
from partitioning import PartitionedNamespace, TableCommit
from partitioning.errors import ConcurrentModification
from partitioning.state.loading import clear_state_cache
from partitioning.storage.locations import LocationPlanner, keyed_namespace_name, object_id_from_location, seed_named
from partitioning.storage.manifest import ManifestStore
from partitioning.tables.write import write_table


@pytest.fixture(autouse=True)
def lean(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loading_module, "LEAN_MIN_ROWS", 0)
    clear_state_cache()


def _wide(tmp_path: Path, partitions: int) -> str:
    root = wide_namespace(tmp_path, partitions)
    clear_state_cache()
    return root


def _lance_manifest(root: str) -> list[dict[str, Any]]:
    rows = lance.dataset(f"{root}/__manifest").to_table().to_pylist()
    return sorted(rows, key=lambda r: r["object_id"])


def _values(root: str, day: dt.date, country: str) -> list[int]:
    table = PartitionedNamespace.load(root).find_partition(1, {"day": day, "country": country})
    assert table is not None
    return sorted(lance.dataset(table.uri, version=table.read_version).to_table().column("v").to_pylist())


def _spy_reads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, Any]]:
    reads: list[tuple[Any, Any]] = []
    real = ManifestStore.rows_of

    def spy(ds: Any, columns: Any = None, filter: Any = None, **kwargs: Any) -> pa.Table:
        reads.append((columns, filter))
        return real(ds, columns, filter, **kwargs)

    monkeypatch.setattr(ManifestStore, "rows_of", staticmethod(spy))
    return reads


def test_a_load_reads_no_rows_and_an_append_into_an_existing_partition_reads_no_id_or_location(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _wide(tmp_path, 300)
    reads = _spy_reads(monkeypatch)
    ns = PartitionedNamespace.load(root)
    assert reads == []
    write_table(ns, day_rows(START, "C0", 5, first=100))
    monkeypatch.undo()
    read_columns = [c for c, _ in reads if c is not None]
    assert read_columns == [["partition_field_day", "partition_field_country"]]
    fetches = [f for c, f in reads if c is None]
    assert len(fetches) == 1 and fetches[0].startswith("_rowaddr IN"), reads  # tables and namespaces at once
    assert sorted(ns._state.manifest.to_pylist(), key=lambda r: r["object_id"]) == _lance_manifest(root)
    assert _values(root, START, "C0") == [0, 1, 2, *range(100, 105)]


def _id_or_location_reads(reads: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    """Reads of the ``object_id`` or ``location`` column (a whole-row read names no columns)."""
    return [(c, f) for c, f in reads if c is not None and {"object_id", "location"} & set(c)]


@pytest.mark.parametrize(("days", "country"), [(400, "NEW"), (3, "NEW")], ids=["new-day", "new-country-of-a-day"])
def test_a_new_partitions_first_commit_reads_no_id_or_location_and_it_lands_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, days: int, country: str
) -> None:
    """The write named the new levels under its own secret seed, so nothing can hold them:
    neither column is read (a new day: both levels new; an existing day: its country level)."""
    root = _wide(tmp_path, 120)
    day = START + dt.timedelta(days=days)
    ns = PartitionedNamespace.load(root)
    reads = _spy_reads(monkeypatch)
    write_table(ns, day_rows(day, country, 4))
    monkeypatch.undo()
    assert _id_or_location_reads(reads) == []
    assert all(c is not None or f.startswith("_rowaddr IN") for c, f in reads), reads
    assert sorted(ns._state.manifest.to_pylist(), key=lambda r: r["object_id"]) == _lance_manifest(root)
    assert _values(root, day, country) == [0, 1, 2, 3]
    tables = [r for r in _lance_manifest(root) if r["object_type"] == "table"]
    assert len(tables) == len({r["location"] for r in tables}) == 121


def test_a_retried_commit_looks_the_new_names_up_and_they_land_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a lost race the retry does not lean on the write's seed: it looks its new ids
    and location up, as a commit of unknown origin does."""
    root = _wide(tmp_path, 120)
    day = START + dt.timedelta(days=400)
    ns, other = PartitionedNamespace.load(root), PartitionedNamespace.load(root)
    original = PartitionedNamespace.commit_once
    seeds: list[bytes | None] = []

    def race(self: PartitionedNamespace, *args: Any, **kwargs: Any) -> int:
        if self is ns:
            seeds.append(kwargs.get("naming_seed"))
            if len(seeds) == 1:
                write_table(other, day_rows(START, "C0", 1, first=70))
        return original(self, *args, **kwargs)

    asked = _spy_location_checks(monkeypatch)
    monkeypatch.setattr(PartitionedNamespace, "commit_once", race)
    result = write_table(ns, day_rows(day, "NEW", 4))
    monkeypatch.undo()
    assert result.attempts == 2
    assert len(seeds) == 2 and isinstance(seeds[0], bytes) and seeds[1] is None
    new = ns.find_partition(1, {"day": day, "country": "NEW"})
    assert new is not None
    assert [new.location in a for a in asked] == [False, False, True]  # ns, other, ns's retry
    assert _values(root, day, "NEW") == [0, 1, 2, 3]
    assert _values(root, START, "C0") == [0, 1, 2, 70]
    tables = [r for r in _lance_manifest(root) if r["object_type"] == "table"]
    assert len(tables) == len({r["location"] for r in tables}) == 121


def test_only_the_names_a_writes_seed_made_count_as_new() -> None:
    seed, other_seed = b"s" * 32, b"t" * 32
    existing = {("v1", (START,)): "existingdayname0"}
    planner = LocationPlanner(1, ("day", "country"), {}, existing, seed)
    oid, location = planner.place((START, "US"))
    assert oid == f"v1$existingdayname0${keyed_namespace_name(seed, 'v1$existingdayname0', (START, 'US'))}$dataset"
    assert seed_named(seed, (START, "US"), oid, location) == ([oid.rsplit("$", 1)[0], oid], True)
    assert seed_named(seed, (START, "US"), oid, location + "x") == ([oid.rsplit("$", 1)[0], oid], False)
    assert seed_named(other_seed, (START, "US"), oid, location) == ([], False)
    assert seed_named(seed, (START, "FR"), oid, location) == ([], False)
    new_oid, new_location = planner.place((START + dt.timedelta(days=1), "US"))
    level1 = new_oid.split("$")[1]
    named, location_named = seed_named(seed, (START + dt.timedelta(days=1), "US"), new_oid, new_location)
    assert named == [f"v1${level1}", new_oid.rsplit("$", 1)[0], new_oid] and location_named
    everything_existing = LocationPlanner(1, ("day",), {}, {("v1", (START,)): "existingdayname0"}, seed)
    assert seed_named(seed, (START,), *everything_existing.place((START,))) == ([], False)


def test_a_location_another_row_holds_is_refused_for_a_new_table(tmp_path: Path) -> None:
    root = _wide(tmp_path, 50)
    ns = PartitionedNamespace.load(root)
    taken = ns.find_partition(1, {"day": START, "country": "C0"})
    assert taken is not None
    values = {"day": START + dt.timedelta(days=500), "country": "X"}
    new_id = object_id_from_location(ns.new_table_location(1, values))
    before = _lance_manifest(root)
    with pytest.raises(ConcurrentModification, match=re.escape(f"location '{taken.location}' is already table")):
        ns.commit_tables([TableCommit(1, values, taken.location, 1, object_id=new_id)])
    assert _lance_manifest(root) == before


def test_lookups_match_lances_own_read_rows_and_addresses(tmp_path: Path) -> None:
    root = _wide(tmp_path, 90)
    whole = lance.dataset(f"{root}/__manifest").to_table(with_row_address=True).to_pylist()
    by_id = {r["object_id"]: r for r in whole}
    state = PartitionedNamespace.load(root)._state
    tables = [r for r in whole if r["object_type"] == "table"]
    probe = tables[::7]
    keys = [(r["partition_field_day"], r["partition_field_country"]) for r in probe]
    found = state.find_tables(1, [*keys, (START, "nowhere"), (None, None)])
    assert {k: t.object_id for k, t in found.items()} == {k: r["object_id"] for k, r in zip(keys, probe, strict=True)}
    ids = [r["object_id"] for r in probe] + ["v1", "v1$no-such-id"]
    expected = {i: {k: v for k, v in by_id[i].items() if k != "_rowaddr"} for i in ids if i in by_id}
    assert state.rows_for(ids) == expected
    assert state.addresses_of(ids) == {i: by_id[i]["_rowaddr"] for i in ids if i in by_id}
    locations = [probe[0]["location"], "nowhere", "it's"]
    assert state.location_holders(locations) == [(probe[0]["object_id"], probe[0]["location"])]
    assert "manifest" not in state.__dict__


def test_a_row_another_client_duplicated_is_replaced_in_every_copy(tmp_path: Path) -> None:
    root = _wide(tmp_path, 40)
    manifest = lance.dataset(f"{root}/__manifest")
    copy = manifest.to_table(filter="object_type = 'table' AND partition_field_country = 'C0'").slice(0, 1)
    oid = copy.column("object_id")[0].as_py()
    day = copy.column("partition_field_day")[0].as_py()
    lance.write_dataset(copy, f"{root}/__manifest", mode="append")
    clear_state_cache()
    ns = PartitionedNamespace.load(root)
    assert ns._state.addresses_of([oid]) is None  # two rows: found by id, every copy
    write_table(ns, day_rows(day, "C0", 2, first=50))
    rows = [r for r in _lance_manifest(root) if r["object_id"] == oid]
    assert len(rows) == 1
    assert rows[0]["read_version"] == ns.find_partition(1, {"day": day, "country": "C0"}).read_version


def test_planning_a_scan_reads_the_version_whole_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _wide(tmp_path, 60)
    reads = _spy_reads(monkeypatch)
    ns = PartitionedNamespace.load(root)
    planned = ns.plan_scan("country = 'C1' AND day = DATE '2025-01-02'")
    monkeypatch.undo()
    assert reads == [(None, None)]
    expected = [
        r["object_id"]
        for r in _lance_manifest(root)
        if r["object_type"] == "table"
        and r["partition_field_country"] == "C1"
        and r["partition_field_day"] == dt.date(2025, 1, 2)
    ]
    assert [t.object_id for t in planned] == expected


def _spy_location_checks(monkeypatch: pytest.MonkeyPatch) -> list[set[str]]:
    asked: list[set[str]] = []
    holders = state_module.NamespaceState.location_holders

    def spy(state: Any, locations: Any) -> list[tuple[str, str]]:
        asked.append(set(locations))
        return holders(state, locations)

    monkeypatch.setattr(state_module.NamespaceState, "location_holders", spy)
    return asked


def test_a_spark_write_of_a_new_partition_does_not_look_its_names_up(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The driver's commit of a Spark write passes its writer's seed on, as ``write_table`` does."""
    from pipelines import write_partitioned

    root = _wide(tmp_path, 60)
    day = START + dt.timedelta(days=300)
    df = spark.createDataFrame(day_rows(day, "SPARK", 3).to_pandas())
    asked = _spy_location_checks(monkeypatch)
    write_partitioned(df, root, mode="append")
    monkeypatch.undo()
    assert asked == [set()]
    assert _values(root, day, "SPARK") == [0, 1, 2]
    assert len(PartitionedNamespace.load(root).partitions()) == 61
