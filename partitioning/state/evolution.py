"""Partition spec and schema evolution of a namespace.

A new spec version N+1 adds ``partition_spec_v<N+1>`` and the ``v<N+1>`` row; existing
partitions stay where they are. A schema change rewrites the ``schema`` property with
an optimistic check, then the ``v<N>`` rows, so writes begun under the old schema
conflict and refuse to commit. The :class:`~partitioning.namespace.PartitionedNamespace`
methods of the same names call these functions.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeAlias

import lance
import pyarrow as pa
from lance.dataset import LanceOperation, Transaction
from lance.schema import LanceSchema

from partitioning.errors import ConcurrentModification, SchemaError, SpecError, translate_lance_errors
from partitioning.spec.arrow_json import parse_type
from partitioning.spec.partition_by import parse_partition_by
from partitioning.spec.partition_spec import PartitionField, PartitionSpec
from partitioning.spec.schema import NamespaceSchema
from partitioning.state.commit_rows import lock_rows
from partitioning.state.commits import commit_metadata, merge_manifest_rows
from partitioning.state.namespace_state import ManifestHandle
from partitioning.storage.history import Operation
from partitioning.storage.manifest import SCHEMA_KEY, SPEC_KEY_PREFIX, ManifestStore, partition_column

__all__ = [
    "ColumnsLike",
    "add_columns",
    "coerce_columns",
    "drop_column",
    "evolve_partition_spec",
    "evolve_schema",
    "rename_column",
    "widen_column",
    "with_widened_column",
    "without_column",
]

ColumnsLike: TypeAlias = pa.Schema | pa.Field | Sequence[pa.Field] | Mapping[str, pa.DataType | str]


def evolve_partition_spec(
    ns: ManifestHandle, fields: PartitionSpec | str | Mapping[str, Any] | Sequence[str | PartitionField]
) -> PartitionSpec:
    """Add spec version N+1 made of ``fields``; see :meth:`PartitionedNamespace.evolve_partition_spec`.

    Up to three ``__manifest`` commits (new partition columns, the ``v<N+1>`` row, the
    spec property), each recorded as ``EVOLVE_SPEC``."""
    started = time.monotonic()
    ns.refresh()
    schema = ns._state.schema
    new_id = max(ns._state.specs) + 1
    if isinstance(fields, PartitionSpec | str | Mapping):
        requested = list(PartitionSpec.coerce(fields).fields)
    else:
        texts = [f for f in fields if isinstance(f, str)]
        parsed = iter(parse_partition_by(texts, schema, spec_id=new_id).fields) if texts else iter(())
        requested = [next(parsed) if isinstance(f, str) else f for f in fields]
    known = {f.field_id: f for spec in ns._state.specs.values() for f in spec.fields}
    by_signature = {f.signature: f for f in known.values()}
    resolved = []
    for f in requested:
        same = by_signature.get(f.signature)
        if same is not None:
            resolved.append(same)
            continue
        clash = known.get(f.field_id)
        if clash is not None:
            raise SpecError(
                f"field_id {f.field_id!r} already means {clash} in an earlier spec; a field with a different "
                f"source or transform needs a new id (e.g. '{f.field_id}_v{new_id}' via 'AS')"
            )
        resolved.append(f)
    spec = PartitionSpec(new_id, resolved)
    spec.validate(schema)
    ds = ns._store.dataset(ns._state.version)
    new_columns = {}
    for f in spec.fields:
        column = partition_column(f.field_id)
        rtype = f.arrow_result_type(schema)
        if column in ds.schema.names:
            if ds.schema.field(column).type != rtype:
                raise SpecError(
                    f"partition field {f.field_id!r} returns {rtype}, but __manifest column {column} is "
                    f"{ds.schema.field(column).type}"
                )
        else:
            new_columns[f.field_id] = rtype
    evolved = Operation("EVOLVE_SPEC", {"spec_id": str(new_id), "fields": ", ".join(str(f) for f in spec.fields)})
    add_manifest_columns(ns._store, new_columns, evolved.with_metrics(columns_added=len(new_columns)))
    ns.refresh()
    base = ns._store.dataset(ns._state.version)
    row = dict.fromkeys(base.schema.names)
    row.update(object_id=f"v{new_id}", object_type="namespace", metadata="{}")
    rows = [row, *lock_rows(ns._state, ns._state.specs, None)]
    merge_manifest_rows(ns._store, base, pa.Table.from_pylist(rows, schema=base.schema), evolved.timed(started))
    properties = {f"{SPEC_KEY_PREFIX}{new_id}": spec.to_json()}
    commit_metadata(ns._store, ns._store.dataset(), properties, evolved.timed(started))
    ns.refresh()
    return spec


def add_manifest_columns(store: ManifestStore, columns: Mapping[str, pa.DataType], operation: Operation) -> None:
    """Add nullable ``partition_field_*`` columns (all NULL; no data is rewritten) in one commit
    recording ``operation``: a Lance Merge of the same fragments under the wider schema,
    retried on a concurrent commit. Should Lance number the existing columns differently
    than they are, :meth:`ManifestStore.add_partition_columns` adds them (unrecorded)."""
    if not columns:
        return
    last: ConcurrentModification | None = None
    for _ in range(8):
        ds = store.dataset()
        wider = pa.schema([*ds.schema, *(pa.field(partition_column(f), t) for f, t in columns.items())])
        lance_schema = LanceSchema.from_pyarrow(wider)
        existing = _field_ids(ds.lance_schema)
        if _field_ids(lance_schema)[: len(existing)] != existing:
            store.add_partition_columns(columns)
            return
        merge = LanceOperation.Merge([f.metadata for f in ds.get_fragments()], lance_schema)
        txn = Transaction(ds.version, merge, transaction_properties=operation.properties())
        opts = dict(store.storage_options) if store.storage_options else None
        try:
            with translate_lance_errors(f"add columns to {store.uri}"):
                lance.LanceDataset.commit(store.uri, txn, read_version=ds.version, storage_options=opts, max_retries=0)
            return
        except ConcurrentModification as exc:
            last = exc
    raise ConcurrentModification(f"adding partition columns to {store.uri} lost 8 races: {last}") from last


def _field_ids(schema: LanceSchema) -> list[tuple[str, int]]:
    out: list[tuple[str, int]] = []
    pending = list(schema.fields())
    while pending:
        f = pending.pop(0)
        out.append((f.name(), f.id()))
        pending[:0] = f.children()
    return out


def add_columns(ns: ManifestHandle, columns: ColumnsLike, *, max_retries: int) -> NamespaceSchema:
    """Add nullable columns with fresh field ids."""
    new = coerce_columns(columns)
    shown = ", ".join(f"{f.name} {f.type}" for f in new)
    added = Operation("EVOLVE_SCHEMA", {"change": "add_columns", "columns": shown}, {"columns_added": len(new)})
    return evolve_schema(ns, lambda s: s.with_columns(new), max_retries=max_retries, operation=added)


def rename_column(ns: ManifestHandle, old: str, new: str, *, max_retries: int) -> NamespaceSchema:
    """Rename a column; its field id stays."""
    renamed = Operation("EVOLVE_SCHEMA", {"change": "rename_column", "column": old, "new_name": new})
    return evolve_schema(ns, lambda s: s.with_renamed(old, new), max_retries=max_retries, operation=renamed)


def drop_column(ns: ManifestHandle, name: str, *, max_retries: int) -> NamespaceSchema:
    """Drop a column that no field of the current spec reads."""
    dropped = Operation("EVOLVE_SCHEMA", {"change": "drop_column", "column": name})
    return evolve_schema(ns, without_column(ns, name), max_retries=max_retries, operation=dropped)


def without_column(ns: ManifestHandle, name: str) -> Callable[[NamespaceSchema], NamespaceSchema]:
    """The schema change that drops ``name``, refused while a field of the current spec reads it."""

    def change(schema: NamespaceSchema) -> NamespaceSchema:
        fid = schema.id_of(name)
        spec = ns._state.current_spec
        for f in spec.fields:
            if fid in f.source_ids:
                raise SpecError(
                    f"cannot drop column {name!r} (field id {fid}): partition field {f.field_id!r} "
                    f"({f}) of the current spec v{spec.spec_id} uses it; evolve the partition spec first"
                )
        return schema.without(name)

    return change


def widen_column(ns: ManifestHandle, name: str, new_type: pa.DataType | str, *, max_retries: int) -> NamespaceSchema:
    """Promote a column's type, unless a partition field of any spec version reads it."""
    target = parse_type(new_type) if isinstance(new_type, str) else new_type
    widened = Operation("EVOLVE_SCHEMA", {"change": "widen_column", "column": name, "type": str(target)})
    return evolve_schema(ns, with_widened_column(ns, name, target), max_retries=max_retries, operation=widened)


def with_widened_column(
    ns: ManifestHandle, name: str, target: pa.DataType
) -> Callable[[NamespaceSchema], NamespaceSchema]:
    """The schema change that widens ``name``, refused while a field of any spec version reads it."""

    def change(schema: NamespaceSchema) -> NamespaceSchema:
        fid = schema.id_of(name)
        for spec in ns._state.specs.values():
            for f in spec.fields:
                if fid in f.source_ids:
                    raise SpecError(
                        f"cannot widen column {name!r} (field id {fid}): partition field {f.field_id!r} "
                        f"({f}) of spec v{spec.spec_id} derives its values from the column's type"
                    )
        return schema.with_widened(name, target)

    return change


def evolve_schema(
    ns: ManifestHandle,
    change: Callable[[NamespaceSchema], NamespaceSchema],
    *,
    max_retries: int,
    operation: Operation | None = None,
) -> NamespaceSchema:
    """Apply ``change`` to the latest schema and store it with an optimistic check.

    The ``schema`` property is set on the version ``change`` read, so a concurrent
    schema change makes this one retry. Then every ``v<N>`` row is rewritten (best
    effort: the schema change has already happened) so that writes begun under the old
    schema conflict, re-read and refuse to commit; a write that commits before that
    simply happened before the change, and reads reconcile its partitions by field id.
    Both commits record ``operation`` (default: ``EVOLVE_SCHEMA``).
    """
    started = time.monotonic()
    evolved = operation or Operation("EVOLVE_SCHEMA")
    last: ConcurrentModification | None = None
    for _ in range(max_retries + 1):
        ns.refresh()
        new = change(ns._state.schema)
        try:
            read = ns._store.dataset(ns._state.version)
            commit_metadata(ns._store, read, {SCHEMA_KEY: new.to_json()}, evolved.timed(started))
        except ConcurrentModification as exc:
            last = exc
            continue
        for _ in range(max_retries + 1):
            ns.refresh()
            try:
                base = ns._store.dataset(ns._state.version)
                rows = lock_rows(ns._state, ns._state.specs, None)
                merge_manifest_rows(
                    ns._store, base, pa.Table.from_pylist(rows, schema=base.schema), evolved.timed(started)
                )
                break
            except ConcurrentModification as exc:
                last = exc
        ns.refresh()
        return ns._state.schema
    raise ConcurrentModification(f"schema change of {ns.root} lost {max_retries + 1} races: {last}") from last


def coerce_columns(columns: ColumnsLike) -> list[pa.Field]:
    """Columns as Arrow fields; types may be spelled as strings (:func:`parse_type`)."""
    if isinstance(columns, pa.Field):
        return [columns]
    if isinstance(columns, pa.Schema):
        return list(columns)
    if isinstance(columns, Mapping):
        return [pa.field(n, parse_type(t) if isinstance(t, str) else t) for n, t in columns.items()]
    fields = list(columns)
    if not all(isinstance(f, pa.Field) for f in fields):
        raise SchemaError("columns must be a pyarrow Schema, a mapping of column to type, or pyarrow fields")
    return fields
