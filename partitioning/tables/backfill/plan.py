"""Backfilling columns, Spark-free: new or recomputed columns written beside each fragment's files.

A backfill computes some columns from others, one fragment at a time, and writes them
as ONE new Lance data file per fragment (:meth:`lance.LanceFragment.merge_columns`):
no existing data file is rewritten. The driver validates the columns and plans the
fragments (:func:`backfill_plan`, :func:`plan_tables`); tasks read a fragment's rows
(:func:`read_fragment`), compute, check each batch (:func:`conform`) and write its file
(:func:`write_fragment`), committing nothing; :mod:`partitioning.tables.backfill.commit`
commits each dataset once and ``__manifest`` once.

Columns the namespace lacks are added (new field ids, nullable). A column it has is
replaced: the output is cast to its type and written under a temporary name, and the
commit points the new file at the column's Lance field id and tombstones the old
files' copy, so the column keeps its name and namespace id. Partition source columns
cannot be replaced: their values decide which partition a row belongs to.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import lance
import pyarrow as pa
import pyarrow.compute as pc

from partitioning.errors import (
    CorruptNamespace,
    InvalidInput,
    PartitioningError,
    SchemaError,
    first_line,
    translate_lance_errors,
)
from partitioning.spec.partition_spec import PartitionSpec
from partitioning.spec.schema import NamespaceSchema
from partitioning.state.partition_tables import PartitionTable
from partitioning.stats.bounds import TableStats, collect_stats
from partitioning.storage.alignment import align_schema, is_aligned, latest_keeping_indexes
from partitioning.storage.datasets import live_rows

__all__ = [
    "TEMP_PREFIX",
    "BackfillColumns",
    "FragmentWork",
    "TablePlan",
    "WrittenFragment",
    "backfill_plan",
    "conform",
    "fragment_works",
    "open_work",
    "plan_tables",
    "read_fragment",
    "write_fragment",
]

TEMP_PREFIX = "__lance_partitioned_backfill__"
_PARALLEL_OPENS = 8


@dataclass(frozen=True)
class BackfillColumns:
    """What a backfill reads and writes: ``names`` in output order, of which ``replaced``
    exist in ``before`` (the namespace schema it started from) and the others are added
    in ``after``."""

    before: NamespaceSchema
    after: NamespaceSchema
    names: tuple[str, ...]
    replaced: tuple[str, ...]
    read: tuple[str, ...]

    @property
    def added(self) -> tuple[str, ...]:
        return tuple(n for n in self.names if n not in self.replaced)

    @property
    def output(self) -> pa.Schema:
        """The output columns with the namespace's types (what a computed batch is cast to)."""
        return pa.schema([pa.field(n, self.after.plain.field(n).type) for n in self.names])

    @property
    def file_schema(self) -> pa.Schema:
        """The new data files' columns: new ones tagged with their namespace id, replaced
        ones under :data:`TEMP_PREFIX` names."""
        fields = []
        for n in self.names:
            f = self.after.dataset_arrow.field(n)
            fields.append(pa.field(TEMP_PREFIX + n, f.type) if n in self.replaced else f)
        return pa.schema(fields)


def backfill_plan(
    schema: NamespaceSchema,
    specs: Mapping[int, PartitionSpec],
    output: Sequence[pa.Field],
    read: Sequence[str],
) -> BackfillColumns:
    """Validate a backfill's output columns and read columns against the namespace."""
    if not output:
        raise SchemaError("backfill needs at least one output column")
    names = [f.name for f in output]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise SchemaError(f"output column {dupes[0]!r} is named twice")
    existing = {n.lower(): n for n in schema.arrow.names}
    replaced, new = [], []
    for f in output:
        if f.name.startswith(TEMP_PREFIX):
            raise SchemaError(f"output column {f.name!r}: names starting with {TEMP_PREFIX!r} are reserved")
        if f.name in schema.arrow.names:
            _check_replaceable(schema, specs, f)
            replaced.append(f.name)
        elif f.name.lower() in existing:
            raise SchemaError(
                f"output column {f.name!r} differs only in case from column {existing[f.name.lower()]!r}; "
                "name it exactly to replace it"
            )
        else:
            new.append(pa.field(f.name, f.type, nullable=True))
    unknown = [c for c in read if c not in schema.arrow.names]
    if unknown:
        raise SchemaError(
            f"read column {unknown[0]!r} is not in the namespace; columns are: {', '.join(schema.arrow.names)}"
        )
    after = schema.with_columns(new) if new else schema
    return BackfillColumns(schema, after, tuple(names), tuple(replaced), tuple(dict.fromkeys(read)))


def _check_replaceable(schema: NamespaceSchema, specs: Mapping[int, PartitionSpec], f: pa.Field) -> None:
    fid = schema.id_of(f.name)
    for spec in specs.values():
        for pf in spec.fields:
            if fid in pf.source_ids:
                raise SchemaError(
                    f"column {f.name!r} is a source of partition field {pf} of spec v{spec.spec_id}: its values "
                    "decide which partition a row is in, so a backfill cannot replace it"
                )
    have = schema.plain.field(f.name).type
    try:
        pa.array([], f.type).cast(have)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise SchemaError(f"output column {f.name!r}: {f.type} cannot be cast to the column's type {have}") from exc


@dataclass(frozen=True)
class TablePlan:
    """One partition table to backfill: as recorded in ``__manifest``, the dataset version
    the tasks read (the recorded one, or a version aligning its columns to the namespace
    schema), its fragments' ids and live rows, and each fragment's data files there."""

    table: PartitionTable
    version: int
    fragments: tuple[tuple[int, int], ...]
    files: Mapping[int, tuple[str, ...]]

    @property
    def label(self) -> str:
        values = ", ".join(f"{k}={v}" for k, v in self.table.values.items())
        return f"partition table {self.table.object_id} ({values})"


def plan_tables(
    tables: Sequence[PartitionTable], schema: NamespaceSchema, storage_options: Mapping[str, str] | None
) -> list[TablePlan]:
    """A :class:`TablePlan` per table; a dataset whose columns lag the namespace schema is
    first aligned (Lance's metadata-only schema changes, in versions nobody sees until
    the backfill's ``__manifest`` commit points at a later one)."""

    def plan(table: PartitionTable) -> TablePlan:
        if table.read_version is None or table.read_branch is not None or table.read_tag is not None:
            raise InvalidInput(
                f"partition table {table.object_id} is read from a branch or tag; it cannot be backfilled"
            )
        with translate_lance_errors(f"open partition table {table.object_id}"):
            ds = lance.dataset(table.uri, version=table.read_version, storage_options=_opts(storage_options))
            if not is_aligned(ds, schema):
                head = latest_keeping_indexes(table.uri, table.read_version, storage_options)
                ds = align_schema(table.uri, head, schema, storage_options)
            pieces = [(f, f.metadata) for f in ds.get_fragments()]
            fragments = tuple((m.id, live_rows(f, m)) for f, m in pieces)
        return TablePlan(table, int(ds.version), fragments, {m.id: tuple(d.path for d in m.files) for _, m in pieces})

    with ThreadPoolExecutor(max_workers=max(1, min(_PARALLEL_OPENS, len(tables)))) as pool:
        return list(pool.map(plan, tables))


def _opts(storage_options: Mapping[str, str] | None) -> dict[str, str] | None:
    return dict(storage_options) if storage_options else None


@dataclass(frozen=True)
class FragmentWork:
    """One fragment a task backfills."""

    object_id: str
    uri: str
    version: int
    fragment_id: int
    rows: int
    label: str

    @property
    def where(self) -> str:
        return f"{self.label}, fragment {self.fragment_id}"


def fragment_works(plans: Iterable[TablePlan]) -> list[FragmentWork]:
    return [
        FragmentWork(p.table.object_id, p.table.uri, p.version, fid, rows, p.label)
        for p in plans
        for fid, rows in p.fragments
    ]


def open_work(work: FragmentWork, storage_options: Mapping[str, str] | None) -> lance.LanceDataset:
    """The dataset version a work reads (tasks open it once for all its fragments there)."""
    with translate_lance_errors(f"open {work.label}"):
        return lance.dataset(work.uri, version=work.version, storage_options=_opts(storage_options))


def read_fragment(
    work: FragmentWork,
    columns: BackfillColumns,
    batch_rows: int,
    storage_options: Mapping[str, str] | None,
    ds: lance.LanceDataset | None = None,
) -> Iterator[pa.RecordBatch]:
    """The fragment's live rows in row order, ``columns.read`` only, ``batch_rows`` at a time
    (a backfill with no read columns gets batches without columns); ``ds``: the work's
    dataset, if open."""
    with translate_lance_errors(f"read {work.where}"):
        ds = ds if ds is not None else open_work(work, storage_options)
        fragment = _fragment(ds, work)
        wanted = list(columns.read) or [columns.before.arrow.names[0]]
        for batch in fragment.to_batches(columns=wanted, batch_size=batch_rows):
            yield batch if columns.read else batch.select([])


def _fragment(ds: lance.LanceDataset, work: FragmentWork) -> lance.LanceFragment:
    fragment = ds.get_fragment(work.fragment_id)
    if fragment is None:
        raise CorruptNamespace(f"{work.label} version {work.version} has no fragment {work.fragment_id}")
    return fragment


def conform(out: Any, columns: BackfillColumns, rows: int, where: str) -> pa.RecordBatch:
    """A computed batch (Arrow batch or table) checked against the output schema (names,
    ``rows`` rows, types cast safely) and shaped as :attr:`BackfillColumns.file_schema`."""
    if isinstance(out, pa.Table):
        out = out.combine_chunks().to_batches(max_chunksize=max(out.num_rows, 1))
        out = out[0] if out else pa.RecordBatch.from_pylist([], schema=out.schema)
    if not isinstance(out, pa.RecordBatch):
        raise InvalidInput(f"backfill of {where}: the function returned {type(out).__name__}, not a batch of rows")
    got = list(out.schema.names)
    if sorted(got) != sorted(columns.names):
        raise InvalidInput(
            f"backfill of {where}: the function returned columns [{', '.join(got)}]; "
            f"output_schema has [{', '.join(columns.names)}]"
        )
    if out.num_rows != rows:
        raise InvalidInput(f"backfill of {where}: the function returned {out.num_rows} rows for {rows} input rows")
    arrays = []
    for name, f in zip(columns.names, columns.file_schema, strict=True):
        col = out.column(name)
        if col.type != f.type:
            try:
                col = pc.cast(col, f.type, safe=True)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
                raise InvalidInput(
                    f"backfill of {where}: column {name!r} is {col.type}, which cannot be cast to {f.type}: "
                    f"{first_line(exc)}"
                ) from exc
        arrays.append(col)
    return pa.RecordBatch.from_arrays(arrays, schema=columns.file_schema)


@dataclass(frozen=True)
class WrittenFragment:
    """A fragment's new data file, uncommitted: the fragment as Lance returned it (JSON),
    the dataset's Lance schema after it (pickled) and the column statistics of the values
    it holds (:class:`~partitioning.stats.bounds.TableStats` JSON, keyed by the output
    columns' field ids)."""

    object_id: str
    fragment_id: int
    fragment: Mapping[str, Any]
    lance_schema: bytes
    rows: int
    bytes_written: int
    stats: str | None = None


def write_fragment(
    work: FragmentWork,
    columns: BackfillColumns,
    batches: Iterable[pa.RecordBatch],
    storage_options: Mapping[str, str] | None,
    ds: lance.LanceDataset | None = None,
) -> WrittenFragment:
    """Write the fragment's new data file from ``batches`` (shaped by :func:`conform`, the
    fragment's live rows in order); commits nothing. An error raised while producing the
    batches is raised as it was."""
    counted = 0
    failure: list[BaseException] = []
    seen = TableStats(0)

    def stream() -> Iterator[pa.RecordBatch]:
        nonlocal counted, seen
        try:
            for batch in batches:
                counted += batch.num_rows
                if counted > work.rows:
                    raise InvalidInput(f"backfill of {work.where}: more rows computed than its {work.rows} rows")
                named = pa.Table.from_batches([batch]).rename_columns(list(columns.names))
                seen = seen.merged(collect_stats(named, columns.after.arrow))
                yield batch
        except BaseException as exc:
            failure.append(exc)
            raise

    ds = ds if ds is not None else open_work(work, storage_options)
    fragment = _fragment(ds, work)
    reader = pa.RecordBatchReader.from_batches(columns.file_schema, stream())
    try:
        meta, schema = fragment.merge_columns(reader)
    except Exception as exc:
        if failure:
            raise failure[0] from None
        raise PartitioningError(f"backfill of {work.where} could not write its file: {first_line(exc)}") from exc
    if failure:
        raise failure[0]
    if counted != work.rows:
        raise InvalidInput(f"backfill of {work.where}: {counted} rows computed for its {work.rows} rows")
    before = {f.path for f in fragment.metadata.files}
    new = [f for f in meta.files if f.path not in before]
    return WrittenFragment(
        work.object_id,
        work.fragment_id,
        meta.to_json(),
        pickle.dumps(schema),
        counted,
        sum(int(f.file_size_bytes or 0) for f in new),
        seen.to_json(None),
    )
