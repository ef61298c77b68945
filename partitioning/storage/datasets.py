"""The physical side of partition tables: fragment writes, schema alignment, version commits.

Executors write fragments as if each dataset were new, so Lance numbers their columns
by position in the writer's namespace schema. At commit time the driver brings the
dataset, as of the version the manifest points at, to that schema with Lance's own
schema changes (drop, rename and add are metadata-only; a widened column is cast,
which rewrites that one column of that partition once), then renumbers the new
fragments' columns to the dataset's ids. Old fragments are never rewritten otherwise.

Lance drops ``lance:field_id`` from the schemas it writes, so each top-level column of
a partition dataset records its namespace id under ``lance_partitioned:field_id``.
Datasets without it (built by other Lance clients) are matched by column name.

Other Lance clients may commit to a partition dataset (its versions after the one the
manifest records). ``__manifest`` is the source of truth: a write builds on the recorded
version, so another client's appends, deletes or updates are not part of the new
version (they stay in the dataset's history, nothing is deleted, and a warning names
them), while the indexes it built are carried over when they are still valid for the
new version (see :func:`carry_indexes`).
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import lance
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
from lance import LanceOperation
from lance.dataset import Index
from lance.fragment import FragmentMetadata, write_fragments
from lance.optimize import Compaction, CompactionTask, RewriteResult
from lance.schema import LanceSchema

from partitioning.errors import ConcurrentModification, InvalidInput, SchemaError, translate_lance_errors
from partitioning.spec.schema import (
    DATASET_FIELD_ID_KEY,
    NamespaceSchema,
    check_widening,
    dataset_field_id,
    field_id_of,
)
from partitioning.storage.locations import TABLE_DIR_RE
from partitioning.storage.manifest import filesystem_of

__all__ = [
    "align_schema",
    "as_latest",
    "carry_indexes",
    "check_data_files",
    "check_namespace_root",
    "check_new_root",
    "commit_rewrites",
    "commit_version",
    "compact_fragments",
    "dataset_columns",
    "fragment_state",
    "is_aligned",
    "latest_keeping_indexes",
    "missing_data_files",
    "reconcile",
    "renumber",
    "replace_fragments",
    "write_new_fragments",
]

DEFAULT_COMMIT_ATTEMPTS = 24
COMMIT_MESSAGE = "lance_partitioned"
_log = logging.getLogger(__name__)


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


def dataset_columns(dataset_schema: pa.Schema, schema: NamespaceSchema) -> dict[str, str]:
    """Namespace column -> partition dataset column: by recorded namespace id, else by
    name for a dataset column that records no id."""
    by_id = {dataset_field_id(f): f.name for f in dataset_schema if dataset_field_id(f) is not None}
    untagged = {f.name for f in dataset_schema if dataset_field_id(f) is None}
    out = {}
    for f in schema.arrow:
        fid = field_id_of(f)
        if fid in by_id:
            out[f.name] = by_id[fid]
        elif f.name in untagged:
            out[f.name] = f.name
    return out


def reconcile(
    table: pa.Table, mapping: Mapping[str, str], needed: Sequence[str], schema: NamespaceSchema, object_id: str
) -> pa.Table:
    """Rows read from a partition dataset, shaped as the namespace's ``needed`` columns:
    ``mapping`` (see :func:`dataset_columns`) finds each column, a missing one is NULL,
    and a narrower type is cast."""
    columns = []
    for name in needed:
        target = schema.arrow.field(name)
        if name not in mapping:
            columns.append(pa.nulls(table.num_rows, target.type))
            continue
        col = table.column(mapping[name])
        if col.type != target.type:
            try:
                col = pc.cast(col, target.type, safe=True)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
                raise SchemaError(
                    f"column {name!r} of partition table {object_id}: cannot cast {col.type} to {target.type}"
                ) from exc
        columns.append(col)
    fields = [pa.field(n, schema.arrow.field(n).type) for n in needed]
    return pa.Table.from_arrays(columns, schema=pa.schema(fields))


def is_aligned(dataset: lance.LanceDataset, schema: NamespaceSchema) -> bool:
    """Whether the dataset's columns are the schema's: same order, names, types and ids."""
    target = schema.dataset_arrow
    have = dataset.schema
    return len(have) == len(target) and all(
        a.name == b.name and a.type == b.type and dataset_field_id(a) == dataset_field_id(b)
        for a, b in zip(have, target, strict=True)
    )


def align_schema(
    uri: str, base: lance.LanceDataset, schema: NamespaceSchema, storage_options: Mapping[str, str] | None
) -> lance.LanceDataset:
    """A new dataset version holding ``base``'s rows with ``schema``'s columns; ``base``
    must be the latest version (see :func:`as_latest`).

    Columns the namespace dropped are dropped, renamed ones renamed, widened ones cast,
    new ones added as all-NULL; every column is tagged with its namespace id.
    """
    target = schema.dataset_arrow
    mapping = dataset_columns(base.schema, schema)
    for f in target:
        if f.name in mapping:
            have = base.schema.field(mapping[f.name]).type
            if have != f.type:
                try:
                    check_widening(f.name, have, f.type)
                except SchemaError as exc:
                    raise SchemaError(f"partition table {uri}: {exc}") from exc
    with translate_lance_errors(f"align the schema of {uri}"):
        ds = base
        drops = [n for n in ds.schema.names if n not in set(mapping.values())]
        if drops:
            ds.drop_columns(drops)
        renames = [(src, dst) for dst, src in mapping.items() if src != dst]
        if renames:
            away: list[Any] = [{"path": src, "name": f"__renaming_{i}"} for i, (src, _) in enumerate(renames)]
            back: list[Any] = [{"path": f"__renaming_{i}", "name": dst} for i, (_, dst) in enumerate(renames)]
            ds.alter_columns(*away)
            ds.alter_columns(*back)
        casts: list[Any] = [
            {"path": f.name, "data_type": f.type}
            for f in target
            if f.name in mapping and ds.schema.field(f.name).type != f.type
        ]
        if casts:
            ds.alter_columns(*casts)
        adds = [f for f in target if f.name not in mapping]
        if adds:
            ds.add_columns(adds)
        tags: dict[str, dict[str, str | None]] = {
            f.name: {DATASET_FIELD_ID_KEY: str(dataset_field_id(f))}
            for f in target
            if dataset_field_id(ds.schema.field(f.name)) != dataset_field_id(f)
        }
        if tags:
            ds.update_field_metadata(tags)
    return ds


def _lance_ids(fields: Sequence[Any], prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], int]:
    out: dict[tuple[str, ...], int] = {}
    for f in fields:
        path = (*prefix, f.name())
        out[path] = f.id()
        out.update(_lance_ids(f.children(), path))
    return out


def renumber(fragments: Sequence[FragmentMetadata], written: pa.Schema, target: LanceSchema) -> list[FragmentMetadata]:
    """Point fragments written positionally for ``written`` at ``target``'s field ids."""
    src = _lance_ids(LanceSchema.from_pyarrow(written).fields())
    dst = _lance_ids(target.fields())
    missing = sorted(".".join(p) for p in src if p not in dst)
    if missing:
        raise SchemaError(f"partition dataset has no column {missing[0]!r} after aligning its schema")
    ids = {i: dst[p] for p, i in src.items()}
    if all(k == v for k, v in ids.items()):
        return list(fragments)
    out = []
    for fragment in fragments:
        meta = fragment.to_json()
        for data_file in meta["files"]:
            data_file["fields"] = [ids.get(i, i) for i in data_file["fields"]]
        out.append(FragmentMetadata.from_json(json.dumps(meta)))
    return out


def as_latest(uri: str, version: int, storage_options: Mapping[str, str] | None) -> lance.LanceDataset:
    """The dataset with ``version``'s content as its latest version (restored if others followed)."""
    return restore_as_latest(uri, version, storage_options)[0]


def latest_keeping_indexes(uri: str, version: int, storage_options: Mapping[str, str] | None) -> lance.LanceDataset:
    """:func:`as_latest` for maintenance: ``version``'s content as the latest version, plus
    the indexes other clients built since (:func:`carry_indexes`), so a delete or a
    compaction committed on top keeps them."""
    head, ahead = restore_as_latest(uri, version, storage_options)
    if ahead is None:
        return head
    kept = {f.fragment_id for f in head.get_fragments()}
    carried = carry_indexes(uri, ahead, version, head.version, kept, storage_options)
    if carried == head.version:
        return head
    with translate_lance_errors(f"open {uri}"):
        return lance.dataset(uri, version=carried, storage_options=dict(storage_options) if storage_options else None)


def restore_as_latest(
    uri: str, version: int, storage_options: Mapping[str, str] | None
) -> tuple[lance.LanceDataset, lance.LanceDataset | None]:
    """:func:`as_latest`, plus the latest version as it was before the restore, if it was ahead.

    The restore is a Lance ``Restore`` committed with :data:`COMMIT_MESSAGE` (``ds.restore()``
    takes no message), so vacuum knows it as this project's (:func:`partitioning.storage.orphans.made_here`).
    """
    opts = dict(storage_options) if storage_options else None
    with translate_lance_errors(f"open {uri}"):
        latest = lance.dataset(uri, storage_options=opts)
        if latest.version == version:
            return latest, None
        ds = lance.LanceDataset.commit(
            uri,
            LanceOperation.Restore(version),
            read_version=latest.version,
            storage_options=opts,
            commit_message=COMMIT_MESSAGE,
        )
        return ds, latest


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
) -> int:
    """Commit a version holding ``base``'s fragments (if any) plus the new ``fragments``.

    The new fragments must come from :func:`write_new_fragments` with ``schema``. The
    version's content never depends on versions committed after ``base`` (crashed or
    concurrent writes, other Lance clients), so losing a race only means committing
    again; indexes other clients built after ``base`` are carried over when still valid
    (:func:`carry_indexes`). Returns the version.

    First every data file of ``fragments`` must exist (:func:`check_data_files`; skipped
    with ``verify=False`` by a caller that just checked them), or nothing is committed.
    """
    if verify:
        check_data_files(uri, fragments, f"commit {uri}", storage_options)
    if base is None:
        return _overwrite(uri, schema.dataset_arrow, list(fragments), storage_options, attempts)
    kept = {f.fragment_id for f in base.get_fragments()}
    last: ConcurrentModification | None = None
    for attempt in range(attempts):
        try:
            head, ahead = restore_as_latest(uri, base.version, storage_options)
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


def fragment_state(fragment: FragmentMetadata) -> tuple[Any, ...]:
    meta = fragment.to_json()
    return (sorted(f["path"] for f in meta["files"]), meta.get("deletion_file"), meta.get("physical_rows"))


def _versions_after(ahead: lance.LanceDataset, base_version: int) -> Iterator[tuple[int, Any]]:
    """(version, transaction or None) for each version of ``ahead``'s history after ``base_version``.

    None also for a transaction pylance cannot read back (pylance 14 raises TypeError on a
    Rewrite that remapped indexes, as every compaction of an indexed table is)."""
    for version in range(base_version + 1, ahead.version + 1):
        try:
            yield version, ahead.read_transaction(version)
        except (OSError, ValueError, RuntimeError, TypeError):
            yield version, None


def carry_indexes(
    uri: str,
    ahead: lance.LanceDataset,
    base_version: int,
    version: int,
    kept: set[int],
    storage_options: Mapping[str, str] | None,
) -> int:
    """Re-add to ``version`` the index segments other clients built after ``base_version``.

    ``ahead`` is the dataset's latest version before the write restored ``base_version``
    (the version the manifest records) and committed ``version`` on top of it. A segment
    still present in ``ahead`` and added by a ``CreateIndex`` commit after ``base_version``
    is carried over when its columns are still in the schema and every fragment it covers
    is one of ``kept`` (the base's fragments) and is, in ``version``, exactly as it was in
    the version the index commit was built on (same data files, same deletion file); the
    segments it replaced (``optimize_indices``) are removed. Any other segment is left
    behind: it indexes rows the manifest does not include, rewritten fragments or rows
    deleted since, so it would give wrong answers. Other clients' data commits after ``base_version`` are not included
    (a warning names them); they stay in the dataset's history and nothing is deleted.
    Returns the version holding the carried segments (``version`` when there is none).
    """
    opts = dict(storage_options) if storage_options else None
    with translate_lance_errors(f"carry over the indexes of {uri}"):
        present = {seg.uuid for d in ahead.describe_indices() for seg in d.segments}
        added: dict[str, tuple[Index, int]] = {}
        replaced: dict[str, Index] = {}
        foreign = []
        for number, txn in _versions_after(ahead, base_version):
            op = txn.operation if txn is not None else None
            if isinstance(op, LanceOperation.CreateIndex):
                added.update({i.uuid: (i, txn.read_version) for i in op.new_indices if i.uuid in present})
                replaced.update({i.uuid: i for i in op.removed_indices if i.uuid not in present})
            elif not isinstance(op, LanceOperation.Restore) and not _ours(txn):
                foreign.append(number)
        if foreign:
            _log.warning(
                "partition table %s: versions %s were committed after the version __manifest records (%d) by "
                "another client; this write builds on version %d, so their changes are not included "
                "(they stay in the dataset's history)",
                uri,
                ", ".join(map(str, foreign)),
                base_version,
                base_version,
            )
        if not added:
            return version
        ours = lance.dataset(uri, version=version, storage_options=opts)
        carried = _still_valid(ahead, ours, list(added.values()), kept)
        if not carried:
            return version
        names = {i.name for i in carried}
        ours_uuids = {seg.uuid for d in ours.describe_indices() for seg in d.segments}
        gone = [i for u, i in replaced.items() if u in ours_uuids and i.name in names]
        ds = lance.LanceDataset.commit(
            uri,
            LanceOperation.CreateIndex(carried, gone),
            read_version=version,
            storage_options=opts,
            commit_message=COMMIT_MESSAGE,
        )
    return int(ds.version)


def _ours(txn: Any) -> bool:
    return txn is not None and (txn.transaction_properties or {}).get(_MESSAGE_KEY) == COMMIT_MESSAGE


def _still_valid(
    ahead: lance.LanceDataset, ours: lance.LanceDataset, candidates: Sequence[tuple[Index, int]], kept: set[int]
) -> list[Index]:
    """The candidate segments (each with the version its index commit read) valid in ``ours``."""
    fragments = {f.fragment_id: fragment_state(f.metadata) for f in ours.get_fragments()}
    fields = set(_lance_ids(ours.lance_schema.fields()).values())
    existing = {seg.uuid for d in ours.describe_indices() for seg in d.segments}
    built: dict[int, dict[int, tuple[Any, ...]]] = {}
    out = []
    for index, read_version in candidates:
        covered = set(index.fragment_ids)
        if index.uuid in existing or not covered <= kept or not set(index.fields) <= fields:
            continue
        if read_version not in built:
            try:
                then = ahead.checkout_version(read_version).get_fragments()
            except (OSError, ValueError, RuntimeError):
                then = []
            built[read_version] = {f.fragment_id: fragment_state(f.metadata) for f in then}
        state = built[read_version]
        if all(fid in fragments and state.get(fid) == fragments[fid] for fid in covered):
            out.append(index)
    return out


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


_DATASET_MARKER = "_versions"
_MESSAGE_KEY = "__lance_commit_message"


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
