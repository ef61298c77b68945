"""The history of a namespace: what made each ``__manifest`` version, and when.

**What made a version.** Every ``__manifest`` commit this project makes is a Lance
commit whose *transaction properties* (the ``transaction_properties`` of Lance's
``Transaction``, stored in the commit's own transaction file under
``__manifest/_transactions``) carry an :class:`Operation`: its name (``WRITE``,
``MERGE``, ``DELETE``, ...) under :data:`OPERATION_KEY`, its parameters and its metrics
as JSON objects under :data:`PARAMETERS_KEY` and :data:`METRICS_KEY`. They live in the
manifest itself, per version, cost no row and no root property, are read back with
``LanceDataset.read_transaction(version)`` without opening the version's rows, and go
with the version when vacuum removes it. A version without them (made before this
existed, or by another Lance client) is ``UNKNOWN``, with the Lance operation it was
(``lance_operation``) as its one parameter.

**Timestamp travel.** Every manifest commit is a Lance version with its commit time, so
"the table as of T" is the last version committed at or before T (Delta's
``timestampAsOf``). A time before the first commit is one line naming the first
commit's time. A zone-less time is read in the given time zone (a Spark session's
``spark.sql.session.timeZone``); without one it is refused, never guessed.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import lance
import pyarrow as pa

from partitioning.errors import InvalidInput, PartitioningError, translate_lance_errors
from partitioning.sql.timezones import as_utc, resolve_zone
from partitioning.storage.manifest import ManifestStore

__all__ = [
    "HISTORY_SCHEMA",
    "METRICS_KEY",
    "OPERATIONS",
    "OPERATION_KEY",
    "PARAMETERS_KEY",
    "Operation",
    "committed_table_versions",
    "history_table",
    "operation_of",
    "parse_instant",
    "version_at",
    "version_of_write",
]

OPERATION_KEY = "lance_partitioned.operation"
PARAMETERS_KEY = "lance_partitioned.parameters"
METRICS_KEY = "lance_partitioned.metrics"
UNKNOWN = "UNKNOWN"
OPERATIONS = frozenset(
    {
        "WRITE",
        "MERGE",
        "UPDATE",
        "DELETE",
        "COMPACT",
        "DROP_PARTITIONS",
        "EVOLVE_SPEC",
        "EVOLVE_SCHEMA",
        "INDEX",
        "RESTORE",
        "VACUUM",
        "BACKFILL",
        "OPTIMIZE_MANIFEST",
        "CREATE",
        "REPLACE",
        "INTENT",
    }
)
HISTORY_SCHEMA = pa.schema(
    [
        pa.field("version", pa.int64(), nullable=False),
        pa.field("timestamp", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("operation", pa.string(), nullable=False),
        pa.field("parameters", pa.map_(pa.string(), pa.string())),
        pa.field("metrics", pa.map_(pa.string(), pa.float64())),
    ]
)


def _frozen_parameters() -> Mapping[str, str]:
    return MappingProxyType({})


def _frozen_metrics() -> Mapping[str, int | float]:
    return MappingProxyType({})


@dataclass(frozen=True)
class Operation:
    """What made one ``__manifest`` commit: a name from :data:`OPERATIONS`, parameters
    (strings: mode, filter, write_id, ...) and metrics (numbers: rows and bytes added or
    removed, partitions touched, ``duration_ms``, ...)."""

    name: str
    parameters: Mapping[str, str] = field(default_factory=_frozen_parameters)
    metrics: Mapping[str, int | float] = field(default_factory=_frozen_metrics)

    def __post_init__(self) -> None:
        if self.name not in OPERATIONS:
            raise InvalidInput(f"unknown operation {self.name!r}; allowed: {', '.join(sorted(OPERATIONS))}")
        params = {str(k): str(v) for k, v in self.parameters.items() if v is not None}
        metrics: dict[str, int | float] = {}
        for k, v in self.metrics.items():
            if isinstance(v, bool) or not isinstance(v, int | float):
                raise InvalidInput(f"metric {k!r} of operation {self.name} must be a number, got {v!r}")
            metrics[str(k)] = v
        object.__setattr__(self, "parameters", MappingProxyType(params))
        object.__setattr__(self, "metrics", MappingProxyType(metrics))

    def with_metrics(self, **metrics: int | float) -> Operation:
        """This operation with ``metrics`` added (replacing those of the same names)."""
        return Operation(self.name, self.parameters, {**self.metrics, **metrics})

    def with_parameters(self, **parameters: str) -> Operation:
        """This operation with ``parameters`` added (replacing those of the same names)."""
        return Operation(self.name, {**self.parameters, **parameters}, self.metrics)

    def timed(self, started: float) -> Operation:
        """This operation with ``duration_ms``: from ``started`` (``time.monotonic()``) to now."""
        return self.with_metrics(duration_ms=round((time.monotonic() - started) * 1000, 3))

    def properties(self) -> dict[str, str]:
        """The Lance transaction properties that record this operation."""
        return {
            OPERATION_KEY: self.name,
            PARAMETERS_KEY: json.dumps(dict(self.parameters), sort_keys=True, separators=(",", ":")),
            METRICS_KEY: json.dumps(dict(self.metrics), sort_keys=True, separators=(",", ":")),
        }

    @classmethod
    def from_properties(cls, properties: Mapping[str, str] | None) -> Operation | None:
        """The operation recorded in transaction ``properties``, or None if there is none."""
        if not properties or OPERATION_KEY not in properties:
            return None
        try:
            params = json.loads(properties.get(PARAMETERS_KEY) or "{}")
            metrics = json.loads(properties.get(METRICS_KEY) or "{}")
            return cls(properties[OPERATION_KEY], params, metrics)
        except (ValueError, TypeError, AttributeError, InvalidInput):
            return None


def history_table(root: str, *, limit: int | None = None, storage_options: Mapping[str, str] | None = None) -> pa.Table:
    """One row per ``__manifest`` version, newest first (:data:`HISTORY_SCHEMA`): version,
    commit time (UTC), operation, parameters and metrics; at most ``limit`` rows."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise InvalidInput(f"history limit must be a positive integer, got {limit!r}")
    store = ManifestStore(root, storage_options)
    latest = store.dataset()
    with translate_lance_errors(f"list versions of {store.uri}"):
        versions = sorted(((int(v["version"]), _aware(v["timestamp"])) for v in latest.versions()), reverse=True)
    versions = versions[:limit] if limit is not None else versions
    operations = [operation_of(latest, version) for version, _ in versions]  # one dataset is not thread-safe
    rows: dict[str, list[Any]] = {name: [] for name in HISTORY_SCHEMA.names}
    for (version, at), (name, params, metrics) in zip(versions, operations, strict=True):
        rows["version"].append(version)
        rows["timestamp"].append(at)
        rows["operation"].append(name)
        rows["parameters"].append(sorted(params.items()))
        rows["metrics"].append(sorted((k, float(v)) for k, v in metrics.items()))
    return pa.Table.from_pydict(rows, schema=HISTORY_SCHEMA)


def operation_of(ds: lance.LanceDataset, version: int) -> tuple[str, Mapping[str, str], Mapping[str, int | float]]:
    """The operation, parameters and metrics ``__manifest`` version ``version`` recorded (``ds``: the manifest)."""
    try:
        with translate_lance_errors(f"read the transaction of {ds.uri} version {version}"):
            txn = ds.read_transaction(version)
    except TypeError:
        txn = None  # pylance 14 cannot read some transactions back (a Rewrite that remapped indexes)
    if txn is None:
        return UNKNOWN, {}, {}
    recorded = Operation.from_properties(txn.transaction_properties)
    if recorded is None:
        return UNKNOWN, {"lance_operation": type(txn.operation).__name__}, {}
    return recorded.name, recorded.parameters, recorded.metrics


def committed_table_versions(
    root: str, object_id: str, *, storage_options: Mapping[str, str] | None = None
) -> tuple[int, ...]:
    """Every version of partition table ``object_id`` some readable ``__manifest`` version
    recorded as its ``read_version``, ascending: the table's committed states. Its other
    versions (a crashed write's, a lost commit attempt's) were never visible to a reader that
    honours ``read_version``. Reads that one row of each manifest version (cached per latest
    version)."""
    latest = ManifestStore(root, storage_options).dataset()
    with translate_lance_errors(f"list versions of {latest.uri}"):
        versions = tuple(sorted(int(v["version"]) for v in latest.versions()))
    return _recorded(latest.uri, versions, object_id, tuple(sorted((storage_options or {}).items())))


@functools.lru_cache(maxsize=64)
def _recorded(
    uri: str, versions: tuple[int, ...], object_id: str, storage_options: tuple[tuple[str, str], ...]
) -> tuple[int, ...]:
    quoted = object_id.replace("'", "''")
    found: set[int] = set()
    for version in versions:
        try:
            with translate_lance_errors(f"read {uri} version {version}"):
                ds = lance.dataset(uri, version=version, storage_options=dict(storage_options) or None)
                rows = ds.to_table(columns=["read_version"], filter=f"object_id = '{quoted}'")
        except PartitioningError:
            continue  # a version vacuum removed meanwhile, or one that cannot be read
        found.update(int(v) for v in rows.column("read_version").to_pylist() if v is not None)
    return tuple(sorted(found))


def version_of_write(
    root: str, write_id: str, *, storage_options: Mapping[str, str] | None = None, limit: int = 1000
) -> int | None:
    """The newest ``__manifest`` version whose commit recorded ``write_id`` (among the last
    ``limit`` versions, newest first), or None."""
    latest = ManifestStore(root, storage_options).dataset()
    newest = int(latest.version)
    for version in range(newest, max(0, newest - limit), -1):
        try:
            _, params, _ = operation_of(latest, version)
        except PartitioningError:
            continue  # vacuumed
        if params.get("write_id") == write_id:
            return version
    return None


def parse_instant(value: dt.datetime | dt.date | str, time_zone: str | None) -> dt.datetime:
    """``value`` as an aware instant; ISO text (``2026-11-23``, ``2026-11-23 10:00:00``,
    ``...T10:00:00Z``, ``...+01:00``); a zone-less one is read in ``time_zone``."""
    if isinstance(value, str):
        text = value.strip()
        try:
            parsed = dt.datetime.fromisoformat(text)
        except ValueError as exc:
            raise InvalidInput(
                f"timestamp {value!r} is not a time; use ISO 8601, e.g. '2026-11-23 10:00:00' or '2026-11-23T10:00:00Z'"
            ) from exc
    elif isinstance(value, dt.datetime):
        parsed = value
    elif isinstance(value, dt.date):
        parsed = dt.datetime(value.year, value.month, value.day)
    else:
        raise InvalidInput(f"timestamp must be a datetime, a date or ISO text, got {type(value).__name__}")
    if parsed.tzinfo is not None:
        return parsed
    if time_zone is None:
        raise InvalidInput(f"timestamp {value!r} has no time zone; give one (e.g. '+00:00') or the option timeZone")
    return parsed.replace(tzinfo=resolve_zone(time_zone))


def version_at(
    root: str,
    when: dt.datetime | dt.date | str,
    *,
    time_zone: str | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> int:
    """The last ``__manifest`` version of ``root`` committed at or before ``when``."""
    instant = parse_instant(when, time_zone)
    store = ManifestStore(root, storage_options)
    latest = store.dataset()
    with translate_lance_errors(f"list versions of {store.uri}"):
        versions = sorted((int(v["version"]), _aware(v["timestamp"])) for v in latest.versions())
    before = [version for version, at in versions if at <= instant]
    if not before:
        first = versions[0][1].isoformat() if versions else "never"
        raise InvalidInput(f"timestamp {instant.isoformat()} is before the first commit of {store.root} ({first})")
    return before[-1]


def _aware(t: object) -> dt.datetime:
    if not isinstance(t, dt.datetime):
        raise InvalidInput(f"__manifest version time {t!r} is not a datetime")
    return as_utc(t)
