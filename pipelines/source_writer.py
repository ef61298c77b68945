"""Writes through the ``lance_partitioned`` data source.

``df.write.format("lance_partitioned").mode("append" | "overwrite").option(...).save(root)``
goes through the same protocol as :func:`pipelines.write.write_partitioned`: tasks
write fragments and return commit messages, and ``commit`` makes the dataset commits
and ONE ``__manifest`` commit. Spark gives a data source writer its input as is, so
partition values are computed with the Arrow transforms inside the tasks and each
task keeps at most ``max_open_writers`` partition buffers.

Options: ``partition_by`` (``"day(ts); bucket[16](user_id)"`` or a JSON list, to
create the namespace), ``write_id``, ``max_rows_per_file``, ``max_open_writers``,
and ``partitionOverwriteMode=dynamic`` (or the session setting
``spark.sql.sources.partitionOverwriteMode``) to make ``overwrite`` replace only the
partitions present in the DataFrame.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from partitioning.errors import SpecError
from partitioning.manifest import ManifestStore
from partitioning.namespace import PartitionedNamespace
from partitioning.spec import parse_partition_by
from partitioning.write import (
    DEFAULT_MAX_ROWS_PER_FILE,
    FragmentWriter,
    add_partition_columns,
    commit_write,
    conform_table,
)
from pipelines.schema import namespace_schema_from_spark

__all__ = ["LancePartitionedWriter"]


def _partition_by(text: str) -> list[str]:
    text = text.strip()
    if text.startswith("["):
        value = json.loads(text)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise SpecError(f"option partition_by must be a JSON list of strings, got {text!r}")
        return value
    return [part.strip() for part in text.split(";") if part.strip()]


@dataclass(frozen=True)
class _Messages(WriterCommitMessage):
    """One task's commit messages, as Arrow IPC bytes."""

    ipc: bytes


class LancePartitionedWriter(DataSourceArrowWriter):
    def __init__(self, options: Mapping[str, str], schema: StructType, overwrite: bool) -> None:
        root = options.get("path")
        if not root:
            raise SpecError("save(path) is required: the namespace root")
        self.root = root
        self.write_id = options.get("write_id")
        dynamic = options.get("partitionOverwriteMode", options.get("partitionoverwritemode", "static"))
        if overwrite:
            self.mode = "overwrite_partitions" if dynamic.lower() == "dynamic" else "overwrite"
        else:
            self.mode = "append"
        max_rows = int(options.get("max_rows_per_file", DEFAULT_MAX_ROWS_PER_FILE))
        if ManifestStore(root).exists():
            ns = PartitionedNamespace.load(root)
        else:
            if "partition_by" not in options:
                raise SpecError(f"no namespace at {root}; set .option('partition_by', 'day(ts); country') to create it")
            ns_schema = namespace_schema_from_spark(schema)
            ns = PartitionedNamespace.create(
                root, ns_schema, parse_partition_by(_partition_by(options["partition_by"]), ns_schema)
            )
        spec = ns.current_spec
        self.spec_id = spec.spec_id
        self.fields = spec.fields
        self.schema = ns.namespace_schema
        self.max_rows_per_file = max_rows
        self.fragment_writer = FragmentWriter.for_namespace(
            ns, max_rows_per_file=max_rows, max_open_writers=int(options.get("max_open_writers", 32))
        )

    def write(self, iterator: Iterator[pa.RecordBatch]) -> _Messages:
        def keyed() -> Iterator[pa.RecordBatch]:
            for batch in iterator:
                table = conform_table(pa.Table.from_batches([batch]), self.schema)
                yield from add_partition_columns(table, self.fields, self.schema).to_batches()

        batches = list(self.fragment_writer(keyed()))
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, self.fragment_writer.output_schema) as out:
            for b in batches:
                out.write_batch(b)
        return _Messages(sink.getvalue().to_pybytes())

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        tables = [pa.ipc.open_stream(m.ipc).read_all() for m in messages if isinstance(m, _Messages)]
        combined = pa.concat_tables(tables) if tables else self.fragment_writer.output_schema.empty_table()
        ns = PartitionedNamespace.load(self.root)
        commit_write(
            ns,
            combined,
            mode=self.mode,  # type: ignore[arg-type]
            spec_id=self.spec_id,
            schema=self.fragment_writer.schema,
            write_id=self.write_id,
            max_rows_per_file=self.max_rows_per_file,
        )

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Nothing to undo: uncommitted fragments are invisible; ``ns.orphans()`` lists them."""
