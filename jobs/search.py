"""Vector search over a partitioned namespace: the k rows nearest a query vector.

Run under spark-submit, e.g.::

    PYSPARK_PYTHON=.venv/bin/python .venv/bin/spark-submit --master local[2] \\
        --properties-file spark-conf/spark-defaults.conf jobs/search.py \\
        --root warehouse/items --column embedding --vector-file q.npy --k 10 \\
        --filter "category = 'books'" --columns item_id title

``--vector-file`` is a ``.npy`` file holding one vector (shape ``(d,)`` or ``(1, d)``).
Prints one line per result row, nearest first (``_distance`` last), or writes them with
``--output PATH --output-format parquet|csv``. ``--exact`` searches by brute force;
``--nprobes``/``--refine-factor``/``--metric`` tune an indexed search. Bad input prints
one ``error:`` line and exits with status 2.

An object-store root (``s3://``, ``gs://``, ``az://``) takes Lance's storage options as
``--storage-option KEY=VALUE`` (repeatable, e.g. ``--storage-option aws_region=eu-west-1``).
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from jobs._cli import add_storage_option_argument, finish, run, storage_options
from partitioning.errors import InvalidInput


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="search", description="Vector search in a Lance partitioned namespace.")
    parser.add_argument("--root", required=True, help="namespace root (path or URI)")
    parser.add_argument("--column", help="vector column (default: the namespace's only one)")
    parser.add_argument("--vector-file", required=True, help=".npy file with the query vector")
    parser.add_argument("--k", type=int, default=10, help="rows to return (default 10)")
    parser.add_argument("--filter", help="Spark SQL filter applied before the top-k")
    parser.add_argument("--columns", nargs="+", help="columns to return (default: all)")
    parser.add_argument("--metric", choices=["l2", "cosine", "dot"], help="default: the index's metric, else l2")
    parser.add_argument("--nprobes", type=int)
    parser.add_argument("--refine-factor", type=int)
    parser.add_argument("--exact", action="store_true", help="brute-force search (no index)")
    parser.add_argument("--version", type=int, help="search as of this __manifest version")
    parser.add_argument("--output", help="write the result here instead of printing it")
    parser.add_argument("--output-format", choices=["parquet", "csv"], default="parquet")
    add_storage_option_argument(parser)
    return parser.parse_args(argv)


def load_vector(path: str) -> np.ndarray:
    """The query vector in a ``.npy`` file (one line if it cannot be read)."""
    try:
        vector = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise InvalidInput(f"--vector-file {path!r}: cannot read a .npy array ({exc})") from exc
    if vector.ndim == 2 and vector.shape[0] == 1:
        vector = vector[0]
    if vector.ndim != 1:
        raise InvalidInput(f"--vector-file {path!r} holds an array of shape {vector.shape}; expected one vector")
    return vector


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)

    def body() -> None:
        options = storage_options(args)
        vector = load_vector(args.vector_file)
        from pipelines.search.queries import search_partitioned
        from pipelines.session import build_session

        spark = build_session("lance_partitioned: search")
        df = search_partitioned(
            spark,
            args.root,
            vector,
            k=args.k,
            column=args.column,
            filter=args.filter,
            metric=args.metric,
            nprobes=args.nprobes,
            refine_factor=args.refine_factor,
            exact=args.exact,
            columns=args.columns,
            manifest_version=args.version,
            storage_options=options,
        )
        if args.output:
            writer = df.write.mode("overwrite")
            if args.output_format == "csv":
                writer = writer.option("header", "true")
            getattr(writer, args.output_format)(args.output)
            print(f"search: wrote {args.output_format} to {args.output}")
            return
        rows = df.collect()
        print("\t".join(df.columns))
        for row in rows:
            print("\t".join(str(v) for v in row))
        print(f"search: {len(rows)} rows")

    return run(body)


if __name__ == "__main__":
    sys.exit(finish(main()))
