"""Replacing a table in one step, Spark-free (issue 46): ``partitioning.tables.replace``.

A replace makes the new schema, spec and rows visible in one ``__manifest`` commit and keeps
the versions before it readable; a failure at any step (or a crash there) leaves every
version reading exactly as it did. A create makes the first readable version hold the rows.
Oracles: the rows each version shows are read with plain pylance (each partition dataset
at the ``read_version`` its ``__manifest`` row records), the bytes of every file that
existed before, and the rows written.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pytest

import partitioning.state.commits as commits
import partitioning.tables.replace as replace_module
from partitioning import PartitionedNamespace
from partitioning.errors import ConcurrentModification, NamespaceAlreadyExists, NamespaceNotFound, SchemaError
from partitioning.spec.field_ids import field_id_of
from partitioning.spec.transforms import BucketTransform, IdentityTransform
from partitioning.storage.manifest import ManifestStore
from partitioning.storage.unborn import discard_uncreated
from partitioning.tables.replace import plan_replacement
from partitioning.tables.write import write_table

OLD = pa.schema([("id", pa.int64()), ("country", pa.string()), ("amount", pa.float64())])
NEW = pa.schema([("id", pa.int64()), ("country", pa.int32()), ("note", pa.string())])
NEW_ROWS = pa.table({"id": [10, 11, 12], "country": [1, 2, 1], "note": ["a", None, "c"]}, schema=NEW)
BY_ID = [(BucketTransform(4), ["id"], None)]


class Injected(Exception):
    """A failure the test injects into one step of a replace."""


def versions_as_read(root: str) -> dict[int, list[tuple[Any, ...]]]:
    """Every readable ``__manifest`` version's rows, read with plain pylance."""
    manifest = lance.dataset(f"{root}/__manifest")
    out = {}
    for v in manifest.versions():
        version = v["version"]
        ds = lance.dataset(f"{root}/__manifest", version=version)
        if not ds.metadata:
            continue  # the first commit of a create, before its properties
        rows = []
        for row in ds.to_table(filter="object_type = 'table'").to_pylist():
            table = lance.dataset(f"{root}/{row['location']}", version=row["read_version"]).to_table()
            rows.extend(tuple(sorted(r.items())) for r in table.to_pylist())
        out[version] = sorted(rows, key=repr)
    return out


def schemas(root: str, versions: list[int]) -> dict[int, str]:
    return {v: PartitionedNamespace.load(root, manifest_version=v).namespace_schema.to_json() for v in versions}


def file_bytes(root: str) -> dict[str, str]:
    out = {}
    for dirpath, _, names in os.walk(root):
        for name in names:
            path = Path(dirpath, name)
            out[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


@pytest.fixture
def seeded(tmp_path: Path) -> str:
    root = str(tmp_path / "orders")
    ns = PartitionedNamespace.create(root, OLD, ["country"])
    write_table(ns, pa.table({"id": [1, 2, 3], "country": ["US", "DE", "FR"], "amount": [1.0, 2.0, 3.0]}))
    write_table(ns, pa.table({"id": [4], "country": ["US"], "amount": [4.0]}))
    return root


def latest(root: str) -> int:
    return lance.dataset(f"{root}/__manifest").version


def test_a_replace_commits_schema_spec_and_rows_together_and_keeps_history(seeded: str) -> None:
    before = versions_as_read(seeded)
    old_schemas = schemas(seeded, list(before))
    old_next = PartitionedNamespace.load(seeded).namespace_schema.next_field_id
    replacement = plan_replacement(seeded, NEW, BY_ID, kind="replace")
    result = write_table(replacement.view(None), NEW_ROWS, mode="overwrite")

    after = versions_as_read(seeded)
    assert {v: after[v] for v in before} == before  # every earlier version reads as it did
    assert schemas(seeded, list(before)) == old_schemas
    assert after[latest(seeded)] == sorted((tuple(sorted(r.items())) for r in NEW_ROWS.to_pylist()), key=repr)
    new_versions = sorted(set(after) - set(before))
    # only the rows commit changes what readers see: earlier new versions read the old rows
    visible = [v for v in new_versions if after[v] != before[max(before)]]
    assert visible and visible[0] == result.manifest_version
    ns = PartitionedNamespace.load(seeded)
    assert str(ns.current_spec) == "v2[id_bucket=bucket[4](0)]"
    ids = {f.name: field_id_of(f) for f in ns.schema}
    assert ids["id"] == 0  # the same column keeps its id
    assert ids["country"] >= old_next and ids["note"] >= old_next  # another type or a new column: fresh ids
    assert ns.namespace_schema.next_field_id > max(ids.values())
    history = ns.history().to_pylist()
    made = [h for h in history if h["version"] > max(before)]
    assert {h["operation"] for h in made} == {"REPLACE"}
    assert [dict(h["parameters"]).get("step") for h in made[::-1]] == ["columns", "stage", None, "finish"]


def test_a_replace_with_the_current_spec_keeps_its_id(seeded: str) -> None:
    same = pa.schema([("id", pa.int64()), ("country", pa.string())])
    replacement = plan_replacement(seeded, same, [(IdentityTransform(), ["country"], None)], kind="replace")
    assert replacement.spec.spec_id == 1
    write_table(replacement.view(None), pa.table({"id": [7], "country": ["NZ"]}), mode="overwrite")
    ns = PartitionedNamespace.load(seeded)
    assert sorted(ns.specs) == [1]
    assert [p.values for p in ns.partitions()] == [{"country": "NZ"}]
    assert versions_as_read(seeded)[latest(seeded)] == [(("country", "NZ"), ("id", 7))]


def _fail(*_: Any, **__: Any) -> Any:
    raise Injected("injected")


STEPS = {
    # the partition_field_* columns the new spec needs
    "columns": (replace_module, "add_manifest_columns"),
    # the staged properties
    "stage": (replace_module, "stage_properties"),
    # the one rows commit
    "rows": (ManifestStore, "merge_rows"),
}


@pytest.mark.parametrize("crash", [False, True], ids=["error", "crash"])
@pytest.mark.parametrize("step", sorted(STEPS))
def test_a_failure_at_any_step_leaves_every_version_as_it_was(
    seeded: str, monkeypatch: pytest.MonkeyPatch, step: str, crash: bool
) -> None:
    """An error (cleaned up after) or a crash (nothing cleaned up) before, at or after each
    commit of a replace: the files that existed are untouched and every version, the latest
    included, reads the same rows under the same schema."""
    before = versions_as_read(seeded)
    old_schemas = schemas(seeded, list(before))
    files = file_bytes(seeded)
    replacement = plan_replacement(seeded, NEW, BY_ID, kind="replace")
    monkeypatch.setattr(*STEPS[step], _fail)
    if crash:
        monkeypatch.setattr(replace_module, "unstage_properties", lambda *a, **k: None)
    with pytest.raises(Injected):
        write_table(replacement.view(None), NEW_ROWS, mode="overwrite")
    monkeypatch.undo()
    after = versions_as_read(seeded)
    assert {v: after[v] for v in before} == before
    assert after[latest(seeded)] == before[max(before)]
    assert schemas(seeded, [latest(seeded)])[latest(seeded)] == old_schemas[max(before)]
    now = file_bytes(seeded)
    assert {k: now.get(k) for k in files if not k.startswith("__manifest/")} == {
        k: v for k, v in files.items() if not k.startswith("__manifest/")
    }
    assert PartitionedNamespace.load(seeded).current_spec.spec_id == 1
    # the table takes a replace afterwards as if nothing had happened
    write_table(plan_replacement(seeded, NEW, BY_ID, kind="replace").view(None), NEW_ROWS, mode="overwrite")
    assert len(versions_as_read(seeded)[latest(seeded)]) == NEW_ROWS.num_rows


def test_a_failed_last_properties_commit_does_not_fail_a_replace_that_committed(
    seeded: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    replacement = plan_replacement(seeded, NEW, BY_ID, kind="replace")
    monkeypatch.setattr(commits, "commit_metadata", _once_then_fail(commits.commit_metadata))
    write_table(replacement.view(None), NEW_ROWS, mode="overwrite")
    monkeypatch.undo()
    ns = PartitionedNamespace.load(seeded)
    assert ns.schema.names == ["id", "country", "note"]  # applied, still staged
    assert len(versions_as_read(seeded)[latest(seeded)]) == 3


def _once_then_fail(real: Any) -> Any:
    calls = []

    def call(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) > 1:
            raise OSError("injected: the store went away")
        return real(*args, **kwargs)

    return call


def test_a_schema_change_while_the_replace_runs_fails_it_and_changes_nothing(seeded: str) -> None:
    replacement = plan_replacement(seeded, NEW, BY_ID, kind="replace")
    view = replacement.view(None)
    PartitionedNamespace.load(seeded).add_columns({"extra": pa.int16()})
    before = versions_as_read(seeded)
    with pytest.raises(ConcurrentModification, match="changed while the replace ran"):
        write_table(view, NEW_ROWS, mode="overwrite")
    assert versions_as_read(seeded) == before


def test_rows_appended_while_the_replace_runs_are_replaced_too(seeded: str) -> None:
    replacement = plan_replacement(seeded, NEW, BY_ID, kind="replace")

    def append(_: pa.Table) -> None:
        ns = PartitionedNamespace.load(seeded)
        write_table(ns, pa.table({"id": [99], "country": ["JP"], "amount": [9.0]}))

    write_table(replacement.view(None), NEW_ROWS, mode="overwrite", before_commit=append)
    rows = versions_as_read(seeded)[latest(seeded)]
    assert sorted(dict(r)["id"] for r in rows) == [10, 11, 12]


def test_plans_refuse_what_the_statement_cannot_do(seeded: str, tmp_path: Path) -> None:
    with pytest.raises(NamespaceAlreadyExists):
        plan_replacement(seeded, NEW, BY_ID, kind="create")
    with pytest.raises(NamespaceNotFound):
        plan_replacement(str(tmp_path / "none"), NEW, BY_ID, kind="replace")
    with pytest.raises(SchemaError, match="unknown column 'nope'"):
        plan_replacement(seeded, NEW, [(IdentityTransform(), ["nope"], None)], kind="replace")


def test_a_create_makes_its_first_readable_version_with_its_rows(tmp_path: Path) -> None:
    root = str(tmp_path / "created")
    replacement = plan_replacement(root, NEW, [(IdentityTransform(), ["country"], None)], kind="create_or_replace")
    assert replacement.creates
    write_table(replacement.view(None), NEW_ROWS, mode="overwrite")
    versions = versions_as_read(root)
    assert list(versions) == [2]  # version 1 holds no properties: no reader opens it
    assert len(versions[2]) == 3
    assert {h["operation"] for h in PartitionedNamespace.load(root).history().to_pylist()} == {"CREATE"}


def test_a_failed_create_leaves_no_table_and_its_leftovers_go(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    warehouse = tmp_path / "wh"
    root = str(warehouse / "created")
    replacement = plan_replacement(root, NEW, [(IdentityTransform(), ["country"], None)], kind="create")
    monkeypatch.setattr(ManifestStore, "create", _fail)
    with pytest.raises(Injected):
        write_table(replacement.view(None), NEW_ROWS, mode="overwrite")
    monkeypatch.undo()
    assert not ManifestStore(root).exists()
    assert os.listdir(root)  # the datasets its commit made, named by no __manifest
    assert discard_uncreated(root, None, within=str(warehouse))
    assert not os.path.exists(root)
