"""The write protocol, Spark-free: executor-side fragment writers and the driver commit.

1. :class:`FragmentWriter` (picklable, runs in tasks) turns Arrow batches that carry
   partition-value columns into Lance fragments under each partition's table
   location, and yields small commit messages. Nothing becomes visible.
2. :func:`commit_write` (driver) commits each touched dataset as a new version whose
   fragments are exactly those of the version the manifest points at plus the new
   ones, then makes ONE ``__manifest`` commit that moves every ``read_version``.
   On a manifest conflict it re-reads, re-bases the dataset commits and retries.

Dataset versions that no manifest commit points at (from failed or retried writes)
are never read, so a crash before the manifest commit leaves nothing visible.
"""

from __future__ import annotations

import itertools
import json
import random
import secrets
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

import lance
import pyarrow as pa
import pyarrow.compute as pc
from lance.fragment import FragmentMetadata

from partitioning.errors import ConcurrentModification, PartitioningError, SchemaError
from partitioning.namespace import (
    LocationPlanner,
    PartitionedNamespace,
    PartitionKey,
    PartitionTable,
    TableCommit,
    format_partition_value,
)
from partitioning.spec.partition_spec import PartitionField
from partitioning.spec.schema import NamespaceSchema
from partitioning.spec.transforms import canonical_float
from partitioning.spec.vectors import (
    as_lists,
    is_ml_vector_type,
    is_vector_type,
    length_error,
    to_vectors,
    vector_dimension,
    wrong_lengths,
)
from partitioning.state.commits import check_partition_value_sizes
from partitioning.storage.datasets import (
    DEFAULT_COMMIT_ATTEMPTS,
    PARALLEL_STATS,
    check_namespace_root,
    commit_version,
    missing_data_files,
    write_new_fragments,
)
from partitioning.storage.guard import Guard, guarded
from partitioning.storage.history import Operation
from partitioning.storage.intents import Intent
from partitioning.storage.manifest import table_uri

__all__ = [
    "PARALLEL_COMMITS",
    "CommitResult",
    "FragmentWriter",
    "Pending",
    "WriteMode",
    "add_partition_columns",
    "already_committed",
    "check_files",
    "check_rejected",
    "commit_write",
    "conform_table",
    "group_messages",
    "message_schema",
    "place_pending",
    "relocate",
    "write_table",
]

WriteMode = Literal["append", "overwrite", "overwrite_partitions"]
WRITE_MODES: tuple[str, ...] = ("append", "overwrite", "overwrite_partitions", "error", "ignore")
DEFAULT_MAX_ROWS_PER_FILE = 1_048_576
PART_PREFIX = "__part_"
# Rows a task gathers before splitting them by partition (see FragmentWriter.__call__).
SPLIT_ROWS = 65_536
# Dataset commits of one write run this many at a time (pylance releases the GIL).
PARALLEL_COMMITS = 8
# A task writes up to this many small partition buffers at once (see _Flushes).
PARALLEL_FLUSHES = 4
# A message row with this column set reports rows a task refused ({column: count}, JSON)
# instead of fragments; the driver then refuses the whole write (:func:`check_rejected`).
REJECTED = "rejected"


def part_column(field_id: str) -> str:
    return f"{PART_PREFIX}{field_id}"


def message_schema(part_fields: Sequence[tuple[str, pa.DataType]]) -> pa.Schema:
    """Commit messages: one row per flushed buffer of one partition."""
    return pa.schema(
        [
            pa.field("object_id", pa.string(), nullable=False),
            pa.field("location", pa.string(), nullable=False),
            pa.field("fragments", pa.string(), nullable=False),
            pa.field("num_rows", pa.int64(), nullable=False),
            *[pa.field(part_column(fid), t) for fid, t in part_fields],
            pa.field(REJECTED, pa.string()),
        ]
    )


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

    def _flush(self, key: PartitionKey, buf: _Buffer, object_id: str, location: str) -> pa.RecordBatch:
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
        self._inflight.append((buf.rows, self._pool.submit(writer._flush, key, buf, object_id, location)))
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


def describe_key(part_fields: Sequence[tuple[str, Any]], key: PartitionKey) -> str:
    """``country='US', ts_day=10``: a partition as its field ids and values."""
    shown = [
        f"{fid}={value!r}" if isinstance(value, str) or value is None else f"{fid}={format_partition_value(value)}"
        for (fid, _), value in zip(part_fields, key, strict=True)
    ]
    return ", ".join(shown) or "(unpartitioned)"


@dataclass(frozen=True)
class CommitResult:
    """What one write did. ``skipped`` says why nothing was committed, if so."""

    root: str
    mode: str
    manifest_version: int | None
    rows_written: int = 0
    partitions_touched: int = 0
    partitions_created: int = 0
    fragments_written: int = 0
    attempts: int = 0
    write_id: str | None = None
    skipped: str | None = None

    def summary(self) -> str:
        if self.skipped:
            return f"{self.root}: nothing written ({self.skipped})"
        return (
            f"{self.root}: {self.rows_written:,} rows into {self.partitions_touched} partitions "
            f"({self.partitions_created} new, {self.fragments_written} fragments), mode={self.mode}, "
            f"__manifest v{self.manifest_version}"
        )


def already_committed(ns: PartitionedNamespace, mode: str, write_id: str | None) -> CommitResult | None:
    """A skipped result when ``write_id`` was committed before (``ns`` must be fresh)."""
    if write_id is None or write_id not in ns.committed_write_ids():
        return None
    return CommitResult(
        ns.root, mode, ns.manifest_version, write_id=write_id, skipped=f"write_id {write_id!r} was already committed"
    )


@dataclass
class Pending:
    """The written-but-uncommitted fragments of one partition."""

    key: PartitionKey
    object_id: str
    location: str
    fragments: list[FragmentMetadata]
    rows: int


def check_rejected(messages: pa.Table, schema: NamespaceSchema) -> pa.Table:
    """The fragment messages, after refusing the write if any task reported rejected rows."""
    if REJECTED not in messages.column_names:
        return messages
    reports = messages.column(REJECTED)
    if reports.null_count == len(reports):
        return messages
    totals: dict[str, int] = {}
    for text in reports.drop_null().to_pylist():
        for name, count in json.loads(text).items():
            totals[name] = totals.get(name, 0) + int(count)
    errors = [length_error(name, vector_dimension(schema.field_by_name(name).type), n) for name, n in totals.items()]
    if len(errors) == 1:
        raise errors[0]
    raise SchemaError("; ".join(str(e) for e in errors))


def group_messages(messages: pa.Table, field_ids: Sequence[str]) -> dict[str, Pending]:
    """Fragments per table location; every partition key must map to one location."""
    pending: dict[str, Pending] = {}
    location_of: dict[PartitionKey, str] = {}
    for row in messages.to_pylist():
        key = tuple(canonical_float(row[part_column(fid)]) for fid in field_ids)
        if location_of.setdefault(key, row["location"]) != row["location"]:
            raise ConcurrentModification(
                f"partition {key} was written to two locations ({location_of[key]}, {row['location']}) in one write"
            )
        entry = pending.setdefault(row["location"], Pending(key, row["object_id"], row["location"], [], 0))
        entry.fragments.extend(FragmentMetadata.from_json(json.dumps(f)) for f in json.loads(row["fragments"]))
        entry.rows += row["num_rows"]
    return pending


def relocate(
    pending: Pending,
    target_id: str,
    target: str,
    ns: PartitionedNamespace,
    schema: NamespaceSchema,
    max_rows_per_file: int,
) -> Pending:
    """Move fragments written under a losing location into the partition's real table.

    Happens only when another writer created the same new partition concurrently; the
    data is re-written under the winner's location and the old files become orphans.
    """
    source_uri = table_uri(ns.root, pending.object_id, pending.location)
    commit_version(source_uri, schema, pending.fragments, ns.storage_options)
    data = lance.dataset(source_uri, storage_options=ns.storage_options).to_table()
    fragments = write_new_fragments(
        data,
        table_uri(ns.root, target_id, target),
        schema,
        storage_options=ns.storage_options,
        max_rows_per_file=max_rows_per_file,
    )
    return Pending(pending.key, target_id, target, fragments, pending.rows)


def place_pending(
    ns: PartitionedNamespace,
    pending: dict[str, Pending],
    spec_id: int,
    schema: NamespaceSchema,
    max_rows_per_file: int,
) -> list[tuple[Pending, dict[str, Any], PartitionTable | None]]:
    """Each pending entry with its partition values and the table that already holds that
    partition (None: a new one). An entry written under a location another writer's new
    table won meanwhile is moved there first (:func:`relocate`); ``pending`` is updated."""
    spec = ns.specs[spec_id]
    found = ns.find_partitions(spec.spec_id, [entry.key for entry in pending.values()])
    placed = []
    for location in list(pending):
        entry = pending[location]
        values = dict(zip(spec.field_ids, entry.key, strict=True))
        existing = found.get(tuple(canonical_float(v) for v in entry.key))
        if existing is not None and existing.location != entry.location:
            entry = relocate(entry, existing.object_id, existing.location, ns, schema, max_rows_per_file)
            del pending[location]
            pending[entry.location] = entry
        placed.append((entry, values, existing))
    return placed


def check_files(
    root: str,
    pending: Iterable[Pending],
    field_ids: Sequence[str],
    storage_options: Mapping[str, str] | None = None,
) -> None:
    """Every new fragment's data files exist (one stat each, in parallel), or the write
    fails naming the partition and the file, before anything is committed."""
    entries = list(pending)
    with ThreadPoolExecutor(max_workers=min(PARALLEL_STATS, max(1, len(entries)))) as pool:
        missing = list(
            pool.map(
                lambda p: missing_data_files(table_uri(root, p.object_id, p.location), p.fragments, storage_options),
                entries,
            )
        )
    for entry, files in zip(entries, missing, strict=True):
        if files:
            where = describe_key([(fid, None) for fid in field_ids], entry.key)
            raise ConcurrentModification(
                f"write to {root}: partition {where}: data file {files[0]} is missing"
                f"{f' (and {len(files) - 1} more)' if len(files) > 1 else ''}; it was deleted while the write ran "
                "(a vacuum with a short retention?). Nothing was committed; run the write again"
            )


def commit_write(
    ns: PartitionedNamespace,
    messages: pa.Table,
    *,
    mode: WriteMode = "append",
    spec_id: int | None = None,
    schema: NamespaceSchema | None = None,
    write_id: str | None = None,
    max_attempts: int = DEFAULT_COMMIT_ATTEMPTS,
    max_rows_per_file: int = DEFAULT_MAX_ROWS_PER_FILE,
    operation: Operation | None = None,
    naming_seed: bytes | None = None,
    guard: Guard | None = None,
    intent: Intent | None = None,
    replace: Callable[[PartitionedNamespace], Sequence[str]] | None = None,
) -> CommitResult:
    """Driver side of a write: dataset commits, then ONE ``__manifest`` commit.

    ``replace`` (with mode ``overwrite_partitions``): for the state an attempt commits on,
    the ids of the tables the write replaces besides those it writes (an overwrite of the
    partitions a condition selects); the same commit removes them.

    ``naming_seed`` is the seed the write's :class:`FragmentWriter` named new partitions
    with (its ``planner.seed``): the first attempt then does not look for those names in
    ``__manifest``, where nothing can hold them yet (:func:`partitioning.state.commits.commit_once`).

    The commit records ``operation`` (default ``WRITE`` with the mode and write id) with
    the write's metrics added: rows, bytes and files added, partitions touched, created and
    (overwrite) removed, and ``duration_ms`` from this call to the commit.

    ``schema`` is the namespace schema the fragments were written with (default: the
    current one). If the namespace schema changes while the write runs, the write
    fails with :class:`ConcurrentModification` and nothing of it becomes visible.

    Before the dataset commits of each attempt, every new fragment's data files must
    exist (one stat per file, in parallel); a missing one fails the write naming the
    partition and the file, with nothing committed. The caller holds a lease
    (``guard``, :func:`partitioning.storage.guard.guarded`) from before the fragments were written, so
    that vacuum keeps them; the ``__manifest`` commit goes through its protected path.
    ``intent``: the committer's own exclusive intent, removed by this commit
    (:mod:`partitioning.storage.intents`).
    """
    started = time.monotonic()
    if mode not in ("append", "overwrite", "overwrite_partitions"):
        raise SchemaError(f"unknown write mode {mode!r}; allowed: append, overwrite, overwrite_partitions")
    spec = ns.specs[spec_id] if spec_id is not None else ns.current_spec
    written = schema if schema is not None else ns.namespace_schema
    pending = group_messages(check_rejected(messages, written), spec.field_ids)
    last_error: ConcurrentModification | None = None
    for attempt in range(1, max_attempts + 1):
        check_files(ns.root, pending.values(), spec.field_ids, ns.storage_options)
        ns.refresh()
        skipped = already_committed(ns, mode, write_id)
        if skipped is not None:
            return skipped
        if ns.namespace_schema.to_json() != written.to_json():
            raise ConcurrentModification(
                f"the schema of {ns.root} changed while this write ran; nothing was committed, run the write again"
            )
        placed = place_pending(ns, pending, spec.spec_id, written, max_rows_per_file)
        created = sum(existing is None for _, _, existing in placed)
        planned = [(entry, values, existing if mode == "append" else None) for entry, values, existing in placed]

        def commit_one(plan: tuple[Pending, dict[str, Any], PartitionTable | None]) -> TableCommit:
            entry, values, existing = plan
            version = commit_version(
                table_uri(ns.root, entry.object_id, entry.location),
                written,
                entry.fragments,
                ns.storage_options,
                base=ns.open_table(existing) if existing is not None else None,
                verify=False,
            )
            return TableCommit(spec.spec_id, values, entry.location, version, entry.object_id)

        with ThreadPoolExecutor(max_workers=max(1, min(PARALLEL_COMMITS, len(planned)))) as pool:
            commits = list(pool.map(commit_one, planned))
        recorded = _write_operation(ns, mode, write_id, pending.values(), commits, created, operation)
        removed = list(replace(ns)) if replace is not None else []
        if removed:
            recorded = recorded.with_metrics(partitions_removed=len(set(removed) - {c.object_id for c in commits}))
        try:
            manifest_version = ns.commit_once(
                commits,
                replace_all=(mode == "overwrite"),
                write_id=write_id,
                operation=recorded.timed(started),
                naming_seed=naming_seed if attempt == 1 else None,
                guard=guard,
                intent=intent,
                remove=removed,
            )
        except ConcurrentModification as exc:
            last_error = exc
            time.sleep(random.uniform(0.01, 0.05) * attempt)
            continue
        return CommitResult(
            root=ns.root,
            mode=mode,
            manifest_version=manifest_version,
            rows_written=sum(p.rows for p in pending.values()),
            partitions_touched=len(pending),
            partitions_created=created,
            fragments_written=sum(len(p.fragments) for p in pending.values()),
            attempts=attempt,
            write_id=write_id,
        )
    raise ConcurrentModification(
        f"write to {ns.root} gave up after {max_attempts} __manifest commit attempts lost to concurrent writers; "
        f"nothing of this write is visible (last conflict: {last_error})"
    ) from last_error


def _write_operation(
    ns: PartitionedNamespace,
    mode: str,
    write_id: str | None,
    pending: Iterable[Pending],
    commits: Sequence[TableCommit],
    created: int,
    operation: Operation | None,
) -> Operation:
    """``operation`` (default ``WRITE``) with the write's metrics, the caller's taking precedence."""
    parts = list(pending)
    files = [f for p in parts for fragment in p.fragments for f in fragment.files]
    touched = {c.location for c in commits}
    metrics: dict[str, int | float] = {
        "rows_added": sum(p.rows for p in parts),
        "bytes_added": sum(int(f.file_size_bytes or 0) for f in files),
        "files_added": len(files),
        "partitions_touched": len(parts),
        "partitions_created": created,
    }
    if mode == "overwrite":
        metrics["partitions_removed"] = sum(t.location not in touched for t in ns.partitions())
    base = operation or Operation("WRITE", {"mode": mode, **({"write_id": write_id} if write_id else {})})
    return Operation(base.name, base.parameters, {**metrics, **base.metrics})


def conform_table(table: pa.Table, schema: NamespaceSchema) -> pa.Table:
    """Apply the write-side schema rules (seed 000 section 4) to an Arrow table.

    Unknown columns are an error naming them; missing nullable columns become NULL,
    missing non-nullable ones are an error; values are cast safely to the namespace
    types, and a failing cast names the column. Vector columns (and Spark ML vectors
    going into a list column) become lists of the column's float type here; the
    :class:`FragmentWriter` checks vector lengths.
    """
    target = schema.arrow
    extra = [c for c in table.column_names if c not in target.names]
    if extra:
        raise SchemaError(
            f"column(s) {', '.join(repr(c) for c in extra)} are not in the namespace schema; "
            f"namespace columns are: {', '.join(target.names)}"
        )
    columns = []
    fields = []
    for f in target:
        if f.name not in table.column_names:
            if not f.nullable:
                raise SchemaError(f"column {f.name!r} is required (not nullable) but missing from the input")
            columns.append(pa.nulls(table.num_rows, f.type))
            fields.append(f)
            continue
        col = table.column(f.name)
        if not f.nullable and col.null_count:
            raise SchemaError(f"column {f.name!r} is not nullable but the input has {col.null_count} NULL value(s)")
        if is_vector_type(f.type) or (is_ml_vector_type(col.type) and pa.types.is_list(f.type)):
            lists = as_lists(col, f.type, f.name)
            columns.append(lists)
            fields.append(f.with_type(lists.type))
            continue
        fields.append(f)
        try:
            columns.append(col.cast(f.type, safe=True))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
            first = str(exc).strip().splitlines()[0]
            raise SchemaError(f"column {f.name!r}: cannot cast {col.type} to {f.type}: {first}") from exc
    return pa.Table.from_arrays(columns, schema=pa.schema(fields, metadata=target.metadata))


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


def write_table(
    ns: PartitionedNamespace,
    table: pa.Table,
    *,
    mode: WriteMode = "append",
    write_id: str | None = None,
    max_rows_per_file: int = DEFAULT_MAX_ROWS_PER_FILE,
    max_open_writers: int = 64,
    before_commit: Callable[[pa.Table], None] | None = None,
) -> CommitResult:
    """Write an Arrow table without Spark, through the same writer and commit protocol.

    The write holds a lease (:func:`partitioning.storage.guard.guarded`) from before its
    first fragment until its commit returns. ``before_commit`` is called with the commit
    messages between the fragment writes and the commit (a hook for tests and tools).
    """
    check_namespace_root(ns.root, ns.storage_options)
    ns.refresh()
    skipped = already_committed(ns, mode, write_id)
    if skipped is not None:
        return skipped
    spec = ns.current_spec
    schema = ns.namespace_schema
    keyed = add_partition_columns(conform_table(table, schema), spec.fields, schema)
    keys = partition_keys(keyed, spec.field_ids)
    for key in keys:
        check_partition_value_sizes(spec.field_ids, key)
    writer = FragmentWriter.for_namespace(
        ns, max_rows_per_file=max_rows_per_file, max_open_writers=max_open_writers, keys=keys
    )
    with guarded(ns.root, ns.storage_options, write_id=write_id, bases=(ns.manifest_version,)) as guard:
        batches = list(writer(keyed.to_batches()))
        messages = pa.Table.from_batches(batches, schema=writer.output_schema)
        if before_commit is not None:
            before_commit(messages)
        return commit_write(
            ns,
            messages,
            mode=mode,
            spec_id=spec.spec_id,
            schema=writer.schema,
            write_id=write_id,
            max_rows_per_file=max_rows_per_file,
            naming_seed=writer.planner.seed,
            guard=guard,
        )
