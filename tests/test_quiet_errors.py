"""A bad value found in a Spark task reaches the user as one line, at every door: no
executor or scheduler stacks for a project error (Spark's own errors keep theirs)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from subprocess_runs import run_ok, spark_submit

REPO = Path(__file__).resolve().parents[1]


def _csv(path: Path, rows: int, bad_row: int | None) -> Path:
    lines = ["id,country,amount"]
    for i in range(rows):
        amount = "2.5" if i == bad_row else str(i)
        lines.append(f"{i},{('US', 'DE', 'FR')[i % 3]},{amount}")
    path.write_text("\n".join(lines) + "\n")
    return path


def _submit(args: list[str]) -> subprocess.CompletedProcess[str]:
    """jobs/ingest.py under spark-submit from the repository root, as the docs run it."""
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    return subprocess.run(
        spark_submit(REPO / "jobs" / "ingest.py", *args),
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _noise(stderr: str) -> list[str]:
    """Lines other than Spark's start-up notes (hostname, incubator modules)."""
    quiet = ("WARN Utils: Your hostname", "WARN Utils: Set SPARK_LOCAL_IP", "Using incubator modules")
    return [ln for ln in stderr.splitlines() if ln.strip() and not any(q in ln for q in quiet)]


def test_a_bad_value_in_a_csv_through_ingest_is_one_error_line(tmp_path: Path) -> None:
    import pyarrow as pa

    from partitioning import PartitionedNamespace
    from partitioning.tables.write import write_table

    # the namespace an earlier ingest of this CSV made (Spark infers int columns)
    root = str(tmp_path / "ns")
    schema = pa.schema([("id", pa.int32()), ("country", pa.string()), ("amount", pa.int32())])
    ns = PartitionedNamespace.create(root, schema, ["country"])
    write_table(ns, pa.table({"id": [1, 2], "country": ["US", "DE"], "amount": [1, 2]}, schema=schema))
    bad = _csv(tmp_path / "bad.csv", 200, bad_row=137)
    proc = _submit(["--root", root, "--input", str(bad), "--format", "csv"])
    assert proc.returncode == 2, proc.stderr[-3000:]
    # spark-submit hands the Python process's stderr to its own stdout
    noise = _noise(proc.stdout + "\n" + proc.stderr)
    errors = [ln for ln in noise if ln.startswith("error: ")]
    assert errors == ["error: column 'amount': value '2.5' of type double cannot be stored as int without loss"], (
        proc.stderr[-3000:]
    )
    assert len(noise) <= 3, "\n".join(noise)  # the error line, and Spark's one "aborting job" line
    assert not any(ln.lstrip().startswith("at ") for ln in noise)


SCRIPT = """
import sys
import pyarrow as pa
from pipelines import build_session, write_partitioned
spark = build_session("quiet errors")
schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("c", pa.string())])
df = spark.createDataFrame([(1, "a"), (None, "b")], "id long, c string")
try:
    write_partitioned(df, sys.argv[1] + "/refused", partition_by=["c"], schema=schema)
except ValueError as exc:
    print("refused:", exc, flush=True)
read = spark.read.format("lance_partitioned").load(sys.argv[1] + "/big")
read.show(3)
read.limit(2).collect()
print("=== Spark's own error", file=sys.stderr, flush=True)
try:
    spark.sql("SELECT 1 / (id - id) FROM range(3)").collect()
except Exception as exc:
    print("spark:", type(exc).__name__, flush=True)
"""


def test_a_task_error_in_a_session_the_project_built_logs_no_stacks(tmp_path: Path) -> None:
    """A project error in a task, ``show(n)`` and ``LIMIT`` of a data source read (Spark closes
    the worker's connection early: PySpark's daemon printed a BrokenPipeError traceback each
    time), then Spark's own task error, whose trace stays."""
    import pyarrow as pa

    from partitioning import PartitionedNamespace
    from partitioning.tables.write import write_table

    big = PartitionedNamespace.create(str(tmp_path / "big"), pa.schema([("id", pa.int64()), ("c", pa.string())]), ["c"])
    write_table(big, pa.table({"id": list(range(200_000)), "c": [str(i % 5) for i in range(200_000)]}))
    script = tmp_path / "quiet.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    proc = run_ok([sys.executable, str(script), str(tmp_path)], cwd=tmp_path, env=env, timeout=300)
    lines = proc.stdout.splitlines()
    assert lines[0] == "refused: column 'id' is not nullable but the input has NULL", proc.stdout
    assert "only showing top 3 rows" in proc.stdout and lines[-1] == "spark: ArithmeticException", proc.stdout
    ours, theirs = proc.stderr.split("=== Spark's own error")
    assert [ln for ln in _noise(ours) if "aborting job" not in ln and "INFO lance_partitioned" not in ln] == [], ours
    assert "BrokenPipeError" not in ours and "Traceback" not in ours
    assert "Exception in task" in theirs and "\tat " in theirs  # Spark's own failure keeps its trace
