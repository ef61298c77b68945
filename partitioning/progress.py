"""Progress lines for Spark-free operations over many partition tables.

Spark shows its own jobs (their descriptions name the operation); an operation that runs in
this process (vacuum, local compaction, index builds) over many tables prints a line to
standard error every :data:`INTERVAL` seconds, and a last one when it printed any::

    vacuum /data/events: 600 of 1,500 partition tables (40%), 10 s

Short operations print nothing. ``LP_PROGRESS=0`` turns the lines off.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from typing import TypeVar

__all__ = ["INTERVAL", "Progress", "progress"]

INTERVAL = 5.0
T = TypeVar("T")


class Progress:
    """Counts finished items (thread-safe) and prints a line when :data:`INTERVAL` has passed."""

    def __init__(
        self, label: str, total: int, *, unit: str = "partition tables", interval: float | None = None
    ) -> None:
        self.label, self.total, self.unit = label, total, unit
        self.interval = INTERVAL if interval is None else interval
        self.done = 0
        self.started = self.last = time.monotonic()
        self.printed = False
        self.enabled = os.environ.get("LP_PROGRESS", "1") != "0"
        self._lock = threading.Lock()

    def advance(self, n: int = 1) -> None:
        with self._lock:
            self.done += n
            now = time.monotonic()
            if self.enabled and now - self.last >= self.interval:
                self.last = now
                self._line(now)

    def finish(self) -> None:
        if self.printed:
            self._line(time.monotonic())

    def _line(self, now: float) -> None:
        share = f" ({100 * self.done // self.total}%)" if self.total else ""
        print(
            f"{self.label}: {self.done:,} of {self.total:,} {self.unit}{share}, {now - self.started:.0f} s",
            file=sys.stderr,
            flush=True,
        )
        self.printed = True


def progress(label: str, items: Iterable[T], total: int, *, unit: str = "partition tables") -> Iterator[T]:
    """``items`` as they are, with a progress line every :data:`INTERVAL` seconds."""
    meter = Progress(label, total, unit=unit)
    for item in items:
        yield item
        meter.advance()
    meter.finish()
