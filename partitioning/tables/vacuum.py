"""Vacuum, Spark-free: delete what no reader within the retention and no write in progress can reach.

:func:`vacuum` plans from the namespace's history (orphans of failed writes, dropped
partition tables, dataset and ``__manifest`` versions no retained version reads, dangling
versions of failed commits, expired leases), then carries the plan out under its own lease
(:mod:`partitioning.tables.vacuum_deletions`), sparing what writes in progress need.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import lance

from partitioning.errors import InvalidInput, PartitioningError, translate_lance_errors
from partitioning.namespace import PartitionedNamespace
from partitioning.progress import progress
from partitioning.storage.lease_files import ended_marks, list_leases, protected_bases, protected_since
from partitioning.storage.leases import vacuum_lease
from partitioning.storage.manifest import MANIFEST_DIR
from partitioning.storage.orphans import (
    delete_files,
    find_orphans,
    made_here,
    merged,
    recorded_read_versions,
    remove_empty_dirs,
    table_files,
)
from partitioning.storage.paths import contained, join_uri
from partitioning.storage.roots import filesystem_of
from partitioning.tables.maintenance import MaintenanceReport, as_namespace
from partitioning.tables.vacuum_deletions import (
    Deletion,
    aware,
    cleanup_versions,
    dataset_or_none,
    spare_protected,
    version_ranges,
)

__all__ = ["vacuum"]


MIN_RETENTION = dt.timedelta(hours=24)
DEFAULT_RETENTION = dt.timedelta(days=7)


def hours_text(span: dt.timedelta) -> str:
    """``span`` in hours as a person writes it: ``24 hours``, ``1.5 hours``, ``1 hour``."""
    hours = span.total_seconds() / 3600
    shown = f"{hours:g}"
    return f"{shown} hour" if shown in ("1", "-1") else f"{shown} hours"


def _retained_versions(manifest: lance.LanceDataset, cutoff: dt.datetime) -> list[int]:
    """The ``__manifest`` versions a reader may still pick: those after ``cutoff`` and the
    one current at it."""
    versions = sorted(manifest.versions(), key=lambda v: v["version"])
    retained = [v["version"] for v in versions if aware(v["timestamp"]) >= cutoff]
    older = [v["version"] for v in versions if aware(v["timestamp"]) < cutoff]
    return older[-1:] + retained


def _dangling(
    ds: lance.LanceDataset,
    infos: Sequence[Mapping[str, Any]],
    newest: int,
    recorded: set[int | None],
    cutoff: dt.datetime,
    since: dt.datetime | None,
) -> tuple[list[int], list[int], int | None]:
    """The versions after ``newest`` (the newest read_version a retained ``__manifest`` version
    records), which writes that died before their ``__manifest`` commit leave behind:
    (this project's, older than ``cutoff`` and ``since``, to delete; other clients', kept;
    the version to restore as the latest first when the latest is to go, else None).

    Authorship is :func:`partitioning.storage.orphans.made_here`. A latest version that is a
    ``Restore`` stays: it holds an older version's content (vacuum's own restore is one).
    """
    above = {int(v["version"]): aware(v["timestamp"]) for v in infos if v["version"] > newest}
    if not above:
        return [], [], None
    ours = made_here(ds, newest, recorded)
    foreign = sorted(v for v in above if v not in ours)
    doomed = sorted(v for v, t in above.items() if v in ours and t < cutoff and (since is None or t < since))
    latest = max(above)
    if doomed and doomed[-1] == latest and isinstance(_operation(ds, latest), lance.LanceOperation.Restore):
        doomed.pop()
    if not doomed or doomed[-1] != latest:
        return doomed, foreign, None
    return doomed, foreign, max(v for v in [newest, *above] if v not in doomed)


def _operation(ds: lance.LanceDataset, version: int) -> Any:
    try:
        txn = ds.read_transaction(version)
    except (OSError, ValueError, RuntimeError, TypeError):
        return None
    return txn.operation if txn is not None else None


def _table_dir(
    root: str, uri: str, item: str, limit: dt.datetime | None, opts: Mapping[str, str] | None = None
) -> tuple[Deletion | None, str | None]:
    """The deletion of one unreferenced table directory, or why it is kept (None, None if it is gone).

    Only Lance's files go, and only when every one is older than ``limit``.
    """
    try:
        contained(root, uri)
    except PartitioningError:
        return None, f"{uri}: outside the root (a link?), left in place"
    listed = table_files(uri, opts)
    if listed is None:
        return None, None
    if limit is not None and listed.newest is not None and listed.newest >= limit:
        return None, f"{uri}: written since {limit.isoformat()} (a write in progress may use it)"
    kept = f"{uri}: {', '.join(listed.foreign)} not written by Lance, left in place" if listed.foreign else None
    if not listed.files and listed.foreign:
        return None, kept
    location = uri[len(root.rstrip("/")) + 1 :] if uri.startswith(root.rstrip("/") + "/") else None
    files = tuple(f for f, _ in listed.files)
    return Deletion(item, files, listed.dirs, location=location, stamp=listed.newest), kept


def vacuum(
    root: str | PartitionedNamespace,
    retain: dt.timedelta = DEFAULT_RETENTION,
    *,
    dry_run: bool = False,
    allow_short_retention: bool = False,
    now: dt.datetime | None = None,
    storage_options: Mapping[str, str] | None = None,
    before_delete: Callable[[], None] | None = None,
) -> MaintenanceReport:
    """Delete what no reader within ``retain`` and no write in progress can reach.

    What goes (``cutoff = now - retain``):

    - files of failed writes (``ns.orphans()``): Lance data files no dataset version
      references, and table directories no ``__manifest`` version mentions, older than
      ``cutoff``;
    - directories of partition tables no retained ``__manifest`` version refers to
      (dropped partitions), where a retained version is one after ``cutoff`` or the one
      current at it;
    - dataset versions below the newest one a retained manifest version reads that no
      retained manifest version reads;
    - dataset versions after that newest one (left by writes that committed datasets and
      then failed before their ``__manifest`` commit) that this project committed
      (:func:`partitioning.storage.orphans.made_here`) before ``cutoff``; if the latest version is
      one, the newest version kept is first restored as the latest (a marked Lance
      ``Restore``, so a plain Lance reader opens the recorded content). Those other Lance
      clients committed are kept and listed in the report's ``foreign_versions``;
    - ``__manifest`` versions older than the one current at ``cutoff``;
    - write leases whose heartbeat stopped :data:`partitioning.storage.lease_files.LEASE_TTL` ago.

    Writes in progress: each holds a lease under ``<root>/_writes``
    (:mod:`partitioning.storage.leases`). While any lease is live, no file modified and no
    dataset version committed at or after the earliest live lease's start is deleted,
    whatever ``retain`` says (a write's files all postdate its lease; a write that takes
    its lease after vacuum listed the leases writes files newer than ``now``). And a
    commit checks that every data file it references exists, so a write whose files
    went anyway fails without committing; nothing committed becomes unreadable.

    What never goes: anything outside the root (each target is checked with
    :func:`partitioning.storage.paths.contained`), a ``__manifest`` row's location that is not
    one table directory under the root (never followed), and anything in a table
    directory that Lance does not write (:data:`partitioning.storage.orphans.LANCE_ENTRIES`; such
    entries are reported in ``skipped``). A target already gone counts as deleted, so a
    vacuum that died half-way can simply run again.

    Operations that commit references to existing files (a restore's to old table
    versions, a merge's to the version it read) record the ``__manifest`` versions they
    build on in their lease (its *bases*). Right before deleting, vacuum stores its own
    lease, then reads the live leases and the latest ``__manifest`` version again and
    spares whatever that version or a live lease's base references (and those
    ``__manifest`` versions themselves), whatever it planned; an operation whose lease is
    stored after that waits for this vacuum to end before it commits
    (:mod:`partitioning.storage.guard`). That re-check applies every rule above again (leases'
    starts, their bases, the latest version's references, the data files versions
    committed since the plan use) with the leases judged on the real clock: ``now`` plans
    as of another time (a what-if, or a test's), but whether a write is in progress is a
    fact of the present. ``before_delete`` is called right before the first deletion (a
    hook for tests).

    ``retain`` under :data:`MIN_RETENTION` (24 hours) is refused unless
    ``allow_short_retention`` is set; leases are honoured either way.
    """
    if retain < dt.timedelta(0):
        raise InvalidInput(f"vacuum retention {hours_text(retain)} is negative")
    if retain < MIN_RETENTION and not allow_short_retention:
        raise InvalidInput(
            f"vacuum retention {hours_text(retain)} is under {hours_text(MIN_RETENTION)}; it could delete files of "
            "long writes in progress and versions readers still use (pass allow_short_retention=True, or "
            "--allow-short-retention to jobs/vacuum.py, to do it anyway)"
        )
    ns = as_namespace(root, storage_options).refresh()
    now = aware(now) if now is not None else dt.datetime.now(dt.UTC)
    cutoff = now - retain
    leases = list_leases(ns.root, ns.storage_options)
    since = protected_since(leases, now)
    file_cutoff = min(cutoff, since) if since is not None else cutoff
    opts = dict(ns.storage_options) if ns.storage_options else None
    latest_locations = {t.location for t in ns.partitions()}
    with translate_lance_errors(f"vacuum {ns.root}: read {MANIFEST_DIR}"):
        manifest = lance.dataset(join_uri(ns.root, MANIFEST_DIR), storage_options=opts)
        recorded = recorded_read_versions(ns.root, ns.storage_options)
        kept_versions = _retained_versions(manifest, cutoff)
    bases = protected_bases(leases, now)  # versions writes in progress build on (a restore's target)
    retained = merged(recorded[v] for v in {*kept_versions, *bases} if v in recorded)
    known = merged(recorded.values())
    plan: list[Deletion] = []
    kept: list[str] = []
    foreign: list[str] = []

    for orphan in find_orphans(ns.root, ns.storage_options, recorded=recorded):
        if orphan.kind == "data_file":
            fs, path = filesystem_of(orphan.uri, opts)
            mtime = fs.get_file_info(path).mtime
            if mtime is not None and aware(mtime) < file_cutoff:
                location = orphan.uri[len(ns.root.rstrip("/")) + 1 :].rsplit("/data/", 1)[0]
                item = f"data_file {orphan.uri}"
                plan.append(Deletion(item, (orphan.uri,), stamp=aware(mtime), location=location, data_file=True))
        elif orphan.kind == "table_dir":
            deletion, why = _table_dir(ns.root, orphan.uri, f"table_dir {orphan.uri}", file_cutoff, opts)
            plan.extend([deletion] if deletion is not None else [])
            kept.extend([why] if why is not None else [])

    for location in progress(f"vacuum {ns.root}", sorted(known), len(known)):
        uri = join_uri(ns.root, location)
        if location not in retained and location not in latest_locations:
            item = f"table_dir {uri} (no retained __manifest version refers to it)"
            deletion, why = _table_dir(ns.root, uri, item, since, opts)
            plan.extend([deletion] if deletion is not None else [])
            kept.extend([why] if why is not None else [])
            continue
        needed = retained.get(location, set())
        if None in needed or not needed:
            continue
        ds = dataset_or_none(uri, opts)
        if ds is None:
            continue
        newest = max(v for v in needed if v is not None)
        infos = ds.versions()
        stamps = {int(v["version"]): aware(v["timestamp"]) for v in infos}
        doomed = sorted(
            v["version"]
            for v in infos
            if v["version"] < newest and v["version"] not in needed and (since is None or aware(v["timestamp"]) < since)
        )
        if doomed:
            item = f"versions {uri} {version_ranges(doomed)} (no retained read_version)"
            plan.append(
                Deletion(
                    item, versions=(uri, tuple(doomed)), location=location, stamps=tuple(stamps[v] for v in doomed)
                )
            )
        with translate_lance_errors(f"vacuum {ns.root}: read the history of {uri}"):
            dangling, others, restore = _dangling(ds, infos, newest, known.get(location, set()), cutoff, since)
        if dangling:
            item = f"versions {uri} {version_ranges(dangling)} (after every retained read_version: a write that failed)"
            plan.append(
                Deletion(
                    item,
                    versions=(uri, tuple(dangling)),
                    restore=restore,
                    location=location,
                    stamps=tuple(stamps[v] for v in dangling),
                )
            )
        if others:
            foreign.append(
                f"versions {uri} {version_ranges(others)} (after every retained read_version, another client's)"
            )

    if kept_versions:
        infos = manifest.versions()
        stamps = {int(v["version"]): aware(v["timestamp"]) for v in infos}
        doomed = sorted(v["version"] for v in infos if v["version"] < kept_versions[0] and v["version"] not in bases)
        if doomed:
            item = f"versions {manifest.uri} {version_ranges(doomed)}"
            plan.append(Deletion(item, versions=(manifest.uri, tuple(doomed)), stamps=tuple(stamps[v] for v in doomed)))
    for lease in leases:
        if not lease.live(now):
            plan.append(Deletion(f"lease {lease.uri} (expired)", (lease.uri,), lease=lease.uri))
    for mark in ended_marks(ns.root, now, ns.storage_options):
        plan.append(Deletion(f"lease end mark {mark}", (mark,), lease=mark))

    if not dry_run:
        # the protected path's other half (partitioning.storage.guard): from here on, an operation
        # whose lease is stored after this one waits for this vacuum before committing
        with vacuum_lease(ns.root, ns.storage_options):
            plan, spared = spare_protected(ns.root, opts, manifest.uri, plan)
            kept.extend(spared)
            if before_delete is not None:
                before_delete()
            for deletion in plan:
                kept.extend(f"{uri}: outside the root" for uri in delete_files(ns.root, deletion.files, opts))
                remove_empty_dirs(ns.root, deletion.dirs, opts)
                if deletion.versions is not None:
                    cleanup_versions(ns.root, *deletion.versions, opts, restore=deletion.restore)
    return MaintenanceReport(
        "vacuum",
        ns.root,
        None,
        deleted=tuple(d.item for d in plan),
        skipped=tuple(kept),
        dry_run=dry_run,
        foreign_versions=tuple(foreign),
    )
