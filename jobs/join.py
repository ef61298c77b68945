"""Join two partitioned namespaces, without a shuffle when they are partitioned compatibly (SPJ).

Run under spark-submit, e.g.::

    PYSPARK_PYTHON=.venv/bin/python .venv/bin/spark-submit --master local[2] \\
        --properties-file spark-conf/spark-defaults.conf jobs/join.py \\
        --left warehouse/events --right warehouse/users --on user_id --how inner \\
        --filter-left "country = 'US'" --output /tmp/joined --output-format parquet

Prints whether the storage-partitioned join was used (and why not, if it fell back to
Spark's shuffle join), then shows the first ``--show N`` rows, or writes them with
``--output PATH --output-format parquet|csv``. Bad input prints one ``error:`` line
and exits with status 2.

The columns are Spark's ``left.join(right, on=[...])``: a non-key column name on both
sides appears twice. Parquet cannot hold two columns of one name, so such a join
written as parquet is refused, before anything is written, unless ``--suffixes LEFT
RIGHT`` (e.g. ``--suffixes _left _right``) renames both copies.

An object-store root (``s3://``, ``gs://``, ``az://``) takes Lance's storage options as
``--storage-option KEY=VALUE`` (repeatable, e.g. ``--storage-option aws_region=eu-west-1``).
"""

from __future__ import annotations

import argparse
import sys

from pyspark.sql import DataFrame

from jobs._cli import add_output_arguments, add_storage_option_argument, finish, run, storage_options, write_or_show
from partitioning import InvalidInput
from partitioning.plan.join_columns import duplicate_names
from pipelines.read.join import join_partitioned_with_plan
from pipelines.session import build_session


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="join", description="Join two Lance partitioned namespaces.")
    parser.add_argument("--left", required=True, help="left namespace root (path or URI)")
    parser.add_argument("--right", required=True, help="right namespace root (path or URI)")
    parser.add_argument("--on", nargs="+", required=True, help="join key column(s), present on both sides")
    parser.add_argument("--how", default="inner", help="inner, left, right or full (default: inner)")
    parser.add_argument("--filter-left", help="SQL filter applied to the left side before the join")
    parser.add_argument("--filter-right", help="SQL filter applied to the right side before the join")
    parser.add_argument(
        "--suffixes",
        nargs=2,
        metavar=("LEFT", "RIGHT"),
        help="rename a non-key column on both sides to <name>LEFT and <name>RIGHT (default: keep both names)",
    )
    add_storage_option_argument(parser)
    add_output_arguments(parser)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)

    def body() -> None:
        options = storage_options(args)
        spark = build_session("lance_partitioned: join")
        df, plan = join_partitioned_with_plan(
            spark,
            args.left,
            args.right,
            args.on,
            args.how,
            filter_left=args.filter_left,
            filter_right=args.filter_right,
            suffixes=args.suffixes,
            storage_options=options,
        )
        if args.output and args.output_format == "parquet":
            check_parquet_names(df)
        if plan.compatible:
            print(f"join: storage-partitioned join used ({len(plan.tasks)} group tasks): {plan.reason}")
        else:
            print(f"join: storage-partitioned join not used, Spark shuffle join instead: {plan.reason}")
        write_or_show(df, args, "join")

    return run(body)


def check_parquet_names(df: DataFrame) -> None:
    """Refuse, in one line, columns that parquet cannot hold: two of one name (ignoring case unless
    ``spark.sql.caseSensitive`` is on, as Spark's own check)."""
    case_sensitive = str(df.sparkSession.conf.get("spark.sql.caseSensitive", "false")).lower() == "true"
    names = df.columns
    dupes = sorted({n for n in names if names.count(n) > 1}) if case_sensitive else duplicate_names(names)
    if dupes:
        raise InvalidInput(
            f"column(s) {', '.join(map(repr, dupes))} are on both sides of the join and parquet cannot hold two "
            "columns of one name; pass --suffixes LEFT RIGHT (e.g. --suffixes _left _right) or --output-format csv"
        )


if __name__ == "__main__":
    sys.exit(finish(main()))
