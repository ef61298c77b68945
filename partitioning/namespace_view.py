"""The read-only side of a partitioned namespace: :class:`NamespaceView`, one ``__manifest`` version.

:class:`~partitioning.namespace.PartitionedNamespace` subclasses it and adds what changes a
namespace (create, load and refresh, commits, evolution) and where writes put new partition
tables. The view answers from the one version it holds (schema, specs, partition tables,
scan plans, the readable layout) and inspects what lies around it (history, orphans, indexes).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import lance
import pyarrow as pa

from partitioning.spec.partition_spec import PartitionSpec
from partitioning.spec.schema import NamespaceSchema
from partitioning.spec.values import canonical_float
from partitioning.sql.binding import bind
from partitioning.sql.filters import Dialect, Filter
from partitioning.sql.from_sql import parse_filter
from partitioning.state.commit_rows import committed_write_ids, write_id_committed
from partitioning.state.describe import children, describe_namespace, layout, list_indexes
from partitioning.state.namespace_state import NamespaceState
from partitioning.state.partition_tables import PartitionTable, open_partition_table
from partitioning.state.scan import ScanPlan, plan_tables
from partitioning.storage.history import history_table
from partitioning.storage.locations import PartitionKey
from partitioning.storage.manifest import ManifestStore
from partitioning.storage.orphans import Orphan, find_orphans

__all__ = ["NamespaceView"]


class NamespaceView:
    """A partitioned namespace as of one ``__manifest`` version, read-only; its methods answer
    from that version alone. Made by :class:`~partitioning.namespace.PartitionedNamespace`."""

    def __init__(self, root: str, state: NamespaceState, storage_options: Mapping[str, str] | None = None) -> None:
        self._store = ManifestStore(root, storage_options)
        self.root = self._store.root
        self.storage_options = self._store.storage_options
        self._state = state
        self._seed = secrets.token_bytes(32)

    # -- properties ---------------------------------------------------------------------------
    @property
    def schema(self) -> pa.Schema:
        """The namespace schema; every field carries ``lance:field_id`` metadata."""
        return self._state.schema.arrow

    @property
    def namespace_schema(self) -> NamespaceSchema:
        return self._state.schema

    @property
    def specs(self) -> dict[int, PartitionSpec]:
        return dict(self._state.specs)

    @property
    def current_spec(self) -> PartitionSpec:
        return self._state.current_spec

    @property
    def manifest_version(self) -> int:
        return self._state.version

    @property
    def properties(self) -> dict[str, str]:
        """The root namespace properties (``__manifest`` table metadata)."""
        return dict(self._state.metadata)

    def __repr__(self) -> str:
        return (
            f"PartitionedNamespace({self.root!r}, manifest_version={self.manifest_version}, spec={self.current_spec})"
        )

    # -- partition tables ----------------------------------------------------------------------
    def partitions(self) -> list[PartitionTable]:
        """One entry per partition table, across all spec versions, ordered by object_id."""
        return list(self._state.tables)

    def find_partition(self, spec_id: int, values: Mapping[str, Any]) -> PartitionTable | None:
        key = tuple(canonical_float(values.get(f.field_id)) for f in self._state.spec(spec_id).fields)
        return self._state.find_tables(spec_id, [key]).get(key)

    def find_partitions(self, spec_id: int, keys: Iterable[PartitionKey]) -> dict[PartitionKey, PartitionTable]:
        """The existing table of each partition key of spec ``spec_id`` in ``keys``; only those
        manifest rows are decoded."""
        return self._state.find_tables(spec_id, keys)

    def spec_ids_with_tables(self) -> set[int]:
        """The spec versions that have at least one partition table (no row is decoded)."""
        return {spec_id for spec_id, rows in self._state.table_rows.items() if rows.num_rows}

    def tables_by_id(self, object_ids: Iterable[str]) -> dict[str, PartitionTable]:
        """The partition tables with these object ids (absent ones are left out); only their
        manifest rows are decoded."""
        return self._state.tables_by_id(object_ids)

    def open_table(self, table: PartitionTable) -> lance.LanceDataset:
        """Open a partition table at the version recorded in the manifest."""
        return open_partition_table(
            table.uri, table.read_version, table.read_branch, table.read_tag, self.storage_options
        )

    # -- history --------------------------------------------------------------------------------
    def history(self, limit: int | None = None) -> pa.Table:
        """What made each ``__manifest`` version up to the latest, newest first (:func:`history_table`)."""
        return history_table(self.root, limit=limit, storage_options=self.storage_options)

    def committed_write_ids(self) -> set[str]:
        """Write ids of recent commits (the last :data:`WRITE_ID_HISTORY` per spec version)."""
        return committed_write_ids(self._state)

    def write_id_committed(self, write_id: str) -> bool:
        """Whether a commit with ``write_id`` was made (a micro-batch's ``<query>-<batch>``: that
        batch or a later one of the query; :mod:`partitioning.state.commit_rows`)."""
        return write_id_committed(self._state, write_id)

    # -- describing and planning ----------------------------------------------------------------
    def describe_namespace(self, id_list: Sequence[str]) -> dict[str, str]:
        """Runtime properties (SPEC-NOTES 17) of a namespace: the root, ``v<N>``, or a partition namespace."""
        return describe_namespace(self._state, self.root, id_list)

    def children(self, id_list: Sequence[str]) -> tuple[list[str], list[str]]:
        """The child namespaces and tables of a namespace (``[]``: the root), sorted
        (:func:`partitioning.state.describe.children`)."""
        return children(self._state, self.root, id_list)

    def layout(self) -> str:
        """A readable tree of spec versions, partition namespaces and tables."""
        return layout(self._state, self.root)

    def plan_scan(
        self,
        filter_sql: str | Filter | None = None,
        *,
        time_zone: str = "UTC",
        dialect: Dialect | None = None,
        column_stats: bool = True,
    ) -> ScanPlan:
        """The partition tables a filter must read (SPEC-NOTES 14), each at its recorded version.

        ``filter_sql`` is SQL or a parsed filter. Without ``dialect`` the text is read as
        DataFusion SQL (what Lance scans apply), with zone-less timestamps in ``time_zone``
        (default UTC); Spark callers pass their session's :class:`Dialect`. Parts the
        pruner does not understand keep every table; they never fail the plan.
        ``column_stats=False`` prunes by partition values alone (no data skipping by the
        tables' column statistics, :mod:`partitioning.stats.skipping`).
        """
        d = dialect or Dialect.datafusion(time_zone)
        if filter_sql is None or isinstance(filter_sql, str):
            f = parse_filter(filter_sql, d, strict=False)
        else:
            f = filter_sql
        residual = filter_sql if isinstance(filter_sql, str) and filter_sql.strip() else None
        return plan_tables(
            self.root,
            self._state.manifest,
            self._state.specs,
            self._state.schema,
            bind(f, self._state.schema.arrow, d),
            self.manifest_version,
            residual=residual,
            table_rows=self._state.table_rows,
            column_stats=column_stats,
            row_stats=self._state.row_stats,
        )

    def orphans(self) -> list[Orphan]:
        """Files and dataset versions left by failed or retried writes (see :mod:`partitioning.storage.orphans`)."""
        return find_orphans(self.root, self.storage_options)

    def indexes(self) -> pa.Table:
        """Per partition table and index: name, type, column, indexed and unindexed rows
        (:func:`partitioning.state.describe.list_indexes`)."""
        return list_indexes(self.partitions(), self.namespace_schema, self.storage_options)
