"""``PartitionedNamespace``: create, load and inspect a Lance partitioned namespace.

The namespace state (schema, specs, partition tables) is read from one
``__manifest`` version, so every answer of one ``PartitionedNamespace`` object is
consistent with that version. The class is the entry point; the work is done by

- :mod:`partitioning.state.namespace_state`: one ``__manifest`` version read and checked, its table rows;
- :mod:`partitioning.storage.locations`: object ids, directory names, :class:`LocationPlanner`;
- :mod:`partitioning.state.commits`: commits that record or remove partition tables;
- :mod:`partitioning.state.evolution`: partition spec and schema evolution;
- :mod:`partitioning.state.describe`: runtime properties and the readable layout.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import lance
import pyarrow as pa

from partitioning.errors import NamespaceAlreadyExists, SpecError
from partitioning.spec.partition_spec import PartitionField, PartitionSpec, parse_partition_by
from partitioning.spec.schema import NamespaceSchema
from partitioning.spec.transforms import canonical_float
from partitioning.sql.binding import bind
from partitioning.sql.filters import Dialect, Filter, parse_filter
from partitioning.state import commits as _commits
from partitioning.state import evolution
from partitioning.state.commits import DEFAULT_COMMIT_RETRIES
from partitioning.state.commits import WRITE_ID_HISTORY as WRITE_ID_HISTORY
from partitioning.state.commits import WRITE_IDS_PROPERTY as WRITE_IDS_PROPERTY
from partitioning.state.describe import describe_namespace, layout, list_indexes
from partitioning.state.describe import format_partition_value as format_partition_value
from partitioning.state.evolution import ColumnsLike
from partitioning.state.lookup import existing_locations
from partitioning.state.namespace_state import (
    NamespaceState,
    PartitionTable,
    TableCommit,
    open_partition_table,
    read_state,
)
from partitioning.state.scan import ScanPlan, plan_tables
from partitioning.storage.guard import Guard
from partitioning.storage.history import Operation, history_table
from partitioning.storage.intents import Intent
from partitioning.storage.locations import BOUNDED_TABLE_DIR_RE as BOUNDED_TABLE_DIR_RE
from partitioning.storage.locations import MAX_NAME_BYTES as MAX_NAME_BYTES
from partitioning.storage.locations import TABLE_NAME as TABLE_NAME
from partitioning.storage.locations import LocationPlanner
from partitioning.storage.locations import PartitionKey as PartitionKey
from partitioning.storage.locations import keyed_hex as keyed_hex
from partitioning.storage.locations import keyed_namespace_name as keyed_namespace_name
from partitioning.storage.locations import table_directory as table_directory
from partitioning.storage.manifest import SCHEMA_KEY, SPEC_KEY_PREFIX, ManifestStore, manifest_schema
from partitioning.storage.orphans import Orphan, find_orphans

__all__ = ["PartitionTable", "PartitionedNamespace", "TableCommit"]


class PartitionedNamespace:
    """A partitioned namespace rooted at ``root`` (local path or object-store URI)."""

    def __init__(self, root: str, state: NamespaceState, storage_options: Mapping[str, str] | None = None) -> None:
        self._store = ManifestStore(root, storage_options)
        self.root = self._store.root
        self.storage_options = self._store.storage_options
        self._state = state
        self._seed = secrets.token_bytes(32)

    # -- construction -------------------------------------------------------------------------
    @classmethod
    def create(
        cls,
        root: str,
        schema: pa.Schema | NamespaceSchema,
        spec: PartitionSpec | str | Mapping[str, Any] | Sequence[str],
        storage_options: Mapping[str, str] | None = None,
    ) -> PartitionedNamespace:
        """Create a namespace with ``schema`` and its first partition spec (id 1).

        ``spec`` may be a PartitionSpec, its JSON text or object, or a list of
        partition expressions such as ``["day(ts)", "bucket[16](user_id)"]``.
        """
        ns_schema = schema if isinstance(schema, NamespaceSchema) else NamespaceSchema.from_arrow(schema)
        if isinstance(spec, list | tuple):
            first = parse_partition_by(list(spec), ns_schema)
        else:
            first = PartitionSpec.coerce(spec)  # type: ignore[arg-type]
        if first.spec_id != 1:
            raise SpecError(f"the first partition spec must have id 1, got {first.spec_id}")
        first.validate(ns_schema)
        store = ManifestStore(root, storage_options)
        if store.exists():
            raise NamespaceAlreadyExists(f"a namespace already exists at {store.root}; use PartitionedNamespace.load")
        from partitioning.storage.datasets import check_new_root

        check_new_root(store.root, store.storage_options)
        columns = {f.field_id: f.arrow_result_type(ns_schema) for f in first.fields}
        mschema = manifest_schema(columns)
        row: dict[str, Any] = dict.fromkeys(mschema.names)
        row.update(object_id="v1", object_type="namespace", metadata="{}")
        metadata = {SCHEMA_KEY: ns_schema.to_json(), f"{SPEC_KEY_PREFIX}1": first.to_json()}
        created = Operation("CREATE", {"spec": str(first)}).properties()
        store.create(pa.Table.from_pylist([row], schema=mschema), metadata, properties=created)
        return cls.load(store.root, store.storage_options)

    @classmethod
    def load(
        cls,
        root: str,
        storage_options: Mapping[str, str] | None = None,
        *,
        manifest_version: int | None = None,
        guard: Guard | None = None,
    ) -> PartitionedNamespace:
        """Open the namespace at ``root``, optionally as of an older ``__manifest`` version.

        A local ``root`` is made absolute here (:func:`partitioning.storage.roots.resolve_root`), so
        ``ns.root`` and every table URI planned from it mean the same place on every machine.
        With ``guard`` (an operation's, :mod:`partitioning.storage.guard`) the version is recorded as a
        base of its lease before any row of it is read.
        """
        store = ManifestStore(root, storage_options)
        ds = store.dataset(manifest_version)
        if guard is not None:
            guard.read(ds.version)
        return cls(store.root, read_state(ds, store.root), store.storage_options)

    def refresh(self, *, guard: Guard | None = None) -> PartitionedNamespace:
        """Re-read the latest ``__manifest`` version (recorded as a base of ``guard``'s lease first)."""
        ds = self._store.dataset()
        if guard is not None:
            guard.read(ds.version)
        self._state = read_state(ds, self.root, previous=self._state)
        return self

    # -- properties ---------------------------------------------------------------------------
    @property
    def schema(self) -> pa.Schema:
        """The namespace schema; every field carries ``lance:field_id`` metadata."""
        return self._state.schema.arrow

    @property
    def namespace_schema(self) -> NamespaceSchema:
        return self._state.schema

    @property
    def specs(self) -> dict[int, PartitionSpec]:
        return dict(self._state.specs)

    @property
    def current_spec(self) -> PartitionSpec:
        return self._state.current_spec

    @property
    def manifest_version(self) -> int:
        return self._state.version

    @property
    def properties(self) -> dict[str, str]:
        """The root namespace properties (``__manifest`` table metadata)."""
        return dict(self._state.metadata)

    def __repr__(self) -> str:
        return (
            f"PartitionedNamespace({self.root!r}, manifest_version={self.manifest_version}, spec={self.current_spec})"
        )

    # -- partitions and their locations ---------------------------------------------------------
    def partitions(self) -> list[PartitionTable]:
        """One entry per partition table, across all spec versions, ordered by object_id."""
        return list(self._state.tables)

    def find_partition(self, spec_id: int, values: Mapping[str, Any]) -> PartitionTable | None:
        key = tuple(canonical_float(values.get(f.field_id)) for f in self._state.spec(spec_id).fields)
        return self._state.find_tables(spec_id, [key]).get(key)

    def find_partitions(self, spec_id: int, keys: Iterable[PartitionKey]) -> dict[PartitionKey, PartitionTable]:
        """The existing table of each partition key of spec ``spec_id`` in ``keys``; only those
        manifest rows are decoded."""
        return self._state.find_tables(spec_id, keys)

    def spec_ids_with_tables(self) -> set[int]:
        """The spec versions that have at least one partition table (no row is decoded)."""
        return {spec_id for spec_id, rows in self._state.table_rows.items() if rows.num_rows}

    def tables_by_id(self, object_ids: Iterable[str]) -> dict[str, PartitionTable]:
        """The partition tables with these object ids (absent ones are left out); only their
        manifest rows are decoded."""
        return self._state.tables_by_id(object_ids)

    def location_planner(
        self, spec_id: int | None = None, *, seed: bytes | None = None, keys: Iterable[PartitionKey] | None = None
    ) -> LocationPlanner:
        """A picklable planner of table locations for ``spec_id`` (default: the current spec).

        With ``keys`` it knows only those partitions (and the namespaces above them): a
        write whose partition keys are known up front decodes just their manifest rows.
        """
        spec = self._state.spec(spec_id if spec_id is not None else self.current_spec.spec_id)
        if keys is None:
            existing = existing_locations(self._state.table_rows.get(spec.spec_id), spec)
            namespaces = self._state.namespaces_for(spec, None)
        else:
            wanted = list(keys)
            found = self._state.find_tables(spec.spec_id, wanted)
            existing = {k: (t.object_id, t.location) for k, t in found.items()}
            namespaces = self._state.namespaces_for(spec, wanted)
        return LocationPlanner(
            spec_id=spec.spec_id,
            field_ids=tuple(spec.field_ids),
            existing=existing,
            namespaces=namespaces,
            seed=seed if seed is not None else self._seed,
        )

    def new_table_location(self, spec_id: int, values: Mapping[str, Any], *, seed: bytes | None = None) -> str:
        """Where a partition's table is (or, if new, may be written); see :class:`LocationPlanner`."""
        key = tuple(canonical_float(values.get(f.field_id)) for f in self._state.spec(spec_id).fields)
        return self.location_planner(spec_id, seed=seed).location(key)

    def open_table(self, table: PartitionTable) -> lance.LanceDataset:
        """Open a partition table at the version recorded in the manifest."""
        return open_partition_table(
            table.uri, table.read_version, table.read_branch, table.read_tag, self.storage_options
        )

    # -- evolution (partitioning.state.evolution) -----------------------------------------------------
    def evolve_partition_spec(
        self, fields: PartitionSpec | str | Mapping[str, Any] | Sequence[str | PartitionField]
    ) -> PartitionSpec:
        """Add spec version N+1 (``partition_spec_v<N+1>`` and the ``v<N+1>`` row); returns it.

        ``fields`` are partition expressions (``["year(event_date)", "country"]``),
        PartitionField objects, or a whole spec (its id is replaced). A field with the
        same source ids and transform/expression as any existing field reuses that
        field's id (the spec's reuse rule); an existing id with a different signature is
        an error. New writes use the new spec; existing partitions stay where they are.
        """
        return evolution.evolve_partition_spec(self, fields)

    def add_columns(self, columns: ColumnsLike) -> NamespaceSchema:
        """Add nullable columns with fresh field ids; existing partitions read them as NULL."""
        return evolution.add_columns(self, columns, max_retries=DEFAULT_COMMIT_RETRIES)

    def rename_column(self, old: str, new: str) -> NamespaceSchema:
        """Rename a column. Its field id stays, so specs that use it need no change."""
        return evolution.rename_column(self, old, new, max_retries=DEFAULT_COMMIT_RETRIES)

    def drop_column(self, name: str) -> NamespaceSchema:
        """Drop a column; its id is never reused. A source of the current spec cannot go."""
        return evolution.drop_column(self, name, max_retries=DEFAULT_COMMIT_RETRIES)

    def widen_column(self, name: str, new_type: pa.DataType | str) -> NamespaceSchema:
        """Promote a column's type (int32 -> int64, float32 -> float64, decimal precision up).

        Old partitions are cast on read. A column that a bucket, truncate, identity or
        expression field of any spec version derives values from cannot be widened:
        its partition values (and so pruning) depend on the type.
        """
        return evolution.widen_column(self, name, new_type, max_retries=DEFAULT_COMMIT_RETRIES)

    # -- commit (partitioning.state.commits) ------------------------------------------------------------
    def commit_tables(
        self,
        commits: Iterable[TableCommit],
        *,
        max_retries: int = DEFAULT_COMMIT_RETRIES,
        operation: Operation | None = None,
    ) -> int:
        """Record partition tables and their ``read_version`` in ONE ``__manifest`` commit
        (missing namespace rows too), rebased onto the latest manifest and retried up to
        ``max_retries`` times on conflicts; returns the new manifest version."""
        return _commits.commit_tables(self, commits, max_retries=max_retries, operation=operation)

    def commit_once(
        self,
        commits: Sequence[TableCommit],
        *,
        replace_all: bool = False,
        write_id: str | None = None,
        operation: Operation | None = None,
        naming_seed: bytes | None = None,
        guard: Guard | None = None,
        intent: Intent | None = None,
        remove: Sequence[str] = (),
    ) -> int:
        """One optimistic ``__manifest`` commit based on the state this object last read, recording
        ``operation`` (:meth:`history`). It rewrites the ``v<N>`` row of each spec it touches, so
        two commits based on the same version conflict: the second raises
        :class:`ConcurrentModification` and must be rebased by its caller. ``replace_all``
        removes every partition row not in ``commits`` (overwrite); ``write_id`` is remembered
        on the ``v<N>`` rows (:meth:`committed_write_ids`). ``naming_seed``: the secret seed of
        a write's :class:`~partitioning.storage.locations.LocationPlanner`, on its first attempt only
        (:func:`partitioning.state.commits.commit_once`). ``guard``: the operation's
        (:mod:`partitioning.storage.guard`); without one the commit takes its own."""
        return _commits.commit_once(
            self,
            commits,
            replace_all=replace_all,
            write_id=write_id,
            operation=operation,
            naming_seed=naming_seed,
            guard=guard,
            intent=intent,
            remove=remove,
        )

    def remove_tables(
        self, object_ids: Sequence[str], *, operation: Operation | None = None, guard: Guard | None = None
    ) -> int:
        """Remove partition tables, and namespaces left without tables, in ONE optimistic
        ``__manifest`` commit; returns the new manifest version. Files stay for time
        travel until :func:`partitioning.tables.maintenance.vacuum` removes them.

        It reads the table rows without following their ``location``, so it also removes
        a row whose location is refused (the repair :func:`partitioning.storage.manifest.check_location` names)."""
        return _commits.remove_tables(self, object_ids, operation=operation, guard=guard)

    def history(self, limit: int | None = None) -> pa.Table:
        """What made each ``__manifest`` version up to the latest, newest first (:func:`history_table`)."""
        return history_table(self.root, limit=limit, storage_options=self.storage_options)

    def committed_write_ids(self) -> set[str]:
        """Write ids of recent commits (the last :data:`WRITE_ID_HISTORY` per spec version)."""
        return _commits.committed_write_ids(self._state)

    # -- describing and planning ----------------------------------------------------------------
    def describe_namespace(self, id_list: Sequence[str]) -> dict[str, str]:
        """Runtime properties (SPEC-NOTES 17) of a namespace: the root, ``v<N>``, or a partition namespace."""
        return describe_namespace(self._state, self.root, id_list)

    def layout(self) -> str:
        """A readable tree of spec versions, partition namespaces and tables."""
        return layout(self._state, self.root)

    def plan_scan(
        self, filter_sql: str | Filter | None = None, *, time_zone: str = "UTC", dialect: Dialect | None = None
    ) -> ScanPlan:
        """The partition tables a filter must read (SPEC-NOTES 14), each at its recorded version.

        ``filter_sql`` is SQL or a parsed filter. Without ``dialect`` the text is read as
        DataFusion SQL (what Lance scans apply), with zone-less timestamps in ``time_zone``
        (default UTC); Spark callers pass their session's :class:`Dialect`. Parts the
        pruner does not understand keep every table; they never fail the plan.
        """
        d = dialect or Dialect.datafusion(time_zone)
        if filter_sql is None or isinstance(filter_sql, str):
            f = parse_filter(filter_sql, d, strict=False)
        else:
            f = filter_sql
        residual = filter_sql if isinstance(filter_sql, str) and filter_sql.strip() else None
        return plan_tables(
            self.root,
            self._state.manifest,
            self._state.specs,
            self._state.schema,
            bind(f, self._state.schema.arrow, d),
            self.manifest_version,
            residual=residual,
            table_rows=self._state.table_rows,
        )

    def orphans(self) -> list[Orphan]:
        """Files and dataset versions left by failed or retried writes (see :mod:`partitioning.storage.orphans`)."""
        return find_orphans(self.root, self.storage_options)

    def indexes(self) -> pa.Table:
        """Per partition table and index: name, type, column, indexed and unindexed rows
        (:func:`partitioning.state.describe.list_indexes`)."""
        return list_indexes(self.partitions(), self.namespace_schema, self.storage_options)
