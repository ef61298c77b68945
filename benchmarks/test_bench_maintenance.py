"""Compaction: one partition of 1,000 small fragments, ours (Spark tasks) vs Lance's own compact_files.

Issue #6 asks for the time and rows/s of compacting a partition made of 1,000 small
fragments. As a reference, the same fragments in a plain Lance dataset are compacted
by ``LanceDataset.optimize.compact_files`` (multi-threaded, no commit protocol) in
the same run. Fresh copies are built before every timed run. Run with ``make bench``.
"""

from __future__ import annotations

import shutil
import statistics
import time

import lance
import pyarrow as pa
import pytest
from lance import LanceOperation
from lance.fragment import write_fragments

from partitioning import PartitionedNamespace, TableCommit
from partitioning.manifest import join_uri
from partitioning.tables import commit_version, write_new_fragments
from pipelines.maintenance import compact

pytestmark = pytest.mark.bench

FRAGMENTS = 1_000
ROWS_PER_FRAGMENT = 1_000
TARGET = 250_000
REPEATS = 3
SCHEMA = pa.schema([("id", pa.int64()), ("country", pa.string()), ("amount", pa.float64()), ("note", pa.string())])


def _chunk(i: int) -> pa.Table:
    ids = pa.array(range(i * ROWS_PER_FRAGMENT, (i + 1) * ROWS_PER_FRAGMENT), pa.int64())
    return pa.table(
        {
            "id": ids,
            "country": pa.array(["US"] * ROWS_PER_FRAGMENT),
            "amount": pa.array([float(x % 997) for x in range(ROWS_PER_FRAGMENT)]),
            "note": pa.array([f"n{x % 50}" for x in range(ROWS_PER_FRAGMENT)]),
        },
        schema=SCHEMA,
    )


def _namespace(root: str) -> None:
    ns = PartitionedNamespace.create(root, SCHEMA, ["country"])
    values = {"country": "US"}
    location = ns.new_table_location(1, values)
    uri = join_uri(root, location)
    fragments = [f for i in range(FRAGMENTS) for f in write_new_fragments(_chunk(i), uri, ns.namespace_schema)]
    version = commit_version(uri, ns.namespace_schema, fragments, None)
    ns.commit_tables([TableCommit(1, values, location, version)])


def _plain(uri: str) -> None:
    fragments = [f for i in range(FRAGMENTS) for f in write_fragments(_chunk(i), uri, schema=SCHEMA, mode="overwrite")]
    lance.LanceDataset.commit(uri, LanceOperation.Overwrite(SCHEMA, fragments))


def test_compaction_of_1000_small_fragments(spark, tmp_path):
    ours, theirs = [], []
    for k in range(REPEATS):
        root, plain = str(tmp_path / f"ns{k}"), str(tmp_path / f"plain{k}")
        _namespace(root)
        _plain(plain)
        t0 = time.perf_counter()
        report = compact(root, target_rows_per_fragment=TARGET, spark=spark)
        t1 = time.perf_counter()
        lance.dataset(plain).optimize.compact_files(target_rows_per_fragment=TARGET)
        t2 = time.perf_counter()
        ours.append(t1 - t0)
        theirs.append(t2 - t1)
        ns = PartitionedNamespace.load(root)
        (table,) = ns.partitions()
        ds = ns.open_table(table)
        assert report.fragments_before == FRAGMENTS
        assert len(ds.get_fragments()) == report.fragments_after <= FRAGMENTS * ROWS_PER_FRAGMENT // TARGET
        assert ds.count_rows() == FRAGMENTS * ROWS_PER_FRAGMENT
        assert len(lance.dataset(plain).get_fragments()) == report.fragments_after
        shutil.rmtree(root)
        shutil.rmtree(plain)
    rows = FRAGMENTS * ROWS_PER_FRAGMENT
    a, b = statistics.median(ours), statistics.median(theirs)
    print(
        f"\n[compaction] 1 partition, {FRAGMENTS:,} fragments x {ROWS_PER_FRAGMENT:,} rows -> {TARGET:,}-row files, "
        f"median of {REPEATS}:\n  ours (Spark tasks + 1 manifest commit) {a:6.2f} s = {rows / a / 1e6:5.2f} M rows/s\n"
        f"  lance compact_files                    {b:6.2f} s = {rows / b / 1e6:5.2f} M rows/s   ratio {a / b:5.2f}"
    )
