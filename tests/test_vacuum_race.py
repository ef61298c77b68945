"""Vacuum against writes in progress (issue 18, item 2): no committed row is ever lost.

Writers pause between their fragment writes and their commit (``write_table``'s
``before_commit`` hook, or ``FragmentWriter`` + ``commit_write`` for a writer without a
lease) while vacuum runs with the shortest allowed retention, or with the override and
``retain=0``. Every write either commits readable data or fails with one clear line; the
committed rows, counted with lance at the manifest's ``read_version``s after every round,
are exactly the ones written out by hand.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import lance
import pyarrow as pa
import pytest

from partitioning import PartitionedNamespace
from partitioning.errors import ConcurrentModification
from partitioning.storage.lease_files import LEASE_DIR, LEASE_TTL, list_leases
from partitioning.storage.leases import write_lease
from partitioning.storage.manifest import ManifestStore
from partitioning.tables.deletes import drop_partitions
from partitioning.tables.fragments import FragmentWriter, add_partition_columns
from partitioning.tables.vacuum import vacuum
from partitioning.tables.write import commit_write, write_table

SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.string())])
DAY = dt.timedelta(hours=24)
ZERO = dt.timedelta(0)


def _table(rows: list[tuple[int, str]]) -> pa.Table:
    return pa.Table.from_pylist([{"id": i, "p": p} for i, p in rows], schema=SCHEMA)


def _committed(root: str) -> list[tuple[int, str]]:
    """Every committed row: each table of the latest manifest read with lance at its read_version."""
    out = []
    for row in ManifestStore(root).dataset().to_table(filter="object_type = 'table'").to_pylist():
        ds = lance.dataset(f"{root}/{row['location']}", version=row["read_version"])
        out.extend((r["id"], r["p"]) for r in ds.to_table().to_pylist())
    return sorted(out)


def _fragment_files(root: str, messages: pa.Table) -> list[Path]:
    out = []
    for row in messages.to_pylist():
        for fragment in json.loads(row["fragments"]):
            out.extend(Path(root, row["location"], "data", f["path"]) for f in fragment["files"])
    return out


def _lapse(lease: Path, age: dt.timedelta) -> None:
    """Make a lease look as if its last heartbeat was ``age`` ago (its writer died then)."""
    body = json.loads(lease.read_text())
    then = dt.datetime.now(dt.UTC) - age
    body["heartbeat"] = then.isoformat()
    lease.write_text(json.dumps(body))
    os.utime(lease, (then.timestamp(), then.timestamp()))


def _backdate(paths: list[Path], age: dt.timedelta) -> None:
    then = time.time() - age.total_seconds()
    for path in paths:
        os.utime(path, (then, then))


class _PausedWrite:
    """``write_table`` in a thread, stopped between its fragment writes and its commit."""

    def __init__(self, root: str, rows: list[tuple[int, str]]) -> None:
        self.root = root
        self.rows = rows
        self.written = threading.Event()
        self.resume = threading.Event()
        self.messages: pa.Table | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run)

    def _hook(self, messages: pa.Table) -> None:
        self.messages = messages
        self.written.set()
        assert self.resume.wait(60)

    def _run(self) -> None:
        try:
            write_table(PartitionedNamespace.load(self.root), _table(self.rows), before_commit=self._hook)
        except BaseException as exc:  # reported by finish()
            self.error = exc
            self.written.set()

    def start(self) -> _PausedWrite:
        self.thread.start()
        assert self.written.wait(60)
        return self

    def finish(self) -> BaseException | None:
        self.resume.set()
        self.thread.join(60)
        assert not self.thread.is_alive()
        return self.error


def _unleased_fragments(root: str, rows: list[tuple[int, str]]) -> tuple[PartitionedNamespace, pa.Table]:
    """Fragments written by a writer that holds no lease (an old client, or one whose lease lapsed)."""
    ns = PartitionedNamespace.load(root)
    keyed = add_partition_columns(_table(rows), ns.current_spec.fields, ns.namespace_schema)
    writer = FragmentWriter.for_namespace(ns)
    return ns, pa.Table.from_batches(list(writer(keyed.to_batches())), schema=writer.output_schema)


def _round_leased_vacuum_zero(root: str, n: int, expected: set[tuple[int, str]]) -> None:
    """Appends to an existing partition and a new one; vacuum with retain=0 runs in between."""
    rows = [(n * 100 + 1, "a"), (n * 100 + 2, f"new{n}")]
    write = _PausedWrite(root, rows).start()
    report = vacuum(root, ZERO, allow_short_retention=True)
    assert not any(str(p) in " ".join(report.deleted) for p in _fragment_files(root, write.messages))
    assert write.finish() is None
    expected.update(rows)


def _round_leased_shortest_retention(root: str, n: int, expected: set[tuple[int, str]]) -> None:
    """The shortest retention allowed without the override."""
    rows = [(n * 100 + 1, "b"), (n * 100 + 3, "a")]
    write = _PausedWrite(root, rows).start()
    vacuum(root, DAY)
    assert write.finish() is None
    expected.update(rows)


def _round_rebased_over_another_write(root: str, n: int, expected: set[tuple[int, str]]) -> None:
    """Another write commits to the same partition while this one is paused; vacuum with
    retain=0 then runs; this write rebases onto it and commits."""
    rows = [(n * 100 + 1, "a")]
    write = _PausedWrite(root, rows).start()
    other = [(n * 100 + 50, "a")]
    write_table(PartitionedNamespace.load(root), _table(other))
    expected.update(other)
    vacuum(root, ZERO, allow_short_retention=True)
    assert write.finish() is None
    expected.update(rows)


def _round_partition_dropped_meanwhile(root: str, n: int, expected: set[tuple[int, str]]) -> None:
    """The partition this write appends to is dropped and vacuumed away (retain=0) meanwhile:
    the write re-creates the partition with its own rows, or fails with one line."""
    value = f"drop{n}"
    write_table(PartitionedNamespace.load(root), _table([(n * 100 + 60, value)]))
    expected.add((n * 100 + 60, value))
    rows = [(n * 100 + 1, value)]
    write = _PausedWrite(root, rows).start()
    drop_partitions(root, f"p = '{value}'")
    expected.discard((n * 100 + 60, value))
    vacuum(root, ZERO, allow_short_retention=True)
    error = write.finish()
    if error is None:
        expected.update(rows)
    else:
        assert isinstance(error, ConcurrentModification) and "\n" not in str(error), error


def _round_unleased_writer_loses_its_files(root: str, n: int, expected: set[tuple[int, str]]) -> None:
    """A writer without a lease whose fragments are older than the retention: vacuum deletes
    them, and the commit fails naming the partition and the file, committing nothing."""
    rows = [(n * 100 + 1, "a"), (n * 100 + 2, "b")]
    ns, messages = _unleased_fragments(root, rows)
    files = _fragment_files(root, messages)
    _backdate(files, dt.timedelta(hours=25))
    report = vacuum(root, DAY)
    assert any(str(files[0]) in item for item in report.deleted), report.deleted
    version = ManifestStore(root).dataset().version
    with pytest.raises(ConcurrentModification) as info:
        commit_write(ns, messages)
    text = str(info.value)
    assert "\n" not in text
    assert "partition p=" in text and "is missing" in text and "Nothing was committed" in text, text
    assert any(str(f) in text for f in files), text
    assert ManifestStore(root).dataset().version == version


ROUNDS: list[Callable[[str, int, set[tuple[int, str]]], None]] = [
    _round_leased_vacuum_zero,
    _round_leased_shortest_retention,
    _round_rebased_over_another_write,
    _round_partition_dropped_meanwhile,
    _round_unleased_writer_loses_its_files,
]


def test_vacuum_never_loses_a_committed_row_to_writes_in_progress(tmp_path: Path) -> None:
    """20 rounds of writers paused between fragments and commit against vacuum."""
    root = str(tmp_path / "ns")
    ns = PartitionedNamespace.create(root, SCHEMA, ["p"])
    first = [(1, "a"), (2, "b")]
    write_table(ns, _table(first))
    expected = set(first)
    for n in range(1, 21):
        ROUNDS[n % len(ROUNDS)](root, n, expected)
        assert _committed(root) == sorted(expected), f"round {n} ({ROUNDS[n % len(ROUNDS)].__name__})"
    assert list(Path(root, LEASE_DIR).iterdir()) == []


# -- the lease ------------------------------------------------------------------------------------
def test_a_lease_heartbeats_while_held_and_is_removed_after(tmp_path: Path) -> None:
    root = str(tmp_path / "ns")
    PartitionedNamespace.create(root, SCHEMA, ["p"])
    with write_lease(root, write_id="job-7", interval=dt.timedelta(milliseconds=50)) as uri:
        assert uri is not None and uri.startswith(f"{root}/{LEASE_DIR}/")
        first = json.loads(Path(uri).read_text())
        time.sleep(0.3)
        later = json.loads(Path(uri).read_text())
        assert later["started"] == first["started"]
        assert later["heartbeat"] > first["heartbeat"]
        (lease,) = list_leases(root)
        assert lease.write_id == "job-7"
        assert lease.live(dt.datetime.now(dt.UTC))
    assert not Path(uri).exists()
    assert list_leases(root) == []


def test_a_crashed_writers_lease_protects_until_it_expires(tmp_path: Path) -> None:
    """A writer process killed after writing fragments leaves its lease: vacuum with retain=0
    keeps the fragments while the lease is fresh, and deletes them and the lease once its
    heartbeat is older than LEASE_TTL."""
    root = str(tmp_path / "ns")
    ns = PartitionedNamespace.create(root, SCHEMA, ["p"])
    write_table(ns, _table([(1, "a")]))
    script = (
        "import sys, time\n"
        "from partitioning.storage.leases import write_lease\n"
        "with write_lease(sys.argv[1]):\n"
        "    print('held', flush=True)\n"
        "    time.sleep(600)\n"
    )
    with subprocess.Popen(
        [sys.executable, "-c", script, root], stdout=subprocess.PIPE, cwd=Path(__file__).resolve().parents[1]
    ) as proc:
        try:
            assert proc.stdout is not None and proc.stdout.readline().strip() == b"held"
            _, messages = _unleased_fragments(root, [(2, "a"), (3, "z")])
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(30)
    files = _fragment_files(root, messages)
    (lease,) = list_leases(root)

    kept = vacuum(root, ZERO, allow_short_retention=True)
    assert all(f.exists() for f in files)
    assert any("a write in progress may use it" in s for s in kept.skipped), kept.skipped

    # the heartbeat stopped LEASE_TTL ago (a lease's life is judged on the real clock)
    _lapse(Path(lease.uri), LEASE_TTL + dt.timedelta(minutes=1))
    report = vacuum(root, ZERO, allow_short_retention=True)
    assert f"lease {lease.uri} (expired)" in report.deleted
    assert not any(f.exists() for f in files)
    assert list_leases(root) == []
    assert _committed(root) == [(1, "a")]


def test_a_spark_write_holds_a_lease_while_its_tasks_run(spark, tmp_path: Path) -> None:
    """The tasks of write_partitioned see the driver's live lease (a UDF of the written
    DataFrame counts them into the rows it writes); after the commit it is gone."""
    from pyspark.sql import functions as F

    from pipelines.write.dataframe import write_partitioned

    root = str(tmp_path / "ns")
    PartitionedNamespace.create(root, SCHEMA, ["p"])
    live_leases = F.udf(lambda _: sum(lease.live(dt.datetime.now(dt.UTC)) for lease in list_leases(root)), "long")
    df = spark.range(3).select(live_leases("id").alias("id"), F.lit("a").alias("p"))
    write_partitioned(df, root)
    assert _committed(root) == [(1, "a"), (1, "a"), (1, "a")]
    assert list_leases(root) == []


def test_a_data_source_write_holds_a_lease_while_its_tasks_run(spark, tmp_path: Path) -> None:
    """df.write.format("lance_partitioned"): the writer Spark builds on the driver stores a
    lease, its tasks see it live while they write, and commit removes it."""
    from pyspark.sql import functions as F

    from pipelines.source.datasource import register_data_source

    root = str(tmp_path / "ns")
    PartitionedNamespace.create(root, SCHEMA, ["p"])
    register_data_source(spark)
    live_leases = F.udf(lambda _: sum(lease.live(dt.datetime.now(dt.UTC)) for lease in list_leases(root)), "long")
    df = spark.range(3).select(live_leases("id").alias("id"), F.lit("a").alias("p"))
    df.write.format("lance_partitioned").mode("append").save(root)
    assert _committed(root) == [(1, "a"), (1, "a"), (1, "a")]
    assert list_leases(root) == []


def test_a_failed_data_source_write_removes_its_lease(spark, tmp_path: Path) -> None:
    """A task that fails: Spark aborts the write, nothing is committed, the lease goes."""
    from pyspark.sql import functions as F

    from pipelines.source.datasource import register_data_source

    root = str(tmp_path / "ns")
    PartitionedNamespace.create(root, SCHEMA, ["p"])
    register_data_source(spark)
    df = spark.range(3).select(F.lit(1).cast("long").alias("id"), F.lit("x" * 5).alias("p"))
    df = df.withColumn("id", F.when(F.col("id") > 0, F.raise_error("boom")).cast("long"))
    with pytest.raises(Exception, match="boom"):
        df.write.format("lance_partitioned").mode("append").save(root)
    assert _committed(root) == []
    assert list_leases(root) == []


def test_compaction_holds_a_lease_until_its_commit(tmp_path: Path, monkeypatch) -> None:
    """compact_local rewrites under a lease: seen live while the new fragments are written."""
    import partitioning.tables.compaction as compaction

    root = str(tmp_path / "ns")
    ns = PartitionedNamespace.create(root, SCHEMA, ["p"])
    for i in range(3):
        write_table(ns, _table([(i, "a")]))
    seen: list[int] = []
    real = compaction.rewrite

    def watched(task):
        seen.append(sum(lease.live(dt.datetime.now(dt.UTC)) for lease in list_leases(root)))
        return real(task)

    monkeypatch.setattr(compaction, "rewrite", watched)
    report = compaction.compact_local(PartitionedNamespace.load(root))
    assert report.tables == 1 and seen == [1]
    assert list_leases(root) == []
    assert sorted(_committed(root)) == [(0, "a"), (1, "a"), (2, "a")]


def test_a_lease_that_cannot_be_stored_lets_the_write_go_on_with_a_warning(caplog) -> None:
    """A root whose store Arrow cannot open: the write is not refused (its commit still
    verifies its files); the log says vacuum cannot see it."""
    with write_lease("memory://nowhere/ns") as uri:
        assert uri is None
    assert "vacuum cannot see this write" in caplog.text


def test_a_task_refresh_racing_the_release_does_not_revive_the_lease(tmp_path: Path) -> None:
    """Spark aborts a write without waiting for its killed tasks: a task that saw the lease,
    then lost the race to its removal, must not leave a lease behind (it would hold vacuum
    back for LEASE_TTL). The race is forced: the release runs between the task's check and
    its write."""
    from partitioning.storage import leases

    root = str(tmp_path / "ns")
    PartitionedNamespace.create(root, SCHEMA, ["p"])
    ref = leases.take_lease(root)
    assert ref is not None
    beat = leases.Heartbeat("", ref.write_id, leases.HEARTBEAT_INTERVAL, ref)
    beat._create = False
    real_beat = beat.beat

    def late_beat() -> None:
        leases.release_lease(ref)  # the driver's abort, just after the task checked
        real_beat()

    beat.beat = late_beat  # type: ignore[method-assign]
    assert beat.refresh() is False
    assert list_leases(root) == []
    names = sorted(p.name for p in (tmp_path / "ns" / LEASE_DIR).iterdir())
    assert names == [Path(ref.uri).name + ".ended"]

    report = vacuum(root, retain=dt.timedelta(0), allow_short_retention=True)
    assert not any(item.endswith(names[0]) for item in report.deleted)
    assert (tmp_path / "ns" / LEASE_DIR / names[0]).exists()  # a task of that write may still refresh
    later = dt.datetime.now(dt.UTC) + LEASE_TTL + dt.timedelta(minutes=1)
    report = vacuum(root, retain=dt.timedelta(0), allow_short_retention=True, now=later)
    assert any(item.endswith(names[0]) for item in report.deleted)
    assert not (tmp_path / "ns" / LEASE_DIR / names[0]).exists()
