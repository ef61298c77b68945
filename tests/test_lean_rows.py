"""A large ``__manifest`` version is looked up a few columns and rows at a time (``partitioning.lean_rows``).

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

import partitioning.state as state_module
from partitioning import PartitionedNamespace, TableCommit
from partitioning.errors import ConcurrentModification
from partitioning.locations import object_id_from_location
from partitioning.manifest import ManifestStore
from partitioning.state import clear_state_cache
from partitioning.write import write_table


@pytest.fixture(autouse=True)
def lean(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(state_module, "LEAN_MIN_ROWS", 0)
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
    assert read_columns == [["object_type", "partition_field_day", "partition_field_country"]]
    assert all(c is not None or f.startswith("_rowaddr IN") for c, f in reads), reads
    assert sorted(ns._state.manifest.to_pylist(), key=lambda r: r["object_id"]) == _lance_manifest(root)
    assert _values(root, START, "C0") == [0, 1, 2, *range(100, 105)]


def test_a_new_partition_is_looked_up_by_id_and_lands_once(tmp_path: Path) -> None:
    root = _wide(tmp_path, 120)
    ns = PartitionedNamespace.load(root)
    day = START + dt.timedelta(days=400)
    write_table(ns, day_rows(day, "NEW", 4))
    assert sorted(ns._state.manifest.to_pylist(), key=lambda r: r["object_id"]) == _lance_manifest(root)
    assert _values(root, day, "NEW") == [0, 1, 2, 3]
    assert len(PartitionedNamespace.load(root).partitions()) == 121


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
