"""Running picklable work as Spark tasks, the same way on classic Spark and Spark Connect."""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

import pyarrow as pa
from pyspark.sql import SparkSession

__all__ = ["run_tasks", "session_or_active"]

T = TypeVar("T")
R = TypeVar("R")


def session_or_active(spark: SparkSession | None) -> SparkSession | None:
    """``spark``, else the active session, else None (the caller then works in-process)."""
    return spark or SparkSession.getActiveSession()


def run_tasks(session: SparkSession, items: Sequence[T], fn: Callable[[T], R]) -> list[R]:
    """``fn`` over ``items``, one Spark task each (``range`` with one row per partition, then
    ``mapInArrow``); results come back pickled, in the order of ``items``."""
    work = list(items)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            done = [pickle.dumps(fn(work[i])) for i in batch.column(0).to_pylist()]
            yield pa.RecordBatch.from_arrays([pa.array(done, pa.binary())], names=["result"])

    out = session.range(0, len(work), 1, len(work)).mapInArrow(run, "result binary").toArrow()
    return [pickle.loads(r) for r in out.column("result").to_pylist()]
