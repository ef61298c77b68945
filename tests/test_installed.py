"""Works installed, not only cloned (issue 47): the wheel carries the JVM layer, a plain session gets it.

The wheel is built from this checkout as a packager builds it (``pip wheel``: setup.py builds
the jar from java/ into it) and installed with ``pip install --target`` into a fresh virtual
environment outside the repository, which sees the project's dependencies but not this
checkout. tests/installed_scenarios.py then runs with that environment's interpreter, from
a directory outside the repository: a plain session with nothing configured, a session
started with ``spark.jars`` = ``python -m pipelines.jar``, and a ``local-cluster`` job
submitted with the environment packed as ``--archives``. Oracles: the rows plain
pylance reads, the answers written in the scenario, and Spark's plans ("K of N partition tables").
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pyspark
import pytest
from subprocess_runs import run_ok

REPO = Path(__file__).resolve().parents[1]
DEPENDENCIES = Path(pyspark.__file__).resolve().parents[1]  # the project's site-packages: pyspark, lance, ...
DML = [[1, "US", 11], [2, "DE", 200], [4, "US", 40], [5, "JP", 50]]  # JSON rows


@dataclass(frozen=True)
class Installed:
    wheel: Path
    venv: Path
    site: Path
    work: Path

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_CONF_DIR", "PYSPARK_SUBMIT_ARGS")}
        env.update(PYSPARK_PYTHON=str(self.python), PYSPARK_DRIVER_PYTHON=str(self.python), SPARK_LOCAL_IP="127.0.0.1")
        return env

    def run(self, *args: str, timeout: int = 600) -> subprocess.CompletedProcess[str]:
        return run_ok([str(self.python), *args], cwd=self.work, env=self.env(), timeout=timeout)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    base = tmp_path_factory.mktemp("installed")
    dist = base / "dist"
    run_ok(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist), str(REPO)]
    )
    (wheel,) = dist.glob("lance_partitioned-*.whl")
    venv = base / "venv"
    run_ok([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    (site,) = (venv / "lib").glob("python3.*/site-packages")
    (site / "dependencies.pth").write_text(f"{DEPENDENCIES}\n")  # a path, not a site dir: no editable finder
    run_ok([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(wheel)])
    work = base / "work"
    work.mkdir()
    shutil.copy2(REPO / "tests" / "installed_scenarios.py", work)
    return Installed(wheel, venv, site, work)


def outside_the_repository(out: dict[str, object], installed: Installed) -> None:
    assert str(out["package"]).startswith(str(installed.site)), out["package"]
    paths = [Path(p) for p in out["sys_path"]]  # type: ignore[attr-defined]
    code = [p for p in paths if p.is_relative_to(REPO) and not p.is_relative_to(DEPENDENCIES)]
    assert code == [], out["sys_path"]  # the checkout's code is not importable, only its venv's dependencies


def test_the_wheel_carries_the_jar_and_the_package_says_where_it_is(installed: Installed) -> None:
    names = zipfile.ZipFile(installed.wheel).namelist()
    assert "pipelines/jars/lance-partitioned.jar" in names
    assert {"pipelines/spark_conf/log4j2.properties", "pipelines/spark_conf/spark-defaults.conf"} <= set(names)
    printed = installed.run("-m", "pipelines.jar").stdout.strip()
    assert printed == str(installed.site / "pipelines" / "jars" / "lance-partitioned.jar")
    jar = zipfile.ZipFile(printed).namelist()
    assert "lance_partitioned/LanceProvider.class" in jar and "META-INF/services/" in "".join(jar)


def test_a_plain_session_gets_the_jvm_layer(installed: Installed) -> None:
    proc = installed.run("installed_scenarios.py", "plain", str(installed.work))
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    outside_the_repository(out, installed)
    assert out["where"] == out["oracle"] and len(out["oracle"]) == 10
    assert out["where_plan"] is True  # pruned by the JVM layer, not a full scan
    assert out["count"] == 10
    assert out["dml"] == DML and out["sql_plan"] is True
    assert "has no JVM layer" not in proc.stderr
    # a value refused inside a Spark task: one line, and at most a few other stderr lines
    assert out["refused"] is not None and len(out["refused"].splitlines()) == 1, out["refused"]
    assert "'x'" in out["refused"] and "column 'p'" in out["refused"], out["refused"]
    after = proc.stderr.split("=== refused write")[1].splitlines()
    other = [line for line in after if line.strip() and " INFO " not in line]
    assert len(other) <= 10, other


def test_a_session_started_with_the_packaged_jar(installed: Installed) -> None:
    proc = installed.run("installed_scenarios.py", "jars", str(installed.work))
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    outside_the_repository(out, installed)
    assert out["where"] == out["oracle"] and out["where_plan"] is True and out["count"] == 10
    assert out["dml"] == DML and out["sql_plan"] is True


def test_a_cluster_job_with_the_environment_as_an_archive(installed: Installed) -> None:
    """docs/operations.md's EMR recipe on local-cluster: the environment as --archives, no --jars.

    The archive is the environment packed with tar: venv-pack refuses an environment that
    reaches its dependencies through a ``.pth`` path, as this one does (installing them again
    would copy about 1 GB); on one machine the unpacked ``bin/python`` and that path resolve
    as venv-pack's relocated ones would."""
    archive = installed.work / "environment.tar.gz"
    run_ok(["tar", "-czf", str(archive), "-C", str(installed.venv), "."])
    submit = Path(sys.executable).parent / "spark-submit"
    proc = run_ok(
        [
            str(submit),
            "--master",
            "local-cluster[2,1,1024]",
            "--archives",
            f"{archive}#environment",
            "--conf",
            "spark.pyspark.python=./environment/bin/python",
            "--conf",
            f"spark.pyspark.driver.python={installed.python}",
            "installed_scenarios.py",
            "job",
            str(installed.work),
        ],
        cwd=installed.work,
        env=installed.env(),
        timeout=900,
    )
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    outside_the_repository(out, installed)
    assert out["where"] == out["oracle"] and out["where_plan"] is True and out["count"] == 10
    executors = out["executors"]
    assert executors and all(p.endswith("environment/bin/python") for p in executors), executors  # type: ignore[union-attr]


def test_without_the_jar_the_first_read_says_so_in_one_warning_line(installed: Installed) -> None:
    """Where Spark cannot take the jar (here: it is gone from the install), the session keeps
    the Python source and the first read says what is lost and the setting that brings it."""
    jar = installed.site / "pipelines" / "jars" / "lance-partitioned.jar"
    hidden = jar.with_suffix(".hidden")
    jar.rename(hidden)
    try:
        proc = installed.run("installed_scenarios.py", "python-only", str(installed.work))
    finally:
        hidden.rename(jar)
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["where"] == out["oracle"]
    said = [line for line in proc.stderr.splitlines() if "JVM layer" in line]
    assert len(said) == 1 and "--jars" in said[0] and "spark.jars=" in said[0], proc.stderr[-2000:]
