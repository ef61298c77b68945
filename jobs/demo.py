"""The main job: write sample events into a partitioned namespace and count them back.

Run it with ``make run``, which is::

    PYSPARK_PYTHON=.venv/bin/python .venv/bin/spark-submit --master local[2] \\
        --properties-file spark-conf/spark-defaults.conf jobs/demo.py --root warehouse/events

The sample replaces the namespace's data on every run (mode ``overwrite``), so the
output is the same each time. Counts are read back from each partition table at the
``read_version`` the manifest records.

An object-store root (``s3://``, ``gs://``, ``az://``) takes Lance's storage options as
``--storage-option KEY=VALUE`` (repeatable, e.g. ``--storage-option aws_region=eu-west-1``).
"""

from __future__ import annotations

import argparse
import sys
import time

from jobs._cli import add_storage_option_argument, finish, run, storage_options
from partitioning import PartitionedNamespace
from pipelines.sample import sample_events
from pipelines.session import build_session
from pipelines.write.dataframe import write_partitioned

DEFAULT_SPEC = ["year(ts)", "month(ts)", "day(ts)", "country"]


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="demo", description="Write sample events, then count them per partition.")
    parser.add_argument("--root", default="warehouse/events", help="namespace root (path or URI)")
    parser.add_argument("--rows", type=int, default=100_000, help="sample rows to generate")
    parser.add_argument("--days", type=int, default=3)
    parser.add_argument("--countries", type=int, default=3)
    parser.add_argument("--partition-by", nargs="+", default=DEFAULT_SPEC, help="used when creating the namespace")
    add_storage_option_argument(parser)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)

    def body() -> None:
        options = storage_options(args)
        spark = build_session("lance_partitioned: demo")
        events = sample_events(spark, args.rows, days=args.days, countries=args.countries)
        started = time.perf_counter()
        result = write_partitioned(
            events, args.root, mode="overwrite", partition_by=args.partition_by, storage_options=options
        )
        print(f"{result.summary()} in {time.perf_counter() - started:.1f} s")
        ns = PartitionedNamespace.load(result.root, options)
        print(ns.layout())
        print(f"\nrows per partition (read at each table's read_version, __manifest v{ns.manifest_version}):")
        total = 0
        for p in ns.partitions():
            count = ns.open_table(p).count_rows()
            total += count
            values = ", ".join(f"{k}={v}" for k, v in p.values.items())
            print(f"  {values:50s} {count:>8,}")
        print(f"  {'total':50s} {total:>8,}")

    return run(body)


if __name__ == "__main__":
    sys.exit(finish(main()))
