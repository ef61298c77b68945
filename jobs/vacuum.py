"""Delete files no reader within the retention period can reach.

Run under spark-submit, e.g.::

    PYSPARK_PYTHON=.venv/bin/python .venv/bin/spark-submit --master local[2] \\
        --properties-file spark-conf/spark-defaults.conf jobs/vacuum.py \\
        --root warehouse/events --retain-hours 168 --dry-run

Removes files of failed writes, dropped partition tables, and dataset and ``__manifest``
versions older than what a reader within ``--retain-hours`` may use. ``--dry-run``
lists them instead. Under 24 hours needs ``--allow-short-retention``; a write in
progress (its lease under ``<root>/_writes``) keeps its files whatever the retention. Bad input
prints one ``error:`` line and exits with status 2.

An object-store root (``s3://``, ``gs://``, ``az://``) takes Lance's storage options as
``--storage-option KEY=VALUE`` (repeatable, e.g. ``--storage-option aws_region=eu-west-1``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys

from jobs._cli import add_storage_option_argument, finish, run, storage_options
from partitioning.tables.vacuum import vacuum


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="vacuum", description="Vacuum a Lance partitioned namespace.")
    parser.add_argument("--root", required=True, help="namespace root (path or URI)")
    parser.add_argument("--retain-hours", type=float, default=168.0, help="retention period (default 7 days)")
    parser.add_argument("--dry-run", action="store_true", help="list what would be deleted, delete nothing")
    parser.add_argument("--allow-short-retention", action="store_true", help="allow --retain-hours under 24")
    add_storage_option_argument(parser)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)

    if args.retain_hours < 24 and not args.allow_short_retention:
        print(
            f"error: --retain-hours {args.retain_hours:g} is under 24 hours; it could delete files of long writes "
            "in progress and versions readers still use (add --allow-short-retention to do it anyway)",
            file=sys.stderr,
        )
        return 2

    def body() -> None:
        report = vacuum(
            args.root,
            dt.timedelta(hours=args.retain_hours),
            dry_run=args.dry_run,
            allow_short_retention=args.allow_short_retention,
            storage_options=storage_options(args),
        )
        for item in report.deleted:
            print(f"  {item}")
        print(report.summary())

    return run(body)


if __name__ == "__main__":
    sys.exit(finish(main()))
