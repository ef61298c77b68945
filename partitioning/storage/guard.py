"""The protected path of every commit that references files: one helper, one rule.

Every operation that ends in a ``__manifest`` commit pointing at files (a write, a
restore, a compaction, the rewrites of merge, update and delete, an index commit, a
partition drop) follows the same rule, so that nothing it commits can have been deleted
by a vacuum running beside it:

1. **Lease first.** :func:`guarded` stores a lease under ``<root>/_writes``
   (:mod:`partitioning.storage.leases`) before the operation reads the ``__manifest`` version it
   builds on, and :meth:`Guard.read` records each such version as a *base* of the lease.
   While the lease lives, vacuum keeps every file and dataset version newer than the
   lease and everything a base version references (a restore's base is the version it
   restores, whose table versions may be long out of the latest version).
2. **Settle, verify, commit.** Right before its ``__manifest`` commit the operation calls
   :meth:`Guard.before_commit`. It waits until every vacuum whose lease was stored no
   later than this operation's has ended (such a vacuum may have re-read the leases
   before this one was stored), then checks that what the commit is about to reference
   exists: every dataset version and every data and deletion file of it when a vacuum
   may have missed the lease (and always for a restore), otherwise the operation's own
   new files, which its callers stat as they commit. A missing one is one line naming
   the table and version or file; nothing is committed.

Vacuum's side (:func:`partitioning.tables.vacuum.vacuum`): after planning, it stores its
own lease (kind ``vacuum``), re-reads the live leases and the latest ``__manifest``
version, and drops from its plan whatever that version or a live lease's base
references; only then does it delete. A lease stored before that re-read is seen by it;
an operation whose lease was stored after it finds the vacuum's lease and waits.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TypeVar

import lance
import pyarrow.fs as pafs
from lance.fragment import FragmentMetadata

from partitioning.errors import ConcurrentModification, PartitioningError, first_line
from partitioning.storage.lease_files import LEASE_TTL, VACUUM, Lease, list_leases
from partitioning.storage.leases import HEARTBEAT_INTERVAL, Heartbeat, LeaseRef, held_lease
from partitioning.storage.roots import filesystem_of

__all__ = ["SETTLE_TIMEOUT", "Guard", "Reference", "ReferenceGone", "guarded", "missing_references"]

T = TypeVar("T")
R = TypeVar("R")

SETTLE_TIMEOUT = LEASE_TTL
"""How long a commit waits for a vacuum that may not have seen its lease (a vacuum that
died stops heart-beating, and its lease lapses within :data:`partitioning.storage.lease_files.LEASE_TTL`)."""
_POLL = 0.05
_POLL_MAX = 1.0
PARALLEL_CHECKS = 16


@dataclass(frozen=True)
class Reference:
    """One partition table version a commit is about to point at."""

    object_id: str
    uri: str
    version: int


class ReferenceGone(ConcurrentModification):
    """Something a commit was about to reference is gone; nothing was committed.
    ``problems``: one line per missing table version or file."""

    def __init__(self, message: str, problems: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.problems = tuple(problems)


class Guard:
    """One operation's lease and the checks it makes before committing (see the module)."""

    def __init__(
        self,
        root: str,
        storage_options: Mapping[str, str] | None,
        beat: Heartbeat | None,
        *,
        stored: dt.datetime | None = None,
    ) -> None:
        self.root = root
        self.storage_options = dict(storage_options) if storage_options else None
        self._beat = beat
        self._stored = beat.stored if beat is not None else stored
        self._settled = False
        self.waited = 0.0  # seconds spent waiting for vacuums, for reports

    @classmethod
    def of_ref(cls, ref: LeaseRef | None, root: str, storage_options: Mapping[str, str] | None) -> Guard:
        """The guard of a lease a Spark data source writer stored (:func:`partitioning.storage.leases.take_lease`)."""
        return cls(root, storage_options, None, stored=ref.stored if ref is not None else None)

    @property
    def bases(self) -> tuple[int, ...]:
        return self._beat.bases if self._beat is not None else ()

    def read(self, version: int) -> None:
        """Record that the operation reads (and builds on) ``__manifest`` ``version``; call it
        before reading anything of that version vacuum could otherwise delete."""
        if self._beat is None:
            return
        try:
            self._beat.add_base(version)
        except (OSError, ValueError) as exc:
            raise ConcurrentModification(
                f"could not record __manifest version {version} in the lease {self._beat.uri}: {first_line(exc)}"
            ) from exc

    def settle(self, timeout: dt.timedelta = SETTLE_TIMEOUT) -> bool:
        """Wait until no live vacuum lease stored no later than this guard's lease is left;
        True if there was one (a vacuum that may have deleted without seeing this lease)."""
        if self._settled:
            return False
        deadline = time.monotonic() + timeout.total_seconds()
        exposed = False
        pause = _POLL
        started = time.monotonic()
        while True:
            blocking = self._blocking_vacuums()
            if not blocking:
                break
            exposed = True
            if time.monotonic() >= deadline:
                raise ConcurrentModification(
                    f"a vacuum of {self.root} ({blocking[0].uri}) has been deleting since before this operation "
                    f"took its lease and is still running after {timeout}; nothing was committed, run it again"
                )
            time.sleep(pause)
            pause = min(_POLL_MAX, pause * 2)
        self.waited += time.monotonic() - started
        self._settled = True
        return exposed

    def _blocking_vacuums(self) -> list[Lease]:
        """Live vacuum leases stored no later than this lease was last changed (stored, or
        given a base): such a vacuum may have read this lease without all of it."""
        now = dt.datetime.now(dt.UTC)
        mark = self._stored
        if self._beat is not None and self._beat.based is not None and mark is not None:
            mark = max(mark, self._beat.based)
        out = []
        for lease in list_leases(self.root, self.storage_options):
            if lease.kind != VACUUM or not lease.live(now):
                continue
            if mark is None or lease.stored is None or lease.stored <= mark:
                out.append(lease)
        return out

    def before_commit(self, references: Iterable[Reference] = (), *, full: bool = False) -> None:
        """Settle, then check ``references`` (every table version and its files) when a vacuum
        may have missed this lease, or always with ``full``; a missing one raises
        :class:`ConcurrentModification` (one line) and the caller commits nothing."""
        exposed = self.settle()
        if not (exposed or full):
            return
        refs = list(references)
        if not refs:
            return
        problems = missing_references(refs, self.storage_options)
        if problems:
            raise ReferenceGone(
                f"{problems[0]}{f' (and {len(problems) - 1} more)' if len(problems) > 1 else ''}; "
                "it was deleted while this operation ran (a vacuum?). Nothing was committed",
                problems,
            )


@contextmanager
def guarded(
    root: str,
    storage_options: Mapping[str, str] | None = None,
    *,
    write_id: str | None = None,
    bases: Sequence[int] = (),
    interval: dt.timedelta = HEARTBEAT_INTERVAL,
) -> Iterator[Guard]:
    """Hold a lease (with ``bases``) for the block and yield its :class:`Guard`.

    If the lease cannot be stored (a read-only store) the operation goes on with a
    warning; its guard then checks everything before committing, as if a vacuum had run.
    """
    with held_lease(root, storage_options, write_id=write_id, interval=interval, bases=tuple(bases)) as beat:
        guard = Guard(root, storage_options, beat)
        if beat is None:
            guard._stored = None
        yield guard


def missing_references(
    refs: Sequence[Reference], storage_options: Mapping[str, str] | None, *, files: bool = True
) -> list[str]:
    """One line per reference whose dataset version (or, with ``files``, a data or deletion
    file of it) is gone; one open per version and one stat per file, in parallel."""

    def open_one(ref: Reference) -> tuple[str | None, list[str]]:
        try:
            ds = lance.dataset(
                ref.uri, version=ref.version, storage_options=dict(storage_options) if storage_options else None
            )
            fragments = [f.metadata for f in ds.get_fragments()] if files else []
        except (OSError, ValueError, RuntimeError) as exc:
            return f"partition table {ref.object_id} at version {ref.version} is gone ({first_line(exc)})", []
        return None, fragment_files(ref.uri, fragments)

    opened = _parallel(open_one, refs)
    problems = [p for p, _ in opened if p is not None]
    owners = [(ref, path) for ref, (_, paths) in zip(refs, opened, strict=True) for path in paths]
    if not owners:
        return problems

    def gone(path: str) -> bool:
        try:
            fs, inner = filesystem_of(path, storage_options)
            return bool(fs.get_file_info(inner).type == pafs.FileType.NotFound)
        except OSError as exc:
            raise PartitioningError(f"cannot check {path}: {first_line(exc)}") from exc

    flags = _parallel(gone, [path for _, path in owners])
    reported: set[str] = set()
    for (ref, path), missing in zip(owners, flags, strict=True):
        if missing and ref.object_id not in reported:
            reported.add(ref.object_id)
            problems.append(f"partition table {ref.object_id} at version {ref.version}: file {path} is gone")
    return problems


def fragment_files(uri: str, fragments: Sequence[FragmentMetadata]) -> list[str]:
    """The data and deletion files of ``fragments`` of the dataset at ``uri`` (files in
    other base paths, which Lance shares between datasets, are not the dataset's own)."""
    base = uri.rstrip("/")
    paths = [f"{base}/data/{d.path}" for fragment in fragments for d in fragment.files if d.base_id is None]
    for fragment in fragments:
        deletion = fragment.deletion_file
        if deletion is not None and getattr(deletion, "base_id", None) is None:
            paths.append(f"{base}/{deletion.path(fragment.id)}")
    return paths


def _parallel(fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
    workers = max(1, min(PARALLEL_CHECKS, len(items)))
    if workers == 1:
        return [fn(i) for i in items]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(fn, items))
