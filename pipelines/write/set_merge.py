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

The other clauses without ``set``, a ``matched_condition`` or a by-source delete
(:func:`keyed_merge`: ``when_matched`` ``"update"``, ``"delete"`` or ``"ignore"`` with
``when_not_matched`` ``"insert"`` or ``"ignore"``, e.g. "insert the rows whose key is new"
or "delete the rows the source names") are computed from the same probe: the matched target
rows are deleted (unless ignored), and the source rows with a matched key (updated) or
without one (inserted) are appended, as the clauses say.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame

from partitioning.errors import first_line
from partitioning.namespace import PartitionedNamespace
from partitioning.plan.table_rows import ROW_ADDRESS, ROW_TABLE
from partitioning.sql.assign import NotExact, assignments
from partitioning.sql.filters import Filter
from partitioning.sql.tokens import Dialect
from pipelines.columns.schema import spark_schema
from pipelines.write.matches import as_int64, in_sorted, integer_like
from pipelines.write.upsert import HeldSource

__all__ = ["NOT_COLLECTED", "DriverMerge", "keyed_merge", "keyed_modes", "set_merge_values", "set_upsert"]

_SOURCE_INDEX, _TARGET_INDEX = "__lance_set_source", "__lance_set_target"
NOT_COLLECTED = "the source's rows were not collected here (too large, a key Arrow compares otherwise, or Connect)"


@dataclass(frozen=True)
class DriverMerge:
    """A merge computed in the driver: the addresses of the target rows it deletes
    (``gone``), the rows it appends (None: none), how many rows it updates, the tables it
    opened (by object id; their commit reuses them) and the way it went (the INFO line)."""

    gone: pa.Table
    incoming: pa.Table | None
    updated: int
    opened: Mapping[str, lance.LanceDataset]
    path: str


def keyed_modes(
    modes: tuple[str, str, str],
    set: Mapping[str, str] | None,
    matched_condition: str | None,
    source_columns: Sequence[str],
    names: Sequence[str],
) -> bool:
    """Whether :func:`keyed_merge` computes a merge with these clauses (other than the plain
    upsert, which :meth:`pipelines.write.upsert.HeldSource.upsert` does)."""
    return (
        set is None
        and matched_condition is None
        and modes[2] == "ignore"
        and modes[:2] not in {("update", "insert"), ("ignore", "ignore")}
        and sorted(source_columns) == sorted(names)
    )


def keyed_merge(
    held: HeldSource,
    ns: PartitionedNamespace,
    read: Mapping[str, int],
    modes: tuple[str, str, str],
    within: Filter | None,
) -> DriverMerge | None:
    """A merge with the clauses ``modes`` (:func:`keyed_modes`) computed from the probe of the
    source's keys; None when the driver cannot (the source too large to collect, a key two
    target rows hold, ...: :attr:`HeldSource.why` says which). ``within``: the target filter,
    bound and exactly understood (a source row whose key only rows outside it hold is unmatched)."""
    when_matched, when_not_matched, _ = modes
    if held.rows(ns) is None:
        held.why = NOT_COLLECTED
        return None
    change = held.upsert(ns, read, within=within, refuse=when_matched != "ignore")
    if change is None or change.rows is None:
        return None
    rows, matched = change.rows, change.matched
    hit = _has_match(rows, matched, held.keys)
    appended = []
    if when_matched == "update":
        appended.append(rows.filter(hit))
    if when_not_matched == "insert":
        appended.append(rows.filter(pc.invert(hit)))
    gone = matched.select([ROW_TABLE, ROW_ADDRESS])
    if when_matched == "ignore":
        gone = gone.slice(0, 0)
    return DriverMerge(
        gone,
        pa.concat_tables(appended) if appended else None,
        matched.num_rows if when_matched == "update" else 0,
        change.opened,
        f"the source's keys probed in the driver, no join (when_matched={when_matched!r}, "
        f"when_not_matched={when_not_matched!r}); rows written by the driver",
    )


def _has_match(rows: pa.Table, matched: pa.Table, keys: Sequence[str]) -> pa.Array:
    """Per row of ``rows``: whether a row of ``matched`` holds its key tuple (a NULL key never matches)."""
    if matched.num_rows == 0 or rows.num_rows == 0:
        return pa.array(np.zeros(rows.num_rows, dtype=bool))
    if len(keys) == 1 and integer_like(rows.schema.field(keys[0]).type):  # one sort, one binary search
        column = rows.column(keys[0])
        return pa.array(in_sorted(column, np.sort(as_int64(matched.column(keys[0]).cast(column.type)))))
    at = pa.array(range(rows.num_rows), pa.int64())
    source_keys = rows.select(list(keys)).cast(pa.schema([matched.schema.field(k) for k in keys]))
    # by index (Arrow's join carries no nested payload)
    found = source_keys.append_column(_SOURCE_INDEX, at).join(
        matched.select(list(keys)), list(keys), join_type="left semi"
    )
    return pc.is_in(at, value_set=found.column(_SOURCE_INDEX).combine_chunks())


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
) -> DriverMerge | None:
    """The addresses of the matched target rows, the rows that replace them followed by the
    inserted source rows, and how many were updated; None when the driver cannot do it."""
    if held.rows(ns) is None:
        held.why = NOT_COLLECTED
        return None  # Spark's join
    names = ns.schema.names
    change = held.upsert(ns, read, names)  # the source collected, its keys probed, duplicates refused
    if change is None or change.rows is None:
        return None
    matched, rows = change.matched, change.rows
    try:
        gone, incoming, updated = _computed(matched, rows, held.keys, names, values)
    except (NotExact, pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        held.why = f"a set value is not computed here exactly as Spark ({first_line(exc)})"
        return None
    return DriverMerge(gone, incoming, updated, change.opened, "set= merge computed in the driver, no join")


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
