"""What every job shares: bad input and failures end as one ``error:`` line and exit status 2.

Nothing here imports PySpark: a job that needs no Spark (``evolve``, ``vacuum``, and
``delete`` without a running session) starts no JVM.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from partitioning import PartitioningError
from partitioning.storage.roots import StorageOptions, parse_storage_option_args

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

EXIT_BAD_INPUT = 2


def _spark_error_line(exc: BaseException) -> str | None:
    """Spark's one line for ``exc`` if it is a Spark error (PySpark is only loaded if already in use)."""
    if "pyspark" not in sys.modules:
        return None
    from pyspark.errors import PySparkException

    if not isinstance(exc, PySparkException):
        return None
    from pipelines.spark_errors import spark_error_line

    return spark_error_line(exc)


def run(body: Callable[[], None]) -> int:
    """Run a job body; report a PartitioningError or Spark error as one line, never a trace."""
    try:
        body()
    except PartitioningError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except Exception as exc:  # a task's error, or e.g. an input path that does not exist
        line = _spark_error_line(exc)
        if line is None:
            raise
        print(f"error: {line}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return 0


def finish(code: int) -> int:
    """A job run as a program: stop the Spark session it ran before the process exits, so a
    cluster's executors end with the application (on ``local-cluster`` the master would
    otherwise start new ones while the JVM shuts down, each failure a log line); ``code``."""
    spark = running_session()
    if spark is not None:
        spark.stop()
    return code


def running_session() -> SparkSession | None:
    """The Spark session this process already runs (classic or Connect), else None; never starts one."""
    if "pyspark" not in sys.modules:
        return None
    from pipelines.session import active_session

    return active_session()


def add_storage_option_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--storage-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="Lance storage option for an object store, e.g. aws_region=eu-west-1 (repeatable)",
    )


def storage_options(args: argparse.Namespace) -> StorageOptions | None:
    """The job's ``--storage-option KEY=VALUE`` arguments; a malformed one is an ``InvalidInput`` line."""
    return parse_storage_option_args(args.storage_option)


def add_output_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--output", help="write the result here instead of showing it")
    parser.add_argument("--output-format", choices=["parquet", "csv"], default="parquet")
    parser.add_argument("--show", type=int, default=20, help="rows to show when not writing")


def write_or_show(df: DataFrame, args: argparse.Namespace, job: str) -> None:
    """Write ``df`` to ``--output`` (parquet or csv with a header) or show ``--show`` rows."""
    if args.output:
        writer = df.write.mode("overwrite")
        if args.output_format == "csv":
            writer = writer.option("header", "true")
        getattr(writer, args.output_format)(args.output)
        print(f"{job}: wrote {args.output_format} to {args.output}")
    else:
        df.show(args.show, truncate=False)
