"""Re-reading only what changed in ``__manifest`` (issue 19: "re-read only what changed on a
retry"). Spark-free, real Lance.

Oracle: the newer version read in full by Lance's own reader (``to_table`` with row
addresses), row for row, in order, addresses included.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from partitioning import PartitionedNamespace
from partitioning.state.loading import clear_state_cache, read_state
from partitioning.state.rows import read_rows
from partitioning.state.upkeep import compact_manifest
from partitioning.storage.manifest import ManifestStore
from partitioning.tables.write import write_table

SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.string())])


def _data(keys: list[int]) -> pa.Table:
    return pa.table({"k": keys, "v": [f"r{k}" for k in keys]}, schema=SCHEMA)


def _lance_rows(root: str) -> tuple[list[dict[str, Any]], list[int]]:
    t = lance.dataset(f"{root}/__manifest").to_table(with_row_address=True)
    return t.drop_columns(["_rowaddr"]).to_pylist(), t.column("_rowaddr").to_pylist()


def _other_client(root: str, op: str, arg: int) -> None:
    """One commit by someone else (a fresh handle, or Lance itself)."""
    store = ManifestStore(root)
    if op == "append":
        write_table(PartitionedNamespace.load(root), _data([arg % 25]))
    elif op == "new":
        write_table(PartitionedNamespace.load(root), _data([100 + arg]))
    elif op == "compact":
        compact_manifest(store.dataset())
    elif op == "merge_insert":  # Lance's merge_insert: a new fragment and deletions in the old ones
        ds = store.dataset()
        ids = ds.to_table(columns=["object_id"], filter="object_type = 'table'").column(0).to_pylist()
        store.merge_rows(ds, ds.to_table(filter=f"object_id = '{ids[arg % len(ids)]}'"))
    elif op == "remove":
        ns = PartitionedNamespace.load(root)
        tables = ns.partitions()
        if len(tables) > 3:
            ns.remove_tables([tables[arg % len(tables)].object_id])
    elif op == "add_column":
        ns = PartitionedNamespace.load(root)
        ns.add_columns(pa.schema([(f"c{len(ns.schema)}", pa.int64())]))


@pytest.fixture
def root(tmp_path: Path) -> str:
    ns = PartitionedNamespace.create(str(tmp_path / "ns"), SCHEMA, ["k"])
    write_table(ns, _data(list(range(20))))
    return ns.root


KINDS = ["append", "new", "compact", "merge_insert", "remove", "add_column"]
OPS = st.lists(
    st.tuples(st.sampled_from(KINDS), st.integers(0, 99)),
    min_size=1,
    max_size=5,
)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS)
def test_a_refresh_reads_what_lance_reads(tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, int]]) -> None:
    ns = PartitionedNamespace.create(str(tmp_path_factory.mktemp("ns") / "ns"), SCHEMA, ["k"])
    write_table(ns, _data(list(range(20))))
    root = ns.root
    clear_state_cache()
    before = read_state(ManifestStore(root).dataset(), root)
    assert before.read is not None
    for op, arg in ops:
        _other_client(root, op, arg)
    clear_state_cache()
    after = read_state(ManifestStore(root).dataset(), root, previous=before)
    rows, addresses = _lance_rows(root)
    assert after.manifest.to_pylist() == rows
    assert after.row_addresses is not None and after.row_addresses.to_pylist() == addresses
    assert after.manifest.schema == lance.dataset(f"{root}/__manifest").to_table().schema


def test_after_another_writers_append_only_its_fragment_and_the_live_addresses_are_read(
    root: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    compact_manifest(ManifestStore(root).dataset())
    clear_state_cache()
    mine = PartitionedNamespace.load(root)
    _other_client(root, "append", 4)
    clear_state_cache()  # as when the other writer is another process

    scans: list[Any] = []
    fragment_reads: list[Any] = []
    full, part = lance.LanceDataset.to_table, lance.fragment.LanceFragment.to_table
    monkeypatch.setattr(lance.LanceDataset, "to_table", lambda self, *a, **k: scans.append(k) or full(self, *a, **k))
    monkeypatch.setattr(
        lance.fragment.LanceFragment,
        "to_table",
        lambda self, *a, **k: fragment_reads.append(k.get("columns")) or part(self, *a, **k),
    )
    mine.refresh()
    monkeypatch.undo()

    assert scans == []
    assert sorted(map(str, fragment_reads)) == ["None", "[]"]  # the new fragment; the base's live rows
    rows, _ = _lance_rows(root)
    assert mine._state.manifest.to_pylist() == rows


def test_a_derived_state_is_no_base_for_a_partial_read(root: str) -> None:
    """A state a commit derived knows no addresses: the next refresh reads in full (and right)."""
    clear_state_cache()
    mine = PartitionedNamespace.load(root)
    write_table(mine, _data([3]))
    assert mine._state.read is None
    _other_client(root, "append", 5)
    clear_state_cache()
    mine.refresh()
    rows, addresses = _lance_rows(root)
    assert mine._state.manifest.to_pylist() == rows
    assert mine._state.row_addresses is not None and mine._state.row_addresses.to_pylist() == addresses
    assert read_rows(lance.dataset(f"{root}/__manifest")).rows.to_pylist() == rows
