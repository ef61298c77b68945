"""The physical side of partition tables: fragment writes, version commits, compaction commits.

Every commit builds on the version ``__manifest`` records, brought to the writer's
namespace schema first, with the new fragments renumbered to the dataset's column ids
(:mod:`partitioning.storage.alignment`). Nothing is committed when a data file of the new
fragments is gone (:func:`check_data_files`: a vacuum with a short retention ran beside
the write). :func:`offsets_by_fragment` turns a table's row addresses into what Lance's
``delete_rows`` takes.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import lance
import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
from lance import LanceOperation
from lance.fragment import FragmentMetadata, write_fragments
from lance.optimize import Compaction, CompactionTask, RewriteResult

from partitioning.errors import ConcurrentModification, translate_lance_errors
from partitioning.spec.schema import NamespaceSchema
from partitioning.storage.alignment import (
    COMMIT_MESSAGE,
    align_schema,
    carry_indexes,
    is_aligned,
    renumber,
    restore_as_latest,
)
from partitioning.storage.roots import filesystem_of

__all__ = [
    "check_data_files",
    "commit_rewrites",
    "commit_version",
    "compact_fragments",
    "live_rows",
    "missing_data_files",
    "offsets_by_fragment",
    "replace_fragments",
    "runs",
    "write_new_fragments",
]

DEFAULT_COMMIT_ATTEMPTS = 24


def live_rows(fragment: lance.LanceFragment, meta: FragmentMetadata | None = None) -> int:
    """A fragment's rows not deleted, from its metadata (``meta``, if read already); counted
    when its deletion file does not record how many it deletes (old Lance writers)."""
    meta = meta if meta is not None else fragment.metadata
    if meta.deletion_file is None:
        return int(meta.physical_rows)
    deleted = meta.deletion_file.num_deleted_rows
    return int(meta.physical_rows) - int(deleted) if deleted is not None else int(fragment.count_rows())


def write_new_fragments(
    data: pa.Table,
    uri: str,
    schema: NamespaceSchema,
    *,
    storage_options: Mapping[str, str] | None = None,
    **kwargs: Any,
) -> list[FragmentMetadata]:
    """Uncommitted fragments numbered by position in ``schema`` (whatever exists at ``uri``)."""
    data = _aligned(data)
    with translate_lance_errors(f"write fragments to {uri}"):
        return list(
            write_fragments(
                data,
                uri,
                schema=schema.dataset_arrow,
                mode="overwrite",
                storage_options=dict(storage_options) if storage_options else None,
                **kwargs,
            )
        )


def _aligned(data: pa.Table) -> pa.Table:
    """``data`` with decimal columns copied into fresh buffers: arrow-rs (Lance) needs decimal
    buffers aligned to 16 bytes, and Arrow batches that come from Spark are aligned to 8."""
    if not any(pa.types.is_decimal(t) for t in data.schema.types):
        return data
    columns = [
        pa.chunked_array([pa.concat_arrays([chunk]) for chunk in col.chunks], type=col.type)
        if pa.types.is_decimal(col.type)
        else col
        for col in data.columns
    ]
    return pa.Table.from_arrays(columns, schema=data.schema)


def replace_fragments(
    uri: str,
    head: lance.LanceDataset,
    keep: Sequence[FragmentMetadata],
    new: Sequence[FragmentMetadata],
    storage_options: Mapping[str, str] | None,
) -> int:
    """Commit ``keep`` (existing fragments of ``head``, deletion files and all) plus ``new``
    on top of ``head``, which must be the latest version; returns the new version.

    A Lance Merge with the full fragment list: any commit made since ``head`` makes it
    fail with :class:`ConcurrentModification` rather than mixing in another writer's data.
    New fragment ids start above every id ``head`` uses or its indexes cover (an index
    keeps covering the id of a fragment that was deleted whole).
    """
    start = _next_fragment_id(head)
    numbered = []
    for i, fragment in enumerate(new):
        meta = fragment.to_json()
        meta["id"] = start + i
        numbered.append(FragmentMetadata.from_json(json.dumps(meta)))
    with translate_lance_errors(f"commit {uri}"):
        ds = lance.LanceDataset.commit(
            uri,
            LanceOperation.Merge([*keep, *numbered], head.lance_schema),
            read_version=head.version,
            storage_options=dict(storage_options) if storage_options else None,
            commit_message=COMMIT_MESSAGE,
        )
    return int(ds.version)


# Lance's compaction options for a task built from our own plan (pylance 14 needs every field).
_COMPACTION_OPTIONS: dict[str, Any] = {
    "max_rows_per_group": 1024,
    "max_bytes_per_file": None,
    "materialize_deletions": True,
    "materialize_deletions_threshold": 0.1,
    "num_threads": None,
    "batch_size": None,
    "io_buffer_size": None,
    "defer_index_remap": False,
    "index_remap_mode": "Direct",
    "compaction_mode": None,
    "enable_binary_copy": False,
    "enable_binary_copy_force": False,
    "binary_copy_read_batch_bytes": 16 * 1024 * 1024,
    "max_source_fragments": None,
    "max_source_rows": None,
    "max_source_bytes": None,
    "excluded_fragment_ids": [],
    "max_overlays_per_fragment": 10,
    "data_storage_version": None,
    "has_eager_remappable_index": None,
}


def compact_fragments(ds: lance.LanceDataset, fragment_ids: Sequence[int], target_rows: int) -> tuple[str, int]:
    """Executor side of compaction: rewrite fragments ``fragment_ids`` of ``ds`` (their live
    rows) into new uncommitted fragments of up to ``target_rows`` rows, as a Lance compaction
    task. Returns Lance's ``RewriteResult`` as JSON (the old and new fragments and the old row
    addresses, from which :func:`commit_rewrites` remaps the indexes) and the rows written."""
    wanted = set(fragment_ids)
    fragments = [f.metadata.to_json() for f in ds.get_fragments() if f.fragment_id in wanted]
    task = {
        "task": {"fragments": fragments},
        "read_version": ds.version,
        "options": {**_COMPACTION_OPTIONS, "target_rows_per_fragment": target_rows},
    }
    result = CompactionTask.from_json(json.dumps(task)).execute(ds)  # type: ignore[attr-defined]
    return str(result.json()), sum(int(f.physical_rows) for f in result.new_fragments)


def commit_rewrites(
    uri: str, head: lance.LanceDataset, rewrites: Sequence[str], storage_options: Mapping[str, str] | None
) -> int:
    """Commit compaction rewrites (:func:`compact_fragments`) on top of ``head``, the latest
    version, holding the fragments they replace; returns the new version.

    Lance's own compaction commit: every index segment covering the rewritten fragments
    (vector and scalar) is remapped to the rows' new addresses, so it covers them as
    before. Lance first reserves the new fragment ids (a version of its own), then commits
    the Rewrite read at ``head``. Every data file of the new fragments must exist
    (:func:`check_data_files`), or nothing is committed.
    """
    with translate_lance_errors(f"commit {uri}"):
        results = []
        for text in rewrites:
            meta = json.loads(text)
            meta["read_version"] = head.version
            results.append(RewriteResult.from_json(json.dumps(meta)))  # type: ignore[attr-defined]
    new = [f for r in results for f in r.new_fragments]
    check_data_files(uri, new, f"compact {uri}", storage_options)
    with translate_lance_errors(f"commit {uri}"):
        Compaction.commit(head, results)
    return int(head.version)


PARALLEL_STATS = 16


def missing_data_files(
    uri: str, fragments: Sequence[FragmentMetadata], storage_options: Mapping[str, str] | None = None
) -> list[str]:
    """The data files of ``fragments`` (in ``uri``/data) that do not exist, in order.

    One stat (a HEAD on object stores) per file, up to :data:`PARALLEL_STATS` at a time.
    """
    paths = [f"{uri.rstrip('/')}/data/{d.path}" for fragment in fragments for d in fragment.files if d.base_id is None]
    if not paths:
        return []
    fs, _ = filesystem_of(uri, storage_options)

    def gone(path: str) -> bool:
        return bool(fs.get_file_info(filesystem_of(path, storage_options)[1]).type == pafs.FileType.NotFound)

    if len(paths) <= 4:
        flags = [gone(p) for p in paths]
    else:
        with ThreadPoolExecutor(max_workers=min(PARALLEL_STATS, len(paths))) as pool:
            flags = list(pool.map(gone, paths))
    return [p for p, missing in zip(paths, flags, strict=True) if missing]


def check_data_files(
    uri: str,
    fragments: Sequence[FragmentMetadata],
    action: str,
    storage_options: Mapping[str, str] | None = None,
) -> None:
    """Refuse (:class:`ConcurrentModification`, one line naming the file) to commit fragments
    whose data files are gone, e.g. deleted by a vacuum while the write ran."""
    with translate_lance_errors(f"{action}: check the new data files"):
        missing = missing_data_files(uri, fragments, storage_options)
    if missing:
        raise ConcurrentModification(
            f"{action}: data file {missing[0]} of a new fragment is missing"
            f"{f' (and {len(missing) - 1} more)' if len(missing) > 1 else ''}; it was deleted while the write ran "
            "(a vacuum with a short retention?). Nothing was committed; run the write again"
        )


def commit_version(
    uri: str,
    schema: NamespaceSchema,
    fragments: Sequence[FragmentMetadata],
    storage_options: Mapping[str, str] | None,
    *,
    base: lance.LanceDataset | None = None,
    attempts: int = DEFAULT_COMMIT_ATTEMPTS,
    verify: bool = True,
    base_on_main: bool = False,
) -> int:
    """Commit a version holding ``base``'s fragments (if any) plus the new ``fragments``.

    The new fragments must come from :func:`write_new_fragments` with ``schema``. The
    version's content never depends on versions committed after ``base`` (crashed or
    concurrent writes, other Lance clients), so losing a race only means committing
    again; indexes other clients built after ``base`` are carried over when still valid
    (:func:`carry_indexes`). Returns the version.

    First every data file of ``fragments`` must exist (:func:`check_data_files`; skipped
    with ``verify=False`` by a caller that just checked them), or nothing is committed.
    ``base_on_main``: ``base`` was opened on the main branch, so when it is still the latest
    version the first attempt commits on it without opening the table again.
    """
    if verify:
        check_data_files(uri, fragments, f"commit {uri}", storage_options)
    if base is None:
        return _overwrite(uri, schema.dataset_arrow, list(fragments), storage_options, attempts)
    kept = {f.fragment_id for f in base.get_fragments()}
    last: ConcurrentModification | None = None
    for attempt in range(attempts):
        try:
            opened = base if base_on_main and attempt == 0 else None
            head, ahead = restore_as_latest(uri, base.version, storage_options, opened=opened)
            if not is_aligned(head, schema):
                head = align_schema(uri, head, schema, storage_options)
            keep = [f.metadata for f in head.get_fragments() if f.fragment_id in kept]
            new = renumber(fragments, schema.dataset_arrow, head.lance_schema)
            version = replace_fragments(uri, head, keep, new, storage_options)
            if ahead is None:
                return version
            return carry_indexes(uri, ahead, base.version, version, kept, storage_options)
        except ConcurrentModification as exc:
            last = exc
            time.sleep(random.uniform(0.005, 0.02) * (attempt + 1))
    raise ConcurrentModification(f"gave up committing {uri} after {attempts} attempts: {last}") from last


def _overwrite(
    uri: str,
    schema: pa.Schema,
    fragments: list[FragmentMetadata],
    storage_options: Mapping[str, str] | None,
    attempts: int,
) -> int:
    # No read version: an Overwrite replaces whatever a dataset there holds (a version an
    # earlier attempt of this write committed), so there is nothing to look up first.
    last: ConcurrentModification | None = None
    for attempt in range(attempts):
        try:
            with translate_lance_errors(f"commit {uri}"):
                ds = lance.LanceDataset.commit(
                    uri,
                    LanceOperation.Overwrite(schema, fragments),
                    read_version=None,
                    storage_options=dict(storage_options) if storage_options else None,
                    commit_message=COMMIT_MESSAGE,
                )
            return int(ds.version)
        except ConcurrentModification as exc:
            last = exc
            time.sleep(random.uniform(0.005, 0.02) * (attempt + 1))
    raise ConcurrentModification(f"gave up committing {uri} after {attempts} attempts: {last}") from last


def _next_fragment_id(head: lance.LanceDataset) -> int:
    ids = [f.fragment_id for f in head.get_fragments()]
    with translate_lance_errors(f"read the indexes of {head.uri}"):
        covered = [max(seg.fragment_ids, default=-1) for d in head.describe_indices() for seg in d.segments]
    return max([*ids, *covered], default=-1) + 1


def offsets_by_fragment(addresses: Sequence[int]) -> dict[int, list[int]]:
    """Row addresses of one table (fragment id in the high 32 bits) as fragment id -> sorted
    unique row offsets (what Lance's ``delete_rows`` takes)."""
    values = np.asarray(addresses, dtype=np.int64)
    if values.size > 1 and not bool(np.all(values[1:] > values[:-1])):  # grouped addresses arrive sorted, unique
        values = np.unique(values)
    fragment_ids = values >> 32
    return {int(fragment_ids[a]): (values[a:b] & 0xFFFFFFFF).tolist() for a, b in runs(fragment_ids)}


def runs(ordered: np.ndarray) -> Iterator[tuple[int, int]]:
    """(start, end) of each run of equal values in sorted ``ordered``."""
    if ordered.size == 0:
        return
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    yield from zip(starts.tolist(), [*starts[1:].tolist(), ordered.size], strict=True)
