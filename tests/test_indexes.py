"""Index builds (issue 13): one shared model, every partition fully indexed, one manifest commit."""

from __future__ import annotations

import datetime as dt
import os

import lance
import numpy as np
import pyarrow as pa
import pytest

from partitioning import PartitionedNamespace
from partitioning.errors import CorruptNamespace, InvalidInput
from partitioning.search.index_model import PROPERTY_PREFIX, IndexSpec, recorded_specs
from partitioning.search.indexes import commit_indexes, plan_index_tasks
from partitioning.spec.field_ids import field_id_of
from partitioning.storage.locations import MODEL_DIR
from partitioning.storage.manifest import ManifestStore
from partitioning.tables.deletes import delete_rows
from partitioning.tables.vacuum import vacuum
from partitioning.tables.write import write_table
from pipelines.search.indexes import build_segments, create_scalar_index, create_vector_index, optimize_indexes

DIM = 16
SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("c", pa.string()), pa.field("v", pa.list_(pa.float32(), DIM))])


def rows(n: int, c: str, start: int, seed: int) -> pa.Table:
    v = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    vectors = pa.FixedSizeListArray.from_arrays(pa.array(v.ravel()), DIM)
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()), "c": [c] * n, "v": vectors}, schema=SCHEMA)


def namespace(root: str, sizes: dict[str, int]) -> tuple[PartitionedNamespace, pa.Table]:
    ns = PartitionedNamespace.create(root, SCHEMA, ["c"])
    data = pa.concat_tables([rows(n, c, 10_000 * i, i) for i, (c, n) in enumerate(sizes.items())])
    write_table(ns, data)
    return ns, data


def stats(root: str) -> dict[str, tuple[int, int] | None]:
    """Partition value -> (num_indexed_rows, num_unindexed_rows) of index v_idx, from pylance."""
    ns = PartitionedNamespace.load(root)
    out = {}
    for t in ns.partitions():
        ds = lance.dataset(t.uri, version=t.read_version)
        if "v_idx" not in {d.name for d in ds.describe_indices()}:
            out[next(iter(t.values.values()))] = None
            continue
        s = ds.stats.index_stats("v_idx")
        out[next(iter(t.values.values()))] = (s["num_indexed_rows"], s["num_unindexed_rows"])
    return out


def brute_force(data: pa.Table, q: np.ndarray, k: int) -> list[int]:
    v = np.stack(data.column("v").to_numpy(zero_copy_only=False))
    d = ((v - q) ** 2).sum(axis=1)
    order = np.lexsort((data.column("id").to_numpy(), d))
    return data.column("id").to_numpy()[order[:k]].tolist()


@pytest.mark.parametrize("where", ["driver threads", "Spark tasks"])
def test_shared_model_indexes_every_partition_fully(spark, tmp_path, where):
    """The same index whether the sample and the builds run in the driver's threads (a small
    build) or as Spark tasks; only the latter starts Spark jobs."""
    root = str(tmp_path / "ns")
    ns, data = namespace(root, {"a": 1200, "b": 10, "c": 600})
    before = ns.manifest_version
    limit = {} if where == "driver threads" else {"driver_max_values": 0}
    group = f"index-{where.replace(' ', '-')}-{tmp_path.name}"
    spark.sparkContext.setJobGroup(group, where)
    try:
        report = create_vector_index(root, "v", index_type="IVF_PQ", num_partitions=8, spark=spark, **limit)
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
    jobs = spark.sparkContext.statusTracker().getJobIdsForGroup(group)
    assert (len(jobs) >= 2) if where == "Spark tasks" else not jobs, jobs
    ns = PartitionedNamespace.load(root)
    assert ns.manifest_version == before + 2  # the model's definition, then ONE commit of the tables
    assert report.tables == 3
    assert stats(root) == {"a": (1200, 0), "b": (10, 0), "c": (600, 0)}
    spec = recorded_specs(ns.properties)["v_idx"]
    assert spec.model is not None and os.path.exists(os.path.join(root, spec.model))
    assert dict(spec.params) == {"num_partitions": 8, "num_sub_vectors": 2}
    listed = ns.indexes().to_pylist()
    assert sorted((r["index_type"], r["column"], r["indexed_rows"], r["unindexed_rows"]) for r in listed) == [
        ("IVF_PQ", "v", 10, 0),
        ("IVF_PQ", "v", 600, 0),
        ("IVF_PQ", "v", 1200, 0),
    ]
    q = np.random.default_rng(99).standard_normal(DIM).astype(np.float32)
    for t in ns.partitions():
        c = next(iter(t.values.values()))
        got = lance.dataset(t.uri, version=t.read_version).to_table(
            nearest={"column": "v", "q": q, "k": 5, "nprobes": 8, "refine_factor": 1000}
        )
        part = data.filter(pa.compute.equal(data.column("c"), c))
        assert got.column("id").to_pylist() == brute_force(part, q, 5)


@pytest.mark.parametrize("index_type", ["IVF_FLAT", "IVF_SQ", "IVF_HNSW_SQ", "IVF_HNSW_PQ"])
def test_other_vector_types_index_small_partitions(tmp_path, index_type):
    root = str(tmp_path / "ns")
    namespace(root, {"a": 700, "b": 10})
    create_vector_index(root, "v", index_type=index_type, metric="cosine", num_partitions=4)
    assert stats(root) == {"a": (700, 0), "b": (10, 0)}
    assert {r["index_type"] for r in PartitionedNamespace.load(root).indexes().to_pylist()} == {index_type}


@pytest.mark.parametrize("index_type", ["BTREE", "BITMAP", "INVERTED"])
def test_scalar_indexes(spark, tmp_path, index_type):
    root = str(tmp_path / "ns")
    namespace(root, {"a": 50, "b": 10})
    create_scalar_index(root, "id" if index_type == "BTREE" else "c", index_type, spark=spark)
    listed = PartitionedNamespace.load(root).indexes().to_pylist()
    assert sorted((r["index_type"], r["indexed_rows"], r["unindexed_rows"]) for r in listed) == [
        (index_type, 10, 0),
        (index_type, 50, 0),
    ]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda r: create_vector_index(r, "nope"), "unknown column 'nope'; columns are: id, c, v"),
        (lambda r: create_vector_index(r, "id"), "column 'id' is int64, not a vector column"),
        (lambda r: create_vector_index(r, "v", index_type="IVF_XX"), "allowed: IVF_PQ, IVF_FLAT, IVF_SQ"),
        (lambda r: create_vector_index(r, "v", metric="hamming"), "unknown metric 'hamming'; allowed: l2, cosine, dot"),
        (lambda r: create_vector_index(r, "v", nprobes=3), "unknown index parameter 'nprobes' for IVF_PQ; allowed:"),
        (lambda r: create_vector_index(r, "v", index_type="IVF_FLAT", num_sub_vectors=4), "'num_sub_vectors'"),
        (lambda r: create_scalar_index(r, "c", "FOO"), "allowed: BTREE, BITMAP, INVERTED"),
    ],
)
def test_bad_requests_are_one_line(tmp_path, call, message):
    root = str(tmp_path / "ns")
    namespace(root, {"a": 20})
    with pytest.raises(InvalidInput) as info:
        call(root)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_concurrent_append_is_rebased_and_rewrite_is_rebuilt(spark, tmp_path):
    root = str(tmp_path / "ns")
    ns, data = namespace(root, {"a": 600, "b": 40})
    create_vector_index(root, "v", index_type="IVF_FLAT", num_partitions=4, spark=spark)
    spec = recorded_specs(PartitionedNamespace.load(root).properties)["v_idx"]
    ns = PartitionedNamespace.load(root)
    tasks = plan_index_tasks(ns, spec, ns.plan_scan(), incremental=False)
    builds = build_segments(spark, ns, tasks)
    write_table(ns, rows(30, "a", 50_000, 7))  # a write between the tasks and the commit
    delete_rows(root, "c = 'b' AND id < 10020")  # and a delete that changes b's fragment
    commit_indexes(PartitionedNamespace.load(root), builds, ("v_idx",))
    ns = PartitionedNamespace.load(root)
    assert stats(root) == {"a": (600, 30), "b": (20, 0)}
    ids = sorted(
        pa.concat_tables(lance.dataset(t.uri, version=t.read_version).to_table(columns=["id"]) for t in ns.partitions())
        .column("id")
        .to_pylist()
    )
    expected = sorted(
        [i for i in data.column("id").to_pylist() if not 10_000 <= i < 10_020] + list(range(50_000, 50_030))
    )
    assert ids == expected


def test_optimize_folds_in_appends_and_new_partitions_in_one_commit(spark, tmp_path):
    root = str(tmp_path / "ns")
    ns, _ = namespace(root, {"a": 600, "b": 10})
    create_vector_index(root, "v", index_type="IVF_PQ", num_partitions=4, spark=spark)
    ns = PartitionedNamespace.load(root)
    write_table(ns, pa.concat_tables([rows(25, "a", 70_000, 3), rows(12, "z", 80_000, 4)]))
    assert stats(root) == {"a": (600, 25), "b": (10, 0), "z": None}
    before = PartitionedNamespace.load(root).manifest_version
    optimize_indexes(root, spark=spark)
    assert PartitionedNamespace.load(root).manifest_version == before + 1
    assert stats(root) == {"a": (625, 0), "b": (10, 0), "z": (12, 0)}


def test_vacuum_keeps_the_model(tmp_path):
    root = str(tmp_path / "ns")
    namespace(root, {"a": 600})
    create_vector_index(root, "v", index_type="IVF_FLAT", num_partitions=4)
    spec = recorded_specs(PartitionedNamespace.load(root).properties)["v_idx"]
    assert spec.model is not None
    with pytest.raises(InvalidInput, match="already has an index 'v_idx'; pass replace=True"):
        create_vector_index(root, "v", index_type="IVF_FLAT", num_partitions=4, replace=False)
    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=30)
    vacuum(root, dt.timedelta(0), allow_short_retention=True, now=later)
    assert os.listdir(os.path.join(root, MODEL_DIR)) == [spec.model.split("/")[1]]
    write_table(PartitionedNamespace.load(root), rows(9, "new", 90_000, 5))
    optimize_indexes(root)
    assert stats(root) == {"a": (600, 0), "new": (9, 0)}


@pytest.mark.parametrize(
    "model", ["../outside.arrow", "/etc/passwd", f"{MODEL_DIR}/../../x.arrow", f"{MODEL_DIR}/{'0' * 64}.arrow"]
)
def test_a_hostile_model_path_is_refused(tmp_path, model):
    root = str(tmp_path / "ns")
    ns, _ = namespace(root, {"a": 600})
    (tmp_path / "outside.arrow").write_bytes(b"not a model")
    spec = IndexSpec("v_idx", field_id_of(ns.schema.field("v")) or 0, "IVF_FLAT", "l2", (("num_partitions", 4),), model)
    ManifestStore(root).update_metadata({f"{PROPERTY_PREFIX}v_idx": spec.to_json()})
    with pytest.raises(CorruptNamespace) as info:
        optimize_indexes(root)
    assert "\n" not in str(info.value) and (
        "refusing to read it" in str(info.value) or "cannot read" in str(info.value)
    )
