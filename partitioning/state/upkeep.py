"""Upkeep of ``__manifest`` without a user: its small fragments folded and compacted by the commits.

Every ``__manifest`` commit is a Lance ``merge_insert``: it writes the rows it changes (the
``v<N>`` lock rows, the touched table rows) into a NEW fragment and marks their old copies
deleted. So each small commit adds a fragment (a data file of a few rows, plus a deletion
file on the fragment that held the old copies); the version file lists every fragment and
reading the manifest (a cold load, and planning) opens every fragment's files.

Two remedies, both keeping the rows exactly as a ``merge_insert`` would:

- :func:`fold_merge`, inside the commit: the commit's rows and the live rows of the
  fragments after the *base* (the largest fragment, made by the last compaction) are
  written as ONE new fragment that replaces them, and the base gets a deletion file for
  the rows changed. The manifest stays at two fragments, in one Lance ``Update`` version
  per commit, like ``merge_insert``'s. It declines (None) for a commit that is not small.
- :func:`maybe_compact_manifest`, right after a commit: once :func:`needs_compaction`
  (``every`` fragments besides the base, rows besides it past ``max(every, 2*sqrt(base
  rows))``, or ``max(every, a tenth)`` of the base's rows deleted), Lance's compaction
  rewrites every fragment into one, deletions materialised, committed as ONE ``Rewrite``
  version whose Lance transaction properties record ``OPTIMIZE_MANIFEST`` (``trigger=auto``) for
  :func:`partitioning.storage.history.history_table`. It never raises for a storage or
  concurrency reason: a compaction that loses the race to a concurrent commit (Lance's
  conflict check) is dropped with its file, and a later commit tries again; anything else
  is logged (logger ``partitioning.state.upkeep``). A writer whose commit meets a compaction
  committed after its read gets Lance's retryable conflict (ConcurrentModification) and
  rebases, as after any other commit.

Lance's ``Compaction.commit`` (and ``compact_files``) commits a fragment-id reservation,
then the rewrite, and takes no transaction properties. ``__manifest`` has no index to
remap, so the ``Rewrite`` is committed directly (one version; Lance assigns the new
fragment ids). A manifest with an index (another client's) goes through
``Compaction.commit``, which remaps it (two versions, ``UNKNOWN`` in history).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import lance
import pyarrow as pa
import pyarrow.compute as pc
from lance.dataset import LanceOperation, Transaction
from lance.fragment import write_fragments
from lance.optimize import Compaction

from partitioning.errors import (
    ConcurrentModification,
    InvalidInput,
    PartitioningError,
    first_line,
    translate_lance_errors,
)
from partitioning.storage.history import Operation
from partitioning.storage.manifest import ROW_ADDRESS, ManifestStore
from partitioning.storage.paths import contained, join_uri
from partitioning.storage.roots import filesystem_of, normalize_storage_options

__all__ = [
    "DEFAULT_EVERY",
    "FOLD_MAX_ROWS",
    "MATERIALIZE_DELETIONS_THRESHOLD",
    "ManifestCompaction",
    "compact_manifest",
    "fold_merge",
    "maybe_compact_manifest",
    "needs_compaction",
]

logger = logging.getLogger(__name__)

DEFAULT_EVERY = 64
MATERIALIZE_DELETIONS_THRESHOLD = 0.1  # Lance's default share of deleted rows that makes a fragment worth rewriting
LANCE_TARGET_ROWS = 1_048_576  # Lance's default target_rows_per_fragment: larger fragments are not compacted
FOLD_MAX_ROWS = 4096  # rows a folded commit may rewrite (its own and those after the base); more: merge_insert

ManifestLike = lance.LanceDataset | ManifestStore | str


@dataclass(frozen=True)
class ManifestCompaction:
    """One compaction of ``__manifest``: the version it committed (opened) and what it rewrote."""

    version: int
    fragments_before: int
    fragments_after: int
    rows: int  # live rows rewritten: the same rows, in fewer fragments
    dataset: lance.LanceDataset = field(compare=False, repr=False)


def maybe_compact_manifest(
    manifest: ManifestLike, *, storage_options: Mapping[str, str] | None = None, every: int = DEFAULT_EVERY
) -> ManifestCompaction | None:
    """Compact ``__manifest`` if :func:`needs_compaction`; the compaction committed, or None.

    Call it right after a successful ``__manifest`` commit with the dataset that commit
    returned (``ManifestStore.merge_rows``): the check then reads nothing. A
    :class:`ManifestStore` or a root opens the latest version first; ``storage_options``
    (a dataset's) reach the files a lost compaction leaves. Never raises but for
    a bad ``every``: a lost race, a damaged or vanished manifest or any other failure is
    logged and answered with None; the commit that called it stays as it is.
    """
    if isinstance(every, bool) or not isinstance(every, int) or every < 2:
        raise InvalidInput(f"manifest upkeep 'every' must be an integer >= 2, got {every!r}")
    try:
        ds = _open(manifest, storage_options)
        if not needs_compaction(ds, every=every):
            return None
        return compact_manifest(ds, trigger="auto", storage_options=_options(manifest, storage_options))
    except ConcurrentModification as exc:
        logger.debug("__manifest upkeep lost a race to a concurrent commit; a later commit tries again: %s", exc)
    except Exception as exc:  # the caller's commit has succeeded: upkeep must never fail it
        logger.warning("__manifest upkeep skipped: %s", first_line(exc), exc_info=True)
    return None


def needs_compaction(ds: lance.LanceDataset, *, every: int = DEFAULT_EVERY) -> bool:
    """Whether ``ds`` (an opened version; its fragment list is in memory) is worth compacting:
    besides the base (and fragments too big for Lance to compact), ``every`` or more fragments
    or more than ``max(every, 2*sqrt(base rows))`` live rows; or, in the base,
    ``max(every, MATERIALIZE_DELETIONS_THRESHOLD * base rows)`` rows deleted."""
    fragments = [f.metadata for f in ds.get_fragments()]
    if not fragments:
        return False
    base = _base_index(fragments)
    rest = [f for i, f in enumerate(fragments) if i != base and int(f.physical_rows) < LANCE_TARGET_ROWS]
    base_rows = int(fragments[base].physical_rows)
    return (
        len(rest) >= every
        or sum(_live_rows(f) for f in rest) > max(every, 2 * math.isqrt(base_rows))
        or _deleted(fragments[base]) >= max(every, MATERIALIZE_DELETIONS_THRESHOLD * base_rows)
    )


def compact_manifest(
    manifest: ManifestLike, *, trigger: str = "user", storage_options: Mapping[str, str] | None = None
) -> ManifestCompaction | None:
    """Compact ``__manifest`` (every fragment, deletions materialised) in one commit recording
    ``OPTIMIZE_MANIFEST`` with ``trigger``; None if Lance finds nothing to rewrite.

    The rows written must be the live rows read, or nothing is committed. A commit since
    the version compacted that changed a rewritten fragment raises
    :class:`ConcurrentModification`; the files written for the compaction are removed.
    """
    started = time.monotonic()
    opts = _options(manifest, storage_options)
    ds = _open(manifest, storage_options)
    before = len(ds.get_fragments())
    with translate_lance_errors(f"compact {ds.uri}"):
        plan = Compaction.plan(
            ds, {"materialize_deletions": True, "materialize_deletions_threshold": MATERIALIZE_DELETIONS_THRESHOLD}
        )
        if plan.num_tasks() == 0:
            return None
        rewrites: list[Any] = [task.execute(ds) for task in plan.tasks]  # the stubs lack original_fragments
    old = [f for r in rewrites for f in r.original_fragments]
    new = [f for r in rewrites for f in r.new_fragments]
    live, written = sum(_live_rows(f) for f in old), sum(int(f.physical_rows) for f in new)
    if written != live:
        _remove_files(ds.uri, new, opts)
        raise PartitioningError(f"compaction of {ds.uri} wrote {written} rows for {live} live rows; not committed")
    after = before - len(old) + len(new)
    operation = Operation(
        "OPTIMIZE_MANIFEST",
        {"trigger": trigger},
        {"fragments_before": before, "fragments_after": after, "rows": live},
    ).timed(started)
    try:
        with translate_lance_errors(f"commit the compaction of {ds.uri}"):
            committed = _commit_rewrite(ds, plan.read_version, rewrites, operation)
    except ConcurrentModification:
        _remove_files(ds.uri, new, opts)
        raise
    return ManifestCompaction(int(committed.version), before, after, live, committed)


def fold_merge(
    ds: lance.LanceDataset,
    rows: pa.Table,
    *,
    delete_ids: Sequence[str] = (),
    transaction_properties: Mapping[str, str] | None = None,
    max_rows: int = FOLD_MAX_ROWS,
    addresses: Callable[[Sequence[str]], Mapping[str, int] | None] | None = None,
) -> lance.LanceDataset | None:
    """Upsert ``rows`` by ``object_id`` and delete ``delete_ids`` in ONE commit on ``ds``'s
    version, folding the fragments after the base into the commit's new fragment; the
    committed version (opened), or None (nothing committed) when the commit is not small:
    more than ``max_rows`` rows to write, more than :data:`DEFAULT_EVERY` fragments, or
    repeated ``object_id`` s (``merge_insert`` decides those).

    The rows are ``merge_insert``'s (``when_matched_update_all``, ``when_not_matched_insert_all``,
    ``when_not_matched_by_source_delete`` of ``delete_ids``). The commit is one Lance ``Update``
    that removes the folded fragments, so a commit made since ``ds`` that changed them or the
    base rows raises :class:`ConcurrentModification`, exactly as ``merge_insert``'s does.

    ``addresses`` maps object ids to their Lance row addresses in ``ds``'s version (ids not
    there left out), or returns None when it does not know them: the base rows are then
    deleted by address, a lookup instead of a scan of the base fragment, after checking
    that those addresses hold exactly those ids.
    """
    upserts = rows.select(ds.schema.names).cast(ds.schema)
    ids = upserts.column("object_id")
    if pc.count_distinct(ids).as_py() != len(ids):
        return None
    fragments = ds.get_fragments()
    base = _base_index([f.metadata for f in fragments]) if fragments else -1
    older, tail = fragments[: base + 1], fragments[base + 1 :]
    if len(fragments) > DEFAULT_EVERY or sum(_live_rows(f.metadata) for f in tail) + len(upserts) > max_rows:
        return None
    gone = pa.array(sorted({*ids.to_pylist(), *delete_ids}), pa.string())
    with translate_lance_errors(f"commit {ds.uri}"):
        pieces = [f.to_table() for f in tail]
        kept = [t.filter(pc.invert(pc.is_in(t.column("object_id"), value_set=gone))) for t in pieces]
        folded = pa.concat_tables([*kept, upserts])
        version = ds.data_storage_version
        new = write_fragments(folded, ds, schema=ds.schema, data_storage_version=version) if len(folded) else []
        removed, updated = [f.fragment_id for f in tail], []
        if len(gone):
            predicates = _by_address(older, addresses(gone.to_pylist()) if addresses is not None else None)
            if predicates is None:
                by_id = "object_id IN (" + ", ".join("'" + str(i).replace("'", "''") + "'" for i in gone) + ")"
                predicates = {f.fragment_id: by_id for f in older}
            for f in older:
                if f.fragment_id not in predicates:
                    continue
                meta = f.delete(predicates[f.fragment_id])
                if meta is None:
                    removed.append(f.fragment_id)
                elif meta.deletion_file != f.metadata.deletion_file:
                    updated.append(meta)
        update = LanceOperation.Update(
            removed_fragment_ids=removed, updated_fragments=updated, new_fragments=new, update_mode="rewrite_rows"
        )
        txn = Transaction(ds.version, update, transaction_properties=dict(transaction_properties or {}))
        return lance.LanceDataset.commit(ds, txn, read_version=ds.version, max_retries=0)


def _by_address(fragments: Sequence[Any], addresses: Mapping[str, int] | None) -> dict[int, str] | None:
    """Per fragment of ``fragments`` holding some of ``addresses``, a predicate deleting
    exactly those rows by ``_rowaddr``; None when the addresses are not known, or when one
    of them does not hold its id (then the rows are found by id instead)."""
    if addresses is None:
        return None
    wanted: dict[int, dict[int, str]] = {}
    for object_id, address in addresses.items():
        wanted.setdefault(address >> 32, {})[address] = object_id
    out = {}
    for f in fragments:
        rows = wanted.get(f.fragment_id)
        if not rows:
            continue
        predicate = f"_rowaddr IN ({', '.join(str(a) for a in sorted(rows))})"
        found = f.to_table(columns=["object_id"], filter=predicate, with_row_address=True)
        if dict(zip(found.column(ROW_ADDRESS).to_pylist(), found.column("object_id").to_pylist(), strict=True)) != rows:
            logger.warning("__manifest row addresses do not hold the rows expected; finding them by id")
            return None
        out[f.fragment_id] = predicate
    return out


def _commit_rewrite(
    ds: lance.LanceDataset, read_version: int, rewrites: Sequence[Any], operation: Operation
) -> lance.LanceDataset:
    if ds.has_index:
        Compaction.commit(ds, list(rewrites))
        return ds.checkout_version(ds.latest_version)
    groups = [LanceOperation.RewriteGroup(r.original_fragments, r.new_fragments) for r in rewrites]
    rewrite = LanceOperation.Rewrite(groups=groups, rewritten_indices=[])
    txn = Transaction(read_version, rewrite, transaction_properties=operation.properties())
    return lance.LanceDataset.commit(ds, txn, read_version=read_version, max_retries=0)


def _open(manifest: ManifestLike, storage_options: Mapping[str, str] | None) -> lance.LanceDataset:
    if isinstance(manifest, lance.LanceDataset):
        return manifest
    store = manifest if isinstance(manifest, ManifestStore) else ManifestStore(manifest, storage_options)
    return store.dataset()


def _options(manifest: ManifestLike, storage_options: Mapping[str, str] | None) -> Mapping[str, str] | None:
    if isinstance(manifest, ManifestStore):
        return manifest.storage_options
    return normalize_storage_options(storage_options)


def _base_index(fragments: Sequence[Any]) -> int:
    """The base fragment: the one with the most rows (the first of equals)."""
    rows = [int(f.physical_rows) for f in fragments]
    return rows.index(max(rows))


def _deleted(fragment: Any) -> int:
    return int(fragment.deletion_file.num_deleted_rows or 0) if fragment.deletion_file is not None else 0


def _live_rows(fragment: Any) -> int:
    return int(fragment.physical_rows) - _deleted(fragment)


def _remove_files(uri: str, fragments: Sequence[Any], storage_options: Mapping[str, str] | None) -> None:
    """Best effort: the data files written for a compaction that was not committed, each
    checked to lie inside ``__manifest`` (so inside the root) before it is deleted."""
    data = join_uri(uri, "data")
    for fragment in fragments:
        for f in fragment.files:
            try:
                fs, path = filesystem_of(contained(uri, join_uri(data, f.path)), storage_options)
                fs.delete_file(path)  # inside-root: contained() above
            except (OSError, ValueError, PartitioningError) as exc:
                logger.debug("could not remove %s/%s: %s", data, f.path, first_line(exc))
