"""Vacuum's deletions: what one planned item deletes, and carrying a plan out safely.

:class:`Deletion` is one item of a vacuum plan (Lance files and their empty directories, or
dataset versions). Right before deleting, under vacuum's own lease, :func:`spare_protected`
drops from the plan whatever a write in progress or the latest ``__manifest`` version needs
(:class:`_Protection`, read then); :func:`cleanup_versions` removes dataset versions with
Lance's own cleanup. The planning itself is :func:`partitioning.tables.vacuum.vacuum`.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import lance

from partitioning.errors import PartitioningError, first_line, translate_lance_errors
from partitioning.sql.timezones import as_utc
from partitioning.storage.alignment import restore_as_latest
from partitioning.storage.lease_files import list_leases, protected_bases, protected_since
from partitioning.storage.manifest import MANIFEST_DIR, note_latest
from partitioning.storage.orphans import referenced_data_files, table_files
from partitioning.storage.paths import contained, join_uri, location_problem


@dataclass(frozen=True)
class Deletion:
    """One item of a vacuum plan: Lance files (and then their empty directories), or dataset versions."""

    item: str
    files: tuple[str, ...] = ()
    dirs: tuple[str, ...] = ()
    versions: tuple[str, tuple[int, ...]] | None = None
    restore: int | None = None  # restored as the latest version first, if the latest is among ``versions``
    location: str | None = None  # the partition table directory this deletion is in, if any
    stamp: dt.datetime | None = None  # when the newest file it deletes was written (None: unknown)
    stamps: tuple[dt.datetime, ...] = ()  # per version in ``versions``: when it was committed
    lease: str | None = None  # the lease file it removes (an expired lease)
    data_file: bool = False  # one data file no version referenced when planned


def dataset_or_none(uri: str, opts: Mapping[str, str] | None) -> lance.LanceDataset | None:
    """The dataset at ``uri``, or None when nothing is there (deleted by an earlier vacuum)."""
    try:
        return lance.dataset(uri, storage_options=dict(opts) if opts else None)
    except (ValueError, OSError, RuntimeError) as exc:
        if table_files(uri, opts) is None or "not found" in str(exc).lower():
            return None
        raise PartitioningError(f"vacuum: cannot open {uri}: {first_line(exc)}") from exc


def spare_protected(
    root: str, opts: Mapping[str, str] | None, manifest_uri: str, plan: list[Deletion]
) -> tuple[list[Deletion], list[str]]:
    """``plan`` without what a write in progress or the latest ``__manifest`` version needs,
    read now (after vacuum's own lease is stored): what the latest version or a live
    lease's base references, what is newer than the earliest live lease, and live leases.
    Leases are judged on the real clock: ``now`` lets vacuum plan as of another time, but
    whether a write is in progress right now is a fact of the present. Also what was spared."""
    real_now = dt.datetime.now(dt.UTC)
    leases = list_leases(root, opts)
    protection = _Protection(
        bases=protected_bases(leases, real_now),
        since=protected_since(leases, real_now),
        live={lease.uri for lease in leases if lease.live(real_now)},
        refs={},
        manifest_uri=manifest_uri,
    )
    with translate_lance_errors(f"vacuum {root}: read {MANIFEST_DIR}"):
        latest = lance.dataset(manifest_uri, storage_options=dict(opts) if opts else None)
        protection.refs.update(_references(latest, {int(latest.version), *protection.bases}))
    for location in sorted({d.location for d in plan if d.data_file and d.location is not None}):
        ds = dataset_or_none(join_uri(root, location), opts)
        if ds is not None:
            with translate_lance_errors(f"vacuum {root}: read the versions of {location}"):
                protection.referenced[location] = referenced_data_files(ds)
    out: list[Deletion] = []
    spared: list[str] = []
    for deletion in plan:
        kept = protection.spare(deletion)
        if kept is deletion:
            out.append(deletion)
            continue
        spared.append(f"{deletion.item}: a write in progress or the latest __manifest version needs it, kept")
        if kept is not None:
            out.append(kept)
    return out, spared


def _references(latest: lance.LanceDataset, versions: Iterable[int]) -> dict[str, set[int | None]]:
    """Table location -> read versions, over the ``__manifest`` versions given (those gone are skipped)."""
    out: dict[str, set[int | None]] = {}
    for version in sorted(versions):
        try:
            ds = latest if version == latest.version else latest.checkout_version(version)
        except (OSError, ValueError, RuntimeError):
            continue  # an earlier vacuum removed it; it references nothing now
        rows = ds.to_table(columns=["object_id", "location", "read_version"], filter="object_type = 'table'")
        for row in rows.to_pylist():
            if location_problem(row["object_id"], row["location"]) is None:
                out.setdefault(row["location"], set()).add(row["read_version"])
    return out


@dataclass(frozen=True)
class _Protection:
    """What vacuum must not delete, as read right before deleting."""

    bases: set[int]  # __manifest versions live leases build on
    since: dt.datetime | None  # the earliest start of a live write lease
    live: set[str]  # live lease files
    refs: dict[str, set[int | None]]  # table location -> read versions the latest version and the bases reference
    manifest_uri: str
    referenced: dict[str, set[str]] = dataclasses.field(default_factory=dict)  # location -> data files in use now

    def spare(self, deletion: Deletion) -> Deletion | None:
        """``deletion`` itself when it touches nothing protected, a smaller one, or None."""
        if deletion.lease is not None:
            return None if deletion.lease in self.live else deletion
        if deletion.data_file:
            name = deletion.files[0].rsplit("/", 1)[-1]
            if name in self.referenced.get(deletion.location or "", set()):
                return None  # a version committed since the plan uses it
        if deletion.versions is None:
            if not deletion.data_file and deletion.location is not None and deletion.location in self.refs:
                return None
            if self.since is not None and (deletion.stamp is None or deletion.stamp >= self.since):
                return None
            return deletion
        uri, versions = deletion.versions
        if uri == self.manifest_uri:
            keep: set[int | None] = set(self.bases)
        else:
            keep = set(self.refs.get(deletion.location or "", set()))
            if None in keep:
                return None
        stamps = deletion.stamps or (None,) * len(versions)
        remaining = tuple(
            v
            for v, t in zip(versions, stamps, strict=True)
            if v not in keep and (self.since is None or (t is not None and t < self.since))
        )
        if remaining == versions:
            return deletion
        if not remaining or deletion.restore is not None:
            return None  # a dangling-version cleanup that would need another restore target: next time
        kept = tuple(t for v, t in zip(versions, stamps, strict=True) if v in remaining and t is not None)
        return dataclasses.replace(
            deletion, versions=(uri, remaining), stamps=kept, item=f"versions {uri} {version_ranges(list(remaining))}"
        )


def cleanup_versions(
    root: str, uri: str, versions: Sequence[int], opts: Mapping[str, str] | None, *, restore: int | None = None
) -> None:
    """Lance's own cleanup of ``versions`` of the dataset at ``uri`` (inside ``root``); a dataset gone is fine.

    Lance never removes the latest version: if it is among ``versions``, version ``restore``
    is first restored as the latest (a marked ``Restore``); if something was committed
    meanwhile, the latest is not among them and nothing is restored.
    """
    contained(root, uri)
    ds = dataset_or_none(uri, opts)
    if ds is None:
        return
    with translate_lance_errors(f"vacuum {root}: clean up versions {version_ranges(list(versions))} of {uri}"):
        if restore is not None and ds.version in versions:
            ds = restore_as_latest(uri, restore, opts)[0]
        if uri == join_uri(root, MANIFEST_DIR):  # a kept version may lie below removed ones: no open starts there
            note_latest(uri, ds.version, opts)
        ds.cleanup_old_versions(versions=list(versions), error_if_tagged_old_versions=False)


def version_ranges(versions: Sequence[int]) -> str:
    """``[1, 2, 3, 7]`` -> ``"1-3, 7"``."""
    out: list[str] = []
    start = prev = versions[0]
    for v in [*versions[1:], None]:
        if v is not None and v == prev + 1:
            prev = v
            continue
        out.append(str(start) if start == prev else f"{start}-{prev}")
        if v is not None:
            start = prev = v
    return ", ".join(out)


def aware(t: Any) -> dt.datetime:
    """A timestamp Lance reports (a version's, a file's) as an aware UTC datetime."""
    assert isinstance(t, dt.datetime)
    return as_utc(t)
