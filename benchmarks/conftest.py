"""Benchmark fixtures: one local[2] session, and a side-by-side timer that keeps every sample.

Each timing is printed as ``median (min .. max)`` so the noise of a run is visible
beside its median (:class:`Timing`, :func:`spread`).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pytest


@pytest.fixture(scope="session")
def spark():
    from pipelines.session import build_session

    session = build_session("lance-partitioned-bench", master="local[2]")
    yield session
    session.stop()


def spread(samples: Sequence[float], *, scale: float = 1.0, unit: str = "s", digits: int = 2) -> str:
    """``median (min .. max)`` of ``samples`` (seconds) times ``scale``, e.g. ``1.23 s (1.10 .. 1.41)``."""
    med, lo, hi = statistics.median(samples) * scale, min(samples) * scale, max(samples) * scale
    return f"{med:.{digits}f} {unit} ({lo:.{digits}f} .. {hi:.{digits}f})"


@dataclass(frozen=True)
class Timing:
    """The samples (seconds) of one timed callable."""

    samples: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def min(self) -> float:
        return min(self.samples)

    @property
    def max(self) -> float:
        return max(self.samples)

    def show(self, *, scale: float = 1.0, unit: str = "s", digits: int = 2) -> str:
        return spread(self.samples, scale=scale, unit=unit, digits=digits)

    def show_ms(self, digits: int = 1) -> str:
        return self.show(scale=1000, unit="ms", digits=digits)

    def __str__(self) -> str:
        return self.show()


def interleaved_samples(
    runs: dict[str, Callable[[], object]], *, repeats: int = 5, warmup: int = 1
) -> dict[str, Timing]:
    """Every sample of each callable, run in turn so machine noise hits all of them alike."""
    for _ in range(warmup):
        for fn in runs.values():
            fn()
    samples: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, fn in runs.items():
            start = time.perf_counter()
            fn()
            samples[name].append(time.perf_counter() - start)
    return {name: Timing(tuple(s)) for name, s in samples.items()}


def interleaved_medians(
    runs: dict[str, Callable[[], object]], *, repeats: int = 5, warmup: int = 1
) -> dict[str, float]:
    """Median seconds of each callable (:func:`interleaved_samples` without the spread)."""
    return {name: t.median for name, t in interleaved_samples(runs, repeats=repeats, warmup=warmup).items()}
