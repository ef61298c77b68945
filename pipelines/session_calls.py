"""What library code asks of a session it was given, alike on classic Spark and Spark Connect.

Spark Connect has no driver-side context object: library code labels its jobs with
:func:`describe_jobs`, asks for the cluster's task slots with :func:`default_parallelism`,
keeps its caller's active session with :func:`active_session_kept` and registers a data
source with :func:`register_once` / :func:`register_bound`, whose classic-only branches are
the only places that touch it. How a session is built is :mod:`pipelines.session`.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TypeVar

from pyspark.sql import SparkSession

from pipelines.session import is_connect
from pipelines.shared_roots import session_master

__all__ = [
    "active_session_kept",
    "default_parallelism",
    "describe_jobs",
    "register_bound",
    "register_once",
    "session_bound",
]


_MARKER = "spark.lance_partitioned.dataSource."
_S = TypeVar("_S", bound=type)


def _tag(description: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.:/-]+", "_", description).strip("_")


@contextmanager
def describe_jobs(spark: SparkSession, description: str) -> Iterator[None]:
    """Label the Spark jobs started inside: a job tag on both kinds of session (made of
    ``description``), and on classic Spark also the UI's job description."""
    tag = _tag(description)
    spark.addTag(tag)
    sc = None if is_connect(spark) else spark.sparkContext  # classic-only (guarded by is_connect)
    previous = sc.getLocalProperty("spark.job.description") if sc is not None else None
    if sc is not None:
        sc.setJobDescription(description)
    try:
        yield
    finally:
        if sc is not None:
            sc.setLocalProperty("spark.job.description", previous)  # type: ignore[arg-type]
        spark.removeTag(tag)


def default_parallelism(spark: SparkSession) -> int | None:
    """The cluster's task slots: ``defaultParallelism`` on classic Spark; on Connect
    ``spark.default.parallelism`` or what a ``local``/``local-cluster`` master says (None if unknown)."""
    if not is_connect(spark):
        return int(spark.sparkContext.defaultParallelism)  # classic-only (guarded by is_connect)
    configured = spark.conf.get("spark.default.parallelism", None)
    if configured:
        return int(configured)
    master = str(spark.conf.get("spark.master", "") or "")
    cluster = re.fullmatch(r"local-cluster\[(\d+),\s*(\d+),\s*\d+\]", master)
    if cluster:
        return int(cluster.group(1)) * int(cluster.group(2))
    local = re.fullmatch(r"local(?:\[(\d+|\*)(?:,\s*\d+)?\])?", master)
    if local:
        threads = local.group(1) or "1"
        return os.cpu_count() or 1 if threads == "*" else int(threads)
    return None


def register_once(spark: SparkSession, source: type) -> None:
    """``spark.dataSource.register(source)`` unless this session already has it (Spark
    warns on every re-registration). The marker is a session conf, so a new session
    registers again and a cloned one does not."""
    key = _MARKER + source.name()  # type: ignore[attr-defined]
    value = f"{source.__module__}.{source.__qualname__}"
    if spark.conf.get(key, None) == value:
        return
    if is_connect(spark):
        spark.dataSource.register(source)
    else:
        _register_classic(spark, source)
    spark.conf.set(key, value)


def _register_classic(spark: SparkSession, source: type) -> None:
    """Register ``source`` with ``spark`` as the JVM's active session (classic only).

    Spark 4.3 checks a new name against the data sources the *active* session has
    (``DataSourceRegistration.checkDataSourceExists``), so a second session
    (``spark.newSession()``) could not register a format its parent already has:
    DATA_SOURCE_ALREADY_EXISTS. Made active, it is checked against its own.
    """
    with active_session_kept(spark):
        spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)  # type: ignore[attr-defined]  # classic-only (guarded by is_connect)
        spark.dataSource.register(source)


@contextmanager
def active_session_kept(spark: SparkSession) -> Iterator[None]:
    """Whatever runs inside leaves the active session (the JVM's and PySpark's) as it was:
    ``spark.createDataFrame`` makes ``spark`` active, which a library call must not do to
    its caller (``build_session`` and ``getActiveSession`` would return another session)."""
    if is_connect(spark):
        yield
        return
    jvm_session = spark._jvm.org.apache.spark.sql.SparkSession  # type: ignore[attr-defined]  # classic-only (guarded by is_connect)
    previous, python_active = jvm_session.getActiveSession(), SparkSession._activeSession
    try:
        yield
    finally:
        SparkSession._activeSession = python_active
        if previous.isDefined():
            jvm_session.setActiveSession(previous.get())
        else:
            jvm_session.clearActiveSession()


@functools.cache
def session_bound(source: type[_S], master: str | None, connect: bool = False) -> type[_S]:
    """``source`` knowing the session's master and whether the session is Spark Connect.
    A data source runs in Spark's planner worker, which cannot ask the session; this
    subclass (pickled by value when registered, as it is not importable by name) carries
    both there as ``session_master`` and ``session_connect``."""
    attrs = {
        "__module__": source.__module__,
        "__qualname__": source.__qualname__,
        "session_master": master,
        "session_connect": connect,
    }
    return type(source.__name__, (source,), attrs)


def register_bound(spark: SparkSession, source: type) -> None:
    """:func:`register_once` of ``source`` bound to ``spark`` (:func:`session_bound`)."""
    register_once(spark, session_bound(source, session_master(spark), is_connect(spark)))
