"""Row-level changes commit beside a steady appender (issue 48, part 1).

Another process appends 10 rows every 0.3 s into the very partitions each statement reads
(:mod:`tests.append_worker`, ids >= 100000, which no statement selects). Every SQL
``UPDATE`` / ``DELETE`` / ``MERGE INTO`` and every ``update_rows``, ``merge_partitioned``,
``delete_rows`` and ``replace_where`` must commit within :data:`BOUND` seconds, the Python
ones in one round (rebased, not run again), and after each statement Spark's answer and
plain pylance's rows must equal a replay in plain Python: the statements applied to the
initial rows, plus every append the history records (from its write id).
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
from pyspark.sql import SparkSession

from partitioning import PartitionedNamespace
from partitioning.tables.write import write_table
from pipelines import delete_rows, merge_partitioned, update_rows, write_partitioned
from tests.append_worker import SCHEMA, appended

CATALOG = "lance_beside"
BOUND = 30.0


def _stored(root: str, version: int | None = None) -> list[tuple[int, int, int]]:
    manifest = lance.dataset(str(Path(root) / "__manifest"), version=version).to_table().to_pylist()
    rows: list[tuple[int, int, int]] = []
    for row in manifest:
        if row["object_type"] == "table":
            ds = lance.dataset(str(Path(root) / row["location"]), version=row["read_version"])
            rows += [(r["id"], r["p"], r["v"]) for r in ds.to_table(columns=["id", "p", "v"]).to_pylist()]
    return sorted(rows)


def _appends(root: str, version: int | None = None) -> list[tuple[int, int, int]]:
    """The rows of every append ``__manifest``'s history records up to ``version`` (by write id)."""
    ns = PartitionedNamespace.load(root)
    rows = []
    for entry in ns.history().to_pylist():
        if version is not None and entry["version"] > version:
            continue
        wid = dict(entry["parameters"] or {}).get("write_id", "")
        if wid.startswith("app-"):
            rows += [(r["id"], r["p"], r["v"]) for r in appended(int(wid.removeprefix("app-")))]
    return rows


def test_statements_commit_beside_an_appender_and_every_row_survives(spark: SparkSession, tmp_path: Path) -> None:
    warehouse = str(tmp_path / "wh")
    spark.conf.set(f"spark.sql.catalog.{CATALOG}", "lance_partitioned.LanceCatalog")
    spark.conf.set(f"spark.sql.catalog.{CATALOG}.warehouse", warehouse)
    name = f"t_{uuid.uuid4().hex[:8]}"
    root = str(Path(warehouse, "db", name))
    table = f"{CATALOG}.db.{name}"
    state = {i: (i % 3, i) for i in range(600)}  # id -> (p, v): the statements' rows, replayed here
    write_table(
        PartitionedNamespace.create(root, SCHEMA, ["p"]),
        pa.Table.from_pylist([{"id": i, "p": p, "v": v} for i, (p, v) in state.items()], schema=SCHEMA),
    )
    spark.createDataFrame(
        [(i, i % 3, -i) for i in [*range(20, 40), *range(700, 710)]], "id long, p int, v long"
    ).createOrReplaceTempView("beside_src")

    def sql_merge() -> None:
        spark.sql(
            f"MERGE INTO {table} t USING beside_src s ON t.id = s.id "
            "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
        )
        for i in [*range(20, 40), *range(700, 710)]:
            state[i] = (i % 3, -i)

    def py_merge() -> Any:
        source = spark.createDataFrame([(i, i % 3, 7 * i) for i in range(40, 60)], "id long, p int, v long")
        for i in range(40, 60):
            state[i] = (i % 3, 7 * i)
        return merge_partitioned(source, root, on="id")

    def replace() -> Any:
        df = spark.createDataFrame([(i, i % 3, 5) for i in range(60, 70)], "id long, p int, v long")
        for i in range(60, 80):
            state.pop(i, None)
        for i in range(60, 70):
            state[i] = (i % 3, 5)
        return write_partitioned(df, root, mode="overwrite", replace_where="id >= 60 AND id < 80")

    def shift(ids: range, by: int) -> None:
        for i in ids:
            if i in state:
                state[i] = (state[i][0], state[i][1] + by)

    statements: list[tuple[str, Any]] = [
        ("SQL UPDATE", lambda: (spark.sql(f"UPDATE {table} SET v = v + 1000 WHERE id < 400"), shift(range(400), 1000))),
        (
            "SQL DELETE",
            lambda: (spark.sql(f"DELETE FROM {table} WHERE id < 10"), [state.pop(i, None) for i in range(10)]),
        ),
        ("SQL MERGE", sql_merge),
        (
            "update_rows",
            lambda: (
                shift(range(100, 200), 1),
                update_rows(root, set={"v": "v + 1"}, where="id >= 100 AND id < 200", spark=spark),
            )[1],
        ),
        ("merge_partitioned", py_merge),
        (
            "delete_rows",
            lambda: (
                [state.pop(i, None) for i in range(200, 220)],
                delete_rows(root, "id >= 200 AND id < 220", spark=spark),
            )[1],
        ),
        ("replace_where", replace),
    ]
    spark.sql(f"UPDATE {table} SET v = v WHERE id < 0")  # the catalog and row-level planning warm, untimed
    stop = tmp_path / "stop"
    repo = Path(__file__).resolve().parents[1]
    worker = subprocess.Popen(
        [sys.executable, str(repo / "tests" / "append_worker.py"), root, str(stop)],
        cwd=repo,
        stderr=subprocess.PIPE,
        text=True,
    )
    timings = []
    try:
        time.sleep(1.5)
        first, started = len(_appends(root)) // 10, time.monotonic()
        for what, run in statements:
            began = time.monotonic()
            result = run()
            elapsed = time.monotonic() - began
            timings.append((what, round(elapsed, 2), getattr(result, "rounds", None)))
            assert elapsed < BOUND, timings
            if hasattr(result, "rounds"):
                assert result.rounds == 1, (what, result.summary())
            at = PartitionedNamespace.load(root).manifest_version  # the appender goes on: one version for all
            expected = sorted([(i, p, v) for i, (p, v) in state.items()] + _appends(root, at))
            reader = spark.read.format("lance_partitioned").option("versionAsOf", str(at))
            got = sorted(tuple(r) for r in reader.load(root).select("id", "p", "v").collect())
            assert got == expected, what
            assert _stored(root, at) == expected, what
        appends, span = len(_appends(root)) // 10 - first, time.monotonic() - started
    finally:
        stop.write_text("stop")
        _, errors = worker.communicate(timeout=60)
    print(timings)
    assert worker.returncode == 0, errors[-3000:]
    # the appender really was writing throughout: at least a third of its pace (one append per
    # 0.3 s plus its commit, which takes longer on a loaded 2-core machine: 14 appends in 10 s in
    # one CI run) over the statements' whole span, and more appends than statements
    assert appends >= max(len(statements) + 1, span / 0.3 / 3), (appends, span, timings)
    at = PartitionedNamespace.load(root).manifest_version
    assert _stored(root, at) == sorted([(i, p, v) for i, (p, v) in state.items()] + _appends(root, at))
