"""Removing a namespace: one a failed creating write made, and ``DROP TABLE ... PURGE``.

A namespace comes into existence with its first successful write. A write to a new root
creates ``__manifest`` (the spec and schema) before its tasks run; when the write then
fails, :func:`discard_unborn` removes what it made, so a retry with corrected data or
another spec starts from an empty root. It removes nothing when anything else happened
there: a commit after the creation, or a live lease of another write.

:func:`purge_namespace` deletes the entries Lance and this project wrote under a root
(``__manifest`` with its version hint, the partition datasets, the leases); the root
directory itself stays; :func:`remove_manifest` deletes ``__manifest`` alone (``DROP TABLE``
without ``PURGE``). Every deletion is checked to lie strictly inside the root
(:func:`partitioning.storage.paths.contained`); entries written by others stay.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Mapping

import pyarrow.fs as pafs

from partitioning.errors import PartitioningError
from partitioning.storage.lease_files import LEASE_DIR, list_leases
from partitioning.storage.locations import TABLE_DIR_RE
from partitioning.storage.manifest import HINT_FILE, MANIFEST_DIR, ManifestStore
from partitioning.storage.orphans import delete_files, remove_empty_dirs, table_files
from partitioning.storage.paths import contained, join_uri
from partitioning.storage.roots import filesystem_of, resolve_root

__all__ = ["discard_unborn", "discard_uncreated", "purge_namespace", "remove_leases", "remove_manifest", "table_dirs"]

Options = Mapping[str, str] | None
_log = logging.getLogger(__name__)


def table_dirs(root: str, options: Options) -> list[str]:
    """The partition dataset directories directly under ``root`` (by the spec's naming)."""
    fs, path = filesystem_of(root, options)
    infos = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
    return [
        join_uri(root, i.base_name)
        for i in infos
        if i.type == pafs.FileType.Directory and TABLE_DIR_RE.match(i.base_name)
    ]


def _remove_tree(root: str, uri: str, options: Options) -> None:
    contained(root, uri)
    listed = table_files(uri, options)
    if listed is not None:
        hints = [join_uri(uri, name) for name in listed.foreign if name.startswith(HINT_FILE)]
        delete_files(root, [*(f for f, _ in listed.files), *hints], options)
        remove_empty_dirs(root, [*listed.dirs, uri], options)


def remove_manifest(root: str, options: Options) -> None:
    """Delete ``__manifest`` (with its version hint) under ``root``: ``DROP TABLE`` without ``PURGE``.

    Stopped at any point (a crash, a store error), the table still reads as its latest version
    or is gone, never an older version: the version files go first, oldest first and the
    latest last (the moment the table goes), and only then the files they reference."""
    uri = join_uri(root, MANIFEST_DIR)
    contained(root, uri)
    listed = table_files(uri, options)
    if listed is None:
        return
    files = [f for f, _ in listed.files]
    versions = sorted((v, f) for f in files if (v := _version_of(f)) is not None)
    delete_files(root, [f for _, f in versions], options)
    _remove_tree(root, uri, options)


def _version_of(uri: str) -> int | None:
    """The dataset version a ``_versions/*.manifest`` file records (either Lance naming), else None."""
    parent, _, name = uri.rpartition("/")
    stem, _, ext = name.partition(".")
    if not parent.endswith("/_versions") or ext != "manifest" or not stem.isdigit():
        return None
    return 2**64 - 1 - int(stem) if len(stem) == 20 else int(stem)


def remove_leases(root: str, options: Options) -> None:
    """Delete every lease file under ``root`` and the lease directory."""
    fs, path = filesystem_of(join_uri(root, LEASE_DIR), options)
    infos = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
    delete_files(
        root, [join_uri(join_uri(root, LEASE_DIR), i.base_name) for i in infos if i.type == pafs.FileType.File], options
    )
    remove_empty_dirs(root, [join_uri(root, LEASE_DIR)], options)


def purge_namespace(root: str, options: Options, tables: list[str] | None = None) -> None:
    """Delete ``__manifest``, the partition datasets (``tables``, default: every dataset
    directory under the root) and the leases. The root itself stays (deletions stay strictly
    inside it); a catalog removes an emptied table root from its warehouse."""
    for uri in dict.fromkeys([join_uri(root, MANIFEST_DIR), *(tables or []), *table_dirs(root, options)]):
        _remove_tree(root, uri, options)
    remove_leases(root, options)


def discard_unborn(root: str, created_version: int, options: Options, own_lease: str | None = None) -> bool:
    """Remove the namespace a failed write created at ``created_version``, if nothing else
    happened there since: no later ``__manifest`` version and no live lease. Returns whether
    it was removed; a failure to remove is logged, never raised over the write's own error."""
    try:
        latest = ManifestStore(root, options).dataset().version
        now = dt.datetime.now(dt.UTC)
        # the write's own lease may be stored again by a task Spark is still stopping
        others = [lease for lease in list_leases(root, options) if lease.uri != own_lease]
        if latest != created_version or any(lease.live(now) for lease in others):
            return False
        purge_namespace(root, options)
        return True
    except (PartitioningError, OSError, ValueError) as exc:
        _log.warning("lance_partitioned: could not remove the namespace a failed write created at %s: %s", root, exc)
        return False


def discard_uncreated(root: str, options: Options, own_lease: str | None = None, *, within: str | None = None) -> bool:
    """Remove what a failed atomic create (:mod:`partitioning.tables.replace`) wrote under ``root``:
    partition datasets no ``__manifest`` names, and leases; with ``within`` (a catalog's
    warehouse) the emptied root directory too. Nothing is removed once a ``__manifest``
    exists there or while another write's lease is live. Returns whether it was removed; a
    failure is logged, never raised over the create's own error."""
    try:
        if ManifestStore(root, options).exists():
            return False
        now = dt.datetime.now(dt.UTC)
        if any(lease.live(now) for lease in list_leases(root, options) if lease.uri != own_lease):
            return False
        purge_namespace(root, options)
        if within is not None:
            remove_empty_dirs(resolve_root(within), [root], options)
        return True
    except (PartitioningError, OSError, ValueError) as exc:
        _log.warning("lance_partitioned: could not remove what a failed create wrote at %s: %s", root, exc)
        return False
