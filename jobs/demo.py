"""The main job: sample events into a partitioned namespace, then show its layout.

Run it with ``make run``, which is::

    PYSPARK_PYTHON=.venv/bin/python .venv/bin/spark-submit --master local[2] \
        --properties-file spark-conf/spark-defaults.conf jobs/demo.py --root warehouse/events

Issue #2 stage: the namespace is created (or loaded) and its layout printed, with
the partitions the sample rows map to under its spec. Writing the rows is issue #3.
"""

from __future__ import annotations

import argparse
import sys

from partitioning import PartitionedNamespace, PartitioningError
from partitioning.manifest import ManifestStore
from pipelines.sample import sample_events
from pipelines.schema import namespace_schema_from_spark
from pipelines.session import build_session
from pipelines.transforms import with_partition_columns

DEFAULT_SPEC = ["year(ts)", "month(ts)", "day(ts)", "country"]


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="demo", description=__doc__.splitlines()[0])
    parser.add_argument("--root", default="warehouse/events", help="namespace root (path or URI)")
    parser.add_argument("--rows", type=int, default=10_000, help="sample rows to generate")
    parser.add_argument("--days", type=int, default=3)
    parser.add_argument("--countries", type=int, default=3)
    parser.add_argument(
        "--partition-by",
        nargs="+",
        default=DEFAULT_SPEC,
        help="partition expressions, e.g. 'day(ts)' 'bucket[16](user_id)'",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    spark = build_session("lance_partitioned: demo")
    try:
        events = sample_events(spark, args.rows, days=args.days, countries=args.countries)
        if ManifestStore(args.root).exists():
            ns = PartitionedNamespace.load(args.root)
            print(f"loaded existing namespace at {args.root}")
        else:
            ns = PartitionedNamespace.create(args.root, namespace_schema_from_spark(events.schema), args.partition_by)
            print(f"created namespace at {args.root}")
        print(ns.layout())
        spec = ns.current_spec
        keyed = with_partition_columns(events, spec.fields, ns.namespace_schema, prefix="")
        counts = keyed.groupBy(*spec.field_ids).count().orderBy(*spec.field_ids)
        print(f"\n{args.rows} sample rows map to {counts.count()} partitions of spec v{spec.spec_id}:")
        counts.show(50, truncate=False)
    except PartitioningError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
