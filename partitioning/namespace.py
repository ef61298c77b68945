"""``PartitionedNamespace``: create, load and inspect a Lance partitioned namespace.

The namespace state (schema, specs, partition tables) is read from one
``__manifest`` version, so every answer of one ``PartitionedNamespace`` object is
consistent with that version.
"""

from __future__ import annotations

import datetime as dt
import decimal
import hashlib
import hmac
import json
import re
import secrets
import string
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, TypeAlias

import lance
import pyarrow as pa

from partitioning.binding import bind
from partitioning.errors import (
    ConcurrentModification,
    CorruptNamespace,
    InvalidInput,
    NamespaceNotFound,
    SpecError,
    TableNotFound,
    translate_lance_errors,
)
from partitioning.filters import Dialect, Filter, parse_filter
from partitioning.manifest import (
    SCHEMA_KEY,
    SPEC_KEY_PREFIX,
    ManifestStore,
    manifest_schema,
    partition_column,
    table_uri,
)
from partitioning.orphans import Orphan, find_orphans
from partitioning.scan import ScanPlan, plan_tables
from partitioning.schema import NamespaceSchema, field_id_of, parse_type
from partitioning.spec import PartitionField, PartitionSpec, parse_partition_by
from partitioning.transforms import canonical_float

__all__ = ["PartitionTable", "PartitionedNamespace", "TableCommit"]

_NAME_ALPHABET = string.ascii_lowercase + string.digits
PartitionKey = tuple[Any, ...]
_SPEC_KEY_RE = re.compile(rf"^{SPEC_KEY_PREFIX}(\d+)$")
TABLE_NAME = "dataset"
DEFAULT_COMMIT_RETRIES = 8
ColumnsLike: TypeAlias = pa.Schema | pa.Field | Sequence[pa.Field] | Mapping[str, pa.DataType | str]
WRITE_IDS_PROPERTY = "lance_partitioned.write_ids"
WRITE_ID_HISTORY = 100
MAX_NAME_BYTES = 255
BOUNDED_TABLE_DIR_RE = re.compile(r"^[0-9a-f]{8}_v\d+_[a-z0-9]{16}$")


def keyed_hex(seed: bytes, object_id: str) -> str:
    """The 8 lowercase hex digits of a new table's directory, derived like :func:`keyed_namespace_name`."""
    return hmac.new(seed, object_id.encode(), hashlib.sha256).hexdigest()[:8]


def table_directory(seed: bytes, object_id: str) -> str:
    """The directory name of a new partition table.

    ``<8 hex>_<object_id>`` as pylance's DirectoryNamespace names tables, unless that
    would pass the file-name limit of common file systems (:data:`MAX_NAME_BYTES`; a spec
    of 14 or more fields does). Then it is the bounded ``<8 hex>_v<N>_<16 [a-z0-9]>``,
    which does not encode the object id: readers always use the manifest's
    ``location``, and commits carry the object id.
    """
    prefix = keyed_hex(seed, object_id)
    name = f"{prefix}_{object_id}"
    if len(name.encode()) <= MAX_NAME_BYTES:
        return name
    spec = object_id.split("$", 1)[0]
    return f"{prefix}_{spec}_{keyed_namespace_name(seed, object_id, ())}"


def keyed_namespace_name(seed: bytes, parent: str, prefix: PartitionKey) -> str:
    """A 16-character ``[a-z0-9]`` name, pseudo-random under a CSPRNG ``seed``.

    Every task of one write derives the same name for the same new namespace, so
    executors can write new partitions without asking the driver, while names of
    different writes stay unpredictable and unrelated.
    """
    digest = hmac.new(seed, f"{parent}\x00{prefix!r}".encode(), hashlib.sha256).digest()
    n = int.from_bytes(digest, "big")
    chars = []
    for _ in range(16):
        n, r = divmod(n, 36)
        chars.append(_NAME_ALPHABET[r])
    return "".join(chars)


def format_partition_value(value: Any) -> str | None:
    """A partition value as a runtime-property string (SPEC-NOTES 17)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return format(value, "f")
    if isinstance(value, bytes):
        return value.hex()
    return str(value)


@dataclass(frozen=True)
class PartitionTable:
    """One partition table (a leaf ``dataset``) as recorded in ``__manifest``."""

    object_id: str
    location: str
    uri: str
    spec_id: int
    values: Mapping[str, Any]
    read_version: int | None
    read_branch: str | None = None
    read_tag: str | None = None

    @property
    def key(self) -> PartitionKey:
        return tuple(canonical_float(v) for v in self.values.values())


@dataclass(frozen=True)
class TableCommit:
    """A request to point one partition's table at ``read_version`` in the next manifest commit.

    ``location`` is where the data was written; for a partition that already exists in
    the manifest it must be that table's location.
    """

    spec_id: int
    values: Mapping[str, Any]
    location: str
    read_version: int
    object_id: str | None = None


@dataclass(frozen=True)
class LocationPlanner:
    """Where each partition of one spec lives; picklable, so executors can use it.

    Existing partitions keep their object id and location. A new one reuses existing
    ancestor namespaces and names the missing levels with :func:`keyed_namespace_name`,
    so all tasks of one write agree on the names of the namespaces they create. Its
    directory is :func:`table_directory` of its object id.
    """

    spec_id: int
    field_ids: tuple[str, ...]
    existing: Mapping[PartitionKey, tuple[str, str]]
    namespaces: Mapping[tuple[str, PartitionKey], str]
    seed: bytes

    def place(self, key: PartitionKey) -> tuple[str, str]:
        """``(object_id, location)`` of the partition with ``key``."""
        found = self.existing.get(key)
        if found is not None:
            return found
        names: list[str] = []
        for level in range(1, len(self.field_ids) + 1):
            prefix = key[:level]
            parent = "$".join([f"v{self.spec_id}", *names])
            name = self.namespaces.get((parent, prefix))
            names.append(name if name is not None else keyed_namespace_name(self.seed, parent, prefix))
        object_id = "$".join([f"v{self.spec_id}", *names, TABLE_NAME])
        return object_id, table_directory(self.seed, object_id)

    def location(self, key: PartitionKey) -> str:
        return self.place(key)[1]


@dataclass
class _State:
    """One ``__manifest`` version. Python-level views of its rows are built on first use,
    so planning a scan (which works on the Arrow table) never pays for them."""

    root: str
    version: int
    metadata: dict[str, str]
    schema: NamespaceSchema
    specs: dict[int, PartitionSpec]
    manifest: pa.Table

    @cached_property
    def rows(self) -> list[dict[str, Any]]:
        return self.manifest.to_pylist()

    @cached_property
    def rows_by_id(self) -> dict[str, dict[str, Any]]:
        return {r["object_id"]: r for r in self.rows}

    @cached_property
    def tables(self) -> list[PartitionTable]:
        """Every table row of a known spec version; a row whose ``location`` is not one
        directory under the root, or is another row's, is refused (one line naming it)."""
        out = []
        owner: dict[str, str] = {}
        for row in self.rows:
            spec_id = _spec_id_of(row["object_id"])
            if row["object_type"] != "table" or spec_id not in self.specs:
                continue
            uri = table_uri(self.root, row["object_id"], row["location"])
            other = owner.setdefault(row["location"], row["object_id"])
            if other != row["object_id"]:
                raise CorruptNamespace(
                    f"__manifest table rows {other!r} and {row['object_id']!r} both have location "
                    f"{row['location']!r}; remove one with PartitionedNamespace.remove_tables"
                )
            values = {f.field_id: row.get(partition_column(f.field_id)) for f in self.specs[spec_id].fields}
            out.append(
                PartitionTable(
                    object_id=row["object_id"],
                    location=row["location"],
                    uri=uri,
                    spec_id=spec_id,
                    values=values,
                    read_version=row.get("read_version"),
                    read_branch=row.get("read_branch"),
                    read_tag=row.get("read_tag"),
                )
            )
        return sorted(out, key=lambda p: p.object_id)

    @cached_property
    def by_key(self) -> dict[tuple[int, PartitionKey], PartitionTable]:
        return {(p.spec_id, p.key): p for p in self.tables}


class PartitionedNamespace:
    """A partitioned namespace rooted at ``root`` (local path or object-store URI)."""

    def __init__(self, root: str, state: _State, storage_options: Mapping[str, str] | None = None) -> None:
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
            from partitioning.errors import NamespaceAlreadyExists

            raise NamespaceAlreadyExists(f"a namespace already exists at {store.root}; use PartitionedNamespace.load")
        from partitioning.tables import check_new_root

        check_new_root(store.root, store.storage_options)
        columns = {f.field_id: f.arrow_result_type(ns_schema) for f in first.fields}
        mschema = manifest_schema(columns)
        row: dict[str, Any] = dict.fromkeys(mschema.names)
        row.update(object_id="v1", object_type="namespace", metadata="{}")
        metadata = {SCHEMA_KEY: ns_schema.to_json(), f"{SPEC_KEY_PREFIX}1": first.to_json()}
        store.create(pa.Table.from_pylist([row], schema=mschema), metadata)
        return cls.load(store.root, store.storage_options)

    @classmethod
    def load(
        cls, root: str, storage_options: Mapping[str, str] | None = None, *, manifest_version: int | None = None
    ) -> PartitionedNamespace:
        """Open the namespace at ``root``, optionally as of an older ``__manifest`` version.

        A local ``root`` is made absolute here (:func:`partitioning.storage.resolve_root`), so
        ``ns.root`` and every table URI planned from it mean the same place on every machine.
        """
        store = ManifestStore(root, storage_options)
        ds = store.dataset(manifest_version)
        return cls(store.root, _read_state(ds, store.root), store.storage_options)

    def refresh(self) -> PartitionedNamespace:
        """Re-read the latest ``__manifest`` version."""
        self._state = _read_state(self._store.dataset(), self.root)
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
        return self._state.specs[max(self._state.specs)]

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

    # -- partitions ---------------------------------------------------------------------------
    def partitions(self) -> list[PartitionTable]:
        """One entry per partition table, across all spec versions, ordered by object_id."""
        return list(self._state.tables)

    def find_partition(self, spec_id: int, values: Mapping[str, Any]) -> PartitionTable | None:
        key = tuple(canonical_float(values.get(f.field_id)) for f in self._spec(spec_id).fields)
        return self._state.by_key.get((spec_id, key))

    def location_planner(self, spec_id: int | None = None, *, seed: bytes | None = None) -> LocationPlanner:
        """A picklable planner of table locations for ``spec_id`` (default: the current spec)."""
        spec = self._spec(spec_id if spec_id is not None else self.current_spec.spec_id)
        existing = {p.key: (p.object_id, p.location) for p in self._state.tables if p.spec_id == spec.spec_id}
        return LocationPlanner(
            spec_id=spec.spec_id,
            field_ids=tuple(spec.field_ids),
            existing=existing,
            namespaces=self._namespace_index(spec.spec_id),
            seed=seed if seed is not None else self._seed,
        )

    def new_table_location(self, spec_id: int, values: Mapping[str, Any], *, seed: bytes | None = None) -> str:
        """Where a partition's table is (or, if new, may be written); see :class:`LocationPlanner`."""
        key = tuple(canonical_float(values.get(f.field_id)) for f in self._spec(spec_id).fields)
        return self.location_planner(spec_id, seed=seed).location(key)

    def _namespace_index(self, spec_id: int) -> dict[tuple[str, PartitionKey], str]:
        spec = self._spec(spec_id)
        index = {}
        for row in self._state.rows:
            parts = row["object_id"].split("$")
            if row["object_type"] != "namespace" or parts[0] != f"v{spec_id}" or len(parts) < 2:
                continue
            level = len(parts) - 1
            prefix = tuple(canonical_float(row.get(partition_column(f.field_id))) for f in spec.fields[:level])
            index[("$".join(parts[:-1]), prefix)] = parts[-1]
        return index

    def _spec(self, spec_id: int) -> PartitionSpec:
        try:
            return self._state.specs[spec_id]
        except KeyError:
            raise InvalidInput(
                f"no partition spec v{spec_id}; specs are {', '.join(f'v{i}' for i in sorted(self._state.specs))}"
            ) from None

    # -- partition spec evolution ---------------------------------------------------------------
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
        self.refresh()
        schema = self.namespace_schema
        new_id = max(self._state.specs) + 1
        if isinstance(fields, PartitionSpec | str | Mapping):
            requested = list(PartitionSpec.coerce(fields).fields)
        else:
            texts = [f for f in fields if isinstance(f, str)]
            parsed = iter(parse_partition_by(texts, schema, spec_id=new_id).fields) if texts else iter(())
            requested = [next(parsed) if isinstance(f, str) else f for f in fields]
        known = {f.field_id: f for spec in self._state.specs.values() for f in spec.fields}
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
        ds = self._store.dataset(self._state.version)
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
        self._store.add_partition_columns(new_columns)
        self.refresh()
        base = self._store.dataset(self._state.version)
        row = dict.fromkeys(base.schema.names)
        row.update(object_id=f"v{new_id}", object_type="namespace", metadata="{}")
        rows = [row, *self._lock_rows(self._state.specs, None)]
        self._store.merge_rows(base, pa.Table.from_pylist(rows, schema=base.schema))
        self._store.update_metadata({f"{SPEC_KEY_PREFIX}{new_id}": spec.to_json()})
        self.refresh()
        return spec

    # -- schema evolution ----------------------------------------------------------------------
    def add_columns(self, columns: ColumnsLike) -> NamespaceSchema:
        """Add nullable columns with fresh field ids; existing partitions read them as NULL."""
        new = _coerce_columns(columns)
        return self._evolve_schema(lambda s: s.with_columns(new))

    def rename_column(self, old: str, new: str) -> NamespaceSchema:
        """Rename a column. Its field id stays, so specs that use it need no change."""
        return self._evolve_schema(lambda s: s.with_renamed(old, new))

    def drop_column(self, name: str) -> NamespaceSchema:
        """Drop a column; its id is never reused. A source of the current spec cannot go."""

        def change(schema: NamespaceSchema) -> NamespaceSchema:
            fid = schema.id_of(name)
            spec = self.current_spec
            for f in spec.fields:
                if fid in f.source_ids:
                    raise SpecError(
                        f"cannot drop column {name!r} (field id {fid}): partition field {f.field_id!r} "
                        f"({f}) of the current spec v{spec.spec_id} uses it; evolve the partition spec first"
                    )
            return schema.without(name)

        return self._evolve_schema(change)

    def widen_column(self, name: str, new_type: pa.DataType | str) -> NamespaceSchema:
        """Promote a column's type (int32 -> int64, float32 -> float64, decimal precision up).

        Old partitions are cast on read. A column that a bucket, truncate, identity or
        expression field of any spec version derives values from cannot be widened:
        its partition values (and so pruning) depend on the type.
        """
        target = parse_type(new_type) if isinstance(new_type, str) else new_type

        def change(schema: NamespaceSchema) -> NamespaceSchema:
            fid = schema.id_of(name)
            for spec in self.specs.values():
                for f in spec.fields:
                    if fid in f.source_ids:
                        raise SpecError(
                            f"cannot widen column {name!r} (field id {fid}): partition field {f.field_id!r} "
                            f"({f}) of spec v{spec.spec_id} derives its values from the column's type"
                        )
            return schema.with_widened(name, target)

        return self._evolve_schema(change)

    def _evolve_schema(
        self, change: Callable[[NamespaceSchema], NamespaceSchema], *, max_retries: int = DEFAULT_COMMIT_RETRIES
    ) -> NamespaceSchema:
        """Apply ``change`` to the latest schema and store it with an optimistic check.

        The ``schema`` property is set on the version ``change`` read, so a concurrent
        schema change makes this one retry. Then every ``v<N>`` row is rewritten (best
        effort: the schema change has already happened) so that writes begun under the old
        schema conflict, re-read and refuse to commit; a write that commits before that
        simply happened before the change, and reads reconcile its partitions by field id.
        """
        last: ConcurrentModification | None = None
        for _ in range(max_retries + 1):
            self.refresh()
            new = change(self.namespace_schema)
            try:
                read = self._store.dataset(self.manifest_version)
                self._store.update_metadata({SCHEMA_KEY: new.to_json()}, base=read)
            except ConcurrentModification as exc:
                last = exc
                continue
            for _ in range(max_retries + 1):
                self.refresh()
                try:
                    base = self._store.dataset(self.manifest_version)
                    rows = self._lock_rows(self._state.specs, None)
                    self._store.merge_rows(base, pa.Table.from_pylist(rows, schema=base.schema))
                    break
                except ConcurrentModification as exc:
                    last = exc
            self.refresh()
            return self.namespace_schema
        raise ConcurrentModification(f"schema change of {self.root} lost {max_retries + 1} races: {last}") from last

    # -- commit -------------------------------------------------------------------------------
    def commit_tables(self, commits: Iterable[TableCommit], *, max_retries: int = DEFAULT_COMMIT_RETRIES) -> int:
        """Record partition tables and their ``read_version`` in ONE ``__manifest`` commit.

        Missing namespace rows are inserted in the same commit. On a conflict the commit
        is rebased onto the latest manifest and retried up to ``max_retries`` times.
        Returns the new manifest version.
        """
        requested = list(commits)
        last_error: ConcurrentModification | None = None
        for _ in range(max_retries + 1):
            self.refresh()
            try:
                return self.commit_once(requested)
            except ConcurrentModification as exc:
                last_error = exc
        raise ConcurrentModification(
            f"__manifest commit at {self.root} failed after {max_retries + 1} attempts "
            f"because of concurrent writers: {last_error}"
        ) from last_error

    def commit_once(
        self, commits: Sequence[TableCommit], *, replace_all: bool = False, write_id: str | None = None
    ) -> int:
        """One optimistic ``__manifest`` commit based on the state this object last read.

        Every commit also rewrites the ``v<N>`` row of each spec it touches, so any two
        commits based on the same manifest version conflict: the second raises
        :class:`ConcurrentModification` and must be rebased by its caller. With
        ``replace_all`` every partition row not in ``commits`` is removed (overwrite).
        ``write_id`` is remembered on the ``v<N>`` rows (see :meth:`committed_write_ids`).
        """
        if replace_all:
            spec_ids = set(self._state.specs)
        else:
            spec_ids = {c.spec_id for c in commits} or {self.current_spec.spec_id}
        base = self._store.dataset(self._state.version)
        rows = self._commit_rows(commits, base.schema.names)
        rows.extend(self._lock_rows(spec_ids, write_id))
        table = pa.Table.from_pylist(rows, schema=base.schema)
        self._store.merge_rows(base, table, delete_other_partitions=replace_all)
        self.refresh()
        return self.manifest_version

    def remove_tables(self, object_ids: Sequence[str]) -> int:
        """Remove partition tables, and namespaces left without tables, in ONE optimistic
        ``__manifest`` commit; returns the new manifest version. Files stay for time
        travel until :func:`partitioning.maintenance.vacuum` removes them.

        It reads the table rows without following their ``location``, so it also removes
        a row whose location is refused (the repair :func:`partitioning.manifest.check_location` names)."""
        doomed = set(object_ids)
        tables = {
            r["object_id"]: _spec_id_of(r["object_id"])
            for r in self._state.rows
            if r["object_type"] == "table" and _spec_id_of(r["object_id"]) in self._state.specs
        }
        unknown = sorted(doomed - set(tables))
        if unknown:
            raise TableNotFound(f"no partition table {unknown[0]!r} in {self.root}")
        remaining = [oid for oid in tables if oid not in doomed]
        live = {oid.rsplit("$", k)[0] for oid in remaining for k in range(1, oid.count("$"))}
        empty = {oid.rsplit("$", k)[0] for oid in doomed for k in range(1, oid.count("$"))} - live
        spec_ids = {tables[oid] for oid in doomed} or {self.current_spec.spec_id}
        base = self._store.dataset(self._state.version)
        rows = pa.Table.from_pylist(self._lock_rows(spec_ids, None), schema=base.schema)
        self._store.merge_rows(base, rows, delete_ids=sorted(doomed | empty))
        self.refresh()
        return self.manifest_version

    def committed_write_ids(self) -> set[str]:
        """Write ids of recent commits (the last :data:`WRITE_ID_HISTORY` per spec version)."""
        ids: set[str] = set()
        for spec_id in self._state.specs:
            ids.update(_write_ids(self._state.rows_by_id.get(f"v{spec_id}")))
        return ids

    def _lock_rows(self, spec_ids: Iterable[int], write_id: str | None) -> list[dict[str, Any]]:
        out = []
        for spec_id in sorted(spec_ids):
            row = dict(self._state.rows_by_id[f"v{spec_id}"])
            props = json.loads(row.get("metadata") or "{}")
            if write_id is not None:
                recent = [w for w in _write_ids(row) if w != write_id][-(WRITE_ID_HISTORY - 1) :]
                props[WRITE_IDS_PROPERTY] = json.dumps([*recent, write_id])
            row["metadata"] = json.dumps(props, separators=(",", ":"), sort_keys=True)
            out.append(row)
        return out

    def _commit_rows(self, commits: Sequence[TableCommit], names: Sequence[str]) -> list[dict[str, Any]]:
        existing = self._state.rows_by_id
        out: dict[str, dict[str, Any]] = {}
        for c in commits:
            spec = self._spec(c.spec_id)
            key = tuple(canonical_float(c.values.get(f.field_id)) for f in spec.fields)
            current = self._state.by_key.get((c.spec_id, key))
            object_id = c.object_id or _object_id_from_location(c.location)
            if current is not None and current.object_id != object_id:
                raise ConcurrentModification(
                    f"partition {dict(zip(spec.field_ids, key, strict=True))} of spec v{c.spec_id} was created "
                    f"concurrently at {current.location}; data written to {c.location} was not committed"
                )
            parts = object_id.split("$")
            for level in range(1, len(parts) - 1):
                ns_id = "$".join(parts[: level + 1])
                if ns_id in out:
                    continue
                row = dict(existing.get(ns_id) or dict.fromkeys(names))
                row.update(object_id=ns_id, object_type="namespace", metadata="{}")
                for f, v in zip(spec.fields[:level], key[:level], strict=True):
                    row[partition_column(f.field_id)] = v
                out[ns_id] = row
            if object_id in out and out[object_id]["location"] != c.location:
                raise InvalidInput(
                    f"one commit gives table {object_id} two locations: {out[object_id]['location']}, {c.location}"
                )
            previous = existing.get(object_id, {}).get("read_version")
            if previous is not None and previous > c.read_version:
                raise ConcurrentModification(
                    f"refusing to lower read_version of {object_id} from {previous} to {c.read_version}"
                )
            row = dict(existing.get(object_id) or dict.fromkeys(names))
            row.update(
                object_id=object_id,
                object_type="table",
                location=c.location,
                metadata=row.get("metadata") or "{}",
                read_version=c.read_version,
                read_branch=None,
                read_tag=None,
            )
            for f, v in zip(spec.fields, key, strict=True):
                row[partition_column(f.field_id)] = v
            out[object_id] = row
        return list(out.values())

    # -- runtime properties (SPEC-NOTES 17) ---------------------------------------------------
    def describe_namespace(self, id_list: Sequence[str]) -> dict[str, str]:
        """Runtime properties of a namespace: the root, ``v<N>``, or a partition namespace."""
        ids = list(id_list)
        if not ids:
            return self.properties
        object_id = "$".join(ids)
        row = self._state.rows_by_id.get(object_id)
        if row is None or row["object_type"] != "namespace":
            raise NamespaceNotFound(f"namespace {object_id!r} not found in {self.root}")
        spec_id = _spec_id_of(object_id)
        spec = self._state.specs.get(spec_id)
        if spec is None:
            raise NamespaceNotFound(f"namespace {object_id!r} has no partition spec v{spec_id}")
        if len(ids) == 1:
            return {"partition_spec": spec.to_json()}
        level_field = spec.fields[len(ids) - 2]
        value = format_partition_value(row.get(partition_column(level_field.field_id)))
        return {} if value is None else {f"partition.{level_field.field_id}": value}

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
        )

    def orphans(self) -> list[Orphan]:
        """Files and dataset versions left by failed or retried writes (see :mod:`partitioning.orphans`)."""
        return find_orphans(self.root, self.storage_options)

    def indexes(self) -> pa.Table:
        """Per partition table and index: name, type, column, indexed and unindexed rows
        (:func:`partitioning.indexes.list_indexes`)."""
        from partitioning.indexes import list_indexes

        return list_indexes(self)

    def layout(self) -> str:
        """A readable tree of spec versions, partition namespaces and tables."""
        lines = [f"{self.root}  (__manifest v{self.manifest_version})"]
        for spec_id, spec in sorted(self._state.specs.items()):
            lines.append(f"  v{spec_id}: {spec}")
        parts = self.partitions()
        for p in parts:
            vals = ", ".join(f"{k}={_show(v)}" for k, v in p.values.items())
            lines.append(f"    {p.object_id}  [{vals}]  read_version={p.read_version}  -> {p.location}")
        if not parts:
            lines.append("    (no partition tables yet)")
        return "\n".join(lines)

    def open_table(self, table: PartitionTable) -> lance.LanceDataset:
        """Open a partition table at the version recorded in the manifest."""
        return open_partition_table(
            table.uri, table.read_version, table.read_branch, table.read_tag, self.storage_options
        )


def open_partition_table(
    uri: str,
    read_version: int | None,
    read_branch: str | None,
    read_tag: str | None,
    storage_options: Mapping[str, str] | None = None,
) -> lance.LanceDataset:
    """A partition table at the version its ``read_*`` columns select (SPEC-NOTES 15).

    A tag alone names the version; a branch with a version reads that branch; NULLs
    mean the latest version on main.
    """
    opts = dict(storage_options) if storage_options else None
    if read_tag is not None:
        ref = f" at tag {read_tag!r}"
    elif read_branch is not None:
        ref = f" on branch {read_branch!r} at version {read_version}"
    else:
        ref = f" at version {read_version}" if read_version is not None else ""
    try:
        with translate_lance_errors(f"open partition table {uri}{ref}"):
            if read_tag is not None:
                return lance.dataset(uri, version=read_tag, storage_options=opts)
            if read_branch is not None:
                # pylance 14 opens branches only by checking one out from the main dataset
                return lance.dataset(uri, storage_options=opts).checkout_version((read_branch, read_version))
            return lance.dataset(uri, version=read_version, storage_options=opts)
    except NamespaceNotFound as exc:
        if read_tag is None and read_version is None:
            raise
        try:
            with translate_lance_errors(f"open partition table {uri}"):
                versions = [v["version"] for v in lance.dataset(uri, storage_options=opts).versions()]
        except NamespaceNotFound:
            raise exc from None
        has = f"it has versions {min(versions)}..{max(versions)}" if versions else "it has no readable version"
        on = f" on branch {read_branch!r}" if read_branch is not None else ""
        wanted = f"tag {read_tag!r}" if read_tag is not None else f"version {read_version}{on}"
        raise CorruptNamespace(
            f"partition table {uri} has no {wanted} ({has}): its __manifest row points to a "
            "version that was removed (by vacuum or by hand); read an older __manifest version (versionAsOf / "
            "manifest_version=) or restore the table's version"
        ) from exc


def _show(value: Any) -> str:
    text = format_partition_value(value)
    return "NULL" if text is None else text


def _spec_id_of(object_id: str) -> int:
    head = object_id.split("$", 1)[0]
    return int(head[1:]) if head.startswith("v") and head[1:].isdigit() else -1


def _object_id_from_location(location: str) -> str:
    name = location.rstrip("/").rsplit("/", 1)[-1]
    if BOUNDED_TABLE_DIR_RE.match(name):
        raise InvalidInput(
            f"table location {location!r} is a bounded name that does not encode its object id; "
            "pass TableCommit(object_id=...)"
        )
    prefix, sep, object_id = name.partition("_")
    if not sep or len(prefix) != 8:
        raise InvalidInput(f"table location {location!r} is not of the form <8 hex>_<object_id>")
    return object_id


def _read_state(ds: lance.LanceDataset, root: str) -> _State:
    metadata = ManifestStore.metadata_of(ds)
    spec_keys = {int(m.group(1)): k for k in metadata if (m := _SPEC_KEY_RE.match(k))}
    if not spec_keys:
        raise NamespaceNotFound(
            f"{root} is not a partitioned namespace: its __manifest has no partition_spec_v<N> property"
        )
    if SCHEMA_KEY not in metadata:
        raise CorruptNamespace(f"{root}: __manifest has partition specs but no 'schema' property")
    try:
        schema = NamespaceSchema.from_json(metadata[SCHEMA_KEY])
    except (CorruptNamespace, ValueError) as exc:
        raise CorruptNamespace(
            f"{root}: property 'schema' of __manifest version {ds.version} is corrupt: {exc}; load an older "
            "__manifest version (manifest_version= / versionAsOf) or rewrite the property"
        ) from exc
    specs = {}
    for spec_id, key in sorted(spec_keys.items()):
        try:
            spec = PartitionSpec.from_json(metadata[key])
        except SpecError as exc:
            raise CorruptNamespace(f"{root}: property {key} is corrupt: {exc}") from exc
        if spec.spec_id != spec_id:
            raise CorruptNamespace(f"{root}: property {key} holds a spec with id {spec.spec_id}")
        specs[spec_id] = spec
    _check_sources(root, schema, specs)
    for spec_id, spec in specs.items():
        try:
            spec.check_expressions(schema)
        except SpecError as exc:
            raise CorruptNamespace(
                f"{root}: property {spec_keys[spec_id]} of __manifest version {ds.version} holds a spec this "
                f"client will not evaluate: {exc}"
            ) from exc
    expected = ["read_version", *(partition_column(f.field_id) for spec in specs.values() for f in spec.fields)]
    missing = [c for c in expected if c not in ds.schema.names]
    if missing:
        raise CorruptNamespace(
            f"{root}: __manifest lacks column {missing[0]} (was it rewritten by a DirectoryNamespace "
            "mutating call? see SPEC-NOTES 6)"
        )
    return _State(
        root=root,
        version=ds.version,
        metadata=metadata,
        schema=schema,
        specs=specs,
        manifest=ManifestStore.rows_of(ds),
    )


def _check_sources(root: str, schema: NamespaceSchema, specs: Mapping[int, PartitionSpec]) -> None:
    """Every source id of the current spec is a top-level column; an older spec's is one,
    or an id the schema handed out and later dropped (``< next_field_id``)."""
    top = {field_id_of(f): f.name for f in schema.arrow}
    current = max(specs)
    for spec_id, spec in sorted(specs.items()):
        for f in spec.fields:
            for sid in f.source_ids:
                dropped = spec_id != current and 0 <= sid < schema.next_field_id and schema.field_by_id(sid) is None
                if sid in top or dropped:
                    continue
                known = ", ".join(f"{name}={fid}" for fid, name in top.items())
                raise CorruptNamespace(
                    f"{root}: partition field {f.field_id!r} of spec v{spec_id} reads source id {sid}, which is not "
                    f"a top-level column of the namespace schema ({known})"
                )


def _write_ids(row: Mapping[str, Any] | None) -> list[str]:
    if not row or not row.get("metadata"):
        return []
    props = json.loads(row["metadata"])
    return list(json.loads(props.get(WRITE_IDS_PROPERTY, "[]")))


def _coerce_columns(columns: ColumnsLike) -> list[pa.Field]:
    """New columns as nullable Arrow fields; types may be spelled as strings."""
    if isinstance(columns, pa.Field):
        return [columns]
    if isinstance(columns, pa.Schema):
        return list(columns)
    if isinstance(columns, Mapping):
        return [pa.field(n, parse_type(t) if isinstance(t, str) else t) for n, t in columns.items()]
    return list(columns)
