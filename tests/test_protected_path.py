"""The protected path (issue 37): nothing committed becomes unreadable, whatever runs beside it.

Every operation that commits references to existing files (a restore's to old table
versions, a compaction's, a merge's or update's, a delete's, a drop's, an index commit's,
a write's) races a vacuum here, with the shortest retention and the override. After every
round an independent reader (the ``__manifest`` rows read with plain Lance, then each
table read with plain Lance at its ``read_version``) must read the latest version whole,
and its rows must be one of the states the operations could have produced.
"""

from __future__ import annotations

import datetime as dt
import random
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pytest

from partitioning import PartitionedNamespace
from partitioning.errors import ConcurrentModification, InvalidInput
from partitioning.storage.lease_files import LEASE_DIR, VACUUM, list_leases
from partitioning.tables.compaction import compact_local
from partitioning.tables.deletes import delete_rows, drop_partitions
from partitioning.tables.restore import restore
from partitioning.tables.vacuum import vacuum
from partitioning.tables.write import write_table

SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("c", pa.string())])
ZERO = dt.timedelta(0)
DAY = dt.timedelta(hours=24)
Rows = list[tuple[int, str]]


def _input(ids: range | list[int], countries: tuple[str, ...] = ("US", "FR")) -> pa.Table:
    ids = list(ids)
    return pa.table({"id": pa.array(ids, pa.int64()), "c": [countries[i % len(countries)] for i in ids]})


def _rows(table: pa.Table) -> Rows:
    return sorted(zip(table.column("id").to_pylist(), table.column("c").to_pylist(), strict=True))


def independent_read(root: str) -> Rows:
    """The latest version's rows: plain Lance on ``__manifest``, then on each table at its read_version."""
    manifest = lance.dataset(f"{root}/__manifest")
    out: Rows = []
    for row in manifest.to_table(filter="object_type = 'table'").to_pylist():
        ds = lance.dataset(f"{root}/{row['location']}", version=row["read_version"])
        out.extend((r["id"], r["c"]) for r in ds.to_table(columns=["id", "c"]).to_pylist())
    return sorted(out)


class Background:
    """A callable run in a thread after a random delay; its result or error kept."""

    def __init__(self, fn: Callable[[], Any], delay: float) -> None:
        self.result: Any = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(fn, delay))
        self.thread.start()

    def _run(self, fn: Callable[[], Any], delay: float) -> None:
        time.sleep(delay)
        try:
            self.result = fn()
        except BaseException as exc:  # reported by join()
            self.error = exc

    def join(self, timeout: float = 120) -> Background:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "still running"
        return self


def _vacuum_mode(n: int) -> tuple[str, Callable[[str], Any]]:
    """Even rounds: retain=0 with the override. Odd rounds: the shortest retention allowed
    without it (24 hours), planned as of three days from now, so every version the restore
    target reads looks older than the cutoff (the default-retention form of the race)."""
    if n % 2 == 0:
        return "override", lambda root: vacuum(root, ZERO, allow_short_retention=True)
    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=3)
    return "minimum", lambda root: vacuum(root, DAY, now=later)


def _one_line(error: BaseException | None, *allowed: type[BaseException]) -> None:
    if error is not None:
        assert isinstance(error, allowed), repr(error)
        assert "\n" not in str(error), str(error)


def test_restore_racing_vacuum_never_leaves_the_latest_unreadable(tmp_path: Path) -> None:
    """20 rounds: restore to T (whose tables an overwrite replaced) against vacuum, random
    delays on both sides. The latest version always reads whole: T's rows if the restore
    committed, the overwrite's if not (then with one line saying why)."""
    rng = random.Random(37)
    committed = 0
    for n in range(20):
        root = str(tmp_path / f"ns{n}")
        ns = PartitionedNamespace.create(root, SCHEMA, ["c"])
        old, new = _input(range(10)), _input(range(10, 20), ("US", "DE"))
        write_table(ns, old)
        target = ns.refresh().manifest_version
        write_table(ns.refresh(), new, mode="overwrite")
        mode, vacuuming = _vacuum_mode(n)
        restoring = Background(lambda root=root, t=target: restore(root, version=t), rng.uniform(0, 0.04))
        cleaning = Background(lambda root=root, v=vacuuming: v(root), rng.uniform(0, 0.04))
        restoring.join(), cleaning.join()
        assert cleaning.error is None, (n, mode, cleaning.error)
        _one_line(restoring.error, InvalidInput, ConcurrentModification)
        rows = independent_read(root)
        assert rows == (_rows(new) if restoring.error else _rows(old)), (n, mode, restoring.error)
        committed += restoring.error is None
        assert [lease for lease in list_leases(root)] == []
    assert committed >= 5, committed  # the race is run, not avoided


def test_compaction_delete_and_drop_racing_vacuum_never_leave_the_latest_unreadable(tmp_path: Path) -> None:
    """Compaction, row deletes and partition drops (Spark-free) against vacuum, 6 rounds each."""
    rng = random.Random(7)
    for n in range(18):
        root = str(tmp_path / f"ns{n}")
        ns = PartitionedNamespace.create(root, SCHEMA, ["c"])
        for i in range(4):
            write_table(ns.refresh(), _input(range(i * 10, i * 10 + 10)))
        before = independent_read(root)
        kind = ("compact", "delete", "drop")[n % 3]
        if kind == "compact":
            op: Callable[[], Any] = lambda root=root: compact_local(PartitionedNamespace.load(root))  # noqa: E731
            after = before
        elif kind == "delete":
            op = lambda root=root: delete_rows(root, "id % 3 = 0")  # noqa: E731
            after = [r for r in before if r[0] % 3 != 0]
        else:
            op = lambda root=root: drop_partitions(root, "c = 'FR'")  # noqa: E731
            after = [r for r in before if r[1] != "FR"]
        _, vacuuming = _vacuum_mode(n)
        running = Background(op, rng.uniform(0, 0.03))
        cleaning = Background(lambda root=root, v=vacuuming: v(root), rng.uniform(0, 0.03))
        running.join(), cleaning.join()
        assert cleaning.error is None, (n, kind, cleaning.error)
        _one_line(running.error, ConcurrentModification)
        assert independent_read(root) in (before, after), (n, kind)


def test_merge_and_update_racing_vacuum_never_leave_the_latest_unreadable(spark, tmp_path: Path) -> None:
    """Merges and updates (Spark) against vacuum with retain=0, 3 rounds each."""
    from pipelines import merge_partitioned, update_rows

    rng = random.Random(11)
    for n in range(6):
        root = str(tmp_path / f"ns{n}")
        ns = PartitionedNamespace.create(root, SCHEMA, ["c"])
        for i in range(3):
            write_table(ns.refresh(), _input(range(i * 10, i * 10 + 10)))
        before = independent_read(root)
        if n % 2 == 0:
            source = spark.createDataFrame([(3, "DE"), (100, "US")], "id long, c string")
            op: Callable[[], Any] = lambda root=root, s=source: merge_partitioned(s, root, on="id")  # noqa: E731
            after = sorted([r for r in before if r[0] != 3] + [(3, "DE"), (100, "US")])
        else:
            op = lambda root=root: update_rows(root, set={"id": "id + 1000"}, where="c = 'US'", spark=spark)  # noqa: E731
            after = sorted((i + 1000, c) if c == "US" else (i, c) for i, c in before)
        running = Background(op, rng.uniform(0, 1.0))
        cleaning = Background(lambda root=root: vacuum(root, ZERO, allow_short_retention=True), rng.uniform(0, 1.0))
        running.join(300), cleaning.join()
        assert cleaning.error is None, (n, cleaning.error)
        assert running.error is None, (n, running.error)
        assert independent_read(root) == after, n


def _table_rows(root: str) -> list[tuple[str, int]]:
    rows = lance.dataset(f"{root}/__manifest").to_table(filter="object_type = 'table'").to_pylist()
    return sorted((r["object_id"], r["read_version"]) for r in rows)


class HeldVacuum:
    """A vacuum stopped right before its first deletion (its lease stored, its plan made)."""

    def __init__(self, root: str) -> None:
        self.planned = threading.Event()
        self.release = threading.Event()
        self.run = Background(lambda: vacuum(root, ZERO, allow_short_retention=True, before_delete=self._hold), 0.0)
        assert self.planned.wait(60)

    def _hold(self) -> None:
        self.planned.set()
        assert self.release.wait(120)

    def finish(self) -> Any:
        self.release.set()
        self.run.join()
        assert self.run.error is None, self.run.error
        return self.run.result


def _ops(spark: Any) -> dict[str, Callable[[str], Any]]:
    """Every public way to commit references to files, on a namespace of ``_namespace``."""
    from pipelines import create_scalar_index, merge_partitioned, update_rows, write_partitioned

    def merge(root: str) -> Any:
        return merge_partitioned(spark.createDataFrame([(1, "US")], "id long, c string"), root, on="id")

    def spark_write(root: str) -> Any:
        return write_partitioned(spark.createDataFrame([(500, "US")], "id long, c string"), root)

    def source_write(root: str) -> Any:
        spark.createDataFrame([(501, "US")], "id long, c string").write.format("lance_partitioned").mode("append").save(
            root
        )

    return {
        "write_table": lambda root: write_table(PartitionedNamespace.load(root), _input([400])),
        "write_partitioned": spark_write,
        "data source write": source_write,
        "restore": lambda root: restore(root, version=3),
        "compact": lambda root: compact_local(PartitionedNamespace.load(root)),
        "delete_rows": lambda root: delete_rows(root, "id = 2"),
        "drop_partitions": lambda root: drop_partitions(root, "c = 'FR'"),
        "merge_partitioned": merge,
        "update_rows": lambda root: update_rows(root, set={"c": "'DE'"}, where="id = 4", spark=spark),
        "create_scalar_index": lambda root: create_scalar_index(root, "id", spark=spark),
    }


OPERATIONS = list(_ops(None))


@pytest.mark.parametrize("name", OPERATIONS)
def test_every_committing_operation_waits_for_a_vacuum_that_may_have_missed_it(
    spark, tmp_path: Path, name: str
) -> None:
    """One rule for every operation: a vacuum already deleting when the operation took its
    lease may not have seen it, so the operation does not commit until that vacuum ends;
    then it commits and the latest version reads whole."""
    from pipelines.source.datasource import register_data_source

    register_data_source(spark)
    root = str(tmp_path / "ns")
    ns = PartitionedNamespace.create(root, SCHEMA, ["c"])
    for i in range(3):
        write_table(ns.refresh(), _input(range(i * 4, i * 4 + 4)))
    held = HeldVacuum(root)
    before = lance.dataset(f"{root}/__manifest").version
    tables = _table_rows(root)
    running = Background(lambda: _ops(spark)[name](root), 0.0)
    deadline = time.monotonic() + 60
    while running.thread.is_alive() and time.monotonic() < deadline:
        ours = [lease for lease in list_leases(root) if lease.kind != VACUUM]
        if ours:
            break
        time.sleep(0.05)
    time.sleep(1.5)  # long enough for the operation to reach its commit
    assert running.thread.is_alive(), f"{name} finished while a vacuum that may have missed it was deleting"
    # (an index definition, a root property, may be recorded meanwhile: it references no file)
    assert _table_rows(root) == tables, f"{name} committed while the vacuum ran"
    held.finish()
    running.join(300)
    if name == "restore" and running.error is not None:
        # the vacuum had planned the target's table versions away: one line, nothing committed
        assert isinstance(running.error, InvalidInput) and "\n" not in str(running.error), running.error
        assert "vacuumed while the restore waited; nothing changed" in str(running.error)
        assert _table_rows(root) == tables
    else:
        assert running.error is None, running.error
        assert lance.dataset(f"{root}/__manifest").version > before
    independent_read(root)  # reads whole
    assert not list(Path(root, LEASE_DIR).glob("*.json"))


def test_a_restore_whose_target_a_running_vacuum_deletes_commits_nothing(tmp_path: Path) -> None:
    """The vacuum planned (and began deleting) the target's table versions before the
    restore took its lease: the restore waits for it, then finds the version gone and
    commits nothing, in one line naming the table and version."""
    root = str(tmp_path / "ns")
    ns = PartitionedNamespace.create(root, SCHEMA, ["c"])
    write_table(ns, _input(range(6), ("US",)))
    target = ns.refresh().manifest_version
    (table,) = ns.partitions()
    write_table(ns.refresh(), _input(range(6, 9), ("US",)), mode="overwrite")
    held = HeldVacuum(root)
    latest = lance.dataset(f"{root}/__manifest").version
    restoring = Background(lambda: restore(root, version=target), 0.0)
    time.sleep(1.0)
    assert restoring.thread.is_alive()  # waiting for the vacuum
    held.finish()
    restoring.join()
    error = restoring.error
    assert isinstance(error, InvalidInput) and "\n" not in str(error), repr(error)
    assert "nothing changed" in str(error)
    assert str(target) in str(error) or table.object_id in str(error), str(error)
    assert lance.dataset(f"{root}/__manifest").version == latest
    assert independent_read(root) == _rows(_input(range(6, 9), ("US",)))


def test_vacuum_spares_what_a_live_lease_builds_on_even_when_planned_as_of_later(tmp_path: Path) -> None:
    """A restore holding its lease (paused before its commit) keeps its target whole
    against a vacuum planned three days later with the minimum retention: the re-check
    before deleting judges leases on the real clock."""
    root = str(tmp_path / "ns")
    ns = PartitionedNamespace.create(root, SCHEMA, ["c"])
    write_table(ns, _input(range(6)))
    target = ns.refresh().manifest_version
    write_table(ns.refresh(), _input(range(6, 12)), mode="overwrite")
    paused, resume = threading.Event(), threading.Event()

    def hook() -> None:
        paused.set()
        assert resume.wait(60)

    restoring = Background(lambda: restore(root, version=target, before_commit=hook), 0.0)
    assert paused.wait(60)
    report = vacuum(root, DAY, now=dt.datetime.now(dt.UTC) + dt.timedelta(days=3))
    assert any("write in progress" in s for s in report.skipped), report.skipped
    resume.set()
    restoring.join()
    assert restoring.error is None, restoring.error
    assert independent_read(root) == _rows(_input(range(6)))
