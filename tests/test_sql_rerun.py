"""A SQL ``UPDATE`` / ``DELETE`` / ``MERGE INTO`` that truly conflicts is run again (issue 48).

The conflict is real and made at the worst moment: a ``sitecustomize`` hook in the Spark
session's Python processes deletes, right before the statement's ``__manifest`` commit, one
row the statement read (with the project's ``delete_rows``, a commit of its own). The
statement's commit must then refuse, and the connector must run the statement again on the
latest version, until it commits or its attempts are spent. The session runs in a process of
its own (its Python workers need the hook from their start). The oracle is plain Python
applied to the initial rows; the stored side is read with pylance at the versions
``__manifest`` records.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import lance

from partitioning import PartitionedNamespace

REPO = Path(__file__).resolve().parents[1]
ATTEMPTS = 8  # Rerun.ATTEMPTS in the JVM layer

HOOK = """
import os
if os.environ.get("LP_CONFLICT_DIR"):
    import sys
    sys.path[:0] = [{repo!r}]
    import pipelines.jvm.write as _write
    from partitioning.tables.deletes import delete_rows

    _real = _write.commit_rewrite

    def commit_rewrite(ns, *args, **kwargs):
        path = os.path.join(os.environ["LP_CONFLICT_DIR"], "ids")
        ids = open(path).read().split() if os.path.exists(path) else []
        if ids:
            with open(path, "w") as f:
                f.write(" ".join(ids[1:]))
            delete_rows(ns.root, "id = " + ids[0])
        return _real(ns, *args, **kwargs)

    _write.commit_rewrite = commit_rewrite
"""

SCENARIO = """
import json, sys
from pathlib import Path
from pipelines.session import build_session

out, conflicts, warehouse = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
spark = build_session("sql-rerun", master="local[2]")
spark.conf.set("spark.sql.catalog.rr", "lance_partitioned.LanceCatalog")
spark.conf.set("spark.sql.catalog.rr.warehouse", warehouse)
# Spark's row-level UPDATE, whose reruns this test makes (with the session extension an UPDATE
# the engine computes exactly runs as update_rows does: tests/test_sql_update.py)
spark.conf.set("spark.lance_partitioned.sql.update.enabled", "false")
spark.sql("CREATE TABLE rr.db.t (id BIGINT, p INT, v BIGINT) PARTITIONED BY (p)")
spark.sql("INSERT INTO rr.db.t SELECT id, CAST(id % 4 AS INT), id FROM range(100)")
results = {}

def run(name, ids, statement, **args):
    (conflicts / "ids").write_text(" ".join(map(str, ids)))
    try:
        spark.sql(statement, args=args or None)
        results[name] = "ok"
    except Exception as exc:
        results[name] = str(exc)

run("update", [0, 1], "UPDATE rr.db.t SET v = v + 1000 WHERE id < 50")
run(
    "merge",
    [40],
    "MERGE INTO rr.db.t t USING (SELECT id, CAST(id % 4 AS INT) AS p, 7 AS v FROM range(40, 60)) s "
    "ON t.id = s.id WHEN MATCHED THEN UPDATE SET v = s.v WHEN NOT MATCHED THEN INSERT *",
)
# a function keeps the DELETE on Spark's row-level path (a plain condition is deleted by the
# Python engine, which finds the rows again on the new version: pipelines.jvm.delete_rows)
run("spent", list(range(90, 99)), "DELETE FROM rr.db.t WHERE abs(id) >= 90")
run("parameters", [60], "UPDATE rr.db.t SET v = v + :d WHERE id >= 60 AND id < 70", d=5)
out.write_text(json.dumps(results))
"""


def _stored(root: Path) -> dict[int, int]:
    ns = PartitionedNamespace.load(str(root))
    out: dict[int, int] = {}
    for table in ns.partitions():
        rows = lance.dataset(table.uri, version=table.read_version).to_table(columns=["id", "v"])
        out.update(zip(rows["id"].to_pylist(), rows["v"].to_pylist(), strict=True))
    return out


def test_a_conflicting_sql_statement_runs_again_until_it_commits(tmp_path: Path) -> None:
    hook, conflicts = tmp_path / "hook", tmp_path / "conflicts"
    hook.mkdir()
    conflicts.mkdir()
    (hook / "sitecustomize.py").write_text(HOOK.format(repo=str(REPO)))
    (tmp_path / "scenario.py").write_text(SCENARIO)
    env = {
        **os.environ,
        "LP_CONFLICT_DIR": str(conflicts),
        "PYTHONPATH": os.pathsep.join([str(hook), str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    warehouse = tmp_path / "wh"
    proc = subprocess.run(
        [sys.executable, str(tmp_path / "scenario.py"), str(tmp_path / "out.json"), str(conflicts), str(warehouse)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = json.loads((tmp_path / "out.json").read_text())

    # the oracle: the statements applied in plain Python to the rows each run saw
    state = {i: i for i in range(100)}
    for gone in (0, 1):  # deleted before the UPDATE's first and second commits
        state.pop(gone)
    for i in range(50):
        if i in state:
            state[i] += 1000
    state.pop(40)  # deleted before the MERGE's first commit: its rerun inserts it
    for i in range(40, 60):
        state[i] = 7
    for gone in range(90, 99):  # one deletion before each of the DELETE's 9 runs: none commits
        state.pop(gone)

    assert results["update"] == "ok" and results["merge"] == "ok", results
    spent = results["spent"]
    assert spent.startswith("[LANCE_CONCURRENT_MODIFICATION] DELETE on ") and "\n" not in spent, spent
    assert f"ran {ATTEMPTS + 1} times" in spent and "nothing was committed" in spent, spent
    # parameter markers are not in the text: no rerun, the one-line error at once
    parameters = results["parameters"]
    assert parameters.startswith("[LANCE_CONCURRENT_MODIFICATION] UPDATE on "), parameters
    assert "run the statement again" in parameters, parameters
    state.pop(60)
    assert _stored(warehouse / "db" / "t") == state

    log = proc.stderr
    assert log.count("UPDATE on ") >= 2 and "running the statement again (2 of 8)" in log, log[-4000:]
    assert "running the statement again (3 of 8)" not in log.split("MERGE on")[0]
    assert f"running the statement again ({ATTEMPTS} of {ATTEMPTS})" in log
    history = PartitionedNamespace.load(str(warehouse / "db" / "t")).history().to_pylist()
    operations = [row["operation"] for row in history]
    assert operations.count("UPDATE") == 1 and operations.count("MERGE") == 1
    assert operations.count("DELETE") == 2 + 1 + 9 + 1  # the injected deletions; the SQL DELETE never committed
