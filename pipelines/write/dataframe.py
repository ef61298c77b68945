"""``write_partitioned``: a DataFrame into a partitioned namespace, one atomic commit.

Executors add the partition columns (Spark Column transforms), cluster the rows by
them, and write Lance fragments with ``mapInArrow``; the driver then commits every
touched dataset and makes ONE ``__manifest`` commit (:mod:`partitioning.tables.write`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Literal

import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.pandas.types import from_arrow_schema, from_arrow_type

from partitioning.errors import (
    InvalidInput,
    NamespaceAlreadyExists,
    SchemaError,
    SpecError,
)
from partitioning.namespace import PartitionedNamespace
from partitioning.spec.partition_spec import PartitionSpec, parse_partition_by
from partitioning.spec.schema import NamespaceSchema, check_widening
from partitioning.storage.datasets import check_namespace_root, check_new_root
from partitioning.storage.guard import guarded
from partitioning.storage.manifest import ManifestStore
from partitioning.storage.unborn import discard_unborn
from partitioning.tables.write import (
    DEFAULT_MAX_ROWS_PER_FILE,
    PART_PREFIX,
    WRITE_MODES,
    CommitResult,
    FragmentWriter,
    already_committed,
    commit_write,
    part_column,
)
from pipelines.columns.schema import is_ml_vector, namespace_schema_from_spark, spark_schema, spark_to_arrow_schema
from pipelines.columns.transforms import select_partition_columns
from pipelines.session import describe_jobs, driver_root, is_connect
from pipelines.spark_errors import ERROR_MARKER, spark_errors
from pipelines.write.small import small_rows

__all__ = ["conform_dataframe", "merge_spark_schema", "write_fragments", "write_partitioned"]

Mode = Literal["append", "overwrite", "overwrite_partitions", "error", "ignore"]
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


def conform_dataframe(df: DataFrame, schema: NamespaceSchema) -> DataFrame:
    """Apply the write-side schema rules (seed 000 section 4, SPEC-NOTES 12) to ``df``.

    Columns not in the namespace are an error naming them; missing nullable columns
    become NULL and missing non-nullable ones are an error; types are cast to the
    namespace's, and an impossible or lossy cast fails the write naming the column.
    """
    target = spark_schema(schema)
    source = df.schema
    extra = [c for c in source.names if c not in target.names]
    if extra:
        raise SchemaError(
            f"column(s) {', '.join(repr(c) for c in extra)} are not in the namespace schema; "
            f"namespace columns are: {', '.join(target.names)}"
        )
    if _fits(source, target):
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
    return df.select(*columns)


def _fits(source: T.StructType, target: T.StructType) -> bool:
    """Whether ``source`` is already ``target``: the same columns in the same order and of the
    same types, none nullable where the target is not (whose NULL check Spark would drop)."""
    return len(source.fields) == len(target.fields) and all(
        s.name == t.name and s.dataType == t.dataType and (t.nullable or not s.nullable)
        for s, t in zip(source.fields, target.fields, strict=True)
    )


@contextmanager
def _spark_errors(root: str) -> Iterator[None]:
    with spark_errors(f"write to {root}"):
        yield


def _resolve_namespace(
    df: DataFrame,
    root: str,
    mode: str,
    spec: PartitionSpec | str | Mapping[str, Any] | None,
    partition_by: Sequence[str] | None,
    schema: pa.Schema | NamespaceSchema | None,
    storage_options: Mapping[str, str] | None,
) -> tuple[PartitionedNamespace | None, str, bool]:
    """Load or create the namespace: (it, the effective mode, whether this call created it);
    (None, reason, False) when the mode says to skip.

    A root that is not a namespace must be missing or empty, and a namespace root must
    not also be a plain Lance dataset: both are refused before anything is written.
    """
    if ManifestStore(root, storage_options).exists():
        check_namespace_root(root, storage_options)
        if mode == "error":
            raise NamespaceAlreadyExists(
                f"a namespace already exists at {root} (mode='error'); "
                "use mode='append', 'overwrite' or 'overwrite_partitions'"
            )
        if mode == "ignore":
            return None, f"a namespace already exists at {root} (mode='ignore')", False
        ns = PartitionedNamespace.load(root, storage_options)
        wanted = _requested_spec(spec, partition_by, ns.namespace_schema)
        if wanted is not None and [f.signature for f in wanted.fields] != [f.signature for f in ns.current_spec.fields]:
            raise SpecError(
                f"the namespace at {root} is partitioned as {ns.current_spec}, not {wanted}; "
                "omit partition_by/spec to write with the current spec"
            )
        return ns, mode, False
    check_new_root(root, storage_options)
    if spec is None and not partition_by:
        raise SpecError(f"no namespace at {root}; pass partition_by=[...] (or spec=) to create it")
    ns_schema = schema if schema is not None else namespace_schema_from_spark(df.schema)
    if isinstance(ns_schema, pa.Schema):
        ns_schema = NamespaceSchema.from_arrow(ns_schema)
    first = _requested_spec(spec, partition_by, ns_schema)
    assert first is not None
    ns = PartitionedNamespace.create(root, ns_schema, first, storage_options)
    return ns, "append" if mode in ("error", "ignore") else mode, True


def _requested_spec(
    spec: PartitionSpec | str | Mapping[str, Any] | None,
    partition_by: Sequence[str] | None,
    schema: NamespaceSchema,
) -> PartitionSpec | None:
    if spec is not None and partition_by:
        raise SpecError("pass either spec= or partition_by=, not both")
    if spec is not None:
        return PartitionSpec.coerce(spec)
    if partition_by:
        return parse_partition_by(list(partition_by), schema)
    return None


def write_partitioned(
    df: DataFrame,
    root: str,
    *,
    mode: Mode = "append",
    partition_by: Sequence[str] | None = None,
    spec: PartitionSpec | str | Mapping[str, Any] | None = None,
    schema: pa.Schema | NamespaceSchema | None = None,
    max_rows_per_file: int = DEFAULT_MAX_ROWS_PER_FILE,
    max_bytes_per_file: int | None = None,
    cluster: bool = True,
    max_open_writers: int = 32,
    write_id: str | None = None,
    replace_where: str | None = None,
    merge_schema: bool = False,
    storage_options: Mapping[str, str] | None = None,
) -> CommitResult:
    """Write ``df`` into the partitioned namespace at ``root``.

    Modes (Spark's words): ``append``; ``overwrite`` replaces all data, atomically
    (partitions not written are removed); ``overwrite_partitions`` replaces only the
    partitions present in ``df`` (dynamic overwrite); ``error``/``ignore`` fail or do
    nothing when the namespace exists, and create it otherwise.

    A missing namespace is created from ``partition_by`` (e.g. ``["day(ts)",
    "bucket[16](user_id)"]``) or ``spec``, with ``schema`` defaulting to ``df``'s.
    ``schema`` (a ``pa.Schema`` or :class:`NamespaceSchema`) is how to get a vector
    column: ``pa.field("v", pa.list_(pa.float32(), d))`` takes ``array<float>``,
    ``array<double>`` and ``VectorUDT`` columns, refusing the whole write (nothing
    committed) when any non-NULL vector does not have ``d`` elements. Without it an
    ``array<float>`` column becomes a variable-length list (Spark has no dimension).
    ``cluster`` repartitions by partition first, so each partition gets one fragment per
    task (a task buffers at most ``max_rows_per_file`` rows, flushing its largest
    partition beyond that), unless the first rows of the input tasks (100,000 in all)
    hold at most ``max_open_writers`` partition values (not sampled when the spec cannot
    produce more, e.g. ``bucket[16]``, and Spark estimates the input at 64 MiB or more): then, as without ``cluster``,
    no shuffle runs and every input task writes its own fragments, keeping at most
    ``max_open_writers`` partition buffers. A retried job with the same ``write_id``
    never adds its data twice. The driver holds a write lease under ``root`` (refreshed
    by a background thread) from before the tasks run until the commit returns, so a
    concurrent vacuum keeps the fragments (:mod:`partitioning.storage.leases`). A relative ``root``
    is made absolute here, and refused on a cluster whose executors do not share this
    machine's files (:func:`pipelines.session.driver_root`).

    ``replace_where`` (with ``mode="overwrite"``, Delta's option): atomically replaces
    the rows matching the predicate (Spark SQL over the namespace's columns) with
    ``df``; a row of ``df`` that does not match refuses the write, with how many, and
    nothing changes. ``merge_schema``: ``df``'s columns missing from the namespace are
    added (new field ids) and narrower namespace types are widened to ``df``'s
    (int -> bigint, float -> double, decimal precision), as schema-evolution commits
    made just before the data's commit; without it such a ``df`` is refused.
    """
    if mode not in WRITE_MODES:
        raise SpecError(f"unknown mode {mode!r}; allowed: {', '.join(WRITE_MODES)}")
    if max_rows_per_file < 1 or max_open_writers < 1:
        raise SpecError("max_rows_per_file and max_open_writers must be at least 1")
    if replace_where is not None and mode != "overwrite":
        raise InvalidInput(f"replace_where needs mode='overwrite', not {mode!r}")
    sizes = {
        "max_rows_per_file": max_rows_per_file,
        "max_bytes_per_file": max_bytes_per_file,
        "cluster": cluster,
        "max_open_writers": max_open_writers,
    }
    root = driver_root(df.sparkSession, root)
    ns, effective, created = _resolve_namespace(df, root, mode, spec, partition_by, schema, storage_options)
    if ns is None:
        return CommitResult(root, mode, None, skipped=effective, write_id=write_id)
    if not created:
        return _write_into(df, ns, mode, effective, write_id, replace_where, merge_schema, sizes)
    try:
        return _write_into(df, ns, mode, effective, write_id, replace_where, merge_schema, sizes)
    except BaseException:
        # the namespace comes into existence with its first successful write
        discard_unborn(ns.root, ns.manifest_version, ns.storage_options)
        raise


def _write_into(
    df: DataFrame,
    ns: PartitionedNamespace,
    mode: str,
    effective: str,
    write_id: str | None,
    replace_where: str | None,
    merge_schema: bool,
    sizes: dict[str, Any],
) -> CommitResult:
    skipped = already_committed(ns, mode, write_id)
    if skipped is not None:
        return skipped
    if merge_schema:
        ns = merge_spark_schema(df.schema, ns)
    if replace_where is not None:
        from pipelines.write.rewrite import replace_where as replace_rows

        return replace_rows(df, ns, replace_where, write_id=write_id, **sizes)
    label = ns.root.rstrip("/").rsplit("/", 1)[-1]
    with guarded(ns.root, ns.storage_options, write_id=write_id, bases=(ns.manifest_version,)) as guard:
        messages, writer = write_fragments(df, ns, plan_layout=True, **sizes)
        with describe_jobs(df.sparkSession, f"lance_partitioned: commit ({label})"):
            return commit_write(
                ns,
                messages,
                mode=effective,  # type: ignore[arg-type]
                spec_id=writer.planner.spec_id,
                schema=writer.schema,
                write_id=write_id,
                max_rows_per_file=sizes["max_rows_per_file"],
                naming_seed=writer.planner.seed,
                guard=guard,
            )


def merge_spark_schema(struct: T.StructType, ns: PartitionedNamespace) -> PartitionedNamespace:
    """Add ``struct``'s new columns to ``ns`` and widen the columns it holds wider types of."""
    arrow = spark_to_arrow_schema(struct)
    current = ns.namespace_schema.arrow
    new = [f.with_nullable(True) for f in arrow if f.name not in current.names]
    if new:
        ns.add_columns(new)
    for f in arrow:
        if f.name not in current.names:
            continue
        old = current.field(f.name).type
        if old == f.type:
            continue
        try:
            check_widening(f.name, old, f.type)
        except SchemaError:
            continue
        ns.widen_column(f.name, f.type)
    return ns.refresh()


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
) -> tuple[pa.Table, FragmentWriter]:
    """Executors write ``df``'s rows as uncommitted fragments of ``ns``'s current spec; the
    commit messages (collected on the driver) and the writer. The caller holds a write lease.

    ``local``: the driver collects the rows and writes them itself, one fragment per
    partition (:mod:`pipelines.write.small`); None decides by Spark's size estimate of ``df``.

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
    rows = None
    if local is not False:
        with _spark_errors(ns.root), describe_jobs(df.sparkSession, f"lance_partitioned: collect rows ({label})"):
            rows = conformed.toArrow() if local else small_rows(conformed)
    if rows is None and cluster and names and plan_layout:
        with _spark_errors(ns.root), describe_jobs(df.sparkSession, f"lance_partitioned: plan the write ({label})"):
            cluster = not _few_partitions(conformed, keyed(()), max_open_writers, current.max_values(nschema))
    if rows is not None:
        # the driver writes the collected rows: one buffer per partition, as a clustered task
        data, open_writers, budget, derive = conformed, _MANY_WRITERS, max_rows_per_file, True
    elif cluster and names:
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
    if rows is not None:
        return pa.Table.from_batches(list(writer(rows.to_batches())), schema=writer.output_schema), writer

    def write_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return writer(batches)

    with _spark_errors(ns.root), describe_jobs(df.sparkSession, f"lance_partitioned: write fragments ({label})"):
        messages = data.mapInArrow(write_batches, from_arrow_schema(writer.output_schema)).toArrow()
    return messages, writer


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
