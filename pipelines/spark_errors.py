"""One clear line for a failure inside a Spark job: the translation point for Spark's errors.

A task that raises one of this project's errors (they name the partition and the
cause) keeps its class and text; a row refused by the write-side schema rules is a
:class:`SchemaError`; any other Python error of a task is reported by its exception
line, never by the worker's traceback; a JVM-side failure by Spark's first line. The
result is chained to Spark's exception.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager

from py4j.protocol import Py4JJavaError
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame

from partitioning import errors
from partitioning.errors import PartitioningError, SchemaError

__all__ = [
    "ERROR_MARKER",
    "hide_worker_traceback",
    "quiet_query_context_logs",
    "spark_error_line",
    "spark_errors",
    "translate_spark_error",
    "where_sql",
]

# Errors raised inside Spark tasks by Spark expressions carry this prefix.
ERROR_MARKER = "lance_partitioned:"
# PySpark's loggers that print a failed query's error again, as JSON with the Java stack,
# before raising it (pyspark.errors.exceptions.base._log_exception)
QUERY_CONTEXT_LOGGERS = ("SQLQueryContextLogger", "DataFrameQueryContextLogger")


def quiet_query_context_logs() -> None:
    """Keep PySpark from printing every failed query's error a second time (a JSON record with
    the Java stack on stderr) before it raises it: the exception the caller gets carries the
    same text, so a bad statement is one line. Only those two loggers are quieted, and they
    are taken through PySpark's own logger class, which their records need."""
    from pyspark.logger import PySparkLogger

    for name in QUERY_CONTEXT_LOGGERS:
        PySparkLogger.getLogger(name).setLevel(logging.CRITICAL + 1)


def _worker_exception_line(text: str) -> str | None:
    """The ``Type: message`` line of a Python traceback inside a Spark error text."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.strip() != "Traceback (most recent call last):":
            continue
        for later in lines[i + 1 :]:
            if later.strip() and not later[:1].isspace():
                return later.strip()
    return None


def _stage_failure_line(text: str) -> str | None:
    """Why Spark aborted a job (e.g. a Python worker that crashed), from a JVM error's text."""
    found = re.search(r"Job aborted due to stage failure: [^\n]*?\): (?:[\w.$]+Exception: )?([^\n]+)", text)
    return found.group(1).split(". Consider ")[0] if found else None


def _error_class(name: str) -> type[PartitioningError]:
    found = getattr(errors, name, None)
    return found if isinstance(found, type) and issubclass(found, PartitioningError) else PartitioningError


def _clean(line: str) -> str:
    return re.sub(r"\s*SQLSTATE:\s*\w+\s*$", "", line.strip()).rstrip(". ")


def translate_spark_error(exc: BaseException, context: str) -> PartitioningError:
    """This project's one-line error for a Spark failure (``context`` says what was running)."""
    text = str(exc)
    ours = re.search(rf"{re.escape(ERROR_MARKER)}\s*(.+)", text)
    if ours:
        return SchemaError(_clean(ours.group(1)))
    mine = re.search(r"partitioning\.errors\.(\w+): (.+)", text)
    if mine:
        return _error_class(mine.group(1))(_clean(mine.group(2)))
    jvm = re.search(r"\[LANCE_([A-Z_]+)\] (.+)", text)  # the JVM layer's one line (LanceSqlError)
    if jvm:
        return _error_class(jvm.group(1).title().replace("_", ""))(_clean(jvm.group(2)))
    line = _worker_exception_line(text) or _stage_failure_line(text)
    if line is None:
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        if len(lines) > 1 and lines[0].endswith("from the Python worker:"):
            lines = lines[1:]  # the worker's exception line, its traceback hidden
        line = lines[0] if lines else type(exc).__name__
    return PartitioningError(f"{context} failed in a Spark job: {_clean(line)[:500]}")


def spark_error_line(exc: BaseException) -> str:
    """The one line to show for a Spark failure (a job's ``error:`` line)."""
    translated = translate_spark_error(exc, "")
    text = str(translated)
    return text.removeprefix(" failed in a Spark job: ") if type(translated) is PartitioningError else text


def hide_worker_traceback() -> None:
    """Inside a Spark Python worker, which reports an error and exits, leave the traceback
    out of the report (pyspark reads ``SPARK_HIDE_TRACEBACK`` when it formats it)."""
    if os.environ.get("SPARK_PYTHON_RUNTIME"):
        os.environ["SPARK_HIDE_TRACEBACK"] = "1"


@contextmanager
def spark_errors(context: str) -> Iterator[None]:
    try:
        yield
    except (PySparkException, Py4JJavaError) as exc:
        raise translate_spark_error(exc, context) from exc


def where_sql(df: DataFrame, text: str | None, name: str = "filter") -> DataFrame:
    """``df.where(text)`` (``df`` without ``text``); SQL Spark refuses is one line naming it."""
    if not text:
        return df
    try:
        return df.where(text)
    except PySparkException as exc:
        raise errors.InvalidInput(f"{name} {text!r}: {errors.first_line(exc)}") from exc
