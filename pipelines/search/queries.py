"""Vector search on Spark: ``search_partitioned`` (one query) and ``knn_join`` (a batch of queries).

``search_partitioned`` plans on the driver (:func:`partitioning.search.nearest.plan_search`:
checks, pruning through ``__manifest``, the index metric). With at most
``driver_max_partitions`` partition tables to search (default
:data:`DRIVER_MAX_PARTITIONS`) it searches them from the driver in a thread pool, with
no Spark job (low latency); with more, one Spark job searches them, a task per group of
partitions returning its local top-k, and the driver merges those to the global top-k.
Both give the same rows (ties are broken by partition order, then row order).

``knn_join`` collects the queries once; up to ``driver_max_partitions`` partitions it
searches them all from the driver, else one Spark job in which each task opens its
group of partitions once and searches every query there, and a window keeps each
query's ``k`` nearest rows. Both use only ``range``/``mapInArrow``/``createDataFrame``, so
they run on classic Spark and Spark Connect alike.

Vector columns come back as Spark ``array<float>`` (``array<double>`` for float64
vectors), and ``_distance`` as ``float`` (squared L2 for ``l2``, 1 - cosine similarity for
``cosine``).
"""

from __future__ import annotations

import dataclasses
import pickle
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from partitioning.errors import InvalidInput, PartitioningError, SchemaError
from partitioning.namespace import PartitionedNamespace
from partitioning.search.nearest import DISTANCE, SearchPlan, merge_top_k, plan_search, query_matrix, search_tasks
from partitioning.spec.vectors import spark_facing_type
from partitioning.state.scan import ScanTask
from pipelines.columns.schema import from_arrow_schema
from pipelines.read_options import session_dialect
from pipelines.shared_roots import driver_root
from pipelines.spark_errors import hide_worker_traceback, translate_spark_error

__all__ = ["DRIVER_MAX_PARTITIONS", "MAX_SEARCH_TASKS", "knn_join", "search_partitioned", "to_spark_table"]

# One Lance search costs 3-6 ms (64 dims, nprobes 20, refine 10, 2 cores) and a Spark job
# about a second, so the driver's threads are faster up to a few hundred partitions
# (benchmarks/test_bench_vector.py: 64 partitions 1.7 s from the driver, 12 s as a job).
DRIVER_MAX_PARTITIONS = 256
MAX_SEARCH_TASKS = 64
EXECUTOR_THREADS = 4
_QUERY = "__query"
_ID = "__query_id"
_GROUP = "__group"
_RANK = "__rank"


def to_spark_table(table: pa.Table) -> pa.Table:
    """``table`` with every vector column as a plain list of float32/float64 (Spark's ``array``)."""
    return table.cast(pa.schema([f.with_type(spark_facing_type(f.type)) for f in table.schema]))


def _spark_schema(schema: pa.Schema) -> T.StructType:
    return from_arrow_schema(to_spark_table(schema.empty_table()).schema)


def _plan(spark: SparkSession, root: str, manifest_version: int | None, storage_options: Any, **kw: Any) -> SearchPlan:
    ns = PartitionedNamespace.load(driver_root(spark, root), storage_options, manifest_version=manifest_version)
    return plan_search(ns, dialect=session_dialect(spark), **kw)


def _groups(tasks: Sequence[ScanTask]) -> list[tuple[ScanTask, ...]]:
    """Contiguous groups of tasks (partition order is kept), at most :data:`MAX_SEARCH_TASKS`."""
    n = min(len(tasks), MAX_SEARCH_TASKS)
    per = -(-len(tasks) // n)
    return [tuple(tasks[i : i + per]) for i in range(0, len(tasks), per)]


def _run_groups(spark: SparkSession, plan: SearchPlan, queries: np.ndarray, ids: pa.Array | None) -> DataFrame:
    """One Spark job: a task per group of partitions, yielding each query's local top-k."""
    groups = _groups(plan.tasks)
    local = to_spark_table(plan.output_schema.empty_table()).schema
    head = [pa.field(_QUERY, pa.int64())] + ([] if ids is None else [pa.field(_ID, ids.type)])
    out_schema = pa.schema([*head, *local, pa.field(_GROUP, pa.int64()), pa.field(_RANK, pa.int64())])
    # an executor's Python worker keeps no vectors: its tasks rarely meet the same partition again
    blob = pickle.dumps((dataclasses.replace(plan, keep_vectors=False), groups, queries, ids))

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        p, gs, qs, qids = pickle.loads(blob)
        for batch in batches:
            for g in batch.column(0).to_pylist():
                try:
                    found = search_tasks(p, gs[g], qs, threads=EXECUTOR_THREADS)
                except PartitioningError:
                    hide_worker_traceback()
                    raise
                sizes = np.array([t.num_rows for t in found], dtype=np.int64)
                n = int(sizes.sum())
                if not n:
                    continue
                query = np.repeat(np.arange(len(found), dtype=np.int64), sizes)
                key = [pa.array(query)] + ([] if qids is None else [qids.take(pa.array(query))])
                shaped = to_spark_table(pa.concat_tables(found)).combine_chunks()
                rank = np.arange(n, dtype=np.int64) - np.repeat(np.cumsum(sizes) - sizes, sizes)
                cols = [*key, *shaped.columns, pa.array(np.full(n, g, dtype=np.int64)), pa.array(rank)]
                yield from pa.Table.from_arrays(cols, schema=out_schema).to_batches()

    return spark.range(0, len(groups), 1, len(groups)).mapInArrow(run, from_arrow_schema(out_schema))


def _driver_join(
    spark: SparkSession, plan: SearchPlan, queries: np.ndarray, ids: pa.Array, query_id: str, schema: T.StructType
) -> DataFrame:
    """Every query's top-k searched here (threads over partitions), as one DataFrame."""
    found = search_tasks(plan, plan.tasks, queries)
    sizes = np.array([t.num_rows for t in found], dtype=np.int64)
    if not sizes.sum():
        return spark.createDataFrame([], schema)
    rows = to_spark_table(pa.concat_tables(found)).combine_chunks()
    key = ids.take(pa.array(np.repeat(np.arange(len(found)), sizes)))
    result = pa.Table.from_arrays([key, *rows.columns], names=[query_id, *rows.column_names])
    return spark.createDataFrame(result, schema=schema)


def search_partitioned(
    spark: SparkSession,
    root: str,
    vector: Any,
    *,
    k: int = 10,
    column: str | None = None,
    filter: str | None = None,
    metric: str | None = None,
    nprobes: int | None = None,
    refine_factor: int | None = None,
    exact: bool = False,
    columns: Sequence[str] | None = None,
    prefilter: bool = True,
    manifest_version: int | None = None,
    storage_options: Mapping[str, str] | None = None,
    driver_max_partitions: int = DRIVER_MAX_PARTITIONS,
) -> DataFrame:
    """The ``k`` rows nearest ``vector``: the selected columns plus ``_distance``, nearest first.

    ``filter`` is Spark SQL in this session's dialect; it prunes partitions through
    ``__manifest`` and (with ``prefilter``) is applied before the top-k, so the result has
    exactly ``min(k, matching rows with a vector)`` rows. ``exact=True`` scans every row
    (brute force). ``column=None`` means the namespace's only vector column. Up to
    ``driver_max_partitions`` partitions are searched from the driver, more in one Spark job.
    """
    plan = _plan(
        spark,
        root,
        manifest_version,
        storage_options,
        k=k,
        column=column,
        filter=filter,
        metric=metric,
        nprobes=nprobes,
        refine_factor=refine_factor,
        exact=exact,
        columns=columns,
        prefilter=prefilter,
    )
    queries = query_matrix(vector, plan.column, plan.dimension)
    if len(plan.tasks) <= driver_max_partitions:
        result = to_spark_table(search_tasks(plan, plan.tasks, queries)[0])
    else:
        try:
            local = _run_groups(spark, plan, queries, None).toArrow()
        except PySparkException as exc:
            raise translate_spark_error(exc, "search") from exc
        result = merge_top_k([local.drop_columns([_QUERY, _GROUP, _RANK])], plan.k)
    schema = _spark_schema(plan.output_schema)
    if result.num_rows == 0:  # pyspark cannot take an Arrow table without chunks
        return spark.createDataFrame([], schema)
    return spark.createDataFrame(result.combine_chunks(), schema=schema)


def _query_vectors(queries: DataFrame, query_id: str, query_column: str) -> tuple[pa.Array, pa.Array]:
    names = queries.columns
    for role, name in (("query_id", query_id), ("query_column", query_column)):
        if name not in names:
            raise SchemaError(f"{role} {name!r} is not a column of the queries; columns are: {', '.join(names)}")
    vectors = F.col(query_column)
    if type(queries.schema[query_column].dataType).__name__ == "VectorUDT":
        from pyspark.ml.functions import vector_to_array

        vectors = vector_to_array(vectors, "float32")
    elif not isinstance(queries.schema[query_column].dataType, T.ArrayType):
        kind = queries.schema[query_column].dataType.simpleString()
        raise SchemaError(f"query_column {query_column!r} is {kind}, not an array of numbers or a Vector")
    table = queries.select(F.col(query_id).alias("id"), vectors.alias("q")).toArrow()
    return table.column("id").combine_chunks(), table.column("q").combine_chunks()


def knn_join(
    spark: SparkSession,
    queries: DataFrame,
    root: str,
    *,
    k: int,
    query_id: str,
    query_column: str,
    column: str | None = None,
    filter: str | None = None,
    metric: str | None = None,
    exact: bool = False,
    nprobes: int | None = None,
    refine_factor: int | None = None,
    columns: Sequence[str] | None = None,
    prefilter: bool = True,
    manifest_version: int | None = None,
    storage_options: Mapping[str, str] | None = None,
    driver_max_partitions: int = DRIVER_MAX_PARTITIONS,
) -> DataFrame:
    """For every query row its ``k`` nearest rows: ``query_id``, the target columns, ``_distance``.

    The queries (``query_id`` and the vector ``query_column``: an array of numbers or a
    ``pyspark.ml`` Vector) are collected once. Up to ``driver_max_partitions`` partitions
    are searched from the driver in a thread pool; with more, one Spark job searches every
    query in each partition, which each task opens once. A query whose vector is NULL
    matches nothing. Ordered as the queries, then by distance.
    """
    plan = _plan(
        spark,
        root,
        manifest_version,
        storage_options,
        k=k,
        column=column,
        filter=filter,
        metric=metric,
        nprobes=nprobes,
        refine_factor=refine_factor,
        exact=exact,
        columns=columns,
        prefilter=prefilter,
    )
    if query_id in plan.output:
        raise InvalidInput(
            f"query_id {query_id!r} is also a column of the namespace; rename it or leave it out with columns="
        )
    ids, vectors = _query_vectors(queries, query_id, query_column)
    valid = vectors.is_valid()
    ids, vectors = ids.filter(valid), vectors.filter(valid)
    lengths = pc.list_value_length(vectors).to_numpy(zero_copy_only=False)
    wrong = lengths != plan.dimension
    if wrong.any():
        raise InvalidInput(
            f"query_column {query_column!r} has {int(wrong.sum())} vector(s) of dimension {int(lengths[wrong][0])}, "
            f"but column {plan.column!r} has dimension {plan.dimension}"
        )
    flat = pc.list_flatten(vectors).to_numpy(zero_copy_only=False)
    matrix = query_matrix(flat.reshape(len(vectors), plan.dimension), plan.column, plan.dimension)
    target = _spark_schema(plan.output_schema)
    id_field = queries.schema[query_id]
    schema = T.StructType([T.StructField(query_id, id_field.dataType, id_field.nullable), *target.fields])
    if not plan.tasks or len(matrix) == 0:
        return spark.createDataFrame([], schema)
    if len(plan.tasks) <= driver_max_partitions:
        return _driver_join(spark, plan, matrix, ids, query_id, schema)
    found = _run_groups(spark, plan, matrix, ids)
    nearest = Window.partitionBy(_QUERY).orderBy(DISTANCE, _GROUP, _RANK)
    ranked = found.withColumn("__n", F.row_number().over(nearest)).where(F.col("__n") <= plan.k)
    picked = ranked.select(_QUERY, F.col(_ID).alias(query_id), *[F.col(f"`{c}`") for c in target.names], "__n")
    return picked.orderBy(_QUERY, "__n").drop(_QUERY, "__n")
