"""What every job shares: bad input and failures end as one ``error:`` line and exit status 2."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from pyspark.errors import PySparkException
from pyspark.sql import DataFrame

from partitioning import PartitioningError
from pipelines.spark_errors import spark_error_line

EXIT_BAD_INPUT = 2


def run(body: Callable[[], None]) -> int:
    """Run a job body; report a PartitioningError or Spark error as one line, never a trace."""
    try:
        body()
    except PartitioningError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except PySparkException as exc:  # a task's error, or e.g. an input path that does not exist
        print(f"error: {spark_error_line(exc)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return 0


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
