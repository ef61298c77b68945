"""Paths under a namespace root: URIs joined below it, the directories a row may name, what a root may hold.

A partition table's directory is one path segment directly under the root, checked
(:func:`location_problem`) before anything follows a ``__manifest`` row's location; every
delete first checks that its target lies strictly inside the root (:func:`contained`).
A new namespace needs a root that holds nothing yet (:func:`check_new_root`), and no
namespace root may also be a plain Lance dataset (:func:`check_namespace_root`).
"""

from __future__ import annotations

import os
import posixpath
import re
import unicodedata
import urllib.parse
from collections.abc import Mapping
from typing import Any

import lance
import pyarrow as pa
import pyarrow.fs as pafs

from partitioning.errors import CorruptNamespace, InvalidInput, PartitioningError
from partitioning.storage.locations import TABLE_DIR_RE
from partitioning.storage.roots import filesystem_of

__all__ = [
    "check_location",
    "check_namespace_root",
    "check_new_root",
    "contained",
    "join_uri",
    "location_problem",
    "table_uri",
    "unborn_manifest",
]


def join_uri(root: str, name: str) -> str:
    """``root/name`` for local paths and object-store URIs alike."""
    return f"{root.rstrip('/')}/{name}"


# -- where a table may live -----------------------------------------------------------------------
MAX_SEGMENT_BYTES = 255
_PLAIN_RE = re.compile(r"[0-9a-f]{8}_(?P<rest>.+)", re.DOTALL)
_BOUNDED_RE = re.compile(r"[0-9a-f]{8}_(?P<spec>v\d+)_[a-z0-9]{16}")
_SAFE_RE = re.compile(r"[0-9a-f]{8}_[A-Za-z0-9$_.=+-]+")
_UNSAFE_CHARS = frozenset('/\\:%?#*"<>|')


def _shown(value: Any, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 4] + "...'"


def _segment_problem(name: str) -> str | None:
    """Why ``name`` is not one plain path segment on local disks and object stores alike."""
    if name in ("", ".", ".."):
        return "it is not a directory name"
    if len(name.encode("utf-8", "surrogatepass")) > MAX_SEGMENT_BYTES:
        return f"it is longer than {MAX_SEGMENT_BYTES} bytes"
    for ch in name:
        if ch in _UNSAFE_CHARS:
            return f"it contains {ch!r}"
        if unicodedata.category(ch)[0] in "CZ":
            return f"it contains the character {ch!r}"
    return None


def location_problem(object_id: Any, location: Any) -> str | None:
    """Why ``location`` may not be the directory of the table ``object_id``; None if it may.

    A table's directory is ONE path segment directly under the root, named as
    :func:`partitioning.storage.locations.table_directory` names it: ``<8 lowercase hex>_<object_id>``,
    or, only when that would be longer than :data:`MAX_SEGMENT_BYTES`, the bounded
    ``<8 hex>_v<N>_<16 [a-z0-9]>`` with the object id's own spec version ``v<N>``. So
    ``..``, ``.``, ``__manifest``, anything with ``/``, ``\\``, NUL, control or blank
    characters, URIs, absolute paths and another table's directory are refused.
    """
    if not isinstance(object_id, str) or not object_id:
        return "the row has no object id"
    if not isinstance(location, str):
        return "the row has no location"
    if _SAFE_RE.fullmatch(location) is None or len(location) > MAX_SEGMENT_BYTES:
        problem = _segment_problem(location)
        if problem is not None:
            return problem
    plain = _PLAIN_RE.fullmatch(location)
    if plain is None:
        return "it is not of the form <8 lowercase hex>_<object_id>"
    if plain.group("rest") == object_id:
        return None
    bounded = _BOUNDED_RE.fullmatch(location)
    if bounded is not None:
        if len(f"00000000_{object_id}".encode("utf-8", "surrogatepass")) <= MAX_SEGMENT_BYTES:
            return "it is a bounded name, but the object id is short enough to be its own directory name"
        if object_id.split("$", 1)[0] != bounded.group("spec"):
            return f"it is a directory of spec {bounded.group('spec')}, not of {object_id.split('$', 1)[0]}"
        return None
    return f"it is the directory of object {_shown(plain.group('rest'))}, not of this row's"


def check_location(object_id: Any, location: Any) -> str:
    """``location`` if it may be the directory of table ``object_id`` (:func:`location_problem`);
    otherwise one line naming both (:class:`CorruptNamespace`). Nothing is followed before this."""
    problem = location_problem(object_id, location)
    if problem is None:
        return str(location)
    raise CorruptNamespace(
        f"__manifest table row {_shown(object_id)} has location {_shown(location)}, which is not one directory "
        f"under the root ({problem}); refusing to use it. Remove the row with "
        f"PartitionedNamespace.remove_tables([{_shown(object_id)}]) or restore a correct location"
    )


def table_uri(root: str, object_id: Any, location: Any) -> str:
    """The URI of table ``object_id`` under ``root``, after :func:`check_location`."""
    return join_uri(root, check_location(object_id, location))


def _split_uri(uri: str) -> tuple[str, str]:
    """``(scheme://authority, path)`` of an object-store URI, ``("", absolute real path)`` of a local one."""
    if uri.startswith("file://"):
        uri = urllib.parse.unquote(urllib.parse.urlsplit(uri).path)
    if "://" not in uri:
        return "", os.path.realpath(uri)
    scheme, rest = uri.split("://", 1)
    authority, _, path = rest.partition("/")
    return f"{scheme.lower()}://{authority}", path


def contained(root: str, target: str) -> str:
    """``target`` if it lies strictly inside ``root``, else :class:`PartitioningError` naming both.

    Local paths are compared after resolving symlinks and ``..``; object-store URIs by
    scheme, bucket and key prefix, and a key with an empty, ``.`` or ``..`` segment, a
    backslash or a control character is refused rather than normalised. Every delete
    checks its target with this first.
    """
    root_base, root_path = _split_uri(root)
    base, path = _split_uri(target.rstrip("/") if "://" in target else target)
    if root_base == "" and base == "":
        inside = path != root_path and os.path.commonpath([root_path, path]) == root_path
    else:
        prefix = root_path.rstrip("/")
        rest = path[len(prefix) :] if path.startswith(prefix) else ""
        segments = rest.split("/")[1:] if rest.startswith("/") else []
        inside = (
            base == root_base
            and bool(segments)
            and all(_segment_problem(s) is None for s in segments)
            and posixpath.normpath(path) == path
        )
    if not inside:
        raise PartitioningError(f"refusing to touch {_shown(target)}: it is not inside the namespace root {root!r}")
    return target


# -- what a root may hold -------------------------------------------------------------------------
_DATASET_MARKER = "_versions"


def check_new_root(root: str, storage_options: Mapping[str, str] | None = None) -> None:
    """Refuse to create a namespace where something is stored already.

    A new namespace needs a missing or empty directory: a plain Lance dataset, files or
    other directories under ``root`` are an :class:`InvalidInput` and nothing is written.
    """
    listed = _entries(root, storage_options)
    if listed is None:
        if _is_dataset(root, storage_options):
            raise InvalidInput(f"cannot create a partitioned namespace at {root}: it holds a plain Lance dataset")
        return
    listed = [n for n in listed if not _failed_write_leftover(root, n, storage_options)]
    if listed:
        what = "a plain Lance dataset" if _DATASET_MARKER in listed else f"{len(listed)} entries"
        shown = ", ".join(repr(n) for n in sorted(listed)[:3]) + (", ..." if len(listed) > 3 else "")
        raise InvalidInput(
            f"cannot create a partitioned namespace at {root}: the directory is not empty ({what}: {shown}); "
            "use a new or empty directory"
        )


def _failed_write_leftover(root: str, name: str, storage_options: Mapping[str, str] | None) -> bool:
    """Whether ``root/name`` is what a failed creating write can leave once its namespace was
    removed: its lease directory, or a partition table directory with uncommitted data files
    only (a task Spark was still stopping wrote them). Vacuum of the new namespace removes them."""
    if name == "_writes":
        return True
    if name == "__manifest":
        return unborn_manifest(f"{root.rstrip('/')}/{name}", storage_options)
    if not TABLE_DIR_RE.match(name):
        return False
    inside = _entries(f"{root.rstrip('/')}/{name}", storage_options)
    return inside is not None and set(inside) <= {"data"}


def check_namespace_root(root: str, storage_options: Mapping[str, str] | None = None) -> None:
    """Refuse to write into a namespace whose root is also a plain Lance dataset."""
    if _is_dataset(root, storage_options):
        raise InvalidInput(
            f"{root} is a plain Lance dataset as well as a partitioned namespace (it has {_DATASET_MARKER}/ "
            "beside __manifest); refusing to write there"
        )


def _entries(root: str, storage_options: Mapping[str, str] | None = None) -> list[str] | None:
    """Names directly under ``root`` ([] if it does not exist), or None if it cannot be listed."""
    try:
        fs, path = filesystem_of(root, storage_options)
        info = fs.get_file_info(path)
        if info.type == pafs.FileType.NotFound:
            return []
        if info.type != pafs.FileType.Directory:
            return [info.base_name]
        return [i.base_name for i in fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))]
    except (OSError, ValueError, pa.ArrowException):
        return None


def unborn_manifest(uri: str, storage_options: Mapping[str, str] | None) -> bool:
    """Whether the ``__manifest`` at ``uri`` is a creation that never finished: its first
    version (the rows) without the second (spec and schema), because the creating process
    died between the two commits or is between them now."""
    try:
        ds = lance.dataset(uri, storage_options=dict(storage_options) if storage_options else None)
    except (OSError, ValueError, RuntimeError):
        return False
    return ds.version == 1 and not ds.metadata


def _is_dataset(root: str, storage_options: Mapping[str, str] | None) -> bool:
    if "://" not in root or root.startswith("file://"):
        listed = _entries(f"{root.rstrip('/')}/{_DATASET_MARKER}", storage_options)
        if listed is not None:
            return bool(listed)
    try:
        lance.dataset(root, storage_options=dict(storage_options) if storage_options else None)
    except (OSError, ValueError, RuntimeError):
        return False
    return True


def version_files(base: str, version: int) -> tuple[str, str]:
    """Lance's two names of a dataset version's manifest file (V2: ``u64::MAX - version``, 20
    digits; V1: the number), under the dataset path ``base``."""
    return f"{base}/_versions/{2**64 - 1 - version:020d}.manifest", f"{base}/_versions/{version}.manifest"


def newest_listed_version(uri: str, storage_options: Mapping[str, str] | None) -> int | None:
    """The highest version under ``uri``'s ``_versions`` directory, by listing it (None if unreadable)."""
    try:
        fs, path = filesystem_of(uri, storage_options)
        infos = fs.get_file_info(pafs.FileSelector(f"{path}/_versions"))
    except (OSError, ValueError, pa.ArrowException):
        return None
    numbers = []
    for info in infos:
        stem, _, ext = info.base_name.partition(".")
        if ext == "manifest" and stem.isdigit():
            numbers.append(2**64 - 1 - int(stem) if len(stem) == 20 else int(stem))
    return max(numbers, default=None)


def is_file(fs: pafs.FileSystem, path: str) -> bool:
    return fs.get_file_info(path).type == pafs.FileType.File


def local_dir(uri: str, storage_options: Mapping[str, str] | None) -> str | None:
    """The local directory of ``uri``; None on an object store."""
    fs, base = filesystem_of(uri, storage_options)
    return base.rstrip("/") if isinstance(fs, pafs.LocalFileSystem) else None


def read_number(path: str) -> int | None:
    """The positive whole number (ASCII digits, below 10**19) a small local file holds;
    None when the file is missing, unreadable or holds anything else."""
    try:
        with open(path, "rb") as f:
            text = f.read(24).strip()
    except OSError:
        return None
    return int(text) if text.isdigit() and 0 < len(text) < 20 and int(text) > 0 else None
