"""Small changes in the driver: merges, updates, deletes and writes of little data start no Python worker.

Through Spark's tasks a change of a few rows costs a Python worker to plan the target's
scan, another to read it and one more to write the new fragments: seconds the first
time in a session (a 2-row merge into 3 rows took 11 s after a first write and read)
and over a second each time after. When the data is small the driver does that work
itself, with the same code the tasks run:

- **target rows** (:func:`small_target`): the partition tables an operation reads are read
  here (:func:`pipelines.source.slices.read_slice`, with row addresses) when their fragment
  metadata records at most :data:`SMALL_MAX_ROWS` rows and :data:`SMALL_MAX_BYTES` bytes
  in at most :data:`SMALL_MAX_TABLES` tables, and handed to Spark as a local relation;
  Spark still evaluates every filter, join and expression, so the answers are Spark's;
- **new rows** (:func:`small_rows`): a DataFrame of rows the driver holds or makes
  (``createDataFrame`` of Python rows or Arrow, ``range``, and what Spark derives from
  them without files), at most :data:`SMALL_MAX_ROWS` rows, is collected as Arrow and
  written here by the same :class:`partitioning.tables.write.FragmentWriter` the tasks use,
  and so are the rows of a cached DataFrame whose measured size is at most
  :data:`MEASURED_WRITE_BYTES` (a Spark job's Python workers cost more than collecting them);
- **a small source** of a merge (:func:`small_copy`) is held by Spark in memory, so the
  merge's few jobs do not each unpickle Python rows.

Spark Connect gives a client no plan statistics, so there the tasks do the work.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from partitioning.errors import InvalidInput
from partitioning.namespace import PartitionedNamespace
from partitioning.plan.table_rows import TableSlice
from partitioning.sql.binding import bind
from partitioning.sql.filters import Filter, TrueFilter, columns_of, is_exactly_understood
from partitioning.sql.from_sql import parse_filter
from partitioning.sql.rowfilter import arrow_predicate, lance_filter
from partitioning.sql.tokens import Dialect
from pipelines.read.local import local_table, matching_table
from pipelines.read_options import read_schema, session_dialect
from pipelines.session import is_connect
from pipelines.session_calls import active_session_kept
from pipelines.spark_errors import where_sql
from pipelines.write.file_rows import file_rows

__all__ = [
    "MEASURED_WRITE_BYTES",
    "SMALL_MAX_BYTES",
    "SMALL_MAX_ROWS",
    "SMALL_MAX_TABLES",
    "SMALL_WRITE_BYTES",
    "exact_rows",
    "small_copy",
    "small_rows",
    "small_target",
]

SMALL_MAX_ROWS = 262_144
SMALL_MAX_BYTES = 64 << 20
SMALL_MAX_TABLES = 64
MATCHING_MAX_TABLES = 4096
SMALL_WRITE_BYTES = 32 << 20
MEASURED_WRITE_BYTES = 96 << 20
log = logging.getLogger("lance_partitioned")
# plan nodes that can make more rows than their input holds
_GROWS = re.compile(r"(?m)^[\s:|+-]*(Generate|Join|Expand|Union)\b")


_UNKNOWN_SIZE = (1 << 63) - 1  # Spark's estimate for what it cannot size (a Python list, an RDD)
# The RDDs between a Python list handed to ``createDataFrame`` and its plan: no file, no shuffle.
_FROM_DRIVER_RDDS = frozenset({"ParallelCollectionRDD", "PythonRDD", "MapPartitionsRDD"})
_RDD_NAME = re.compile(r"(\w+RDD)\[\d+\]")


def _from_driver(df: DataFrame) -> str | None:
    """``"local"`` when every leaf of ``df``'s plan is a local relation (rows the driver
    holds), ``"made"`` when every leaf is one or a range or an RDD of Python lists given to
    ``createDataFrame`` (rows the driver makes), with Spark sizing them at most
    :data:`SMALL_WRITE_BYTES` where it can size them at all; else None. Never on Connect,
    which shows a client no plan. Rows read from files are not: their size on disk says
    little about their size in memory."""
    if is_connect(df.sparkSession):
        return None
    plan = df._jdf.queryExecution().optimizedPlan()  # classic-only (guarded by is_connect)
    size = int(str(plan.stats().sizeInBytes()))
    if size > SMALL_WRITE_BYTES and size != _UNKNOWN_SIZE:
        return None
    kinds = set()
    leaves = plan.collectLeaves()
    for i in range(leaves.size()):
        leaf = leaves.apply(i)
        kind = leaf.getClass().getSimpleName()
        kinds.add(kind)
        if kind in ("LocalRelation", "Range"):
            continue
        if kind != "LogicalRDD":
            return None
        names = set(_RDD_NAME.findall(str(leaf.rdd().toDebugString())))
        if "ParallelCollectionRDD" not in names or not names <= _FROM_DRIVER_RDDS:
            return None
    return "local" if kinds <= {"LocalRelation"} else "made"


def small_rows(df: DataFrame) -> pa.Table | None:
    """``df``'s rows as Arrow when they come from the driver (:func:`_from_driver`) and are at
    most :data:`SMALL_MAX_ROWS` rows and :data:`SMALL_MAX_BYTES` bytes (collected with a
    bound), when Spark knows their size to be at most :data:`MEASURED_WRITE_BYTES`
    (:func:`_measured`), or when they are plainly parquet files pyarrow reads within that
    size (:func:`pipelines.write.file_rows.file_rows`); else None."""
    if _measured(df):
        return df.toArrow()
    files = file_rows(df, max_bytes=MEASURED_WRITE_BYTES)
    if files is not None:
        return files
    if _from_driver(df) is None:
        return None
    table = df.limit(SMALL_MAX_ROWS + 1).toArrow()
    return table if table.num_rows <= SMALL_MAX_ROWS and table.nbytes <= SMALL_MAX_BYTES else None


def _measured(df: DataFrame) -> bool:
    """Whether Spark has measured ``df``'s rows at most :data:`MEASURED_WRITE_BYTES`: every
    leaf of its plan is a cached DataFrame already materialized (its size is counted, not
    estimated) and nothing in the plan can multiply rows (a generator, a join). Collected
    and written by the driver, such rows cost less than the Python workers of a Spark job
    (1M rows of four int columns, cached: 0.35 s against 0.72 s)."""
    if is_connect(df.sparkSession):
        return False
    plan = df._jdf.queryExecution().optimizedPlan()  # classic-only (guarded by is_connect)
    if int(str(plan.stats().sizeInBytes())) > MEASURED_WRITE_BYTES:
        return False
    if _GROWS.search(str(plan.treeString())):
        return False
    leaves = plan.collectLeaves()
    for i in range(leaves.size()):
        leaf = leaves.apply(i)
        if leaf.getClass().getSimpleName() != "InMemoryRelation":
            return False
        if not leaf.cacheBuilder().isCachedColumnBuffersLoaded():
            return False
    return True


def small_copy(df: DataFrame) -> DataFrame | None:
    """``df`` when it is a local relation; a copy of its rows that Spark holds in memory
    (``localCheckpoint``: later jobs do not make or unpickle them again) when the driver
    makes them and they are at most :data:`SMALL_MAX_ROWS`; else None."""
    origin = _from_driver(df)
    if origin == "local":
        return df  # held in the driver already, and within SMALL_WRITE_BYTES
    if origin is None:
        return None
    copy = df.limit(SMALL_MAX_ROWS + 1).localCheckpoint()
    return copy if copy.count() <= SMALL_MAX_ROWS else None


def pushed_filter(
    session: SparkSession | None, ns: PartitionedNamespace, filter: str | None, *, dialect: Dialect | None = None
) -> tuple[Filter, Filter | None] | None:
    """``filter`` bound to the namespace (pushed into each Lance scan: a superset of its rows)
    and, when this process evaluates it exactly as Spark does, the same filter to apply in
    Arrow; None when neither Lance nor Arrow can narrow the rows (or it does not bind here).
    ``dialect``: how the SQL reads (default: ``session``'s, :func:`pipelines.read_options.session_dialect`)."""
    if not filter:
        return None
    if dialect is None:
        assert session is not None, "pushed_filter needs a session or a dialect"
        dialect = session_dialect(session)
    schema = ns.namespace_schema.arrow
    try:
        bound = bind(parse_filter(filter, dialect), schema, dialect)
        exact = bound if is_exactly_understood(bound) and arrow_predicate(bound, schema) is not None else None
    except InvalidInput:
        return None
    if exact is None and lance_filter(bound, schema) is None:
        return None
    return bound, exact


def _pieces(session: SparkSession | None, ns: PartitionedNamespace, read: Mapping[str, int]) -> list[TableSlice] | None:
    """The tables in ``read`` to read in this process; None on Spark Connect (no driver here) or
    when one is not in ``ns``. Without a session (the JVM layer's Python side) they are read here."""
    if session is not None and is_connect(session):
        return None
    tables = ns.tables_by_id(read)
    if len(tables) != len(read):
        return None
    return [TableSlice(t.object_id, t.uri, t.read_version, t.read_branch, t.read_tag) for t in tables.values()]


def exact_rows(
    session: SparkSession | None,
    ns: PartitionedNamespace,
    read: Mapping[str, int],
    filter: str | None,
    *,
    columns: Sequence[str] | None = None,
    dialect: Dialect | None = None,
) -> pa.Table | None:
    """Exactly the rows of the tables in ``read`` that ``filter`` (Spark SQL; None: every row)
    selects, ``columns`` of them (default: all; none: the narrowest read) with ``_lance_table`` and ``_lance_rowaddr``,
    read here, when this process evaluates ``filter`` as Spark does (:func:`pushed_filter`)
    and they are within the bounds of :func:`small_target`; else None."""
    pieces = _pieces(session, ns, read)
    if pieces is None:
        return None
    output = list(ns.schema.names) if columns is None else list(columns)
    if filter is None:
        bounds = (SMALL_MAX_TABLES, SMALL_MAX_ROWS, SMALL_MAX_BYTES)
        return local_table(ns, pieces, output, TrueFilter(), row_address=True, bounds=bounds)
    pushed = pushed_filter(session, ns, filter, dialect=dialect)
    if pushed is None or pushed[1] is None:
        return None
    if not output:  # one column besides the addresses (a table of none loses its row count)
        output = sorted(columns_of(pushed[1]))[:1] or list(ns.schema.names[:1])
    bounds = (MATCHING_MAX_TABLES, SMALL_MAX_ROWS, SMALL_MAX_BYTES)
    return matching_table(ns, pieces, output, pushed[0], exact=pushed[1], bounds=bounds)


def small_target(
    session: SparkSession,
    ns: PartitionedNamespace,
    read: Mapping[str, int],
    *,
    filter: str | None = None,
    columns: Sequence[str] | None = None,
) -> DataFrame | None:
    """The rows of the tables in ``read`` (object id -> version) at ``ns``'s manifest version,
    with ``_lance_table`` and ``_lance_rowaddr``, read here as a local relation; ``filter``
    (Spark SQL) is applied by Spark. When Lance or Arrow can narrow the rows by ``filter``
    (:func:`pushed_filter`), only the rows it may select are read, and they are what must
    be small; otherwise the tables. None beyond the bounds (or when a table cannot be
    read here: Spark's tasks then read it, and report what is wrong, as for any read)."""
    pieces = _pieces(session, ns, read)
    if pieces is None:
        return None
    output = list(columns) if columns is not None else list(ns.schema.names)
    pushed = pushed_filter(session, ns, filter)
    if pushed is not None:
        bounds = (MATCHING_MAX_TABLES, SMALL_MAX_ROWS, SMALL_MAX_BYTES)
        table = matching_table(ns, pieces, output, pushed[0], exact=pushed[1], bounds=bounds)
        if table is not None:
            log.debug(
                "%s: %d row(s) %r may select, of %d table(s), read in the driver",
                ns.root,
                table.num_rows,
                filter,
                len(pieces),
            )
    else:
        bounds = (SMALL_MAX_TABLES, SMALL_MAX_ROWS, SMALL_MAX_BYTES)
        table = local_table(ns, pieces, output, TrueFilter(), row_address=True, bounds=bounds)
    if table is None:
        return None
    schema = read_schema(ns.namespace_schema, output, row_address=True)
    with active_session_kept(session):
        df = session.createDataFrame(table, schema=schema)
    return where_sql(df, filter)
