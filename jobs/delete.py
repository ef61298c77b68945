"""Delete rows, or drop whole partitions, of a partitioned namespace.

Run under spark-submit, e.g.::

    PYSPARK_PYTHON=.venv/bin/python .venv/bin/spark-submit --master local[2] \\
        --properties-file spark-conf/spark-defaults.conf jobs/delete.py \\
        --root warehouse/events --filter "user_id = 42"

``--drop-partitions`` removes whole partition tables instead; its filter may use only
identity partition columns (e.g. ``--filter "country = 'US'"``). Either way ONE
``__manifest`` commit makes the change. Bad input prints one ``error:`` line and exits
with status 2.

The job starts no Spark session: the filter is DataFusion SQL, applied in this process
(``python jobs/delete.py ...`` works without Spark). Called in a process that already
runs a session (classic or Spark Connect), it uses that session and Spark SQL instead.

An object-store root (``s3://``, ``gs://``, ``az://``) takes Lance's storage options as
``--storage-option KEY=VALUE`` (repeatable, e.g. ``--storage-option aws_region=eu-west-1``).
"""

from __future__ import annotations

import argparse
import sys

from jobs._cli import add_storage_option_argument, finish, run, running_session, storage_options
from partitioning.tables import deletes


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="delete", description="Delete rows from a Lance partitioned namespace.")
    parser.add_argument("--root", required=True, help="namespace root (path or URI)")
    parser.add_argument("--filter", required=True, help="SQL filter of the rows (or partitions) to delete")
    parser.add_argument("--drop-partitions", action="store_true", help="drop whole partition tables")
    add_storage_option_argument(parser)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)

    def body() -> None:
        options = storage_options(args)
        spark = running_session()
        if spark is None:
            local = deletes.drop_partitions if args.drop_partitions else deletes.delete_rows
            print(local(args.root, args.filter, storage_options=options).summary())
            return
        from pipelines.maintenance.operations import delete_rows, drop_partitions

        operation = drop_partitions if args.drop_partitions else delete_rows
        print(operation(args.root, args.filter, spark=spark, storage_options=options).summary())

    return run(body)


if __name__ == "__main__":
    sys.exit(finish(main()))
