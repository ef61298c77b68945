"""SQL ``DELETE FROM t WHERE ...`` on any columns, done by this process with no Spark job.

Spark offers a table a delete by predicates (``SupportsDeleteV2.canDeleteWhere``) before it
plans a row-level delete (a scan of every candidate row, a Spark job, the delta write). The
JVM layer takes the offer when :func:`exact_delete` answers yes: the predicates, bound to
the namespace schema, are ones this process evaluates exactly as Spark does
(:func:`partitioning.sql.rowfilter.arrow_predicate`: comparisons, IN, IS NULL, NOT, AND, OR
of columns and literals, integer arithmetic), and the tables they can touch hold at most
:data:`MAX_ROWS` rows (their fragment metadata). :func:`delete_matching_rows` then reads
each pruned table with the filter pushed into its Lance scan (a superset), narrows the rows
exactly in Arrow, and deletes them by row address in ONE ``__manifest`` commit on the
protected path, rebased onto other writers' rows as any delete
(:func:`partitioning.tables.deletes.delete_rows`). Anything else is Spark's row-level
delete, as before.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from partitioning.errors import InvalidInput, PartitioningError
from partitioning.namespace import PartitionedNamespace
from partitioning.plan.table_rows import ROW_ADDRESS, ROW_TABLE, TableSlice, addresses_of
from partitioning.sql.binding import bind
from partitioning.sql.filters import Dialect, Filter, TrueFilter, columns_of, is_exactly_understood
from partitioning.sql.predicates import predicates_from_json
from partitioning.sql.rowfilter import arrow_predicate
from partitioning.state.scan import ScanTask
from partitioning.tables.deletes import delete_rows
from pipelines.read.local import matching_table, opened_tables, within

__all__ = ["MAX_ROWS", "delete_matching_rows", "exact_delete"]

MAX_ROWS = 50_000_000  # rows of the pruned tables this process scans for one delete
_UNBOUNDED = (1 << 30, 1 << 40, 1 << 62)  # tables, rows, bytes: the candidates were sized first
_DIALECT = Dialect("spark", "UTC", case_sensitive=True)


def _bound(ns: PartitionedNamespace, predicates_json: str) -> Filter | None:
    """The predicates bound to ``ns``'s schema when this process evaluates them exactly."""
    schema = ns.namespace_schema.arrow
    try:
        bound = bind(predicates_from_json(predicates_json), schema, _DIALECT)
        if isinstance(bound, TrueFilter) or not is_exactly_understood(bound):
            return None
        arrow_predicate(bound, schema)
    except InvalidInput:
        return None
    return bound


def exact_delete(args: Mapping[str, Any], storage_options: Mapping[str, str]) -> dict[str, Any]:
    """Whether :func:`delete_matching_rows` can delete what ``args["predicates"]`` selects
    at ``args["version"]``, and why not."""
    try:
        return _exact_delete(args, storage_options)
    except PartitioningError as exc:  # Spark's row-level delete then reports what is wrong
        return {"exact": False, "why": str(exc)}


def _exact_delete(args: Mapping[str, Any], storage_options: Mapping[str, str]) -> dict[str, Any]:
    ns = PartitionedNamespace.load(str(args["root"]), storage_options, manifest_version=int(args["version"]))
    bound = _bound(ns, str(args["predicates"]))
    if bound is None:
        return {"exact": False, "why": "the condition is not one this process evaluates exactly"}
    tasks = list(ns.plan_scan(bound, dialect=_DIALECT))
    if any(t.read_version is None or t.read_branch is not None or t.read_tag is not None for t in tasks):
        return {"exact": False, "why": "a table is read from a branch or tag"}

    if not within(opened_tables(ns, [TableSlice.of(t) for t in tasks]), MAX_ROWS, 1 << 62):
        return {"exact": False, "why": f"the tables it may touch hold more than {MAX_ROWS} rows"}
    return {"exact": True}


def delete_matching_rows(root: str, predicates_json: str, storage_options: Mapping[str, str]) -> None:
    """Delete the rows the predicates select (see the module), in ONE commit."""
    ns = PartitionedNamespace.load(root, storage_options)
    bound = _bound(ns, predicates_json)
    if bound is None:
        raise InvalidInput(f"DELETE on {ns.root}: the condition is not one this process evaluates exactly")

    def find(ns: PartitionedNamespace, tasks: Sequence[ScanTask], condition: object) -> dict[str, list[int]]:
        pieces = [TableSlice.of(t) for t in tasks]
        # one column besides the addresses (a table of none loses its row count), the narrowest read
        output = sorted(columns_of(bound))[:1] or ns.namespace_schema.arrow.names[:1]
        rows = matching_table(ns, pieces, output, bound, exact=bound, bounds=_UNBOUNDED)
        if rows is None:
            raise PartitioningError(f"DELETE on {ns.root}: the matching rows could not be read")
        return addresses_of(rows, ROW_TABLE, ROW_ADDRESS)

    delete_rows(ns, bound, find_rows=find, dialect=_DIALECT)
