"""A merge, update, restore or compaction killed with SIGKILL at any point, then vacuum
(issue 37, item 4): the latest version stays readable and complete.

Each operation runs in a process of its own (:mod:`tests.kill_worker`) and is killed after
a random delay within its run. Then vacuum runs with the shortest retention allowed, with
the override (retain=0), and again once the dead operation's lease has lapsed. After each
step an independent reader (plain Lance on ``__manifest`` and on each table at its
``read_version``) reads the latest version whole, and it holds the rows from before the
operation or from after it, nothing else.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from partitioning import PartitionedNamespace
from partitioning.storage.lease_files import LEASE_TTL, list_leases
from partitioning.tables.vacuum import vacuum
from partitioning.tables.write import write_table
from tests.test_protected_path import SCHEMA, _input, independent_read

REPO = Path(__file__).resolve().parents[1]
ZERO = dt.timedelta(0)
DAY = dt.timedelta(hours=24)
FAST = ["restore", "compact"]  # no SparkSession: every commit point and random times in make test
SPARK = {"merge": 4, "update": 2}  # Lance commits each makes on this namespace (more than one table)


def _setup(root: str, kind: str) -> tuple[list[tuple[int, str]], int]:
    """Four appends (small fragments to compact), then an overwrite of two partitions; a
    restore's target is the version before the overwrite, and a column added after it
    makes the restore change properties and rows (staged, then applied)."""
    ns = PartitionedNamespace.create(root, SCHEMA, ["c"])
    for i in range(4):
        write_table(ns.refresh(), _input(range(i * 5, i * 5 + 5), ("US", "FR", "DE")))
    target = ns.refresh().manifest_version
    write_table(ns.refresh(), _input(range(20, 26), ("US", "IT")), mode="overwrite_partitions")
    if kind == "restore":
        ns.refresh().add_columns({"note": "string"})
    return independent_read(root), target


def _after(kind: str, before: list[tuple[int, str]], restored: list[tuple[int, str]]) -> list[tuple[int, str]]:
    if kind == "restore":
        return restored
    if kind == "compact":
        return before
    if kind == "merge":
        changed = {1: "DE", 2: "US", 500: "FR"}
        return sorted([r for r in before if r[0] not in changed] + sorted(changed.items()))
    return sorted((i + 1000, c) if c == "US" else (i, c) for i, c in before)


def _lapse_leases(root: str) -> None:
    """The dead operation's lease looks as if its heartbeat stopped LEASE_TTL ago."""
    then = dt.datetime.now(dt.UTC) - LEASE_TTL - dt.timedelta(minutes=1)
    for lease in list_leases(root):
        path = Path(lease.uri)
        body = json.loads(path.read_text())
        body["heartbeat"] = then.isoformat()
        path.write_text(json.dumps(body))
        os.utime(path, (then.timestamp(), then.timestamp()))


def _run(root: str, kind: str, target: int, *, after_commits: int = 0, delay: float | None = None) -> str:
    """Run the operation in a process of its own; kill it with SIGKILL after its
    ``after_commits``-th Lance commit (it does that itself) or ``delay`` seconds after it
    is ready. What it printed last (``done <N>`` if it finished)."""
    args = [sys.executable, str(REPO / "tests" / "kill_worker.py"), kind, root, str(target)]
    env = {**os.environ, "LP_KILL_AFTER_COMMITS": str(after_commits)}
    with subprocess.Popen(
        args, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    ) as proc:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        if delay is not None:
            time.sleep(delay)
            proc.send_signal(signal.SIGKILL)
        last = proc.stdout.read().strip()
        proc.wait(300)
    return last


def _check_after_kill(root: str, states: tuple[list[tuple[int, str]], ...], label: str) -> None:
    """Readable and complete now, after vacuum with the shortest retention, with the override,
    and once the dead operation's lease has lapsed."""
    assert independent_read(root) in states, label
    if "restore" in label:
        # properties and rows change together: the restored rows come with the restored schema
        restored = independent_read(root) == states[1]
        names = PartitionedNamespace.load(root).schema.names
        assert names == (["id", "c"] if restored else ["id", "c", "note"]), (label, names)
    for step in ("minimum", "override", "lapsed"):
        if step == "lapsed":
            _lapse_leases(root)
        if step == "minimum":
            vacuum(root, DAY)
        else:
            vacuum(root, ZERO, allow_short_retention=True)
        assert independent_read(root) in states, (label, step)
    assert list_leases(root) == []


def _case(tmp_path: Path, name: str, kind: str) -> tuple[str, int, tuple[list[tuple[int, str]], ...]]:
    root = str(tmp_path / name)
    before, target = _setup(root, kind)
    restored = sorted(independent_read_at(root, target)) if kind == "restore" else []
    return root, target, (before, _after(kind, before, restored))


@pytest.mark.parametrize("kind", FAST)
def test_killed_at_every_commit_point_then_vacuum(tmp_path: Path, kind: str) -> None:
    """Killed right after each of its Lance commits in turn (dataset or ``__manifest``)."""
    root, target, _ = _case(tmp_path, "count", kind)
    total = int(_run(root, kind, target).split()[1])
    assert total >= 3, total  # a dataset or properties commit before the __manifest rows commit
    for k in range(1, total + 1):
        root, target, states = _case(tmp_path, f"k{k}", kind)
        assert _run(root, kind, target, after_commits=k) == "", f"{kind} was not killed after commit {k}"
        _check_after_kill(root, states, f"{kind} killed after commit {k} of {total}")


@pytest.mark.parametrize("kind", FAST)
def test_killed_at_random_times_then_vacuum(tmp_path: Path, kind: str) -> None:
    rng = random.Random(f"kill-{kind}")
    root, target, _ = _case(tmp_path, "timed", kind)
    began = time.monotonic()
    _run(root, kind, target)
    duration = time.monotonic() - began
    for n in range(2):
        root, target, states = _case(tmp_path, f"t{n}", kind)
        _run(root, kind, target, delay=rng.uniform(0, duration))
        _check_after_kill(root, states, f"{kind} killed at a random time, round {n}")


@pytest.mark.parametrize("kind", [pytest.param(k, marks=[pytest.mark.slow] if k != "merge" else []) for k in SPARK])
def test_a_killed_spark_operation_then_vacuum(tmp_path: Path, kind: str) -> None:
    """A merge or update (each in a SparkSession of its own) killed after a random one of its
    commits; the update (the same rewrite path as the merge) under the slow marker."""
    k = random.Random(f"kill-{kind}").randint(1, SPARK[kind])
    root, target, states = _case(tmp_path, "ns", kind)
    assert _run(root, kind, target, after_commits=k) == "", f"{kind} made fewer than {k} Lance commits"
    _check_after_kill(root, states, f"{kind} killed after commit {k}")


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(SPARK))
def test_a_killed_spark_operation_at_every_point_then_vacuum(tmp_path: Path, kind: str) -> None:
    """Every commit point of a merge or update, and random times."""
    rng = random.Random(f"kill-all-{kind}")
    for k in range(1, SPARK[kind] + 1):
        root, target, states = _case(tmp_path, f"k{k}", kind)
        assert _run(root, kind, target, after_commits=k) == ""
        _check_after_kill(root, states, f"{kind} killed after commit {k}")
    for n in range(3):
        root, target, states = _case(tmp_path, f"t{n}", kind)
        _run(root, kind, target, delay=rng.uniform(2, 20))
        _check_after_kill(root, states, f"{kind} killed at a random time, round {n}")


def independent_read_at(root: str, version: int) -> list[tuple[int, str]]:
    import lance

    manifest = lance.dataset(f"{root}/__manifest", version=version)
    out = []
    for row in manifest.to_table(filter="object_type = 'table'").to_pylist():
        ds = lance.dataset(f"{root}/{row['location']}", version=row["read_version"])
        out.extend((r["id"], r["c"]) for r in ds.to_table(columns=["id", "c"]).to_pylist())
    return out
