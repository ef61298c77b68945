"""Time zones and date/time literal text, read the way Spark reads them.

A timestamp literal without a zone (``TIMESTAMP '2025-12-10 00:00:00'``, or a string
compared with a timestamp column) means that wall time in the session time zone
(``spark.sql.session.timeZone``). Spark-free entry points take the zone as an argument
(default UTC). Wall times that fall in a daylight-saving gap move forward by the gap,
and ambiguous ones take the earlier offset, as ``java.time`` does.
"""

from __future__ import annotations

import datetime as dt
import re
import zoneinfo
from functools import lru_cache

from partitioning.errors import InvalidInput

__all__ = ["is_fixed_offset", "parse_date_text", "parse_timestamp_text", "resolve_zone"]

_OFFSET = re.compile(r"^(?:UTC|GMT|UT)?\s*([+-])(\d{1,2})(?::?(\d{2}))?(?::?(\d{2}))?$", re.IGNORECASE)
_DATE = re.compile(r"^\s*(\d{4})(?:-(\d{1,2})(?:-(\d{1,2})(?:[ T].*)?)?)?\s*$", re.DOTALL)
_TIMESTAMP = re.compile(
    r"""^\s*(\d{4})(?:-(\d{1,2})(?:-(\d{1,2})
        (?:[ T](\d{1,2})(?::(\d{1,2})(?::(\d{1,2})(?:\.(\d{1,9}))?)?)?)?)?)?
        \s*(Z|[+-]\d{1,2}(?::?\d{2})?(?::?\d{2})?|(?:UTC|GMT|UT)(?:[+-]\d{1,2}(?::?\d{2})?)?|[A-Za-z_]+/[A-Za-z_/+-]+)?\s*$""",
    re.VERBOSE,
)


@lru_cache(maxsize=64)
def resolve_zone(name: str) -> dt.tzinfo:
    """A Spark time zone id (region id, ``UTC``, ``Z``, ``+08:00``, ``GMT+8``) as a tzinfo."""
    text = name.strip()
    if text.upper() in ("UTC", "Z", "GMT", "UT", "ETC/UTC"):
        return dt.UTC
    m = _OFFSET.match(text)
    if m:
        sign = -1 if m.group(1) == "-" else 1
        hours, minutes, seconds = int(m.group(2)), int(m.group(3) or 0), int(m.group(4) or 0)
        if hours > 18 or minutes > 59 or seconds > 59:
            raise InvalidInput(f"invalid time zone offset {name!r}")
        return dt.timezone(sign * dt.timedelta(hours=hours, minutes=minutes, seconds=seconds))
    try:
        return zoneinfo.ZoneInfo(text)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError) as exc:
        raise InvalidInput(
            f"unknown time zone {name!r}; use a region id such as 'America/Los_Angeles' or 'UTC'"
        ) from exc


def is_fixed_offset(zone: dt.tzinfo) -> bool:
    return isinstance(zone, dt.timezone)


def parse_date_text(text: str) -> dt.date | None:
    """A string as Spark casts it to a date (``yyyy``, ``yyyy-m``, ``yyyy-m-d[ T...]``), or None."""
    m = _DATE.match(text)
    if not m:
        return None
    try:
        return dt.date(int(m.group(1)), int(m.group(2) or 1), int(m.group(3) or 1))
    except ValueError:
        return None


def local_to_instant(wall: dt.datetime, zone: dt.tzinfo) -> dt.datetime:
    """A naive wall time in ``zone`` as an aware UTC instant (gap: forward; overlap: earlier)."""
    return wall.replace(tzinfo=zone, fold=0).astimezone(dt.UTC)


def parse_timestamp_text(text: str, zone: str | None) -> dt.datetime | None:
    """A string as Spark casts it to a timestamp, or None when it is not one Spark reads.

    With ``zone`` the result is an aware UTC instant (a zone in the text wins); with
    ``zone=None`` (TIMESTAMP_NTZ) a naive wall time, and text naming a zone gives an
    aware value the caller must refuse.
    """
    m = _TIMESTAMP.match(text)
    if not m:
        return None
    year, month, day, hour, minute, second, frac, zone_text = m.groups()
    try:
        wall = dt.datetime(
            int(year),
            int(month or 1),
            int(day or 1),
            int(hour or 0),
            int(minute or 0),
            int(second or 0),
            int((frac or "0").ljust(6, "0")[:6]),
        )
    except ValueError:
        return None
    if zone_text is not None:
        try:
            tz = resolve_zone(zone_text)
        except InvalidInput:
            return None
        return local_to_instant(wall, tz)
    if zone is None:
        return wall
    return local_to_instant(wall, resolve_zone(zone))


def as_utc(t: dt.datetime) -> dt.datetime:
    """``t`` as an aware UTC time. A naive time is this machine's local time: pylance
    reports version times with ``datetime.fromtimestamp`` (local, naive), and Python
    reads a naive ``datetime`` the same way."""
    return t.astimezone(dt.UTC)
