"""Bringing a partition dataset in line with ``__manifest``: its columns, and the version a commit builds on.

Executors write fragments as if each dataset were new
(:func:`partitioning.storage.datasets.write_new_fragments`), so Lance numbers their columns
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
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import lance
import pyarrow as pa
import pyarrow.compute as pc
from lance import LanceOperation
from lance.dataset import Index
from lance.fragment import FragmentMetadata
from lance.schema import LanceSchema

from partitioning.errors import SchemaError, translate_lance_errors
from partitioning.spec.field_ids import DATASET_FIELD_ID_KEY, dataset_field_id, field_id_of
from partitioning.spec.schema import NamespaceSchema, check_widening

__all__ = [
    "align_schema",
    "as_latest",
    "carry_indexes",
    "dataset_columns",
    "fragment_state",
    "is_aligned",
    "latest_keeping_indexes",
    "reconcile",
    "renumber",
]


COMMIT_MESSAGE = "lance_partitioned"
_MESSAGE_KEY = "__lance_commit_message"
_log = logging.getLogger(__name__)


# -- columns: the namespace schema in a partition dataset -----------------------------------------
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


# -- versions: the one __manifest records, and what other clients committed after it --------------
def as_latest(uri: str, version: int, storage_options: Mapping[str, str] | None) -> lance.LanceDataset:
    """The dataset with ``version``'s content as its latest version (restored if others followed)."""
    return restore_as_latest(uri, version, storage_options)[0]


def latest_keeping_indexes(
    uri: str,
    version: int,
    storage_options: Mapping[str, str] | None,
    *,
    opened: lance.LanceDataset | None = None,
) -> lance.LanceDataset:
    """:func:`as_latest` for maintenance: ``version``'s content as the latest version, plus
    the indexes other clients built since (:func:`carry_indexes`), so a delete or a
    compaction committed on top keeps them. ``opened``: as in :func:`restore_as_latest`."""
    head, ahead = restore_as_latest(uri, version, storage_options, opened=opened)
    if ahead is None:
        return head
    kept = {f.fragment_id for f in head.get_fragments()}
    carried = carry_indexes(uri, ahead, version, head.version, kept, storage_options)
    if carried == head.version:
        return head
    with translate_lance_errors(f"open {uri}"):
        return lance.dataset(uri, version=carried, storage_options=dict(storage_options) if storage_options else None)


def restore_as_latest(
    uri: str,
    version: int,
    storage_options: Mapping[str, str] | None,
    *,
    opened: lance.LanceDataset | None = None,
) -> tuple[lance.LanceDataset, lance.LanceDataset | None]:
    """:func:`as_latest`, plus the latest version as it was before the restore, if it was ahead.

    The restore is a Lance ``Restore`` committed with :data:`COMMIT_MESSAGE` (``ds.restore()``
    takes no message), so vacuum knows it as this project's (:func:`partitioning.storage.orphans.made_here`).
    ``opened``: ``uri`` opened at ``version`` on its main branch by the caller; returned as it
    is when ``version`` is still the latest (no second open of the table).
    """
    if opened is not None and opened.version == version and opened.latest_version == version:
        return opened, None
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
            elif not isinstance(op, LanceOperation.Restore) and not is_own_commit(txn):
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


def is_own_commit(txn: Any) -> bool:
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
