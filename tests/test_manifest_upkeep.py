"""``__manifest`` upkeep without a user (issue 19, item 2): compaction right after commits, folding
in the commit itself. Spark-free, real Lance.

Oracles: rows of ``__manifest`` read back with Lance's own reader at the versions before and
after; row counts kept by the test as it writes; Lance's own ``merge_insert`` run on a copy
of the same manifest; Lance's version list and raw transaction properties.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from partitioning import PartitionedNamespace, TableCommit
from partitioning.errors import ConcurrentModification, InvalidInput
from partitioning.state.loading import clear_state_cache
from partitioning.state.upkeep import compact_manifest, fold_merge, maybe_compact_manifest, needs_compaction
from partitioning.storage.history import OPERATION_KEY, history_table
from partitioning.storage.manifest import ManifestStore
from partitioning.tables.vacuum import vacuum
from partitioning.tables.write import write_table

SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.string())])
EVERY = 6


def _data(keys: list[int]) -> pa.Table:
    return pa.table({"k": keys, "v": [f"r{k}" for k in keys]}, schema=SCHEMA)


def _namespace(tmp_path: Path, partitions: int = 30) -> str:
    ns = PartitionedNamespace.create(str(tmp_path / "ns"), SCHEMA, ["k"])
    write_table(ns, _data(list(range(partitions))))
    return ns.root


def _append(root: str, keys: list[int]) -> None:
    write_table(PartitionedNamespace.load(root), _data(keys))


def _manifest(root: str, version: int | None = None) -> lance.LanceDataset:
    return lance.dataset(f"{root}/__manifest", version=version)


def _rows(root: str, version: int | None = None) -> list[dict[str, Any]]:
    return sorted(_manifest(root, version).to_table().to_pylist(), key=lambda r: r["object_id"])


def _plan(root: str, version: int, filter_sql: str | None) -> list[tuple[Any, ...]]:
    plan = PartitionedNamespace.load(root, manifest_version=version).plan_scan(filter_sql)
    return sorted((t.object_id, t.location, t.read_version) for t in plan)


def _counts(root: str) -> Counter[int]:
    """Rows per partition value, each table read with Lance at its recorded read_version."""
    out: Counter[int] = Counter()
    for table in PartitionedNamespace.load(root).partitions():
        out[table.values["k"]] += lance.dataset(table.uri, version=table.read_version).count_rows()
    return out


def _data_files(root: str) -> set[str]:
    return set(os.listdir(f"{root}/__manifest/data"))


# -- the hook after many small commits ------------------------------------------------------------
def test_the_hook_keeps_the_manifest_small_and_every_row_and_plan_identical(tmp_path: Path) -> None:
    root = _namespace(tmp_path)
    written = Counter(range(30))
    compactions = []
    fragments_after_hook = []
    for i in range(48):
        keys = [(i * 7) % 30] if i % 8 else [(i * 7) % 30, 100 + i]  # sometimes a new partition
        _append(root, keys)
        written.update(keys)
        committed = _manifest(root)
        rows_before = _rows(root)
        done = maybe_compact_manifest(committed, every=EVERY)
        if done is not None:
            compactions.append(done)
            assert done.version == committed.version + 1
            assert done.fragments_before == len(committed.get_fragments())
            assert done.fragments_after == len(_manifest(root).get_fragments()) == 1
            assert done.rows == committed.count_rows() == len(rows_before)
            assert _rows(root, done.version) == rows_before
            for query in ("k = 7", "k >= 100", None):
                assert _plan(root, done.version, query) == _plan(root, committed.version, query)
        fragments_after_hook.append(len(_manifest(root).get_fragments()))

    assert len(compactions) >= 5
    assert max(fragments_after_hook) <= EVERY
    assert _counts(root) == written
    ns = PartitionedNamespace.load(root)
    assert [t.location for t in ns.plan_scan("k = 7")] == [ns.find_partition(1, {"k": 7}).location]


def test_without_the_hook_fragments_pile_up(tmp_path: Path) -> None:
    """The control: commits without upkeep (Lance's plain ``merge_insert`` through
    ``ManifestStore.merge_rows``) leave one more fragment each; the check says so, and not after compaction."""
    root = _namespace(tmp_path)
    store = ManifestStore(root)
    tables = store.dataset().to_table(filter="object_type = 'table'").column("object_id").to_pylist()
    for object_id in tables[: EVERY + 2]:  # one table row rewritten per commit, without upkeep (as another client's)
        ds = store.dataset()
        store.merge_rows(ds, ds.to_table(filter=f"object_id = '{object_id}'"))
    assert len(_manifest(root).get_fragments()) >= EVERY + 1
    assert needs_compaction(_manifest(root), every=EVERY)
    assert compact_manifest(_manifest(root)) is not None
    assert len(_manifest(root).get_fragments()) == 1
    assert not needs_compaction(_manifest(root), every=EVERY)


# -- races ----------------------------------------------------------------------------------------
def _piled_up(tmp_path: Path) -> str:
    root = _namespace(tmp_path)
    for i in range(EVERY + 1):
        _append(root, [i])
    return root


def test_a_compaction_that_loses_the_race_is_dropped_without_a_trace(tmp_path: Path) -> None:
    """Compaction planned on version V, a writer commits V+1 before the compaction's commit."""
    root = _piled_up(tmp_path)
    stale = _manifest(root)
    assert needs_compaction(stale, every=EVERY)
    _append(root, [3, 200])
    expected, latest, files = _rows(root), _manifest(root).version, _data_files(root)

    assert maybe_compact_manifest(stale, every=EVERY) is None
    with pytest.raises(ConcurrentModification):
        compact_manifest(stale)

    assert _manifest(root).version == latest
    assert _rows(root) == expected
    assert _data_files(root) == files
    assert _counts(root) == Counter({**dict.fromkeys(range(30), 1), **dict.fromkeys(range(EVERY + 1), 2), 3: 3, 200: 1})


def test_a_writer_whose_base_was_compacted_gets_a_conflict_and_rebases(tmp_path: Path) -> None:
    root = _piled_up(tmp_path)
    writer = PartitionedNamespace.load(root)
    table = writer.find_partition(1, {"k": 5})
    assert table is not None
    done = compact_manifest(ManifestStore(root))
    assert done is not None

    recorded = TableCommit(1, {"k": 5}, table.location, table.read_version)
    with pytest.raises(ConcurrentModification):
        writer.commit_once([recorded])
    version = writer.commit_tables([recorded])
    assert version == done.version + 1
    assert _counts(root) == Counter({**dict.fromkeys(range(30), 1), **dict.fromkeys(range(EVERY + 1), 2)})


def test_the_hook_never_raises(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    assert maybe_compact_manifest(str(tmp_path / "nothing")) is None

    root = _piled_up(tmp_path)
    newest = max(_manifest(root).get_fragments(), key=lambda f: f.fragment_id)
    os.remove(f"{root}/__manifest/data/{newest.data_files()[0].path}")
    with caplog.at_level(logging.WARNING, logger="partitioning.state.upkeep"):
        assert maybe_compact_manifest(ManifestStore(root), every=EVERY) is None
    assert any("__manifest upkeep skipped" in r.getMessage() for r in caplog.records)

    with pytest.raises(InvalidInput, match="every"):
        maybe_compact_manifest(root, every=1)


# -- history and vacuum ---------------------------------------------------------------------------
def test_history_shows_the_compaction_and_vacuum_keeps_every_row(tmp_path: Path) -> None:
    root = _piled_up(tmp_path)
    before = _manifest(root)
    done = maybe_compact_manifest(ManifestStore(root), every=EVERY)
    assert done is not None

    txn = _manifest(root).read_transaction(done.version)
    assert isinstance(txn.operation, lance.LanceOperation.Rewrite)
    assert txn.transaction_properties[OPERATION_KEY] == "OPTIMIZE_MANIFEST"
    history = history_table(root).to_pylist()
    assert [h["version"] for h in history] == [done.version, *range(before.version, 0, -1)]
    top = history[0]
    assert top["operation"] == "OPTIMIZE_MANIFEST"
    assert dict(top["parameters"]) == {"trigger": "auto"}
    metrics = dict(top["metrics"])
    assert (metrics["fragments_before"], metrics["fragments_after"]) == (len(before.get_fragments()), 1)
    assert metrics["rows"] == before.count_rows()
    assert [h["operation"] for h in history[1 : EVERY + 2]] == ["WRITE"] * (EVERY + 1)
    assert "UNKNOWN" not in {h["operation"] for h in history}

    expected = _counts(root)
    later = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=1)
    vacuum(root, dt.timedelta(0), allow_short_retention=True, now=later)
    assert [v["version"] for v in _manifest(root).versions()] == [done.version]
    assert _counts(root) == expected
    assert _rows(root) == _rows(root, done.version)


# -- folding inside the commit --------------------------------------------------------------------
def _twins(tmp_path: Path) -> tuple[lance.LanceDataset, ManifestStore, lance.LanceDataset]:
    """Two copies of one piled-up ``__manifest``: one to fold into, one for Lance's merge_insert."""
    root = _piled_up(tmp_path)
    for name in ("a", "b"):
        shutil.copytree(f"{root}/__manifest", tmp_path / name / "__manifest")
    oracle = ManifestStore(str(tmp_path / "b"))
    return lance.dataset(str(tmp_path / "a" / "__manifest")), oracle, oracle.dataset()


def _changed(ds: lance.LanceDataset, ids: list[str], read_version: int) -> pa.Table:
    rows = ds.to_table(filter=" OR ".join(f"object_id = '{i}'" for i in ids))
    return rows.set_column(
        rows.schema.get_field_index("read_version"), "read_version", pa.array([read_version] * len(rows), pa.uint64())
    )


def _table_ids(ds: lance.LanceDataset) -> list[str]:
    return sorted(ds.to_table(columns=["object_id"], filter="object_type = 'table'").column(0).to_pylist())


@pytest.mark.parametrize("case", ["update", "insert", "delete", "update_lock_row_only"])
def test_fold_merge_writes_what_merge_insert_writes_in_two_fragments(tmp_path: Path, case: str) -> None:
    folded, store, oracle = _twins(tmp_path)
    ids = _table_ids(folded)
    locks = ["v1"]
    upserts = _changed(folded, [ids[0], ids[-1], *locks] if case != "update_lock_row_only" else locks, 99)
    deleted: list[str] = []
    if case == "insert":
        new = _changed(folded, [ids[1]], 7)
        new = new.set_column(0, "object_id", pa.array(["v1$new0000000000000$dataset"], pa.string()))
        upserts = pa.concat_tables([upserts, new.cast(upserts.schema)])
    if case == "delete":
        deleted = [ids[2], ids[-2]]

    committed = fold_merge(folded, upserts, delete_ids=deleted, transaction_properties={"x": "y"})
    expected = store.merge_rows(oracle, upserts, delete_ids=deleted)

    assert committed is not None
    assert committed.version == expected.version == folded.version + 1
    assert sorted(committed.to_table().to_pylist(), key=lambda r: r["object_id"]) == sorted(
        expected.to_table().to_pylist(), key=lambda r: r["object_id"]
    )
    assert len(committed.get_fragments()) == 2
    assert committed.read_transaction(committed.version).transaction_properties == {"x": "y"}


def test_fold_merge_declines_what_is_not_small_and_conflicts_like_merge_insert(tmp_path: Path) -> None:
    folded, _, _ = _twins(tmp_path)
    ids = _table_ids(folded)
    twice = _changed(folded, [ids[0]], 5)
    assert fold_merge(folded, pa.concat_tables([twice, twice])) is None
    assert fold_merge(folded, _changed(folded, ids[:3], 5), max_rows=2) is None
    assert lance.dataset(folded.uri).version == folded.version

    first = fold_merge(folded, _changed(folded, [ids[0], "v1"], 5))
    assert first is not None
    with pytest.raises(ConcurrentModification):
        fold_merge(folded, _changed(folded, [ids[1], "v1"], 6))
    latest = lance.dataset(folded.uri)
    assert latest.version == first.version
    assert pc.sum(pc.equal(latest.to_table().column("read_version"), 5)).as_py() == 2


def test_two_folds_on_one_compacted_version_conflict(tmp_path: Path) -> None:
    """With nothing after the base, both folds change only the base's deletions: the second must
    still lose, or the lock row would be upserted twice."""
    folded, _, _ = _twins(tmp_path)
    compacted = compact_manifest(folded)
    assert compacted is not None and len(compacted.dataset.get_fragments()) == 1
    ids = _table_ids(compacted.dataset)
    first = fold_merge(compacted.dataset, _changed(compacted.dataset, ["v1", ids[0]], 5))
    assert first is not None
    with pytest.raises(ConcurrentModification):
        fold_merge(compacted.dataset, _changed(compacted.dataset, ["v1", ids[1]], 6))
    latest = lance.dataset(folded.uri).to_table()
    assert pc.sum(pc.equal(latest.column("object_id"), "v1")).as_py() == 1
    assert lance.dataset(folded.uri).version == first.version


# -- deleting base rows by row address ------------------------------------------------------------
def _deletes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The predicates of every ``LanceFragment.delete`` call from now on."""
    seen: list[str] = []
    original = lance.fragment.LanceFragment.delete

    def spy(self: Any, predicate: str) -> Any:
        seen.append(predicate)
        return original(self, predicate)

    monkeypatch.setattr(lance.fragment.LanceFragment, "delete", spy)
    return seen


def _addresses(ds: lance.LanceDataset) -> dict[str, int]:
    """Lance's own ``_rowaddr`` of every live row of ``ds``."""
    t = ds.to_table(columns=["object_id"], with_row_address=True)
    return dict(zip(t.column("object_id").to_pylist(), t.column("_rowaddr").to_pylist(), strict=True))


@pytest.mark.parametrize("addresses", ["right", "swapped", "unknown"])
def test_fold_merge_deletes_base_rows_by_address_only_when_they_hold_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, addresses: str
) -> None:
    """Given the addresses, the base rows go by ``_rowaddr`` (no scan); addresses that point
    at other rows (another client's, a bug) are checked and the rows are found by id instead:
    either way the result is Lance's own ``merge_insert`` row for row."""
    folded, store, oracle = _twins(tmp_path)
    compacted = compact_manifest(folded)
    assert compacted is not None
    base = compacted.dataset
    oracle = lance.dataset(oracle.uri)
    ids = _table_ids(base)
    upserts = _changed(base, [ids[0], ids[-1], "v1"], 99)
    deleted = [ids[2]]
    known = _addresses(base)
    if addresses == "swapped":
        known[ids[0]], known[ids[5]] = known[ids[5]], known[ids[0]]
    lookup = None if addresses == "unknown" else lambda wanted: {i: known[i] for i in wanted if i in known}
    seen = _deletes(monkeypatch)

    committed = fold_merge(base, upserts, delete_ids=deleted, addresses=lookup)
    expected = store.merge_rows(oracle, upserts, delete_ids=deleted)

    assert committed is not None
    assert sorted(committed.to_table().to_pylist(), key=lambda r: r["object_id"]) == sorted(
        expected.to_table().to_pylist(), key=lambda r: r["object_id"]
    )
    assert len(seen) == 1
    assert seen[0].startswith("_rowaddr IN (" if addresses == "right" else "object_id IN (")


def test_a_fresh_handle_folds_by_address_and_a_derived_state_by_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A namespace loaded from ``__manifest`` knows its rows' addresses; the state a commit derives
    does not (its rows moved) and must not pass the old ones on: the next commit on the same
    handle deletes by id. Rows after both equal ``__manifest`` read with Lance, and counts the test's."""
    root = _namespace(tmp_path)
    compact_manifest(_manifest(root))
    clear_state_cache()  # as in a new process: no state derived in this one
    ns = PartitionedNamespace.load(root)
    assert ns._state.row_addresses is not None
    assert ns._state.addresses_of(["v1"]) == {"v1": _addresses(_manifest(root))["v1"]}
    seen = _deletes(monkeypatch)

    write_table(ns, _data([4, 9]))
    assert ns._state.row_addresses is None
    write_table(ns, _data([4, 11]))

    assert [p.split(" ")[0] for p in seen] == ["_rowaddr", "object_id"]
    assert sorted(ns._state.manifest.to_pylist(), key=lambda r: r["object_id"]) == _rows(root)
    assert _counts(root) == Counter({**Counter(range(30)), 4: 3, 9: 2, 11: 2})


@pytest.mark.parametrize("where", ["base", "tail"])
def test_a_row_another_client_duplicated_is_replaced_with_every_copy(tmp_path: Path, where: str) -> None:
    """Two ``__manifest`` rows with one table's id (written with Lance by another client):
    an append into that partition leaves exactly one row for it, as Lance's own
    ``merge_insert`` on a copy of the same manifest does."""
    root = _namespace(tmp_path)
    compact_manifest(_manifest(root))
    ds = _manifest(root)
    target = _table_ids(ds)[3]
    copy = ds.to_table(filter=f"object_id = '{target}'")
    if where == "base":
        merged = pa.concat_tables([ds.to_table(), copy])
        lance.write_dataset(merged, ds.uri, mode="overwrite", schema=ds.schema)
        compact_manifest(_manifest(root))
    else:
        lance.write_dataset(copy, ds.uri, mode="append")
    ids = _manifest(root).to_table(columns=["object_id"]).column(0).to_pylist()
    assert ids.count(target) == 2
    clear_state_cache()
    ns = PartitionedNamespace.load(root)
    table = next(t for t in ns.partitions() if t.object_id == target)
    write_table(ns, _data([table.values["k"]]))
    after = _manifest(root).to_table(columns=["object_id"]).column(0).to_pylist()
    assert after.count(target) == 1
    assert sorted(after) == sorted(set(ids))
