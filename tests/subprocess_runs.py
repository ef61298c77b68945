"""Running a scenario in a fresh process, for the tests whose Spark cannot share this run's
session (Spark Connect, spark-submit, a process that must start no JVM)."""

from __future__ import annotations

import stat
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path


def user_python(tmp_path: Path) -> Path:
    """A user's Python for the workers: this interpreter, with a marker
    (``LP_PYTHON_WRAPPER=wrapped``) the workers can see."""
    path = tmp_path / "user-python"
    path.write_text(f'#!/bin/sh\nLP_PYTHON_WRAPPER=wrapped exec "{sys.executable}" "$@"\n')
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def run_ok(
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | str | None = None,
    timeout: int = 600,
) -> subprocess.CompletedProcess[str]:
    """``args`` run to completion; fails the test with the tail of stderr unless it exits 0."""
    proc = subprocess.run(
        list(args),
        cwd=cwd,
        env=None if env is None else dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


def spark_submit(script: str | Path, *args: str, master: str = "local[2]") -> list[str]:
    """The docs' ``spark-submit`` line for ``script`` (run it from the repository root): the
    project's properties file and jar, this interpreter's Spark."""
    repo = Path(__file__).resolve().parents[1]
    return [
        str(Path(sys.executable).parent / "spark-submit"),
        "--master",
        master,
        "--properties-file",
        "spark-conf/spark-defaults.conf",
        "--jars",
        str(repo / "build" / "lance-partitioned-udfs.jar"),
        str(script),
        *args,
    ]
