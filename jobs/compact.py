"""Compact small fragments of a partitioned namespace, in parallel on the executors.

Run under spark-submit, e.g.::

    PYSPARK_PYTHON=.venv/bin/python .venv/bin/spark-submit --master local[2] \\
        --properties-file spark-conf/spark-defaults.conf jobs/compact.py \\
        --root warehouse/events --filter "country = 'US'" --target-rows-per-fragment 1048576

On an object store, pass Lance's storage options, e.g. ``--root s3://bucket/events
--storage-option aws_region=eu-west-1`` (repeatable).

Only the partitions the filter selects are compacted (all without one). Everything is
committed in ONE ``__manifest`` commit; readers of older versions keep the old files
until ``jobs/vacuum.py``. Bad input prints one ``error:`` line and exits with status 2.
"""

from __future__ import annotations

import argparse
import sys

from jobs._cli import add_storage_option_argument, finish, run, storage_options
from pipelines.maintenance.operations import compact
from pipelines.session import build_session


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="compact", description="Compact a Lance partitioned namespace.")
    parser.add_argument("--root", required=True, help="namespace root (path or URI)")
    parser.add_argument("--filter", help="SQL filter selecting the partitions to compact")
    parser.add_argument("--target-rows-per-fragment", type=int, default=1_048_576)
    add_storage_option_argument(parser)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)

    def body() -> None:
        options = storage_options(args)
        spark = build_session("lance_partitioned: compact")
        report = compact(
            args.root,
            args.filter,
            target_rows_per_fragment=args.target_rows_per_fragment,
            spark=spark,
            storage_options=options,
        )
        print(report.summary())

    return run(body)


if __name__ == "__main__":
    sys.exit(finish(main()))
