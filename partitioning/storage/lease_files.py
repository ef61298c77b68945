"""The lease files under ``<root>/_writes``: what one records, and what the live ones protect from vacuum.

Every write (and every vacuum) in progress keeps one lease file there; :mod:`partitioning.storage.leases`
stores, refreshes and removes them, and describes the protocol. This module reads them back
as vacuum does: a lease is live while its last heartbeat is younger than :data:`LEASE_TTL`
(an expired one belongs to a write that crashed), and the live write leases protect every
file and dataset version from the earliest start on (:func:`protected_since`) and whatever
their ``__manifest`` bases reference (:func:`protected_bases`).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeAlias

import pyarrow.fs as pafs

from partitioning.storage.paths import join_uri
from partitioning.storage.roots import filesystem_of, resolve_root

__all__ = [
    "LEASE_DIR",
    "LEASE_TTL",
    "VACUUM",
    "WRITE",
    "Lease",
    "ended_marks",
    "list_leases",
    "protected_bases",
    "protected_since",
]


Options: TypeAlias = Mapping[str, str] | None
LEASE_DIR = "_writes"
LEASE_TTL = dt.timedelta(minutes=10)
LEASE_SUFFIX = ".json"
ENDED_SUFFIX = ".ended"  # "<lease>.json.ended": the write ended; a task's late refresh must not revive it
WRITE = "write"
VACUUM = "vacuum"


@dataclass(frozen=True)
class Lease:
    """One write's lease as vacuum reads it. ``start`` is the earlier of the writer's clock
    and the storage's clock at its creation; ``seen`` the later of its heartbeat and mtime."""

    uri: str
    start: dt.datetime
    seen: dt.datetime
    write_id: str | None = None
    kind: str = WRITE
    bases: tuple[int, ...] = ()  # __manifest versions the holder builds on; vacuum keeps what they reference
    stored: dt.datetime | None = None  # the storage's clock when the lease file was first stored

    def live(self, now: dt.datetime) -> bool:
        return now - self.seen < LEASE_TTL


def as_utc(t: dt.datetime) -> dt.datetime:
    return t.replace(tzinfo=dt.UTC) if t.tzinfo is None else t.astimezone(dt.UTC)


def _lease_files(root: str, storage_options: Options) -> tuple[pafs.FileSystem, str, list[pafs.FileInfo]]:
    """The lease directory's URI under ``root`` and the files in it (none if it is absent)."""
    directory = join_uri(resolve_root(root), LEASE_DIR)
    fs, path = filesystem_of(directory, storage_options)
    try:
        infos = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
    except FileNotFoundError:
        infos = []
    return fs, directory, [i for i in infos if i.type == pafs.FileType.File]


def ended_marks(root: str, now: dt.datetime, storage_options: Options = None) -> list[str]:
    """The end marks :func:`partitioning.storage.leases.release_lease` left that are older than
    :data:`LEASE_TTL`: no task of their write can still refresh, so vacuum deletes them."""
    _, directory, infos = _lease_files(root, storage_options)
    return [
        join_uri(directory, info.base_name)
        for info in infos
        if info.base_name.endswith(LEASE_SUFFIX + ENDED_SUFFIX)
        and info.mtime is not None
        and now - as_utc(info.mtime) >= LEASE_TTL
    ]


def _parse(uri: str, raw: bytes, mtime: dt.datetime) -> Lease:
    """A lease from its file; an unreadable one (a write half done) protects everything."""
    try:
        body = json.loads(raw)
        started = as_utc(dt.datetime.fromisoformat(body["started"]))
        heartbeat = as_utc(dt.datetime.fromisoformat(body["heartbeat"]))
        first = as_utc(dt.datetime.fromisoformat(body["stored"])) if body.get("stored") else None
        stored = first or started
        write_id = body.get("write_id")
        kind = body.get("kind", WRITE)
        bases = tuple(int(v) for v in body.get("bases", ()))
        if kind not in (WRITE, VACUUM):
            raise ValueError(kind)
    except (ValueError, KeyError, TypeError):
        return Lease(uri, dt.datetime.min.replace(tzinfo=dt.UTC), mtime)
    name = write_id if isinstance(write_id, str) else None
    return Lease(uri, min(started, stored), max(heartbeat, mtime), name, kind, bases, first)


def list_leases(root: str, storage_options: Options = None) -> list[Lease]:
    """Every lease under ``root``, live or expired (see :meth:`Lease.live`)."""
    fs, directory, infos = _lease_files(root, storage_options)
    out = []
    for info in infos:
        if not info.base_name.endswith(LEASE_SUFFIX) or info.base_name.startswith("."):
            continue
        mtime = as_utc(info.mtime) if info.mtime is not None else dt.datetime.now(dt.UTC)
        try:
            with fs.open_input_stream(info.path) as stream:
                raw = stream.read()
        except FileNotFoundError:
            continue  # the write ended while we listed
        out.append(_parse(join_uri(directory, info.base_name), raw, mtime))
    return out


def protected_since(leases: list[Lease], now: dt.datetime) -> dt.datetime | None:
    """The earliest start of a live write lease: vacuum keeps every file and dataset version from then on."""
    starts = [lease.start for lease in leases if lease.live(now) and lease.kind != VACUUM]
    return min(starts) if starts else None


def protected_bases(leases: list[Lease], now: dt.datetime) -> set[int]:
    """The ``__manifest`` versions live write leases build on: vacuum keeps what they reference."""
    return {v for lease in leases if lease.live(now) and lease.kind != VACUUM for v in lease.bases}
