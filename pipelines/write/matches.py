"""The target rows a merge can match: a semi-join with the source's keys inside the read tasks.

A merge that keeps the target rows no source row matches (``when_not_matched_by_source=
"ignore"``) needs only the target rows whose keys the source has. :func:`source_keys`
collects the source's non-NULL key tuples to the driver, and :func:`matched_target` reads
the target in Spark tasks that keep only the rows whose key tuple is among them, so
Spark's join gets those rows instead of every row of every partition it reads (the rows
cross from Python to the JVM, which costs more than reading them).

Sound by construction: a target row dropped here has a key tuple no source row has, so
Spark's join would not match it either, as long as the source gives the same rows on
both passes (its plan is deterministic: no ``rand()``, no non-deterministic UDF; on Spark
Connect, where the plan cannot be asked, every row is read). It is used only where Arrow's equality is
Spark's: the key has the same Spark type on both sides, and that type is an integer,
date, timestamp, boolean, binary or string of the binary collation (not floats, whose
``-0.0`` and NaN Spark normalizes, nor decimals or nested types). Otherwise, or when the
keys exceed :data:`MAX_KEY_ROWS` or :data:`MAX_KEY_BYTES`, the merge reads every row.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from partitioning.errors import InvalidInput
from partitioning.namespace import PartitionedNamespace
from partitioning.plan.table_rows import ROW_ADDRESS, ROW_TABLE, TableSlice
from partitioning.spec.schema import NamespaceSchema
from partitioning.spec.values import canonical_float
from partitioning.spec.vectors import spark_facing_schema
from partitioning.sql.filters import TrueFilter
from pipelines.columns.schema import spark_schema
from pipelines.columns.transforms import with_partition_columns
from pipelines.read_options import read_schema
from pipelines.session import is_connect
from pipelines.session_calls import default_parallelism
from pipelines.source.reader import LanceInputPartition, LancePartitionedReader
from pipelines.source.slices import read_slice
from pipelines.spark_errors import spark_errors
from pipelines.write.targets import task_rows

__all__ = [
    "MAX_KEY_BYTES",
    "MAX_KEY_ROWS",
    "as_int64",
    "in_sorted",
    "integer_like",
    "key_narrowing",
    "key_probe",
    "keys_comparable",
    "matched_target",
    "refuse_shared_matches",
    "schema_keys_comparable",
    "source_keys",
]

MAX_KEY_ROWS = 4_000_000
MAX_KEY_BYTES = 64 << 20
CHUNK_ROWS = 1_000_000
CHUNK_BYTES = 64 << 20
_EQUAL = (
    T.ByteType,
    T.ShortType,
    T.IntegerType,
    T.LongType,
    T.DateType,
    T.TimestampType,
    T.TimestampNTZType,
    T.BooleanType,
    T.BinaryType,
)


def _comparable(source: T.DataType, target: T.DataType) -> bool:
    if source != target:
        return False
    if isinstance(target, T.StringType):
        return getattr(target, "collation", "UTF8_BINARY") == "UTF8_BINARY"
    return isinstance(target, _EQUAL)


def source_keys(source: DataFrame, schema: NamespaceSchema, keys: Sequence[str]) -> pa.Table | None:
    """The source's key tuples without a NULL, as Arrow; None when they cannot prefilter
    the target (a key type outside the list above, or more than the limits)."""
    if not _deterministic(source) or not keys_comparable(source, schema, keys):
        return None
    columns = source.select(*[F.col(f"`{k}`") for k in keys])
    present = columns.where(" AND ".join(f"`{k}` IS NOT NULL" for k in keys))
    with spark_errors("merge: collect the source's keys"):
        table = present.limit(MAX_KEY_ROWS + 1).toArrow()
    if table.num_rows > MAX_KEY_ROWS or table.nbytes > MAX_KEY_BYTES:
        return None
    return table


def keys_comparable(source: DataFrame, schema: NamespaceSchema, keys: Sequence[str]) -> bool:
    """Whether each key has the same Spark type in ``source`` as in the namespace, one that
    compares in Arrow as in Spark (the list above)."""
    return schema_keys_comparable(source.schema, schema, keys)


def schema_keys_comparable(source: T.StructType, schema: NamespaceSchema, keys: Sequence[str]) -> bool:
    """:func:`keys_comparable` of rows of Spark schema ``source``."""
    target = spark_schema(schema)
    by_name = {f.name: f.dataType for f in source.fields}
    return all(k in by_name and k in target.names and _comparable(by_name[k], target[k].dataType) for k in keys)


def _deterministic(source: DataFrame) -> bool:
    """Whether Spark's plan of ``source`` gives the same rows on every pass: the keys are
    collected in one pass and joined in another. Unknown on Spark Connect (False)."""
    if is_connect(source.sparkSession):
        return False
    return bool(source._jdf.queryExecution().analyzed().deterministic())  # classic-only (guarded)


@dataclass(frozen=True)
class _Probe:
    """What a task needs to read its slices and keep the matching rows; pickled into it."""

    schema: NamespaceSchema
    output: tuple[str, ...]
    keys: tuple[str, ...]
    wanted: pa.Table  # the source's keys, typed as the rows read (empty when ``ordered`` is set)
    storage_options: Any
    ordered: np.ndarray | None  # one integer-like key: its values as sorted int64
    chunk: tuple[int, int]  # rows, bytes held before a probe
    bits: tuple[int, int, np.ndarray] | None = None  # those values as a bitmap: (lowest, highest, bits)

    def matching(
        self, slices: Sequence[TableSlice], opened: Mapping[str, Any] | None = None
    ) -> Iterator[pa.RecordBatch]:
        """The rows of ``slices`` whose key tuple is wanted. Arrow builds a hash table of the
        wanted keys per call, so batches are held up to ``chunk`` (:data:`CHUNK_ROWS` rows or
        :data:`CHUNK_BYTES` bytes) and probed together; sorted int64s are probed per batch as
        it is read, before it is shaped (only the rows kept get their table's id).
        ``opened``: datasets opened already at the slices' versions, by object id."""
        held: list[pa.RecordBatch] = []
        rows = size = 0
        for piece in slices:
            for batch in read_slice(
                piece,
                self.schema,
                self.output,
                TrueFilter(),
                row_address=True,
                storage_options=self.storage_options,
                dataset=(opened or {}).get(piece.object_id),
                keep=self.keep if self.ordered is not None else None,  # each batch probed as it is read
            ):
                if self.ordered is not None:
                    yield batch
                    continue
                held.append(batch)
                rows, size = rows + batch.num_rows, size + batch.nbytes
                if rows >= self.chunk[0] or size >= self.chunk[1]:
                    yield from self.keep(pa.Table.from_batches(held)).to_batches()
                    held, rows, size = [], 0, 0
        if held:
            yield from self.keep(pa.Table.from_batches(held)).to_batches()

    def keep(self, table: pa.Table) -> pa.Table:
        """``table``'s rows whose key tuple is wanted: a binary search of the sorted int64s for
        one integer-like key (sorted once, on the driver), Arrow otherwise."""
        if len(self.keys) > 1:
            return table.join(self.wanted, list(self.keys), join_type="left semi")
        column = table.column(self.keys[0])
        if self.ordered is None:
            return table.filter(pc.is_in(column, value_set=self.wanted.column(0)))
        return table.filter(pa.array(in_sorted(column, self.ordered, self.bits)))


def in_sorted(
    column: pa.ChunkedArray, ordered: np.ndarray, bits: tuple[int, int, np.ndarray] | None = None
) -> np.ndarray:
    """Per value of the integer-like ``column``: whether it is in ``ordered`` (sorted int64s,
    not empty; ``bits``: their :func:`_bitmap`, tested instead of a binary search). A NULL is in
    nothing."""
    values = as_int64(column.fill_null(0) if column.null_count else column)
    if bits is not None:
        low, high, bitmap = bits
        mask = (values >= low) & (values <= high)
        at = np.where(mask, values, low) - low  # outside the range: 0, and no overflow
        mask &= ((bitmap[at >> 3] >> (at & 7).astype(np.uint8)) & 1).astype(bool)
    else:
        mask = ordered[np.minimum(np.searchsorted(ordered, values), len(ordered) - 1)] == values
    if column.null_count:
        mask &= pc.is_valid(column).to_numpy(zero_copy_only=False)
    return mask


def integer_like(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_date32(t) or pa.types.is_timestamp(t)


def as_int64(column: pa.ChunkedArray) -> np.ndarray:
    if pa.types.is_date32(column.type):
        column = column.cast(pa.int32())
    return column.cast(pa.int64()).to_numpy()


def matched_target(
    session: SparkSession,
    ns: PartitionedNamespace,
    read: Mapping[str, int],
    keys: Sequence[str],
    wanted: pa.Table,
    columns: Sequence[str] | None,
) -> DataFrame:
    """The rows of the tables ``read`` (at ``ns``'s manifest version) whose key tuple is in
    ``wanted``, with ``_lance_table`` and ``_lance_rowaddr``; ``columns`` (None: all)."""
    output = tuple(columns if columns is not None else ns.schema.names)
    schema = read_schema(ns.namespace_schema, list(output), row_address=True)
    if wanted.num_rows == 0:
        return session.createDataFrame([], schema)  # no source key: no target row can match
    slots = default_parallelism(session) or 2
    options = {"with_row_address": "true", "object_ids": json.dumps(sorted(read)), "max_partitions": str(2 * slots)}
    parts = [p for p in LancePartitionedReader(ns, schema, options).partitions() if isinstance(p, LanceInputPartition)]
    return task_rows(session, schema, [p.slices for p in parts], key_probe(ns, keys, wanted, output).matching)


def key_probe(ns: PartitionedNamespace, keys: Sequence[str], wanted: pa.Table, output: Sequence[str]) -> _Probe:
    """What keeps the rows (``output``'s columns, with ``_lance_table`` and
    ``_lance_rowaddr``) whose key tuple is in ``wanted`` (the source's, :func:`source_keys`)."""
    # the keys typed as the rows are read (Spark-facing Arrow types), once, here
    read_types = spark_facing_schema(pa.schema([ns.namespace_schema.arrow.field(k) for k in keys]))
    wanted = wanted.select(list(keys)).cast(read_types)
    ordered = bits = None
    if len(keys) == 1 and integer_like(read_types.field(0).type):
        ordered = np.sort(as_int64(wanted.column(0)))  # a probe needs only the sorted values
        wanted = wanted.slice(0, 0)
        bits = _bitmap(ordered)
    chunk = (CHUNK_ROWS, CHUNK_BYTES)
    return _Probe(ns.namespace_schema, tuple(output), tuple(keys), wanted, ns.storage_options, ordered, chunk, bits)


def _bitmap(ordered: np.ndarray) -> tuple[int, int, np.ndarray] | None:
    """Sorted int64s as one bit per value from the lowest to the highest, when that takes at
    most the bytes of the values themselves (a probe then tests a bit instead of a binary search)."""
    if ordered.size == 0:
        return None
    low, high = int(ordered[0]), int(ordered[-1])
    if high - low >= 64 * ordered.size:
        return None
    present = np.zeros(high - low + 1, dtype=bool)
    present[ordered - low] = True
    return low, high, np.packbits(present, bitorder="little")


def key_narrowing(
    source: DataFrame, ns: PartitionedNamespace, on: Sequence[str], max_values: int
) -> dict[int, tuple[tuple[str, ...], frozenset[tuple[Any, ...]]]]:
    """Per spec: the partition fields the keys determine and the source's values of them
    (a spec whose values number more than ``max_values`` is left out: its partitions are all read)."""
    schema = ns.namespace_schema
    used = ns.spec_ids_with_tables()
    by_spec = {}
    for spec_id in sorted(used):
        fields = []
        for f in ns.specs[spec_id].fields:
            sources = f.source_fields(schema)
            if sources and all(s is not None and s.name in on for s in sources):
                fields.append(f)
        if fields:
            by_spec[spec_id] = fields
    if not by_spec:
        return {}
    types = spark_schema(schema)
    keys = source.select(*[F.col(f"`{k}`").cast(types[k].dataType).alias(k) for k in on])
    out = {}
    for spec_id, fields in by_spec.items():
        columns = [f"__p{f.field_id}" for f in fields]
        values = with_partition_columns(keys, fields, schema, prefix="__p").select(*columns).distinct()
        rows = values.limit(max_values + 1).toArrow()
        if rows.num_rows > max_values:
            continue
        tuples = zip(*[rows.column(c).to_pylist() for c in columns], strict=True) if columns else iter(())
        wanted = frozenset(tuple(canonical_float(v) for v in t) for t in tuples)
        out[spec_id] = (tuple(f.field_id for f in fields), wanted)
    return out


def refuse_shared_matches(gone: pa.Table, keys: Sequence[str], action: str, key_prefix: str) -> None:
    """Delta's rule: two source rows may not update or delete the same target row. ``gone``:
    the join's rows that go, their ``action`` (``U``, ``D``, ...) and source keys (``key_prefix``
    and the key's index)."""
    matched = gone.filter(pc.is_in(gone.column(action), pa.array(["U", "D"])))
    if matched.num_rows == 0:
        return
    counts = matched.group_by([ROW_TABLE, ROW_ADDRESS]).aggregate([([], "count_all")])
    twice = counts.filter(pc.greater(counts.column("count_all"), 1))
    if twice.num_rows == 0:
        return
    table, address = twice.column(ROW_TABLE)[0].as_py(), twice.column(ROW_ADDRESS)[0].as_py()
    row = matched.filter(
        pc.and_(pc.equal(matched.column(ROW_TABLE), table), pc.equal(matched.column(ROW_ADDRESS), address))
    ).slice(0, 1)
    shown = ", ".join(f"{k}={row.column(f'{key_prefix}{i}')[0].as_py()!r}" for i, k in enumerate(keys))
    raise InvalidInput(
        f"merge: {twice.num_rows:,} target row(s) are matched by more than one source row (e.g. {shown}); "
        "deduplicate the source on the keys; nothing was changed"
    )
