"""The latest ``__manifest`` version without listing every version.

Lance finds a dataset's latest version by listing its ``_versions`` directory: one entry per
version, so opening grows with the history (about 1 ms per 1,000 versions on local disk,
one LIST request per 1,000 on S3), and a stream commits a version every micro-batch. This
process remembers the highest version it has seen of each ``__manifest``
(:func:`remember`); the next open (:func:`latest_known`) checks that version's manifest
file is there and steps forward one ``stat`` at a time while the next version's file
exists, then opens that version by number. Versions only grow and every commit adds the
next number, so the answer is the latest version, as a listing would give it. When the
remembered version's file is gone (the namespace was removed and made again, or its
versions were cleaned up past it), the caller lists as Lance does.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

import pyarrow.fs as pafs

from partitioning.storage.roots import filesystem_of

__all__ = ["latest_known", "remember"]

_SEEN: dict[str, int] = {}
_LOCK = threading.Lock()
_MAX_STEPS = 64  # past this many new versions, a listing is cheaper than stepping


def _manifest_paths(base: str, version: int) -> tuple[str, str]:
    """Lance's two names of version ``version``'s manifest file (V2: ``u64::MAX - version``, 20
    digits; V1: the number), under the dataset path ``base``."""
    return f"{base}/_versions/{2**64 - 1 - version:020d}.manifest", f"{base}/_versions/{version}.manifest"


def remember(uri: str, version: int) -> None:
    """Record that ``uri`` has ``version`` (the highest one seen is kept)."""
    with _LOCK:
        if version > _SEEN.get(uri, 0):
            _SEEN[uri] = version


def latest_known(uri: str, storage_options: Mapping[str, str] | None) -> int | None:
    """The latest version of ``uri``, found from the one remembered; None when nothing is
    remembered or the remembered version's file is gone (then list)."""
    seen = _SEEN.get(uri)
    if seen is None:
        return None
    try:
        fs, base = filesystem_of(uri, storage_options)
        base = base.rstrip("/")
        names = _manifest_paths(base, seen)
        kind = next((i for i, name in enumerate(names) if _exists(fs, name)), None)
        if kind is None:
            return None
        version = seen
        for _ in range(_MAX_STEPS):
            if not _exists(fs, _manifest_paths(base, version + 1)[kind]):
                return version
            version += 1
    except (OSError, ValueError):
        return None
    return None


def _exists(fs: pafs.FileSystem, path: str) -> bool:
    return fs.get_file_info(path).type == pafs.FileType.File
