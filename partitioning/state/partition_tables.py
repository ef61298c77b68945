"""One partition table as ``__manifest`` records it: its row, a request to record one, and opening it.

:class:`PartitionTable` is one table row (a leaf ``dataset``), :class:`TableCommit` a request to
point a partition at a table version in the next commit, and :func:`open_partition_table` opens a
table at the version its ``read_*`` columns select. They sit apart from
:class:`~partitioning.state.namespace_state.NamespaceState` because readers and writers that never
decode a manifest version use them too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import lance

from partitioning.errors import CorruptNamespace, NamespaceNotFound, translate_lance_errors
from partitioning.spec.values import canonical_float
from partitioning.stats.bounds import StatsChange
from partitioning.storage.locations import PartitionKey

__all__ = ["PartitionTable", "TableCommit", "open_partition_table"]


@dataclass(frozen=True)
class PartitionTable:
    """One partition table (a leaf ``dataset``) as recorded in ``__manifest``."""

    object_id: str
    location: str
    uri: str
    spec_id: int
    values: Mapping[str, Any]
    read_version: int | None
    read_branch: str | None = None
    read_tag: str | None = None

    @property
    def key(self) -> PartitionKey:
        return tuple(canonical_float(v) for v in self.values.values())


@dataclass(frozen=True)
class TableCommit:
    """A request to point one partition's table at ``read_version`` in the next manifest commit.

    ``location`` is where the data was written; for a partition that already exists in
    the manifest it must be that table's location. ``stats``: what the commit does to the
    table's column statistics (:class:`~partitioning.stats.bounds.StatsChange`); without it
    the table has none after the commit, and every filter reads it.
    """

    spec_id: int
    values: Mapping[str, Any]
    location: str
    read_version: int
    object_id: str | None = None
    stats: StatsChange | None = None


def open_partition_table(
    uri: str,
    read_version: int | None,
    read_branch: str | None,
    read_tag: str | None,
    storage_options: Mapping[str, str] | None = None,
) -> lance.LanceDataset:
    """A partition table at the version its ``read_*`` columns select (SPEC-NOTES 15).

    A tag alone names the version; a branch with a version reads that branch; NULLs
    mean the latest version on main.
    """
    opts = dict(storage_options) if storage_options else None
    if read_tag is not None:
        ref = f" at tag {read_tag!r}"
    elif read_branch is not None:
        ref = f" on branch {read_branch!r} at version {read_version}"
    else:
        ref = f" at version {read_version}" if read_version is not None else ""
    try:
        with translate_lance_errors(f"open partition table {uri}{ref}"):
            if read_tag is not None:
                return lance.dataset(uri, version=read_tag, storage_options=opts)
            if read_branch is not None:
                # pylance 14 opens branches only by checking one out from the main dataset
                return lance.dataset(uri, storage_options=opts).checkout_version((read_branch, read_version))
            return lance.dataset(uri, version=read_version, storage_options=opts)
    except NamespaceNotFound as exc:
        if read_tag is None and read_version is None:
            raise
        try:
            with translate_lance_errors(f"open partition table {uri}"):
                versions = [v["version"] for v in lance.dataset(uri, storage_options=opts).versions()]
        except NamespaceNotFound:
            raise exc from None
        has = f"it has versions {min(versions)}..{max(versions)}" if versions else "it has no readable version"
        on = f" on branch {read_branch!r}" if read_branch is not None else ""
        wanted = f"tag {read_tag!r}" if read_tag is not None else f"version {read_version}{on}"
        raise CorruptNamespace(
            f"partition table {uri} has no {wanted} ({has}): its __manifest row points to a "
            "version that was removed (by vacuum or by hand); read an older __manifest version (versionAsOf / "
            "manifest_version=) or restore the table's version"
        ) from exc
