"""Exclusive intents (issue 37, item 3): the turn a merge or update takes after losing rounds.

Spark-free: the intent is taken with :func:`partitioning.state.commits.take_intent` and committed
away by its holder's commit; writers run in threads. The oracle is the order of commits in
``__manifest``'s history (Lance's own transaction properties) and the rows read back with
plain Lance.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from pathlib import Path

import lance
import pyarrow as pa

from partitioning import PartitionedNamespace
from partitioning.state.commits import release_intent, take_intent
from partitioning.storage.history import Operation
from partitioning.tables.fragments import FragmentWriter, add_partition_columns
from partitioning.tables.write import commit_write, write_table

SCHEMA = pa.schema([("id", pa.int64()), ("c", pa.string())])
INTENT = Operation("INTENT", {"operation": "test"})


def _table(rows: list[tuple[int, str]]) -> pa.Table:
    return pa.Table.from_pylist([{"id": i, "c": c} for i, c in rows], schema=SCHEMA)


def _operations(root: str) -> list[str]:
    ds = lance.dataset(f"{root}/__manifest")
    out = []
    for info in ds.versions():
        txn = ds.read_transaction(info["version"])
        props = (txn.transaction_properties or {}) if txn is not None else {}
        out.append(props.get("lance_partitioned.operation", "?"))
    return out


def _namespace(tmp_path: Path) -> tuple[str, PartitionedNamespace]:
    root = str(tmp_path / "ns")
    ns = PartitionedNamespace.create(root, SCHEMA, ["c"])
    write_table(ns, _table([(1, "US"), (2, "FR")]))
    return root, ns.refresh()


class Writer:
    def __init__(self, root: str, rows: list[tuple[int, str]]) -> None:
        self.done = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(root, rows))
        self.thread.start()

    def _run(self, root: str, rows: list[tuple[int, str]]) -> None:
        try:
            write_table(PartitionedNamespace.load(root), _table(rows))
        except BaseException as exc:  # reported by the test
            self.error = exc
        self.done.set()


def test_a_writer_to_a_held_table_waits_until_the_holder_commits(tmp_path: Path) -> None:
    root, ns = _namespace(tmp_path)
    us = next(t for t in ns.partitions() if "US" in t.values.values())
    intent = take_intent(ns, [us.object_id], dt.timedelta(seconds=60), what="merge", operation=INTENT)
    writer = Writer(root, [(3, "US")])
    assert not writer.done.wait(1.0)  # waiting for the intent
    # the holder commits (an append of its own to the held table) and so removes the intent
    holder = PartitionedNamespace.load(root)
    keyed = add_partition_columns(_table([(4, "US")]), holder.current_spec.fields, holder.namespace_schema)
    fw = FragmentWriter.for_namespace(holder)
    messages = pa.Table.from_batches(list(fw(keyed.to_batches())), schema=fw.output_schema)
    commit_write(holder, messages, intent=intent)
    assert writer.done.wait(60) and writer.error is None, writer.error
    ops = _operations(root)
    assert ops[-3:] == ["INTENT", "WRITE", "WRITE"], ops
    rows = []
    for t in PartitionedNamespace.load(root).partitions():
        rows.extend(lance.dataset(t.uri, version=t.read_version).to_table().column("id").to_pylist())
    assert sorted(rows) == [1, 2, 3, 4]


def test_a_writer_to_another_table_does_not_wait(tmp_path: Path) -> None:
    root, ns = _namespace(tmp_path)
    us = next(t for t in ns.partitions() if "US" in t.values.values())
    take_intent(ns, [us.object_id], dt.timedelta(seconds=60), what="merge", operation=INTENT)
    writer = Writer(root, [(5, "FR")])
    assert writer.done.wait(30) and writer.error is None, writer.error
    assert _operations(root)[-2:] == ["INTENT", "WRITE"]


def test_a_writer_creating_a_table_waits_for_the_intent_and_an_intent_lapses(tmp_path: Path) -> None:
    """A new partition could fall under the holder's filter: its writer waits too; an intent
    whose holder died lapses at its ``until`` and the writer goes on."""
    root, ns = _namespace(tmp_path)
    us = next(t for t in ns.partitions() if "US" in t.values.values())
    take_intent(ns, [us.object_id], dt.timedelta(seconds=2), what="merge", operation=INTENT)
    began = time.monotonic()
    writer = Writer(root, [(6, "DE")])
    assert not writer.done.wait(0.8)
    assert writer.done.wait(60) and writer.error is None, writer.error
    assert time.monotonic() - began >= 1.5
    rows = []
    for t in PartitionedNamespace.load(root).partitions():
        rows.extend(lance.dataset(t.uri, version=t.read_version).to_table().column("id").to_pylist())
    assert sorted(rows) == [1, 2, 6]


def test_a_released_intent_lets_waiting_writers_go(tmp_path: Path) -> None:
    root, ns = _namespace(tmp_path)
    tables = [t.object_id for t in ns.partitions()]
    intent = take_intent(ns, tables, dt.timedelta(seconds=60), what="update", operation=INTENT)
    writer = Writer(root, [(7, "FR")])
    assert not writer.done.wait(0.8)
    release_intent(PartitionedNamespace.load(root), intent, operation=INTENT)
    assert writer.done.wait(30) and writer.error is None, writer.error
    assert _operations(root)[-3:] == ["INTENT", "INTENT", "WRITE"]
