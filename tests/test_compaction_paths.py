"""Compaction's two paths: a small plan rewritten in the driver's process (no Spark job) and
a larger one as Spark tasks, bins packed per task. Both must leave the same rows in the same
fragment layout, under one ``__manifest`` commit recorded as COMPACT.

Expected layouts and counts are worked out by hand from the data written; which path ran is
read from Spark's own status tracker (jobs and their tasks), not from the code under test.
"""

from __future__ import annotations

import lance
import pyarrow as pa
import pytest

from partitioning import PartitionedNamespace
from partitioning.service.arrow import write_arrow
from partitioning.storage.datasets import replace_fragments
from partitioning.tables import compaction
from partitioning.tables.compaction import CompactionTask, commit_compaction, plan_compaction, rewrite_all
from partitioning.tables.write import write_table
from pipelines.maintenance import operations as spark_maintenance
from pipelines.maintenance.operations import compact

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("country", pa.string())])
TARGET = 16
# US: 40 one-row appends -> bins of 16, 16 and 8 rows; CN: 3 appends of 2 -> one fragment of 6;
# FR: 2 one-row appends -> one fragment of 2. 48 rows in the plan, 45 fragments -> 5.
US = [(i, "US") for i in range(40)]
CN = [(100 + i, "CN") for i in range(6)]
FR = [(200, "FR"), (201, "FR")]
LAYOUT = {"US": [16, 16, 8], "CN": [6], "FR": [2]}
PLANNED_ROWS = 48


def _namespace(root: str) -> None:
    ns = PartitionedNamespace.create(root, SCHEMA, ["country"])
    appends = [[r] for r in US] + [CN[k : k + 2] for k in range(0, 6, 2)] + [[r] for r in FR]
    for rows in appends:
        write_table(ns, pa.Table.from_pylist([{"id": i, "country": c} for i, c in rows], schema=SCHEMA))


def _state(root: str) -> dict[str, tuple[list[int], list[tuple[int, str]]]]:
    """Per partition: fragment row counts, and the rows in scan order (compaction keeps the order)."""
    ns = PartitionedNamespace.load(root)
    out = {}
    for p in ns.partitions():
        ds = ns.open_table(p)
        rows = [(r["id"], r["country"]) for r in ds.to_table().to_pylist()]
        out[p.values["country"]] = ([f.count_rows() for f in ds.get_fragments()], rows)
    return out


def _jobs(spark) -> list[int]:
    return sorted(spark.sparkContext.statusTracker().getJobIdsForGroup())


def _compact_counting_jobs(spark, root: str, **kwargs):
    before = set(_jobs(spark))
    report = compact(root, target_rows_per_fragment=TARGET, spark=spark, **kwargs)
    tracker = spark.sparkContext.statusTracker()
    new = [j for j in _jobs(spark) if j not in before]
    tasks = [tracker.getStageInfo(s).numTasks for j in new for s in tracker.getJobInfo(j).stageIds]
    return report, new, tasks


def _history_head(root: str) -> tuple[str, dict[str, float]]:
    row = PartitionedNamespace.load(root).history(limit=1).to_pylist()[0]
    return row["operation"], dict(row["metrics"])


@pytest.mark.parametrize(
    ("kwargs", "spark_path"),
    [
        ({}, False),  # the defaults: 48 rows is far below the threshold
        ({"local_max_rows": PLANNED_ROWS}, False),  # the bound is inclusive
        ({"local_max_rows": PLANNED_ROWS - 1}, True),
        ({"local_max_bytes": 0}, True),  # the data files have a size, so the bytes bound trips
        ({"local_max_rows": 0}, True),
    ],
)
def test_threshold_picks_the_path_and_both_give_the_same_rows_and_layout(spark, tmp_path, kwargs, spark_path):
    root = str(tmp_path / "ns")
    _namespace(root)
    before = _state(root)
    assert {c: counts for c, (counts, _) in before.items()} == {"US": [1] * 40, "CN": [2, 2, 2], "FR": [1, 1]}
    assert {c: rows for c, (_, rows) in before.items()} == {"US": US, "CN": CN, "FR": FR}
    v0 = PartitionedNamespace.load(root).manifest_version

    report, jobs, tasks = _compact_counting_jobs(spark, root, **kwargs)

    if spark_path:
        assert len(jobs) == 1, jobs
        assert tasks == [1], tasks  # five bins of 48 rows in all fit one Spark task
    else:
        assert jobs == []
    assert report.manifest_version == v0 + 1 == PartitionedNamespace.load(root).manifest_version
    assert (report.tables, report.rows, report.fragments_before, report.fragments_after) == (3, 48, 45, 5)
    after = _state(root)
    assert {c: counts for c, (counts, _) in after.items()} == LAYOUT
    assert {c: rows for c, (_, rows) in after.items()} == {"US": US, "CN": CN, "FR": FR}
    operation, metrics = _history_head(root)
    assert operation == "COMPACT"
    assert {k: metrics[k] for k in ("partitions_touched", "rows_rewritten", "files_before", "files_after")} == {
        "partitions_touched": 3.0,
        "rows_rewritten": 48.0,
        "files_before": 45.0,
        "files_after": 5.0,
    }


def _task(rows: int, size: int, name: str = "t") -> CompactionTask:
    return CompactionTask(name, f"/x/{name}", 1, (0, 1), 1_000_000, (), rows, size)


def test_spark_batches_pack_consecutive_bins_up_to_the_row_and_byte_bounds():
    rows, size = spark_maintenance.BATCH_ROWS, spark_maintenance.BATCH_BYTES
    tasks = [
        _task(100_000, 10, "a"),
        _task(100_000, 10, "b"),
        _task(rows - 200_000 + 1, 10, "c"),  # one row too many for the first batch
        _task(rows, 0, "d"),  # exactly the bound: alone
        _task(1, size, "e"),  # the byte bound: alone
        _task(1, 1, "f"),
        _task(1, 1, "g"),
    ]
    batches = spark_maintenance._batches(tasks)
    assert [[t.object_id for t in b] for b in batches] == [["a", "b"], ["c"], ["d"], ["e"], ["f", "g"]]


def test_many_small_tables_share_one_spark_task(spark, tmp_path):
    """Twelve one-partition tables of three small fragments each: 12 bins, one Spark task."""
    root = str(tmp_path / "ns")
    ns = PartitionedNamespace.create(root, SCHEMA, ["country"])
    countries = [f"C{k:02d}" for k in range(12)]
    for k in range(3):
        write_table(ns, pa.Table.from_pylist([{"id": 10 * j + k, "country": c} for j, c in enumerate(countries)]))
    report, jobs, tasks = _compact_counting_jobs(spark, root, local_max_rows=0)
    assert (len(jobs), tasks) == (1, [1])
    assert (report.tables, report.rows, report.fragments_before, report.fragments_after) == (12, 36, 36, 12)
    after = _state(root)
    assert {c: counts for c, (counts, _) in after.items()} == {c: [3] for c in countries}
    assert {c: rows for c, (_, rows) in after.items()} == {
        c: [(10 * j + k, c) for k in range(3)] for j, c in enumerate(countries)
    }


def test_a_table_a_writer_is_committing_to_is_skipped_and_the_rest_compacted(tmp_path, monkeypatch):
    """Right after compaction opened a partition's dataset to commit its rewrite, a writer
    commits to that dataset (a Lance Merge, its ``__manifest`` commit still to come): that
    partition is left as it was and reported as skipped, the other is compacted, and every
    row stays."""
    root = str(tmp_path / "ns")
    expected = []
    for i in range(4):
        batch = pa.table({"id": [2 * i, 2 * i + 1], "k": ["a", "b"]})
        write_arrow(root, batch, partition_by=["k"] if i == 0 else None)
        expected.extend(batch.to_pylist())
    ns = PartitionedNamespace.load(root)
    results = rewrite_all(plan_compaction(ns))
    raced = next(t for t in ns.partitions() if t.values["k"] == "a")
    opened = compaction.latest_keeping_indexes

    def then_a_writer_commits(uri, *args, **kwargs):
        head = opened(uri, *args, **kwargs)
        if uri == raced.uri:
            replace_fragments(uri, head, [f.metadata for f in head.get_fragments()], [], None)
        return head

    monkeypatch.setattr(compaction, "latest_keeping_indexes", then_a_writer_commits)
    report = commit_compaction(PartitionedNamespace.load(root), results)
    assert report.skipped == (raced.object_id,)
    after = PartitionedNamespace.load(root)
    fragments = {
        t.values["k"]: len(lance.dataset(t.uri, version=t.read_version).get_fragments()) for t in after.partitions()
    }
    assert fragments == {"a": 4, "b": 1}
    stored = [
        r for t in after.partitions() for r in lance.dataset(t.uri, version=t.read_version).to_table().to_pylist()
    ]
    assert sorted(stored, key=lambda r: r["id"]) == expected
