"""pylance reports version times as naive *local* times: history, timestamp travel and
vacuum's retention must read them so on a machine whose zone is not UTC (EMR nodes,
laptops). Run in a fresh process with ``TZ`` set, since the zone is read at start-up."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

from tests.subprocess_runs import run_ok

SCENARIO = textwrap.dedent(
    """
    import datetime as dt, sys, time
    import pyarrow as pa
    from partitioning.storage.history import version_at
    from partitioning.tables.vacuum import vacuum
    from partitioning.namespace import PartitionedNamespace
    from partitioning.tables.write import write_table

    root = sys.argv[1]
    assert time.localtime().tm_gmtoff != 0, "the scenario needs a zone that is not UTC"
    before = dt.datetime.now(dt.UTC)
    ns = PartitionedNamespace.create(root, pa.schema([("id", pa.int64())]), [])
    write_table(ns, pa.table({"id": [1, 2]}))
    after = dt.datetime.now(dt.UTC)
    newest = ns.history(limit=1)
    stamp = newest.column("timestamp")[0].as_py()
    assert before - dt.timedelta(seconds=5) <= stamp <= after + dt.timedelta(seconds=5), (stamp, before, after)
    assert version_at(root, after) == ns.refresh().manifest_version
    report = vacuum(root, retain=dt.timedelta(hours=1), dry_run=True, allow_short_retention=True)
    assert not report.deleted, report.summary()
    print("ok")
    """
)


def test_version_times_are_read_in_the_machines_zone(tmp_path: Path) -> None:
    script = tmp_path / "scenario.py"
    script.write_text(SCENARIO)
    env = {**os.environ, "TZ": "America/Los_Angeles", "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    proc = run_ok([sys.executable, str(script), str(tmp_path / "ns")], env=env, timeout=120)
    assert proc.stdout.strip().endswith("ok")
