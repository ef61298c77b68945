"""Restore, Spark-free: make the namespace what it was at an older ``__manifest`` version.

A restore is a new ``__manifest`` commit (``RESTORE`` in the history, with the source
version) whose rows are that version's rows and whose root properties (schema, partition
specs, index definitions) are that version's, as Delta's ``RESTORE`` brings the schema
back too. No partition dataset is rewritten: the restored rows point at the table
versions they pointed at then, so every one must still exist (vacuum removes them); a
missing one is one line naming the partition and version, and nothing changes.

Two things are never taken back: the schema's next field id (an id handed out after the
version stays used, so a column added later never reuses one), and the write ids recent
commits remembered (a retried write that committed after the version does not commit
again).

Concurrency: the rows are one merge commit based on the version the restore read, and it
rewrites every ``v<N>`` lock row, so a commit made since makes it conflict; the restore
then starts again from the new state (up to ``max_attempts`` times), so the racing commit
is in the history before the restore, never lost without trace. When the root properties
differ, they are committed first; if the rows then lose the race, the properties are put
back before the next attempt.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pyarrow as pa

from partitioning.commits import WRITE_IDS_PROPERTY, commit_metadata, merge_manifest_rows
from partitioning.errors import ConcurrentModification, InvalidInput, PartitioningError
from partitioning.history import Operation, version_at
from partitioning.manifest import SCHEMA_KEY, ManifestStore
from partitioning.schema import NamespaceSchema
from partitioning.state import NamespaceState, PartitionTable, open_partition_table, read_state

__all__ = ["RestoreResult", "restore"]

DEFAULT_ATTEMPTS = 4
PARALLEL_OPENS = 16


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
    source = store.dataset(version)
    target = read_state(source, store.root)
    _check_tables(store, target)
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
            committed = _commit(store, current, target, operation.timed(started))
        except ConcurrentModification as exc:
            last = exc
            continue
        return RestoreResult(store.root, committed, version, len(target.tables), attempts=attempt)
    raise ConcurrentModification(
        f"restore of {store.root} to __manifest version {version} lost {max_attempts} races with concurrent "
        f"commits; nothing changed (last: {last})"
    ) from last


def _check_tables(store: ManifestStore, target: NamespaceState) -> None:
    """Every partition table the target version reads is still there, at its version."""

    def check(table: PartitionTable) -> None:
        try:
            open_partition_table(
                table.uri, table.read_version, table.read_branch, table.read_tag, store.storage_options
            )
        except PartitioningError as exc:
            raise InvalidInput(
                f"cannot restore {store.root} to __manifest version {target.version}: partition table "
                f"{table.object_id} at version {table.read_version} is gone (vacuumed?); nothing changed"
            ) from exc

    with ThreadPoolExecutor(min(PARALLEL_OPENS, max(1, len(target.tables)))) as pool:
        list(pool.map(check, target.tables))


def _properties(current: NamespaceState, target: NamespaceState) -> dict[str, str]:
    """The target's root properties, with the schema's next field id never going back."""
    props = dict(target.metadata)
    schema = target.schema
    if current.schema.next_field_id > schema.next_field_id:
        schema = NamespaceSchema(schema.arrow, current.schema.next_field_id)
        props[SCHEMA_KEY] = schema.to_json()
    return props


def _rows(current: NamespaceState, target: NamespaceState, schema: pa.Schema) -> pa.Table:
    """The target's rows in the latest manifest's columns; ``v<N>`` rows keep the latest write ids."""
    rows = target.manifest.to_pylist()
    for row in rows:
        now = current.rows_by_id.get(row["object_id"])
        if row["object_type"] == "namespace" and "$" not in row["object_id"] and now is not None:
            props = json.loads(row.get("metadata") or "{}")
            recent = json.loads(now.get("metadata") or "{}").get(WRITE_IDS_PROPERTY)
            if recent is not None:
                props[WRITE_IDS_PROPERTY] = recent
            row["metadata"] = json.dumps(props, separators=(",", ":"), sort_keys=True)
    missing = [c for c in target.manifest.column_names if c not in schema.names]
    if missing:
        raise PartitioningError(
            f"cannot restore {current.root}: __manifest column {missing[0]} of the restored version is gone"
        )
    return pa.Table.from_pylist([{n: r.get(n) for n in schema.names} for r in rows], schema=schema)


def _commit(store: ManifestStore, current: NamespaceState, target: NamespaceState, operation: Operation) -> int:
    """The restore's commits on top of ``current``; the new manifest version."""
    base = store.dataset(current.version)
    rows = _rows(current, target, base.schema)
    props = _properties(current, target)
    changed_props = props != current.metadata
    if changed_props:
        commit_metadata(store, base, props, operation, replace=True)
    try:
        return merge_manifest_rows(store, base, rows, operation, delete_others=True)
    except ConcurrentModification:
        if changed_props:
            commit_metadata(store, store.dataset(), current.metadata, operation.with_metrics(undone=1), replace=True)
        raise
