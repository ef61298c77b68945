"""A task writes small partition buffers a few at a time (``partitioning.tables.fragments._Flushes``).

Oracles: the input rows grouped in plain Python, each partition read back with Lance's own
reader, and the writes Lance was asked for, watched as they run.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pytest

import partitioning.tables.fragments as pfragments
from partitioning import NamespaceSchema, PartitionedNamespace
from partitioning.errors import SchemaError
from partitioning.storage.paths import table_uri
from partitioning.tables.write import write_table

SCHEMA = NamespaceSchema.from_arrow(pa.schema([pa.field("id", pa.int64()), pa.field("country", pa.string())]))


def _namespace(tmp_path: Path) -> PartitionedNamespace:
    return PartitionedNamespace.create(str(tmp_path / "ns"), SCHEMA, ["country"])


class _Watch:
    """Wraps ``write_new_fragments``: how many writes ran at once, and how many rows they held."""

    def __init__(self, real: Any, fail_on: str | None = None) -> None:
        self.real, self.fail_on = real, fail_on
        self.lock = threading.Lock()
        self.running: list[int] = []
        self.most_writes = 0
        self.most_rows = 0
        self.sizes: list[int] = []

    def __call__(self, data: pa.Table, uri: str, *args: Any, **kwargs: Any) -> Any:
        with self.lock:
            self.running.append(data.num_rows)
            self.sizes.append(data.num_rows)
            self.most_writes = max(self.most_writes, len(self.running))
            self.most_rows = max(self.most_rows, sum(self.running))
        try:
            time.sleep(0.01)
            if self.fail_on is not None and self.fail_on in data.column("country").to_pylist():
                raise SchemaError("refused by the test")
            return self.real(data, uri, *args, **kwargs)
        finally:
            with self.lock:
                self.running.remove(data.num_rows)


def _watch(monkeypatch: pytest.MonkeyPatch, fail_on: str | None = None) -> _Watch:
    watch = _Watch(pfragments.write_new_fragments, fail_on)
    monkeypatch.setattr(pfragments, "write_new_fragments", watch)
    return watch


def _read_back(ns: PartitionedNamespace) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for p in ns.partitions():
        uri = table_uri(ns.root, p.object_id, p.location)
        table = lance.dataset(uri, version=p.read_version).to_table()
        assert set(table.column("country").to_pylist()) == {p.values["country"]}
        out[p.values["country"]] = sorted(table.column("id").to_pylist())
    return out


def test_many_small_partitions_are_written_together_and_each_row_lands_once(tmp_path: Path, monkeypatch):
    ids = list(range(1_200))
    countries = [f"c{(i * 7) % 300:03d}" for i in ids]
    expected: dict[str, list[int]] = defaultdict(list)
    for i, c in zip(ids, countries, strict=True):
        expected[c].append(i)
    watch = _watch(monkeypatch)
    ns = _namespace(tmp_path)
    result = write_table(ns, pa.table({"id": ids, "country": countries}), max_open_writers=8)
    assert result.partitions_created == 300
    assert _read_back(PartitionedNamespace.load(ns.root)) == dict(expected)
    assert watch.most_writes > 1, "the small partitions were written one at a time"
    assert watch.most_writes <= pfragments.PARALLEL_FLUSHES, watch.most_writes
    assert len(watch.sizes) == 300


def test_big_buffers_are_written_one_at_a_time(tmp_path: Path, monkeypatch):
    per = pfragments.SPLIT_ROWS + 1_000
    countries = ["a"] * per + ["b"] * per + ["c"] * per
    ids = list(range(len(countries)))
    watch = _watch(monkeypatch)
    ns = _namespace(tmp_path)
    write_table(ns, pa.table({"id": ids, "country": countries}), max_open_writers=1)
    assert watch.most_writes == 1
    assert sorted(watch.sizes) == [per, per, per]
    back = _read_back(PartitionedNamespace.load(ns.root))
    assert back == {"a": ids[:per], "b": ids[per : 2 * per], "c": ids[2 * per :]}


def test_rows_in_flight_stay_within_one_chunk_and_one_buffer(tmp_path: Path, monkeypatch):
    # 1,000-row files: buffers of 1,000 rows, a 1,000-row in-flight budget.
    countries = [f"c{i % 5}" for i in range(9_000)]
    watch = _watch(monkeypatch)
    ns = _namespace(tmp_path)
    write_table(ns, pa.table({"id": list(range(9_000)), "country": countries}), max_rows_per_file=1_000)
    assert watch.most_rows <= 2 * 1_000
    assert sum(watch.sizes) == 9_000
    assert {k: len(v) for k, v in _read_back(PartitionedNamespace.load(ns.root)).items()} == {
        f"c{i}": 1_800 for i in range(5)
    }


def test_a_failing_write_among_many_fails_the_whole_write_naming_its_partition(tmp_path: Path, monkeypatch):
    countries = [f"c{i:03d}" for i in range(100)]
    _watch(monkeypatch, fail_on="c042")
    ns = _namespace(tmp_path)
    with pytest.raises(SchemaError, match=r"partition .*c042.*refused by the test"):
        write_table(ns, pa.table({"id": list(range(100)), "country": countries}), max_open_writers=4)
    assert PartitionedNamespace.load(ns.root).partitions() == []
