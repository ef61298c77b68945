"""The latest ``__manifest`` version found without listing (``partitioning.storage.manifest``),
against pylance's own answer (it lists ``_versions``): after commits this process did not
make (ours and another Lance client's), a namespace removed and made again, more new
versions than it steps through, hints that are no version, versions removed above a stale
start (by another client and by vacuum), and a purge."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import lance
import pyarrow as pa
import pytest
from lance.dataset import LanceOperation, Transaction

from partitioning.namespace import PartitionedNamespace
from partitioning.service.arrow import write_arrow
from partitioning.storage import manifest as latest
from partitioning.storage.unborn import purge_namespace
from partitioning.tables.vacuum_deletions import cleanup_versions

REPO = Path(__file__).resolve().parents[1]
APPEND = (
    "import sys, pyarrow as pa; sys.path.insert(0, {repo!r});"
    "from partitioning.service.arrow import write_arrow;"
    "[write_arrow({root!r}, pa.table({{'id': [i], 'k': ['a']}})) for i in range({n})]"
)


def appended_elsewhere(root: Path, n: int) -> None:
    code = APPEND.format(repo=str(REPO), root=str(root), n=n)
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)


def listed(root: Path) -> int:
    return lance.dataset(str(root / "__manifest")).version


def test_the_latest_version_is_pylances_after_commits_made_elsewhere(tmp_path):
    root = tmp_path / "ns"
    write_arrow(str(root), pa.table({"id": [0], "k": ["a"]}), partition_by=["k"])
    assert PartitionedNamespace.load(str(root)).manifest_version == listed(root)
    appended_elsewhere(root, 3)
    ns = PartitionedNamespace.load(str(root))
    assert ns.manifest_version == listed(root)
    assert sorted(
        r["id"] for t in ns.partitions() for r in lance.dataset(t.uri, version=t.read_version).to_table().to_pylist()
    ) == [0, 0, 1, 2]

    shutil.rmtree(root)  # made again, with fewer versions than this process saw
    write_arrow(str(root), pa.table({"id": [7], "k": ["b"]}), partition_by=["k"])
    ns = PartitionedNamespace.load(str(root))
    assert ns.manifest_version == listed(root)
    assert [t.values["k"] for t in ns.partitions()] == ["b"]


def test_more_new_versions_than_it_steps_through_are_listed(tmp_path, monkeypatch):
    root = tmp_path / "ns"
    write_arrow(str(root), pa.table({"id": [0], "k": ["a"]}), partition_by=["k"])
    PartitionedNamespace.load(str(root))
    monkeypatch.setattr(latest, "_MAX_STEPS", 2)
    for n in range(4):  # commits that write no hint
        committed_by_another_client(root, f"other.{n}")
    assert latest.latest_known(str(root / "__manifest"), None) is None
    assert PartitionedNamespace.load(str(root)).manifest_version == listed(root)


def manifest(root: Path) -> str:
    return str(root / "__manifest")


def hint(root: Path) -> Path:
    return root / "__manifest" / latest.HINT_FILE


def committed_by_another_client(root: Path, key: str) -> None:
    """A ``__manifest`` commit pylance makes on its own (it writes no hint)."""
    ds = lance.dataset(manifest(root))
    update = LanceOperation.UpdateConfig(table_metadata_updates=LanceOperation.UpdateMap({key: "x"}, False))
    lance.LanceDataset.commit(manifest(root), Transaction(ds.version, update), read_version=ds.version)


def ids(root: Path) -> list[int]:
    ns = PartitionedNamespace.load(str(root))
    return sorted(
        r["id"] for t in ns.partitions() for r in lance.dataset(t.uri, version=t.read_version).to_table().to_pylist()
    )


def test_a_new_process_starts_from_the_hint_every_commit_writes(tmp_path):
    root = tmp_path / "ns"
    write_arrow(str(root), pa.table({"id": [0], "k": ["a"]}), partition_by=["k"])
    appended_elsewhere(root, 5)
    assert int(hint(root).read_text()) == listed(root)
    latest._SEEN.pop(manifest(root), None)  # as a process that never opened it
    assert latest.latest_known(manifest(root), None) == listed(root)  # found without a listing
    committed_by_another_client(root, "other.a")
    committed_by_another_client(root, "other.b")
    latest._SEEN.pop(manifest(root), None)
    assert latest.latest_known(manifest(root), None) == listed(root) == int(hint(root).read_text()) + 2
    assert PartitionedNamespace.load(str(root)).manifest_version == listed(root)
    assert ids(root) == [0, 0, 1, 2, 3, 4]


@pytest.mark.parametrize(
    "text",
    [
        b"abc",
        b"-5",
        b"0",
        b"",
        b"1e3",
        b"3 4",
        b"\xff\xfe",
        "\u0661\u0662".encode(),
        b"99999999999999999999999",
        b"7" * 19,
    ],
)
def test_a_hint_that_is_no_version_it_has_is_ignored(tmp_path, text):
    root = tmp_path / "ns"
    write_arrow(str(root), pa.table({"id": [0], "k": ["a"]}), partition_by=["k"])
    write_arrow(str(root), pa.table({"id": [1], "k": ["b"]}))
    hint(root).write_bytes(text)
    latest._SEEN.pop(manifest(root), None)
    assert latest.latest_known(manifest(root), None) is None
    assert PartitionedNamespace.load(str(root)).manifest_version == listed(root)
    assert ids(root) == [0, 1]


def test_an_old_hint_steps_forward_or_lists(tmp_path, monkeypatch):
    root = tmp_path / "ns"
    write_arrow(str(root), pa.table({"id": [0], "k": ["a"]}), partition_by=["k"])
    for i in range(1, 5):
        write_arrow(str(root), pa.table({"id": [i], "k": ["a"]}))
    hint(root).write_text(" 2\n")
    latest._SEEN.pop(manifest(root), None)
    assert latest.latest_known(manifest(root), None) == listed(root)
    monkeypatch.setattr(latest, "_MAX_STEPS", 2)
    assert latest.latest_known(manifest(root), None) is None
    assert PartitionedNamespace.load(str(root)).manifest_version == listed(root)


def test_versions_removed_above_a_stale_start_are_not_a_latest(tmp_path):
    """A process that saw version 3 long ago, then versions 4.. removed by another client
    (a kept version below them, as vacuum keeps a live write's base): its next open and
    write still start from the latest, and every row stays."""
    root = tmp_path / "ns"
    write_arrow(str(root), pa.table({"id": [0], "k": ["a"]}), partition_by=["k"])
    for i in range(1, 6):
        write_arrow(str(root), pa.table({"id": [i], "k": ["a"]}))
    newest = listed(root)
    lance.dataset(manifest(root)).cleanup_old_versions(versions=list(range(4, newest)))
    assert [v["version"] for v in lance.dataset(manifest(root)).versions()] == [1, 2, 3, newest]
    latest._SEEN[manifest(root)] = 3
    assert PartitionedNamespace.load(str(root)).manifest_version == newest
    write_arrow(str(root), pa.table({"id": [9], "k": ["a"]}))
    assert ids(root) == [0, 1, 2, 3, 4, 5, 9]


def test_vacuum_notes_the_latest_before_removing_versions(tmp_path):
    """Vacuum's removal of ``__manifest`` versions above a kept one, with this process and
    the hint both at the kept one: the next open is the latest."""
    root = tmp_path / "ns"
    write_arrow(str(root), pa.table({"id": [0], "k": ["a"]}), partition_by=["k"])
    for i in range(1, 6):
        write_arrow(str(root), pa.table({"id": [i], "k": ["a"]}))
    newest = listed(root)
    hint(root).write_text("3")
    latest._SEEN[manifest(root)] = 3
    cleanup_versions(str(root), manifest(root), list(range(4, newest)), None)
    assert int(hint(root).read_text()) == newest
    assert PartitionedNamespace.load(str(root)).manifest_version == newest == listed(root)
    assert ids(root) == [0, 1, 2, 3, 4, 5]


def test_purge_removes_the_hint_and_a_half_written_one(tmp_path):
    root = tmp_path / "ns"
    write_arrow(str(root), pa.table({"id": [0], "k": ["a"]}), partition_by=["k"])
    assert hint(root).exists()
    (root / "__manifest" / f"{latest.HINT_FILE}.x1y2z3").write_text("1")  # a writer died before its rename
    (root / "notes.txt").write_text("not ours")
    purge_namespace(str(root), None)
    assert sorted(p.name for p in root.iterdir()) == ["notes.txt"]
