"""Maintenance, Spark-free: the report every operation returns, manifest compaction, shared helpers.

The operations live beside this module: compaction (:mod:`partitioning.tables.compaction`),
partition drop and row delete (:mod:`partitioning.tables.deletes`) and vacuum
(:mod:`partitioning.tables.vacuum`). Each operation that changes what readers see ends in ONE
``__manifest`` commit, so every ``read_version`` it moves moves atomically, and readers of an
older manifest version keep seeing the old data (old dataset versions stay until vacuum).

An operation given a root string also takes ``storage_options`` (Lance's, e.g.
``aws_endpoint``); given a loaded :class:`PartitionedNamespace` it uses the namespace's
own (:func:`as_namespace`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import lance

from partitioning.namespace import PartitionedNamespace
from partitioning.state.partition_tables import open_partition_table
from partitioning.state.upkeep import compact_manifest

__all__ = ["MaintenanceReport", "optimize_manifest"]

COMMIT_ATTEMPTS = 8


@dataclass(frozen=True)
class MaintenanceReport:
    """What a maintenance operation did (or, with ``dry_run``, would do)."""

    operation: str
    root: str
    manifest_version: int | None
    tables: int = 0
    rows: int = 0
    fragments_before: int = 0
    fragments_after: int = 0
    deleted: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()
    dry_run: bool = False
    foreign_versions: tuple[str, ...] = ()  # vacuum: unreferenced dataset versions other Lance clients made, kept

    def summary(self) -> str:
        head = f"{self.operation} {self.root}"
        if self.operation == "compact":
            body = (
                f"{self.tables} tables, {self.fragments_before} fragments -> {self.fragments_after}, "
                f"{self.rows:,} rows rewritten"
            )
        elif self.operation == "vacuum":
            body = f"{'would delete' if self.dry_run else 'deleted'} {len(self.deleted)} items"
        elif self.operation == "drop_partitions":
            body = f"dropped {self.tables} partition tables ({self.rows:,} rows)"
        elif self.operation == "delete_rows":
            body = f"deleted {self.rows:,} rows from {self.tables} partition tables"
        else:
            body = f"{self.fragments_before} fragments -> {self.fragments_after}"
        tail = f", __manifest v{self.manifest_version}" if self.manifest_version is not None else ""
        why = "in use or not written by Lance" if self.operation == "vacuum" else "changed concurrently"
        skipped = f" ({len(self.skipped)} {why}, left as they were)" if self.skipped else ""
        foreign = (
            f"; kept {len(self.foreign_versions)} sets of dataset versions other Lance clients committed"
            if self.foreign_versions
            else ""
        )
        return f"{head}: {body}{tail}{skipped}{foreign}"


def optimize_manifest(
    root: str | PartitionedNamespace, *, storage_options: Mapping[str, str] | None = None
) -> MaintenanceReport:
    """Compact the ``__manifest`` table's own fragments now; rows are unchanged.

    Commits also do this by themselves when it is due (:mod:`partitioning.state.upkeep`). The
    compaction is one ``__manifest`` version recording ``OPTIMIZE_MANIFEST`` (``trigger``
    ``user``); a concurrent commit that wins the race makes it raise
    :class:`ConcurrentModification` with nothing changed.
    """
    ns = as_namespace(root, storage_options)
    opts = dict(ns.storage_options) if ns.storage_options else None
    ds = ns._store.dataset()
    before = len(ds.get_fragments())
    done = compact_manifest(ds, trigger="user", storage_options=opts)
    ns.refresh()
    return MaintenanceReport(
        "optimize_manifest",
        ns.root,
        ns.manifest_version,
        fragments_before=before,
        fragments_after=done.fragments_after if done is not None else before,
    )


def as_namespace(root: str | PartitionedNamespace, storage_options: Mapping[str, str] | None) -> PartitionedNamespace:
    """``root`` itself if it is a loaded namespace (its own storage options), else loaded with ``storage_options``."""
    return root if isinstance(root, PartitionedNamespace) else PartitionedNamespace.load(root, storage_options)


def open_recorded(uri: str, version: int, storage_options: Mapping[str, str] | None) -> lance.LanceDataset:
    """The table at its recorded version; a version vacuum removed is one CorruptNamespace line."""
    return open_partition_table(uri, version, None, None, storage_options)
