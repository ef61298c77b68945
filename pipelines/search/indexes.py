"""Index builds driven by Spark (issue 13): one shared vector model, a segment per partition
built in a Spark task, the driver's dataset commits and ONE ``__manifest`` commit.

A vector index: a Spark job samples the selected partitions, the driver trains the IVF
centroids (and the PQ codebook) once and records them (:mod:`partitioning.search.index_model`),
then each partition's index is built with that model by a task
(:func:`partitioning.search.indexes.build_segment`) and committed by the driver
(:func:`partitioning.search.indexes.commit_indexes`). :func:`optimize_indexes` folds unindexed
rows in (a delta segment per partition, with the recorded model) and indexes
partitions created since. Without a SparkSession, or for a vector build of at most
:data:`DRIVER_MAX_VALUES` values (rows x dimension), everything runs in this process's threads.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import pyarrow as pa
from pyspark.sql import SparkSession

from partitioning.errors import InvalidInput
from partitioning.namespace import PartitionedNamespace
from partitioning.search.index_model import IndexSpec, record_spec, recorded_specs, save_model, train_model
from partitioning.search.indexes import (
    DEFAULT_SAMPLE_SIZE,
    IndexBuild,
    IndexReport,
    IndexTask,
    build_segment,
    column_name,
    commit_indexes,
    define_scalar_index,
    define_vector_index,
    plan_index_tasks,
    sample_vectors,
)
from partitioning.spec.vectors import vector_dimension
from partitioning.sql.filters import Filter
from partitioning.storage.guard import guarded
from pipelines.read_options import session_dialect
from pipelines.session_calls import describe_jobs
from pipelines.shared_roots import driver_root
from pipelines.spark_errors import spark_errors
from pipelines.tasks import run_tasks, session_or_active

__all__ = ["DRIVER_MAX_VALUES", "build_segments", "create_scalar_index", "create_vector_index", "optimize_indexes"]

# A vector build over at most this many values (rows x dimension: 256 MiB of float32) runs in
# the driver's threads: Spark's jobs cost more than the build (a sample job and a build job,
# each with Python workers to start), and the data is no more than one Lance dataset holds.
DRIVER_MAX_VALUES = 1 << 26
DRIVER_THREADS = 4
T = TypeVar("T")
R = TypeVar("R")


def _load(root: str, session: SparkSession | None, storage_options: Mapping[str, str] | None) -> PartitionedNamespace:
    return PartitionedNamespace.load(root if session is None else driver_root(session, root), storage_options)


def _run(session: SparkSession | None, items: Sequence[T], fn: Callable[[T], R], what: str, root: str) -> list[R]:
    """``fn`` over ``items``: one Spark task each (``range`` + ``mapInArrow``, classic or
    Connect), or in this process's threads (Lance's builds and takes release the GIL)."""
    if session is None:
        if len(items) <= 1:
            return [fn(i) for i in items]
        with ThreadPoolExecutor(max_workers=min(DRIVER_THREADS, len(items))) as pool:
            return list(pool.map(fn, items))
    label = root.rstrip("/").rsplit("/", 1)[-1]
    with spark_errors(f"{what} {root}"), describe_jobs(session, f"lance_partitioned: {what} ({label})"):
        return run_tasks(session, items, fn)


def build_segments(
    session: SparkSession | None, ns: PartitionedNamespace, tasks: Sequence[IndexTask]
) -> list[IndexBuild]:
    """Build (not commit) every task's segment, a Spark task each (in-process without a session)."""
    return _run(session, tasks, build_segment, f"build {len(tasks)} index segments", ns.root)


def _train(
    session: SparkSession | None, ns: PartitionedNamespace, spec: IndexSpec, tasks: Sequence[IndexTask]
) -> IndexSpec:
    """Sample across ``tasks`` (a Spark job), train the model once on the driver, save it; ``spec`` with it."""
    total = sum(t.rows for t in tasks)
    nparts = spec.param("num_partitions") or max(1, min(256, int(math.sqrt(total)), total // 2))
    pq = spec.index_type.endswith("PQ")
    need = max(nparts * 256, DEFAULT_SAMPLE_SIZE if pq else 0)
    size = spec.param("sample_size") or need
    fraction = min(1.0, size / max(1, total))
    parts = _run(session, tasks, lambda t: sample_vectors(t, fraction, 0), f"sample {len(tasks)} tables", ns.root)
    dim = vector_dimension(ns.schema.field(column_name(ns, spec)).type)
    value = ns.schema.field(column_name(ns, spec)).type.value_type
    sample = (
        pa.concat_arrays([p.cast(pa.list_(value, dim)) for p in parts]) if parts else pa.array([], pa.list_(value, dim))
    )
    model = train_model(
        sample,
        spec.index_type,
        spec.metric or "l2",
        nparts,
        spec.param("num_sub_vectors") if pq else None,
        spec.param("max_iters") or 50,
    )
    return IndexSpec(
        spec.name,
        spec.column_id,
        spec.index_type,
        spec.metric,
        spec.params,
        save_model(ns.root, model, ns.storage_options),
    )


def _placed(
    session: SparkSession | None,
    ns: PartitionedNamespace,
    specs: Sequence[IndexSpec],
    tasks: Sequence[IndexTask],
    driver_max_values: int,
) -> SparkSession | None:
    """Where the tasks run: ``session``'s tasks, or ``None`` (this process) for a vector build
    of at most ``driver_max_values`` values, or without a session."""
    if session is None or not all(s.is_vector for s in specs):
        return session
    width = max(vector_dimension(ns.schema.field(column_name(ns, s)).type) for s in specs)
    return None if sum(t.rows for t in tasks) * width <= driver_max_values else session


def _build(
    session: SparkSession | None,
    ns: PartitionedNamespace,
    spec: IndexSpec,
    filter: str | Filter | None,
    *,
    replace: bool,
    train: bool,
    driver_max_values: int = 0,
) -> IndexReport:
    with guarded(ns.root, ns.storage_options) as guard:
        ns.refresh(guard=guard)  # the lease is there before the plan reads the tables
        scan = ns.plan_scan(filter, dialect=session_dialect(session) if session is not None else None)
        tasks = plan_index_tasks(ns, spec, scan, incremental=False, replace=replace)
        if not tasks:
            return IndexReport("index", ns.root, ns.manifest_version, (spec.name,))
        session = _placed(session, ns, [spec], tasks, driver_max_values)
        if train:
            spec = _train(session, ns, spec, tasks)
            tasks = [dataclasses.replace(t, spec=spec.to_json()) for t in tasks]
        record_spec(ns.root, spec, ns.storage_options)
        builds = build_segments(session, ns, tasks)
        return commit_indexes(ns, builds, (spec.name,), guard=guard)


def create_vector_index(
    root: str,
    column: str,
    *,
    index_type: str = "IVF_PQ",
    metric: str = "l2",
    filter: str | Filter | None = None,
    replace: bool = True,
    name: str | None = None,
    storage_options: Mapping[str, str] | None = None,
    spark: SparkSession | None = None,
    driver_max_values: int = DRIVER_MAX_VALUES,
    **index_params: int,
) -> IndexReport:
    """Build a vector index on ``column`` in every partition ``filter`` selects, with ONE shared model.

    ``index_type``: IVF_PQ, IVF_FLAT, IVF_SQ, IVF_HNSW_SQ or IVF_HNSW_PQ; ``metric``: l2,
    cosine or dot. ``index_params``: ``num_partitions`` (IVF lists; default about the
    square root of the rows), ``num_sub_vectors`` (PQ types), ``sample_size`` (training
    vectors), ``max_iters``, and ``m``/``ef_construction`` (HNSW types).

    The sample, the training and the per-partition builds run in the driver's threads when
    the selected rows hold at most ``driver_max_values`` values (rows x dimension), else
    the sample and the builds are Spark tasks.
    """
    session = session_or_active(spark)
    ns = _load(root, session, storage_options)
    spec = define_vector_index(ns, column, index_type, metric, name, index_params)
    return _build(session, ns, spec, filter, replace=replace, train=True, driver_max_values=driver_max_values)


def create_scalar_index(
    root: str,
    column: str,
    index_type: str = "BTREE",
    filter: str | Filter | None = None,
    *,
    replace: bool = True,
    name: str | None = None,
    storage_options: Mapping[str, str] | None = None,
    spark: SparkSession | None = None,
) -> IndexReport:
    """Build a scalar index (BTREE, BITMAP, INVERTED, ZONEMAP or BLOOMFILTER) on ``column`` in the
    selected partitions; Lance's scans use it for the filters they are given."""
    session = session_or_active(spark)
    ns = _load(root, session, storage_options)
    spec = define_scalar_index(ns, column, index_type, name)
    return _build(session, ns, spec, filter, replace=replace, train=False)


def optimize_indexes(
    root: str,
    *,
    filter: str | Filter | None = None,
    storage_options: Mapping[str, str] | None = None,
    spark: SparkSession | None = None,
    driver_max_values: int = DRIVER_MAX_VALUES,
) -> IndexReport:
    """Index the unindexed rows of every recorded index (a delta segment built with the recorded
    model; scalar indexes are rebuilt) and partitions created since, in ONE ``__manifest`` commit.
    Vector-only work of at most ``driver_max_values`` values runs in the driver's threads."""
    session = session_or_active(spark)
    ns = _load(root, session, storage_options)
    specs = recorded_specs(ns.properties)
    if not specs:
        raise InvalidInput(
            f"{ns.root} has no recorded index; create one with create_vector_index or create_scalar_index"
        )
    with guarded(ns.root, ns.storage_options) as guard:
        ns.refresh(guard=guard)
        scan = ns.plan_scan(filter, dialect=session_dialect(session) if session is not None else None)
        tasks = [t for s in specs.values() for t in plan_index_tasks(ns, s, scan, incremental=True)]
        if not tasks:
            return IndexReport("optimize_indexes", ns.root, ns.manifest_version, tuple(sorted(specs)))
        session = _placed(session, ns, list(specs.values()), tasks, driver_max_values)
        builds = build_segments(session, ns, tasks)
        report = commit_indexes(ns, builds, tuple(sorted(specs)), guard=guard)
    return IndexReport(
        "optimize_indexes", report.root, report.manifest_version, report.names, report.tables, report.rebuilt
    )
