"""Build or list the indexes of a partitioned namespace (issue 13).

Run under spark-submit, e.g.::

    PYSPARK_PYTHON=.venv/bin/python .venv/bin/spark-submit --master local[2] \\
        --properties-file spark-conf/spark-defaults.conf jobs/index.py \\
        --root warehouse/events --column embedding --index-type IVF_PQ --metric l2 \\
        --param num_partitions=64 --param num_sub_vectors=8

A vector index (IVF_PQ, IVF_FLAT, IVF_SQ, IVF_HNSW_SQ, IVF_HNSW_PQ) trains ONE model on a
sample across the partitions and builds every partition's index with it; a scalar index
(``--index-type BTREE``, ``BITMAP`` or ``INVERTED``) needs no model. ``--optimize`` folds
unindexed rows and new partitions into every recorded index; ``--list`` prints, per
partition, each index's name, type, column, indexed and unindexed rows (no Spark).
On an object store pass ``--storage-option KEY=VALUE`` (repeatable). Bad input prints
one ``error:`` line and exits with status 2.
"""

from __future__ import annotations

import argparse
import sys

from jobs._cli import add_storage_option_argument, finish, run, storage_options
from partitioning.errors import InvalidInput

SCALAR = ("BTREE", "BITMAP", "INVERTED")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="index", description="Build or list indexes of a Lance partitioned namespace."
    )
    parser.add_argument("--root", required=True, help="namespace root (path or URI)")
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--column", help="the column to index")
    what.add_argument("--list", action="store_true", help="list the indexes per partition")
    what.add_argument("--optimize", action="store_true", help="index unindexed rows and new partitions")
    parser.add_argument(
        "--index-type",
        default="IVF_PQ",
        help="IVF_PQ, IVF_FLAT, IVF_SQ, IVF_HNSW_SQ, IVF_HNSW_PQ, BTREE, BITMAP, INVERTED",
    )
    parser.add_argument("--metric", default="l2", help="l2, cosine or dot (vector indexes)")
    parser.add_argument("--name", help="index name (default <column>_idx)")
    parser.add_argument("--filter", help="SQL filter selecting the partitions to index")
    parser.add_argument("--param", action="append", default=[], metavar="KEY=INT", help="index parameter (repeatable)")
    add_storage_option_argument(parser)
    return parser.parse_args(argv)


def _params(pairs: list[str]) -> dict[str, int]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not value.strip().lstrip("-").isdigit():
            raise InvalidInput(f"--param {pair!r} is not KEY=INTEGER")
        out[key.strip()] = int(value)
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)

    def body() -> None:
        options = storage_options(args)
        if args.list:
            from partitioning.namespace import PartitionedNamespace

            listed = PartitionedNamespace.load(args.root, options).indexes()
            for row in listed.to_pylist():
                print(
                    f"{row['object_id']}\t{row['index_name']}\t{row['index_type']}\t{row['column']}\t"
                    f"indexed={row['indexed_rows']}\tunindexed={row['unindexed_rows']}"
                )
            print(f"{listed.num_rows} indexes")
            return
        from pipelines.search.indexes import create_scalar_index, create_vector_index, optimize_indexes
        from pipelines.session import build_session

        params = _params(args.param)
        spark = build_session("lance_partitioned: index")
        if args.optimize:
            report = optimize_indexes(args.root, filter=args.filter, storage_options=options, spark=spark)
        elif args.index_type.upper() in SCALAR:
            if params:
                raise InvalidInput(f"a {args.index_type.upper()} index takes no --param (got {', '.join(params)})")
            report = create_scalar_index(
                args.root,
                args.column,
                args.index_type,
                args.filter,
                name=args.name,
                storage_options=options,
                spark=spark,
            )
        else:
            report = create_vector_index(
                args.root,
                args.column,
                index_type=args.index_type,
                metric=args.metric,
                filter=args.filter,
                name=args.name,
                storage_options=options,
                spark=spark,
                **params,
            )
        print(report.summary())

    return run(body)


if __name__ == "__main__":
    sys.exit(finish(main()))
