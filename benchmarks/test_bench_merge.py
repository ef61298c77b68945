"""MERGE and UPDATE: ours (Spark local[2]) vs delta-rs on the same rows, same run (issue 14).

A target of ``TARGET_ROWS`` rows in ``PARTITIONS`` identity partitions, as a namespace
and as a Delta table partitioned the same way. The source (a parquet file both read)
holds ``SOURCE_ROWS`` rows: half update existing ids (a tenth of those move to another
partition), half are new ids. Each timed run works on a fresh copy of both targets
(all copies are made before the first timed run); runs are interleaved, median and min/max of ``REPEATS``.
``update_rows`` of 1% of the rows, spread over every partition, is timed against delta-rs's
``update`` with two predicates: ids whose block of ``PARTITIONS`` consecutive ids is a
multiple of 100 (each engine in its own SQL; arithmetic Spark must evaluate), and
``s = 's3'`` (a column Lance's scan filters, so only the matching rows are read). Every run's
result is checked: row count and the sum of ``v`` equal on both sides. Beside them, Spark's
floors on the same rows in one parquet file, written to Spark's ``noop`` sink: the join a
merge needs (the source against the target's keys) and the scan an update needs; and
Lance's floor for changing rows in every partition: a deletion vector on every fragment
and one commit per partition dataset, with Lance's own API, nothing read or written besides;
and the read an update of rows picked by Spark SQL needs with PySpark and pylance: every
row read by Lance's reader in Spark's tasks, into Spark by ``mapInArrow``, filtered there.
Lance's own row-level engine on the same partition tables (the floors the docs' targets
at many partitions are set against): ``merge_insert`` of each partition's source rows
(the parquet file read by pyarrow, split by ``p``) and ``update`` of each table with the
update's ``s = 's3'`` predicate, from ``PARALLEL_COMMITS`` threads, plus the one
``__manifest`` commit naming the new versions; the update runs on tables with the history
ours have then (the merge, then Lance's update of the ``div`` rows, untimed), as a table's
fragments set what an update scans. The ``merge_insert`` floor is a floor, not a merge: a
source row that moves partition is inserted into its new partition and the old row kept.
Lance's correct merge deletes the rows whose key moves first (a keys-only read of each
table finds them), then runs ``merge_insert``: the same rows as delta-rs's merge (checked).
And a merge with ``set=`` (``v`` recomputed from both sides, the rest kept) against
delta-rs's ``when_matched_update`` with the same expressions.

Sizes come from ``BENCH_MERGE_TARGET_ROWS`` / ``BENCH_MERGE_SOURCE_ROWS`` /
``BENCH_MERGE_PARTITIONS`` (defaults: the issue's 10,000,000 / 1,000,000 / 1,500).
"""

from __future__ import annotations

import os
import shutil
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

import lance
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from lance import LanceOperation
from pyspark.sql import SparkSession

from partitioning.namespace import PartitionedNamespace
from partitioning.state.partition_tables import TableCommit
from partitioning.storage.datasets import offsets_by_fragment
from partitioning.tables.write import PARALLEL_COMMITS, write_table
from pipelines.read.dataframe import read_partitioned
from pipelines.write.merge import merge_partitioned
from pipelines.write.rewrite import update_rows

pytestmark = pytest.mark.bench

TARGET_ROWS = int(os.environ.get("BENCH_MERGE_TARGET_ROWS", 10_000_000))
SOURCE_ROWS = int(os.environ.get("BENCH_MERGE_SOURCE_ROWS", 1_000_000))
PARTITIONS = int(os.environ.get("BENCH_MERGE_PARTITIONS", 1_500))
REPEATS = 3
# 1% of the rows (s cycles through 97 values), in every partition: a predicate on a non-partition
# column that Lance's scan evaluates, so only those rows are read (pipelines.write.small)
COLUMN_PREDICATE = "s = 's3'"
# a CDC-style merge that recomputes one column of the matched rows from both sides
SET_MERGE = {"v": "source.v + target.v", "s": "target.s"}
SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.int32()), ("v", pa.float64()), ("s", pa.string())])


def target_rows(start: int, stop: int, partitions: int = PARTITIONS) -> pa.Table:
    """Target rows ``start`` .. ``stop`` spread over ``partitions`` values of ``p`` (also the doors bench's)."""
    ids = np.arange(start, stop, dtype=np.int64)
    return pa.table(
        {
            "id": ids,
            "p": (ids % partitions).astype(np.int32),
            "v": (ids % 1000).astype(np.float64),
            "s": pa.array(np.char.add("s", (ids % 97).astype(str))),
        },
        schema=SCHEMA,
    )


def _source() -> pa.Table:
    rng = np.random.default_rng(14)
    updates = rng.choice(TARGET_ROWS, SOURCE_ROWS // 2, replace=False).astype(np.int64)
    inserts = np.arange(TARGET_ROWS, TARGET_ROWS + SOURCE_ROWS - len(updates), dtype=np.int64)
    ids = np.concatenate([updates, inserts])
    p = ids % PARTITIONS
    moving = np.zeros(len(ids), dtype=bool)
    moving[: len(updates) // 10] = True
    p = np.where(moving, (p + 1) % PARTITIONS, p).astype(np.int32)
    return pa.table(
        {"id": ids, "p": p, "v": np.full(len(ids), -1.0), "s": pa.array(["merged"] * len(ids))}, schema=SCHEMA
    )


def _spread(samples: list[float]) -> str:
    return f"{statistics.median(samples):.2f} s (min {min(samples):.2f}, max {max(samples):.2f})"


def _timed(target: str, run: Callable[[str], None], samples: list[float]) -> str:
    start = time.perf_counter()
    run(target)
    samples.append(time.perf_counter() - start)
    return target


def test_merge_and_update_vs_delta_rs(spark: SparkSession, tmp_path: Path) -> None:
    from deltalake import DeltaTable, write_deltalake

    base_ns, base_delta = tmp_path / "ns", tmp_path / "delta"
    ns = PartitionedNamespace.create(str(base_ns), SCHEMA, ["p"])
    chunk = 2_000_000
    for start in range(0, TARGET_ROWS, chunk):
        part = target_rows(start, min(TARGET_ROWS, start + chunk))
        write_table(ns, part)
        write_deltalake(str(base_delta), part, partition_by=["p"], mode="append" if start else "overwrite")
    source_path = str(tmp_path / "source.parquet")
    source = _source()
    pq.write_table(source, source_path)
    target_parquet = str(tmp_path / "target.parquet")  # one file: the cheapest target Spark can read
    with pq.ParquetWriter(target_parquet, SCHEMA) as writer:
        for start in range(0, TARGET_ROWS, chunk):
            writer.write_table(target_rows(start, min(TARGET_ROWS, start + chunk)))
    expected_rows = TARGET_ROWS + (SOURCE_ROWS - SOURCE_ROWS // 2)

    copies = iter(range(16 * REPEATS))

    def fresh(kind: str) -> str:
        # a copy made before any timed run: no run times the file system's bookkeeping of
        # another copy's removal (all copies are removed at the end, with tmp_path)
        dst = tmp_path / f"{kind}-{next(copies)}"
        shutil.copytree(base_ns if kind == "ns" else base_delta, dst)
        return str(dst)

    def ours_merge(root: str) -> None:
        # timed whole, and its DataFrame apart: Spark infers a parquet schema with a job
        start = time.perf_counter()
        source = spark.read.parquet(source_path)
        samples["Spark source DataFrame"].append(time.perf_counter() - start)
        merge_partitioned(source, root, on="id")

    def delta_merge(uri: str) -> None:
        merger = DeltaTable(uri).merge(
            pq.read_table(source_path), predicate="target.id = source.id", source_alias="source", target_alias="target"
        )
        merger.when_matched_update_all().when_not_matched_insert_all().execute()

    def ours_set_merge(root: str) -> None:
        merge_partitioned(spark.read.parquet(source_path), root, on="id", set=SET_MERGE)

    def delta_set_merge(uri: str) -> None:
        merger = DeltaTable(uri).merge(
            pq.read_table(source_path), predicate="target.id = source.id", source_alias="source", target_alias="target"
        )
        merger.when_matched_update(updates=SET_MERGE).when_not_matched_insert_all().execute()

    def ours_update(root: str) -> None:
        update_rows(root, set={"v": "v + 1"}, where=f"(id div {PARTITIONS}) % 100 = 0", spark=spark)

    def delta_update(uri: str) -> None:
        DeltaTable(uri).update(updates={"v": "v + 1"}, predicate=f"(id / {PARTITIONS}) % 100 = 0")

    def ours_update_column(root: str) -> None:
        update_rows(root, set={"v": "v + 1"}, where=COLUMN_PREDICATE, spark=spark)

    def delta_update_column(uri: str) -> None:
        DeltaTable(uri).update(updates={"v": "v + 1"}, predicate=COLUMN_PREDICATE)

    def merge_floor(_: str) -> None:
        # the least a Spark merge does: the target's keys joined with the source, the changed
        # and new rows written (here to Spark's no-op sink)
        keys = spark.read.parquet(target_parquet).select("id", "p")
        joined = spark.read.parquet(source_path).join(keys.withColumnRenamed("p", "old_p"), "id", "left")
        joined.write.format("noop").mode("overwrite").save()

    def update_floor(_: str) -> None:
        # the least a Spark update does: every row scanned for the condition, the matching
        # rows changed and written (here to Spark's no-op sink)
        rows = spark.read.parquet(target_parquet).where(f"(id div {PARTITIONS}) % 100 = 0")
        rows.selectExpr("id", "p", "v + 1 AS v", "s").write.format("noop").mode("overwrite").save()

    def lance_floor(root: str) -> None:
        # the least a change of rows in every partition costs in Lance: per partition dataset,
        # a deletion vector on each fragment (1% of its rows) and one commit, in threads;
        # no row read or written besides (Lance's own API on a fresh copy)
        def one(table: Any) -> None:
            ds = lance.dataset(table.uri, version=table.read_version)
            updated = [f.delete_rows(range(0, f.metadata.physical_rows, 100)) for f in ds.get_fragments()]
            operation = LanceOperation.Update(updated_fragments=[u for u in updated if u is not None])
            lance.LanceDataset.commit(table.uri, operation, read_version=ds.version)

        with ThreadPoolExecutor(PARALLEL_COMMITS) as pool:
            list(pool.map(one, PartitionedNamespace.load(root).partitions()))

    def recorded(ns: PartitionedNamespace, tables: list[Any], versions: list[int]) -> None:
        ns.commit_tables(
            [
                TableCommit(t.spec_id, t.values, t.location, v, object_id=t.object_id)
                for t, v in zip(tables, versions, strict=True)
            ]
        )

    def lance_merge(root: str, *, moved_first: bool) -> None:
        # Lance's merge_insert on each partition table with its share of the source, threaded,
        # and one __manifest commit. Alone (a floor, not a merge) a moved row is inserted and its
        # old row kept; ``moved_first`` makes it Lance's correct merge: a keys-only read (id and
        # row address) of each table finds the rows whose key the source moves to another
        # partition, and Lance deletes them (a deletion vector and a commit) first
        ns = PartitionedNamespace.load(root)
        tables = ns.partitions()
        rows = pq.read_table(source_path).sort_by("p")
        ps = rows.column("p").to_numpy()
        starts = np.searchsorted(ps, np.arange(PARTITIONS + 1))
        source_ids = rows.column("id").to_numpy()
        by_id = np.argsort(source_ids)
        ids, moved_to = source_ids[by_id], ps[by_id]
        field = next(iter(tables[0].values))

        def delete_moved(uri: str, ds: lance.LanceDataset, p: int) -> lance.LanceDataset:
            keys = ds.to_table(columns=["id"], with_row_address=True)
            held = keys.column("id").to_numpy()
            at = np.minimum(np.searchsorted(ids, held), len(ids) - 1)
            gone = keys.column("_rowaddr").to_numpy()[(ids[at] == held) & (moved_to[at] != p)]
            if not len(gone):
                return ds
            fragments = {f.fragment_id: f for f in ds.get_fragments()}
            updated, removed = [], []
            for fid, offsets in offsets_by_fragment(gone).items():
                meta = fragments[fid].delete_rows(offsets)
                (removed.append(fid) if meta is None else updated.append(meta))
            operation = LanceOperation.Update(removed_fragment_ids=removed, updated_fragments=updated)
            return lance.LanceDataset.commit(uri, operation, read_version=ds.version)

        def one(table: Any) -> int:
            p = int(table.values[field])
            ds = lance.dataset(table.uri, version=table.read_version)
            if moved_first:
                ds = delete_moved(table.uri, ds, p)
            share = rows.slice(int(starts[p]), int(starts[p + 1] - starts[p]))
            ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(share)
            return lance.dataset(table.uri).version

        with ThreadPoolExecutor(PARALLEL_COMMITS) as pool:
            recorded(ns, tables, list(pool.map(one, tables)))

    def lance_update_floor(root: str, where: str = COLUMN_PREDICATE) -> None:
        # Lance's update on each partition table (its scan filters ``where``), threaded, and
        # one __manifest commit
        ns = PartitionedNamespace.load(root)
        tables = ns.partitions()

        def one(table: Any) -> int:
            ds = lance.dataset(table.uri, version=table.read_version)
            ds.update({"v": "v + 1"}, where=where)
            return ds.version

        with ThreadPoolExecutor(PARALLEL_COMMITS) as pool:
            recorded(ns, tables, list(pool.map(one, tables)))

    def read_floor(root: str) -> None:
        # the least an update picking rows by any Spark SQL predicate costs with PySpark and
        # pylance: every row's columns (and row address) read by Lance's own reader in
        # Spark's tasks, handed to Spark by mapInArrow, the predicate evaluated by Spark
        tables = [(t.uri, t.read_version) for t in PartitionedNamespace.load(root).partitions()]
        groups = [tables[i::4] for i in range(4)]
        schema = "id long, p int, v double, s string, _rowaddr long"

        def scan(batches: Any) -> Any:
            for batch in batches:
                for index in batch.column(0).to_pylist():
                    for uri, version in groups[index]:
                        ds = lance.dataset(uri, version=version)
                        for b in ds.to_batches(columns=SCHEMA.names, with_row_address=True):
                            yield b.set_column(4, "_rowaddr", b.column(4).cast(pa.int64()))

        rows = spark.range(0, len(groups), 1, len(groups)).mapInArrow(scan, schema)
        rows.where(f"(id div {PARTITIONS}) % 100 = 0").selectExpr("v + 1").write.format("noop").mode("overwrite").save()

    def check(root: str, uri: str) -> None:
        ours = read_partitioned(spark, root).selectExpr("count(*)", "sum(v)").collect()[0]
        theirs = DeltaTable(uri).to_pyarrow_table(columns=["v"])
        assert ours[0] == theirs.num_rows
        assert abs(ours[1] - pa.compute.sum(theirs.column("v")).as_py()) < 1e-6 * max(1.0, abs(ours[1]))

    samples: dict[str, list[float]] = {
        "ours merge": [],
        "Spark source DataFrame": [],
        "delta merge": [],
        "Spark merge floor": [],
        "ours update": [],
        "delta update": [],
        "Spark update floor": [],
        "ours update (s = 's3')": [],
        "delta update (s = 's3')": [],
        "Lance commit floor": [],
        "PySpark+Lance read floor": [],
        "Lance merge_insert floor": [],
        "Lance correct merge floor": [],
        "ours merge (set)": [],
        "delta merge (set)": [],
        "Lance update floor (s = 's3')": [],
    }
    targets = [
        (fresh("ns"), fresh("delta"), fresh("ns"), fresh("ns"), fresh("ns"), fresh("delta"), fresh("ns"))
        for _ in range(REPEATS)
    ]
    for root, uri, spare, lance_own, set_root, set_uri, correct in targets:
        _timed(root, ours_merge, samples["ours merge"])
        _timed(uri, delta_merge, samples["delta merge"])
        _timed("", merge_floor, samples["Spark merge floor"])
        _timed("", update_floor, samples["Spark update floor"])
        check(root, uri)
        assert DeltaTable(uri).to_pyarrow_table(columns=["id"]).num_rows == expected_rows
        _timed(correct, partial(lance_merge, moved_first=True), samples["Lance correct merge floor"])
        check(correct, uri)  # the same rows as delta-rs's merge
        _timed(root, ours_update, samples["ours update"])
        _timed(uri, delta_update, samples["delta update"])
        check(root, uri)
        _timed(root, ours_update_column, samples["ours update (s = 's3')"])
        _timed(uri, delta_update_column, samples["delta update (s = 's3')"])
        check(root, uri)
        _timed(spare, read_floor, samples["PySpark+Lance read floor"])
        _timed(spare, lance_floor, samples["Lance commit floor"])
        _timed(lance_own, partial(lance_merge, moved_first=False), samples["Lance merge_insert floor"])
        # the tables then have the history ours have when their update of s = 's3' is timed:
        # the merge, then the update of the `div` rows (DataFusion's integer division)
        lance_update_floor(lance_own, f"(id / {PARTITIONS}) % 100 = 0")
        _timed(lance_own, lance_update_floor, samples["Lance update floor (s = 's3')"])
        _timed(set_root, ours_set_merge, samples["ours merge (set)"])
        _timed(set_uri, delta_set_merge, samples["delta merge (set)"])
        check(set_root, set_uri)
    merge_ratio = statistics.median(samples["ours merge"]) / statistics.median(samples["delta merge"])
    update_ratio = statistics.median(samples["ours update"]) / statistics.median(samples["delta update"])
    print(f"\nmerge {SOURCE_ROWS:,} rows into {TARGET_ROWS:,} ({PARTITIONS:,} partitions), median of {REPEATS}:")
    for name, s in samples.items():
        print(f"  {name:24s} {_spread(s)}")
    column_ratio = statistics.median(samples["ours update (s = 's3')"]) / statistics.median(
        samples["delta update (s = 's3')"]
    )
    print(f"  merge ratio ours/delta-rs: {merge_ratio:.2f}x; update_rows (1%) ratio: {update_ratio:.2f}x")
    print(f"  update_rows of the rows where {COLUMN_PREDICATE} (1%, read in the driver): {column_ratio:.2f}x delta-rs")
    med = {name: statistics.median(s) for name, s in samples.items()}
    print(
        f"  Spark floors / delta-rs: merge {med['Spark merge floor'] / med['delta merge']:.2f}x, "
        f"update {med['Spark update floor'] / med['delta update']:.2f}x; "
        f"Lance commit floor / delta-rs update: {med['Lance commit floor'] / med['delta update']:.2f}x, "
        f"read floor: {med['PySpark+Lance read floor'] / med['delta update']:.2f}x"
    )
    ours_column, lance_update = med["ours update (s = 's3')"], med["Lance update floor (s = 's3')"]
    lance_merge, delta_column = med["Lance merge_insert floor"], med["delta update (s = 's3')"]
    print(
        f"  ours / Lance's own engine on the same tables: merge {med['ours merge'] / lance_merge:.2f}x, "
        f"update (s = 's3') {ours_column / lance_update:.2f}x; Lance's engine / delta-rs: merge "
        f"{lance_merge / med['delta merge']:.2f}x, update {lance_update / delta_column:.2f}x"
    )
    frames = samples["Spark source DataFrame"]
    call = statistics.median([m - d for m, d in zip(samples["ours merge"], frames, strict=True)])
    print(
        f"  merge_partitioned alone (its DataFrame made before the clock): {call:.2f} s, "
        f"{call / med['delta merge']:.2f}x delta-rs (whose pyarrow read of the source stays timed)"
    )
    correct = med["Lance correct merge floor"]
    print(
        f"  Lance's correct merge (moved keys deleted, then merge_insert): {correct / med['delta merge']:.2f}x "
        f"delta-rs; ours {med['ours merge'] / correct:.2f}x it ({call / correct:.2f}x, the merge call alone)"
    )
    print(f"  merge with set= ours/delta-rs: {med['ours merge (set)'] / med['delta merge (set)']:.2f}x")
