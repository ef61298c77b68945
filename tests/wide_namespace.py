"""A namespace of many partitions, cheaply: one written table, the others recorded in ``__manifest``."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa

from partitioning import PartitionedNamespace, TableCommit
from partitioning.tables.write import write_table

SCHEMA = pa.schema([("day", pa.date32()), ("country", pa.string()), ("v", pa.int64())])
START = dt.date(2025, 1, 1)


def day_rows(day: dt.date, country: str, n: int, first: int = 0) -> pa.Table:
    return pa.table({"day": [day] * n, "country": [country] * n, "v": list(range(first, first + n))}, schema=SCHEMA)


def wide_namespace(tmp_path: Path, partitions: int) -> str:
    """The root of a namespace with ``partitions`` tables in two levels (``day``, ``country``):
    (START, "C0") holds 3 rows (v 0..2); the others are recorded at version 1 of no dataset."""
    ns = PartitionedNamespace.create(str(tmp_path / "ns"), SCHEMA, ["day", "country"])
    write_table(ns, day_rows(START, "C0", 3))
    commits = []
    for i in range(1, partitions):
        values = {"day": START + dt.timedelta(days=i % 20), "country": f"C{i // 20}"}
        commits.append(TableCommit(1, values, ns.new_table_location(1, values), 1))
    ns.commit_tables(commits)
    return ns.root
