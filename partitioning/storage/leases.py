"""Write leases: how a write in progress tells :func:`partitioning.tables.vacuum.vacuum` to keep its files.

A write takes a lease before it writes any file: ``<root>/_writes/<random id>.json``
records when the write started (its own clock, and the storage's clock as the lease
file's first modification time), its latest heartbeat, and its *bases*: the
``__manifest`` versions it read and will build its commit on, whose references vacuum
keeps while the lease lives (a restore's base is the version it restores). While the write runs, a
background thread rewrites the heartbeat every :data:`HEARTBEAT_INTERVAL`; when the
write ends, committed or failed, the file is deleted. A lease whose last heartbeat is
older than :data:`partitioning.storage.lease_files.LEASE_TTL` belongs to a write that
crashed: vacuum ignores it and deletes it.

The rule vacuum follows (see :func:`partitioning.storage.lease_files.protected_since`): with
``start`` the earliest start of any live lease, it deletes no file modified at or after
``start`` and cleans up no dataset version committed at or after ``start``. A write's files
and dataset versions are all made after its lease was stored, so none of them can go while
its lease lives. A write whose lease is stored after vacuum listed the leases started after
vacuum's ``now``, so its files are newer than ``now - retain`` and vacuum keeps them anyway.
If a lease lapses (a write stalled past ``LEASE_TTL``), the write's commit still
checks that every data file it references exists and commits nothing otherwise.

Vacuum reads the leases back with :mod:`partitioning.storage.lease_files`. It holds a lease
too (``kind`` ``"vacuum"``) while it deletes; it protects nothing, but tells an operation
whose lease vacuum may not have seen to wait before committing
(:mod:`partitioning.storage.guard`, the one protected path of every commit).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import secrets
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

import pyarrow.fs as pafs

from partitioning.errors import PartitioningError
from partitioning.storage.lease_files import (
    ENDED_SUFFIX,
    LEASE_DIR,
    LEASE_SUFFIX,
    VACUUM,
    WRITE,
    Options,
    as_utc,
)
from partitioning.storage.paths import contained, join_uri
from partitioning.storage.roots import filesystem_of, resolve_root

__all__ = [
    "HEARTBEAT_INTERVAL",
    "LeaseRef",
    "held_lease",
    "keep_alive",
    "release_lease",
    "take_lease",
    "vacuum_lease",
    "write_lease",
]

HEARTBEAT_INTERVAL = dt.timedelta(seconds=30)
_log = logging.getLogger(__name__)


def _write_json(fs: pafs.FileSystem, path: str, body: Mapping[str, object]) -> None:
    data = json.dumps(body, sort_keys=True).encode()
    if isinstance(fs, pafs.LocalFileSystem):
        tmp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.{secrets.token_hex(4)}.tmp")
        with fs.open_output_stream(tmp) as out:
            out.write(data)
        fs.move(tmp, path)
    else:
        with fs.open_output_stream(path) as out:
            out.write(data)


class Heartbeat:
    """The lease file of one write and the thread that keeps it fresh."""

    def __init__(
        self,
        root: str,
        write_id: str | None,
        interval: dt.timedelta,
        ref: LeaseRef | None = None,
        storage_options: Options = None,
        *,
        kind: str = WRITE,
        bases: tuple[int, ...] = (),
    ) -> None:
        self.root = ref.root if ref else resolve_root(root)
        self.uri = (
            ref.uri if ref else join_uri(join_uri(self.root, LEASE_DIR), f"{secrets.token_hex(12)}{LEASE_SUFFIX}")
        )
        self.storage_options = dict(ref.storage_options) if ref else dict(storage_options or {})
        self.fs, self.path = filesystem_of(self.uri, self.storage_options)
        self.write_id = ref.write_id if ref else write_id
        self.interval = interval
        self.started = ref.started if ref else dt.datetime.now(dt.UTC)
        self.stored: dt.datetime | None = ref.stored if ref else None
        self.kind = ref.kind if ref else kind
        self.bases: tuple[int, ...] = ref.bases if ref else tuple(bases)
        self.based: dt.datetime | None = None  # when the last base was added (storage clock)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._create = True
        self._thread = threading.Thread(target=self._run, name="lance_partitioned-lease", daemon=True)

    def _body(self) -> dict[str, object]:
        body: dict[str, object] = {
            "started": self.started.isoformat(),
            "heartbeat": dt.datetime.now(dt.UTC).isoformat(),
            "write_id": self.write_id,
            "kind": self.kind,
            "bases": list(self.bases),
        }
        if self.stored is not None:
            body["stored"] = self.stored.isoformat()
        return body

    def beat(self) -> None:
        with self._lock:
            _write_json(self.fs, self.path, self._body())

    def add_base(self, version: int) -> None:
        """Record one more ``__manifest`` version this holder builds on, stored at once;
        :attr:`based` is then the storage's time of that write (a vacuum whose lease is
        older may have read this lease without the base)."""
        if version not in self.bases:
            self.bases = (*self.bases, int(version))
            self.beat()
            mtime = self.fs.get_file_info(self.path).mtime
            self.based = as_utc(mtime) if mtime is not None else None

    def store(self) -> None:
        self.fs.create_dir(self.path.rsplit("/", 1)[0])
        self.beat()
        mtime = self.fs.get_file_info(self.path).mtime
        if mtime is not None:
            self.stored = as_utc(mtime)
            self.beat()

    def start(self, *, create: bool = True) -> None:
        self._create = create
        if create:
            self.store()
        elif not self.refresh():
            return
        self._thread.start()

    def refresh(self) -> bool:
        """Rewrite the heartbeat; a lease someone else stores (``create=False``) is only
        refreshed while it exists, so a task outliving its aborted write cannot revive it:
        the holder marks the end before removing the lease, and a refresh that raced the
        removal sees the mark after its write and removes the lease again."""
        if self._create:
            self.beat()
            return True
        if self.fs.get_file_info(self.path).type == pafs.FileType.NotFound:
            return False
        self.beat()
        if self.fs.get_file_info(self.path + ENDED_SUFFIX).type != pafs.FileType.NotFound:
            self.remove()
            return False
        return True

    def _run(self) -> None:
        while not self._stop.wait(self.interval.total_seconds()):
            try:
                if not self.refresh():
                    return
            except (OSError, ValueError) as exc:
                _log.warning("could not refresh the write lease %s: %s", self.uri, exc)

    def stop(self, *, remove: bool = True) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        if remove:
            self.remove()

    def remove(self) -> None:
        try:
            contained(self.root, self.uri)
        except PartitioningError as exc:
            _log.warning("write lease %s left in place: %s", self.uri, exc)
            return
        try:
            self.fs.delete_file(self.path)  # inside-root: contained() above
        except FileNotFoundError:
            pass
        except OSError as exc:
            _log.warning("could not remove the write lease %s (it expires by itself): %s", self.uri, exc)


@contextmanager
def held_lease(
    root: str,
    storage_options: Mapping[str, str] | None = None,
    *,
    write_id: str | None = None,
    interval: dt.timedelta = HEARTBEAT_INTERVAL,
    kind: str = WRITE,
    bases: tuple[int, ...] = (),
) -> Iterator[Heartbeat | None]:
    """A lease stored under ``root`` and kept fresh by a thread for the block; None (with a
    warning) when it cannot be stored (a read-only or unreachable store)."""
    beat: Heartbeat | None = None
    try:
        beat = Heartbeat(root, write_id, interval, storage_options=storage_options, kind=kind, bases=bases)
        beat.start()
    except (OSError, ValueError) as exc:
        _log.warning("could not store a %s lease under %s (vacuum cannot see this %s): %s", kind, root, kind, exc)
        beat = None
    if beat is None:
        yield None
        return
    try:
        yield beat
    finally:
        beat.stop()


@contextmanager
def write_lease(
    root: str,
    storage_options: Mapping[str, str] | None = None,
    *,
    write_id: str | None = None,
    interval: dt.timedelta = HEARTBEAT_INTERVAL,
    bases: tuple[int, ...] = (),
) -> Iterator[str | None]:
    """Hold a lease under ``root`` for the duration of a write; yields its URI.

    Take it before writing any fragment and keep it until the ``__manifest`` commit has
    returned or failed. If the lease cannot be stored (a read-only or unreachable store),
    the write goes on with a warning and yields None: its commit still verifies its files.
    """
    with held_lease(root, storage_options, write_id=write_id, interval=interval, bases=bases) as beat:
        yield beat.uri if beat is not None else None


@contextmanager
def vacuum_lease(root: str, storage_options: Mapping[str, str] | None = None) -> Iterator[Heartbeat | None]:
    """Vacuum's own lease while it deletes: it protects nothing; an operation whose lease
    was stored before it (and may not have been seen) waits for it to end before committing."""
    with held_lease(root, storage_options, kind=VACUUM) as beat:
        yield beat


@dataclass(frozen=True)
class LeaseRef:
    """A stored lease, picklable: what a Spark data source writer hands its tasks, whose
    processes come and go, where :func:`write_lease` keeps one thread for the whole write."""

    uri: str
    started: dt.datetime
    stored: dt.datetime | None
    write_id: str | None
    storage_options: tuple[tuple[str, str], ...] = ()
    root: str = ""
    kind: str = WRITE
    bases: tuple[int, ...] = ()


def take_lease(
    root: str, *, write_id: str | None = None, storage_options: Options = None, bases: tuple[int, ...] = ()
) -> LeaseRef | None:
    """Store a lease with no thread to refresh it: :func:`keep_alive` refreshes it while
    each task writes, :func:`release_lease` ends it. None (with a warning) if it cannot be stored.
    The reference carries ``storage_options``, so tasks reach the lease on the same store,
    and ``bases`` (the ``__manifest`` versions the write builds on), which every refresh keeps."""
    try:
        beat = Heartbeat(root, write_id, HEARTBEAT_INTERVAL, storage_options=storage_options, bases=bases)
        beat.store()
    except (OSError, ValueError) as exc:
        _log.warning("could not store a write lease under %s (vacuum cannot see this write): %s", root, exc)
        return None
    options = tuple(sorted(beat.storage_options.items()))
    return LeaseRef(beat.uri, beat.started, beat.stored, beat.write_id, options, beat.root, WRITE, beat.bases)


@contextmanager
def keep_alive(ref: LeaseRef | None, interval: dt.timedelta = HEARTBEAT_INTERVAL) -> Iterator[None]:
    """Refresh a stored lease while the block runs (one task's write); leaves it in place."""
    if ref is None:
        yield
        return
    beat = Heartbeat("", ref.write_id, interval, ref)
    try:
        beat.start(create=False)
    except (OSError, ValueError) as exc:
        _log.warning("could not refresh the write lease %s: %s", ref.uri, exc)
        yield
        return
    try:
        yield
    finally:
        beat.stop(remove=False)


def release_lease(ref: LeaseRef | None) -> None:
    """Remove a stored lease (the write committed or failed). Its tasks may still run (Spark
    aborts a write without waiting for killed tasks), so the end is marked first: a task's
    refresh that races the removal finds the mark and removes the lease again. Vacuum
    deletes marks older than :data:`partitioning.storage.lease_files.LEASE_TTL`."""
    if ref is None:
        return
    beat = Heartbeat("", ref.write_id, HEARTBEAT_INTERVAL, ref)
    try:
        contained(beat.root, beat.uri)
        with beat.fs.open_output_stream(beat.path + ENDED_SUFFIX) as out:
            out.write(b"")
    except (OSError, PartitioningError) as exc:
        _log.warning("could not mark the end of the write lease %s: %s", ref.uri, exc)
    beat.remove()
