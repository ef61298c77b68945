"""A merge that updates some columns (``set=``) and inserts the rest, computed in the driver.

``merge_partitioned(source, root, on=keys, set={"amount": "source.amount + target.amount"})``
with the other clauses at their defaults changes the target as "each matched target row
becomes itself with the ``set`` columns recomputed; each unmatched source row is inserted".
When the source is small enough to be collected (:class:`pipelines.write.upsert.HeldSource`)
and has exactly the namespace's columns and types, and every ``set`` expression is one the
driver computes exactly as Spark would (:func:`partitioning.sql.assign.assignments`, over
``source.`` and ``target.`` columns), the driver does it all: the matched target rows are
read by their keys (Lance reads the tables in threads, :func:`pipelines.write.upsert.matched_rows`),
paired with their source rows in Arrow, their new values computed, and they and the new rows
written as fragments, with no join in Spark. Anything else (a value that might overflow, a
type the grammar leaves out, two target rows holding one key) takes Spark's join.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame

from partitioning.errors import first_line
from partitioning.namespace import PartitionedNamespace
from partitioning.plan.table_rows import ROW_ADDRESS, ROW_TABLE
from partitioning.sql.assign import NotExact, assignments
from partitioning.sql.tokens import Dialect
from pipelines.columns.schema import spark_schema
from pipelines.write.upsert import HeldSource

__all__ = ["set_merge_values", "set_upsert"]

_SOURCE_INDEX, _TARGET_INDEX = "__lance_set_source", "__lance_set_target"


def set_merge_values(
    source: DataFrame,
    ns: PartitionedNamespace,
    set: Mapping[str, str] | None,
    dialect: Dialect,
    modes: tuple[str, str, str],
    matched_condition: str | None,
    target_filter: str | None,
) -> Callable[[pa.Table], dict[str, Any]] | None:
    """The ``set`` values as the driver computes them from a table of ``source.<c>`` and
    ``target.<c>`` columns, when this merge (its ``set``, its clauses ``modes``, its
    ``matched_condition`` and ``target_filter``) can be done in the driver; else None."""
    if not set or modes != ("update", "insert", "ignore") or matched_condition or target_filter:
        return None
    wanted = spark_schema(ns.namespace_schema)
    have = {f.name: f.dataType for f in source.schema.fields}
    if sorted(have) != sorted(wanted.names) or any(have[f.name] != f.dataType for f in wanted.fields):
        return None  # Spark would read source.<c> as the source's own type: conform first, there
    arrow = ns.namespace_schema.arrow
    inputs = pa.schema(
        [f.with_name(f"{side}.{f.name}") for side in ("source", "target") for f in arrow],
    )
    return assignments(set, arrow, dialect, inputs=inputs)


def set_upsert(
    held: HeldSource,
    ns: PartitionedNamespace,
    read: Mapping[str, int],
    values: Callable[[pa.Table], dict[str, Any]],
) -> tuple[pa.Table, pa.Table, int] | None:
    """The addresses of the matched target rows, the rows that replace them followed by the
    inserted source rows, and how many were updated; None when the driver cannot do it."""
    if held.rows(ns) is None:
        held.why = "the source is too large to collect"
        return None  # Spark's join
    names = ns.schema.names
    change = held.upsert(ns, read, names)  # the source collected, its keys probed, duplicates refused
    if change is None or change.rows is None:
        return None
    matched, rows = change.matched, change.rows
    try:
        return _computed(matched, rows, held.keys, names, values)
    except (NotExact, pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        held.why = f"a set value is not computed here exactly as Spark ({first_line(exc)})"
        return None


def _computed(
    matched: pa.Table,
    rows: pa.Table,
    keys: Sequence[str],
    names: Sequence[str],
    values: Callable[[pa.Table], dict[str, Any]],
) -> tuple[pa.Table, pa.Table, int]:
    schema = rows.schema
    source_keys = rows.select(list(keys)).cast(pa.schema([matched.schema.field(k) for k in keys]))
    source_keys = source_keys.append_column(_SOURCE_INDEX, pa.array(range(rows.num_rows), pa.int64()))
    target_keys = matched.select(list(keys)).append_column(_TARGET_INDEX, pa.array(range(matched.num_rows), pa.int64()))
    # pairs by index (Arrow's join carries no nested payload): each matched row has one source row
    pairs = target_keys.join(source_keys, list(keys), join_type="inner").select([_TARGET_INDEX, _SOURCE_INDEX])
    target_at, source_at = pairs.column(_TARGET_INDEX), pairs.column(_SOURCE_INDEX)
    joined = pa.table(
        {
            **{f"source.{c}": rows.column(c).take(source_at) for c in names},
            **{f"target.{c}": matched.column(c).take(target_at).cast(schema.field(c).type) for c in names},
        }
    )
    new = values(joined)
    updated = pa.table(
        {c: new[c].cast(schema.field(c).type) if c in new else joined.column(f"target.{c}") for c in names},
        schema=schema,
    )
    inserted = rows.filter(pc.invert(pc.is_in(pa.array(range(rows.num_rows), pa.int64()), source_at)))
    gone = matched.select([ROW_TABLE, ROW_ADDRESS]).take(target_at)
    return gone, pa.concat_tables([updated, inserted]), updated.num_rows
