"""The latest ``__manifest`` version found without listing (``partitioning.storage.latest``),
against pylance's own answer (it lists ``_versions``), after commits this process did not
make, a namespace removed and made again, and more new versions than it steps through."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import lance
import pyarrow as pa

from partitioning.namespace import PartitionedNamespace
from partitioning.service.arrow import write_arrow
from partitioning.storage import manifest as latest

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
    appended_elsewhere(root, 4)
    assert latest.latest_known(str(root / "__manifest"), None) is None
    assert PartitionedNamespace.load(str(root)).manifest_version == listed(root)
