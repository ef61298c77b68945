"""One ``__manifest`` version read into Python: :class:`NamespaceState` and its rows.

:func:`read_state` checks what a version holds (schema, partition specs, partition
columns) and refuses a damaged one with one line; :class:`PartitionTable` is one table
row, :class:`TableCommit` a request to record one, and :func:`open_partition_table`
opens a table at the version its row selects.
"""

from __future__ import annotations

import dataclasses
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

import lance
import pyarrow as pa
import pyarrow.compute as pc

from partitioning.errors import CorruptNamespace, InvalidInput, NamespaceNotFound, SpecError, translate_lance_errors
from partitioning.spec.partition_spec import PartitionSpec
from partitioning.spec.schema import NamespaceSchema, field_id_of
from partitioning.spec.transforms import canonical_float
from partitioning.state.lean_rows import LEAN_MIN_ROWS, LeanRows, plain_row
from partitioning.state.lookup import namespace_rows, rows_by_id, table_rows_for_keys
from partitioning.state.rows import ReadRows, read_rows
from partitioning.state.scan import table_rows_by_spec
from partitioning.storage.locations import PartitionKey, spec_id_of
from partitioning.storage.manifest import (
    ROW_ADDRESS,
    SCHEMA_KEY,
    SPEC_KEY_PREFIX,
    ManifestStore,
    partition_column,
    table_uri,
)

if TYPE_CHECKING:
    from partitioning.storage.guard import Guard
    from partitioning.storage.history import Operation

__all__ = [
    "ManifestHandle",
    "NamespaceState",
    "PartitionTable",
    "TableCommit",
    "clear_state_cache",
    "open_partition_table",
    "read_state",
    "state_after_merge",
    "state_after_rewrite",
]

T = TypeVar("T")
_SPEC_KEY_RE = re.compile(rf"^{SPEC_KEY_PREFIX}(\d+)$")


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
class NamespaceState:
    """One ``__manifest`` version, decoded and checked. Immutable and shared: :func:`read_state`
    hands the same object to every load of that version (see :data:`STATE_CACHE_SIZE`).

    :attr:`manifest` is every row as Arrow columns, made by ``rows_source`` on first use
    (a version a commit derived from the one before is computed only if asked for).
    Derived views are built on first use and then kept with the state: :attr:`table_rows`
    (Arrow, what scan planning prunes) and the Python-level :attr:`rows`, :attr:`tables`
    and :attr:`by_key`, so planning a scan never pays for the Python objects."""

    root: str
    version: int
    metadata: dict[str, str]
    schema: NamespaceSchema
    specs: dict[int, PartitionSpec]
    rows_source: Callable[[], pa.Table] = field(repr=False, compare=False)
    read_source: _Once[ReadRows] | None = field(default=None, repr=False, compare=False)
    # A large version read a few columns and rows at a time until something needs it whole.
    lean: LeanRows | None = field(default=None, repr=False, compare=False)

    @cached_property
    def manifest(self) -> pa.Table:
        return self.rows_source()

    @cached_property
    def read(self) -> ReadRows | None:
        """The whole version as Lance read it (rows and addresses); None for a derived state."""
        return self.read_source() if self.read_source is not None else None

    @property
    def read_done(self) -> ReadRows | None:
        """:attr:`read` if this state has read its version whole already (else None, without reading)."""
        return self.read if self.read_source is not None and self.read_source.done else None

    def _lean(self) -> LeanRows | None:
        """Where lookups go while the version has not been read whole (None: to :attr:`manifest`)."""
        return self.lean if self.read_done is None else None

    @property
    def row_addresses(self) -> pa.Array | None:
        """Each manifest row's Lance address, when this state was read (not derived)."""
        return self.read.addresses if self.read is not None else None

    def addresses_of(self, object_ids: Iterable[str]) -> dict[str, int] | None:
        """The Lance row address (``_rowaddr``) in version :attr:`version` of each row with
        one of these ids (ids not in the version are left out); None for a state that was
        derived from the one before rather than read (its addresses are not known), or when
        an id is on several rows."""
        lean = self._lean()
        if lean is not None:
            found = lean.rows_by_id(set(object_ids))
            if found is not None:
                if any(len(rows) > 1 for rows in found.values()):
                    return None  # an id on several rows (another client's doing): found by id, every copy
                return {i: rows[0][ROW_ADDRESS] for i, rows in found.items()}
        if self.row_addresses is None:
            return None
        wanted = pa.array(sorted(set(object_ids)), pa.string())
        mask = pc.is_in(self.manifest.column("object_id"), value_set=wanted)
        ids = self.manifest.column("object_id").filter(mask).to_pylist()
        if len(ids) != len(set(ids)):
            return None  # an id on several rows (another client's doing): found by id, every copy
        return dict(zip(ids, self.row_addresses.filter(mask).to_pylist(), strict=True))

    @property
    def current_spec(self) -> PartitionSpec:
        return self.specs[max(self.specs)]

    def spec(self, spec_id: int) -> PartitionSpec:
        """Spec version ``spec_id``; an unknown one is an input error naming the known ones."""
        try:
            return self.specs[spec_id]
        except KeyError:
            raise InvalidInput(
                f"no partition spec v{spec_id}; specs are {', '.join(f'v{i}' for i in sorted(self.specs))}"
            ) from None

    @cached_property
    def table_rows(self) -> Mapping[int, pa.Table]:
        """Per known spec version, its table rows as Arrow columns (``object_id``, ``location``, the
        ``read_*`` columns and that spec's ``partition_field_*`` columns), in manifest order."""
        return table_rows_by_spec(self.manifest, self.specs)

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
            spec_id = spec_id_of(row["object_id"])
            if row["object_type"] != "table" or spec_id not in self.specs:
                continue
            other = owner.setdefault(row["location"], row["object_id"])
            if other != row["object_id"]:
                raise CorruptNamespace(
                    f"__manifest table rows {other!r} and {row['object_id']!r} both have location "
                    f"{row['location']!r}; remove one with PartitionedNamespace.remove_tables"
                )
            out.append(self._table(spec_id, row))
        return sorted(out, key=lambda p: p.object_id)

    @cached_property
    def by_key(self) -> dict[tuple[int, PartitionKey], PartitionTable]:
        return {(p.spec_id, p.key): p for p in self.tables}

    def _table(self, spec_id: int, row: Mapping[str, Any]) -> PartitionTable:
        return PartitionTable(
            object_id=row["object_id"],
            location=row["location"],
            uri=table_uri(self.root, row["object_id"], row["location"]),
            spec_id=spec_id,
            values={f.field_id: row.get(partition_column(f.field_id)) for f in self.specs[spec_id].fields},
            read_version=row.get("read_version"),
            read_branch=row.get("read_branch"),
            read_tag=row.get("read_tag"),
        )

    # -- lookups that decode only the rows asked for (partitioning.state.lookup) -------------------------
    def find_tables(self, spec_id: int, keys: Iterable[PartitionKey]) -> dict[PartitionKey, PartitionTable]:
        """The table of each partition key of spec ``spec_id`` in ``keys`` that exists; only
        those rows are decoded (a commit touching one of 20,000 partitions reads one)."""
        wanted = {tuple(canonical_float(v) for v in k) for k in keys}
        if "by_key" in self.__dict__:
            return {k: t for k in wanted if (t := self.by_key.get((spec_id, k))) is not None}
        found = self._found_tables
        missing = {k for k in wanted if (spec_id, k) not in found}
        if missing:
            spec = self.spec(spec_id)
            lean = self._lean()
            found_rows = lean.table_rows(spec, missing) if lean is not None else None
            if found_rows is not None:
                rows = found_rows
            else:
                source = self.table_rows[spec_id] if "table_rows" in self.__dict__ else self.manifest
                rows = table_rows_for_keys(source, spec, missing)
            for k in missing:
                found[(spec_id, k)] = self._table(spec_id, rows[k]) if k in rows else None
        return {k: t for k in wanted if (t := found[(spec_id, k)]) is not None}

    def rows_for(self, object_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        """The manifest rows with these object ids (absent ids are left out), as dicts."""
        wanted = set(object_ids)
        if "rows_by_id" in self.__dict__:
            return {i: r for i in wanted if (r := self.rows_by_id.get(i)) is not None}
        found = self._found_rows
        missing = wanted - found.keys()
        if missing:
            lean = self._lean()
            copies = lean.rows_by_id(missing) if lean is not None else None
            if copies is not None:
                rows = {i: plain_row(same_id[-1]) for i, same_id in copies.items()}
            else:
                rows = rows_by_id(self.manifest, missing)
            for i in missing:
                found[i] = rows.get(i)
        return {i: dict(r) for i in wanted if (r := found[i]) is not None}

    # What the lookups above found (None: absent), kept with this state (a successor starts empty).
    @cached_property
    def _found_tables(self) -> dict[tuple[int, PartitionKey], PartitionTable | None]:
        return {}

    @cached_property
    def _found_rows(self) -> dict[str, dict[str, Any] | None]:
        return {}

    def tables_by_id(self, object_ids: Iterable[str]) -> dict[str, PartitionTable]:
        """The partition tables (of known spec versions) with these object ids; only their rows are decoded."""
        out = {}
        for object_id, row in self.rows_for(object_ids).items():
            spec_id = spec_id_of(object_id)
            if row["object_type"] == "table" and spec_id in self.specs:
                out[object_id] = self._table(spec_id, row)
        return out

    def namespaces_for(
        self, spec: PartitionSpec, keys: Iterable[PartitionKey] | None
    ) -> dict[tuple[str, PartitionKey], str]:
        """The partition namespaces of ``spec`` above ``keys`` (None: all of them)."""
        if keys is None:
            return namespace_rows(self.manifest, spec, None)
        wanted = {tuple(canonical_float(v) for v in k) for k in keys}
        lean = self._lean()
        found = lean.namespace_rows(spec, wanted) if lean is not None else None
        return found if found is not None else namespace_rows(self.manifest, spec, wanted)

    def location_holders(self, locations: Iterable[str]) -> list[tuple[str, str]]:
        """``(object_id, location)`` of every row whose location is one of ``locations``."""
        wanted = sorted(set(locations))
        if not wanted:
            return []
        lean = self._lean()
        if lean is not None:
            return lean.location_holders(wanted)
        manifest = self.manifest
        holders = manifest.filter(pc.is_in(manifest.column("location"), value_set=pa.array(wanted, pa.string())))
        return list(zip(holders.column("object_id").to_pylist(), holders.column("location").to_pylist(), strict=True))


class ManifestHandle(Protocol):
    """What :mod:`partitioning.state.commits` and :mod:`partitioning.state.evolution` use of a namespace."""

    root: str
    _store: ManifestStore
    _state: NamespaceState

    def refresh(self) -> object: ...

    def commit_once(
        self,
        commits: Sequence[TableCommit],
        *,
        replace_all: bool = False,
        write_id: str | None = None,
        operation: Operation | None = None,
        guard: Guard | None = None,
    ) -> int: ...


STATE_CACHE_SIZE = 4
_cache: OrderedDict[Hashable, NamespaceState] = OrderedDict()
_cache_lock = threading.Lock()


def _version_key(ds: lance.LanceDataset, root: str) -> Hashable:
    """What identifies one ``__manifest`` version's content: the URI, the version and its manifest's
    commit timestamp and summary (files, rows, bytes), read from the already opened manifest.
    A namespace removed and created again at the same root reuses version numbers, not timestamps."""
    v = ds.get_version()
    return (root, ds.uri, v["version"], v["timestamp"], tuple(sorted(v["metadata"].items())))


def clear_state_cache() -> None:
    """Forget every decoded ``__manifest`` version (benchmarks measure cold loads with it)."""
    with _cache_lock:
        _cache.clear()


def read_state(ds: lance.LanceDataset, root: str, previous: NamespaceState | None = None) -> NamespaceState:
    """The state of the ``__manifest`` version ``ds``, checked (one line naming what is damaged).

    Which version is read is the caller's (``ds``, opened at the latest or a given version);
    only the decoding is cached: the last :data:`STATE_CACHE_SIZE` versions read that passed
    the checks are kept per content key (:func:`_version_key`), so loading a version again
    costs no ``__manifest`` scan. Given ``previous`` (an older version's state, read rather
    than derived), only the fragments that changed since are read
    (:func:`partitioning.state.rows.read_rows`).
    """
    key = _version_key(ds, root)
    with _cache_lock:
        state = _cache.get(key)
        if state is not None:
            _cache.move_to_end(key)
            return state
    state = _decode_state(ds, root, previous.read_done if previous is not None else None)
    _remember(key, state)
    return state


def state_after_merge(
    state: NamespaceState,
    committed: lance.LanceDataset,
    rows: pa.Table,
    *,
    delete_ids: Iterable[str] = (),
    delete_other_partitions: bool = False,
) -> NamespaceState:
    """The state of ``committed``, the ``__manifest`` version a row merge made on ``state``.

    When ``committed`` is the very next version, nothing else was committed in between,
    so its rows are ``state``'s with ``rows`` upserted by ``object_id`` and ``delete_ids``
    (or, with ``delete_other_partitions``, every partition row not in ``rows``) removed:
    derived here in Arrow instead of read back. Otherwise the version is read. Either
    way the result is cached like :func:`read_state`'s.
    """
    deleted = tuple(delete_ids)
    return _successor(state, committed, lambda: _merged(state.manifest, rows, deleted, delete_other_partitions))


def state_after_rewrite(state: NamespaceState, committed: lance.LanceDataset) -> NamespaceState:
    """The state of ``committed``, a version that rewrote ``state``'s rows without changing them
    (a ``__manifest`` compaction): the same rows when it is the very next version, else read."""
    return _successor(state, committed, lambda: state.manifest)


def _successor(state: NamespaceState, committed: lance.LanceDataset, rows: Callable[[], pa.Table]) -> NamespaceState:
    """``committed``'s state with ``rows`` (run on first use) when it is the very next version with
    the same properties, so that nothing else can have been committed in between; else read.
    Cached like :func:`read_state`'s."""
    if committed.version != state.version + 1 or ManifestStore.metadata_of(committed) != state.metadata:
        return read_state(committed, state.root)
    # A derived version's rows sit at other addresses (folded, compacted): not known.
    successor = dataclasses.replace(
        state, version=committed.version, rows_source=_Once(rows), read_source=None, lean=None
    )
    _remember(_version_key(committed, state.root), successor)
    return successor


def _merged(manifest: pa.Table, rows: pa.Table, delete_ids: Sequence[str], delete_other_partitions: bool) -> pa.Table:
    """``manifest`` with ``rows`` upserted by ``object_id`` and ``delete_ids`` (or, with
    ``delete_other_partitions``, every partition row not in ``rows``) removed, as Lance's merge leaves it."""
    upserted = rows.select(manifest.schema.names).cast(manifest.schema)
    gone = pa.array(sorted({*upserted.column("object_id").to_pylist(), *delete_ids}), pa.string())
    ids = manifest.column("object_id")
    keep = pc.invert(pc.is_in(ids, value_set=gone))
    if delete_other_partitions:
        keep = pc.and_(keep, pc.invert(pc.match_substring(ids, "$")))
    out = pa.concat_tables([manifest.filter(keep), upserted])
    return out.combine_chunks() if out.column(0).num_chunks > _MAX_CHUNKS else out


_MAX_CHUNKS = 64  # many commits in one process: copy once the chunks pile up


class _Once(Generic[T]):
    """A thunk run once, then forgotten, so a derived state does not keep its base alive."""

    def __init__(self, fn: Callable[[], T]) -> None:
        self._fn: Callable[[], T] | None = fn
        self._value: T | None = None

    @property
    def done(self) -> bool:
        return self._fn is None

    def __call__(self) -> T:
        if self._fn is not None:
            self._value, self._fn = self._fn(), None
        assert self._value is not None
        return self._value


def _remember(key: Hashable, state: NamespaceState) -> None:
    with _cache_lock:
        _cache[key] = state
        while len(_cache) > STATE_CACHE_SIZE:
            _cache.popitem(last=False)


def _check_bare_version(ds: lance.LanceDataset, root: str) -> None:
    """A version before the spec was stored (the first step of CREATE, which history lists)
    is refused in one line naming the readable versions."""
    try:
        latest = ds.latest_version
    except (OSError, ValueError, RuntimeError):
        return
    if ds.version < latest:
        raise InvalidInput(
            f"{root}: __manifest version {ds.version} is the first step of creating the namespace and holds "
            f"no partition spec yet; the readable versions are {ds.version + 1}..{latest}"
        )


def _decode_state(ds: lance.LanceDataset, root: str, previous: ReadRows | None = None) -> NamespaceState:
    metadata = ManifestStore.metadata_of(ds)
    spec_keys = {int(m.group(1)): k for k in metadata if (m := _SPEC_KEY_RE.match(k))}
    if not spec_keys:
        _check_bare_version(ds, root)
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
    lean = None
    if previous is None and ds.count_rows() >= LEAN_MIN_ROWS:
        lean = LeanRows(ds, expected[1:])
    read = _Once(lambda: read_rows(ds, previous))
    if lean is None:
        read()  # a small version, or one read on from an earlier read: read now, checked at load
    return NamespaceState(
        root=root,
        version=ds.version,
        metadata=metadata,
        schema=schema,
        specs=specs,
        rows_source=lambda: read().rows,
        read_source=read,
        lean=lean,
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
