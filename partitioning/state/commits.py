"""``__manifest`` commits of a namespace: record, replace and remove partition tables.

Every commit also rewrites the ``v<N>`` row of each spec version it touches (the lock
rows), so any two commits based on the same manifest version conflict and the second
must be rebased. The ``v<N>`` rows also remember the write ids of recent commits and
hold intents; :mod:`partitioning.state.commit_rows` builds the rows a commit writes.
The :class:`~partitioning.namespace.PartitionedNamespace` methods of the same names call
these functions.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import random
import secrets
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from functools import partial

import lance
import pyarrow as pa

from partitioning.errors import ConcurrentModification, PartitioningError, TableNotFound
from partitioning.spec.values import canonical_float
from partitioning.state.commit_rows import commit_rows, lock_rows
from partitioning.state.loading import state_after_merge, state_after_rewrite
from partitioning.state.namespace_state import ManifestHandle, NamespaceState
from partitioning.state.partition_tables import TableCommit
from partitioning.state.upkeep import fold_merge, maybe_compact_manifest
from partitioning.storage.guard import Guard, Reference, guarded
from partitioning.storage.history import Operation
from partitioning.storage.intents import Intent, IntentWait, blocking, intents_in, wait_until_released
from partitioning.storage.locations import object_id_from_location, seed_named, spec_id_of
from partitioning.storage.manifest import ManifestStore, note_latest
from partitioning.storage.paths import table_uri
from partitioning.storage.staged import staged_key

__all__ = [
    "DEFAULT_COMMIT_RETRIES",
    "commit_metadata",
    "commit_once",
    "commit_tables",
    "finish_properties",
    "merge_manifest_rows",
    "release_intent",
    "remove_tables",
    "stage_properties",
    "take_intent",
    "take_intent_for",
    "unstage_properties",
]

DEFAULT_COMMIT_RETRIES = 8
_log = logging.getLogger(__name__)


def merge_manifest_rows(
    store: ManifestStore,
    base: lance.LanceDataset,
    rows: pa.Table,
    operation: Operation | None,
    *,
    delete_other_partitions: bool = False,
    delete_ids: Sequence[str] = (),
    delete_others: bool = False,
) -> int:
    """:meth:`ManifestStore.merge_rows` recording ``operation`` in the commit's Lance
    transaction properties (:mod:`partitioning.storage.history`). Returns the new version."""
    committed = store.merge_rows(
        base,
        rows,
        delete_other_partitions=delete_other_partitions,
        delete_ids=delete_ids,
        delete_others=delete_others,
        transaction_properties=operation.properties() if operation is not None else None,
    )
    maybe_compact_manifest(committed, storage_options=store.storage_options)
    return int(committed.version)


def commit_metadata(
    store: ManifestStore,
    base: lance.LanceDataset,
    properties: Mapping[str, str | None],
    operation: Operation | None,
    *,
    replace: bool = False,
) -> int:
    """:meth:`ManifestStore.update_metadata` on ``base`` recording ``operation``; ``replace``
    drops every key not in ``properties``. Returns the version."""
    recorded = operation.properties() if operation is not None else None
    return store.update_metadata(properties, base=base, replace=replace, transaction_properties=recorded)


def stage_properties(
    store: ManifestStore, base: lance.LanceDataset, properties: Mapping[str, str], operation: Operation
) -> str:
    """Stage root ``properties`` (all of them) on ``base`` for a rows commit to apply
    (:mod:`partitioning.storage.staged`): a commit readers ignore. Returns the token."""
    token = secrets.token_hex(8)
    staged = {staged_key(token): json.dumps(dict(properties), separators=(",", ":"), sort_keys=True)}
    commit_metadata(store, base, staged, operation.with_parameters(step="stage"))
    return token


def unstage_properties(store: ManifestStore, token: str, operation: Operation) -> None:
    """Remove staged properties nobody applied (best effort: readers ignore them anyway)."""
    try:
        commit_metadata(store, store.dataset(), {staged_key(token): None}, operation.with_parameters(step="unstage"))
    except PartitioningError:
        pass


def finish_properties(store: ManifestStore, operation: Operation) -> int | None:
    """Write applied staged properties as the plain ones; None when that commit loses a race
    or fails (they are applied already, and the next properties commit of anyone writes them
    out), so the operation whose rows committed never reports a failure for it."""
    try:
        return commit_metadata(store, store.dataset(), {}, operation.with_parameters(step="finish"))
    except ConcurrentModification:
        return None
    except (PartitioningError, OSError) as exc:
        _log.warning("%s: the applied properties stay staged until the next properties commit (%s)", store.root, exc)
        return None


def commit_tables(
    ns: ManifestHandle, commits: Iterable[TableCommit], *, max_retries: int, operation: Operation | None = None
) -> int:
    """``ns.commit_once`` on the latest manifest, retried up to ``max_retries`` times on conflicts."""
    requested = list(commits)
    last_error: ConcurrentModification | None = None
    for _ in range(max_retries + 1):
        ns.refresh()
        try:
            return ns.commit_once(requested, operation=operation)
        except ConcurrentModification as exc:
            last_error = exc
    raise ConcurrentModification(
        f"__manifest commit at {ns.root} failed after {max_retries + 1} attempts "
        f"because of concurrent writers: {last_error}"
    ) from last_error


def commit_once(
    ns: ManifestHandle,
    commits: Sequence[TableCommit],
    *,
    replace_all: bool,
    write_id: str | None,
    operation: Operation | None = None,
    naming_seed: bytes | None = None,
    guard: Guard | None = None,
    intent: Intent | None = None,
    remove: Sequence[str] = (),
    applied: str | None = None,
) -> int:
    """One optimistic commit of ``commits`` on the state ``ns`` last read, recording
    ``operation`` (:mod:`partitioning.storage.history`); the new manifest version. ``remove``: ids
    of other tables this commit removes (with the namespaces they leave empty), as an
    overwrite of the partitions a condition selects does.

    Another operation's live intent (:mod:`partitioning.storage.intents`) on a table ``commits``
    touch (or on any table, when ``commits`` create one) makes this commit wait for it to
    end and then raise :class:`~partitioning.storage.intents.IntentWait`, so the caller rebases.
    ``intent`` is the committer's own: it is not waited for, and this commit removes it.

    The commit goes through the protected path (:mod:`partitioning.storage.guard`): ``guard`` is
    the operation's (whose lease it took before reading what it builds on); without one,
    a guard of its own is taken for the commit. Either way, right before the ``__manifest``
    commit it waits for vacuums that may not have seen the lease and, if one ran, checks
    every table version ``commits`` point at.

    ``naming_seed``: the secret seed the write named its new partitions with, given only
    while nothing of the write can be in ``__manifest`` yet (a write's first attempt). The
    ids and locations it named (:func:`partitioning.storage.locations.seed_named`) are then known
    to be in no row, so they are not looked up: a new partition's commit reads neither
    the ``object_id`` nor the ``location`` column of a large manifest. ``applied``: the token
    of root properties staged for this commit (:mod:`partitioning.storage.staged`)."""
    state = ns._state
    fresh = _seed_named(state, commits, naming_seed)
    touched = {c.object_id or object_id_from_location(c.location) for c in commits} | set(remove)
    _wait_for_intents(
        ns, touched, lambda: replace_all or bool(touched - set(state.rows_for(touched - fresh[0]))), intent
    )
    if replace_all or intent is not None:
        spec_ids = set(state.specs)
    else:
        spec_ids = {c.spec_id for c in commits} | {spec_id_of(oid) for oid in remove}
        spec_ids = (spec_ids & set(state.specs)) or {state.current_spec.spec_id}
    base = ns._store.dataset(state.version)
    rows = commit_rows(state, commits, base.schema.names, fresh=fresh)
    rows.extend(
        lock_rows(state, spec_ids, write_id, clear_intent=intent.token if intent is not None else None, applied=applied)
    )
    table = pa.Table.from_pylist(rows, schema=base.schema)
    refs = [
        Reference(oid, table_uri(ns.root, oid, c.location), c.read_version)
        for c in commits
        for oid in [c.object_id or object_id_from_location(c.location)]
    ]
    doomed = _removed_with_namespaces(
        state, remove, {c.object_id or object_id_from_location(c.location) for c in commits}
    )
    with _guard_of(ns, guard) as g:
        g.before_commit(refs)
        return _commit(ns, base, table, operation, replace_all=replace_all, fresh_ids=fresh[0], delete_ids=doomed)


def _removed_with_namespaces(state: NamespaceState, remove: Sequence[str], kept: set[str]) -> list[str]:
    """``remove`` (tables not in ``kept``) and the namespace rows they alone keep alive."""
    doomed = set(remove) - kept
    if not doomed:
        return []
    tables = [
        r["object_id"] for r in state.rows if r["object_type"] == "table" and spec_id_of(r["object_id"]) in state.specs
    ]
    remaining = [oid for oid in tables if oid not in doomed] + sorted(kept)
    live = {oid.rsplit("$", k)[0] for oid in remaining for k in range(1, oid.count("$"))}
    empty = {oid.rsplit("$", k)[0] for oid in doomed for k in range(1, oid.count("$"))} - live
    return sorted(doomed | empty)


def _wait_for_intents(ns: ManifestHandle, touched: set[str], creates: Callable[[], bool], own: Intent | None) -> None:
    """Wait for a live intent of another operation that this commit would break, then raise
    :class:`IntentWait` (the caller rebases on the state after it)."""
    now = dt.datetime.now(dt.UTC)
    live = [i for i in _intents(ns._state) if i.live(now) and (own is None or i.token != own.token)]
    if not live:
        return
    held = blocking(live, touched, creates(), own, now)
    if held is None:
        return

    def still_held() -> bool:
        ns.refresh()
        return held.token in {i.token for i in _intents(ns._state)}

    waited = wait_until_released(held, still_held)
    raise IntentWait(
        f"waited {waited:.1f} s for the {held.what} holding partition tables of {ns.root} "
        f"(intent {held.token}); committing again on the state after it"
    )


def _intents(state: NamespaceState) -> list[Intent]:
    return intents_in(state.rows_for(f"v{spec_id}" for spec_id in state.specs).values())


def take_intent(
    ns: ManifestHandle, tables: Iterable[str], duration: dt.timedelta, *, what: str, operation: Operation
) -> Intent:
    """Commit an intent on ``tables`` for ``duration`` (on every ``v<N>`` lock row, based on the
    state ``ns`` last read); :class:`ConcurrentModification` if another commit got in first."""
    now = dt.datetime.now(dt.UTC)
    intent = Intent(secrets.token_hex(8), frozenset(tables), now, now + duration, what)
    state = ns._state
    base = ns._store.dataset(state.version)
    rows = lock_rows(state, state.specs, None, add_intent=intent)
    _commit(ns, base, pa.Table.from_pylist(rows, schema=base.schema), operation)
    return intent


INTENT_MIN = dt.timedelta(seconds=15)
INTENT_MAX = dt.timedelta(minutes=5)
INTENT_ATTEMPTS = 8


def take_intent_for(
    ns: ManifestHandle, tables: Sequence[str], longest: float, *, what: str, refresh: Callable[[], object]
) -> Intent | None:
    """An intent on ``tables`` held for three times ``longest`` (an operation's longest round, in
    seconds; 15 s to 5 min), each try on the state ``refresh`` re-reads; None if other commits
    kept getting in first (:data:`INTENT_ATTEMPTS` tries)."""
    duration = dt.timedelta(seconds=min(INTENT_MAX.total_seconds(), max(INTENT_MIN.total_seconds(), 3 * longest)))
    taken = Operation("INTENT", {"operation": what}, {"tables": len(tables), "seconds": duration.total_seconds()})
    for _ in range(INTENT_ATTEMPTS):
        refresh()
        try:
            return take_intent(ns, tables, duration, what=what, operation=taken)
        except ConcurrentModification:
            time.sleep(random.uniform(0.005, 0.05))
    return None


def release_intent(ns: ManifestHandle, intent: Intent, *, operation: Operation, attempts: int = 4) -> None:
    """Remove ``intent`` (its holder gives up); best effort: it lapses at its ``until`` anyway."""
    for _ in range(attempts):
        ns.refresh()
        state = ns._state
        if intent.token not in {i.token for i in _intents(state)}:
            return
        base = ns._store.dataset(state.version)
        rows = lock_rows(state, state.specs, None, clear_intent=intent.token)
        try:
            _commit(ns, base, pa.Table.from_pylist(rows, schema=base.schema), operation)
            return
        except ConcurrentModification:
            continue


def _guard_of(ns: ManifestHandle, guard: Guard | None) -> AbstractContextManager[Guard]:
    """``guard`` itself, or a guard taken for this commit alone."""
    return nullcontext(guard) if guard is not None else guarded(ns.root, ns._store.storage_options)


def remove_tables(
    ns: ManifestHandle, object_ids: Sequence[str], *, operation: Operation | None = None, guard: Guard | None = None
) -> int:
    """Remove tables, and namespaces left without tables, in one optimistic commit (on the
    protected path, as :func:`commit_once`; it references no new table version)."""
    state = ns._state
    doomed = set(object_ids)
    _wait_for_intents(ns, doomed, lambda: False, None)
    tables = {
        r["object_id"]: spec_id_of(r["object_id"])
        for r in state.rows
        if r["object_type"] == "table" and spec_id_of(r["object_id"]) in state.specs
    }
    unknown = sorted(doomed - set(tables))
    if unknown:
        raise TableNotFound(f"no partition table {unknown[0]!r} in {ns.root}")
    remaining = [oid for oid in tables if oid not in doomed]
    live = {oid.rsplit("$", k)[0] for oid in remaining for k in range(1, oid.count("$"))}
    empty = {oid.rsplit("$", k)[0] for oid in doomed for k in range(1, oid.count("$"))} - live
    spec_ids = {tables[oid] for oid in doomed} or {state.current_spec.spec_id}
    base = ns._store.dataset(state.version)
    rows = pa.Table.from_pylist(lock_rows(state, spec_ids, None), schema=base.schema)
    with _guard_of(ns, guard) as g:
        g.before_commit()
        return _commit(ns, base, rows, operation, delete_ids=sorted(doomed | empty))


def _commit(
    ns: ManifestHandle,
    base: lance.LanceDataset,
    rows: pa.Table,
    operation: Operation | None,
    *,
    replace_all: bool = False,
    delete_ids: Sequence[str] = (),
    fresh_ids: frozenset[str] = frozenset(),
) -> int:
    """Commit ``rows`` on ``base`` (folded when small, :func:`partitioning.state.upkeep.fold_merge`,
    else Lance's ``merge_insert``), take the new state from ``ns``'s, then compact
    ``__manifest`` if it is due (which never fails the commit). Returns the commit's version.
    ``fresh_ids`` are in no row of ``base`` (see :func:`commit_once`)."""
    props = operation.properties() if operation is not None else None
    state = ns._state
    known = None
    if state.version == base.version:
        known = partial(_addresses_of, state, fresh_ids)
    committed = (
        None
        if replace_all
        else fold_merge(base, rows, delete_ids=delete_ids, transaction_properties=props, addresses=known)
    )
    if committed is None:
        committed = ns._store.merge_rows(
            base, rows, delete_other_partitions=replace_all, delete_ids=delete_ids, transaction_properties=props
        )
    ns._state = state_after_merge(state, committed, rows, delete_ids=delete_ids, delete_other_partitions=replace_all)
    version = int(committed.version)
    done = maybe_compact_manifest(committed, storage_options=ns._store.storage_options)
    if done is not None:
        ns._state = state_after_rewrite(ns._state, done.dataset)
    note_latest(ns._store.uri, ns._state.version, ns._store.storage_options)
    return version


def _addresses_of(state: NamespaceState, fresh_ids: frozenset[str], object_ids: Sequence[str]) -> dict[str, int] | None:
    return state.addresses_of([i for i in object_ids if i not in fresh_ids])


def _seed_named(
    state: NamespaceState, commits: Sequence[TableCommit], seed: bytes | None
) -> tuple[frozenset[str], frozenset[str]]:
    """The ids and locations of ``commits`` that ``seed`` named (none without a seed)."""
    ids: set[str] = set()
    locations: set[str] = set()
    if seed is None:
        return frozenset(), frozenset()
    for c in commits:
        if c.object_id is None:
            continue
        spec = state.spec(c.spec_id)
        key = tuple(canonical_float(c.values.get(f.field_id)) for f in spec.fields)
        named, location_named = seed_named(seed, key, c.object_id, c.location)
        ids.update(named)
        if location_named:
            locations.add(c.location)
    return frozenset(ids), frozenset(locations)
