"""Loading ``__manifest`` versions into :class:`~partitioning.state.namespace_state.NamespaceState`.

:func:`read_state` checks what a version holds (schema, partition specs, partition
columns) and refuses a damaged one with one line; the last few decoded versions are cached
(:data:`STATE_CACHE_SIZE`), and the version a commit made on a known state is derived from
it in Arrow (:func:`state_after_merge`, :func:`state_after_rewrite`) instead of read back.
"""

from __future__ import annotations

import dataclasses
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence

import lance
import pyarrow as pa
import pyarrow.compute as pc

from partitioning.errors import CorruptNamespace, InvalidInput, NamespaceNotFound, SpecError
from partitioning.spec.partition_spec import PartitionSpec
from partitioning.spec.schema import NamespaceSchema, field_id_of
from partitioning.state.lean_rows import LEAN_MIN_ROWS, LeanRows
from partitioning.state.namespace_state import NamespaceState, Once
from partitioning.state.rows import ReadRows, read_rows
from partitioning.storage.manifest import SCHEMA_KEY, SPEC_KEY_PREFIX, ManifestStore, partition_column

__all__ = ["clear_state_cache", "read_state", "state_after_merge", "state_after_rewrite"]


_SPEC_KEY_RE = re.compile(rf"^{SPEC_KEY_PREFIX}(\d+)$")

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
        state, version=committed.version, rows_source=Once(rows), read_source=None, lean=None
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
    read = Once(lambda: read_rows(ds, previous))
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
