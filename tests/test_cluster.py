"""A multi-JVM cluster (``local-cluster[2,1,1024]``): relative roots, retried tasks, a killed executor.

The scenarios run in a subprocess (one SparkContext per process); see
tests/cluster_scenarios.py for what is compared with which oracle.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def test_a_relative_root_on_a_multi_jvm_cluster(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    env = dict(
        os.environ,
        PYSPARK_PYTHON=sys.executable,
        SPARK_LOCAL_IP="127.0.0.1",
        PYTHONPATH=os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")]),
    )
    proc = subprocess.run(
        [sys.executable, str(HERE / "cluster_scenarios.py"), str(work)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    dirs = [Path(d) for d in report["executor_dirs"]]
    for app in {d.parent for d in dirs if d.parent.name.startswith("app-")}:
        shutil.rmtree(app, ignore_errors=True)  # Spark's work/app-* under its install
    assert report["mismatches"] == [], report
    # the executors ran in their own working directories, not the driver's
    assert len(dirs) >= 2 and all(d != work and work not in d.parents for d in dirs), dirs
