"""Scan planning: the partition tables a filter must read, at their recorded versions."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from partitioning.errors import CorruptNamespace
from partitioning.filters import Filter, TrueFilter, to_sql
from partitioning.manifest import table_uri
from partitioning.pruning import partition_condition
from partitioning.schema import NamespaceSchema
from partitioning.spec import PartitionSpec

__all__ = ["ScanPlan", "ScanTask", "plan_tables"]


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

    def __iter__(self) -> Iterator[ScanTask]:
        return iter(self.tasks)

    def __len__(self) -> int:
        return len(self.tasks)

    def __getitem__(self, i: int) -> ScanTask:
        return self.tasks[i]

    @property
    def summary(self) -> str:
        per_spec = ", ".join(f"spec v{s}: {self.kept.get(s, 0)}/{n}" for s, n in sorted(self.total.items()))
        return (
            f"lance_partitioned: scanning {len(self.tasks)} of {sum(self.total.values())} partition tables "
            f"({per_spec}) at __manifest v{self.manifest_version}"
        )

    def __str__(self) -> str:
        residual = to_sql(self.filter) or "(none)"
        lines = [self.summary, f"residual filter: {residual}", f"{'spec':>4}  {'read_version':>12}  object_id"]
        lines.extend(f"{'v' + str(t.spec_id):>4}  {t.read_version!s:>12}  {t.object_id}" for t in self.tasks)
        return "\n".join(lines)


def plan_tables(
    root: str,
    manifest: pa.Table,
    specs: dict[int, PartitionSpec],
    schema: NamespaceSchema,
    f: Filter,
    manifest_version: int,
    *,
    residual: str | None = None,
) -> ScanPlan:
    """Prune the manifest's table rows with the bound filter ``f``, spec version by spec version.

    ``residual`` is the filter text the tasks carry (default: ``f`` rendered as SQL).
    Every kept row's ``location`` is checked (:func:`partitioning.manifest.check_location`)
    before it becomes a task; rows pruned away are never followed, so they are not.
    """
    if residual is None and not isinstance(f, TrueFilter):
        residual = to_sql(f)
    tables = manifest.filter(pc.field("object_type") == "table")
    prefix = pc.extract_regex(tables.column("object_id").combine_chunks(), r"^v(?P<n>\d+)\$").field("n")
    spec_of = pc.cast(prefix, pa.int64())
    tasks: list[ScanTask] = []
    total: dict[int, int] = {}
    kept: dict[int, int] = {}
    owner: dict[str, str] = {}
    for spec_id, spec in sorted(specs.items()):
        rows = tables.filter(pc.equal(spec_of, spec_id))
        total[spec_id] = rows.num_rows
        condition = partition_condition(f, spec, schema)
        if condition is not None and rows.num_rows:
            rows = rows.filter(condition)
        kept[spec_id] = rows.num_rows
        for r in rows.select(["object_id", "location", "read_version", "read_branch", "read_tag"]).to_pylist():
            uri = table_uri(root, r["object_id"], r["location"])
            other = owner.setdefault(r["location"], r["object_id"])
            if other != r["object_id"]:
                raise CorruptNamespace(
                    f"__manifest table rows {other!r} and {r['object_id']!r} both have location {r['location']!r}; "
                    "remove one with PartitionedNamespace.remove_tables"
                )
            tasks.append(
                ScanTask(
                    object_id=r["object_id"],
                    location=r["location"],
                    uri=uri,
                    spec_id=spec_id,
                    read_version=r["read_version"],
                    read_branch=r["read_branch"],
                    read_tag=r["read_tag"],
                    residual=residual,
                )
            )
    tasks.sort(key=lambda t: t.object_id)
    return ScanPlan(tuple(tasks), total, kept, f, manifest_version)
