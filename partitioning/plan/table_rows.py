"""Reading one partition table as namespace-shaped Arrow batches, Spark-free.

A :class:`TableSlice` is one partition table (or a group of its fragments) at the version
``__manifest`` records for it; :func:`read_table` streams its rows, reconciled with the namespace
schema by field id (:func:`partitioning.storage.alignment.reconcile`) and filtered with Spark's
semantics. Spark's tasks read through :func:`pipelines.source.slices.read_slice`, other tools
through :func:`partitioning.service.arrow.dataset`. :func:`addresses_of` groups such rows'
addresses by table (the rows a rewrite deletes)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

import lance
import numpy as np
import pyarrow as pa

from partitioning.errors import CorruptNamespace, translate_lance_errors
from partitioning.spec.schema import NamespaceSchema
from partitioning.spec.vectors import spark_facing_schema
from partitioning.sql.filters import Filter, TrueFilter, columns_of
from partitioning.sql.rowfilter import arrow_predicate, lance_filter
from partitioning.state.scan import ScanTask
from partitioning.storage.alignment import dataset_columns, reconcile
from partitioning.storage.datasets import runs

__all__ = [
    "ROW_ADDRESS",
    "ROW_TABLE",
    "TableSlice",
    "addresses_by_table",
    "addresses_of",
    "read_table",
]


# The columns a read ``with_row_address`` ends with: each row's table and Lance row address.
ROW_TABLE = "_lance_table"

ROW_ADDRESS = "_lance_rowaddr"

# Rows of a table's scan shaped together (Lance's batches of small fragments are gathered).
GROUP_ROWS = 65_536


@dataclass(frozen=True)
class TableSlice:
    """One partition table (or a group of its fragments) at a fixed version. Picklable."""

    object_id: str
    uri: str
    read_version: int | None
    read_branch: str | None
    read_tag: str | None
    fragment_ids: tuple[int, ...] | None = None

    @classmethod
    def of(cls, task: ScanTask, fragment_ids: tuple[int, ...] | None = None) -> TableSlice:
        return cls(task.object_id, task.uri, task.read_version, task.read_branch, task.read_tag, fragment_ids)


def read_table(
    dataset: lance.LanceDataset,
    partition: TableSlice,
    schema: NamespaceSchema,
    output: Sequence[str],
    scan_filter: Filter,
    *,
    exact: Filter | None = None,
    row_address: bool = False,
    keep: Callable[[pa.Table], pa.Table] | None = None,
) -> Iterator[pa.RecordBatch]:
    """Stream one partition's rows as namespace-shaped batches, typed as Spark reads them
    (a vector column as a plain list, :func:`partitioning.spec.vectors.spark_facing_schema`).

    With ``row_address`` each batch ends with the table's object id and each row's
    Lance row address (what :func:`pipelines.maintenance.operations.delete_rows` deletes by).

    ``scan_filter`` (bound) goes into the Lance scan as far as Lance evaluates it like
    Spark, so the scan returns a superset of the matching rows; ``exact`` (bound, fully
    understood) is then applied to the rows in Arrow with Spark's semantics. ``keep``: the
    rows of each batch to yield (given the batch with namespace names and types), before
    it is shaped: a probe that keeps few rows shapes only those.
    """
    mapping = dataset_columns(dataset.schema, schema)
    exact = exact if exact is not None and not isinstance(exact, TrueFilter) else None
    wanted = set(output) | (columns_of(exact) if exact is not None else set())
    needed = [c for c in schema.arrow.names if c in wanted]
    where = lance_filter(scan_filter, schema.arrow, mapping)
    fragments: list[lance.LanceFragment] | None = None
    if partition.fragment_ids is not None:
        found = {i: dataset.get_fragment(i) for i in partition.fragment_ids}
        missing = sorted(i for i, f in found.items() if f is None)
        if missing:
            raise CorruptNamespace(f"partition table {partition.object_id} has no fragments {missing}")
        fragments = [f for f in found.values() if f is not None]
    with translate_lance_errors(f"scan partition table {partition.object_id}", missing=CorruptNamespace):
        scanner = dataset.scanner(
            columns=[mapping[c] for c in needed if c in mapping],
            filter=where,
            fragments=fragments,
            batch_size=65_536,
            with_row_address=row_address,
        )
        batches = scanner.to_batches()
    out_schema = spark_facing_schema(pa.schema([schema.arrow.field(c) for c in output]))
    predicate = arrow_predicate(exact, schema.arrow) if exact is not None else None
    for raw in _grouped(_translated(batches, partition.object_id)):
        table = reconcile(raw, mapping, needed, schema, partition.object_id)
        if row_address:
            table = table.append_column(ROW_ADDRESS, raw.column("_rowaddr").cast(pa.int64()))
        if predicate is not None:
            table = table.filter(predicate)
        if keep is not None:
            table = keep(table)
        shaped = table.select(list(output)).cast(out_schema)
        if row_address:
            table_ids = pa.nulls(shaped.num_rows, pa.string()).fill_null(partition.object_id)  # in C++, not a list
            shaped = shaped.append_column(pa.field(ROW_TABLE, pa.string(), nullable=False), table_ids)
            shaped = shaped.append_column(pa.field(ROW_ADDRESS, pa.int64(), nullable=False), table.column(ROW_ADDRESS))
        yield from shaped.to_batches()


def _grouped(batches: Iterator[pa.RecordBatch], rows: int = GROUP_ROWS) -> Iterator[pa.Table]:
    """``batches`` as tables of at least ``rows`` rows (the last may hold fewer): Lance yields
    at least one batch per fragment, and a table of many small fragments is shaped a few
    times instead of once per fragment."""
    held: list[pa.RecordBatch] = []
    count = 0
    for batch in batches:
        held.append(batch)
        count += batch.num_rows
        if count >= rows:
            yield pa.Table.from_batches(held)
            held, count = [], 0
    if held:
        yield pa.Table.from_batches(held)


def _translated(batches: Iterator[pa.RecordBatch], object_id: str) -> Iterator[pa.RecordBatch]:
    """Lance errors raised while batches stream (a missing data file) as one line."""
    while True:
        with translate_lance_errors(f"scan partition table {object_id}", missing=CorruptNamespace):
            batch = next(batches, None)
        if batch is None:
            return
        yield batch


def addresses_of(table: pa.Table, tables: str, addresses: str) -> dict[str, list[int]]:
    """:func:`addresses_by_table` of the columns ``tables`` and ``addresses`` of ``table``, in Arrow and numpy."""
    if table.num_rows == 0:
        return {}
    encoded = table.column(tables).combine_chunks().dictionary_encode()
    codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    values = table.column(addresses).combine_chunks().cast(pa.int64()).to_numpy(zero_copy_only=False)
    order = np.lexsort((values, codes))
    codes, values = codes[order], values[order]
    keep = np.ones(len(values), dtype=bool)
    keep[1:] = (codes[1:] != codes[:-1]) | (values[1:] != values[:-1])
    codes, values = codes[keep], values[keep]
    names = encoded.dictionary.to_pylist()
    return {names[codes[a]]: values[a:b].tolist() for a, b in runs(codes)}


def addresses_by_table(tables: Iterable[str], addresses: Iterable[int]) -> dict[str, list[int]]:
    """Group (table, address) pairs into object_id -> sorted unique addresses."""
    out: dict[str, set[int]] = {}
    for table, address in zip(tables, addresses, strict=True):
        out.setdefault(table, set()).add(int(address))
    return {t: sorted(a) for t, a in out.items()}
