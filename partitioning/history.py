"""Timestamp travel: the ``__manifest`` version that was current at an instant.

Every manifest commit is a Lance version with its commit time, so "the table as of T"
is the last version committed at or before T (Delta's ``timestampAsOf``). A time before
the first commit is one line naming the first commit's time. A zone-less time is read
in the given time zone (a Spark session's ``spark.sql.session.timeZone``); without one
it is refused, never guessed.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping

from partitioning.errors import InvalidInput, translate_lance_errors
from partitioning.manifest import ManifestStore
from partitioning.timezones import as_utc, resolve_zone

__all__ = ["parse_instant", "version_at"]


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
