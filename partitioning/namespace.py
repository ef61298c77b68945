"""``PartitionedNamespace``: create, load and inspect a Lance partitioned namespace.

The namespace state (schema, specs, partition tables) is read from one
``__manifest`` version, so every answer of one ``PartitionedNamespace`` object is
consistent with that version. The class is the entry point; the work is done by

- :mod:`partitioning.namespace_view`: its read-only side (partitions, scan plans, layout, history);
- :mod:`partitioning.state.loading`: one ``__manifest`` version read and checked;
- :mod:`partitioning.state.namespace_state`: that version in Python, its table rows;
- :mod:`partitioning.storage.locations`: object ids, directory names, :class:`LocationPlanner`;
- :mod:`partitioning.state.commits`: commits that record or remove partition tables;
- :mod:`partitioning.state.evolution`: partition spec and schema evolution;
- :mod:`partitioning.state.describe`: runtime properties and the readable layout.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pyarrow as pa

from partitioning.errors import NamespaceAlreadyExists, SpecError
from partitioning.namespace_view import NamespaceView
from partitioning.spec.partition_by import parse_partition_by
from partitioning.spec.partition_spec import PartitionField, PartitionSpec
from partitioning.spec.schema import NamespaceSchema
from partitioning.spec.values import canonical_float
from partitioning.state import commits as _commits
from partitioning.state import evolution
from partitioning.state.commit_rows import WRITE_ID_HISTORY as WRITE_ID_HISTORY
from partitioning.state.commit_rows import WRITE_IDS_PROPERTY as WRITE_IDS_PROPERTY
from partitioning.state.commits import DEFAULT_COMMIT_RETRIES
from partitioning.state.describe import format_partition_value as format_partition_value
from partitioning.state.evolution import ColumnsLike
from partitioning.state.loading import read_state
from partitioning.state.lookup import existing_locations
from partitioning.state.partition_tables import PartitionTable, TableCommit
from partitioning.storage.guard import Guard
from partitioning.storage.history import Operation
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

__all__ = ["PartitionTable", "PartitionedNamespace", "TableCommit"]


class PartitionedNamespace(NamespaceView):
    """A partitioned namespace rooted at ``root`` (local path or object-store URI).

    What it reads of its ``__manifest`` version (partitions, scan plans, layout, history)
    is :class:`~partitioning.namespace_view.NamespaceView`'s; here it is created, loaded and
    changed."""

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
        from partitioning.storage.paths import check_new_root

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

    # -- where new partition tables go ----------------------------------------------------------
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
        applied: str | None = None,
    ) -> int:
        """One optimistic ``__manifest`` commit based on the state this object last read, recording
        ``operation`` (:meth:`history`). It rewrites the ``v<N>`` row of each spec it touches, so
        two commits based on the same version conflict: the second raises
        :class:`ConcurrentModification` and must be rebased by its caller. ``replace_all``
        removes every partition row not in ``commits`` (overwrite); ``write_id`` is remembered
        on the ``v<N>`` rows (:meth:`committed_write_ids`). ``naming_seed``: the secret seed of
        a write's :class:`~partitioning.storage.locations.LocationPlanner`, on its first attempt only
        (:func:`partitioning.state.commits.commit_once`). ``guard``: the operation's
        (:mod:`partitioning.storage.guard`); without one the commit takes its own. ``applied``: the
        token of root properties staged for this commit (:mod:`partitioning.storage.staged`)."""
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
            applied=applied,
        )

    def remove_tables(
        self, object_ids: Sequence[str], *, operation: Operation | None = None, guard: Guard | None = None
    ) -> int:
        """Remove partition tables, and namespaces left without tables, in ONE optimistic
        ``__manifest`` commit; returns the new manifest version. Files stay for time
        travel until :func:`partitioning.tables.vacuum.vacuum` removes them.

        It reads the table rows without following their ``location``, so it also removes
        a row whose location is refused (the repair :func:`partitioning.storage.paths.check_location` names)."""
        return _commits.remove_tables(self, object_ids, operation=operation, guard=guard)
