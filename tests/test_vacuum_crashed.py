"""Vacuum removes what writes that died before their ``__manifest`` commit left (issue 15, item 6).

A crash is the real write path with the ``__manifest`` commit raising: every dataset version
the write committed stays, newer than the recorded ``read_version``. The oracles are
independent of the code under test: the files on disk (``os.listdir``), the rows written
out by hand, and plain ``lance.dataset`` reads.
"""

from __future__ import annotations

import datetime as dt
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pytest

from partitioning import PartitionedNamespace
from partitioning.tables.compaction import compact_local
from partitioning.tables.deletes import delete_rows
from partitioning.tables.vacuum import vacuum
from partitioning.tables.write import write_table

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("country", pa.string())])
ZERO = dt.timedelta(0)
Row = tuple[int, str]
FIRST: list[Row] = [(1, "US"), (2, "US"), (3, "CN")]


class Crash(RuntimeError):
    """The process 'dies' between the dataset commits and the ``__manifest`` commit."""


def _table(rows: list[Row]) -> pa.Table:
    return pa.Table.from_pylist([{"id": i, "country": c} for i, c in rows], schema=SCHEMA)


@contextmanager
def _manifest_commit(hook: Callable[[], None]) -> Iterator[None]:
    """Run ``hook`` in place of / before every ``__manifest`` commit (``commit_once``)."""
    original = PartitionedNamespace.commit_once

    def patched(self: PartitionedNamespace, *args: Any, **kwargs: Any) -> int:
        hook()
        return original(self, *args, **kwargs)

    PartitionedNamespace.commit_once = patched  # type: ignore[method-assign]
    try:
        yield
    finally:
        PartitionedNamespace.commit_once = original  # type: ignore[method-assign]


def _crash() -> None:
    raise Crash("killed before the __manifest commit")


def _crashed(action: Callable[[], object]) -> None:
    with _manifest_commit(_crash), pytest.raises(Crash):
        action()


def _committed(root: str) -> list[Row]:
    """Every row a reader of the latest manifest sees: each table at its read_version."""
    ns = PartitionedNamespace.load(root)
    out = []
    for p in ns.partitions():
        out.extend((r["id"], r["country"]) for r in lance.dataset(p.uri, version=p.read_version).to_table().to_pylist())
    return sorted(out)


def _table_of(root: str, country: str) -> Any:
    return next(p for p in PartitionedNamespace.load(root).partitions() if p.values["country"] == country)


def _latest_rows(uri: str) -> list[Row]:
    """What a plain Lance client opening the partition sees."""
    return sorted((r["id"], r["country"]) for r in lance.dataset(uri).to_table().to_pylist())


def _versions(uri: str) -> list[int]:
    return sorted(v["version"] for v in lance.dataset(uri).versions())


def _listing(uri: str, sub: str) -> set[str]:
    path = Path(uri, sub)
    return set(os.listdir(path)) if path.exists() else set()


@pytest.fixture
def root(tmp_path: Path) -> str:
    root = str(tmp_path / "ns")
    write_table(PartitionedNamespace.create(root, SCHEMA, ["country"]), _table(FIRST))
    return root


def test_a_crashed_writes_versions_and_files_are_removed_and_reads_are_unchanged(root: str) -> None:
    us = _table_of(root, "US")
    data, manifests = _listing(us.uri, "data"), _listing(us.uri, "_versions")
    _crashed(lambda: write_table(PartitionedNamespace.load(root), _table([(10, "US"), (11, "US")])))
    _crashed(lambda: write_table(PartitionedNamespace.load(root), _table([(12, "US")])))  # restores, then commits
    crashed_data = _listing(us.uri, "data") - data
    crashed_manifests = _listing(us.uri, "_versions") - manifests - {"latest_version_hint.json"}
    assert len(crashed_data) == 2 and len(crashed_manifests) == 3  # append; restore + append
    assert _latest_rows(us.uri) == [(1, "US"), (2, "US"), (12, "US")]
    assert _committed(root) == sorted(FIRST)

    listed = vacuum(root, ZERO, allow_short_retention=True, dry_run=True)
    dangling = f"versions {us.uri} {us.read_version + 1}-{us.read_version + 3}"
    assert [d for d in listed.deleted if d.startswith(dangling)], listed.deleted
    assert _listing(us.uri, "data") == data | crashed_data

    report = vacuum(root, ZERO, allow_short_retention=True)
    assert [d for d in report.deleted if d.startswith(dangling)], report.deleted
    assert report.foreign_versions == ()
    assert _listing(us.uri, "data") == data
    assert not _listing(us.uri, "_versions") & crashed_manifests
    assert _committed(root) == sorted(FIRST)
    assert _latest_rows(us.uri) == [(1, "US"), (2, "US")]
    assert us.read_version in _versions(us.uri)
    assert max(_versions(us.uri)) == us.read_version + 4  # the restore that made the recorded content latest again

    again = vacuum(root, ZERO, allow_short_retention=True)
    assert not [d for d in again.deleted if us.uri in d], again.deleted
    write_table(PartitionedNamespace.load(root), _table([(13, "US")]))
    assert _committed(root) == sorted([*FIRST, (13, "US")])


def test_a_crash_after_a_schema_change_leaves_unmarked_alignment_versions_that_go_too(root: str) -> None:
    ns = PartitionedNamespace.load(root)
    ns.add_columns({"note": "string"})
    wide = pa.schema([*SCHEMA, pa.field("note", pa.string())])
    cn = _table_of(root, "CN")
    data = _listing(cn.uri, "data")
    rows = pa.Table.from_pylist([{"id": 20, "country": "CN", "note": "x"}], schema=wide)
    _crashed(lambda: write_table(PartitionedNamespace.load(root), rows))
    align = lance.dataset(cn.uri).read_transaction(cn.read_version + 1)
    assert not align.transaction_properties  # Lance's own add_columns takes no commit message
    assert max(_versions(cn.uri)) == cn.read_version + 2  # then our append
    report = vacuum(root, ZERO, allow_short_retention=True)
    assert [d for d in report.deleted if d.startswith(f"versions {cn.uri} {cn.read_version + 1}-")], report.deleted
    assert report.foreign_versions == ()
    assert _listing(cn.uri, "data") == data
    assert _versions(cn.uri)[0] == cn.read_version
    assert _latest_rows(cn.uri) == [(3, "CN")]
    assert _committed(root) == sorted(FIRST)


def test_another_clients_versions_are_listed_and_kept_and_ours_above_them_go(root: str) -> None:
    us = _table_of(root, "US")
    lance.write_dataset(_table([(30, "US")]), us.uri, mode="append")  # another Lance client
    foreign = us.read_version + 1
    foreign_files = _listing(us.uri, "data")
    _crashed(lambda: write_table(PartitionedNamespace.load(root), _table([(31, "US")])))
    report = vacuum(root, ZERO, allow_short_retention=True)
    assert f"versions {us.uri} {foreign} (after every retained read_version, another client's)" in (
        report.foreign_versions
    )
    assert "other Lance clients" in report.summary()
    assert [d for d in report.deleted if d.startswith(f"versions {us.uri} {foreign + 1}-{foreign + 2}")]
    assert foreign in _versions(us.uri)
    assert _listing(us.uri, "data") == foreign_files
    assert sorted(lance.dataset(us.uri, version=foreign).to_table().column("id").to_pylist()) == [1, 2, 30]
    assert _latest_rows(us.uri) == [(1, "US"), (2, "US"), (30, "US")]  # the other client's latest, restored
    assert _committed(root) == sorted(FIRST)


def test_another_clients_schema_change_on_the_recorded_version_is_kept(root: str) -> None:
    cn = _table_of(root, "CN")
    ds = lance.dataset(cn.uri)
    ds.add_columns(pa.field("extra", pa.int64()))  # unmarked, like our own alignment steps
    report = vacuum(root, ZERO, allow_short_retention=True)
    assert f"versions {cn.uri} {cn.read_version + 1} (after every retained read_version, another client's)" in (
        report.foreign_versions
    )
    assert cn.read_version + 1 in _versions(cn.uri)
    assert "extra" in lance.dataset(cn.uri).schema.names


def test_versions_younger_than_retain_are_kept(root: str) -> None:
    us = _table_of(root, "US")
    _crashed(lambda: write_table(PartitionedNamespace.load(root), _table([(40, "US")])))
    dangling = us.read_version + 1
    hour = dt.timedelta(hours=1)
    report = vacuum(root, hour, allow_short_retention=True)
    assert not [d for d in report.deleted if us.uri in d], report.deleted
    assert dangling in _versions(us.uri)
    later = dt.datetime.now(dt.UTC) + 2 * hour
    report = vacuum(root, hour, allow_short_retention=True, now=later)
    assert f"versions {us.uri} {dangling} (after every retained read_version: a write that failed)" in report.deleted
    assert dangling not in _versions(us.uri)
    assert _committed(root) == sorted(FIRST)


def test_a_write_in_progress_keeps_its_versions_while_its_lease_lives(root: str) -> None:
    us = _table_of(root, "US")
    committed, resume = threading.Event(), threading.Event()
    errors: list[BaseException] = []
    writer: list[threading.Thread] = []

    def pause() -> None:
        if threading.current_thread() is writer[0]:
            committed.set()
            assert resume.wait(60)

    def run() -> None:
        try:
            write_table(PartitionedNamespace.load(root), _table([(50, "US"), (51, "ZZ")]))
        except BaseException as exc:
            errors.append(exc)
            committed.set()

    with _manifest_commit(pause):
        writer.append(threading.Thread(target=run))
        writer[0].start()
        assert committed.wait(60)
        in_progress = _versions(us.uri)
        assert max(in_progress) > us.read_version  # the dataset commit happened, the manifest's has not
        for _ in range(2):
            report = vacuum(root, ZERO, allow_short_retention=True)
            assert not [d for d in report.deleted if us.uri in d], report.deleted
            assert _versions(us.uri) == in_progress
        resume.set()
        writer[0].join(60)
    assert not errors
    assert _committed(root) == sorted([*FIRST, (50, "US"), (51, "ZZ")])
    assert _latest_rows(us.uri) == [(1, "US"), (2, "US"), (50, "US")]


def test_a_crashed_delete_and_a_crashed_compaction_are_recognised_as_ours(root: str) -> None:
    write_table(PartitionedNamespace.load(root), _table([(60, "CN")]))
    cn = _table_of(root, "CN")
    _crashed(lambda: delete_rows(root, "id = 3"))  # Lance's delete: unmarked
    _crashed(lambda: compact_local(PartitionedNamespace.load(root)))  # Lance's reserve + rewrite: unmarked
    assert max(_versions(cn.uri)) > cn.read_version + 2
    report = vacuum(root, ZERO, allow_short_retention=True)
    assert report.foreign_versions == ()
    assert [d for d in report.deleted if d.startswith(f"versions {cn.uri} {cn.read_version + 1}-")], report.deleted
    assert _latest_rows(cn.uri) == [(3, "CN"), (60, "CN")]
    assert _committed(root) == sorted([*FIRST, (60, "CN")])
