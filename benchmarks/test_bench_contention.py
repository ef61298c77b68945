"""Row-level changes beside a steady appender: what another writer costs a statement.

Another process (``tests/append_worker.py``) appends 10 rows every 0.3 s into every
partition the statements read. Each statement (``update_rows``, ``delete_rows``, SQL
``UPDATE``) runs alone and beside the appender, interleaved, ``RUNS`` times each; the table
shows the median seconds and the ratio beside/alone. Two shapes: 3 partitions of 20,000
rows, and 30 partitions of 2,000 rows. Every statement beside the appender must commit
(before rebasing, none did: each lost to the appends and failed).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from partitioning import PartitionedNamespace
from partitioning.tables.write import write_table
from pipelines import delete_rows, update_rows

pytestmark = pytest.mark.bench

RUNS = 3
SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.int32()), ("v", pa.int64())])
CATALOG = "lance_bench_contention"


def _namespace(root: str, partitions: int, rows: int) -> None:
    ids = list(range(partitions * rows))
    table = pa.table({"id": ids, "p": [i % partitions for i in ids], "v": ids}, schema=SCHEMA)
    write_table(PartitionedNamespace.create(root, SCHEMA, ["p"]), table)


@pytest.mark.parametrize(("partitions", "rows"), [(3, 20_000), (30, 2_000)])
def test_statements_beside_an_appender_vs_alone(
    spark: SparkSession, tmp_path: Path, partitions: int, rows: int
) -> None:
    warehouse = tmp_path / "wh"
    catalog = f"{CATALOG}_{partitions}"  # a catalog keeps its first warehouse for the session
    spark.conf.set(f"spark.sql.catalog.{catalog}", "lance_partitioned.LanceCatalog")
    spark.conf.set(f"spark.sql.catalog.{catalog}.warehouse", str(warehouse))
    repo = Path(__file__).resolve().parents[1]
    times: dict[tuple[str, str], list[float]] = {}
    for run in range(RUNS):
        for setting in ("alone", "beside"):
            name = f"t_{uuid.uuid4().hex[:8]}"
            root = str(warehouse / "db" / name)
            _namespace(root, partitions, rows)
            table = f"{catalog}.db.{name}"
            spark.sql(f"UPDATE {table} SET v = v WHERE id < 0")  # warm, untimed
            statements = {
                "update_rows": lambda r=root: update_rows(r, set={"v": "v + 1"}, where="id < 400", spark=spark),
                "delete_rows": lambda r=root: delete_rows(r, "id >= 400 AND id < 500", spark=spark),
                "SQL UPDATE": lambda t=table: spark.sql(f"UPDATE {t} SET v = v * 2 WHERE id < 300"),
            }
            stop = tmp_path / f"stop-{run}-{setting}"
            worker = None
            if setting == "beside":
                worker = subprocess.Popen(
                    [sys.executable, str(repo / "tests" / "append_worker.py"), root, str(stop)],
                    cwd=repo,
                    stderr=subprocess.DEVNULL,
                )
                time.sleep(1.0)
            try:
                for what, run_it in statements.items():
                    began = time.perf_counter()
                    run_it()
                    times.setdefault((what, setting), []).append(time.perf_counter() - began)
            finally:
                stop.write_text("stop")
                if worker is not None:
                    worker.wait(timeout=60)
    print(f"\n{partitions} partitions x {rows:,} rows, appender every 0.3 s, median of {RUNS} interleaved runs")
    print(f"{'statement':<14} {'alone s':>8} {'beside s':>9} {'ratio':>6}")
    for what in ("update_rows", "delete_rows", "SQL UPDATE"):
        alone = statistics.median(times[(what, "alone")])
        beside = statistics.median(times[(what, "beside")])
        print(f"{what:<14} {alone:>8.2f} {beside:>9.2f} {beside / alone:>5.2f}x")
        assert beside < 30.0
