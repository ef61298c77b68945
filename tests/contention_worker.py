"""A steady writer on the same partitions a merge or update reads (issue 37's contention test).

``python tests/contention_worker.py ROOT STOP_FILE SEED`` appends, deletes and compacts
every 0.3-1.5 s until ``STOP_FILE`` exists. Every change is replayable from the history
alone: an append of write id ``adv-<k>`` writes :func:`appended` ``(k)``; a delete's
filter is ``id IN (...)``; a compaction changes no row.
"""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

import pyarrow as pa

SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.int32()), ("v", pa.int64())])


def appended(k: int) -> list[dict[str, int]]:
    """The rows of the adversary's k-th append: two rows in partition k % 3."""
    return [{"id": 100_000 + k * 10 + j, "p": k % 3, "v": k} for j in range(2)]


def main(argv: list[str]) -> int:
    from partitioning import PartitionedNamespace
    from partitioning.errors import PartitioningError
    from partitioning.tables.compaction import compact_local
    from partitioning.tables.deletes import delete_rows
    from partitioning.tables.write import write_table

    root, stop, seed = argv[0], Path(argv[1]), int(argv[2])
    rng = random.Random(seed)
    live: list[int] = []
    k = 0
    while not stop.exists():
        time.sleep(rng.uniform(0.3, 1.5))
        choice = rng.random()
        try:
            if choice < 0.6 or len(live) < 4:
                k += 1
                rows = appended(k)
                write_table(
                    PartitionedNamespace.load(root), pa.Table.from_pylist(rows, schema=SCHEMA), write_id=f"adv-{k}"
                )
                live.extend(r["id"] for r in rows)
            elif choice < 0.85:
                doomed = rng.sample(live, 2)
                delete_rows(root, f"id IN ({', '.join(map(str, doomed))})")
                live = [i for i in live if i not in doomed]
            else:
                compact_local(PartitionedNamespace.load(root))
        except PartitioningError as exc:  # a lost race is reported and the loop goes on
            print(f"adversary: {exc}", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
