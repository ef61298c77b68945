"""Structured Streaming into a namespace: the ``lance_partitioned`` stream writer.

``df.writeStream.format("lance_partitioned").option("checkpointLocation", ...)
.option("partition_by", ...).outputMode("append").start(root)``: each micro-batch's tasks
write fragments (as a batch write's do, :mod:`pipelines.source.writer`), and its commit
makes the dataset commits and ONE ``__manifest`` commit whose write id is
``<query id>-<batch id>``. The query id is the one Spark keeps in the checkpoint (the same
after every restart; tasks read it from their ``sql.streaming.queryId`` local property),
so a batch Spark replays after a crash, before or after its ``__manifest`` commit, adds
nothing twice: ``__manifest`` remembers each query's last committed batch
(:func:`partitioning.state.commit_rows.write_id_committed`), and a replayed batch whose
commit was made is skipped; one whose commit was not made commits now, built only on
versions ``__manifest`` recorded (a crashed attempt's dataset versions are never read).

Options (any other is an error listing these): ``checkpointLocation`` (Spark's),
``partition_by`` (creates the namespace, or must match its spec), ``mergeSchema``,
``max_rows_per_file``, ``max_bytes_per_file``, ``max_open_writers``,
``auto_compact_after`` (default :data:`DEFAULT_AUTO_COMPACT_AFTER`; ``0`` turns it off)
and ``storage.<key>``. Only ``outputMode("append")``: a stream adds rows.

Small batches: after a commit, the partitions it appended to are compacted when due
(:func:`partitioning.tables.compaction.auto_compact`: about every ``auto_compact_after``
appends to a partition, a few partitions per commit), so a partition's fragments stay
bounded; a compaction that loses to other writers is logged and left for the next one.

Spark builds this writer twice per batch, in fresh Python workers: once for the tasks
(pickled to them) and once for the commit. So construction takes no lease and keeps no
state: each task that writes rows stores its own lease (vacuum keeps its files until the
commit), and its commit message carries what the commit needs (the spec and schema the
rows were written with, the naming seed, the lease).

``foreachBatch`` users get the same guarantee from ``write_partitioned(batch_df, root,
write_id=batch_write_id(batch_df, batch_id))`` (:func:`batch_write_id`).
"""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql import DataFrame
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from partitioning.errors import InvalidInput, PartitioningError, SpecError
from partitioning.namespace import PartitionedNamespace
from partitioning.spec.schema import NamespaceSchema
from partitioning.storage.guard import Guard
from partitioning.storage.leases import LeaseRef, release_lease, take_lease
from partitioning.storage.roots import filesystem_of, storage_options_from
from partitioning.tables.compaction import auto_compact
from partitioning.tables.fragments import DEFAULT_MAX_ROWS_PER_FILE, FragmentWriter, add_partition_columns
from partitioning.tables.write import commit_write, conform_table
from pipelines.session import is_connect
from pipelines.source.writer import (
    DEFAULT_MAX_OPEN_WRITERS,
    LancePartitionedWriter,
    fragment_messages,
    positive_int,
    reported_errors,
    writer_options,
)

__all__ = [
    "BATCH_ID_PROPERTY",
    "DEFAULT_AUTO_COMPACT_AFTER",
    "QUERY_ID_PROPERTY",
    "STREAM_WRITE_OPTIONS",
    "LancePartitionedStreamWriter",
    "batch_write_id",
    "stream_write_id",
]

log = logging.getLogger("lance_partitioned")
STREAM_WRITE_OPTIONS = (
    "path",
    "checkpointLocation",
    "partition_by",
    "mergeSchema",
    "max_rows_per_file",
    "max_bytes_per_file",
    "max_open_writers",
    "auto_compact_after",
)
QUERY_ID_PROPERTY = "sql.streaming.queryId"  # the checkpoint's query id, set by Spark on every task
BATCH_ID_PROPERTY = "streaming.sql.batchId"
DEFAULT_AUTO_COMPACT_AFTER = 16


def stream_write_id(query_id: str, batch_id: int) -> str:
    """The write id of one micro-batch; ``foreachBatch`` users pass the same to ``write_partitioned``."""
    return f"{query_id}-{batch_id}"


def batch_write_id(
    batch_df: DataFrame,
    batch_id: int,
    *,
    checkpoint_location: str | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> str:
    """The write id of a ``foreachBatch`` batch, the one this sink uses: ``<query id>-<batch id>``.

    The query id is the one Spark keeps in the checkpoint: read from ``<checkpoint_location>/metadata``
    when given (as it must be on Spark Connect, whose ``foreachBatch`` function cannot see it
    otherwise), else from the streaming thread's ``sql.streaming.queryId`` property."""
    query = None
    if checkpoint_location is not None:
        fs, path = filesystem_of(f"{checkpoint_location.rstrip('/')}/metadata", storage_options)
        try:
            with fs.open_input_stream(path) as stream:
                query = json.loads(stream.read().decode("utf-8")).get("id")
        except (OSError, ValueError, AttributeError) as exc:
            raise InvalidInput(
                f"no streaming query metadata at {checkpoint_location}/metadata: {type(exc).__name__}: {exc}"
            ) from exc
    elif not is_connect(batch_df.sparkSession):
        query = batch_df.sparkSession.sparkContext.getLocalProperty(QUERY_ID_PROPERTY)  # classic-only
    if not query:
        raise InvalidInput(
            "batch_write_id: no streaming query id here; call it inside foreachBatch, and give "
            "checkpoint_location= on Spark Connect"
        )
    return stream_write_id(str(query), batch_id)


def stream_options(options: Mapping[str, str]) -> dict[str, str]:
    """The stream's options under their canonical names (:func:`pipelines.source.writer.writer_options`)."""
    hints = {"write_id": " (a stream's write id is <query id>-<batch id>)"}
    return writer_options(options, STREAM_WRITE_OPTIONS, "streaming write", hints)


def _count(options: Mapping[str, str], name: str, default: int) -> int:
    if name not in options:
        return default
    text = options[name].strip()
    if not text.isdigit():
        raise InvalidInput(f"option {name} must be a whole number (0 turns it off), got {options[name]!r}")
    return int(text)


@dataclass(frozen=True)
class BatchMessage(WriterCommitMessage):
    """One task's fragments (Arrow IPC; empty when it had no rows) and what the commit needs."""

    ipc: bytes
    lease: LeaseRef | None
    query_id: str | None
    spec_id: int
    schema_json: str
    seed: bytes


class LancePartitionedStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: Mapping[str, str], schema: StructType, overwrite: bool) -> None:
        root = next((v for k, v in options.items() if k.lower() == "path"), None)
        with reported_errors(f"stream into {root}"):
            if not root:
                raise SpecError("writeStream.format('lance_partitioned').start(root): the namespace root is required")
            if overwrite:
                raise InvalidInput(
                    "lance_partitioned streams take outputMode('append') only: a stream adds rows "
                    "(for complete or update results, write each batch with foreachBatch and write_partitioned)"
                )
            opts = stream_options(options)
            self.auto_compact_after = _count(opts, "auto_compact_after", DEFAULT_AUTO_COMPACT_AFTER)
            self.max_rows_per_file = positive_int(opts, "max_rows_per_file") or DEFAULT_MAX_ROWS_PER_FILE
            max_bytes = positive_int(opts, "max_bytes_per_file")
            max_open = positive_int(opts, "max_open_writers") or DEFAULT_MAX_OPEN_WRITERS
            self.storage_options = storage_options_from(options)
            ns = LancePartitionedWriter.namespace_for(root, opts, schema, self.storage_options)
            self.root = ns.root
            self.manifest_version = ns.manifest_version
            self.spec_id = ns.current_spec.spec_id
            self.fields = ns.current_spec.fields
            self.schema = ns.namespace_schema
            self.fragment_writer = FragmentWriter.for_namespace(
                ns, max_rows_per_file=self.max_rows_per_file, max_bytes_per_file=max_bytes, max_open_writers=max_open
            )

    def write(self, iterator: Iterator[pa.RecordBatch]) -> BatchMessage:
        with reported_errors(f"stream into {self.root}"):
            context = TaskContext.get()
            query = context.getLocalProperty(QUERY_ID_PROPERTY) if context is not None else None
            batch = context.getLocalProperty(BATCH_ID_PROPERTY) if context is not None else None
            rows = (b for b in iterator if b.num_rows)
            first = next(rows, None)
            message = BatchMessage(
                b"", None, query, self.spec_id, self.schema.to_json(), self.fragment_writer.planner.seed
            )
            if first is None:
                return message
            write_id = stream_write_id(query, int(batch)) if query and batch else None
            lease = take_lease(
                self.root, write_id=write_id, storage_options=self.storage_options, bases=(self.manifest_version,)
            )

            def keyed() -> Iterator[pa.RecordBatch]:
                for b in itertools.chain([first], rows):
                    table = conform_table(pa.Table.from_batches([b]), self.schema)
                    yield from add_partition_columns(table, self.fields, self.schema).to_batches()

            try:
                ipc = fragment_messages(self.fragment_writer, lease, keyed())
            except BaseException:
                release_lease(lease)
                raise
            return BatchMessage(ipc, lease, query, self.spec_id, message.schema_json, message.seed)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        ours = [m for m in messages if isinstance(m, BatchMessage)]
        try:
            with reported_errors(f"commit batch {batchId} of the stream into {self.root}"):
                self._commit(ours, batchId)
        finally:
            for m in ours:
                release_lease(m.lease)

    def _commit(self, ours: list[BatchMessage], batch_id: int) -> None:
        written = [m for m in ours if m.ipc]
        if not written:
            return
        queries = sorted({m.query_id or "" for m in ours})
        if len(queries) != 1 or not queries[0]:
            raise PartitioningError(
                f"the tasks of batch {batch_id} reported query ids {queries}, not one: "
                "this writer runs only in a Spark streaming query"
            )
        query = queries[0]
        first = written[0]
        combined = pa.concat_tables(pa.ipc.open_stream(m.ipc).read_all() for m in written)
        ns = PartitionedNamespace.load(self.root, self.storage_options)
        leases = sorted((m.lease for m in written if m.lease is not None), key=lambda ref: ref.stored)
        result = commit_write(
            ns,
            combined,
            mode="append",
            spec_id=first.spec_id,
            schema=NamespaceSchema.from_json(first.schema_json),
            write_id=stream_write_id(query, batch_id),
            max_rows_per_file=self.max_rows_per_file,
            naming_seed=first.seed,
            guard=Guard.of_ref(leases[0] if leases else None, self.root, self.storage_options),
        )
        log.info("stream batch %s: %s", batch_id, result.summary())
        if result.skipped is None and self.auto_compact_after:
            self._compact(ns, set(combined.column("object_id").to_pylist()))

    def _compact(self, ns: PartitionedNamespace, object_ids: set[str]) -> None:
        try:
            ns.refresh()
            report = auto_compact(ns, object_ids, every=self.auto_compact_after)
        except PartitioningError as exc:
            log.warning("stream into %s: automatic compaction left for later: %s", self.root, exc)
            return
        if report is not None:
            log.info("stream into %s: %s", self.root, report.summary())

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to undo: the batch's fragments are invisible; its leases end, and vacuum
        deletes the files (:func:`partitioning.tables.vacuum.vacuum`)."""
        for m in messages:
            if isinstance(m, BatchMessage):
                release_lease(m.lease)
