"""The Python side of the JVM layer: the data source ``lance_partitioned_py``.

The jar's Java layer (``java/lance_partitioned/``: a ``TableProvider`` named
``lance_partitioned``, a ``TableCatalog``, per-scan builders, row-level operations)
plans where Spark plans, and does every piece of data work through this source, each
time through a fresh ``PythonDataSourceV2`` instance, so no scan ever sees another's plan:

- a **scan**: ``schema()`` with ``lp.call=plan`` reads ``__manifest`` at the pinned version,
  binds the predicates Spark pushed (``lp.exact``: those the scan applies itself, exactly;
  ``lp.prune``: those Spark applies, used only to skip tables) and plans the tables; it
  answers the plan's summary (and, for ``COUNT(*)``, the count from metadata), and keeps
  the plan in this object, which Spark pickles and hands to ``reader()``;
- a **call** (``lp.call=<name>``, arguments in ``lp.args``): catalog work (describe, list,
  create, drop, alter; :mod:`pipelines.jvm.catalog`), answered as JSON in the returned
  schema's metadata;
- a **write**: ``writer()`` with ``lp.write`` (:mod:`pipelines.jvm.write`): append,
  overwrite (static or dynamic), replace the tables a predicate selects, or the row
  changes of ``DELETE`` / ``UPDATE`` / ``MERGE``.

Without ``lp.*`` options it is the plain ``lance_partitioned`` source
(:class:`pipelines.source.datasource.LancePartitionedDataSource`): what the Java layer falls back
to when the Spark it runs on is not the one it was compiled for.
"""

from __future__ import annotations

import base64
import json
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceWriter
from pyspark.sql.types import NullType, StructField, StructType

from partitioning.errors import InvalidInput, first_line
from partitioning.namespace import PartitionedNamespace
from partitioning.plan.identity_match import matching_tables
from partitioning.plan.table_rows import TableSlice
from partitioning.sql.binding import bind
from partitioning.sql.filters import Dialect, Filter, TrueFilter, conjunction, is_exactly_understood
from partitioning.sql.predicates import predicates_from_json
from partitioning.state.partition_tables import open_partition_table
from partitioning.state.scan import ScanPlan
from partitioning.storage.roots import storage_options_from
from pipelines.read.local import local_table
from pipelines.source.datasource import LancePartitionedDataSource, lowered_options, one_line_errors
from pipelines.source.reader import LancePartitionedReader

__all__ = ["BRIDGE_NAME", "BridgeSource", "answer", "exact_count"]

BRIDGE_NAME = "lance_partitioned_py"
RESULT_FIELD = "lp"
log = logging.getLogger("lance_partitioned")
_DIALECT = Dialect("spark", "UTC", case_sensitive=True)
PARALLEL_COUNTS = 16
# rows a scan's plan may carry to the JVM (in one task, under Spark's 1,000 KiB task-size warning)
INLINE_MAX_BYTES = 768 << 10


def answer(result: Any) -> StructType:
    """A call's JSON answer, carried to the JVM as the metadata of a one-field schema."""
    text = json.dumps(result, separators=(",", ":"), sort_keys=True, default=str)
    return StructType([StructField(RESULT_FIELD, NullType(), True, {RESULT_FIELD: text})])


class BridgeSource(LancePartitionedDataSource):
    """``lance_partitioned_py``: the data source the Java layer drives (see the module)."""

    @classmethod
    def name(cls) -> str:
        return BRIDGE_NAME

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self._plan: ScanPlan | None = None
        self._exact: Filter = TrueFilter()
        self._prune: Filter = TrueFilter()

    def _lp(self, key: str) -> str | None:
        return lowered_options(self.options).get(f"lp.{key}")

    def schema(self) -> StructType:
        call = self._lp("call")
        if call is None:
            return super().schema()
        with one_line_errors():
            if call == "plan":
                return answer(self._plan_scan())
            from pipelines.jvm.catalog import call_catalog

            args = json.loads(self._lp("args") or "{}")
            if not isinstance(args, dict):
                raise InvalidInput("lp.args must be a JSON object")
            return answer(call_catalog(call, args, storage_options_from(lowered_options(self.options))))

    # -- scans ------------------------------------------------------------------------------
    def _namespace_at_pin(self) -> PartitionedNamespace:
        options = lowered_options(self.options)
        root = options.get("path")
        if not root:
            raise InvalidInput("the JVM layer named no root (option path)")
        version = self._lp("version")
        return PartitionedNamespace.load(
            root, storage_options_from(options), manifest_version=int(version) if version else None
        )

    def _plan_scan(self) -> dict[str, Any]:
        from pipelines.source.datasource import READ_OPTIONS, check_options
        from pipelines.source.stream_reader import STREAM_READ_OPTIONS

        # Spark plans a stream's scan as a batch's; the JVM scan refuses stream options in a batch read
        allowed = tuple(dict.fromkeys(READ_OPTIONS + STREAM_READ_OPTIONS))
        check_options({k: v for k, v in self.options.items() if not k.lower().startswith("lp.")}, allowed, "read")
        ns = self._namespace_at_pin()
        self.pinned_version = ns.manifest_version
        arrow = ns.namespace_schema.arrow
        self._exact = bind(predicates_from_json(self._lp("exact")), arrow, _DIALECT)
        self._prune = bind(predicates_from_json(self._lp("prune")), arrow, _DIALECT)
        if not is_exactly_understood(self._exact):
            raise InvalidInput(
                "the JVM layer handed this scan a predicate it cannot apply exactly; this is a bug "
                f"(lp.exact={self._lp('exact')!r})"
            )
        plan = ns.plan_scan(conjunction([self._exact, self._prune]))
        self._plan = plan
        out: dict[str, Any] = {
            "summary": plan.summary_with_indexes(ns.namespace_schema, ns.properties, ns.storage_options),
            "tables": len(plan.tasks),
            "total": sum(plan.total.values()),
            "version": plan.manifest_version,
            "root": ns.root,
        }
        if (self._lp("count") or "").lower() == "true":
            out["count"] = exact_count(ns, plan, self._exact)
        if (self._lp("read_set") or "").lower() == "true":
            out["read"] = {t.object_id: t.read_version for t in plan.tasks}
        inline = self._lp("inline")
        if inline:
            rows = inline_rows(ns, plan, StructType.fromJson(json.loads(inline)), self._exact, self._prune)
            if rows is not None:
                out["rows"] = rows
        return out

    def reader(self, schema: StructType) -> DataSourceReader:
        if self._plan is None:
            return super().reader(schema)
        with one_line_errors():
            ns = self._namespace_at_pin()
            options = lowered_options(self.options)
            return LancePartitionedReader.of_plan(
                ns, schema, options, self._plan.tasks, exact=self._exact, prune=self._prune
            )

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        mode = self._lp("write")
        if mode is None:
            return super().writer(schema, overwrite)
        with one_line_errors():
            from pipelines.jvm.write import bridge_writer

            return bridge_writer(mode, dict(self.options), schema, overwrite)


def inline_rows(
    ns: PartitionedNamespace, plan: ScanPlan, schema: StructType, exact: Filter, prune: Filter
) -> str | None:
    """A small plan's rows (``schema``'s columns, ``exact`` applied) as a base64 Arrow IPC
    stream, which the JVM layer turns into rows in one JVM task: no Python worker reads
    them. None beyond :mod:`pipelines.read.local`'s bounds or
    :data:`INLINE_MAX_BYTES`, or when a type has no plain Spark form (the tasks then read)."""
    from pipelines.columns.schema import to_arrow_schema

    table = local_table(
        ns, [TableSlice.of(t) for t in plan.tasks], list(schema.names), conjunction([exact, prune]), exact=exact
    )
    if table is None or table.nbytes > INLINE_MAX_BYTES:
        return None
    try:
        table = table.cast(to_arrow_schema(schema))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, TypeError) as exc:
        log.debug("rows of %s not inlined: %s", ns.root, first_line(exc))
        return None
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as stream:
        stream.write_table(table)
    return base64.b64encode(sink.getvalue().to_pybytes()).decode("ascii")


def exact_count(ns: PartitionedNamespace, plan: ScanPlan, exact: Filter) -> int:
    """``COUNT(*)`` of the rows ``exact`` selects, from metadata only.

    The JVM layer asks only when every predicate of the query is on columns that are
    identity partition columns of every planned table's spec, so each table either
    matches as a whole or not at all: ``exact`` is evaluated on the tables' partition
    values (Spark's semantics, :func:`partitioning.sql.rowfilter.arrow_predicate`), and each
    matching table's live rows are summed from its fragments' metadata."""
    tasks = matching_tables(ns, plan.tasks, exact)
    if not tasks:
        return 0

    def rows(task: Any) -> int:
        ds = open_partition_table(task.uri, task.read_version, task.read_branch, task.read_tag, ns.storage_options)
        return int(ds.count_rows())

    with ThreadPoolExecutor(max_workers=max(1, min(PARALLEL_COUNTS, len(tasks)))) as pool:
        return sum(pool.map(rows, tasks))
