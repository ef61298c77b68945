"""Describe a partitioned namespace: its layout, recent history and partition sizes, and a skew plot.

Run under spark-submit, e.g.::

    PYSPARK_PYTHON=.venv/bin/python .venv/bin/spark-submit --master local[2] \\
        --properties-file spark-conf/spark-defaults.conf jobs/describe.py \\
        --root warehouse/events --plot skew.png

or without Spark, as ``.venv/bin/python jobs/describe.py --root warehouse/events --plot skew.png``:
the job starts no Spark session (everything comes from Lance metadata, read in this
process). ``--filter`` selects partitions (DataFusion SQL; the session's Spark SQL when
the job runs inside a process that already has a session), ``--version`` describes an
older ``__manifest`` version.

It prints the spec versions and partition tables (the first ``--max-tables``), the last
``--history`` ``__manifest`` commits, and percentiles of rows, bytes and fragments per
partition with the largest partitions named. ``--plot`` writes a PNG: rows per partition,
largest first, with outliers (more than Q3 + 1.5 IQR and at least twice the median)
labelled; and fragments per partition, with partitions of many small fragments
(compaction candidates) marked. Bad input prints one ``error:`` line and exits with status 2.

An object-store root (``s3://``, ``gs://``, ``az://``) takes Lance's storage options as
``--storage-option KEY=VALUE`` (repeatable, e.g. ``--storage-option aws_region=eu-west-1``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from jobs._cli import add_storage_option_argument, finish, run, running_session, storage_options
from partitioning import InvalidInput, PartitionedNamespace
from partitioning.plan.inspect import partitions_table
from partitioning.sql.filters import Dialect
from partitioning.state.describe import format_partition_value

PERCENTILES = (0, 25, 50, 75, 90, 99, 100)
LABELLED_OUTLIERS = 8
BAR_LIMIT = 400  # above this many partitions the plot draws areas instead of bars


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="describe", description="Describe a Lance partitioned namespace.")
    parser.add_argument("--root", required=True, help="namespace root (path or URI)")
    parser.add_argument("--filter", help="SQL filter selecting the partitions to describe")
    parser.add_argument("--version", type=int, help="describe this __manifest version (time travel)")
    parser.add_argument("--history", type=int, default=10, help="__manifest commits to show (default 10)")
    parser.add_argument("--max-tables", type=int, default=20, help="partition tables to list (default 20)")
    parser.add_argument(
        "--small-fragment-rows",
        type=int,
        default=100_000,
        help="a partition of 2+ fragments averaging fewer rows is a compaction candidate (default 100000)",
    )
    parser.add_argument("--plot", help="write a PNG of rows and fragments per partition here")
    add_storage_option_argument(parser)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)

    def body() -> None:
        for name in ("history", "max_tables", "small_fragment_rows"):
            if getattr(args, name) < 0:
                raise InvalidInput(f"--{name.replace('_', '-')} must be at least 0, got {getattr(args, name)}")
        ns = PartitionedNamespace.load(args.root, storage_options(args), manifest_version=args.version)
        table = partitions_table(ns, filter=args.filter, dialect=_dialect())
        print(_layout(ns, args.max_tables))
        print()
        print("\n".join(history_lines(ns, args.history)))
        print()
        print("\n".join(size_lines(table, args.small_fragment_rows)))
        if args.plot:
            plot_skew(table, args.plot, small_fragment_rows=args.small_fragment_rows, title=ns.root)
            print(f"describe: wrote {args.plot}")

    return run(body)


def _dialect() -> Dialect | None:
    spark = running_session()
    if spark is None:
        return None
    from pipelines.read_options import session_dialect

    return session_dialect(spark)


def _layout(ns: PartitionedNamespace, max_tables: int) -> str:
    lines = ns.layout().splitlines()
    tables = [i for i, line in enumerate(lines) if line.startswith("    ") and "->" in line]
    if len(tables) <= max_tables:
        return "\n".join(lines)
    cut = set(tables[max_tables:])
    kept = [line for i, line in enumerate(lines) if i not in cut]
    kept.append(f"    ... and {len(cut)} more partition tables")
    return "\n".join(kept)


# -- history --------------------------------------------------------------------------------------
def history_lines(ns: PartitionedNamespace, limit: int) -> list[str]:
    """The last ``limit`` ``__manifest`` commits, newest first."""
    if limit == 0:
        return ["history: (not shown)"]
    rows = sorted(ns.history(limit=limit).to_pylist(), key=lambda r: r["version"], reverse=True)
    out = [f"history (last {len(rows)} __manifest commits, newest first):"]
    for r in rows:
        details = " ".join([*_pairs(r.get("parameters")), *_pairs(r.get("metrics"))])
        out.append(f"  v{r['version']:<6} {_time(r['timestamp'])}  {r['operation']:<17} {details}".rstrip())
    return out


def _pairs(entries: Any) -> list[str]:
    """``k=v`` of a map column's value (a list of pairs)."""
    return [f"{k}={_number(v) if isinstance(v, float) else v}" for k, v in entries or ()]


def _time(t: Any) -> str:
    return t.isoformat(sep=" ", timespec="seconds") if hasattr(t, "isoformat") else str(t)


# -- sizes ----------------------------------------------------------------------------------------
def _number(v: float) -> str:
    return f"{v:,.0f}" if float(v).is_integer() else f"{v:,.1f}"


def percentiles(values: Sequence[float] | np.ndarray) -> dict[int, float]:
    """Linear-interpolated percentiles (numpy's default) of ``values``."""
    arr = np.asarray(values, dtype=np.float64)
    return {p: float(np.percentile(arr, p)) for p in PERCENTILES}


def partition_labels(table: pa.Table) -> list[str]:
    """``field=value, ...`` of each row's partition (fields of its own spec only), ``v<N>:`` first
    when the table mixes spec versions."""
    specs = table.column("spec_id").to_pylist()
    mixed = len(set(specs)) > 1
    out = []
    for spec, values in zip(specs, table.column("partition").to_pylist(), strict=True):
        shown = ", ".join(f"{k}={_show(v)}" for k, v in values.items() if v is not None)
        out.append(f"v{spec}: {shown or '(nulls)'}" if mixed else shown or "(nulls)")
    return out


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def _show(value: Any) -> str:
    text = format_partition_value(value)
    return "NULL" if text is None else text


def outliers(rows: np.ndarray) -> np.ndarray:
    """Positions of partitions with more than Q3 + 1.5 IQR rows and at least twice the median."""
    if rows.size == 0:
        return np.zeros(0, dtype=np.int64)
    q1, median, q3 = np.percentile(rows, [25, 50, 75])
    limit = max(q3 + 1.5 * (q3 - q1), 2 * median)
    return np.flatnonzero(rows > limit) if limit > 0 else np.zeros(0, dtype=np.int64)


def small_file_partitions(table: pa.Table, small_fragment_rows: int) -> np.ndarray:
    rows = table.column("row_count").to_numpy()
    frags = table.column("fragment_count").to_numpy()
    return np.flatnonzero((frags >= 2) & (rows < small_fragment_rows * np.maximum(frags, 1)))


def size_lines(table: pa.Table, small_fragment_rows: int) -> list[str]:
    n = table.num_rows
    if n == 0:
        return ["partitions: 0 (nothing to describe)"]
    rows = table.column("row_count").to_numpy()
    size = table.column("size_bytes").to_numpy()
    frags = table.column("fragment_count").to_numpy()
    deleted = int(table.column("deleted_rows").to_numpy().sum())
    head = "  ".join(f"{'p' + str(p) if p not in (0, 100) else ('min' if p == 0 else 'max'):>12}" for p in PERCENTILES)
    out = [
        f"partitions: {n:,}  rows: {int(rows.sum()):,}  deleted rows: {deleted:,}  "
        f"bytes: {int(size.sum()):,}  fragments: {int(frags.sum()):,}",
        f"{'per partition':<22}{head}",
    ]
    for name, values in (("rows", rows), ("bytes", size), ("fragments", frags)):
        pct = percentiles(values)
        out.append(f"{name:<22}" + "  ".join(f"{_number(pct[p]):>12}" for p in PERCENTILES))
    median = float(np.median(rows))
    if median > 0:
        out.append(f"skew (largest / median rows): {float(rows.max()) / median:,.1f}x")
    labels = partition_labels(table)
    big = outliers(rows)
    if big.size:
        top = big[np.argsort(-rows[big], kind="stable")][:LABELLED_OUTLIERS]
        out.append(
            f"outliers: {_count(big.size, 'partition')}: "
            + "; ".join(f"{labels[i]} ({int(rows[i]):,} rows)" for i in top)
        )
    small = small_file_partitions(table, small_fragment_rows)
    if small.size:
        worst = small[np.argsort(-frags[small], kind="stable")][:LABELLED_OUTLIERS]
        out.append(
            f"small files: {_count(small.size, 'partition')} of 2+ fragments averaging < {small_fragment_rows:,} rows "
            "(compact them): " + "; ".join(f"{labels[i]} ({int(frags[i])} fragments)" for i in worst)
        )
    return out


# -- plot -----------------------------------------------------------------------------------------
def plot_skew(table: pa.Table, path: str, *, small_fragment_rows: int = 100_000, title: str = "") -> None:
    """A PNG of rows per partition (largest first, outliers in red and labelled) over
    fragments per partition (compaction candidates in orange)."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.ticker import MaxNLocator
    except ImportError as exc:
        raise InvalidInput("--plot needs matplotlib; install it (pip install matplotlib)") from exc
    rows = table.column("row_count").to_numpy().astype(np.float64)
    frags = table.column("fragment_count").to_numpy().astype(np.float64)
    order = np.argsort(-rows, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    big = outliers(rows)
    small = small_file_partitions(table, small_fragment_rows)
    labels = partition_labels(table)
    x = np.arange(rows.size)
    fig = Figure(figsize=(12, 7), dpi=100)
    FigureCanvasAgg(fig)
    top, bottom = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [3, 2]})
    fig.suptitle(f"{title}: {rows.size:,} partitions, {int(rows.sum()):,} rows")
    if rows.size <= BAR_LIMIT:
        top.bar(x, rows[order], color="tab:blue", width=0.9)
        bottom.bar(x, frags[order], color="tab:gray", width=0.9)
        top.bar(rank[big], rows[big], color="tab:red", width=0.9)
        bottom.bar(rank[small], frags[small], color="tab:orange", width=0.9)
    else:
        top.fill_between(x, rows[order], step="mid", color="tab:blue", alpha=0.7)
        bottom.fill_between(x, frags[order], step="mid", color="tab:gray", alpha=0.7)
        top.scatter(rank[big], rows[big], color="tab:red", s=14, zorder=3)
        bottom.scatter(rank[small], frags[small], color="tab:orange", s=14, zorder=3)
    if rows.size:
        median = float(np.median(rows))
        top.axhline(median, color="black", linestyle="--", linewidth=1, label=f"median {_number(median)} rows")
        top.legend(loc="upper right")
        if rows.max() > 50 * max(median, 1.0):
            top.set_yscale("symlog")
    for j in big[np.argsort(rank[big])][:LABELLED_OUTLIERS]:
        top.annotate(labels[j], (rank[j], rows[j]), textcoords="offset points", xytext=(4, 4), fontsize=8, rotation=30)
    top.set_ylabel("rows")
    top.set_title("rows per partition, largest first (red: outliers)", fontsize=10)
    bottom.set_ylabel("fragments")
    bottom.yaxis.set_major_locator(MaxNLocator(integer=True))
    bottom.set_xlabel("partitions, ordered by rows")
    bottom.set_title(
        f"fragments per partition (orange: 2+ fragments averaging < {small_fragment_rows:,} rows)", fontsize=10
    )
    try:
        fig.savefig(path, format="png")
    except OSError as exc:
        raise InvalidInput(f"cannot write the plot to {path!r}: {exc.strerror or exc}") from exc


if __name__ == "__main__":
    sys.exit(finish(main()))
