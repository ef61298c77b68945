"""Executor side of a write: :class:`FragmentWriter` turns a task's rows into Lance fragments.

Input batches carry partition-value columns (``__part_<field_id>``, :func:`add_partition_columns`,
or derived by the writer itself); rows are buffered per partition and each buffer is written
as fragments under its partition's table location, a few small buffers at a time
(:class:`_Flushes`). The writer yields one commit message per buffer
(:mod:`partitioning.tables.messages`); nothing becomes visible until the driver commits
(:func:`partitioning.tables.write.commit_write`).
"""

from __future__ import annotations

import itertools
import json
import os
import secrets
from collections import OrderedDict, deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from partitioning.errors import PartitioningError, SchemaError
from partitioning.namespace import LocationPlanner, PartitionedNamespace, PartitionKey
from partitioning.spec.partition_spec import PartitionField
from partitioning.spec.schema import NamespaceSchema
from partitioning.spec.values import canonical_float
from partitioning.spec.vectors import is_vector_type, to_vectors, vector_dimension, wrong_lengths
from partitioning.state.commit_rows import check_partition_value_sizes
from partitioning.stats.bounds import TableStats, collect_stats
from partitioning.storage.datasets import write_new_fragments
from partitioning.storage.paths import table_uri
from partitioning.tables.messages import REJECTED, STATS, describe_key, message_schema, part_column

__all__ = ["FragmentWriter", "add_partition_columns"]


DEFAULT_MAX_ROWS_PER_FILE = 1_048_576

# Set to "0" in the driver's environment, writers record no column statistics (measuring their cost).
COLUMN_STATS_ENV = "LANCE_PARTITIONED_COLUMN_STATS"

# Rows a task gathers before splitting them by partition (see FragmentWriter.__call__).
SPLIT_ROWS = 65_536

# A task writes up to this many small partition buffers at once (see _Flushes).
PARALLEL_FLUSHES = 4


@dataclass
class _Buffer:
    tables: list[pa.Table] = field(default_factory=list)
    rows: int = 0

    def add(self, table: pa.Table) -> None:
        self.tables.append(table)
        self.rows += table.num_rows


@dataclass(frozen=True)
class FragmentWriter:
    """Writes one task's rows as Lance fragments, one partition buffer at a time.

    Input batches hold the data columns plus one ``__part_<field_id>`` column per
    partition field. Rows are buffered per partition and flushed as fragments when a
    buffer reaches ``buffer_rows`` or when more than ``max_open_writers`` partitions
    are buffered (least recently used first), and the largest buffer is flushed while
    all buffers together hold more than ``max_buffered_rows``. On clustered input
    (sorted by partition) ``max_open_writers=1`` keeps exactly one partition in memory
    and writes one fragment per partition per task.
    """

    root: str
    schema: NamespaceSchema
    part_fields: tuple[tuple[str, pa.DataType], ...]
    planner: LocationPlanner
    storage_options: Mapping[str, str] | None = None
    max_rows_per_file: int = DEFAULT_MAX_ROWS_PER_FILE
    max_bytes_per_file: int | None = None
    buffer_rows: int = DEFAULT_MAX_ROWS_PER_FILE
    max_open_writers: int = 1
    max_buffered_rows: int | None = None
    derive_fields: tuple[PartitionField, ...] = ()
    column_stats: bool = True

    @classmethod
    def for_namespace(
        cls,
        ns: PartitionedNamespace,
        *,
        max_rows_per_file: int = DEFAULT_MAX_ROWS_PER_FILE,
        max_bytes_per_file: int | None = None,
        max_open_writers: int = 1,
        max_buffered_rows: int | None = None,
        keys: Iterable[PartitionKey] | None = None,
        derive_keys: bool = False,
    ) -> FragmentWriter:
        """A writer for the namespace's current spec, naming new partitions with a fresh seed.

        ``keys``: the partition keys the writer will see, when known (it then knows only
        those partitions' locations, decoding only their manifest rows). ``derive_keys``:
        the batches hold only the data columns, and the writer computes the partition
        columns itself (:func:`add_partition_columns`)."""
        spec = ns.current_spec
        schema = ns.namespace_schema
        return cls(
            root=ns.root,
            schema=schema,
            part_fields=tuple((f.field_id, f.arrow_result_type(schema)) for f in spec.fields),
            planner=ns.location_planner(spec.spec_id, seed=secrets.token_bytes(32), keys=keys),
            storage_options=ns.storage_options,
            max_rows_per_file=max_rows_per_file,
            max_bytes_per_file=max_bytes_per_file,
            buffer_rows=max_rows_per_file,
            max_open_writers=max_open_writers,
            max_buffered_rows=max_buffered_rows,
            derive_fields=tuple(spec.fields) if derive_keys else (),
            column_stats=os.environ.get(COLUMN_STATS_ENV, "1") != "0",
        )

    @cached_property
    def output_schema(self) -> pa.Schema:
        return message_schema(self.part_fields)

    @cached_property
    def data_schema(self) -> pa.Schema:
        return self.schema.dataset_arrow

    @cached_property
    def vector_columns(self) -> tuple[tuple[str, int], ...]:
        """(name, dimension) of every vector column."""
        return tuple((f.name, vector_dimension(f.type)) for f in self.data_schema if is_vector_type(f.type))

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Fragments for ``batches``; once a vector of the wrong length is seen, the task
        writes nothing more, counts the wrong rows to the end and reports them instead.

        Batches are split by partition a chunk of up to :data:`SPLIT_ROWS` rows at a
        time (one sort and one ``take`` per chunk instead of per Arrow batch); a chunk is
        at most ``buffer_rows`` and ``max_buffered_rows``, so a task holds at most twice
        the budget. Small buffers are written a few at a time (:class:`_Flushes`)."""
        chunk_rows = min(SPLIT_ROWS, self.buffer_rows, self.max_buffered_rows or SPLIT_ROWS)
        with ThreadPoolExecutor(max_workers=PARALLEL_FLUSHES) as pool:
            yield from self._write_all(batches, _Flushes(self, pool, chunk_rows), chunk_rows)

    def _write_all(
        self, batches: Iterable[pa.RecordBatch], flushes: _Flushes, chunk_rows: int
    ) -> Iterator[pa.RecordBatch]:
        buffers: OrderedDict[PartitionKey, _Buffer] = OrderedDict()
        rejected: dict[str, int] = {}
        pending: list[pa.RecordBatch] = []
        pending_rows = 0
        buffered = 0

        def absorb(table: pa.Table) -> Iterator[pa.RecordBatch]:
            nonlocal buffered
            if self.derive_fields:
                table = add_partition_columns(table, self.derive_fields, self.schema)
            for key, part in self._split(table):
                buf = buffers.pop(key, None) or _Buffer()
                buf.add(part)
                buffers[key] = buf
                buffered += part.num_rows
                if buf.rows >= self.buffer_rows:
                    buffered -= buf.rows
                    yield from flushes.add(key, buffers.pop(key))
                while len(buffers) > self.max_open_writers:
                    old_key, old = buffers.popitem(last=False)
                    buffered -= old.rows
                    yield from flushes.add(old_key, old)
                while self.max_buffered_rows is not None and buffered > self.max_buffered_rows:
                    big_key = max(buffers, key=lambda k: buffers[k].rows)
                    big = buffers.pop(big_key)
                    buffered -= big.rows
                    yield from flushes.add(big_key, big)

        for batch in batches:
            if batch.num_rows == 0:
                continue
            for name, dimension in self.vector_columns:
                bad = wrong_lengths(batch.column(name), dimension) if name in batch.schema.names else 0
                if bad:
                    rejected[name] = rejected.get(name, 0) + bad
            if rejected:
                buffers.clear()
                pending.clear()
                continue
            pending.append(batch)
            pending_rows += batch.num_rows
            if pending_rows >= chunk_rows:
                yield from absorb(pa.Table.from_batches(pending))
                pending, pending_rows = [], 0
        if rejected:
            yield from flushes.drain()
            yield self._rejected(rejected)
            return
        if pending:
            yield from absorb(pa.Table.from_batches(pending))
        while buffers:
            key, buf = buffers.popitem(last=False)
            yield from flushes.add(key, buf)
        yield from flushes.drain()

    def _split(self, table: pa.Table) -> Iterator[tuple[PartitionKey, pa.Table]]:
        names = [part_column(fid) for fid, _ in self.part_fields]
        if not names:
            yield (), self._data(table)
            return
        keys = table.select(names).cast(
            pa.schema([pa.field(n, t) for n, (_, t) in zip(names, self.part_fields, strict=True)])
        )
        if all(len(pc.unique(keys.column(n))) == 1 for n in names):
            yield tuple(canonical_float(keys.column(n)[0].as_py()) for n in names), self._data(table)
            return
        if any(pa.types.is_floating(t) for _, t in self.part_fields):
            indexed = keys.append_column("__row", pa.array(range(table.num_rows), pa.int64()))
            groups = indexed.group_by(names, use_threads=False).aggregate([("__row", "list")])
            for i in range(groups.num_rows):
                key = tuple(canonical_float(groups.column(n)[i].as_py()) for n in names)
                yield key, self._data(table.take(groups.column("__row_list")[i].values))
            return
        order = pc.sort_indices(keys, sort_keys=[(n, "ascending") for n in names])
        keys = keys.take(order)
        data = self._data(table.take(order))
        starts = [0, *_run_starts(keys), table.num_rows]
        for start, end in itertools.pairwise(starts):
            yield tuple(keys.column(n)[start].as_py() for n in names), data.slice(start, end - start)

    def _data(self, table: pa.Table) -> pa.Table:
        try:
            table = table.select(self.data_schema.names)
            for name, _ in self.vector_columns:
                f = self.data_schema.field(name)
                i = table.schema.get_field_index(name)
                table = table.set_column(i, f, to_vectors(table.column(i), f.type, name))
            return table.cast(self.data_schema)
        except (pa.ArrowInvalid, pa.ArrowTypeError, KeyError) as exc:
            raise SchemaError(f"batch does not fit the namespace schema: {exc}") from exc

    def _rejected(self, counts: Mapping[str, int]) -> pa.RecordBatch:
        row = {"object_id": "", "location": "", "fragments": "[]", "num_rows": 0, REJECTED: json.dumps(counts)}
        return pa.RecordBatch.from_pylist([row], schema=self.output_schema)

    def buffer_stats(self, buf: _Buffer) -> str | None:
        """The column statistics of a buffer's rows (JSON for its message), computed in the task's
        thread: in a flush thread, waiting for the GIL costs more than the work. None when the
        writer records none (its tables then have none, and every filter reads them)."""
        if not self.column_stats:
            return None
        stats = TableStats(0)
        for table in buf.tables:
            stats = stats.merged(collect_stats(table, self.schema.arrow))
        return stats.to_json(None)

    def _flush(
        self, key: PartitionKey, buf: _Buffer, object_id: str, location: str, stats: str | None
    ) -> pa.RecordBatch:
        # One contiguous chunk per column: Lance encodes it about a third faster than many small ones.
        data = (pa.concat_tables(buf.tables) if len(buf.tables) > 1 else buf.tables[0]).combine_chunks()
        kwargs: dict[str, Any] = {"max_rows_per_file": self.max_rows_per_file}
        if self.max_bytes_per_file is not None:
            kwargs["max_bytes_per_file"] = self.max_bytes_per_file
        try:
            fragments = write_new_fragments(
                data,
                table_uri(self.root, object_id, location),
                self.schema,
                storage_options=self.storage_options,
                **kwargs,
            )
        except PartitioningError as exc:
            raise type(exc)(f"partition {describe_key(self.part_fields, key)}: {exc}") from exc
        row: dict[str, Any] = {
            "object_id": object_id,
            "location": location,
            "fragments": json.dumps([f.to_json() for f in fragments]),
            "num_rows": data.num_rows,
            STATS: stats,
        }
        for (fid, _), value in zip(self.part_fields, key, strict=True):
            row[part_column(fid)] = value
        return pa.RecordBatch.from_pylist([row], schema=self.output_schema)


class _Flushes:
    """A task's buffer writes in flight, yielded in the order they were started.

    A buffer is placed (its location planned) in the task's thread and written in a
    pool thread (pylance releases the GIL). The task waits for the oldest write while
    more than :data:`PARALLEL_FLUSHES` are in flight or they hold more than
    ``max_rows`` rows together: many small partitions (a write creating thousands) are
    written in parallel for at most ``max_rows`` rows more in memory, and a big buffer
    is written before the task reads on, as one at a time would."""

    def __init__(self, writer: FragmentWriter, pool: ThreadPoolExecutor, max_rows: int) -> None:
        self._writer, self._pool, self._max_rows = writer, pool, max_rows
        self._inflight: deque[tuple[int, Future[pa.RecordBatch]]] = deque()
        self._rows = 0

    def add(self, key: PartitionKey, buf: _Buffer) -> Iterator[pa.RecordBatch]:
        writer = self._writer
        check_partition_value_sizes([fid for fid, _ in writer.part_fields], key)
        object_id, location = writer.planner.place(key)
        stats = writer.buffer_stats(buf)
        self._inflight.append((buf.rows, self._pool.submit(writer._flush, key, buf, object_id, location, stats)))
        self._rows += buf.rows
        while len(self._inflight) > PARALLEL_FLUSHES or self._rows > self._max_rows:
            yield self._oldest()

    def drain(self) -> Iterator[pa.RecordBatch]:
        while self._inflight:
            yield self._oldest()

    def _oldest(self) -> pa.RecordBatch:
        rows, future = self._inflight.popleft()
        self._rows -= rows
        return future.result()


def _run_starts(keys: pa.Table) -> list[int]:
    """Where a new run of equal keys starts in sorted ``keys`` (rows 1..n-1); NULL equals NULL."""
    changed: Any = None
    for column in keys.columns:
        values = column.combine_chunks()
        after, before = values.slice(1), values.slice(0, len(values) - 1)
        differs = pc.if_else(
            pc.and_(after.is_valid(), before.is_valid()),
            pc.not_equal(after, before),
            pc.not_equal(after.is_valid(), before.is_valid()),
        )
        changed = differs if changed is None else pc.or_(changed, differs)
    return [int(i) + 1 for i in pc.indices_nonzero(changed).to_pylist()]


def add_partition_columns(table: pa.Table, fields: Sequence[PartitionField], schema: NamespaceSchema) -> pa.Table:
    """``table`` plus one ``__part_<field_id>`` column per partition field (Arrow transforms)."""
    for f in fields:
        sources = [
            table.column(src.name) if src is not None and src.name in table.column_names else None
            for src in f.source_fields(schema)
        ]
        table = table.append_column(part_column(f.field_id), f.apply(sources, schema, length=table.num_rows))
    return table


def partition_keys(keyed: pa.Table, field_ids: Sequence[str]) -> set[PartitionKey]:
    """The distinct partition keys of a table with ``__part_*`` columns (:func:`add_partition_columns`)."""
    names = [part_column(fid) for fid in field_ids]
    if not names or keyed.num_rows == 0:
        return {()} if keyed.num_rows else set()
    distinct = keyed.select(names).group_by(names, use_threads=False).aggregate([])
    columns = [distinct.column(n).to_pylist() for n in names]
    return {tuple(canonical_float(v) for v in k) for k in zip(*columns, strict=True)}
