"""SQL ``MERGE INTO t USING s ON t.k = s.k WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED
THEN INSERT *`` through the upsert engine of ``merge_partitioned``: no join in Spark.

With the session extension the JVM layer's ``lance_merge`` procedure writes the source's rows
to the table with the option ``lp.upsert`` (the key columns, JSON). Such a merge changes the
target exactly as "delete the target rows whose key a source row has, append the source"
(:mod:`pipelines.write.upsert`), so Spark's tasks write the source's rows as fragments, as any
append, and report their keys; the commit reads the key columns of the target's tables here
(:func:`pipelines.write.upsert.matched_rows`), deletes the matched rows and adds the
fragments in ONE ``__manifest`` commit, probing again on the latest state when a table it
read changed (:func:`pipelines.write.rounds.rerun_on_conflict`). Two source rows matching one
target row refuse the merge, as Spark's ``MERGE`` does. When the target's keys cannot be
probed here (too many rows, a table this process cannot read) or one key is held by two
target rows (Spark would update both), the commit raises :data:`DECLINED` and the JVM layer
runs the statement as Spark plans it; the fragments written are the aborted write's.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from partitioning.errors import InvalidInput, PartitioningError
from partitioning.namespace import PartitionedNamespace
from partitioning.plan.table_rows import ROW_ADDRESS, ROW_TABLE, addresses_of
from partitioning.sql.filters import Dialect
from partitioning.storage.history import Operation
from partitioning.storage.leases import release_lease, take_lease
from partitioning.storage.roots import storage_options_from
from partitioning.tables.fragments import FragmentWriter, add_partition_columns
from partitioning.tables.rebase import Touches
from partitioning.tables.rewrites import ReadSet, RewriteResult, commit_rewrite
from partitioning.tables.write import conform_table
from pipelines.source.writer import fragment_messages, reported_errors
from pipelines.write.matches import MAX_KEY_ROWS, schema_keys_comparable
from pipelines.write.rounds import DEFAULT_ATTEMPTS, Round, rerun_on_conflict
from pipelines.write.upsert import matched_rows, open_targets, present_keys, refuse_duplicate_keys

__all__ = ["DECLINED", "UpsertWriter"]

DECLINED = "the upsert engine declined this MERGE"  # the JVM layer then runs Spark's MERGE
_DIALECT = Dialect("spark", "UTC", case_sensitive=True)


class EngineDeclined(PartitioningError):
    """The merge is not one the upsert engine does exactly as Spark; nothing was committed."""


@dataclass(frozen=True)
class _Upserted(WriterCommitMessage):
    """One task's new fragments and the keys of its rows (both Arrow IPC)."""

    fragments: bytes
    keys: bytes


def _ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as out:
        out.write_table(table)
    return sink.getvalue().to_pybytes()


class UpsertWriter(DataSourceArrowWriter):
    """The source rows of one upserting SQL ``MERGE`` (see the module)."""

    def __init__(self, options: Mapping[str, str], schema: StructType, keys_json: str) -> None:
        with reported_errors("prepare the MERGE's write"):
            self.storage_options = storage_options_from(options)
            ns = PartitionedNamespace.load(options["path"], self.storage_options)
            self.root = ns.root
            self.keys = [str(k) for k in json.loads(keys_json)]
            self.schema = ns.namespace_schema
            if sorted(schema.names) != sorted(self.schema.arrow.names) or not self.keys:
                raise EngineDeclined(f"{DECLINED}: the source's columns are not the table's")
            if not schema_keys_comparable(schema, self.schema, self.keys):
                raise EngineDeclined(f"{DECLINED}: a key's type does not compare in Arrow as in Spark")
            self.fragment_writer = FragmentWriter.for_namespace(ns)
            self.spec = ns.current_spec
            self.lease = take_lease(ns.root, storage_options=ns.storage_options, bases=(ns.manifest_version,))

    def write(self, iterator: Iterator[pa.RecordBatch]) -> _Upserted:
        with reported_errors(f"MERGE into {self.root}"):
            keys: list[pa.Table] = []

            def rows() -> Iterator[pa.RecordBatch]:
                for batch in iterator:
                    table = conform_table(pa.Table.from_batches([batch]), self.schema)
                    keys.append(table.select(self.keys))
                    yield from add_partition_columns(table, self.spec.fields, self.schema).to_batches()

            fragments = fragment_messages(self.fragment_writer, self.lease, rows())
            empty = self.schema.arrow.empty_table().select(self.keys)
            return _Upserted(fragments, _ipc(pa.concat_tables([empty, *keys]) if keys else empty))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        try:
            with reported_errors(f"commit the MERGE on {self.root}"):
                self._commit([m for m in messages if isinstance(m, _Upserted)])
        finally:
            release_lease(self.lease)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        release_lease(self.lease)

    def _commit(self, parts: list[_Upserted]) -> RewriteResult:
        read_all = [pa.ipc.open_stream(p.fragments).read_all() for p in parts]
        messages = pa.concat_tables(read_all) if read_all else self.fragment_writer.output_schema.empty_table()
        keys = [pa.ipc.open_stream(p.keys).read_all() for p in parts]
        source = pa.concat_tables(keys) if keys else self.schema.arrow.empty_table().select(self.keys)
        wanted = present_keys(source, self.keys)
        if wanted.num_rows > MAX_KEY_ROWS:
            raise EngineDeclined(f"{DECLINED}: the source has more than {MAX_KEY_ROWS:,} keys")
        started = time.monotonic()
        schema_json = self.schema.to_json()

        def attempt(run: Round) -> RewriteResult:
            ns = run.ns
            if ns.namespace_schema.to_json() != schema_json:
                raise InvalidInput(f"MERGE on {ns.root}: the table's schema changed while it ran; run it again")
            touches = Touches.of_sql(None, _DIALECT, ns.namespace_schema.arrow, wanted)
            read_set = ReadSet(None, _DIALECT, touches=touches)
            read = read_set.plan(ns)
            opened = open_targets(ns, read)
            matched = matched_rows(ns, read, self.keys, wanted, opened=opened) if opened is not None else None
            if matched is None:
                raise EngineDeclined(f"{DECLINED}: the target's keys were not probed here (or one is held twice)")
            refuse_duplicate_keys(matched, source, self.keys)
            return commit_rewrite(
                ns,
                messages,
                addresses_of(matched, ROW_TABLE, ROW_ADDRESS),
                read_set=read_set,
                read=read,
                mode="merge",
                spec_id=self.fragment_writer.planner.spec_id,
                schema=self.fragment_writer.schema,
                operation=Operation("MERGE", {"sql": "true", "on": ",".join(self.keys)}),
                started=started,
                rows_updated=matched.num_rows,
                guard=run.guard,
                intent=run.intent,
                opened=opened,
            )

        return rerun_on_conflict(self.root, "MERGE", DEFAULT_ATTEMPTS, attempt, self.storage_options)
