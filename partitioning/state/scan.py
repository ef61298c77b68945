"""Scan planning: the partition tables a filter must read, at their recorded versions."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from partitioning.errors import CorruptNamespace
from partitioning.spec.partition_spec import PartitionSpec
from partitioning.spec.schema import NamespaceSchema
from partitioning.sql.filters import Filter, TrueFilter, columns_of, to_sql
from partitioning.state.partition_tables import open_partition_table
from partitioning.state.pruning import partition_condition
from partitioning.stats.skipping import RowStats
from partitioning.storage.alignment import dataset_columns
from partitioning.storage.manifest import INDEX_KEY_PREFIX, partition_column
from partitioning.storage.paths import table_uri

__all__ = ["ScanPlan", "ScanTask", "plan_tables", "table_rows_by_spec"]

TASK_COLUMNS = ("object_id", "location", "read_version", "read_branch", "read_tag")
_ROW = "__row_number"
# A plan of at most this many tables says how many hold a scalar index on a filtered column.
INDEX_CHECKS = 64


@dataclass(frozen=True)
class ScanTask:
    """One partition table to read, at its ``read_version`` (or branch/tag), with the residual filter."""

    object_id: str
    location: str
    uri: str
    spec_id: int
    read_version: int | None
    read_branch: str | None
    read_tag: str | None
    residual: str | None


@dataclass(frozen=True)
class ScanPlan:
    """The pruned list of tasks plus what was pruned, per spec version."""

    tasks: tuple[ScanTask, ...]
    total: dict[int, int]
    kept: dict[int, int]
    filter: Filter
    manifest_version: int
    skipped: dict[int, int] = field(default_factory=dict)

    def __iter__(self) -> Iterator[ScanTask]:
        return iter(self.tasks)

    def __len__(self) -> int:
        return len(self.tasks)

    def __getitem__(self, i: int) -> ScanTask:
        return self.tasks[i]

    @property
    def summary(self) -> str:
        per_spec = ", ".join(f"spec v{s}: {self.kept.get(s, 0)}/{n}" for s, n in sorted(self.total.items()))
        skipped = sum(self.skipped.values())
        by_stats = f"; {skipped} skipped by column statistics" if skipped else ""
        return (
            f"lance_partitioned: scanning {len(self.tasks)} of {sum(self.total.values())} partition tables "
            f"({per_spec}{by_stats}) at __manifest v{self.manifest_version}"
        )

    def summary_with_indexes(
        self, schema: NamespaceSchema, properties: Mapping[str, str], storage_options: Mapping[str, str] | None
    ) -> str:
        """:attr:`summary` and, for a plan of at most :data:`INDEX_CHECKS` tables of a namespace
        with indexes (root ``properties`` recording one), how many of them hold a Lance scalar
        index on a column of the filter (Lance's scan uses it)."""
        columns = sorted(c for c in columns_of(self.filter) if schema.arrow.get_field_index(c) >= 0)
        indexes = any(k.startswith(INDEX_KEY_PREFIX) for k in properties)
        if not columns or not indexes or not self.tasks or len(self.tasks) > INDEX_CHECKS:
            return self.summary
        with ThreadPoolExecutor(max_workers=min(8, len(self.tasks))) as pool:
            found = list(pool.map(lambda t: _indexed(t, columns, schema, storage_options), self.tasks))
        used = sorted(set().union(*found))
        if not used:
            return self.summary
        return f"{self.summary}; {sum(map(bool, found))} scanned with a scalar index on {', '.join(used)}"

    def __str__(self) -> str:
        residual = to_sql(self.filter) or "(none)"
        lines = [self.summary, f"residual filter: {residual}", f"{'spec':>4}  {'read_version':>12}  object_id"]
        lines.extend(f"{'v' + str(t.spec_id):>4}  {t.read_version!s:>12}  {t.object_id}" for t in self.tasks)
        return "\n".join(lines)


def _indexed(
    task: ScanTask, columns: Sequence[str], schema: NamespaceSchema, storage_options: Mapping[str, str] | None
) -> set[str]:
    """The columns among ``columns`` a scalar index of the task's table covers."""
    ds = open_partition_table(task.uri, task.read_version, task.read_branch, task.read_tag, storage_options)
    mapping = dataset_columns(ds.schema, schema)
    indexed = {name for i in ds.describe_indices() if "Vector" not in i.type_url for name in i.field_names}
    return {c for c in columns if mapping.get(c) in indexed}


def table_rows_by_spec(manifest: pa.Table, specs: Mapping[int, PartitionSpec]) -> dict[int, pa.Table]:
    """Per spec version in ``specs``, its table rows (``object_type`` 'table', ``object_id``
    ``v<N>$...``) with only the columns planning reads: :data:`TASK_COLUMNS` and that spec's
    ``partition_field_*`` columns and ``metadata`` (column statistics), in manifest order."""
    partition_columns = {s: [partition_column(f.field_id) for f in spec.fields] for s, spec in specs.items()}
    is_table = pc.equal(manifest.column("object_type"), "table")
    ids = manifest.column("object_id")
    if pc.any(pc.starts_with(ids, "v0")).as_py():
        # a foreign writer's "v01$..." is spec 1 (partitioning.storage.locations.spec_id_of); a regex costs more
        digits = pc.struct_field(pc.extract_regex(ids, r"^v(?P<n>\d+)\$"), "n")
        spec_of = pc.utf8_ltrim(digits, characters="0")
        masks = {s: pc.fill_null(pc.equal(spec_of, str(s)), False) for s in partition_columns}
    else:
        masks = {s: pc.starts_with(ids, f"v{s}$") for s in partition_columns}
    return {
        s: manifest.select([*TASK_COLUMNS, "metadata", *cols]).filter(pc.and_(is_table, masks[s]))
        for s, cols in partition_columns.items()
    }


def plan_tables(
    root: str,
    manifest: pa.Table,
    specs: dict[int, PartitionSpec],
    schema: NamespaceSchema,
    f: Filter,
    manifest_version: int,
    *,
    residual: str | None = None,
    table_rows: Mapping[int, pa.Table] | None = None,
    column_stats: bool = True,
    row_stats: Mapping[int, RowStats] | None = None,
) -> ScanPlan:
    """Prune the manifest's table rows with the bound filter ``f``, spec version by spec version.

    ``residual`` is the filter text the tasks carry (default: ``f`` rendered as SQL).
    ``table_rows`` is :func:`table_rows_by_spec` of ``manifest`` if the caller keeps it, and
    ``row_stats`` their :class:`~partitioning.stats.skipping.RowStats`
    (:attr:`partitioning.state.namespace_state.NamespaceState.table_rows`); otherwise it is computed here.
    Pruning is one Arrow filter per spec version over those columns, then the kept tables'
    column statistics (:meth:`partitioning.stats.skipping.RowStats.may_match`, unless
    ``column_stats`` is False); Python objects are built only for the rows kept. Every kept
    row's ``location`` is checked (:func:`partitioning.storage.paths.check_location`) before it
    becomes a task; rows pruned away are never followed, so they are not.
    """
    if residual is None and not isinstance(f, TrueFilter):
        residual = to_sql(f)
    by_spec = table_rows if table_rows is not None else table_rows_by_spec(manifest, specs)
    tasks: list[ScanTask] = []
    total: dict[int, int] = {}
    kept: dict[int, int] = {}
    skipped: dict[int, int] = {}
    owner: dict[str, str] = {}
    for spec_id, spec in sorted(specs.items()):
        rows = by_spec[spec_id]
        total[spec_id] = rows.num_rows
        condition = partition_condition(f, spec, schema)
        stats = (row_stats or {}).get(spec_id) or RowStats(rows) if column_stats else None
        kept_rows: np.ndarray | None = None
        if condition is not None and rows.num_rows:
            if stats is None:
                rows = rows.filter(condition)
            else:
                numbered = rows.append_column(_ROW, pa.array(np.arange(rows.num_rows, dtype=np.int64)))
                rows = numbered.filter(condition)
                kept_rows = rows.column(_ROW).to_numpy()
                rows = rows.drop_columns([_ROW])
        matching = stats.may_match(f, schema, kept_rows) if stats is not None and rows.num_rows else None
        if matching is not None:
            skipped[spec_id] = int(rows.num_rows - matching.sum())
            rows = rows.filter(pa.array(matching))
        kept[spec_id] = rows.num_rows
        columns = [rows.column(c).to_pylist() for c in TASK_COLUMNS]
        for object_id, location, read_version, read_branch, read_tag in zip(*columns, strict=True):
            uri = table_uri(root, object_id, location)
            other = owner.setdefault(location, object_id)
            if other != object_id:
                raise CorruptNamespace(
                    f"__manifest table rows {other!r} and {object_id!r} both have location {location!r}; "
                    "remove one with PartitionedNamespace.remove_tables"
                )
            tasks.append(
                ScanTask(
                    object_id=object_id,
                    location=location,
                    uri=uri,
                    spec_id=spec_id,
                    read_version=read_version,
                    read_branch=read_branch,
                    read_tag=read_tag,
                    residual=residual,
                )
            )
    tasks.sort(key=lambda t: t.object_id)
    return ScanPlan(tuple(tasks), total, kept, f, manifest_version, skipped)
