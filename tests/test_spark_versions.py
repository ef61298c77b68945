"""The PySpark versions ``setup.cfg`` claims, each running the smoke scenarios (``make test-matrix``).

For each minor in the range, its newest patch is installed with ``pip install --no-deps
--target build/matrix/<version>/site`` (beside the project's environment, which gives every
other dependency) and put first on ``PYTHONPATH``; tests/version_smoke.py then runs classic
and Spark Connect with the one jar the wheel carries, compiled against the project's own
PySpark. The JVM layer reaches what differs between minors by reflection. Spark 4.0 is not
in the range: PySpark 4.0 has no ``arrow_udf``, which the partition hashes need.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pyspark
import pytest
from subprocess_runs import run_ok

REPO = Path(__file__).resolve().parents[1]
JAR = REPO / "build" / "lance-partitioned-udfs.jar"
VERSIONS = ("4.1.4", "4.2.1", "4.3.0")  # the newest patch of each minor setup.cfg allows
STEPS = ["session", "write", "read", "sql", "merge", "stream"]


def pyspark_site(version: str) -> Path | None:
    """Where ``pyspark==version`` is installed for these runs (None: the environment's own)."""
    if version == pyspark.__version__:
        return None
    site = REPO / "build" / "matrix" / version / "site"
    if not (site / "pyspark" / "version.py").exists():
        py4j = importlib.metadata.version("py4j")
        run_ok(
            [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site),
             f"pyspark=={version}", f"py4j=={py4j}"],
            timeout=1200,
        )  # fmt: skip
    return site


def test_the_range_in_setup_cfg_is_the_one_tested() -> None:
    text = (REPO / "setup.cfg").read_text()
    assert "pyspark>=4.1,<4.4" in text
    assert pyspark.__version__ == VERSIONS[-1]
    assert zipfile.ZipFile(JAR).read("lance_partitioned/spark-version").decode().strip() == pyspark.__version__


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["classic", "connect"])
@pytest.mark.parametrize("version", VERSIONS)
def test_the_smoke_scenarios_on_each_pyspark(version: str, mode: str, tmp_path: Path) -> None:
    site = pyspark_site(version)
    paths = [str(p) for p in (site, REPO, REPO / "tests") if p is not None]
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_HOME", "SPARK_REMOTE", "PYSPARK_SUBMIT_ARGS")}
    env.update(
        PYTHONPATH=os.pathsep.join(paths),
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        SPARK_LOCAL_IP="127.0.0.1",
    )
    proc = subprocess.run(
        [sys.executable, str(REPO / "tests" / "version_smoke.py"), mode, str(tmp_path / "work"), str(JAR)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 0 and proc.stdout.rstrip().endswith("DONE"), proc.stderr[-3000:]
    assert lines[0]["pyspark"] == version and lines[0]["mode"] == mode, lines[0]
    steps = {line["step"]: line for line in lines[1:]}
    assert list(steps) == STEPS
    failed = {name: line.get("detail") for name, line in steps.items() if not line["ok"]}
    assert failed == {}, (failed, proc.stderr[-3000:])
