"""Ingest parquet, csv or json files into a partitioned namespace.

Run under spark-submit, e.g.::

    PYSPARK_PYTHON=.venv/bin/python .venv/bin/spark-submit --master local[2] \\
        --properties-file spark-conf/spark-defaults.conf jobs/ingest.py \\
        --root warehouse/events --input data/events/*.parquet --format parquet \\
        --partition-by 'day(ts)' 'bucket[16](user_id)' --mode append

``--partition-by`` is needed only when the namespace does not exist yet. Prints one
summary line (rows, partitions touched, manifest version, seconds); on bad input it
prints one ``error:`` line and exits with status 2.

An object-store root (``s3://``, ``gs://``, ``az://``) takes Lance's storage options as
``--storage-option KEY=VALUE`` (repeatable, e.g. ``--storage-option aws_region=eu-west-1``).
"""

from __future__ import annotations

import argparse
import sys
import time

from jobs._cli import EXIT_BAD_INPUT, add_storage_option_argument, finish, run, storage_options
from partitioning.tables.write import WRITE_MODES
from pipelines.session import build_session
from pipelines.write.dataframe import write_partitioned


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="ingest", description="Ingest files into a Lance partitioned namespace.")
    parser.add_argument("--root", required=True, help="namespace root (path or URI)")
    parser.add_argument("--input", required=True, nargs="+", help="input files or directories")
    parser.add_argument("--format", required=True, choices=["parquet", "csv", "json"])
    parser.add_argument("--schema", help="input schema as a DDL string, e.g. 'id long, ts timestamp' (csv/json)")
    parser.add_argument("--partition-by", nargs="+", help="partition expressions, used to create the namespace")
    parser.add_argument("--mode", default="append", choices=WRITE_MODES)
    parser.add_argument("--write-id", help="idempotency key: a retried job with the same id adds nothing")
    parser.add_argument("--max-rows-per-file", type=int, default=1_048_576)
    parser.add_argument("--no-cluster", action="store_true", help="do not repartition/sort by partition first")
    parser.add_argument(
        "--read-option", action="append", default=[], metavar="KEY=VALUE", help="Spark reader option (repeatable)"
    )
    add_storage_option_argument(parser)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    options = {"header": "true", "inferSchema": "true"} if args.format == "csv" else {}
    for item in args.read_option:
        key, sep, value = item.partition("=")
        if not sep:
            print(f"error: --read-option {item!r} is not KEY=VALUE", file=sys.stderr)
            return EXIT_BAD_INPUT
        options[key] = value

    def body() -> None:
        storage = storage_options(args)
        spark = build_session("lance_partitioned: ingest")
        started = time.perf_counter()
        reader = spark.read.format(args.format).options(**options)
        if args.schema:
            reader = reader.schema(args.schema)
        df = reader.load(args.input)
        result = write_partitioned(
            df,
            args.root,
            mode=args.mode,
            partition_by=args.partition_by,
            write_id=args.write_id,
            max_rows_per_file=args.max_rows_per_file,
            cluster=not args.no_cluster,
            storage_options=storage,
        )
        seconds = time.perf_counter() - started
        if result.skipped:
            print(f"ingest: nothing written: {result.skipped} ({seconds:.1f} s)")
        else:
            print(
                f"ingest: {result.rows_written:,} rows, {result.partitions_touched} partitions touched "
                f"({result.partitions_created} new), __manifest v{result.manifest_version}, {seconds:.1f} s"
            )

    return run(body)


if __name__ == "__main__":
    sys.exit(finish(main()))
