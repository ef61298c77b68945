"""Which partition tables a predicate on identity partition columns selects, whole.

A table of a spec whose identity fields include every column a predicate names holds
only rows with those values, so the predicate is true for all of its rows or for none:
it can be evaluated once on the table's partition values. That answers ``COUNT(*)`` from
metadata, and deletes or overwrites whole partitions without reading a row. Evaluation
follows Spark's semantics (:func:`partitioning.sql.rowfilter.arrow_predicate`).
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from partitioning.errors import InvalidInput
from partitioning.namespace import PartitionedNamespace
from partitioning.sql.filters import Filter, TrueFilter, columns_of
from partitioning.sql.rowfilter import arrow_predicate
from partitioning.state.scan import ScanTask

__all__ = ["identity_columns", "identity_everywhere", "matching_tables"]


def identity_columns(ns: PartitionedNamespace, spec_id: int) -> dict[str, str]:
    """Column name -> identity partition field id, for one spec version."""
    schema = ns.namespace_schema
    out = {}
    for f in ns.specs[spec_id].fields:
        if f.transform is None or str(f.transform) != "identity" or len(f.source_ids) != 1:
            continue
        source = schema.top_level_field_by_id(f.source_ids[0])
        if source is not None:
            out[source.name] = f.field_id
    return out


def identity_everywhere(ns: PartitionedNamespace) -> set[str]:
    """Columns that are identity partition columns of every spec version that has tables
    (of the current spec when none has)."""
    spec_ids = ns.spec_ids_with_tables() or {ns.current_spec.spec_id}
    common: set[str] | None = None
    for spec_id in spec_ids:
        names = set(identity_columns(ns, spec_id))
        common = names if common is None else common & names
    return common or set()


def matching_tables(ns: PartitionedNamespace, tasks: Sequence[ScanTask], exact: Filter) -> list[ScanTask]:
    """The tasks whose tables ``exact`` (bound, on identity partition columns only) selects."""
    if isinstance(exact, TrueFilter):
        return list(tasks)
    schema = ns.namespace_schema
    columns = sorted(columns_of(exact))
    arrow = pa.schema([schema.arrow.field(c) for c in columns])
    tables = ns.tables_by_id(t.object_id for t in tasks)
    out: list[ScanTask] = []
    for spec_id in sorted({t.spec_id for t in tasks}):
        group = [t for t in tasks if t.spec_id == spec_id]
        fields = identity_columns(ns, spec_id)
        missing = [c for c in columns if c not in fields]
        if missing:
            raise InvalidInput(
                f"column {missing[0]!r} is not an identity partition column of spec v{spec_id}; "
                "whole partitions cannot be selected by it"
            )
        values = pa.table({"__i": pa.array(range(len(group)), pa.int64())})
        for c in columns:
            column = pa.array([tables[t.object_id].values.get(fields[c]) for t in group], arrow.field(c).type)
            values = values.append_column(arrow.field(c), column)
        keep = values.filter(arrow_predicate(exact, arrow))
        out.extend(group[i] for i in keep.column("__i").to_pylist())
    return out
