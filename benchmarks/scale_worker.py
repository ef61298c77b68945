"""One timed operation of the scale benchmark, in a fresh process (run by ``test_bench_scale``).

``python -m benchmarks.scale_worker '<json>'`` with ``{"op", "system", "path", ...}``:

- ``build``: create the table and write ``partitions`` x 2 rows in ONE write (timed); then
  the number of partition tables (delta-rs, pyiceberg: data files) and the row counts of
  the first, middle and last partition.
- ``append``: open + write ``rows`` rows into partition (``country``, ``day``) + commit (timed).
- ``plan``: open + plan the point filter ``country = .. AND day = ..`` (timed).
- ``sequence``: ``commits`` appends of ``rows`` rows into the partitions listed in ``keys``
  with one handle kept open, each timed; every count is read back after its commit.
- ``compact``: ``optimize_manifest`` (ours) or ``create_checkpoint`` (delta-rs), untimed.

Before the timed part, ``warm`` (a one-partition table of the same system) gets an append
and an open + plan, so the lazy imports of each library are not in the figure. Afterwards
(untimed) the partition's row count is read back with the system's own reader. Prints one
JSON line: ``seconds``, ``rss_mb`` (peak RSS of this process, taken right after the timed
part), ``count`` / ``counts`` and ``planned`` (files or tables the plan kept).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import resource
import sys
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

SCHEMA = pa.schema(
    [
        ("country", pa.string()),
        ("day", pa.date32()),
        ("id", pa.int64()),
        ("amount", pa.float64()),
        ("note", pa.string()),
    ]
)
PARTITION_BY = ["country", "day"]
DAYS = 100
FIRST_DAY = dt.date(2025, 1, 1)


def partition_key(k: int) -> tuple[str, dt.date]:
    """The ``k``-th partition of a built table: 100 days per country."""
    return f"C{k // DAYS:05d}", FIRST_DAY + dt.timedelta(days=k % DAYS)


def rows_for(keys: list[tuple[str, dt.date]], per_key: int, first_id: int = 0) -> pa.Table:
    n = len(keys) * per_key
    ids = pa.array(range(first_id, first_id + n), pa.int64())
    return pa.table(
        {
            "country": pa.array([c for c, _ in keys for _ in range(per_key)], pa.string()),
            "day": pa.array([d for _, d in keys for _ in range(per_key)], pa.date32()),
            "id": ids,
            "amount": pc.divide(pc.cast(ids, pa.float64()), 7.0),
            "note": pa.array([f"n{i % 97}" for i in range(n)], pa.string()),
        },
        schema=SCHEMA,
    )


def built_rows(partitions: int) -> pa.Table:
    return rows_for([partition_key(k) for k in range(partitions)], 2)


def point_sql(country: str, day: dt.date) -> str:
    return f"country = '{country}' AND day = DATE '{day.isoformat()}'"


# -- ours -----------------------------------------------------------------------------------------
class Ours:
    def build(self, path: str, table: pa.Table) -> None:
        from partitioning import PartitionedNamespace
        from partitioning.tables.write import write_table

        write_table(PartitionedNamespace.create(path, SCHEMA, PARTITION_BY), table)

    def open(self, path: str) -> Any:
        from partitioning import PartitionedNamespace

        return PartitionedNamespace.load(path)

    def append(self, handle: Any, table: pa.Table) -> None:
        from partitioning.tables.write import write_table

        result = write_table(handle, table)
        assert result.rows_written == table.num_rows, result

    def plan(self, handle: Any, country: str, day: dt.date) -> int:
        return len(handle.plan_scan(point_sql(country, day)))

    def count(self, path: str, country: str, day: dt.date) -> int:
        ns = self.open(path)
        (table,) = [p for p in ns.partitions() if p.values == {"country": country, "day": day}]
        return int(ns.open_table(table).count_rows())

    def tables(self, path: str) -> int:
        return len(self.open(path).partitions())

    def compact(self, path: str) -> None:
        from partitioning.tables.maintenance import optimize_manifest

        optimize_manifest(path)


# -- delta-rs -------------------------------------------------------------------------------------
class Delta:
    def build(self, path: str, table: pa.Table) -> None:
        from deltalake import write_deltalake

        write_deltalake(path, table, partition_by=PARTITION_BY, mode="append")

    def open(self, path: str) -> Any:
        from deltalake import DeltaTable

        return DeltaTable(path)

    def append(self, handle: Any, table: pa.Table) -> None:
        from deltalake import write_deltalake

        write_deltalake(handle, table, partition_by=PARTITION_BY, mode="append")

    def plan(self, handle: Any, country: str, day: dt.date) -> int:
        return len(handle.file_uris(file_pruning_predicate=[("country", "=", country), ("day", "=", day)]))

    def count(self, path: str, country: str, day: dt.date) -> int:
        dataset = self.open(path).to_pyarrow_dataset()
        return int(dataset.count_rows(filter=(pc.field("country") == country) & (pc.field("day") == day)))

    def tables(self, path: str) -> int:
        return len(self.open(path).file_uris())

    def compact(self, path: str) -> None:
        self.open(path).create_checkpoint()


# -- pyiceberg ------------------------------------------------------------------------------------
class Iceberg:
    ident = ("bench", "t")

    def _catalog(self, path: str) -> Any:
        from pyiceberg.catalog.sql import SqlCatalog

        return SqlCatalog("bench", uri=f"sqlite:///{path}/cat.db", warehouse=f"file://{path}")

    def build(self, path: str, table: pa.Table) -> None:
        from pyiceberg.partitioning import PartitionField, PartitionSpec
        from pyiceberg.schema import Schema
        from pyiceberg.transforms import IdentityTransform
        from pyiceberg.types import DateType, DoubleType, LongType, NestedField, StringType

        schema = Schema(
            NestedField(1, "country", StringType(), required=False),
            NestedField(2, "day", DateType(), required=False),
            NestedField(3, "id", LongType(), required=False),
            NestedField(4, "amount", DoubleType(), required=False),
            NestedField(5, "note", StringType(), required=False),
        )
        spec = PartitionSpec(
            PartitionField(source_id=1, field_id=1000, transform=IdentityTransform(), name="country"),
            PartitionField(source_id=2, field_id=1001, transform=IdentityTransform(), name="day"),
        )
        os.makedirs(path, exist_ok=True)
        catalog = self._catalog(path)
        catalog.create_namespace(self.ident[0])
        catalog.create_table(self.ident, schema=schema, partition_spec=spec).append(table)

    def open(self, path: str) -> Any:
        return self._catalog(path).load_table(self.ident)

    def append(self, handle: Any, table: pa.Table) -> None:
        handle.append(table)

    def _filter(self, country: str, day: dt.date) -> Any:
        from pyiceberg.expressions import And, EqualTo

        return And(EqualTo("country", country), EqualTo("day", day.isoformat()))

    def plan(self, handle: Any, country: str, day: dt.date) -> int:
        return len(list(handle.scan(row_filter=self._filter(country, day)).plan_files()))

    def count(self, path: str, country: str, day: dt.date) -> int:
        return int(self.open(path).scan(row_filter=self._filter(country, day)).to_arrow().num_rows)

    def tables(self, path: str) -> int:
        return len(list(self.open(path).scan().plan_files()))

    def compact(self, path: str) -> None:
        raise NotImplementedError("pyiceberg 0.12 has no manifest rewrite")


SYSTEMS: dict[str, Callable[[], Any]] = {"ours": Ours, "delta": Delta, "iceberg": Iceberg}


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _warm_up(system: Any, warm: str) -> None:
    country, day = partition_key(0)
    system.append(system.open(warm), rows_for([(country, day)], 10))
    system.plan(system.open(warm), country, day)


def run(job: dict[str, Any]) -> dict[str, Any]:
    system, path, op = SYSTEMS[job["system"]](), job["path"], job["op"]
    if job.get("warm"):
        _warm_up(system, job["warm"])
    if op == "build":
        table = built_rows(job["partitions"])
        start = time.perf_counter()
        system.build(path, table)
        out = {"seconds": time.perf_counter() - start, "rss_mb": _peak_rss_mb(), "tables": system.tables(path)}
        sampled = sorted({0, job["partitions"] // 2, job["partitions"] - 1})
        return {**out, "counts": [system.count(path, *partition_key(k)) for k in sampled]}
    if op == "compact":
        system.compact(path)
        return {}
    if op == "sequence":
        handle, seconds, counts = system.open(path), [], []
        for i, k in enumerate(job["keys"]):
            country, day = partition_key(k)
            table = rows_for([(country, day)], job["rows"], first_id=10_000_000 + i * job["rows"])
            start = time.perf_counter()
            system.append(handle, table)
            seconds.append(time.perf_counter() - start)
            counts.append(system.count(path, country, day))
        return {"seconds": seconds, "counts": counts, "rss_mb": _peak_rss_mb()}
    country, day = job["country"], dt.date.fromisoformat(job["day"])
    if op == "append":
        table = rows_for([(country, day)], job["rows"], first_id=job["first_id"])
        start = time.perf_counter()
        system.append(system.open(path), table)
        out: dict[str, Any] = {"seconds": time.perf_counter() - start, "rss_mb": _peak_rss_mb()}
    elif op == "plan":
        start = time.perf_counter()
        planned = system.plan(system.open(path), country, day)
        out = {"seconds": time.perf_counter() - start, "rss_mb": _peak_rss_mb(), "planned": planned}
    else:
        raise ValueError(f"unknown op {op!r}; expected build, append, plan, sequence or compact")
    return {**out, "count": system.count(path, country, day)}


if __name__ == "__main__":
    print(json.dumps(run(json.loads(sys.argv[1]))), flush=True)
