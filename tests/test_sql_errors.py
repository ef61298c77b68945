"""Project errors are one line at the SQL doors; the docs' spark-sql and spark-submit recipes run as written.

Each door runs in a fresh process whose whole stderr is read: PySpark (``spark.sql`` in a
``build_session`` session) and the ``spark-sql`` CLI started exactly as docs/sql.md shows.
A refused spec, an unknown write option, a version that does not exist, a column the spec
needs, a value the write refuses (raised in a task) and a statement the catalog does not
support each print ONE line, ``[LANCE_<KIND>] <the project's line>``; nothing else reaches
stderr but the JDK's own start-up warning and the layer's INFO lines.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from test_docs import fenced_blocks

REPO = Path(__file__).resolve().parents[1]
JVM_WARNING = "WARNING: Using incubator modules: jdk.incubator.vector"

SETUP = [
    "CREATE NAMESPACE IF NOT EXISTS lance.shop",
    "CREATE TABLE IF NOT EXISTS lance.shop.orders (id BIGINT, country STRING) PARTITIONED BY (country)",
]
BAD = {
    "CREATE TABLE lance.shop.x PARTITIONED BY (bucket(0, id)) AS SELECT 1L AS id": (
        "[LANCE_SPEC_ERROR] bucket: num_buckets must be an integer >= 1, got 0"
    ),
    "CREATE TABLE lance.shop.y (id BIGINT, ts TIMESTAMP) PARTITIONED BY (days(ts))": (
        "[LANCE_SPEC_ERROR] PARTITIONED BY days(ts) counts days since 1970"
    ),
    "INSERT INTO lance.shop.orders WITH ('bogus' = '1') VALUES (1, 'US')": (
        "[LANCE_INVALID_INPUT] unknown lance_partitioned write option 'bogus'"
    ),
    "SELECT * FROM lance.shop.orders VERSION AS OF 999": "[LANCE_INVALID_INPUT] ",
    "ALTER TABLE lance.shop.orders DROP COLUMNS (country)": "[LANCE_SPEC_ERROR] cannot drop column 'country'",
    "INSERT INTO lance.shop.orders VALUES (1, repeat('x', 2000))": (
        "[LANCE_INVALID_INPUT] partition field 'country': a value of 2,000 bytes is longer than the limit"
    ),
    "ALTER TABLE lance.shop.orders RENAME TO lance.shop.other": "[LANCE_UNSUPPORTED] RENAME TABLE is not supported",
    # reads the Python source plans itself (its own options)
    "SELECT * FROM lance.shop.orders WITH ('filter' = 'nosuch = 1')": (
        "[LANCE_SCHEMA_ERROR] unknown column 'nosuch' in filter; columns are: id, country"
    ),
    "SELECT * FROM lance.shop.orders WITH ('nearest' = '{bad')": "[LANCE_INVALID_INPUT] option nearest is not JSON",
}


def noise(line: str) -> bool:
    """What may share stderr with the errors: the JDK's start-up warning, INFO lines, the CLI's timings."""
    return line == JVM_WARNING or " INFO " in line or line.startswith("Time taken:") or not line.strip()


def recipe(page: str, program: str) -> str:
    """The one ```bash block of ``page`` that runs ``program``."""
    found = [b.code for b in fenced_blocks((REPO / "docs" / page).read_text(), page) if b.lang == "bash"]
    found = [code for code in found if program in code]
    assert len(found) == 1, found
    return found[0]


def run_bash(code: str, cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1")
    return subprocess.run(
        ["bash", "-e", "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def run_python(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``code`` in a Python process of its own, from the repository root."""
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=REPO,
        env=dict(os.environ, SPARK_LOCAL_IP="127.0.0.1"),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_the_spark_sql_and_spark_submit_recipes_run_as_written() -> None:
    """docs/sql.md's commands, from the repository root, each exactly as the page shows it."""
    cli = recipe("sql.md", "spark-sql")
    submit = recipe("sql.md", "spark-submit")
    warehouse = REPO / "warehouse" / "cli"
    if warehouse.exists():
        subprocess.run(["rm", "-rf", str(warehouse)], check=True)
    proc = run_bash(cli, REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "1"  # the US rows
    assert [line for line in proc.stderr.splitlines() if not noise(line)] == []
    proc = run_bash(submit, REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.search(r"\|\s*1\s*\|\s*US\s*\|", proc.stdout), proc.stdout
    assert [line for line in proc.stderr.splitlines() if not noise(line)] == []


def test_every_project_error_is_one_line_in_the_spark_sql_cli(tmp_path: Path) -> None:
    """The docs' spark-sql command with the statements in a file (the CLI going on after an error)."""
    command = recipe("sql.md", "spark-sql").replace("\\\n", " ")
    command = command[: command.index(" -e ")].replace("$PWD/warehouse/cli", str(tmp_path / "wh"))
    script = tmp_path / "statements.sql"
    script.write_text("".join(f"{s};\n" for s in [*SETUP, *BAD]))
    proc = run_bash(f"{command} --hiveconf hive.cli.errors.ignore=true -f {shlex.quote(str(script))}", REPO)
    errors = [line for line in proc.stderr.splitlines() if not noise(line)]
    assert len(errors) == len(BAD), "\n".join(errors)
    for line, want in zip(errors, BAD.values(), strict=True):
        assert line.startswith(want), (line, want)


PYSPARK_DOOR = """
import json, sys
from pipelines import build_session
spark = build_session("errors", master="local[2]")
spark.conf.set("spark.sql.catalog.lance", "lance_partitioned.LanceCatalog")
spark.conf.set("spark.sql.catalog.lance.warehouse", sys.argv[1])
for statement in json.loads(sys.argv[2]):
    spark.sql(statement).collect()
for statement in json.loads(sys.argv[3]):
    try:
        spark.sql(statement).collect()
        print(json.dumps({"statement": statement, "error": None}))
    except Exception as exc:
        cls = type(exc).__name__
        print(json.dumps({"statement": statement, "error": str(exc), "class": cls,
                          "condition": exc.getCondition(), "state": exc.getSqlState()}))
"""


def test_every_project_error_is_one_line_in_pyspark(tmp_path: Path) -> None:
    args = [str(tmp_path / "wh"), json.dumps(SETUP), json.dumps(list(BAD))]
    proc = run_python(PYSPARK_DOOR, *args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert [r["statement"] for r in results] == list(BAD)
    for r, want in zip(results, BAD.values(), strict=True):
        assert r["error"] is not None and r["error"].startswith(want), r
        assert len(r["error"].splitlines()) == 1, r
        assert r["class"] == "IllegalArgumentException" and r["condition"].startswith("LANCE_"), r
        assert re.fullmatch(r"[0-9A-Z]{5}", r["state"]), r
    assert [line for line in proc.stderr.splitlines() if not noise(line)] == []


UNREADABLE = """
import json, pathlib, sys
from pipelines import build_session
spark = build_session("errors", master="local[2]")
spark.conf.set("spark.sql.catalog.lance", "lance_partitioned.LanceCatalog")
spark.conf.set("spark.sql.catalog.lance.warehouse", sys.argv[1])
spark.sql("CREATE NAMESPACE lance.shop")
spark.sql("CREATE TABLE lance.shop.orders (id BIGINT, country STRING) PARTITIONED BY (country)")
spark.sql("INSERT INTO lance.shop.orders VALUES (1, 'US'), (2, 'DE')")
root = pathlib.Path(sys.argv[1], "shop", "orders")
data = [p for p in root.rglob("*.lance") if "__manifest" not in p.parts]
assert len(data) == 2, data
for path in data:
    path.write_bytes(b"not a lance file")
spark.sql(f"CREATE TEMPORARY VIEW planned USING lance_partitioned OPTIONS (path '{root}', filter 'id > 0')")
for statement in ["SELECT sum(id) FROM lance.shop.orders", "SELECT * FROM lance.shop.orders WITH ('filter' = 'id > 0')",
                  "SELECT * FROM planned"]:
    try:
        spark.sql(statement).collect()
        print(json.dumps({"statement": statement, "error": None}))
    except Exception as exc:
        print(json.dumps({"statement": statement, "error": str(exc), "condition": exc.getCondition()}))
"""


def test_a_partition_table_a_task_cannot_read_is_one_line(tmp_path: Path) -> None:
    """Every data file overwritten with garbage: the failing read task's error reaches the
    statement as the project's one line, on the JVM scan and on the Python source's own plan,
    and the task logs stay off stderr."""
    proc = run_python(UNREADABLE, str(tmp_path / "wh"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert len(results) == 3, proc.stdout
    for r in results:
        assert r["error"] is not None and len(r["error"].splitlines()) == 1, r
        assert r["condition"] == "LANCE_PARTITIONING_ERROR", r
        assert re.match(r"\[LANCE_PARTITIONING_ERROR\] scan partition table \S+: .*lance", r["error"], re.I), r
    assert [line for line in proc.stderr.splitlines() if not noise(line)] == []


REUSED_WRITE_ID = """
import sys
from pipelines import build_session
spark = build_session("write ids", master="local[2]")
spark.conf.set("spark.sql.catalog.lance", "lance_partitioned.LanceCatalog")
spark.conf.set("spark.sql.catalog.lance.warehouse", sys.argv[1])
spark.sql("CREATE NAMESPACE lance.shop")
spark.sql("CREATE TABLE lance.shop.orders (id BIGINT, country STRING) PARTITIONED BY (country)")
spark.sql("INSERT INTO lance.shop.orders WITH ('write_id' = 'nightly-1') VALUES (1, 'US')")
print("=== again", file=sys.stderr, flush=True)
spark.sql("INSERT INTO lance.shop.orders WITH ('write_id' = 'nightly-1') VALUES (2, 'DE'), (3, 'FR')")
print(sorted(tuple(r) for r in spark.table("lance.shop.orders").collect()))
"""


def test_a_reused_write_id_commits_nothing_and_says_so_in_one_info_line(tmp_path: Path) -> None:
    proc = run_python(REUSED_WRITE_ID, str(tmp_path / "wh"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "[(1, 'US')]"
    said = [line for line in proc.stderr.split("=== again")[1].splitlines() if "write_id" in line]
    where = tmp_path / "wh" / "shop" / "orders"
    assert len(said) == 1 and said[0].endswith(
        f"INFO lance_partitioned: write_id 'nightly-1' was committed at __manifest v3; this write to {where} "
        "commits nothing (rows under a committed id are dropped)"
    ), said


def test_a_jobs_refused_input_is_one_line(tmp_path: Path) -> None:
    """docs/operations.md's spark-submit line for jobs/ingest.py, on a CSV whose user_id holds 'x'
    for the namespace's bigint column: the job's one ``error:`` line, and no task logs or stacks."""
    from subprocess_runs import spark_submit

    good = tmp_path / "good.csv"
    good.write_text("event_id,country,user_id\n1,US,7\n")
    bad = tmp_path / "bad.csv"
    bad.write_text("event_id,country,user_id\n" + "".join(f"{i},DE,{i if i % 50 else 'x'}\n" for i in range(2, 400)))
    root = str(tmp_path / "events")
    env = dict(
        os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable
    )
    common = ["--root", root, "--format", "csv", "--read-option", "header=true", "--read-option", "inferSchema=true"]
    first = subprocess.run(
        spark_submit("jobs/ingest.py", *common, "--input", str(good), "--partition-by", "country"),
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert first.returncode == 0, first.stderr[-3000:]
    proc = subprocess.run(
        spark_submit("jobs/ingest.py", *common, "--input", str(bad)),
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode != 0
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if not noise(line) and "ingest:" not in line]
    assert lines == ["error: column 'user_id': value 'x' of type string cannot be stored as int without loss"], lines
