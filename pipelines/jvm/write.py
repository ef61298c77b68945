"""Writes the JVM layer drives (``lp.write``): inserts, overwrites and the row changes of SQL DML.

- ``append``, ``overwrite`` (``INSERT OVERWRITE`` in static mode, a replaced table) and
  ``dynamic`` (the partitions present in the rows) go to the data source writer
  (:class:`pipelines.source.writer.LancePartitionedWriter`).
- ``delta``: the rows of ``DELETE FROM`` / ``UPDATE`` / ``MERGE INTO``, as Spark's delta
  write hands them to the Java bridge writer: ``__op`` (``delete``, ``update``,
  ``reinsert``, ``insert``), the row id ``_lance_rowaddr``, the metadata ``_lance_table``
  and the new row. Tasks write the new rows as fragments (as any write) and collect the
  addresses that go; the driver commits, per touched table, one dataset version (deletion
  vectors plus the new fragments) and ONE ``__manifest`` commit
  (:func:`partitioning.tables.rewrites.commit_rewrite`), refused when a table the statement read
  changed since (``lp.read``: the scan's tables and versions).
- ``replace``: ``INSERT OVERWRITE ... PARTITION`` / ``writeTo(t).overwrite(condition)``: with a
  condition on identity partition columns (``lp.exact``) the tables it selects are replaced;
  with any other (``lp.where``) the rows it selects are deleted and the new ones added, in
  ONE commit; a new row outside the condition refuses the write.
- ``stage``: the rows of a staged ``CREATE TABLE ... AS SELECT`` / ``REPLACE TABLE``
  (:mod:`pipelines.jvm.stage`).
- ``append`` with ``lp.upsert``: the source rows of an upserting SQL ``MERGE``
  (:mod:`pipelines.jvm.upsert_rows`).
- ``delete_tables``: a metadata-only ``DELETE`` (whole partitions by an identity-column
  condition) or ``TRUNCATE``: no rows, ONE commit removing the tables (``lp.exact``); or a
  ``DELETE`` whose rows this process finds exactly (``lp.rows``, :mod:`pipelines.jvm.delete_rows`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from partitioning.errors import ConcurrentModification, InvalidInput
from partitioning.namespace import PartitionedNamespace
from partitioning.plan.identity_match import identity_columns, matching_tables
from partitioning.plan.table_rows import ROW_ADDRESS, ROW_TABLE, addresses_by_table
from partitioning.sql.binding import bind
from partitioning.sql.filters import Dialect, TrueFilter, columns_of, to_sql
from partitioning.sql.predicates import predicates_from_json
from partitioning.sql.rowfilter import arrow_predicate
from partitioning.storage.guard import Guard, guarded
from partitioning.storage.history import Operation
from partitioning.storage.leases import release_lease, take_lease
from partitioning.storage.roots import storage_options_from
from partitioning.tables.deletes import rows_matching
from partitioning.tables.fragments import FragmentWriter, add_partition_columns
from partitioning.tables.messages import part_column
from partitioning.tables.rewrites import ReadSet, ReadSetChanged, Touches, commit_rewrite
from partitioning.tables.write import commit_write, conform_table
from pipelines.jvm.drop import drop_matching
from pipelines.source.writer import LancePartitionedWriter, fragment_messages, reported_errors

__all__ = ["bridge_writer"]

OP = "__op"
_DIALECT = Dialect("spark", "UTC", case_sensitive=True)
_COMMANDS = {"DELETE": "DELETE", "UPDATE": "UPDATE", "MERGE": "MERGE"}


def _plain(options: Mapping[str, str]) -> dict[str, str]:
    """The options the data source writer takes (the JVM layer's own, ``lp.*``, and catalog keys dropped)."""
    drop = {"provider", "owner", "location", "comment", "external", "is_managed_location", "versionasof"}
    return {k: v for k, v in options.items() if not k.lower().startswith("lp.") and k.lower() not in drop}


def bridge_writer(mode: str, options: dict[str, str], schema: StructType, overwrite: bool) -> DataSourceWriter:
    lowered = {k.lower(): v for k, v in options.items()}
    if lowered.get("path"):
        from pipelines.shared_roots import check_source_root

        check_source_root(lowered["path"], lowered.get("lp.master"), lowered.get("lp.connect") == "true")
    if mode == "append" and lowered.get("lp.upsert"):
        from pipelines.jvm.upsert_rows import UpsertWriter

        return UpsertWriter(lowered, schema, lowered["lp.upsert"])
    if mode in ("append", "overwrite", "dynamic"):
        plain = _plain(options)
        if mode == "dynamic":
            plain["partitionOverwriteMode"] = "dynamic"
        # "overwrite" (Spark's truncate): the write's partitionOverwriteMode option, else the
        # session's setting as the tasks see it (as for Spark's file sources)
        from pipelines.source.datasource import new_writer

        return new_writer(plain, schema, mode != "append", lowered.get("lp.connect") == "true")
    if mode == "replace":
        plain = {**_plain(options), "partitionOverwriteMode": "dynamic"}
        if lowered.get("lp.where"):
            return ReplaceRowsWriter(plain, schema, lowered["lp.where"])
        return ReplaceWriter(plain, schema, lowered.get("lp.exact"))
    if mode == "stage":
        from pipelines.jvm.stage import StagedWriter

        return StagedWriter(_plain(options), schema, lowered.get("lp.stage"))
    if mode == "delta":
        return DeltaWriter(lowered, schema)
    if mode == "delete_tables":
        return DeleteTablesWriter(lowered)
    raise InvalidInput(f"unknown lp.write mode {mode!r} (append, overwrite, dynamic, stage, delta, delete_tables)")


@dataclass(frozen=True)
class _Changes(WriterCommitMessage):
    """One task's new fragments (Arrow IPC of commit messages) and the row addresses that go."""

    ipc: bytes
    tables: tuple[str, ...]
    addresses: tuple[int, ...]
    updated: int = 0


class DeltaWriter(DataSourceArrowWriter):
    """The row changes of one SQL DML statement (see the module)."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        with reported_errors("prepare the statement's write"):
            self.root = options["path"]
            self.storage_options = storage_options_from(options)
            self.command = _COMMANDS.get((options.get("lp.command") or "").upper(), "MERGE")
            self.base_version = int(options["lp.version"])
            self.read = {str(k): int(v) for k, v in json.loads(options.get("lp.read") or "{}").items()}
            self.filter_json = options.get("lp.filter")
            ns = PartitionedNamespace.load(self.root, self.storage_options, manifest_version=self.base_version)
            self.root = ns.root
            self.data_columns = [f.name for f in schema.fields if f.name not in (OP, ROW_ADDRESS, ROW_TABLE)]
            self.schema = ns.namespace_schema
            missing = [c for c in self.data_columns if c not in self.schema.arrow.names]
            if missing:
                raise InvalidInput(f"{self.command}: column {missing[0]!r} is not in the table")
            self.fragment_writer = FragmentWriter.for_namespace(ns)
            self.spec = ns.current_spec
            self.lease = take_lease(ns.root, storage_options=ns.storage_options, bases=(self.base_version,))

    def write(self, iterator: Iterator[pa.RecordBatch]) -> _Changes:
        with reported_errors(f"{self.command} on {self.root}"):
            tables: list[str] = []
            addresses: list[int] = []
            updated = [0]

            def inserted() -> Iterator[pa.RecordBatch]:
                for batch in iterator:
                    table = pa.Table.from_batches([batch])
                    op = table.column(OP)
                    updated[0] += pc.sum(pc.cast(pc.equal(op, "update"), pa.int64())).as_py() or 0
                    gone = pc.is_in(op, pa.array(["delete", "update"]))
                    if pc.any(gone).as_py():
                        chosen = table.filter(gone)
                        tables.extend(chosen.column(ROW_TABLE).to_pylist())
                        addresses.extend(chosen.column(ROW_ADDRESS).to_pylist())
                    new = table.filter(pc.is_in(op, pa.array(["update", "reinsert", "insert"])))
                    if new.num_rows:
                        rows = conform_table(new.select(self.data_columns), self.schema)
                        yield from add_partition_columns(rows, self.spec.fields, self.schema).to_batches()

            ipc = fragment_messages(self.fragment_writer, self.lease, inserted())
            return _Changes(ipc, tuple(tables), tuple(int(a) for a in addresses), updated[0])

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        try:
            with reported_errors(f"commit the {self.command} on {self.root}"):
                self._commit([m for m in messages if isinstance(m, _Changes)])
        finally:
            release_lease(self.lease)

    def _commit(self, changes: list[_Changes]) -> None:
        parts = [pa.ipc.open_stream(c.ipc).read_all() for c in changes]
        messages = pa.concat_tables(parts) if parts else self.fragment_writer.output_schema.empty_table()
        deletions = addresses_by_table(
            [t for c in changes for t in c.tables], [a for c in changes for a in c.addresses]
        )
        ns = PartitionedNamespace.load(self.root, self.storage_options)
        arrow = ns.namespace_schema.arrow
        condition = bind(predicates_from_json(self.filter_json), arrow, _DIALECT)
        # a superset of the rows the statement changes; a MERGE's ON never reaches the connector
        touches = Touches.of_filter(condition, arrow, blind_appends=self.command == "MERGE")
        read_set = ReadSet(None if isinstance(condition, TrueFilter) else condition, _DIALECT, touches=touches)
        read = dict(self.read)
        updated = sum(c.updated for c in changes)
        with guarded(ns.root, ns.storage_options, bases=(self.base_version,)) as guard:
            try:
                commit_rewrite(
                    ns,
                    messages,
                    deletions,
                    read_set=read_set,
                    read=read,
                    mode=self.command.lower(),
                    spec_id=self.fragment_writer.planner.spec_id,
                    schema=self.fragment_writer.schema,
                    operation=Operation(self.command, {"sql": "true"}),
                    rows_updated=updated,
                    guard=guard,
                )
            except ReadSetChanged as exc:
                why = str(exc).removeprefix(f"{ns.root}: ")
                raise ConcurrentModification(
                    f"{self.command} on {ns.root}: {why}; nothing was committed, run the statement again"
                ) from exc

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        release_lease(self.lease)


class ReplaceWriter(LancePartitionedWriter):
    """``INSERT OVERWRITE t PARTITION (c = 'x')`` / ``writeTo(t).overwrite(condition)``: the
    partitions the condition (on identity partition columns) selects are replaced by the rows,
    in ONE commit; a row outside the condition refuses the write (Delta's and Iceberg's rule)."""

    def __init__(self, options: dict[str, str], schema: StructType, condition_json: str | None) -> None:
        super().__init__(options, schema, True)
        self.condition_json = condition_json

    def _commit(self, messages: list[WriterCommitMessage | None]) -> None:
        with reported_errors(f"commit the overwrite of {self.root}"):
            _, combined = self.fragments(messages)
            ns = PartitionedNamespace.load(self.root, self.storage_options)
            condition = bind(predicates_from_json(self.condition_json), ns.namespace_schema.arrow, _DIALECT)
            self._check_rows(ns, combined, condition)

            def selected(state: PartitionedNamespace) -> list[str]:
                return [t.object_id for t in matching_tables(state, state.plan_scan(condition).tasks, condition)]

            commit_write(
                ns,
                combined,
                mode="overwrite_partitions",
                spec_id=self.spec_id,
                schema=self.fragment_writer.schema,
                write_id=self.write_id,
                max_rows_per_file=self.max_rows_per_file,
                naming_seed=self.fragment_writer.planner.seed,
                guard=Guard.of_ref(self.lease, self.root, self.storage_options),
                replace=selected,
            )

    def _check_rows(self, ns: PartitionedNamespace, messages: pa.Table, condition: Any) -> None:
        """Every written partition satisfies the condition (it is on identity columns only)."""
        spec = ns.specs[self.spec_id]
        fields = identity_columns(ns, self.spec_id)
        columns = sorted(columns_of(condition))
        if not columns or messages.num_rows == 0:
            return
        arrow = pa.schema([ns.namespace_schema.arrow.field(c) for c in columns])
        keys = {
            tuple(k) for k in zip(*[messages.column(part_column(f)).to_pylist() for f in spec.field_ids], strict=True)
        }
        index = {fid: i for i, fid in enumerate(spec.field_ids)}
        values = pa.table(
            {c: pa.array([k[index[fields[c]]] for k in keys], arrow.field(c).type) for c in columns}, schema=arrow
        )
        outside = values.num_rows - values.filter(arrow_predicate(condition, arrow)).num_rows
        if outside:
            raise InvalidInput(
                f"overwrite of {ns.root}: {outside} partition(s) of the rows are outside the overwrite's condition "
                f"{to_sql(condition)}; nothing was written"
            )


class ReplaceRowsWriter(LancePartitionedWriter):
    """``writeTo(t).overwrite(condition)`` with a condition on other than identity partition
    columns (Delta's ``replaceWhere``): the rows the condition selects are deleted and the new
    rows added, in ONE commit; a new row the condition does not select (false or NULL)
    refuses the write in its task. A table the statement read that changed before its commit
    makes it select the rows again, up to :data:`ATTEMPTS` times."""

    ATTEMPTS = 4

    def __init__(self, options: dict[str, str], schema: StructType, where_json: str) -> None:
        super().__init__(options, schema, True)
        self.where_json = where_json
        with reported_errors(f"overwrite {self.root} where a condition holds"):
            arrow_predicate(self.condition(), self.schema.arrow)  # refused now if it cannot be applied here

    def condition(self) -> Any:
        return bind(predicates_from_json(self.where_json), self.schema.arrow, _DIALECT)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Any:
        condition = self.condition()
        selects = arrow_predicate(condition, self.schema.arrow)

        def checked() -> Iterator[pa.RecordBatch]:
            for batch in iterator:
                rows = conform_table(pa.Table.from_batches([batch]), self.schema)
                outside = rows.num_rows - rows.filter(selects).num_rows
                if outside:
                    raise InvalidInput(
                        f"overwrite of {self.root}: {outside} row(s) do not match the overwrite's condition "
                        f"{to_sql(condition)}; nothing was written"
                    )
                yield batch

        return super().write(checked())

    def _commit(self, messages: list[WriterCommitMessage | None]) -> None:
        with reported_errors(f"commit the overwrite of {self.root}"):
            _, combined = self.fragments(messages)
            guard = Guard.of_ref(self.lease, self.root, self.storage_options)
            for _ in range(self.ATTEMPTS):
                ns = PartitionedNamespace.load(self.root, self.storage_options)
                condition = bind(predicates_from_json(self.where_json), ns.namespace_schema.arrow, _DIALECT)
                tasks = list(ns.plan_scan(condition))
                selects = arrow_predicate(condition, ns.namespace_schema.arrow)
                deletions = rows_matching(ns, tasks, sorted(columns_of(condition)), partial(_indexes, selects=selects))
                try:
                    commit_rewrite(
                        ns,
                        combined,
                        deletions,
                        read_set=ReadSet(
                            condition, _DIALECT, touches=Touches.of_filter(condition, ns.namespace_schema.arrow)
                        ),
                        read={t.object_id: int(t.read_version) for t in tasks if t.read_version is not None},
                        mode="overwrite",
                        spec_id=self.spec_id,
                        schema=self.fragment_writer.schema,
                        write_id=self.write_id,
                        operation=Operation("WRITE", {"mode": "overwrite", "condition": to_sql(condition)}),
                        guard=guard,
                    )
                    return
                except ReadSetChanged:
                    continue
            raise ConcurrentModification(
                f"overwrite of {self.root}: the rows its condition selects changed {self.ATTEMPTS} times before "
                "its commit; nothing was committed, run the statement again"
            )


def _indexes(view: pa.Table, *, selects: Any) -> list[int]:
    """The indexes of ``view``'s rows the Arrow expression ``selects`` keeps."""
    numbered = view.append_column("__lance_row", pa.array(range(view.num_rows), pa.int64()))
    return numbered.filter(selects).column("__lance_row").to_pylist()


class DeleteTablesWriter(DataSourceWriter):
    """A metadata-only ``DELETE`` or ``TRUNCATE``: ONE commit removing whole tables, no rows."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.options = dict(options)

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        raise InvalidInput("a metadata-only delete writes no rows")

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        with reported_errors(f"delete from {self.options.get('path')}"):
            if self.options.get("lp.rows"):
                from pipelines.jvm.delete_rows import delete_matching_rows

                delete_matching_rows(self.options["path"], self.options["lp.rows"], storage_options_from(self.options))
                return
            drop_matching(
                self.options["path"],
                self.options.get("lp.exact"),
                int(self.options["lp.version"]) if self.options.get("lp.version") else None,
                storage_options_from(self.options),
                truncate=self.options.get("lp.truncate") == "true",
            )
