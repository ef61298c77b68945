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
"""

from __future__ import annotations

import argparse
import sys

from jobs._cli import add_output_arguments, run, write_or_show
from pipelines.join import join_partitioned_with_plan
from pipelines.session import build_session


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="join", description="Join two Lance partitioned namespaces.")
    parser.add_argument("--left", required=True, help="left namespace root (path or URI)")
    parser.add_argument("--right", required=True, help="right namespace root (path or URI)")
    parser.add_argument("--on", nargs="+", required=True, help="join key column(s), present on both sides")
    parser.add_argument("--how", default="inner", help="inner, left, right or full (default: inner)")
    parser.add_argument("--filter-left", help="SQL filter applied to the left side before the join")
    parser.add_argument("--filter-right", help="SQL filter applied to the right side before the join")
    add_output_arguments(parser)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    spark = build_session("lance_partitioned: join")

    def body() -> None:
        df, plan = join_partitioned_with_plan(
            spark,
            args.left,
            args.right,
            args.on,
            args.how,
            filter_left=args.filter_left,
            filter_right=args.filter_right,
        )
        if plan.compatible:
            print(f"join: storage-partitioned join used ({len(plan.tasks)} group tasks): {plan.reason}")
        else:
            print(f"join: storage-partitioned join not used, Spark shuffle join instead: {plan.reason}")
        write_or_show(df, args, "join")

    return run(body)


if __name__ == "__main__":
    sys.exit(main())
