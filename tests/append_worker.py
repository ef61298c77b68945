"""A steady appender beside row-level changes (issue 48's target).

``python tests/append_worker.py ROOT STOP_FILE`` appends 10 rows every 0.3 s into every
partition of ``p`` until ``STOP_FILE`` exists; append k has write id ``app-<k>`` and the
rows :func:`appended` ``(k)``, all with ids >= 100000 (no statement of the test selects
them). Lost ``__manifest`` races are printed and the loop goes on.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pyarrow as pa

SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.int32()), ("v", pa.int64())])


def appended(k: int) -> list[dict[str, int]]:
    return [{"id": 100_000 + k * 10 + j, "p": j % 3, "v": k} for j in range(10)]


def main(argv: list[str]) -> int:
    from partitioning import PartitionedNamespace
    from partitioning.errors import PartitioningError
    from partitioning.tables.write import write_table

    root, stop = argv[0], Path(argv[1])
    k = 0
    while not stop.exists():
        time.sleep(0.3)
        k += 1
        try:
            rows = pa.Table.from_pylist(appended(k), schema=SCHEMA)
            write_table(PartitionedNamespace.load(root), rows, write_id=f"app-{k}")
        except PartitioningError as exc:
            print(f"appender: {exc}", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
