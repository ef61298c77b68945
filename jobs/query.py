"""Query a partitioned namespace with a SQL filter, pruning partition tables through __manifest.

Run under spark-submit, e.g.::

    PYSPARK_PYTHON=.venv/bin/python .venv/bin/spark-submit --master local[2] \\
        --properties-file spark-conf/spark-defaults.conf jobs/query.py \\
        --root warehouse/events --filter "country = 'US' AND ts >= TIMESTAMP '2025-12-11T00:00:00Z'" \\
        --columns event_id ts country --show 10

Prints the pruning summary ("scanning K of N partition tables ..."), then shows the
first rows, or writes them with ``--output PATH --output-format parquet|csv``. Bad
input prints one ``error:`` line and exits with status 2.

An object-store root (``s3://``, ``gs://``, ``az://``) takes Lance's storage options as
``--storage-option KEY=VALUE`` (repeatable, e.g. ``--storage-option aws_region=eu-west-1``).
"""

from __future__ import annotations

import argparse
import sys

from jobs._cli import add_output_arguments, add_storage_option_argument, finish, run, storage_options, write_or_show
from pipelines.read.dataframe import read_partitioned_with_plan
from pipelines.session import build_session


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="query", description="Query a Lance partitioned namespace.")
    parser.add_argument("--root", required=True, help="namespace root (path or URI)")
    parser.add_argument("--filter", help="SQL filter, e.g. \"country = 'US' AND day(ts) ...\"")
    parser.add_argument("--columns", nargs="+", help="columns to return (default: all)")
    parser.add_argument("--version", type=int, help="read as of this __manifest version (time travel)")
    add_storage_option_argument(parser)
    add_output_arguments(parser)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)

    def body() -> None:
        options = storage_options(args)
        spark = build_session("lance_partitioned: query")
        df, plan = read_partitioned_with_plan(
            spark, args.root, args.filter, args.columns, args.version, storage_options=options
        )
        print(plan.summary)
        write_or_show(df, args, "query")

    return run(body)


if __name__ == "__main__":
    sys.exit(finish(main()))
