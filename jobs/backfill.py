"""Backfill a vector column (an embedding) computed by a Python function, optionally indexed.

Run under spark-submit, e.g.::

    PYSPARK_PYTHON=.venv/bin/python .venv/bin/spark-submit --master local[2] \\
        --properties-file spark-conf/spark-defaults.conf --py-files embed.py jobs/backfill.py \\
        --root warehouse/docs --column text --fn embed:embed_texts --output embedding --dim 384 \\
        --index IVF_PQ --metric cosine --param num_partitions=64

``--fn package.module:function`` names the function. It gets one batch of rows at a
time (at most ``--batch-rows``): a pandas Series of the ``--column`` values, or a pandas
DataFrame of the columns when ``--column`` is given several times. It returns one vector
per row, in order: a 2-D numpy array of shape ``(rows, dim)``, a list of lists or of 1-D
arrays, a pandas Series of lists. The vectors are written as ``--output``, a fixed-size
list of ``--dim`` values of ``--dtype`` (float32, float16 or float64), beside the existing
data (:func:`pipelines.backfill.api.backfill_columns`: one new data file per fragment,
one ``__manifest`` commit); a new column is added, an existing one replaced in the
backfilled partitions. ``--filter`` (Spark SQL on identity partition columns) selects
whole partitions, ``--write-id`` makes a retry commit nothing twice.

The function's module must be importable on the executors: ship it with ``--py-files``
(a ``.py`` file, or a ``.zip`` of a package). A module not installed in the environment
is also pickled by value with the function (``cloudpickle.register_pickle_by_value``), so
the function travels with each task and a module only on the driver's path works under a
local master. The globals the function uses travel with it too: load a model lazily, once
per Python worker, inside the function rather than at import time.

``--index IVF_PQ`` (or IVF_FLAT, IVF_SQ, IVF_HNSW_SQ, IVF_HNSW_PQ) then builds a vector
index on ``--output`` in the same partitions (``--metric``, ``--param KEY=INT`` as in
``jobs/index.py``). Prints the backfill's summary and the index's. On an object store
pass ``--storage-option KEY=VALUE`` (repeatable). Bad input (a ``--fn`` that cannot be
imported or is not callable, vectors of the wrong dimension, an unknown column) prints
one ``error:`` line and exits with status 2, with nothing committed; an index refusal
comes after the backfill is committed (its summary is printed first).
"""

from __future__ import annotations

import argparse
import importlib
import sys
import sysconfig
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pyarrow as pa

from jobs._cli import add_storage_option_argument, finish, run, storage_options
from jobs.index import _params
from partitioning.errors import InvalidInput, first_line

DTYPES = {"float16": pa.float16(), "float32": pa.float32(), "float64": pa.float64()}


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="backfill", description="Backfill a vector column of a Lance partitioned namespace."
    )
    parser.add_argument("--root", required=True, help="namespace root (path or URI)")
    parser.add_argument("--column", action="append", required=True, help="input column the function reads (repeatable)")
    parser.add_argument("--fn", required=True, metavar="MODULE:FUNCTION", help="the function computing the vectors")
    parser.add_argument("--output", required=True, help="the vector column to write")
    parser.add_argument("--dim", type=int, required=True, help="the vectors' dimension")
    parser.add_argument("--dtype", choices=list(DTYPES), default="float32", help="the vectors' value type")
    parser.add_argument("--filter", help="SQL filter selecting the partitions to backfill")
    parser.add_argument("--write-id", help="idempotency key: a retry with the same id commits nothing twice")
    parser.add_argument("--batch-rows", type=int, default=8192, help="rows per function call (default 8192)")
    parser.add_argument("--index", metavar="INDEX_TYPE", help="then build a vector index: IVF_PQ, IVF_FLAT, ...")
    parser.add_argument("--metric", default="l2", help="l2, cosine or dot (with --index)")
    parser.add_argument("--param", action="append", default=[], metavar="KEY=INT", help="index parameter (repeatable)")
    add_storage_option_argument(parser)
    return parser.parse_args(argv)


def _installed(module: ModuleType) -> bool:
    """Whether ``module`` comes from the environment (stdlib or site-packages): imported by name everywhere."""
    file = getattr(module, "__file__", None)
    if file is None:
        return True  # built in, or a namespace package
    path = Path(file).resolve()
    places = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    return any(path.is_relative_to(Path(p).resolve()) for p in places)


def load_function(spec: str) -> Callable[[Any], Any]:
    """The function ``package.module:function`` names; its module is pickled by value unless installed."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name.strip() or not attr.strip():
        raise InvalidInput(f"--fn {spec!r} is not MODULE:FUNCTION (e.g. my_embeddings:embed)")
    try:
        module = importlib.import_module(module_name.strip())
    except ImportError as exc:
        raise InvalidInput(
            f"--fn {spec!r}: cannot import {module_name.strip()!r} ({first_line(exc)}); ship it with --py-files"
        ) from exc
    fn: Any = module
    for part in attr.strip().split("."):
        if not hasattr(fn, part):
            raise InvalidInput(f"--fn {spec!r}: module {module.__name__!r} has no attribute {attr.strip()!r}")
        fn = getattr(fn, part)
    if not callable(fn):
        raise InvalidInput(f"--fn {spec!r} is a {type(fn).__name__}, not a function")
    if not _installed(module):
        from pyspark import cloudpickle

        cloudpickle.register_pickle_by_value(module)
    return fn


def _matrix(out: Any, rows: int, spec: str, column: str, dim: int, dtype: np.dtype) -> np.ndarray:
    """``out`` as a ``(rows, dim)`` array; anything else is one line naming the column and dimension."""
    need = f"column {column!r} takes {rows} vectors of {dim} {dtype} values"
    try:
        matrix = np.asarray(out, dtype=dtype)
    except (TypeError, ValueError):
        try:  # a Series or list of 1-D arrays
            matrix = np.stack([np.asarray(v, dtype=dtype) for v in out]) if rows else np.empty((0, dim), dtype)
        except (TypeError, ValueError) as exc:
            raise InvalidInput(f"--fn {spec} returned {type(out).__name__}: {first_line(exc)}; {need}") from exc
    if rows == 0 and matrix.size == 0:
        return matrix.reshape(0, dim)
    if matrix.ndim != 2 or matrix.shape != (rows, dim):
        raise InvalidInput(f"--fn {spec} returned an array of shape {matrix.shape}; {need}")
    return matrix


def vector_fn(
    fn: Callable[[Any], Any], spec: str, columns: Sequence[str], output: str, dim: int, dtype: str
) -> Callable[[Any], Any]:
    """A backfill function: ``fn`` over a batch's column (a Series) or columns (a DataFrame),
    its vectors checked and returned as a pandas DataFrame of the one ``output`` column."""
    np_dtype = np.dtype(dtype)

    def vectors(batch: Any) -> Any:
        import pandas as pd

        values = batch[columns[0]] if len(columns) == 1 else batch[list(columns)]
        matrix = _matrix(fn(values), len(batch), spec, output, dim, np_dtype)
        return pd.DataFrame({output: list(matrix)})

    vectors.__name__ = vectors.__qualname__ = spec
    return vectors


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)

    def body() -> None:
        options = storage_options(args)
        if args.dim < 1:
            raise InvalidInput(f"--dim must be a positive integer, got {args.dim}")
        params = _params(args.param)
        if args.index is None and (params or args.metric != "l2"):
            raise InvalidInput("--param and --metric go with --index")
        if args.index is not None:
            from partitioning.search.indexes import METRICS, VECTOR_INDEX_TYPES

            if args.index.upper() not in VECTOR_INDEX_TYPES:
                raise InvalidInput(
                    f"unknown vector index type {args.index!r}; allowed: {', '.join(VECTOR_INDEX_TYPES)}"
                )
            if args.metric.lower() not in METRICS:
                raise InvalidInput(f"unknown metric {args.metric!r}; allowed: {', '.join(METRICS)}")
        columns = list(dict.fromkeys(args.column))
        fn = vector_fn(load_function(args.fn), args.fn, columns, args.output, args.dim, args.dtype)
        from pipelines.backfill.api import backfill_columns
        from pipelines.session import build_session

        spark = build_session("lance_partitioned: backfill")
        result = backfill_columns(
            spark,
            args.root,
            fn,
            read_columns=columns,
            output_schema=[pa.field(args.output, pa.list_(DTYPES[args.dtype], args.dim))],
            filter=args.filter,
            write_id=args.write_id,
            batch_rows=args.batch_rows,
            fn_input="pandas",
            storage_options=options,
        )
        print(result.summary())
        if args.index is None:
            return
        from pipelines.search.indexes import create_vector_index

        report = create_vector_index(
            args.root,
            args.output,
            index_type=args.index,
            metric=args.metric,
            filter=args.filter,
            storage_options=options,
            spark=spark,
            **params,
        )
        print(report.summary())

    return run(body)


if __name__ == "__main__":
    sys.exit(finish(main()))
