"""The rows a rewrite operation changes, read with their table and Lance row address.

:func:`target_rows` reads the rows of the partition tables an attempt planned, at its
``__manifest`` version: small tables on the driver (:func:`pipelines.write.small.small_target`),
the others by Spark's tasks running the ``lance_partitioned`` source's reader
(:func:`task_rows`, ``mapInArrow``).
A :class:`TargetCache` keeps what a round read, so the next round of the same operation
reads again only the tables a concurrent commit changed.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from partitioning.errors import InvalidInput, PartitioningError
from partitioning.namespace import PartitionedNamespace
from partitioning.plan.table_rows import ROW_ADDRESS, ROW_TABLE
from partitioning.sql.binding import bind
from partitioning.sql.filters import is_exactly_understood
from partitioning.sql.from_sql import parse_filter
from pipelines.read_options import dialect_options, read_schema, session_dialect
from pipelines.spark_errors import spark_errors, where_sql
from pipelines.write.small import small_target

__all__ = ["TargetCache", "addresses", "target_rows", "task_rows"]

T = TypeVar("T")


def target_rows(
    session: SparkSession,
    ns: PartitionedNamespace,
    read: Mapping[str, int],
    *,
    filter: str | None = None,
    columns: Sequence[str] | None = None,
    cache: TargetCache | None = None,
) -> DataFrame:
    """The rows of the tables in ``read`` at ``ns``'s manifest version, with ``_lance_table``
    and ``_lance_rowaddr``; ``filter`` (Spark SQL) prunes and is applied by Spark. Small
    tables are read by the driver (:func:`pipelines.write.small.small_target`). With ``cache``
    (a round's), tables whose version an earlier round read come from there."""
    clash = {ROW_TABLE, ROW_ADDRESS} & set(ns.schema.names)
    if clash:
        raise InvalidInput(f"rows cannot be changed in a namespace with a column named {sorted(clash)[0]!r}")
    small = small_target(session, ns, read, filter=filter, columns=columns)
    if small is not None:
        return small
    if cache is not None:
        key = (filter, tuple(columns) if columns is not None else None, ns.namespace_schema.to_json())
        return cache.rows(key, read, lambda tables: _spark_rows(session, ns, tables, filter, columns))
    return _spark_rows(session, ns, read, filter, columns)


def _spark_rows(
    session: SparkSession,
    ns: PartitionedNamespace,
    read: Mapping[str, int],
    filter: str | None,
    columns: Sequence[str] | None,
) -> DataFrame:
    """:func:`target_rows` read by Spark's tasks: the ``lance_partitioned`` source's reader,
    planned here and run by ``mapInArrow`` (rows reach the JVM faster that way than
    through a Python data source's scan)."""
    from pipelines.source.reader import LancePartitionedReader

    options = {"with_row_address": "true", "object_ids": json.dumps(sorted(read))}
    options.update({k.lower(): v for k, v in dialect_options(session_dialect(session)).items()})
    if columns is not None:
        options["columns"] = ",".join(columns)
    if filter:
        # a filter the reader evaluates exactly drops rows before they reach Spark
        options["filter" if _exactly_understood(filter, ns, session) else "prune_filter"] = filter
    schema = read_schema(ns.namespace_schema, columns, row_address=True)
    reader = LancePartitionedReader(ns, schema, options)
    return where_sql(task_rows(session, schema, reader.partitions(), reader.read), filter)


def task_rows(
    session: SparkSession, schema: StructType, pieces: Sequence[T], read: Callable[[T], Iterator[pa.RecordBatch]]
) -> DataFrame:
    """A DataFrame of ``read(piece)``'s batches, one Spark task per piece (``mapInArrow``);
    ``read`` and ``pieces`` travel pickled to the tasks."""
    work = list(pieces)
    if not work:
        return session.createDataFrame([], schema)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for index in batch.column(0).to_pylist():
                yield from read(work[index])

    return session.range(0, len(work), 1, len(work)).mapInArrow(run, schema)


def _exactly_understood(text: str, ns: PartitionedNamespace, session: SparkSession) -> bool:
    dialect = session_dialect(session)
    try:
        bound = bind(parse_filter(text, dialect), ns.namespace_schema.arrow, dialect)
    except PartitioningError:
        return False
    return is_exactly_understood(bound)


def addresses(df: DataFrame, context: str) -> pa.Table:
    """``df``'s rows (``_lance_table``, ``_lance_rowaddr`` and whatever else it selects) on the driver."""
    with spark_errors(context):
        return df.toArrow()


class TargetCache:
    """The target rows the last round read, persisted: the next round reads again only the
    tables whose ``read_version`` changed (a concurrent commit), and takes the others' rows
    (same version, same rows and row addresses) from here."""

    def __init__(self) -> None:
        self._df: DataFrame | None = None
        self._read: dict[str, int] = {}
        self._key: tuple[Any, ...] | None = None
        self._old: list[DataFrame] = []
        self.reused = 0  # tables whose rows a round took from here, over all rounds

    def rows(
        self, key: tuple[Any, ...], read: Mapping[str, int], fresh: Callable[[Mapping[str, int]], DataFrame]
    ) -> DataFrame:
        """The target rows of ``read`` (``fresh(tables)`` reads some); ``key`` names what else
        the read depends on (filter, columns): a different key reads everything again."""
        if self._df is None or key != self._key:
            df = fresh(read)
        else:
            same = sorted(t for t, v in read.items() if self._read.get(t) == v)
            changed = {t: v for t, v in read.items() if self._read.get(t) != v}
            if not same:
                df = fresh(read)
            else:
                self.reused += len(same)
                df = self._df.where(F.col(ROW_TABLE).isin(same))
                if changed:
                    df = df.unionByName(fresh(changed))
        if self._df is not None:
            self._old.append(self._df)
        self._df, self._read, self._key = df.persist(), dict(read), key
        return self._df

    def release(self) -> None:
        for df in [*self._old, *([self._df] if self._df is not None else [])]:
            df.unpersist()
        self._old, self._df = [], None
