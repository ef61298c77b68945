"""Merges and updates finish under contention (issue 37, item 3).

Another process appends, deletes and compacts the very partitions a merge or update reads,
every 0.3-1.5 s (:mod:`tests.contention_worker`). Each merge and update must commit within
a bounded time (taking an exclusive intent after two lost rounds), report its rounds and
time, and the namespace must hold exactly what a plain-Python replay of the history, in
commit order, gives: the adversary's appends (rows known from their write ids), its deletes
(``id IN (...)`` in the history's filter), and the merges and updates through the
independent oracle of ``tests/merge_oracle.py``.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from partitioning import PartitionedNamespace
from partitioning.tables.write import write_table
from pipelines import merge_partitioned, update_rows
from pipelines.maintenance.history import history
from pipelines.write.rounds import INTENT_AFTER
from tests import merge_oracle as oracle
from tests.contention_worker import SCHEMA, appended

COLUMNS = ["id", "p", "v"]
BOUND = 240.0  # seconds any one merge or update may take


def _initial() -> list[dict[str, int]]:
    return [{"id": i, "p": i % 3, "v": i} for i in range(30)]


@pytest.mark.parametrize(("via", "least"), [("tasks", 8), ("driver", 3)])
def test_merges_and_updates_finish_against_a_steady_writer_and_match_a_replay(
    spark: SparkSession, tmp_path: Path, via: str, least: int, request: pytest.FixtureRequest
) -> None:
    """Through Spark's tasks (long rounds: where contention bites) and the driver's small
    path (rounds of about a second: the adversary writes fewer times meanwhile)."""
    if via == "tasks":
        request.getfixturevalue("spark_tasks")
    root = str(tmp_path / "ns")
    ns = PartitionedNamespace.create(root, SCHEMA, ["p"])
    write_table(ns, pa.Table.from_pylist(_initial(), schema=SCHEMA), write_id="init")
    stop = tmp_path / "stop"
    repo = Path(__file__).resolve().parents[1]
    worker = subprocess.Popen(
        [sys.executable, str(repo / "tests" / "contention_worker.py"), root, str(stop), "37"],
        cwd=repo,
        stderr=subprocess.PIPE,
        text=True,
    )
    merges = [
        [(1, 1, 1001), (2, 2, 1002), (31, 1, 31), (100_011, 1, 7)],
        [(4, 1, 2004), (5, 2, 2005), (32, 2, 32)],
    ]
    updates = [("p = 1", "v + 10000"), ("p = 2", "v * 2")]
    done: list[tuple[str, Any]] = []
    deadline = time.monotonic() + BOUND
    try:
        time.sleep(2.0)  # the adversary is writing
        first = PartitionedNamespace.load(root).manifest_version
        cycle = 0
        # at least one cycle of each, and on until the adversary has written `least` times meanwhile
        while cycle < len(merges) or (_adversary_since(spark, root, first) < least and time.monotonic() < deadline):
            rows = [(i, p, v + cycle) for i, p, v in merges[cycle % len(merges)]]
            where, expr = updates[cycle % len(updates)]
            cycle += 1
            began = time.monotonic()
            source = spark.createDataFrame(rows, "id long, p int, v long")
            result = merge_partitioned(source, root, on="id")
            _check_report(result, time.monotonic() - began)
            print(result.summary())
            done.append(("MERGE", rows))
            began = time.monotonic()
            result = update_rows(root, set={"v": expr}, where=where, spark=spark)
            _check_report(result, time.monotonic() - began)
            print(result.summary())
            done.append(("UPDATE", (where, expr)))
    finally:
        stop.write_text("stop")
        _, errors = worker.communicate(timeout=120)
    assert worker.returncode == 0, errors[-3000:]

    entries = sorted(history(spark, root).collect(), key=lambda r: r.version)
    ours = iter(done)
    state: list[dict[str, Any]] = []
    for entry in entries:
        params = dict(entry.parameters or {})
        if entry.operation == "WRITE":
            wid = params.get("write_id", "")
            state.extend(_initial() if wid == "init" else appended(int(wid.removeprefix("adv-"))))
        elif entry.operation == "DELETE":
            ids = {int(i) for i in re.findall(r"\d+", params["filter"])}
            state = [r for r in state if r["id"] not in ids]
        elif entry.operation in ("MERGE", "UPDATE"):
            kind, spec = next(ours)
            assert kind == entry.operation
            if kind == "MERGE":
                source = [dict(zip(COLUMNS, r, strict=True)) for r in spec]
                state = oracle.merge(state, source, ["id"], oracle.Case())
            else:
                where, expr = spec
                part = int(where.split("=")[1])
                state = [{**r, "v": _apply(expr, r["v"])} if r["p"] == part else r for r in state]
        else:
            assert entry.operation in ("CREATE", "COMPACT", "INTENT", "OPTIMIZE_MANIFEST"), entry.operation
    assert next(ours, None) is None  # every merge and update is in the history
    assert oracle.canonical(oracle.stored_rows(root, "p"), COLUMNS) == oracle.canonical(state, COLUMNS)
    assert _adversary_since(spark, root, first) >= least, "the adversary must really have been writing"


def _adversary_since(spark: SparkSession, root: str, version: int) -> int:
    """The adversary's commits after ``version`` of ``__manifest``."""
    entries = history(spark, root).where(f"version > {version}").collect()
    return sum(e.operation in ("WRITE", "DELETE", "COMPACT") for e in entries)


def _check_report(result: Any, elapsed: float) -> None:
    """Committed within the bound; rounds and time reported; past the intent threshold only with one."""
    assert elapsed < BOUND, elapsed
    assert result.rounds >= 1, result  # a committed rewrite took at least one round
    # timed inside the call (rounded to 1 ms), so never longer than the caller's own clock
    assert 0 < result.seconds <= elapsed + 0.001, (result.seconds, elapsed)
    assert f"{result.seconds:.1f} s" in result.summary()
    if result.rounds > INTENT_AFTER:
        assert result.intent, result


def _apply(expr: str, v: int) -> int:
    return v + 10000 if expr == "v + 10000" else v * 2
