"""Benchmark fixtures: one local[2] session, and a side-by-side timer that reports medians."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import pytest


@pytest.fixture(scope="session")
def spark():
    from pipelines.session import build_session

    session = build_session("lance-partitioned-bench", master="local[2]")
    yield session
    session.stop()


def interleaved_medians(
    runs: dict[str, Callable[[], object]], *, repeats: int = 5, warmup: int = 1
) -> dict[str, float]:
    """Median seconds of each callable, run in turn so machine noise hits all of them alike."""
    for _ in range(warmup):
        for fn in runs.values():
            fn()
    samples: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, fn in runs.items():
            start = time.perf_counter()
            fn()
            samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(s) for name, s in samples.items()}
