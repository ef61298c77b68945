"""How a backfill's values are computed in Spark tasks: a Python function, or Spark SQL.

A Python function runs in the task that reads and writes the fragment
(:class:`FunctionTask`, through :func:`pipelines.tasks.run_tasks`). Spark SQL expressions
need Spark to evaluate them, so :func:`sql_written` runs one stage of three narrow
steps: a ``mapInArrow`` reading the fragments' rows (tagged with their fragment), the
expressions as a Spark ``select``, and a ``mapInArrow`` writing each fragment's file from
its rows, which arrive in order in the same task (no shuffle).
"""

from __future__ import annotations

import inspect
import pickle
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pyarrow as pa
from pyspark.errors import PySparkException
from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StructField, StructType

from partitioning.errors import InvalidInput, PartitioningError, first_line
from partitioning.spec.schema import NamespaceSchema
from partitioning.spec.vectors import spark_facing_schema
from partitioning.tables.backfill.plan import (
    BackfillColumns,
    FragmentWork,
    conform,
    open_work,
    read_fragment,
    write_fragment,
)
from pipelines.columns.schema import spark_schema, spark_to_arrow_schema
from pipelines.spark_errors import hide_worker_traceback

__all__ = ["FunctionTask", "batch_kind", "group_works", "sql_output", "sql_read_columns", "sql_written"]

InputKind = Literal["pandas", "arrow"]
_WORK = "__lance_partitioned_work"


def batch_kind(fn: Callable[..., Any], given: str) -> InputKind:
    """``"arrow"`` when ``fn``'s first parameter is annotated ``pyarrow.RecordBatch`` (or
    ``given`` says so), else ``"pandas"``."""
    if given in ("pandas", "arrow"):
        return given  # type: ignore[return-value]
    if given != "auto":
        raise InvalidInput(f"fn_input {given!r}: allowed are auto, pandas, arrow")
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return "pandas"
    if not params:
        raise InvalidInput("the backfill function must take one argument: a batch of rows")
    note = params[0].annotation
    if note is pa.RecordBatch or (isinstance(note, str) and note.split(".")[-1] == "RecordBatch"):
        return "arrow"
    return "pandas"


def group_works(works: Sequence[FragmentWork], tasks: int) -> list[list[FragmentWork]]:
    """``works`` in about ``tasks`` groups of similar row counts, in order (a table's
    fragments stay together); a fragment larger than a group's share is a group of its own."""
    total = sum(w.rows for w in works)
    share = max(1, -(-total // max(1, tasks)))
    groups: list[list[FragmentWork]] = []
    rows = 0
    for w in works:
        if not groups or (rows + w.rows > share and groups[-1]):
            groups.append([])
            rows = 0
        groups[-1].append(w)
        rows += w.rows
    return [g for g in groups if g]


def opened(
    works: Sequence[FragmentWork], storage_options: Mapping[str, str] | None
) -> Iterator[tuple[FragmentWork, Any]]:
    """Each work with its dataset, opened once for the consecutive works of one table (a
    task's fragments come grouped by table)."""
    key, ds = None, None
    for w in works:
        if (w.uri, w.version) != key:
            key, ds = (w.uri, w.version), open_work(w, storage_options)
        yield w, ds


@dataclass(frozen=True)
class FunctionTask:
    """A Spark task's work: compute ``fn`` over each fragment's batches and write its file."""

    fn: Callable[[Any], Any]
    kind: InputKind
    columns: BackfillColumns
    batch_rows: int
    storage_options: Mapping[str, str] | None

    def __call__(self, works: Sequence[FragmentWork]) -> list[Any]:
        hide_worker_traceback()
        return [
            write_fragment(w, self.columns, self._computed(w, ds), self.storage_options, ds)
            for w, ds in opened(works, self.storage_options)
        ]

    def _computed(self, work: FragmentWork, ds: Any) -> Iterator[pa.RecordBatch]:
        for batch in read_fragment(work, self.columns, self.batch_rows, self.storage_options, ds):
            arg = batch if self.kind == "arrow" else _to_pandas(batch)
            try:
                out = self.fn(arg)
            except PartitioningError:
                raise
            except Exception as exc:
                name = getattr(self.fn, "__name__", type(self.fn).__name__)
                raise PartitioningError(
                    f"backfill function {name} failed on {work.where}: {type(exc).__name__}: {first_line(exc)}"
                ) from exc
            if self.kind == "pandas" and not isinstance(out, pa.RecordBatch | pa.Table):
                out = _from_pandas(out, work)
            yield conform(out, self.columns, batch.num_rows, work.where)


def _to_pandas(batch: pa.RecordBatch) -> Any:
    if batch.num_columns == 0:
        import pandas as pd

        return pd.DataFrame(index=pd.RangeIndex(batch.num_rows))
    return batch.to_pandas()


def _from_pandas(out: Any, work: FragmentWork) -> pa.Table:
    import pandas as pd

    if not isinstance(out, pd.DataFrame):
        raise InvalidInput(
            f"backfill of {work.where}: the function returned {type(out).__name__}, not a pandas DataFrame"
        )
    try:
        return pa.Table.from_pandas(out, preserve_index=False)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
        raise InvalidInput(f"backfill of {work.where}: the function's DataFrame has {first_line(exc)}") from exc


# -- Spark SQL expressions -------------------------------------------------------------------------
_STRING = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")
_NAME = re.compile(r"`((?:[^`]|``)+)`|([A-Za-z_][A-Za-z0-9_]*)")


def sql_read_columns(expressions: Mapping[str, str], schema: NamespaceSchema) -> list[str]:
    """The namespace columns the expressions may read: every column named in them outside
    string literals (a superset is only slower), all of them for a ``*``."""
    text = " ".join(_STRING.sub(" ", e) for e in expressions.values())
    if re.search(r"(?:^|[(,.])\s*\*\s*(?:[),]|$)", text):
        return list(schema.arrow.names)
    tokens = {(m.group(1) or m.group(2)).replace("``", "`").lower() for m in _NAME.finditer(text)}
    return [n for n in schema.arrow.names if n.lower() in tokens]


def _selected(expressions: Mapping[str, str]) -> list[Column]:
    out = []
    for name, text in expressions.items():
        if not isinstance(name, str) or not isinstance(text, str) or not text.strip():
            raise InvalidInput(f"backfill expression for {name!r} must be a non-empty Spark SQL string, got {text!r}")
        out.append(F.expr(text).alias(name))
    return out


def sql_output(session: SparkSession, expressions: Mapping[str, str], schema: NamespaceSchema) -> pa.Schema:
    """The Arrow types Spark gives the expressions over the namespace's columns; an
    expression Spark refuses is one line naming it."""
    empty = session.createDataFrame([], spark_schema(schema))
    fields = []
    for name, column in zip(expressions, _selected(expressions), strict=True):
        try:
            struct = empty.select(column).schema
        except PySparkException as exc:
            raise InvalidInput(f"backfill expression {name} = {expressions[name]!r}: {first_line(exc)}") from exc
        fields.append(spark_to_arrow_schema(struct).field(0).with_nullable(True))
    return pa.schema(fields)


def sql_written(
    session: SparkSession,
    groups: Sequence[Sequence[FragmentWork]],
    columns: BackfillColumns,
    expressions: Mapping[str, str],
    batch_rows: int,
    storage_options: Mapping[str, str] | None,
) -> list[Any]:
    """Each fragment's file from the expressions, evaluated by Spark (see the module's docstring)."""
    works = [w for g in groups for w in g]
    starts = np.cumsum([0, *[len(g) for g in groups]]).tolist()
    read_struct = spark_schema(pa.schema([columns.before.plain.field(c) for c in columns.read]))
    tagged = StructType([*read_struct.fields, StructField(_WORK, LongType(), False)])
    so = dict(storage_options) if storage_options else None

    def read(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        hide_worker_traceback()
        for batch in batches:
            for g in batch.column(0).to_pylist():
                group = works[starts[g] : starts[g + 1]]
                for i, (work, ds) in enumerate(opened(group, so), start=starts[g]):
                    for rows in read_fragment(work, columns, batch_rows, so, ds):
                        rows = rows.cast(spark_facing_schema(rows.schema))
                        yield rows.append_column(_WORK, pa.array(np.full(rows.num_rows, i, np.int64)))

    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        hide_worker_traceback()
        runs = _Runs(batches)
        while runs.peek() is not None:
            i = runs.peek()
            assert i is not None
            written = write_fragment(works[i], columns, runs.take(i, columns, works[i]), so)
            if runs.peek() == i:
                raise InvalidInput(f"backfill of {works[i].where}: more rows computed than its {works[i].rows} rows")
            yield pa.RecordBatch.from_arrays([pa.array([pickle.dumps(written)], pa.binary())], names=["result"])

    rows = session.range(0, len(groups), 1, max(1, len(groups))).mapInArrow(read, tagged)
    computed = rows.select(*_selected(expressions), F.col(_WORK))
    out = computed.mapInArrow(write, "result binary").toArrow()
    return [pickle.loads(r) for r in out.column("result").to_pylist()]


class _Runs:
    """Rows of a task's batches cut into runs of one fragment (the ``_WORK`` column)."""

    def __init__(self, batches: Iterator[pa.RecordBatch]) -> None:
        self._batches = batches
        self._head: pa.RecordBatch | None = None

    def _fill(self) -> None:
        while self._head is None or self._head.num_rows == 0:
            nxt = next(self._batches, None)
            if nxt is None:
                self._head = None
                return
            self._head = nxt

    def peek(self) -> int | None:
        self._fill()
        return None if self._head is None else int(self._head.column(_WORK)[0].as_py())

    def take(self, i: int, columns: BackfillColumns, work: FragmentWork) -> Iterator[pa.RecordBatch]:
        while self.peek() == i:
            assert self._head is not None
            keys = self._head.column(_WORK).to_numpy()
            end = int(np.argmax(keys != i)) if (keys != i).any() else len(keys)
            run, self._head = self._head.slice(0, end), self._head.slice(end)
            yield conform(run.drop_columns([_WORK]), columns, run.num_rows, work.where)
