"""Backfills commit beside a process that appends, deletes and compacts the same partitions.

The adversary (:mod:`tests.contention_worker`) writes every 0.3-1.5 s; compaction rewrites
the fragments a backfill read, which used to fail the backfill (5 of 13 runs). Each
backfill must commit, and pylance must read, in every row the backfill saw, the value
computed here in plain Python (``v * (k + 2)``); rows appended meanwhile are NULL.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import lance
import pyarrow as pa
from pyspark.sql import SparkSession

from partitioning import PartitionedNamespace
from partitioning.tables.write import write_table
from pipelines.backfill.api import backfill_columns
from tests.contention_worker import SCHEMA

BACKFILLS = 3


def test_backfills_beside_appends_deletes_and_compaction_commit_with_every_value(
    spark: SparkSession, tmp_path: Path
) -> None:
    root = str(tmp_path / "ns")
    ns = PartitionedNamespace.create(root, SCHEMA, ["p"])
    for k in range(4):  # several fragments per partition, for compaction to rewrite
        ids = list(range(k * 500, (k + 1) * 500))
        write_table(ns, pa.table({"id": ids, "p": [i % 3 for i in ids], "v": ids}, schema=SCHEMA))
    stop = tmp_path / "stop"
    repo = Path(__file__).resolve().parents[1]
    worker = subprocess.Popen(
        [sys.executable, str(repo / "tests" / "contention_worker.py"), root, str(stop), "48"],
        cwd=repo,
        stderr=subprocess.PIPE,
        text=True,
    )
    results = []
    try:
        time.sleep(1.0)
        for k in range(BACKFILLS):
            results.append(backfill_columns(spark, root, {f"c{k}": f"v * {k + 2}"}))
    finally:
        stop.write_text("stop")
        _, errors = worker.communicate(timeout=120)
    assert worker.returncode == 0, errors[-3000:]
    rows = []
    for table in PartitionedNamespace.load(root).partitions():
        rows += lance.dataset(table.uri, version=table.read_version).to_table().to_pylist()
    originals = [r for r in rows if r["id"] < 2000]
    assert len(originals) == 2000  # the adversary deletes only rows it appended
    for k in range(BACKFILLS):
        assert all(r[f"c{k}"] == r["v"] * (k + 2) for r in originals), k
        assert all(r[f"c{k}"] in (None, r["v"] * (k + 2)) for r in rows), k
    print([r.summary() for r in results])
