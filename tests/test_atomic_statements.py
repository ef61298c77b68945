"""ALTER TABLE and DROP TABLE are all or nothing (issue 46).

- ``ALTER TABLE`` with several changes stores them as one schema change: a statement whose
  later change is refused changes nothing (it used to apply the changes before it).
- ``DROP TABLE`` without ``PURGE`` stopped at any file (a crash, a store error) leaves the
  table reading as its latest version or gone, never an older version.

Oracles: the rows each version shows, read with plain pylance, and the schema before.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pytest

import partitioning.storage.unborn as unborn
from partitioning import PartitionedNamespace
from partitioning.errors import NamespaceNotFound, PartitioningError, SpecError
from partitioning.storage.unborn import remove_manifest
from partitioning.tables.write import write_table
from pipelines.jvm.alter import alter_table

SCHEMA = pa.schema([("id", pa.int64()), ("country", pa.string()), ("amount", pa.int32())])


def seeded(root: Path) -> str:
    ns = PartitionedNamespace.create(str(root), SCHEMA, ["country"])
    for i in range(4):
        write_table(ns, pa.table({"id": [i], "country": ["US" if i % 2 else "DE"], "amount": [i]}, schema=SCHEMA))
    ns.add_columns({"note": pa.string()})
    return str(root)


def rows_at(root: str, version: int | None = None) -> list[dict[str, Any]]:
    manifest = lance.dataset(f"{root}/__manifest", version=version)
    out = []
    for row in manifest.to_table(filter="object_type = 'table'").to_pylist():
        out.extend(lance.dataset(f"{root}/{row['location']}", version=row["read_version"]).to_table().to_pylist())
    return sorted(out, key=lambda r: r["id"])


def spark_type(name: str) -> str:
    return json.dumps(name)


def test_an_alter_whose_second_change_is_refused_changes_nothing(tmp_path: Path) -> None:
    root = seeded(tmp_path / "t")
    before = PartitionedNamespace.load(root)
    changes = [
        {"kind": "drop", "path": ["amount"], "if_exists": False},
        {"kind": "drop", "path": ["country"], "if_exists": False},  # the spec's source: refused
    ]
    with pytest.raises(SpecError, match="cannot drop column 'country'"):
        alter_table(root, changes, None)
    after = PartitionedNamespace.load(root)
    assert after.manifest_version == before.manifest_version
    assert after.namespace_schema.to_json() == before.namespace_schema.to_json()


def test_an_alter_with_several_changes_is_one_schema_change(tmp_path: Path) -> None:
    root = seeded(tmp_path / "t")
    before = PartitionedNamespace.load(root).manifest_version
    changes = [
        {"kind": "add", "path": ["a"], "type": spark_type("integer"), "nullable": True, "position": None},
        {"kind": "rename", "path": ["note"], "new": "remark"},
        {"kind": "type", "path": ["amount"], "type": spark_type("long")},
        {"kind": "drop", "path": ["nope"], "if_exists": True},
    ]
    alter_table(root, changes, None)
    ns = PartitionedNamespace.load(root)
    assert ns.schema.names == ["id", "country", "amount", "remark", "a"]
    assert ns.schema.field("amount").type == pa.int64()
    made = [h for h in ns.history().to_pylist() if h["version"] > before]
    assert [h["operation"] for h in made] == ["EVOLVE_SCHEMA", "EVOLVE_SCHEMA"]  # the schema, then the lock rows
    assert rows_at(root) == rows_at(root, before)


def _files_under(root: str) -> int:
    return sum(1 for p in Path(root, "__manifest").rglob("*") if p.is_file())


def test_a_drop_stopped_at_any_file_leaves_the_latest_version_or_nothing(tmp_path: Path) -> None:
    template = seeded(tmp_path / "template")
    latest = lance.dataset(f"{template}/__manifest").version
    want = rows_at(template)
    total = _files_under(template)
    outcomes = set()
    for stop in range(total + 1):
        root = str(tmp_path / f"t{stop}")
        shutil.copytree(template, root)
        deleted = [0]
        real = unborn.delete_files

        def failing(
            base: str, uris: Any, options: Any = None, real: Any = real, stop: int = stop, deleted: list[int] = deleted
        ) -> list[str]:
            for uri in uris:
                if deleted[0] >= stop:
                    raise OSError(f"injected: the store failed after {stop} deletions")
                real(base, [uri], options)
                deleted[0] += 1
            return []

        unborn.delete_files = failing
        try:
            remove_manifest(root, None)
        except OSError:
            pass
        finally:
            unborn.delete_files = real
        try:
            ns = PartitionedNamespace.load(root)
        except (NamespaceNotFound, PartitioningError) as exc:
            left = list(Path(root, "__manifest", "_versions").glob("*.manifest"))
            assert isinstance(exc, NamespaceNotFound) and not left, f"stopped after {stop} files: {exc}"
            outcomes.add("gone")
            continue
        assert ns.manifest_version == latest, f"stopped after {stop} files: reads version {ns.manifest_version}"
        assert rows_at(root) == want
        outcomes.add("latest")
    assert outcomes == {"gone", "latest"}
