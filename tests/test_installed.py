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


def submitted(installed: Installed, *application: str, conf: dict[str, str] | None = None) -> list[str]:
    """A ``spark-submit`` on ``local-cluster`` with the environment packed as ``--archives``
    (unpacked as ``./environment`` on every node) and no ``--jars``."""
    archive = installed.work / "environment.tar.gz"
    if not archive.exists():
        run_ok(["tar", "-czf", str(archive), "-C", str(installed.venv), "."])
    settings = {
        "spark.pyspark.python": "./environment/bin/python",
        "spark.pyspark.driver.python": str(installed.python),
    }
    settings.update(conf or {})
    command = [str(Path(sys.executable).parent / "spark-submit"), "--master", "local-cluster[2,1,1024]"]
    command += ["--archives", f"{archive}#environment"]
    for key, value in settings.items():
        command += ["--conf", f"{key}={value}"]
    return [*command, *application]


def test_the_airflow_recipes_ingest_refuses_a_bad_value_in_one_line(installed: Installed) -> None:
    """examples/airflow_dag.py's ingest task as its SparkSubmitOperator submits it (the packed
    environment as --archives, the DAG's --conf settings, no --jars; client mode, as
    local-cluster runs Python), the job taken from the installed package, on a CSV whose
    user_id holds 'x' for the namespace's bigint column: the job's one ``error:`` line and
    at most 10 other stderr lines."""
    import jobs.ingest

    work = installed.work / "airflow"
    work.mkdir()
    good = work / "good.csv"
    good.write_text("event_id,country,user_id\n1,US,7\n")
    bad = work / "bad.csv"
    bad.write_text("event_id,country,user_id\n" + "".join(f"{i},DE,{i if i % 50 else 'x'}\n" for i in range(2, 400)))
    job = str(installed.site / "jobs" / Path(jobs.ingest.__file__).name)
    conf = {"spark.sql.session.timeZone": "UTC", "spark.executorEnv.AWS_REGION": "us-east-1"}
    args = ["--root", str(work / "events"), "--format", "csv", "--read-option", "header=true"]
    args += ["--read-option", "inferSchema=true", "--mode", "append"]
    first = ["--input", str(good), "--partition-by", "country", "--write-id", "ingest-2025-12-01"]
    run_ok(submitted(installed, job, *args, *first, conf=conf), cwd=work, env=installed.env(), timeout=900)
    proc = subprocess.run(
        submitted(installed, job, *args, "--input", str(bad), "--write-id", "ingest-2025-12-02", conf=conf),
        cwd=work,
        env=installed.env(),
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert proc.returncode != 0, proc.stdout[-2000:]
    said = [line for line in (proc.stdout + proc.stderr).splitlines() if line.startswith("error:")]
    want = "error: column 'user_id': value 'x' of type string cannot be stored as int without loss"
    assert said == [want], (proc.stdout[-2000:], proc.stderr[-3000:])
    other = [
        line
        for line in proc.stderr.splitlines()
        if line.strip()
        and " INFO " not in line
        and not line.startswith(("error:", "ingest:", "WARNING: Using incubator"))
    ]
    assert len(other) <= 10, other


def test_a_cluster_job_with_the_environment_as_an_archive(installed: Installed) -> None:
    """docs/operations.md's EMR recipe on local-cluster: the environment as --archives, no --jars.

    The archive is the environment packed with tar: venv-pack refuses an environment that
    reaches its dependencies through a ``.pth`` path, as this one does (installing them again
    would copy about 1 GB); on one machine the unpacked ``bin/python`` and that path resolve
    as venv-pack's relocated ones would."""
    proc = run_ok(
        submitted(installed, "installed_scenarios.py", "job", str(installed.work)),
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
