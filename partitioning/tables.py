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
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Mapping, Sequence
from typing import Any

import lance
import pyarrow as pa
from lance import LanceOperation
from lance.fragment import FragmentMetadata, write_fragments
from lance.schema import LanceSchema

from partitioning.errors import ConcurrentModification, SchemaError, translate_lance_errors
from partitioning.schema import DATASET_FIELD_ID_KEY, NamespaceSchema, check_widening, dataset_field_id, field_id_of

__all__ = ["align_schema", "commit_version", "dataset_columns", "is_aligned", "renumber", "write_new_fragments"]

DEFAULT_COMMIT_ATTEMPTS = 24


def write_new_fragments(
    data: pa.Table,
    uri: str,
    schema: NamespaceSchema,
    *,
    storage_options: Mapping[str, str] | None = None,
    **kwargs: Any,
) -> list[FragmentMetadata]:
    """Uncommitted fragments numbered by position in ``schema`` (whatever exists at ``uri``)."""
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
    """A new dataset version holding ``base``'s rows with ``schema``'s columns.

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
    opts = dict(storage_options) if storage_options else None
    with translate_lance_errors(f"align the schema of {uri}"):
        ds = base
        if lance.dataset(uri, storage_options=opts).version != base.version:
            ds.restore()
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


def _latest_or_none(uri: str, storage_options: Mapping[str, str] | None) -> lance.LanceDataset | None:
    try:
        return lance.dataset(uri, storage_options=dict(storage_options) if storage_options else None)
    except ValueError:
        return None


def commit_version(
    uri: str,
    schema: NamespaceSchema,
    fragments: Sequence[FragmentMetadata],
    storage_options: Mapping[str, str] | None,
    *,
    base: lance.LanceDataset | None = None,
    attempts: int = DEFAULT_COMMIT_ATTEMPTS,
) -> int:
    """Commit a version holding ``base``'s fragments (if any) plus the new ``fragments``.

    The new fragments must come from :func:`write_new_fragments` with ``schema``. The
    version's content does not depend on the dataset's latest version, so losing a race
    to another writer only means committing again on top of it. Returns the version.
    """
    new_schema: LanceSchema | pa.Schema = schema.dataset_arrow
    base_fragments: list[FragmentMetadata] = []
    new = list(fragments)
    if base is not None:
        kept = {f.fragment_id for f in base.get_fragments()}
        current = base if is_aligned(base, schema) else align_schema(uri, base, schema, storage_options)
        base_fragments = [f.metadata for f in current.get_fragments() if f.fragment_id in kept]
        new_schema = current.lance_schema
        new = renumber(new, schema.dataset_arrow, current.lance_schema)
    last: ConcurrentModification | None = None
    for attempt in range(attempts):
        latest = _latest_or_none(uri, storage_options)
        try:
            with translate_lance_errors(f"commit {uri}"):
                ds = lance.LanceDataset.commit(
                    uri,
                    LanceOperation.Overwrite(new_schema, base_fragments + new),
                    read_version=latest.version if latest is not None else None,
                    storage_options=dict(storage_options) if storage_options else None,
                )
            return int(ds.version)
        except ConcurrentModification as exc:
            last = exc
            time.sleep(random.uniform(0.005, 0.02) * (attempt + 1))
    raise ConcurrentModification(f"gave up committing {uri} after {attempts} attempts: {last}") from last
