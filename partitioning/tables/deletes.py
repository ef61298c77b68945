"""Partition drops and row deletes, Spark-free: each ends in ONE ``__manifest`` commit.

:func:`drop_partitions` removes whole partition tables whose identity partition values match
a filter; :func:`delete_rows` deletes matching rows with Lance deletes in the pruned tables.
Both take a matcher (Spark's where, from :mod:`pipelines.maintenance.operations`) or apply the
filter as DataFusion SQL in this process. Removed data stays for time travel until vacuum.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa

from partitioning.errors import ConcurrentModification, CorruptNamespace, InvalidInput, translate_lance_errors
from partitioning.namespace import PartitionedNamespace, PartitionTable, TableCommit
from partitioning.sql.engine import matching_rows
from partitioning.sql.filters import Dialect, Filter, TrueFilter, to_sql
from partitioning.sql.from_sql import parse_filter, referenced_columns
from partitioning.state.scan import ScanTask
from partitioning.stats.bounds import StatsChange, TableStats
from partitioning.storage.alignment import dataset_columns, reconcile
from partitioning.storage.guard import Guard, guarded
from partitioning.storage.history import Operation
from partitioning.tables.maintenance import COMMIT_ATTEMPTS, MaintenanceReport, as_namespace, open_recorded
from partitioning.tables.rebase import Touches, conflict
from partitioning.tables.rewrites import PARALLEL_COMMITS, delete_and_append

__all__ = ["RowMatcher", "delete_rows", "drop_partitions", "rows_matching", "whole_partitions"]


DML_COMMIT_ATTEMPTS = 24  # each lost race costs one commit when it rebases, not a new search

RowMatcher = Callable[[pa.Table, str], list[int]]
"""Indexes of the rows of an Arrow table a SQL filter selects (DataFusion, or Spark's where)."""


def _identity_columns(ns: PartitionedNamespace, spec_id: int) -> dict[str, str]:
    """Column name -> identity partition field id, for one spec version."""
    schema = ns.namespace_schema
    out = {}
    for f in ns.specs[spec_id].fields:
        if f.transform is not None and str(f.transform) == "identity" and len(f.source_ids) == 1:
            source = schema.top_level_field_by_id(f.source_ids[0])
            if source is not None:
                out[source.name] = f.field_id
    return out


def _datafusion(table: pa.Table, filter_sql: str) -> list[int]:
    return matching_rows(table, filter_sql)


def drop_partitions(
    root: str | PartitionedNamespace,
    filter: str,
    *,
    matcher: RowMatcher | None = None,
    dialect: Dialect | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> MaintenanceReport:
    """Remove whole partition tables whose identity partition values satisfy ``filter``.

    The filter may use only identity partition columns, so a table is dropped only when
    every row in it matches. It is applied to each table's partition values by
    ``matcher`` (Spark's where, from :mod:`pipelines.maintenance.operations`) or, without one, by
    DataFusion. ONE ``__manifest`` commit removes the tables and any namespace left
    empty; their files remain for time travel until :func:`vacuum`.
    """
    started = time.monotonic()
    ns = as_namespace(root, storage_options)
    d = dialect or Dialect.datafusion()
    parsed = parse_filter(filter, d, strict=False)
    if isinstance(parsed, TrueFilter):
        raise InvalidInput("drop_partitions needs a filter on identity partition columns, e.g. \"country = 'US'\"")
    match = matcher or _datafusion
    with guarded(ns.root, ns.storage_options) as guard:
        return _drop(ns, filter, d, match, guard, started)


def whole_partitions(
    ns: PartitionedNamespace, filter: str, d: Dialect, match: RowMatcher, what: str
) -> list[PartitionTable]:
    """The partition tables every row of which satisfies ``filter``: it may use only identity
    partition columns (``what`` names the operation in the error), and ``match`` applies it
    to each table's partition values."""
    planned = [t.object_id for t in ns.plan_scan(filter, dialect=d, column_stats=False)]
    tables = ns.tables_by_id(planned)
    candidates = [tables[oid] for oid in planned]
    chosen: list[PartitionTable] = []
    for spec_id in sorted({t.spec_id for t in candidates}):
        columns = _identity_columns(ns, spec_id)
        names = ns.schema.names
        outside = sorted(set(referenced_columns(filter, names, d.case_sensitive, d)) - set(columns))
        if outside:
            raise InvalidInput(
                f"{what}: column {outside[0]!r} is not an identity partition column of spec "
                f"v{spec_id} (those are: {', '.join(sorted(columns)) or 'none'}); use delete_rows for row filters"
            )
        group = [t for t in candidates if t.spec_id == spec_id]
        values = pa.table(
            {c: pa.array([t.values[fid] for t in group], ns.schema.field(c).type) for c, fid in columns.items()}
        )
        chosen.extend(group[i] for i in match(values, filter))
    return chosen


def _drop(
    ns: PartitionedNamespace, filter: str, d: Dialect, match: RowMatcher, guard: Guard, started: float
) -> MaintenanceReport:
    for _ in range(COMMIT_ATTEMPTS):
        ns.refresh(guard=guard)
        chosen = whole_partitions(ns, filter, d, match, "drop_partitions")
        tables = {t.object_id: t for t in chosen}
        doomed = list(tables)
        if not doomed:
            return MaintenanceReport("drop_partitions", ns.root, ns.manifest_version)
        dropped = Operation("DROP_PARTITIONS", {"filter": filter}, {"partitions_removed": len(doomed)})
        try:
            version = ns.remove_tables(doomed, operation=dropped.timed(started), guard=guard)
        except ConcurrentModification:
            continue
        rows = _rows_of([tables[oid] for oid in doomed], ns)
        return MaintenanceReport(
            "drop_partitions", ns.root, version, tables=len(doomed), rows=rows, deleted=tuple(doomed)
        )
    raise ConcurrentModification(f"drop_partitions on {ns.root} lost {COMMIT_ATTEMPTS} __manifest races")


def _rows_of(tables: Sequence[PartitionTable], ns: PartitionedNamespace) -> int:
    """The rows of these tables at their pinned versions, from fragment metadata."""

    def count(table: PartitionTable) -> int:
        with translate_lance_errors(f"count rows of partition table {table.object_id}", missing=CorruptNamespace):
            return int(ns.open_table(table).count_rows())

    if not tables:
        return 0
    with ThreadPoolExecutor(max_workers=min(8, len(tables))) as pool:
        return sum(pool.map(count, tables))


def rows_to_delete_datafusion(
    ns: PartitionedNamespace, tasks: Sequence[ScanTask], filter_sql: str | Filter
) -> dict[str, list[int]]:
    """Row addresses per table that ``filter_sql`` (DataFusion SQL) selects, read with the
    namespace's reconciliation (renamed columns by id, missing ones as NULL)."""
    if not isinstance(filter_sql, str):
        raise InvalidInput("delete_rows of a bound filter needs a row finder")
    needed = referenced_columns(filter_sql, ns.namespace_schema.arrow.names, False, Dialect.datafusion())
    return rows_matching(ns, tasks, needed, lambda view: matching_rows(view, filter_sql))


def rows_matching(
    ns: PartitionedNamespace, tasks: Sequence[ScanTask], needed: Sequence[str], match: Callable[[pa.Table], list[int]]
) -> dict[str, list[int]]:
    """Row addresses per table of the rows ``match`` selects (indexes into a table of the
    ``needed`` columns, read with the namespace's reconciliation: renamed columns by id,
    missing ones as NULL)."""
    schema = ns.namespace_schema
    out: dict[str, list[int]] = {}
    for task in tasks:
        assert task.read_version is not None
        ds = open_recorded(task.uri, task.read_version, ns.storage_options)
        mapping = dataset_columns(ds.schema, schema)
        with translate_lance_errors(f"scan partition table {task.object_id}", missing=CorruptNamespace):
            table = ds.to_table(columns=[mapping[c] for c in needed if c in mapping], with_row_address=True)
        view = reconcile(table, mapping, needed, schema, task.object_id)
        rows = match(view)
        if rows:
            out[task.object_id] = table.column("_rowaddr").take(pa.array(rows, pa.int64())).to_pylist()
    return out


RowFinder = Callable[[PartitionedNamespace, Sequence[ScanTask], str | Filter], Mapping[str, Sequence[int]]]


def delete_rows(
    root: str | PartitionedNamespace,
    filter: str | Filter,
    *,
    find_rows: RowFinder | None = None,
    dialect: Dialect | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> MaintenanceReport:
    """Delete the rows matching ``filter`` with Lance deletes, in the pruned tables only.

    ``find_rows`` says which rows of the candidate tables match (Spark's where, from
    :mod:`pipelines.maintenance.operations`); without it the filter is DataFusion SQL applied in
    this process (zone-less timestamps are UTC, as in a Lance scan). Each table that
    loses rows gets a new version (its schema first brought up to the namespace schema,
    metadata-only), then ONE ``__manifest`` commit moves them all. ``filter`` may be a filter
    bound already (``find_rows`` then gets it as it is).
    """
    started = time.monotonic()
    ns = as_namespace(root, storage_options)
    d = dialect or Dialect.datafusion()
    parsed = parse_filter(filter, d, strict=False) if isinstance(filter, str) else filter
    if isinstance(parsed, TrueFilter):
        raise InvalidInput("delete_rows needs a filter; to remove everything, overwrite the namespace")
    finder = find_rows or rows_to_delete_datafusion
    with guarded(ns.root, ns.storage_options) as guard:
        return _delete(ns, filter, d, finder, guard, started)


def _delete(
    ns: PartitionedNamespace, filter: str | Filter, d: Dialect, finder: RowFinder, guard: Guard, started: float
) -> MaintenanceReport:
    """Find the rows, then commit; a lost ``__manifest`` race is rebased when the commits that
    won only added rows the filter does not select (:mod:`partitioning.tables.rebase`), else the
    rows are found again."""
    schema = ns.namespace_schema.arrow
    touches = Touches.of_sql(filter, d, schema) if isinstance(filter, str) else Touches.of_filter(filter, schema)
    read: dict[str, int] = {}
    found: dict[str, list[int]] | None = None
    for _ in range(DML_COMMIT_ATTEMPTS):
        ns.refresh(guard=guard)
        tasks = list(ns.plan_scan(filter, dialect=d))
        for task in tasks:
            if task.read_version is None or task.read_branch is not None or task.read_tag is not None:
                raise InvalidInput(f"delete_rows: table {task.object_id} is read from a branch or tag; not supported")
        now = {t.object_id: int(t.read_version or 0) for t in tasks}
        if found is None or conflict(ns, read, now, found, touches) is not None:
            read = now
            found = {oid: sorted(set(a)) for oid, a in finder(ns, tasks, filter).items() if a and oid in now}
        tables = ns.tables_by_id(found)
        rows = sum(len(a) for a in found.values())
        if not found:
            return MaintenanceReport("delete_rows", ns.root, ns.manifest_version)
        text = filter if isinstance(filter, str) else str(to_sql(filter))
        deleted = Operation("DELETE", {"filter": text}, {"rows_removed": rows, "partitions_touched": len(found)})
        versions = _delete_addresses(ns, [tables[oid] for oid in found], found)
        commits = [
            TableCommit(t.spec_id, t.values, t.location, version, oid, StatsChange(TableStats(0), t.read_version))
            for oid, version in versions.items()
            for t in [tables[oid]]
        ]
        try:
            version = ns.commit_once(commits, operation=deleted.timed(started), guard=guard)
        except ConcurrentModification:
            continue
        return MaintenanceReport("delete_rows", ns.root, version, tables=len(commits), rows=rows)
    raise ConcurrentModification(
        f"delete_rows on {ns.root} lost {DML_COMMIT_ATTEMPTS} __manifest races to other writers; nothing was deleted, "
        "run it again"
    )


def _delete_addresses(
    ns: PartitionedNamespace, tables: Sequence[PartitionTable], addresses: Mapping[str, Sequence[int]]
) -> dict[str, int]:
    """One marked dataset version per table without the rows at ``addresses`` (in parallel)."""
    schema = ns.namespace_schema

    def one(table: PartitionTable) -> int:
        base = ns.open_table(table)
        return delete_and_append(table.uri, schema, base, [], addresses[table.object_id], ns.storage_options)

    with ThreadPoolExecutor(max_workers=max(1, min(PARALLEL_COMMITS, len(tables)))) as pool:
        return dict(zip([t.object_id for t in tables], pool.map(one, tables), strict=True))
