"""Restore, Spark-free: make the namespace what it was at an older ``__manifest`` version.

A restore is a new ``__manifest`` commit (``RESTORE`` in the history, with the source
version) whose rows are that version's rows and whose root properties (schema, partition
specs, index definitions) are that version's, as Delta's ``RESTORE`` brings the schema
back too. No partition dataset is rewritten: the restored rows point at the table
versions they pointed at then, so every one must still exist (vacuum removes them); a
missing one is one line naming the partition and version, and nothing changes.

A restore is a write on the protected path (:mod:`partitioning.storage.guard`): it holds a lease
whose base is the restored version from before it reads that version, so a vacuum
keeps everything the version references; right before its commit it waits for any
vacuum that may not have seen the lease and checks that every table version and data
file it is about to reference exists.

Properties and rows change atomically: when they differ, the restore stages the
restored properties first (:mod:`partitioning.storage.staged`, invisible to readers) and its
rows commit applies them; a crash between the two leaves the namespace as it was, a
crash after the rows commit leaves it restored. A last properties commit writes the
applied ones as the plain properties.

Two things are never taken back: the schema's next field id (an id handed out after the
version stays used, so a column added later never reuses one), and the write ids recent
commits remembered (a retried write that committed after the version does not commit
again).

Concurrency: the rows are one merge commit based on the version the restore read, and it
rewrites every ``v<N>`` lock row, so a commit made since makes it conflict; the restore
then starts again from the new state (up to ``max_attempts`` times, with a growing random
pause), so the racing commit is in the history before the restore, never lost without trace.
"""

from __future__ import annotations

import datetime as dt
import json
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa

from partitioning.errors import ConcurrentModification, InvalidInput, PartitioningError
from partitioning.spec.schema import NamespaceSchema
from partitioning.state.commit_rows import WRITE_IDS_PROPERTY
from partitioning.state.commits import finish_properties, merge_manifest_rows, stage_properties, unstage_properties
from partitioning.state.loading import read_state
from partitioning.state.namespace_state import NamespaceState
from partitioning.storage.guard import Reference, ReferenceGone, guarded, missing_references
from partitioning.storage.history import Operation, version_at
from partitioning.storage.manifest import SCHEMA_KEY, ManifestStore
from partitioning.storage.staged import APPLIED_KEY

__all__ = ["RestoreResult", "restore"]

DEFAULT_ATTEMPTS = 4


@dataclass(frozen=True)
class RestoreResult:
    """What a restore did: the new ``__manifest`` version and the version restored from.
    ``manifest_version == restored_version`` with ``changed`` false when that version was
    already the latest (nothing was committed)."""

    root: str
    manifest_version: int
    restored_version: int
    partitions: int
    changed: bool = True
    attempts: int = 1

    def summary(self) -> str:
        if not self.changed:
            return f"restore {self.root}: __manifest v{self.restored_version} is already the latest; nothing changed"
        return (
            f"restore {self.root}: __manifest v{self.manifest_version} restores v{self.restored_version} "
            f"({self.partitions} partition tables)"
        )


def restore(
    root: str,
    *,
    version: int | None = None,
    timestamp: dt.datetime | dt.date | str | None = None,
    time_zone: str | None = None,
    storage_options: Mapping[str, str] | None = None,
    max_attempts: int = DEFAULT_ATTEMPTS,
    before_commit: Callable[[], None] | None = None,
) -> RestoreResult:
    """Restore ``root`` to ``__manifest`` ``version``, or to the version current at
    ``timestamp`` (a zone-less time is read in ``time_zone``); exactly one of the two.

    ``before_commit`` is called after the restore read the latest state and before it
    commits (a hook for tests and tools).
    """
    started = time.monotonic()
    if (version is None) == (timestamp is None):
        raise InvalidInput("restore needs exactly one of version= or timestamp=")
    store = ManifestStore(root, storage_options)
    if timestamp is not None:
        version = version_at(store.root, timestamp, time_zone=time_zone, storage_options=store.storage_options)
    assert version is not None
    # from the lease's first write on, a vacuum keeps what the version references
    with guarded(store.root, store.storage_options, bases=(version,)) as guard:
        source = store.dataset(version)
        target = read_state(source, store.root)
        refs = [Reference(t.object_id, t.uri, t.read_version) for t in target.tables if t.read_version is not None]
        _check_tables(store, target, refs, files=False)
        last: ConcurrentModification | None = None
        for attempt in range(1, max(1, max_attempts) + 1):
            latest = store.dataset()
            if latest.version == version:
                return RestoreResult(store.root, version, version, len(target.tables), changed=False, attempts=attempt)
            current = read_state(latest, store.root)
            if before_commit is not None:
                before_commit()
            operation = Operation("RESTORE", {"version": str(version)}, {"partitions": len(target.tables)})
            try:
                guard.before_commit(refs, full=True)
            except ReferenceGone as exc:
                more = f" (and {len(exc.problems) - 1} more)" if len(exc.problems) > 1 else ""
                raise InvalidInput(
                    f"cannot restore {store.root} to __manifest version {version}: {exc.problems[0]}{more}, "
                    "vacuumed while the restore waited; nothing changed"
                ) from exc
            try:
                committed = _commit(store, current, target, operation.timed(started))
            except ConcurrentModification as exc:
                last = exc
                time.sleep(random.uniform(0.01, 0.05) * attempt)
                continue
            return RestoreResult(store.root, committed, version, len(target.tables), attempts=attempt)
    raise ConcurrentModification(
        f"restore of {store.root} to __manifest version {version} lost {max_attempts} races with concurrent "
        f"commits; nothing changed (last: {last})"
    ) from last


def _check_tables(
    store: ManifestStore, target: NamespaceState, refs: Sequence[Reference], *, files: bool = True
) -> None:
    """Every partition table the target version reads is still there, at its version
    (with ``files``, every data and deletion file of it too)."""
    problems = missing_references(refs, store.storage_options, files=files)
    if problems:
        raise InvalidInput(
            f"cannot restore {store.root} to __manifest version {target.version}: {problems[0]} (vacuumed?); "
            "nothing changed"
        )


def _properties(current: NamespaceState, target: NamespaceState) -> dict[str, str]:
    """The target's root properties, with the schema's next field id never going back."""
    props = dict(target.metadata)
    schema = target.schema
    if current.schema.next_field_id > schema.next_field_id:
        schema = NamespaceSchema(schema.arrow, current.schema.next_field_id)
        props[SCHEMA_KEY] = schema.to_json()
    return props


def _rows(current: NamespaceState, target: NamespaceState, schema: pa.Schema, token: str | None) -> pa.Table:
    """The target's rows in the latest manifest's columns; ``v<N>`` rows keep the latest write
    ids and, with ``token``, apply the staged properties of that token."""
    rows = target.manifest.to_pylist()
    for row in rows:
        if row["object_type"] != "namespace" or "$" in row["object_id"]:
            continue
        props = json.loads(row.get("metadata") or "{}")
        props.pop(APPLIED_KEY, None)
        now = current.rows_by_id.get(row["object_id"])
        recent = json.loads(now.get("metadata") or "{}").get(WRITE_IDS_PROPERTY) if now is not None else None
        if recent is not None:
            props[WRITE_IDS_PROPERTY] = recent
        if token is not None:
            props[APPLIED_KEY] = token
        row["metadata"] = json.dumps(props, separators=(",", ":"), sort_keys=True)
    missing = [c for c in target.manifest.column_names if c not in schema.names]
    if missing:
        raise PartitioningError(
            f"cannot restore {current.root}: __manifest column {missing[0]} of the restored version is gone"
        )
    return pa.Table.from_pylist([{n: r.get(n) for n in schema.names} for r in rows], schema=schema)


def _commit(store: ManifestStore, current: NamespaceState, target: NamespaceState, operation: Operation) -> int:
    """The restore's commits on top of ``current``; the latest manifest version after them.

    Different properties are staged first (one properties commit readers ignore), the rows
    commit applies them, and a last properties commit writes them as the plain ones (if
    that one loses a race, the next properties commit of anyone does it)."""
    base = store.dataset(current.version)
    props = _properties(current, target)
    token = stage_properties(store, base, props, operation) if props != current.metadata else None
    rows = _rows(current, target, base.schema, token)
    try:
        version = merge_manifest_rows(store, base, rows, operation, delete_others=True)
    except ConcurrentModification:
        if token is not None:
            unstage_properties(store, token, operation)
        raise
    if token is None:
        return version
    finished = finish_properties(store, operation)
    return version if finished is None else finished
