"""The rows a ``__manifest`` commit writes: partition tables, the namespaces above them, the ``v<N>`` lock rows.

:func:`commit_rows` turns :class:`~partitioning.state.partition_tables.TableCommit` requests into
table and namespace rows, decoding only the manifest rows they touch, and refuses a partition
created concurrently, a location another row holds, or a lowered ``read_version``.
:func:`lock_rows` builds the ``v<N>`` rows every commit rewrites, which remember the write ids of
recent commits (:func:`committed_write_ids`, :func:`write_id_committed`) and live intents.
A write id of the form ``<query id>-<batch id>`` (a Structured Streaming micro-batch: the
query's UUID, then the batch number) is kept as that query's last committed batch instead,
so a stream never crowds other writers' ids out of the history: batch ids of one query only
grow, so a batch at or below the last one is a replay (Delta's ``txn`` rows work the same
way). :mod:`partitioning.state.commits` makes the commits themselves.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from partitioning.errors import ConcurrentModification, InvalidInput
from partitioning.spec.values import canonical_float
from partitioning.state.namespace_state import NamespaceState
from partitioning.state.partition_tables import TableCommit
from partitioning.stats.bounds import STATS_KEY, TableStats
from partitioning.storage.intents import INTENT_KEY, Intent, with_intents
from partitioning.storage.locations import object_id_from_location
from partitioning.storage.manifest import partition_column
from partitioning.storage.staged import APPLIED_KEY

__all__ = [
    "MAX_PARTITION_VALUE_BYTES",
    "STREAMS_PROPERTY",
    "STREAM_HISTORY",
    "WRITE_IDS_PROPERTY",
    "WRITE_ID_HISTORY",
    "check_partition_value_sizes",
    "commit_rows",
    "committed_write_ids",
    "lock_rows",
    "stream_batch",
    "stream_watermarks",
    "write_id_committed",
]


MAX_PARTITION_VALUE_BYTES = 1024
WRITE_IDS_PROPERTY = "lance_partitioned.write_ids"
WRITE_ID_HISTORY = 100
STREAMS_PROPERTY = "lance_partitioned.streams"
STREAM_HISTORY = 1000  # streaming queries remembered per spec version (the least recent go first)
_STREAM_WRITE_ID = re.compile(r"^([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})-(\d{1,18})$")


def stream_batch(write_id: str | None) -> tuple[str, int] | None:
    """``(query id, batch id)`` of a micro-batch's write id ``<query UUID>-<batch>``, else None."""
    match = _STREAM_WRITE_ID.match(write_id.lower()) if write_id else None
    return (match.group(1), int(match.group(2))) if match else None


def committed_write_ids(state: NamespaceState) -> set[str]:
    """Write ids of recent commits (the last :data:`WRITE_ID_HISTORY` per spec version), and
    each remembered streaming query's last committed batch as ``<query>-<batch>``."""
    ids: set[str] = set()
    locks = state.rows_for(f"v{spec_id}" for spec_id in state.specs)
    for spec_id in state.specs:
        ids.update(_write_ids(locks.get(f"v{spec_id}")))
    ids.update(f"{query}-{batch}" for query, batch in stream_watermarks(state).items())
    return ids


def stream_watermarks(state: NamespaceState) -> dict[str, int]:
    """The last committed batch of each remembered streaming query."""
    out: dict[str, int] = {}
    locks = state.rows_for(f"v{spec_id}" for spec_id in state.specs)
    for spec_id in state.specs:
        for query, (batch, _) in _streams(locks.get(f"v{spec_id}")).items():
            out[query] = max(batch, out.get(query, batch))
    return out


def write_id_committed(state: NamespaceState, write_id: str) -> bool:
    """Whether a commit with ``write_id`` was made (a micro-batch: this batch or a later one of its query)."""
    stream = stream_batch(write_id)
    if stream is None:
        return write_id in committed_write_ids(state)
    last = stream_watermarks(state).get(stream[0])
    return last is not None and stream[1] <= last


def lock_rows(
    state: NamespaceState,
    spec_ids: Iterable[int],
    write_id: str | None,
    *,
    add_intent: Intent | None = None,
    clear_intent: str | None = None,
    applied: str | None = None,
) -> list[dict[str, Any]]:
    """The ``v<N>`` rows of ``spec_ids`` to rewrite in a commit, remembering ``write_id`` if
    given; intents (:mod:`partitioning.storage.intents`): ``add_intent`` recorded, ``clear_intent`` and
    lapsed ones dropped; ``applied``: the token of staged root properties this commit makes
    the namespace's (:mod:`partitioning.storage.staged`)."""
    out = []
    wanted = sorted(spec_ids)
    locks = state.rows_for(f"v{spec_id}" for spec_id in wanted)
    now = dt.datetime.now(dt.UTC)
    for spec_id in wanted:
        row = dict(locks[f"v{spec_id}"])
        props = json.loads(row.get("metadata") or "{}")
        if INTENT_KEY in props or add_intent is not None:
            props = with_intents(props, add=add_intent, remove=clear_intent, now=now)
        stream = stream_batch(write_id)
        if stream is not None:
            props[STREAMS_PROPERTY] = json.dumps(_with_batch(_streams(row), *stream, now), separators=(",", ":"))
        elif write_id is not None:
            recent = [w for w in _write_ids(row) if w != write_id][-(WRITE_ID_HISTORY - 1) :]
            props[WRITE_IDS_PROPERTY] = json.dumps([*recent, write_id])
        if applied is not None:
            props[APPLIED_KEY] = applied
        row["metadata"] = json.dumps(props, separators=(",", ":"), sort_keys=True)
        out.append(row)
    return out


def check_partition_value_sizes(field_ids: Sequence[str], key: Sequence[Any]) -> None:
    """Refuse a string or binary partition value longer than :data:`MAX_PARTITION_VALUE_BYTES`:
    every partition value is copied into the manifest, which every load and commit reads."""
    for fid, value in zip(field_ids, key, strict=True):
        size = len(value.encode("utf-8", "surrogatepass")) if isinstance(value, str) else None
        if isinstance(value, bytes | bytearray):
            size = len(value)
        if size is not None and size > MAX_PARTITION_VALUE_BYTES:
            raise InvalidInput(
                f"partition field {fid!r}: a value of {size:,} bytes is longer than the limit of "
                f"{MAX_PARTITION_VALUE_BYTES:,} bytes for partition values (each is stored in __manifest); "
                f"partition by bucket[N] or truncate[W] of the column instead"
            )


def commit_rows(
    state: NamespaceState,
    commits: Sequence[TableCommit],
    names: Sequence[str],
    *,
    fresh: tuple[frozenset[str], frozenset[str]] = (frozenset(), frozenset()),
) -> list[dict[str, Any]]:
    """The table rows of ``commits`` and the namespace rows above them (``names``: the manifest
    columns). Only the manifest rows these commits touch are decoded (:mod:`partitioning.state.lookup`);
    ``fresh`` ids and locations (:func:`partitioning.state.commits.commit_once`'s ``naming_seed``)
    are known to be in no row."""
    keyed = []
    for c in commits:
        spec = state.spec(c.spec_id)
        key = tuple(canonical_float(c.values.get(f.field_id)) for f in spec.fields)
        check_partition_value_sizes(spec.field_ids, key)
        keyed.append((c, spec, key, c.object_id or object_id_from_location(c.location)))
    current: dict[tuple[int, Any], Any] = {}
    for spec_id in {c.spec_id for c in commits}:
        found = state.find_tables(spec_id, [key for c, _, key, _ in keyed if c.spec_id == spec_id])
        current.update({(spec_id, k): t for k, t in found.items()})
    touched = {oid for *_, oid in keyed}
    touched.update("$".join(oid.split("$")[: level + 1]) for oid in list(touched) for level in range(1, oid.count("$")))
    fresh_ids, fresh_locations = fresh
    existing = state.rows_for(touched - fresh_ids)
    _check_new_locations(state, keyed, existing, fresh_locations)
    out: dict[str, dict[str, Any]] = {}
    for c, spec, key, object_id in keyed:
        table = current.get((c.spec_id, key))
        if table is not None and table.object_id != object_id:
            raise ConcurrentModification(
                f"partition {dict(zip(spec.field_ids, key, strict=True))} of spec v{c.spec_id} was created "
                f"concurrently at {table.location}; data written to {c.location} was not committed"
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
            metadata=table_metadata(row, c),
            read_version=c.read_version,
            read_branch=None,
            read_tag=None,
        )
        for f, v in zip(spec.fields, key, strict=True):
            row[partition_column(f.field_id)] = v
        out[object_id] = row
    return list(out.values())


def table_metadata(row: Mapping[str, Any], c: TableCommit) -> str:
    """A table row's ``metadata`` after commit ``c``: its properties, with the column statistics
    ``c`` leaves (:class:`~partitioning.stats.bounds.StatsChange`), or without any."""
    try:
        props = json.loads(row.get("metadata") or "{}")
    except ValueError:
        props = {}
    props = props if isinstance(props, dict) else {}
    before = props.pop(STATS_KEY, None)
    if c.stats is not None:
        ok = row.get("read_branch") is None and row.get("read_tag") is None and isinstance(before, str)
        recorded = TableStats.from_json(before, row.get("read_version")) if ok else None
        after = c.stats.apply(recorded, row.get("read_version") if recorded is not None else None)
        if after is not None:
            props[STATS_KEY] = after.to_json(c.read_version)
    return json.dumps(props, separators=(",", ":"), sort_keys=True) if props else "{}"


def _check_new_locations(
    state: NamespaceState,
    keyed: Sequence[tuple[TableCommit, Any, Any, str]],
    existing: Mapping[str, Mapping[str, Any]],
    fresh_locations: frozenset[str],
) -> None:
    """No location a commit gives a table (a new table, or a moved one; ``existing``: the
    rows the tables have now) may be another manifest row's (two rows sharing a directory);
    ``fresh_locations`` are known to be in no row."""
    wanted = {
        c.location: oid
        for c, _, _, oid in keyed
        if (existing.get(oid) or {}).get("location") != c.location and c.location not in fresh_locations
    }
    for oid, location in state.location_holders(wanted):
        if wanted[location] != oid:
            raise ConcurrentModification(
                f"location {location!r} is already table {oid!r}'s; data written there for {wanted[location]!r} "
                "was not committed"
            )


def _write_ids(row: Mapping[str, Any] | None) -> list[str]:
    if not row or not row.get("metadata"):
        return []
    props = json.loads(row["metadata"])
    return list(json.loads(props.get(WRITE_IDS_PROPERTY, "[]")))


def _streams(row: Mapping[str, Any] | None) -> dict[str, tuple[int, str]]:
    """A lock row's streaming queries: query id -> (last committed batch, when, ISO UTC)."""
    if not row or not row.get("metadata"):
        return {}
    raw = json.loads(row["metadata"]).get(STREAMS_PROPERTY)
    try:
        value = json.loads(raw) if raw else {}
        return {str(q): (int(b), str(t)) for q, (b, t) in value.items()}
    except (TypeError, ValueError, AttributeError) as exc:
        raise InvalidInput(f"__manifest lock row {row.get('object_id')!r}: unreadable {STREAMS_PROPERTY}") from exc


def _with_batch(streams: dict[str, tuple[int, str]], query: str, batch: int, now: dt.datetime) -> dict[str, list[Any]]:
    """``streams`` with ``query`` at ``batch`` (never lowered), the :data:`STREAM_HISTORY` most recent kept."""
    kept = dict(streams)
    last = kept.pop(query, None)
    kept[query] = (max(batch, last[0]) if last else batch, now.isoformat(timespec="seconds"))
    recent = sorted(kept.items(), key=lambda item: item[1][1])[-STREAM_HISTORY:]
    return {q: [b, t] for q, (b, t) in recent}
