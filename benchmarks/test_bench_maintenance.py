"""Compaction: one partition of 1,000 small fragments, ours vs Lance's own compact_files.

Issue #6 asks for the time and rows/s of compacting a partition made of 1,000 small
fragments. As a reference, the same fragments in a plain Lance dataset are compacted
by ``LanceDataset.optimize.compact_files`` (multi-threaded, no commit protocol) in
the same run. Fresh copies are made before every timed run. Run with ``make bench``.
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

from benchmarks.conftest import spread
from partitioning import PartitionedNamespace, TableCommit
from partitioning.storage.datasets import commit_version, write_new_fragments
from partitioning.storage.paths import join_uri
from partitioning.tables.maintenance import MaintenanceReport
from pipelines.maintenance.operations import compact

pytestmark = pytest.mark.bench

FRAGMENTS = 1_000
ROWS_PER_FRAGMENT = 1_000
TARGET = 250_000
REPEATS = 5
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


def _check(root: str, report: MaintenanceReport, lance_fragments: int) -> None:
    ns = PartitionedNamespace.load(root)
    (table,) = ns.partitions()
    ds = ns.open_table(table)
    assert report.fragments_before == FRAGMENTS
    assert len(ds.get_fragments()) == report.fragments_after == lance_fragments
    assert report.fragments_after <= FRAGMENTS * ROWS_PER_FRAGMENT // TARGET
    assert ds.count_rows() == FRAGMENTS * ROWS_PER_FRAGMENT


def test_compaction_of_1000_small_fragments(spark, tmp_path):
    """Three contenders on fresh copies of the same fragments, in a rotating order each round
    (one untimed warm-up round): ``compact`` with its defaults (this plan, 1M rows, is under
    ``LOCAL_MAX_ROWS``: rewritten in the driver's process), ``compact`` forced onto Spark
    tasks (``local_max_rows=0``), and Lance's ``compact_files``."""
    template, plain_template = str(tmp_path / "ns"), str(tmp_path / "plain")
    _namespace(template)
    _plain(plain_template)
    runs = {
        "ours": lambda root: compact(root, target_rows_per_fragment=TARGET, spark=spark),
        "spark": lambda root: compact(root, target_rows_per_fragment=TARGET, spark=spark, local_max_rows=0),
        "lance": lambda plain: lance.dataset(plain).optimize.compact_files(target_rows_per_fragment=TARGET),
    }
    samples: dict[str, list[float]] = {name: [] for name in runs}
    lance_fragments: list[int] = []
    done: list[tuple[str, MaintenanceReport]] = []
    for k in range(REPEATS + 1):
        names = list(runs)[k % 3 :] + list(runs)[: k % 3]
        for name in names:
            copy = str(tmp_path / f"{name}{k}")
            shutil.copytree(plain_template if name == "lance" else template, copy)
            t0 = time.perf_counter()
            report = runs[name](copy)
            elapsed = time.perf_counter() - t0
            if k:
                samples[name].append(elapsed)
            if name == "lance":
                lance_fragments.append(len(lance.dataset(copy).get_fragments()))
                shutil.rmtree(copy)
            else:
                done.append((copy, report))
        for copy, report in done:
            _check(copy, report, lance_fragments[-1])
            shutil.rmtree(copy)
        done.clear()
    rows = FRAGMENTS * ROWS_PER_FRAGMENT
    ours, spark_tasks, theirs = samples["ours"], samples["spark"], samples["lance"]
    a, s, b = statistics.median(ours), statistics.median(spark_tasks), statistics.median(theirs)
    per_run = [x / y for x, y in zip(ours, theirs, strict=True)]
    print(
        f"\n[compaction] 1 partition, {FRAGMENTS:,} fragments x {ROWS_PER_FRAGMENT:,} rows -> {TARGET:,}-row files, "
        f"median (min .. max) of {REPEATS}:\n"
        f"  ours (in-process, 1 manifest commit)   {spread(ours)} = {rows / a / 1e6:5.2f} M rows/s   "
        f"ratio {a / b:5.2f} (per run {min(per_run):.2f} .. {max(per_run):.2f})\n"
        f"  ours forced onto Spark tasks           {spread(spark_tasks)} = {rows / s / 1e6:5.2f} M rows/s   "
        f"ratio {s / b:5.2f}\n"
        f"  lance compact_files                    {spread(theirs)} = {rows / b / 1e6:5.2f} M rows/s"
    )
