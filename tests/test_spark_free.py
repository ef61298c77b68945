"""Spark-free operations start no JVM: namespace evolution, describe, planning and the jobs
that need no Spark (``evolve``, ``vacuum``, ``delete`` without a session) never import PySpark.

Run in a fresh interpreter, since this test run itself has PySpark loaded.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from subprocess_runs import run_ok

SCRIPT = r"""
import contextlib, io, json, os, sys
import pyarrow as pa
from partitioning import PartitionedNamespace
from partitioning.tables.write import write_table
from jobs import delete, evolve, vacuum

root = sys.argv[1]
schema = pa.schema([("id", pa.int64()), ("country", pa.string())])
ns = PartitionedNamespace.create(root, schema, ["country"])
write_table(ns, pa.table({"id": list(range(6)), "country": ["US", "DE", "FR"] * 2}, schema=schema))
ns.evolve_partition_spec(["country", "bucket[4](id)"])
ns.add_columns({"note": "string"})
described = [ns.describe_namespace([]) != {}, sorted(ns.describe_namespace(["v1"]))]
planned = len(list(ns.plan_scan("country = 'US'")))
out = io.StringIO()
with contextlib.redirect_stdout(out):
    codes = [
        evolve.main(["add-column", "--root", root, "x:int64"]),
        delete.main(["--root", root, "--filter", "id = 1"]),
        vacuum.main(["--root", root, "--dry-run"]),
    ]


def descendants(pid):
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()
                children.setdefault(int(fields[1]), []).append(int(entry))
            except OSError:
                pass
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(open(f"/proc/{child}/comm").read().strip())
            todo.append(child)
    return found


ns = PartitionedNamespace.load(root)
rows = sum(ns.open_table(p).count_rows() for p in ns.partitions())
print(json.dumps({
    "pyspark": sorted(m for m in sys.modules if m.split(".")[0] in ("pyspark", "py4j")),
    "children": descendants(os.getpid()) if os.path.isdir("/proc") else [],
    "described": described, "planned": planned, "codes": codes, "rows": rows,
}))
"""


def test_spark_free_operations_and_jobs_import_no_pyspark(tmp_path: Path) -> None:
    proc = run_ok([sys.executable, "-c", SCRIPT, str(tmp_path / "ns")], timeout=300)
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen == {
        "pyspark": [],
        "children": [],
        "described": [True, ["partition_spec"]],
        "planned": 1,
        "codes": [0, 0, 0],
        "rows": 5,
    }
