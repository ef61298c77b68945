"""Replacing a table in one step: ``REPLACE TABLE ... AS SELECT`` and an atomic ``CREATE TABLE ... AS SELECT``.

Iceberg's and Delta's promise, kept on one root: a replace makes the new schema, partition
spec and rows visible together, and a failure anywhere leaves the table exactly as it was;
history before it stays readable (``VERSION AS OF`` an older version reads the old rows
under the old schema). A :class:`Replacement` is planned before any row is written and
carried to the commit; the write protocol runs unchanged on a *view* of the namespace with
the replacement applied in memory (:meth:`Replacement.view`), so tasks write fragments
under the new schema and spec and :func:`partitioning.tables.write.commit_write` commits
them as an overwrite:

- **replace** (a namespace exists): the view's commit stages the new root properties
  (:mod:`partitioning.storage.staged`, invisible to readers), then ONE rows commit removes
  every partition table, records the new ones and applies the staged properties, then the
  properties are written out as the plain ones. Every version it makes is recorded as
  ``REPLACE`` (steps ``columns`` for new ``partition_field_*`` columns, ``stage``, the rows,
  ``finish``); only the rows commit changes what readers see. A schema or spec change
  committed by someone else after the plan fails the replace (nothing committed); appends
  do not (a replace replaces whatever is there, as Iceberg's does).
- **create** (no namespace): the first ``__manifest`` version already holds every
  partition table, so the table appears with its rows or not at all.

Field ids: a column of the new schema that is the old column (same name, same type) keeps
its id, any other gets a fresh one; a partition field with the same source ids and
transform as a field of any spec keeps that field's id (the spec's reuse rule). The new
spec keeps the current spec's id when it is the same, else it is spec version N+1.
Index definitions go: the replaced table has no indexes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import pyarrow as pa

from partitioning.errors import ConcurrentModification, NamespaceAlreadyExists, NamespaceNotFound
from partitioning.namespace import PartitionedNamespace, TableCommit
from partitioning.spec.field_ids import strip_lance_metadata
from partitioning.spec.partition_by import spec_of_parts
from partitioning.spec.partition_spec import PartitionField, PartitionSpec
from partitioning.spec.schema import NamespaceSchema
from partitioning.spec.transforms import Transform
from partitioning.state.commit_rows import commit_rows, lock_rows
from partitioning.state.commits import finish_properties, stage_properties, unstage_properties
from partitioning.state.evolution import add_manifest_columns
from partitioning.state.loading import read_state
from partitioning.state.namespace_state import NamespaceState, Once
from partitioning.storage.guard import Guard
from partitioning.storage.history import Operation
from partitioning.storage.intents import Intent
from partitioning.storage.manifest import (
    INDEX_KEY_PREFIX,
    PARTITION_COLUMN_PREFIX,
    SCHEMA_KEY,
    SPEC_KEY_PREFIX,
    ManifestStore,
    manifest_schema,
    partition_column,
)

__all__ = ["Replacement", "plan_replacement", "replaced_schema"]

Kind = Literal["create", "replace", "create_or_replace"]
Part = tuple[Transform, Sequence[str], "str | None"]


@dataclass(frozen=True)
class Replacement:
    """What a replace makes of ``root``: ``schema`` and ``spec``, planned on the version whose
    schema and specs were ``base_schema`` / ``base_specs`` (None: no namespace, a create)."""

    root: str
    schema: NamespaceSchema
    spec: PartitionSpec
    base_schema: str | None
    base_specs: tuple[str, ...] = ()

    @property
    def creates(self) -> bool:
        return self.base_schema is None

    def operation(self, **metrics: int | float) -> Operation:
        name = "CREATE" if self.creates else "REPLACE"
        return Operation(name, {"spec": str(self.spec), "sql": "true"}, metrics)

    def view(self, storage_options: Mapping[str, str] | None) -> PartitionedNamespace:
        """The namespace with this replacement applied in memory: what the write plans on and commits through."""
        store = ManifestStore(self.root, storage_options)
        return _Creating(self, store) if self.creates else _Replacing(self, store)

    # -- the replace's state ------------------------------------------------------------------
    def check_base(self, state: NamespaceState) -> None:
        """The namespace's schema and specs are still those the replace was planned on."""
        specs = tuple(s.to_json() for _, s in sorted(state.specs.items()))
        if state.schema.to_json() != self.base_schema or specs != self.base_specs:
            raise ConcurrentModification(
                f"the schema or partition spec of {self.root} changed while the replace ran; nothing was "
                "committed, run the statement again"
            )

    def new_columns(self, manifest: pa.Schema) -> dict[str, pa.DataType]:
        """The ``partition_field_*`` columns the new spec needs that ``__manifest`` lacks."""
        return {
            f.field_id: f.arrow_result_type(self.schema)
            for f in self.spec.fields
            if partition_column(f.field_id) not in manifest.names
        }

    def properties(self, current: Mapping[str, str]) -> dict[str, str]:
        """The root properties after the replace: ``current``'s without index definitions,
        with the new schema and spec."""
        props = {k: v for k, v in current.items() if not k.startswith(INDEX_KEY_PREFIX)}
        props[SCHEMA_KEY] = self.schema.to_json()
        props[f"{SPEC_KEY_PREFIX}{self.spec.spec_id}"] = self.spec.to_json()
        return props

    def applied(self, state: NamespaceState) -> NamespaceState:
        """``state`` as the replace will leave it, before its rows: the new schema, the new spec
        (with its ``v<N>`` row), the new properties; the tables are still there."""
        manifest = state.manifest
        lock = f"v{self.spec.spec_id}"
        if not state.rows_for([lock]):
            row = dict.fromkeys(manifest.schema.names)
            row.update(object_id=lock, object_type="namespace", metadata="{}")
            manifest = pa.concat_tables([manifest, pa.Table.from_pylist([row], schema=manifest.schema)])
        return dataclasses.replace(
            state,
            metadata=self.properties(state.metadata),
            schema=self.schema,
            specs={**state.specs, self.spec.spec_id: self.spec},
            rows_source=Once(lambda: manifest),
            read_source=None,
            lean=None,
        )


def _latest_applied(replacement: Replacement, store: ManifestStore, guard: Guard | None) -> NamespaceState:
    """The latest version with ``replacement`` applied, after adding the ``__manifest`` columns
    its spec needs (a commit that changes nothing readers see)."""
    ds = store.dataset()
    replacement.check_base(read_state(ds, store.root))
    columns = replacement.new_columns(ds.schema)
    if columns:
        add_manifest_columns(store, columns, replacement.operation().with_parameters(step="columns"))
        ds = store.dataset()
    if guard is not None:
        guard.read(ds.version)
    state = read_state(ds, store.root)
    replacement.check_base(state)
    return replacement.applied(state)


class _Replacing(PartitionedNamespace):
    """The latest version with a :class:`Replacement` applied; its commit replaces (see the module)."""

    def __init__(self, replacement: Replacement, store: ManifestStore) -> None:
        self.replacement = replacement
        super().__init__(store.root, _latest_applied(replacement, store, None), store.storage_options)

    def refresh(self, *, guard: Guard | None = None) -> _Replacing:
        self._state = _latest_applied(self.replacement, self._store, guard)
        return self

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
        recorded = _as_replace(operation, self.replacement)
        base = self._store.dataset(self._state.version)
        token = stage_properties(self._store, base, self._state.metadata, recorded)
        try:
            version = super().commit_once(
                commits,
                replace_all=True,
                write_id=write_id,
                operation=recorded,
                naming_seed=naming_seed,
                guard=guard,
                intent=intent,
                applied=token,
            )
        except BaseException:
            unstage_properties(self._store, token, recorded)
            raise
        finish_properties(self._store, recorded)
        return version


class _Creating(PartitionedNamespace):
    """A namespace not created yet; its commit creates ``__manifest`` with every table in it."""

    def __init__(self, replacement: Replacement, store: ManifestStore) -> None:
        self.replacement = replacement
        spec = replacement.spec
        columns = {f.field_id: f.arrow_result_type(replacement.schema) for f in spec.fields}
        row: dict[str, Any] = dict.fromkeys(manifest_schema(columns).names)
        row.update(object_id=f"v{spec.spec_id}", object_type="namespace", metadata="{}")
        rows = pa.Table.from_pylist([row], schema=manifest_schema(columns))
        props = replacement.properties({})
        state = NamespaceState(store.root, 0, props, replacement.schema, {spec.spec_id: spec}, Once(lambda: rows))
        super().__init__(store.root, state, store.storage_options)

    def refresh(self, *, guard: Guard | None = None) -> _Creating:
        if self._store.exists():
            raise NamespaceAlreadyExists(
                f"a table was created at {self.root} while this one was written; nothing was committed"
            )
        return self

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
        state = self._state
        names = state.manifest.schema.names
        rows = [*commit_rows(state, commits, names), *lock_rows(state, state.specs, write_id)]
        table = pa.Table.from_pylist(rows, schema=state.manifest.schema)
        recorded = _as_replace(operation, self.replacement)
        created = self._store.create(table, state.metadata, properties=recorded.properties())
        self._state = read_state(created, self.root)
        return int(created.version)


def _as_replace(operation: Operation | None, replacement: Replacement) -> Operation:
    """The write's metrics, recorded under the replace's (or create's) name."""
    base = replacement.operation()
    return base.with_metrics(**dict(operation.metrics)) if operation is not None else base


# -- planning -----------------------------------------------------------------------------------
def replaced_schema(
    old: NamespaceSchema, new: pa.Schema, same: Callable[[pa.Field, pa.Field], bool] | None = None
) -> NamespaceSchema:
    """``new`` with field ids: a column that ``same`` says is ``old``'s column of that name
    (default: the same Arrow type) keeps that column (its ids and storage type), any other
    gets fresh ids after every id ``old`` ever handed out."""
    same = same or (lambda before, after: strip_lance_metadata(before).type == after.type)
    fields = []
    for f in new:
        index = old.arrow.get_field_index(f.name)
        before = old.arrow.field(index) if index >= 0 else None
        if before is not None and same(before, f):
            fields.append(before.with_nullable(f.nullable))
        else:
            fields.append(strip_lance_metadata(f))
    return NamespaceSchema.from_arrow(pa.schema(fields), next_field_id=old.next_field_id)


def _replaced_spec(
    state: NamespaceState, schema: NamespaceSchema, parts: Sequence[Part], taken: set[str]
) -> PartitionSpec:
    """The spec of ``parts`` on ``schema``, ids reused by signature; the current spec if the same."""
    candidate = spec_of_parts(parts, schema, spec_id=max(state.specs) + 1)
    known = {f.field_id: f for spec in state.specs.values() for f in spec.fields}
    by_signature = {f.signature: f for f in known.values()}
    used = set(known) | taken
    fields = []
    for f in candidate.fields:
        same = by_signature.get(f.signature)
        if same is not None:
            fields.append(same)
            continue
        field_id, n = f.field_id, 2
        while field_id in used:
            field_id, n = f"{f.field_id}_{n}", n + 1
        used.add(field_id)
        fields.append(PartitionField(field_id, f.source_ids, transform=f.transform, result_type=f.result_type))
    current = state.current_spec
    if [f.to_dict() for f in fields] == [f.to_dict() for f in current.fields]:
        return current
    spec = PartitionSpec(candidate.spec_id, fields)
    spec.validate(schema)
    return spec


def plan_replacement(
    root: str,
    arrow: pa.Schema,
    parts: Sequence[Part],
    *,
    kind: Kind,
    storage_options: Mapping[str, str] | None = None,
    same: Callable[[pa.Field, pa.Field], bool] | None = None,
) -> Replacement:
    """What replacing (or creating) ``root`` with ``arrow``'s columns partitioned by ``parts``
    makes, checked now (a bad spec or column type is one line, before any row is written).
    ``kind`` ``create`` refuses an existing namespace, ``replace`` a missing one."""
    store = ManifestStore(root, storage_options)
    exists = store.exists()
    if exists and kind == "create":
        raise NamespaceAlreadyExists(f"table already exists at {store.root}")
    if not exists and kind == "replace":
        raise NamespaceNotFound(f"no table at {store.root} to replace")
    if not exists:
        schema = NamespaceSchema.from_arrow(pa.schema([strip_lance_metadata(f) for f in arrow]))
        return Replacement(store.root, schema, spec_of_parts(parts, schema), None)
    state = read_state(store.dataset(), store.root)
    schema = replaced_schema(state.schema, arrow, same)
    columns = store.dataset(state.version).schema.names
    taken = {c[len(PARTITION_COLUMN_PREFIX) :] for c in columns if c.startswith(PARTITION_COLUMN_PREFIX)}
    spec = _replaced_spec(state, schema, parts, taken)
    return Replacement(
        store.root,
        schema,
        spec,
        state.schema.to_json(),
        tuple(s.to_json() for _, s in sorted(state.specs.items())),
    )
