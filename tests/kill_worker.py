"""One committing operation in a process of its own, to be killed with SIGKILL (issue 37, item 4).

``python tests/kill_worker.py KIND ROOT [VERSION]`` prints ``ready`` once it is set up
(a SparkSession for merge and update), then runs the operation and prints ``done <N>``,
N the number of Lance commits it made; ``LP_KILL_AFTER_COMMITS=k`` kills it right after
its k-th Lance commit.
KIND is ``merge``, ``update``, ``restore`` (to VERSION) or ``compact``.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

COMMITS = "LP_KILL_AFTER_COMMITS"


def _count_commits() -> list[int]:
    """Count every Lance commit this process makes (dataset and ``__manifest`` alike); with
    ``LP_KILL_AFTER_COMMITS=k`` the process kills itself with SIGKILL right after the k-th."""
    import lance
    from lance.optimize import Compaction

    limit = int(os.environ.get(COMMITS, "0"))
    count = [0]

    def counted(real: Any) -> Any:
        def commit(*args: Any, **kwargs: Any) -> Any:
            out = real(*args, **kwargs)
            count[0] += 1
            if count[0] == limit:
                os.kill(os.getpid(), signal.SIGKILL)
            return out

        return staticmethod(commit)

    lance.LanceDataset.commit = counted(lance.LanceDataset.commit)  # type: ignore[method-assign]
    Compaction.commit = counted(Compaction.commit)  # type: ignore[method-assign]
    return count


def main(argv: list[str]) -> int:
    kind, root = argv[0], argv[1]
    count = _count_commits()
    if kind in ("merge", "update"):
        from pipelines import build_session, merge_partitioned, update_rows

        spark = build_session("kill worker", master="local[1]")
        source = spark.createDataFrame([(1, "DE"), (2, "US"), (500, "FR")], "id long, c string")
        print("ready", flush=True)
        if kind == "merge":
            merge_partitioned(source, root, on="id")
        else:
            update_rows(root, set={"id": "id + 1000"}, where="c = 'US'", spark=spark)
    elif kind == "restore":
        from partitioning.tables.restore import restore

        print("ready", flush=True)
        restore(root, version=int(argv[2]))
    elif kind == "compact":
        from partitioning import PartitionedNamespace
        from partitioning.tables.compaction import compact_local

        print("ready", flush=True)
        compact_local(PartitionedNamespace.load(root))
    else:
        raise SystemExit(f"unknown kind {kind!r}")
    print(f"done {count[0]}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
