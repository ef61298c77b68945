"""Small reads without Python workers: the rows of a small plan, read here, as a local relation.

A read that plans a few small partition tables (a point lookup: one day of one country)
costs little in Lance, but through the ``lance_partitioned`` source Spark plans it in a
Python worker and reads it in another, which is most of its time (1 of 1,500 partitions:
about 0.4 s against 0.2 s for the same rows handed to Spark as Arrow). When the planned
tables hold at most :data:`LOCAL_MAX_ROWS` rows and :data:`LOCAL_MAX_BYTES` bytes of data
files (fragment metadata, before any filter), :func:`pipelines.read.dataframe.read_partitioned`
reads them here with the source's own reader (:func:`pipelines.source.slices.read_slice`: the
same versions, schema reconciliation and pruning) and gives Spark the batches.

The rows are the ones the source would give at action time: the plan pins each table's
version, so reading now rather than later changes nothing but when a read error shows.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import lance
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from partitioning.errors import PartitioningError, first_line
from partitioning.namespace import PartitionedNamespace
from partitioning.plan.table_rows import ROW_ADDRESS, ROW_TABLE, TableSlice
from partitioning.spec.vectors import spark_facing_schema
from partitioning.sql.filters import Filter
from partitioning.state.partition_tables import open_partition_table
from partitioning.state.scan import ScanTask
from pipelines.session_calls import active_session_kept
from pipelines.source.slices import read_slice

__all__ = [
    "LOCAL_MAX_BYTES",
    "LOCAL_MAX_ROWS",
    "LOCAL_MAX_TABLES",
    "local_dataframe",
    "local_table",
    "matching_table",
    "within",
]

log = logging.getLogger("lance_partitioned")

LOCAL_MAX_ROWS = 65_536
LOCAL_MAX_BYTES = 16 << 20
LOCAL_MAX_TABLES = 16
OPENERS = 8  # tables opened at once


def local_dataframe(
    spark: SparkSession,
    ns: PartitionedNamespace,
    tasks: Sequence[ScanTask],
    schema: StructType,
    scan_filter: Filter,
) -> DataFrame | None:
    """The rows of ``tasks`` (``schema``'s columns, pruned by ``scan_filter``) as a local
    DataFrame; None when they are more than the ``LOCAL_MAX_*`` bounds allow, or when a
    table cannot be read here (the source then reads it, and reports what is wrong, as
    for any read)."""
    table = local_table(ns, [TableSlice.of(t) for t in tasks], list(schema.names), scan_filter)
    if table is None:
        return None
    with active_session_kept(spark):
        return spark.createDataFrame(table, schema=schema)


def local_table(
    ns: PartitionedNamespace,
    pieces: Sequence[TableSlice],
    output: Sequence[str],
    scan_filter: Filter,
    *,
    exact: Filter | None = None,
    row_address: bool = False,
    bounds: tuple[int, int, int] = (LOCAL_MAX_TABLES, LOCAL_MAX_ROWS, LOCAL_MAX_BYTES),
) -> pa.Table | None:
    """The rows of ``pieces`` (``output``'s columns, typed as Spark reads them, with
    ``_lance_table`` and ``_lance_rowaddr`` when ``row_address``), pruned by ``scan_filter``
    and filtered by ``exact`` (bound, fully understood) when given, read here; None beyond
    ``bounds`` (tables, rows, bytes of data files) or when a table cannot be read here."""
    max_tables, max_rows, max_bytes = bounds
    if len(pieces) > max_tables or any(p.read_version is None for p in pieces):
        return None
    try:
        datasets = opened_tables(ns, pieces)
        if not within(datasets, max_rows, max_bytes):
            return None
        batches = [
            batch
            for piece, dataset in zip(pieces, datasets, strict=True)
            for batch in read_slice(
                piece, ns.namespace_schema, output, scan_filter, exact=exact, row_address=row_address, dataset=dataset
            )
        ]
    except PartitioningError as exc:
        log.debug(
            "reading %d tables of %s in the driver failed (%s); Spark's tasks read them",
            len(pieces),
            ns.root,
            first_line(exc),
        )
        return None
    return _as_table(ns, output, batches, row_address)


def matching_table(
    ns: PartitionedNamespace,
    pieces: Sequence[TableSlice],
    output: Sequence[str],
    scan_filter: Filter,
    *,
    exact: Filter | None,
    bounds: tuple[int, int, int],
) -> pa.Table | None:
    """The rows of ``pieces`` a filter may select, with ``_lance_table`` and
    ``_lance_rowaddr``, read here: ``scan_filter`` goes into each Lance scan (a superset of
    the matching rows, Lance skipping what it can), ``exact`` (bound, fully understood)
    narrows them in Arrow. Unlike :func:`local_table` the bounds (tables, rows, bytes) are
    on the rows read, not on the tables' sizes: a filter picking 1% of 2M rows is read
    here. None beyond them (the read stops at once) or when a table cannot be read here.
    """
    max_tables, max_rows, max_bytes = bounds
    if len(pieces) > max_tables or any(p.read_version is None for p in pieces):
        return None
    taken = [0, 0]  # rows, bytes read so far, by every thread
    lock = threading.Lock()
    over = threading.Event()

    def read(piece: TableSlice) -> list[pa.RecordBatch]:
        dataset = open_partition_table(
            piece.uri, piece.read_version, piece.read_branch, piece.read_tag, ns.storage_options
        )
        out = []
        for batch in read_slice(
            piece, ns.namespace_schema, output, scan_filter, exact=exact, row_address=True, dataset=dataset
        ):
            if over.is_set():
                break
            with lock:
                taken[0] += batch.num_rows
                taken[1] += batch.nbytes
                if taken[0] > max_rows or taken[1] > max_bytes:
                    over.set()
            out.append(batch)
        return out

    try:
        with ThreadPoolExecutor(max_workers=OPENERS) as pool:
            batches = [b for part in pool.map(read, pieces) for b in part]
    except PartitioningError as exc:
        log.debug("reading the matching rows of %s in the driver failed (%s)", ns.root, first_line(exc))
        return None
    if over.is_set():
        return None
    return _as_table(ns, output, batches, True)


def _as_table(
    ns: PartitionedNamespace, output: Sequence[str], batches: list[pa.RecordBatch], row_address: bool
) -> pa.Table:
    """``batches`` as one table typed as Spark reads ``output`` (with the row address columns)."""
    shaped = spark_facing_schema(pa.schema([ns.namespace_schema.arrow.field(c) for c in output]))
    if row_address:
        shaped = shaped.append(pa.field(ROW_TABLE, pa.string(), nullable=False))
        shaped = shaped.append(pa.field(ROW_ADDRESS, pa.int64(), nullable=False))
    # one (empty) batch at least: Spark's Arrow conversion cannot build a column from none
    return pa.Table.from_batches(batches or [pa.RecordBatch.from_pylist([], schema=shaped)], schema=shaped)


def opened_tables(ns: PartitionedNamespace, pieces: Sequence[TableSlice]) -> list[lance.LanceDataset]:
    """``pieces``' tables opened at their versions, :data:`OPENERS` at a time, in order."""
    with ThreadPoolExecutor(max_workers=OPENERS) as pool:
        return list(
            pool.map(
                lambda p: open_partition_table(p.uri, p.read_version, p.read_branch, p.read_tag, ns.storage_options),
                pieces,
            )
        )


def within(datasets: Sequence[lance.LanceDataset], max_rows: int, max_bytes: int) -> bool:
    """Whether the tables hold at most ``max_rows`` rows and ``max_bytes`` bytes of data
    files, as their fragment metadata records (before deletions and filters)."""
    rows = size = 0
    for dataset in datasets:
        for fragment in dataset.get_fragments():
            meta = fragment.metadata
            sizes = [f.file_size_bytes for f in meta.files]
            if meta.physical_rows is None or None in sizes:
                return False  # written by a client that does not record them: not known to be small
            rows += meta.physical_rows
            size += sum(sizes)
        if rows > max_rows or size > max_bytes:
            return False
    return True
