"""Find what failed or retried writes left behind (reported by ``ns.orphans()``).

Three kinds, none of them visible to readers that honour ``__manifest``:

- ``table_dir``: a partition table directory no ``__manifest`` version mentions (a
  new partition whose write never committed);
- ``version``: a dataset version that no ``__manifest`` version records as its
  table's ``read_version`` (datasets committed, manifest commit lost or retried);
- ``data_file``: a Lance data file (``data/*.lance``) no version of its dataset
  references (fragments written by a task whose job never committed them).

Only ``__manifest`` locations that are one table directory under the root are
followed (:func:`partitioning.storage.paths.location_problem`).
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import lance
import pyarrow.fs as pafs
from lance import LanceOperation

from partitioning.errors import PartitioningError, translate_lance_errors
from partitioning.storage.alignment import is_own_commit
from partitioning.storage.lease_files import as_utc
from partitioning.storage.locations import MODEL_DIR, TABLE_DIR_RE
from partitioning.storage.manifest import MANIFEST_DIR
from partitioning.storage.paths import contained, join_uri, location_problem
from partitioning.storage.roots import filesystem_of

OrphanKind = Literal["table_dir", "version", "data_file"]
DATA_FILE_SUFFIX = ".lance"


@dataclass(frozen=True)
class Orphan:
    kind: OrphanKind
    uri: str
    detail: str

    def __str__(self) -> str:
        return f"{self.kind:9s} {self.uri}  ({self.detail})"


def _listing(
    uri: str, storage_options: Mapping[str, str] | None = None
) -> tuple[pafs.FileSystem, str, list[pafs.FileInfo]]:
    fs, path = filesystem_of(uri, storage_options)
    try:
        infos = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
    except FileNotFoundError:
        infos = []
    return fs, path, infos


def recorded_read_versions(
    root: str, storage_options: Mapping[str, str] | None
) -> dict[int, dict[str, set[int | None]]]:
    """For every ``__manifest`` version: table location -> the read_versions it records.

    Only locations that may be a table's directory (:func:`location_problem`) are
    returned: a row pointing anywhere else is never followed, listed or deleted.
    """
    uri = join_uri(root, MANIFEST_DIR)
    latest = lance.dataset(uri, storage_options=dict(storage_options) if storage_options else None)
    out: dict[int, dict[str, set[int | None]]] = {}
    for info in latest.versions():
        ds = latest.checkout_version(info["version"])
        table = ds.to_table(columns=["object_id", "location", "read_version"], filter="object_type = 'table'")
        seen = out.setdefault(info["version"], {})
        for row in table.to_pylist():
            if location_problem(row["object_id"], row["location"]) is None:
                seen.setdefault(row["location"], set()).add(row["read_version"])
    return out


def merged(recorded: Iterable[Mapping[str, set[int | None]]]) -> dict[str, set[int | None]]:
    out: dict[str, set[int | None]] = {}
    for per_version in recorded:
        for location, versions in per_version.items():
            out.setdefault(location, set()).update(versions)
    return out


def find_orphans(
    root: str,
    storage_options: Mapping[str, str] | None = None,
    *,
    recorded: Mapping[int, Mapping[str, set[int | None]]] | None = None,
) -> list[Orphan]:
    """Everything under ``root`` that no ``__manifest`` version makes readable.

    ``recorded`` is :func:`recorded_read_versions` when the caller has it already.
    """
    opts = dict(storage_options) if storage_options else None
    out: list[Orphan] = []
    if recorded is None:
        recorded = recorded_read_versions(root, storage_options)
    known = merged(recorded.values())
    _, _, entries = _listing(root, opts)
    for info in entries:
        name = info.base_name
        if name == MODEL_DIR:
            continue  # the shared index models: immutable, referenced by __manifest properties
        if info.type == pafs.FileType.Directory and TABLE_DIR_RE.match(name) and name not in known:
            out.append(Orphan("table_dir", join_uri(root, name), "no __manifest version refers to it"))
    for location, read_versions in sorted(known.items()):
        uri = join_uri(root, location)
        try:
            ds = lance.dataset(uri, storage_options=opts)
        except (ValueError, OSError, RuntimeError):
            continue  # removed already (vacuum), or no dataset there; nothing to report
        for info in ds.versions():
            version = info["version"]
            if version not in read_versions and None not in read_versions:
                out.append(Orphan("version", uri, f"version {version} is no manifest's read_version"))
        referenced = referenced_data_files(ds)
        _, _, files = _listing(join_uri(uri, "data"), opts)
        for info in files:
            lance_file = info.type == pafs.FileType.File and info.base_name.endswith(DATA_FILE_SUFFIX)
            if lance_file and info.base_name not in referenced:
                out.append(
                    Orphan("data_file", join_uri(join_uri(uri, "data"), info.base_name), "no version refers to it")
                )
    return out


def referenced_data_files(ds: lance.LanceDataset) -> set[str]:
    """The data file names (under ``data/``) any version of ``ds`` references."""
    referenced: set[str] = set()
    for info in ds.versions():
        for fragment in ds.checkout_version(info["version"]).get_fragments():
            referenced.update(f.path for f in fragment.data_files())
    return referenced


# -- which dataset versions this project committed ------------------------------------------------
_ALIGNMENT = (LanceOperation.Project, LanceOperation.Merge, LanceOperation.UpdateConfig, LanceOperation.Restore)
_CLOSING = (LanceOperation.Merge, LanceOperation.CreateIndex)
_OUR_DELETE = "_rowaddr IN ("


def _transaction(ds: lance.LanceDataset, version: int) -> Any:
    """The version's transaction, or None when pylance cannot read it back (pylance 14 raises
    TypeError on a Rewrite that remapped indexes) or it is gone."""
    try:
        return ds.read_transaction(version)
    except (OSError, ValueError, RuntimeError, TypeError):
        return None


def _step(version: int, txn: Any, previous: str | None) -> str | None:
    """What an unmarked commit is, if it is one Lance's own APIs make for this project, committed
    directly on the version before it: ``align`` (schema alignment,
    :func:`partitioning.storage.alignment.align_schema`), ``delete`` (``delete_rows``), ``reserve``
    then ``rewrite`` (compaction's ``Compaction.commit``)."""
    if txn is None:
        return "rewrite" if previous == "reserve" else None
    op = txn.operation
    if type(op) is LanceOperation.BaseOperation:
        return "reserve" if txn.read_version == version - 1 else None
    if isinstance(op, LanceOperation.Rewrite):
        return "rewrite" if previous == "reserve" and txn.read_version == version - 2 else None
    if txn.read_version != version - 1:
        return None
    if isinstance(op, LanceOperation.Delete):
        return "delete" if str(op.predicate).startswith(_OUR_DELETE) else None
    return "align" if isinstance(op, _ALIGNMENT) else None


def made_here(ds: lance.LanceDataset, after: int, recorded: Iterable[int | None] = ()) -> set[int]:
    """The versions of ``ds`` newer than ``after`` (a version of ours) that this project committed.

    A version is ours when its transaction carries :data:`partitioning.storage.alignment.COMMIT_MESSAGE`
    (every ``LanceDataset.commit`` of the project, restores included) or a ``__manifest``
    version records it (``recorded``). Lance's own schema changes, ``delete`` and compaction
    commit take no message; an unmarked run of those, each committed directly on the version
    before it (:func:`_step`) and starting right after a version of ours, is ours when

    - a marked ``Merge`` or ``CreateIndex`` is committed directly on its last version (a
      write that aligned the schema, then committed; ours are never built on another's version),
    - or the version before it is our marked ``Restore`` (a write or maintenance that
      restored the recorded version, then died),
    - or, otherwise, up to its last ``delete`` or ``rewrite`` (``delete_rows`` or a compaction
      that died before its ``__manifest`` commit).

    Anything else (e.g. another client's ``add_columns`` on the version the manifest records)
    is another client's. A compaction another client commits directly on a version of ours
    looks the same as ours (Lance's compaction commit takes no message); it holds the same rows.
    """
    marked = {v for v in recorded if v is not None}
    ours: set[int] = set()
    run: list[tuple[int, str]] = []  # the current unmarked run: (version, step)
    after_restore, valid = False, True
    for version in range(after + 1, ds.latest_version + 1):
        txn = _transaction(ds, version)
        if is_own_commit(txn) or version in marked:
            closes = txn is not None and txn.read_version == version - 1 and isinstance(txn.operation, _CLOSING)
            ours.update(_run_ours(run, after_restore, closes) if valid else ())
            ours.add(version)
            run, valid = [], True
            after_restore = txn is not None and isinstance(txn.operation, LanceOperation.Restore)
            continue
        step = _step(version, txn, run[-1][1] if run else None) if valid else None
        if step is not None:
            run.append((version, step))
        elif valid:
            ours.update(_run_ours(run, after_restore, False))
            run, valid = [], False
    ours.update(_run_ours(run, after_restore, False) if valid else ())
    return ours


def _run_ours(run: list[tuple[int, str]], after_restore: bool, closed: bool) -> list[int]:
    """The versions of an unmarked run (see :func:`made_here`) that are ours."""
    if closed or after_restore:
        return [v for v, _ in run]
    end = max((i + 1 for i, (_, step) in enumerate(run) if step in ("delete", "rewrite")), default=0)
    return [v for v, _ in run[:end]]


# -- deleting what vacuum may delete ----------------------------------------------------------------
LANCE_ENTRIES = frozenset({"data", "_versions", "_transactions", "_deletions", "_indices", "_refs", "tree"})
"""What Lance writes directly inside a dataset directory; vacuum deletes nothing else."""


@dataclass(frozen=True)
class TableFiles:
    """The files vacuum may delete in one table directory, as listed once."""

    uri: str
    files: tuple[tuple[str, dt.datetime | None], ...]  # (URI, mtime)
    dirs: tuple[str, ...]  # directories under ``uri`` (URIs), deepest first
    foreign: tuple[str, ...]  # entries Lance does not write; never deleted

    @property
    def newest(self) -> dt.datetime | None:
        times = [t for _, t in self.files if t is not None]
        return max(times) if times else None


def table_files(uri: str, storage_options: Mapping[str, str] | None = None) -> TableFiles | None:
    """The Lance files under the table directory ``uri`` (None if it does not exist)."""
    fs, path = filesystem_of(uri, storage_options)
    info = fs.get_file_info(path)
    if info.type == pafs.FileType.NotFound:
        return None
    if info.type != pafs.FileType.Directory:
        return TableFiles(uri, (), (), (info.base_name,))
    files: list[tuple[str, dt.datetime | None]] = []
    dirs: list[str] = []
    foreign: list[str] = []
    for top in fs.get_file_info(pafs.FileSelector(path, allow_not_found=True)):
        if top.base_name not in LANCE_ENTRIES or top.type != pafs.FileType.Directory:
            foreign.append(top.base_name)
            continue
        dirs.append(join_uri(uri, top.base_name))
        for entry in fs.get_file_info(pafs.FileSelector(top.path, recursive=True, allow_not_found=True)):
            relative = entry.path[len(path) :].lstrip("/")
            if entry.type == pafs.FileType.File:
                files.append((join_uri(uri, relative), as_utc(entry.mtime) if entry.mtime is not None else None))
            elif entry.type == pafs.FileType.Directory:
                dirs.append(join_uri(uri, relative))
    dirs.sort(key=lambda d: d.count("/"), reverse=True)
    return TableFiles(uri, tuple(files), (*dirs, uri), tuple(sorted(foreign)))


def delete_files(root: str, uris: Iterable[str], storage_options: Mapping[str, str] | None = None) -> list[str]:
    """Delete each file after checking it lies inside ``root`` (:func:`contained`); a file
    already gone is fine. Returns the URIs refused as outside the root."""
    refused = []
    for uri in uris:
        try:
            contained(root, uri)
        except PartitioningError:
            refused.append(uri)
            continue
        fs, path = filesystem_of(uri, storage_options)
        with translate_lance_errors(f"vacuum {root}: delete {uri}"):
            try:
                fs.delete_file(path)  # inside-root: contained() above
            except FileNotFoundError:
                pass
    return refused


def remove_empty_dirs(root: str, uris: Iterable[str], storage_options: Mapping[str, str] | None = None) -> None:
    """Remove the given directories (deepest first) if they are empty and inside ``root``.

    A directory some writer filled meanwhile stays. On an object store a directory is only
    the marker object Arrow leaves when it deletes a directory's last file; an empty one
    is removed so a deleted table leaves no key behind.
    """
    for uri in uris:
        try:
            contained(root, uri)
            fs, path = filesystem_of(uri, storage_options)
            if isinstance(fs, pafs.LocalFileSystem):
                os.rmdir(path)
            elif not fs.get_file_info(pafs.FileSelector(path, allow_not_found=True)):
                fs.delete_dir(path)  # inside-root: contained() above
        except (PartitioningError, OSError):
            continue
