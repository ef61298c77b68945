"""Merge (upsert) files into a partitioned namespace: Delta's ``MERGE INTO`` as a job.

Run under spark-submit, e.g.::

    PYSPARK_PYTHON=.venv/bin/python .venv/bin/spark-submit --master local[2] \\
        --properties-file spark-conf/spark-defaults.conf jobs/merge.py \\
        --root warehouse/events --source data/changes/*.parquet --format parquet --on id \\
        --when-matched update --when-not-matched insert

``--set COL=EXPR`` (repeatable) updates only those columns (SQL over ``source.*`` and
``target.*``); ``--matched-condition`` limits the matched action;
``--when-not-matched-by-source delete`` removes target rows no source row matches
(within ``--target-filter``). Prints one summary line; bad input prints one ``error:``
line and exits with status 2. Object-store roots take ``--storage-option KEY=VALUE``.
"""

from __future__ import annotations

import argparse
import sys
import time

from jobs._cli import EXIT_BAD_INPUT, add_storage_option_argument, finish, run, storage_options
from pipelines.session import build_session
from pipelines.write.merge import merge_partitioned


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="merge", description="Merge files into a Lance partitioned namespace.")
    parser.add_argument("--root", required=True, help="namespace root (path or URI)")
    parser.add_argument("--source", required=True, nargs="+", help="source files or directories")
    parser.add_argument("--format", required=True, choices=["parquet", "csv", "json"])
    parser.add_argument("--schema", help="source schema as a DDL string (csv/json)")
    parser.add_argument("--on", required=True, nargs="+", help="key columns")
    parser.add_argument("--when-matched", default="update", choices=["update", "delete", "ignore"])
    parser.add_argument("--when-not-matched", default="insert", choices=["insert", "ignore"])
    parser.add_argument("--when-not-matched-by-source", default="ignore", choices=["ignore", "delete"])
    parser.add_argument("--matched-condition", help="SQL over source.* and target.* limiting --when-matched")
    parser.add_argument("--set", action="append", default=[], metavar="COL=EXPR", help="column to update (repeatable)")
    parser.add_argument("--target-filter", help="SQL over the target: the rows the merge may touch")
    add_storage_option_argument(parser)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    assignments = {}
    for item in args.set:
        column, sep, expression = item.partition("=")
        if not sep or not column.strip() or not expression.strip():
            print(f"error: --set {item!r} is not COL=EXPR", file=sys.stderr)
            return EXIT_BAD_INPUT
        assignments[column.strip()] = expression.strip()

    def body() -> None:
        storage = storage_options(args)
        spark = build_session("lance_partitioned: merge")
        started = time.perf_counter()
        reader = spark.read.format(args.format)
        if args.format == "csv":
            reader = reader.option("header", "true").option("inferSchema", "true")
        if args.schema:
            reader = reader.schema(args.schema)
        result = merge_partitioned(
            reader.load(args.source),
            args.root,
            on=args.on,
            when_matched=args.when_matched,
            when_not_matched=args.when_not_matched,
            when_not_matched_by_source=args.when_not_matched_by_source,
            matched_condition=args.matched_condition,
            set=assignments or None,
            target_filter=args.target_filter,
            storage_options=storage,
        )
        print(
            f"merge: {result.rows_updated:,} updated, {result.rows_inserted:,} inserted, "
            f"{result.rows_deleted - result.rows_updated:,} deleted in {result.partitions_touched} partitions, "
            f"__manifest v{result.manifest_version} ({time.perf_counter() - started:.1f} s)"
        )

    return run(body)


if __name__ == "__main__":
    sys.exit(finish(main()))
