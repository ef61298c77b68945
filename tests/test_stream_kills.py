"""A streaming query SIGKILLed (driver, JVM and Python workers at once) and restarted from its
checkpoint: every input row lands exactly once, and the namespace is readable at every moment.

The stream runs in a process of its own (``tests/stream_worker.py``). The oracle is the
input files as pandas reads them; the stored side is read with pylance from the datasets
at the versions ``__manifest`` records.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import lance
import numpy as np
import pandas as pd
import pytest
from stream_worker import SCHEMA, TOKEN, carriers, kill_all, write_hook

from partitioning import NamespaceNotFound
from partitioning.namespace import PartitionedNamespace
from pipelines import register_data_source

REPO = Path(__file__).resolve().parents[1]
COUNTRIES = ["US", "DE", "FR", "JP", "BR"]


def make_input(directory: Path, files: int, rows: int = 50) -> pd.DataFrame:
    directory.mkdir(parents=True)
    frames = []
    for i in range(files):
        ids = np.arange(i * rows, (i + 1) * rows, dtype=np.int64)
        frame = pd.DataFrame({"id": ids, "country": [COUNTRIES[x % 5] for x in ids], "amount": ids.astype(float) / 4})
        frame.to_parquet(directory / f"part-{i:04d}.parquet", index=False)
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)


def stored_ids(root: Path) -> list[int]:
    """The ids the namespace holds, read with pylance at the versions __manifest records."""
    if not (root / "__manifest").exists():
        return []
    ns = PartitionedNamespace.load(str(root))
    out: list[int] = []
    for table in ns.partitions():
        out.extend(lance.dataset(table.uri, version=table.read_version).to_table(columns=["id"])["id"].to_pylist())
    return out


def start(source: Path, root: Path, checkpoint: Path, token: str, env: dict[str, str] | None = None):
    environ = {**os.environ, TOKEN: token, **(env or {})}
    return subprocess.Popen(
        [sys.executable, str(REPO / "tests" / "stream_worker.py"), str(source), str(root), str(checkpoint)],
        cwd=REPO,
        env=environ,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def finish(proc: subprocess.Popen, token: str, timeout: float = 300) -> str:
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        gone(proc, token)
    assert proc.returncode in (0, -9), err[-3000:]
    return out


def gone(proc: subprocess.Popen, token: str) -> None:
    """Every process of the stream killed, and reaped by the time this returns."""
    kill_all(token)
    proc.communicate(timeout=60)
    deadline = time.monotonic() + 30
    while carriers(token):
        assert time.monotonic() < deadline, f"processes of the stream outlived SIGKILL: {carriers(token)}"
        kill_all(token)
        time.sleep(0.1)


class Watcher:
    """Reads the namespace over and over while the stream runs: every read must succeed, hold
    no id twice, only input ids, and never fewer rows than the read before."""

    def __init__(self, root: Path, valid: set[int]) -> None:
        self.root, self.valid = root, valid
        self.problems: list[str] = []
        self.reads = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Watcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(60)

    def _run(self) -> None:
        last, created = 0, False
        while not self._stop.is_set():
            try:
                ids = stored_ids(self.root)
            except NamespaceNotFound as exc:
                if created:  # a namespace once read never goes away
                    self.problems.append(f"read failed after a read succeeded: {exc}")
                time.sleep(0.05)  # before the first write creates it, it is rightly not there
                continue
            except Exception as exc:  # any failure to read is what this watcher reports
                self.problems.append(f"read failed: {type(exc).__name__}: {exc}")
                continue
            created = created or bool(ids)
            self.reads += 1
            if len(ids) != len(set(ids)):
                self.problems.append(f"a read held {len(ids) - len(set(ids))} duplicate ids")
            if not set(ids) <= self.valid:
                self.problems.append("a read held ids that are not in the input")
            if len(ids) < last:
                self.problems.append(f"a read held {len(ids)} rows after one held {last}")
            last = len(ids)
            time.sleep(0.05)


def check_exactly_once(root: Path, expected: pd.DataFrame) -> None:
    ids = stored_ids(root)
    assert len(ids) == len(set(ids)), "an input row was written twice"
    assert sorted(ids) == sorted(expected["id"].tolist())
    ns = PartitionedNamespace.load(str(root))
    for table in ns.partitions():
        got = lance.dataset(table.uri, version=table.read_version).to_table().to_pandas()
        want = expected[expected["country"] == table.values["country"]]
        assert sorted(got["id"]) == sorted(want["id"])
        assert dict(zip(got["id"], got["amount"], strict=True)) == dict(zip(want["id"], want["amount"], strict=True))


def query_id(checkpoint: Path) -> str:
    return json.loads((checkpoint / "metadata").read_text())["id"]


def finish_here(spark, source: Path, root: Path, checkpoint: Path) -> None:
    """The stream run to its end from its checkpoint in this run's session, as the worker runs it."""
    register_data_source(spark)
    query = (
        spark.readStream.schema(SCHEMA)
        .option("maxFilesPerTrigger", 2)
        .parquet(str(source))
        .writeStream.format("lance_partitioned")
        .option("checkpointLocation", str(checkpoint))
        .option("partition_by", "country")
        .option("auto_compact_after", "4")
        .trigger(availableNow=True)
        .start(str(root))
    )
    query.awaitTermination()


def test_a_stream_killed_around_its_manifest_commits_lands_every_row_once(spark, tmp_path):
    """SIGKILL right before batch 1's __manifest commit (its dataset versions made), then,
    restarted, right after batch 3's (which Spark has not recorded in its checkpoint): each
    restart replays the batch; nothing is written twice and nothing is lost. The last
    restart runs in this run's session."""
    expected = make_input(tmp_path / "in", files=10)
    root, checkpoint = tmp_path / "ns", tmp_path / "ck"
    hook = write_hook(tmp_path / "hook")
    with Watcher(root, set(expected["id"])) as watcher:
        for point, batch, rows in (("before", 1, 1 * 100), ("after", 3, 4 * 100)):
            token = uuid.uuid4().hex
            env = {
                "LP_STREAM_KILL": point,
                "LP_STREAM_KILL_BATCH": str(batch),
                "LP_STREAM_KILL_MARKER": str(tmp_path / f"killed-{point}"),
                "PYTHONPATH": os.pathsep.join([str(hook), os.environ.get("PYTHONPATH", "")]),
            }
            out = finish(start(tmp_path / "in", root, checkpoint, token, env), token)
            assert (tmp_path / f"killed-{point}").exists() and "done" not in out
            ns = PartitionedNamespace.load(str(root))
            assert ns.write_id_committed(f"{query_id(checkpoint)}-{batch}") is (point == "after")
            assert not (checkpoint / "commits" / str(batch)).exists()
            if point == "before":  # the batch's dataset versions were made; __manifest does not record them
                assert any(lance.dataset(t.uri).version > t.read_version for t in ns.partitions())
            assert len(stored_ids(root)) == rows
        finish_here(spark, tmp_path / "in", root, checkpoint)
    assert watcher.reads > 0 and watcher.problems == []
    check_exactly_once(root, expected)
    history = PartitionedNamespace.load(str(root)).history().to_pylist()
    ids = [dict(row["parameters"]).get("write_id") for row in history if row["operation"] == "WRITE"]
    assert sorted(ids) == sorted(f"{query_id(checkpoint)}-{b}" for b in range(5))


def kill_rounds(tmp_path: Path, rounds: int, seed: int) -> None:
    expected = make_input(tmp_path / "in", files=4 * rounds + 8, rows=40)
    root, checkpoint = tmp_path / "ns", tmp_path / "ck"
    rng = random.Random(seed)
    with Watcher(root, set(expected["id"])) as watcher:
        for _ in range(rounds):
            token = uuid.uuid4().hex
            proc = start(tmp_path / "in", root, checkpoint, token)
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "ready", proc.stderr.read() if proc.stderr else ""
            time.sleep(rng.uniform(0.0, 4.0))
            gone(proc, token)
        token = uuid.uuid4().hex
        assert "done" in finish(start(tmp_path / "in", root, checkpoint, token), token)
    assert watcher.problems == []
    check_exactly_once(root, expected)


@pytest.mark.slow
def test_twenty_random_kills_land_every_row_once(tmp_path):
    kill_rounds(tmp_path, rounds=20, seed=3620)
