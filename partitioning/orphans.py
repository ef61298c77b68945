"""Find what failed or retried writes left behind (reported by ``ns.orphans()``).

Three kinds, none of them visible to readers that honour ``__manifest``:

- ``table_dir``: a partition table directory no ``__manifest`` version mentions (a
  new partition whose write never committed);
- ``version``: a dataset version that no ``__manifest`` version records as its
  table's ``read_version`` (datasets committed, manifest commit lost or retried);
- ``data_file``: a data file no version of its dataset references (fragments
  written by a task whose job never committed them).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

import lance
import pyarrow.fs as pafs

from partitioning.manifest import MANIFEST_DIR, filesystem_of, join_uri

OrphanKind = Literal["table_dir", "version", "data_file"]
_TABLE_DIR_RE = re.compile(r"^[0-9a-f]{8}_v\d+((\$[^/]*)*\$dataset|_[a-z0-9]{16})$")


@dataclass(frozen=True)
class Orphan:
    kind: OrphanKind
    uri: str
    detail: str

    def __str__(self) -> str:
        return f"{self.kind:9s} {self.uri}  ({self.detail})"


def _listing(uri: str) -> tuple[pafs.FileSystem, str, list[pafs.FileInfo]]:
    fs, path = filesystem_of(uri)
    try:
        infos = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
    except FileNotFoundError:
        infos = []
    return fs, path, infos


def recorded_read_versions(
    root: str, storage_options: Mapping[str, str] | None
) -> dict[int, dict[str, set[int | None]]]:
    """For every ``__manifest`` version: table location -> the read_versions it records."""
    uri = join_uri(root, MANIFEST_DIR)
    latest = lance.dataset(uri, storage_options=dict(storage_options) if storage_options else None)
    out: dict[int, dict[str, set[int | None]]] = {}
    for info in latest.versions():
        ds = latest.checkout_version(info["version"])
        table = ds.to_table(columns=["location", "read_version"], filter="object_type = 'table'")
        seen = out.setdefault(info["version"], {})
        for row in table.to_pylist():
            if row["location"]:
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
    _, _, entries = _listing(root)
    for info in entries:
        name = info.base_name
        if info.type == pafs.FileType.Directory and _TABLE_DIR_RE.match(name) and name not in known:
            out.append(Orphan("table_dir", join_uri(root, name), "no __manifest version refers to it"))
    for location, read_versions in sorted(known.items()):
        uri = join_uri(root, location)
        try:
            ds = lance.dataset(uri, storage_options=opts)
        except ValueError:
            continue  # removed already (vacuum); nothing left to report
        referenced: set[str] = set()
        for info in ds.versions():
            version = info["version"]
            if version not in read_versions and None not in read_versions:
                out.append(Orphan("version", uri, f"version {version} is no manifest's read_version"))
            for fragment in ds.checkout_version(version).get_fragments():
                referenced.update(f.path for f in fragment.data_files())
        _, _, files = _listing(join_uri(uri, "data"))
        for info in files:
            if info.type == pafs.FileType.File and info.base_name not in referenced:
                out.append(
                    Orphan("data_file", join_uri(join_uri(uri, "data"), info.base_name), "no version refers to it")
                )
    return out
