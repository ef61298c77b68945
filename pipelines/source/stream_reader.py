"""``spark.readStream.format("lance_partitioned").load(root)``: the rows each ``__manifest`` version appends.

An offset is ``{"version": N}``: every row up to ``__manifest`` version N was read. The
first batch of a new query reads the whole namespace at the version it ends on (as a
Delta stream starts from a snapshot), unless ``startingVersion`` is given: ``latest``
(only what is appended from now on) or a version number N (what versions N and later
append). Later batches read what the versions in their range appended
(:func:`partitioning.plan.appended.appended_between`); compactions, index builds and other
operations that change no row are passed over. A version that changed rows otherwise (an
overwrite, delete, merge, update, restore or backfill) fails the query in one line
naming it, or with ``on_change`` = ``skip`` is logged and passed over (its rows are not
re-read). Restarted from its checkpoint, the query reads from the offset Spark recorded.

Options: ``startingVersion``, ``on_change`` (``fail`` or ``skip``), ``storage.<key>``.
The columns are the namespace's when the query started; a later change that adds
columns is read without them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from partitioning.errors import InvalidInput, PartitioningError
from partitioning.namespace import PartitionedNamespace
from partitioning.plan.appended import appended_between, snapshot_slices
from partitioning.plan.table_rows import TableSlice
from partitioning.spec.schema import NamespaceSchema
from partitioning.sql.filters import TrueFilter
from partitioning.storage.manifest import ManifestStore
from pipelines.source.slices import read_slice
from pipelines.source.writer import reported_errors
from pipelines.spark_errors import hide_worker_traceback

__all__ = ["ON_CHANGE", "STREAM_READ_OPTIONS", "LancePartitionedStreamReader", "RefusedStreamReader"]

log = logging.getLogger("lance_partitioned")
STREAM_READ_OPTIONS = ("path", "startingVersion", "on_change")
ON_CHANGE = ("fail", "skip")
SNAPSHOT = -1  # the offset of a query that has read nothing and starts from a snapshot


@dataclass(frozen=True)
class StreamSlice(InputPartition):
    piece: TableSlice


class LancePartitionedStreamReader(DataSourceStreamReader):
    def __init__(self, ns: PartitionedNamespace, schema: StructType, options: Mapping[str, str]) -> None:
        self.root = ns.root
        self.storage_options = ns.storage_options
        self.schema_json = ns.namespace_schema.to_json()
        self.columns = tuple(schema.fieldNames())
        on_change = (options.get("on_change") or "fail").strip().lower()
        if on_change not in ON_CHANGE:
            raise InvalidInput(f"option on_change {options['on_change']!r} is not one of: {', '.join(ON_CHANGE)}")
        self.on_change = on_change
        self.start = self._starting(options.get("startingversion"))

    def _starting(self, text: str | None) -> int:
        if text is None:
            return SNAPSHOT
        latest = self._latest()
        if text.strip().lower() == "latest":
            return latest
        try:
            version = int(text)
        except ValueError:
            version = 0
        if not 1 <= version <= latest:
            raise InvalidInput(
                f"option startingVersion must be 'latest' or a __manifest version from 1 to {latest}, got {text!r}"
            )
        return version - 1

    def _latest(self) -> int:
        return ManifestStore(self.root, self.storage_options).dataset().version

    def initialOffset(self) -> dict:
        return {"version": self.start}

    def latestOffset(self, start: dict | None = None, limit: object = None) -> dict:
        with reported_errors(f"read the stream of {self.root}"):
            return {"version": self._latest()}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        with reported_errors(f"read the stream of {self.root}"):
            first, last = int(start["version"]), int(end["version"])
            if first == SNAPSHOT:
                ns = PartitionedNamespace.load(self.root, self.storage_options, manifest_version=last)
                return [StreamSlice(piece) for piece in snapshot_slices(ns)]
            if last <= first:
                return []
            slices, changes = appended_between(self.root, first, last, self.storage_options)
            for change in changes:
                if self.on_change == "fail":
                    raise PartitioningError(
                        f"stream of {self.root}: {change.line()}, not an append; restart the query with a new "
                        "checkpoint (and startingVersion), or set option on_change=skip to pass such versions over"
                    )
                log.warning("stream of %s: passing over %s", self.root, change.line())
            return [StreamSlice(piece) for piece in slices]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, StreamSlice)
        schema = NamespaceSchema.from_json(self.schema_json)
        yield from read_slice(partition.piece, schema, self.columns, TrueFilter(), storage_options=self.storage_options)

    def commit(self, end: dict) -> None:
        """Nothing to release: offsets are ``__manifest`` versions, read in place."""


class RefusedStreamReader(DataSourceStreamReader):
    """A stream that could not be set up: every call raises its error. PySpark 4.3's stream
    source runner masks an error raised by ``streamReader()`` itself (its ``finally`` calls
    ``stop()`` on a reader it never got: ``UnboundLocalError``), so the error waits here."""

    def __init__(self, error: PartitioningError) -> None:
        self.error_type = type(error)
        self.message = str(error)

    def _raise(self) -> None:
        hide_worker_traceback()
        raise self.error_type(self.message)

    def initialOffset(self) -> dict:
        self._raise()
        return {}

    def latestOffset(self, start: dict | None = None, limit: object = None) -> dict:
        self._raise()
        return {}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        self._raise()
        return []

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        self._raise()
        yield from ()
