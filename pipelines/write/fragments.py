"""Writing a DataFrame's rows as Lance fragments on Spark's executors, and conforming its columns.

The part of a write that every door shares (:func:`pipelines.write.dataframe.write_partitioned`,
the data source's writer, updates and merges): columns conformed to the namespace schema,
partition columns added, rows clustered and written by ``mapInArrow`` tasks whose messages
the caller commits."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from partitioning.errors import (
    SchemaError,
)
from partitioning.namespace import PartitionedNamespace
from partitioning.spec.schema import NamespaceSchema
from partitioning.tables.fragments import DEFAULT_MAX_ROWS_PER_FILE, FragmentWriter
from partitioning.tables.messages import PART_PREFIX, part_column
from pipelines.columns.schema import from_arrow_schema, from_arrow_type, is_ml_vector, spark_schema
from pipelines.columns.transforms import select_partition_columns
from pipelines.session import is_connect
from pipelines.session_calls import describe_jobs
from pipelines.spark_errors import ERROR_MARKER, spark_errors
from pipelines.write.small import small_rows

__all__ = ["conform_dataframe", "write_fragments", "write_rows"]


_NUMERIC = (T.ByteType, T.ShortType, T.IntegerType, T.LongType, T.FloatType, T.DoubleType, T.DecimalType)


def _checked_cast(col: Column, name: str, source: T.DataType, target: T.DataType) -> Column:
    """Cast ``col``; a value that cannot be cast, or only lossily, fails the task naming the column.

    A Spark ML vector goes into an array column (a vector column reads as one) through
    ``vector_to_array``; vector lengths are checked when the fragments are written."""
    if source == target:
        return col
    if is_ml_vector(source) and isinstance(target, T.ArrayType):
        from pyspark.ml.functions import vector_to_array

        dtype = "float32" if isinstance(target.elementType, T.FloatType) else "float64"
        return F.when(col.isNull(), F.lit(None).cast(target)).otherwise(vector_to_array(col, dtype=dtype).cast(target))
    if not isinstance(target, T.AtomicType) or isinstance(source, T.NullType):
        return col.cast(target)
    casted = col.try_cast(target)
    bad = col.isNotNull() & casted.isNull()
    if isinstance(source, _NUMERIC) and isinstance(target, _NUMERIC):
        bad = bad | (col.isNotNull() & (casted.cast(source) != col))
    message = F.concat(
        F.lit(f"{ERROR_MARKER} column {name!r}: value '"),
        col.cast("string"),
        F.lit(f"' of type {source.simpleString()} cannot be stored as {target.simpleString()} without loss"),
    )
    return F.when(bad, F.raise_error(message)).otherwise(casted)


def conform_dataframe(df: DataFrame, schema: NamespaceSchema, *, keep: Sequence[str] = ()) -> DataFrame:
    """Apply the write-side schema rules (seed 000 section 4, SPEC-NOTES 12) to ``df``.

    Columns not in the namespace are an error naming them; missing nullable columns
    become NULL and missing non-nullable ones are an error; types are cast to the
    namespace's, and an impossible or lossy cast fails the write naming the column.
    ``keep``: other columns of ``df`` passed through, after the namespace's.
    """
    target = spark_schema(schema)
    source = df.schema
    extra = [c for c in source.names if c not in target.names and c not in keep]
    if extra:
        raise SchemaError(
            f"column(s) {', '.join(repr(c) for c in extra)} are not in the namespace schema; "
            f"namespace columns are: {', '.join(target.names)}"
        )
    if not keep and _fits(source, target):
        return df
    source_types = {f.name: f.dataType for f in source.fields}
    columns = []
    for f in target.fields:
        if f.name not in source_types:
            if not f.nullable:
                raise SchemaError(f"column {f.name!r} is required (not nullable) but missing from the DataFrame")
            columns.append(F.lit(None).cast(f.dataType).alias(f.name))
            continue
        col = _checked_cast(F.col(f"`{f.name}`"), f.name, source_types[f.name], f.dataType)
        if not f.nullable:
            col = F.when(
                F.col(f"`{f.name}`").isNull(),
                F.raise_error(F.lit(f"{ERROR_MARKER} column {f.name!r} is not nullable but the input has NULL")),
            ).otherwise(col)
        columns.append(col.alias(f.name))
    return df.select(*columns, *[F.col(f"`{c}`") for c in keep])


def _fits(source: T.StructType, target: T.StructType) -> bool:
    """Whether ``source`` is already ``target``: the same columns in the same order and of the
    same types, none nullable where the target is not (whose NULL check Spark would drop)."""
    return len(source.fields) == len(target.fields) and all(
        s.name == t.name and s.dataType == t.dataType and (t.nullable or not s.nullable)
        for s, t in zip(source.fields, target.fields, strict=True)
    )


def write_fragments(
    df: DataFrame,
    ns: PartitionedNamespace,
    *,
    max_rows_per_file: int = DEFAULT_MAX_ROWS_PER_FILE,
    max_bytes_per_file: int | None = None,
    cluster: bool = True,
    max_open_writers: int = 32,
    plan_layout: bool = False,
    local: bool | None = None,
    rows: pa.Table | None = None,
) -> tuple[pa.Table, FragmentWriter]:
    """Executors write ``df``'s rows as uncommitted fragments of ``ns``'s current spec; the
    commit messages (collected on the driver) and the writer. The caller holds a write lease.

    ``local``: the driver collects the rows and writes them itself, one fragment per
    partition (:mod:`pipelines.write.small`); None decides by Spark's size estimate of ``df``.
    ``rows``: ``df``'s rows, conformed to the namespace and collected already: the driver
    writes them.

    ``cluster`` shuffles the rows by partition (one task per partition value, one
    fragment per partition per task). With ``plan_layout`` it does so only when
    :func:`_few_partitions` does not find the data to hold few partition values in
    many rows; then every input task writes its own fragments, up to
    ``max_open_writers`` partitions at a time, and no shuffle runs.
    """
    current = ns.current_spec
    nschema = ns.namespace_schema
    conformed = conform_dataframe(df, nschema)
    part_fields = [(f.field_id, f.arrow_result_type(nschema)) for f in current.fields]
    names = [part_column(fid) for fid, _ in part_fields]

    def keyed(data_columns: Sequence[str]) -> DataFrame:
        """``data_columns`` of ``conformed`` and the partition columns, computed in the JVM."""
        types = [from_arrow_type(t) for _, t in part_fields]
        return select_partition_columns(
            conformed, current.fields, nschema, data_columns, prefix=PART_PREFIX, types=types
        )

    label = ns.root.rstrip("/").rsplit("/", 1)[-1]
    if rows is None and local is not False:
        with _spark_errors(ns.root), describe_jobs(df.sparkSession, f"lance_partitioned: collect rows ({label})"):
            rows = conformed.toArrow() if local else small_rows(conformed)
    if rows is not None:
        return write_rows(rows, ns, max_rows_per_file=max_rows_per_file, max_bytes_per_file=max_bytes_per_file)
    if cluster and names and plan_layout:
        with _spark_errors(ns.root), describe_jobs(df.sparkSession, f"lance_partitioned: plan the write ({label})"):
            cluster = not _few_partitions(conformed, keyed(()), max_open_writers, current.max_values(nschema))
    if cluster and names:
        # Each task holds the partitions hashed to it, unsorted: the writer buffers them all
        # (one fragment per partition per task) up to ``max_rows_per_file`` rows in total,
        # then flushes its largest buffer.
        data = keyed(nschema.arrow.names).repartition(*names)
        open_writers, budget, derive = _MANY_WRITERS, max_rows_per_file, False
    else:
        # No shuffle needs the partition values in the JVM: the writer computes them with the
        # Arrow transforms (the same values, tested row for row), which costs less than
        # projecting and shipping them.
        data = conformed
        open_writers, budget, derive = max_open_writers, (max_rows_per_file if plan_layout else None), True
    writer = FragmentWriter.for_namespace(
        ns,
        max_rows_per_file=max_rows_per_file,
        max_bytes_per_file=max_bytes_per_file,
        max_open_writers=open_writers,
        max_buffered_rows=budget,
        derive_keys=derive,
    )

    def write_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return writer(batches)

    with _spark_errors(ns.root), describe_jobs(df.sparkSession, f"lance_partitioned: write fragments ({label})"):
        messages = data.mapInArrow(write_batches, from_arrow_schema(writer.output_schema)).toArrow()
    return messages, writer


def write_rows(
    rows: pa.Table,
    ns: PartitionedNamespace,
    *,
    max_rows_per_file: int = DEFAULT_MAX_ROWS_PER_FILE,
    max_bytes_per_file: int | None = None,
) -> tuple[pa.Table, FragmentWriter]:
    """:func:`write_fragments` of rows the driver holds, conformed to ``ns``'s schema already:
    written here, one buffer per partition (as a clustered task), with no DataFrame made."""
    writer = FragmentWriter.for_namespace(
        ns,
        max_rows_per_file=max_rows_per_file,
        max_bytes_per_file=max_bytes_per_file,
        max_open_writers=_MANY_WRITERS,
        max_buffered_rows=max_rows_per_file,
        derive_keys=True,
    )
    return pa.Table.from_batches(list(writer(rows.to_batches())), schema=writer.output_schema), writer


# The first rows the layout decision looks at, and at most how many partition values they
# may hold for the input tasks to write their own fragments instead of shuffling.
SAMPLE_ROWS = 100_000

# An input Spark estimates at least this large, written with a spec that cannot produce more
# than ``max_open_writers`` values, is written by its input tasks without a sample.
LARGE_INPUT_BYTES = 64 << 20

_UNKNOWN_SIZE = (1 << 63) - 1  # Spark's estimate for what it cannot size (a Python list, an RDD)

_MANY_WRITERS = 1 << 20


def _few_partitions(data: DataFrame, keys: DataFrame, max_open_writers: int, bound: int | None) -> bool:
    """Whether the first :data:`SAMPLE_ROWS` rows of ``keys`` (``data``'s partition values;
    Spark's ``take``) hold at most ``max_open_writers`` partition values, with the data at
    least that large.

    Small data is clustered (one fragment per partition). Not sampled when ``data``'s
    plan has a shuffle (the sample would run it once more) or cannot be inspected, nor
    when the spec cannot produce more than ``max_open_writers`` values (``bound``) and
    Spark's estimate of ``data`` is at least :data:`LARGE_INPUT_BYTES` (then it is few)."""
    if is_connect(data.sparkSession):
        return False
    execution = data._jdf.queryExecution()  # classic-only (guarded by is_connect)
    if "Exchange" in str(execution.executedPlan().toString()):
        return False
    if bound is not None and bound <= max_open_writers:
        estimate = int(str(execution.optimizedPlan().stats().sizeInBytes()))
        if LARGE_INPUT_BYTES <= estimate < _UNKNOWN_SIZE:
            return True
    # Spark's take reads the first input task's rows (more tasks only when it holds too few)
    # with no shuffle, and the distinct keys are counted where the rows are, in the JVM:
    # 94 ms against 146 ms for a limit collected as Arrow (1M cached rows, one value).
    rows = keys._jdf.take(SAMPLE_ROWS)  # classic-only (guarded by is_connect)
    if len(rows) < SAMPLE_ROWS:
        return False
    jvm = keys.sparkSession._jvm  # classic-only (guarded by is_connect)
    distinct = jvm.scala.collection.immutable.ArraySeq.unsafeWrapArray(rows).distinct()
    return int(distinct.size()) <= max_open_writers


@contextmanager
def _spark_errors(root: str) -> Iterator[None]:
    with spark_errors(f"write to {root}"):
        yield
