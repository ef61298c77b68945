"""What each ``__manifest`` version appended: the rows a stream out of a namespace reads.

:func:`appended_between` walks the versions after ``start`` up to ``end``, one at a time,
and compares each version's partition tables with the version before:

- a version whose operation changes no row (:data:`DATA_PRESERVING`: a compaction, an index,
  a schema or spec change, manifest upkeep) is passed over, whatever it rewrote;
- otherwise a table that is new, or whose recorded dataset version keeps every fragment
  it had, unchanged, and adds fragments, appended those fragments' rows;
- anything else (a table removed, a fragment rewritten, deleted from or given new
  columns: an overwrite, delete, merge, update, restore or backfill) is a :class:`Change`,
  which the caller reports.

Fragments are compared by Lance fragment id and their files and deletion file, read from
the datasets at the recorded versions only: a version a crashed write left and
``__manifest`` never recorded is never looked at.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from partitioning.errors import translate_lance_errors
from partitioning.namespace import PartitionedNamespace, PartitionTable
from partitioning.plan.table_rows import TableSlice
from partitioning.state.partition_tables import open_partition_table
from partitioning.storage.history import operation_of
from partitioning.storage.manifest import ManifestStore

__all__ = ["DATA_PRESERVING", "Change", "appended_between", "snapshot_slices"]

DATA_PRESERVING = frozenset(
    {"COMPACT", "INDEX", "EVOLVE_SPEC", "EVOLVE_SCHEMA", "OPTIMIZE_MANIFEST", "CREATE", "INTENT", "VACUUM"}
)


@dataclass(frozen=True)
class Change:
    """A ``__manifest`` version that changed rows other than by appending them."""

    version: int
    operation: str
    detail: str

    def line(self) -> str:
        return f"__manifest version {self.version} ({self.operation}) {self.detail}"


def snapshot_slices(ns: PartitionedNamespace) -> list[TableSlice]:
    """Every partition table of ``ns``'s version, whole (a stream's first batch)."""
    return [TableSlice.of(task) for task in ns.plan_scan(None)]


def appended_between(
    root: str, start: int, end: int, storage_options: Mapping[str, str] | None = None
) -> tuple[list[TableSlice], list[Change]]:
    """The fragments versions ``start + 1`` .. ``end`` appended, one slice per table and
    version, and the versions that changed rows otherwise."""
    store = ManifestStore(root, storage_options)
    latest = store.dataset()
    before = _tables(PartitionedNamespace.load(root, storage_options, manifest_version=start))
    slices: list[TableSlice] = []
    changes: list[Change] = []
    for version in range(start + 1, end + 1):
        operation, _, _ = operation_of(latest, version)
        after = _tables(PartitionedNamespace.load(root, storage_options, manifest_version=version))
        if operation not in DATA_PRESERVING:
            found, change = _version_appends(before, after, storage_options)
            if change is None:
                slices.extend(found)
            else:
                changes.append(Change(version, operation, change))
        before = after
    return slices, changes


def _tables(ns: PartitionedNamespace) -> dict[str, PartitionTable]:
    return {t.object_id: t for t in ns.partitions()}


def _version_appends(
    before: Mapping[str, PartitionTable], after: Mapping[str, PartitionTable], storage_options: Mapping[str, str] | None
) -> tuple[list[TableSlice], str | None]:
    gone = sorted(set(before) - set(after))
    if gone:
        return [], f"removed partition table {gone[0]}" + (f" and {len(gone) - 1} more" if len(gone) > 1 else "")
    out = []
    for oid, table in sorted(after.items()):
        old = before.get(oid)
        if old is not None and (old.location, old.read_version, old.read_branch, old.read_tag) == (
            table.location,
            table.read_version,
            table.read_branch,
            table.read_tag,
        ):
            continue
        new = _fragments(table, storage_options)
        if old is not None:
            if old.location != table.location:
                return [], f"moved partition table {oid}"
            kept = _fragments(old, storage_options)
            changed = next((fid for fid, meta in kept.items() if new.get(fid) != meta), None)
            if changed is not None:
                return [], f"rewrote fragment {changed} of partition table {oid}"
            new = {fid: meta for fid, meta in new.items() if fid not in kept}
        if new:
            out.append(TableSlice(oid, table.uri, table.read_version, None, None, tuple(sorted(new))))
    return out, None


def _fragments(table: PartitionTable, storage_options: Mapping[str, str] | None) -> dict[int, str]:
    """Fragment id -> its files and deletion file (JSON), at the table's recorded version."""
    with translate_lance_errors(f"list the fragments of partition table {table.object_id}"):
        ds = open_partition_table(table.uri, table.read_version, table.read_branch, table.read_tag, storage_options)
        out = {}
        for fragment in ds.get_fragments():
            meta = fragment.metadata.to_json()
            kept = {key: meta.get(key) for key in ("files", "deletion_file", "overlays")}
            out[fragment.fragment_id] = json.dumps(kept, sort_keys=True, default=str)
        return out
