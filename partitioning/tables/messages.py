"""Commit messages: what write tasks report to the driver, and the driver's checks of them.

A task's :class:`partitioning.tables.fragments.FragmentWriter` yields one message row per
flushed partition buffer (:func:`message_schema`: the table's id and location, its new
fragments as JSON, the partition values in ``__part_<field_id>`` columns), or one row
reporting rows it refused (:data:`REJECTED`). Before committing, the driver refuses a write
with rejected rows (:func:`check_rejected`), groups the rows into one :class:`Pending` per
table location (:func:`group_messages`), checks that their data files exist
(:func:`check_files`) and finds the table each partition goes to (:func:`place_pending`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import lance
import pyarrow as pa
from lance.fragment import FragmentMetadata

from partitioning.errors import ConcurrentModification, SchemaError
from partitioning.namespace import PartitionedNamespace, PartitionKey, PartitionTable, format_partition_value
from partitioning.spec.schema import NamespaceSchema
from partitioning.spec.values import canonical_float
from partitioning.spec.vectors import length_error, vector_dimension
from partitioning.stats.bounds import StatsChange, TableStats
from partitioning.storage.datasets import PARALLEL_STATS, commit_version, missing_data_files, write_new_fragments
from partitioning.storage.paths import table_uri

__all__ = ["Pending", "check_files", "check_rejected", "group_messages", "message_schema", "place_pending", "relocate"]


PART_PREFIX = "__part_"

# The column statistics of the rows a message's fragments hold (TableStats JSON, no version).
STATS = "stats"

# A message row with this column set reports rows a task refused ({column: count}, JSON)
# instead of fragments; the driver then refuses the whole write (:func:`check_rejected`).
REJECTED = "rejected"


def part_column(field_id: str) -> str:
    return f"{PART_PREFIX}{field_id}"


def message_schema(part_fields: Sequence[tuple[str, pa.DataType]]) -> pa.Schema:
    """Commit messages: one row per flushed buffer of one partition."""
    return pa.schema(
        [
            pa.field("object_id", pa.string(), nullable=False),
            pa.field("location", pa.string(), nullable=False),
            pa.field("fragments", pa.string(), nullable=False),
            pa.field("num_rows", pa.int64(), nullable=False),
            pa.field(STATS, pa.string()),
            *[pa.field(part_column(fid), t) for fid, t in part_fields],
            pa.field(REJECTED, pa.string()),
        ]
    )


def describe_key(part_fields: Sequence[tuple[str, Any]], key: PartitionKey) -> str:
    """``country='US', ts_day=10``: a partition as its field ids and values."""
    shown = [
        f"{fid}={value!r}" if isinstance(value, str) or value is None else f"{fid}={format_partition_value(value)}"
        for (fid, _), value in zip(part_fields, key, strict=True)
    ]
    return ", ".join(shown) or "(unpartitioned)"


@dataclass
class Pending:
    """The written-but-uncommitted fragments of one partition; ``stats``: their rows' column
    statistics (None when a message came without them)."""

    key: PartitionKey
    object_id: str
    location: str
    fragments: list[FragmentMetadata]
    rows: int
    stats: TableStats | None = field(default_factory=lambda: TableStats(0))

    def stats_change(self, base_version: int | None) -> StatsChange | None:
        """What committing these fragments on table version ``base_version`` (None: alone) does to its statistics."""
        return StatsChange(self.stats, base_version) if self.stats is not None else None


def check_rejected(messages: pa.Table, schema: NamespaceSchema) -> pa.Table:
    """The fragment messages, after refusing the write if any task reported rejected rows."""
    if REJECTED not in messages.column_names:
        return messages
    reports = messages.column(REJECTED)
    if reports.null_count == len(reports):
        return messages
    totals: dict[str, int] = {}
    for text in reports.drop_null().to_pylist():
        for name, count in json.loads(text).items():
            totals[name] = totals.get(name, 0) + int(count)
    errors = [length_error(name, vector_dimension(schema.field_by_name(name).type), n) for name, n in totals.items()]
    if len(errors) == 1:
        raise errors[0]
    raise SchemaError("; ".join(str(e) for e in errors))


def group_messages(messages: pa.Table, field_ids: Sequence[str]) -> dict[str, Pending]:
    """Fragments per table location; every partition key must map to one location."""
    pending: dict[str, Pending] = {}
    location_of: dict[PartitionKey, str] = {}
    for row in messages.to_pylist():
        key = tuple(canonical_float(row[part_column(fid)]) for fid in field_ids)
        if location_of.setdefault(key, row["location"]) != row["location"]:
            raise ConcurrentModification(
                f"partition {key} was written to two locations ({location_of[key]}, {row['location']}) in one write"
            )
        entry = pending.setdefault(row["location"], Pending(key, row["object_id"], row["location"], [], 0))
        entry.fragments.extend(FragmentMetadata.from_json(json.dumps(f)) for f in json.loads(row["fragments"]))
        entry.rows += row["num_rows"]
        added = TableStats.from_message(row[STATS]) if row.get(STATS) else None
        entry.stats = entry.stats.merged(added) if entry.stats is not None and added is not None else None
    return pending


def relocate(
    pending: Pending,
    target_id: str,
    target: str,
    ns: PartitionedNamespace,
    schema: NamespaceSchema,
    max_rows_per_file: int,
) -> Pending:
    """Move fragments written under a losing location into the partition's real table.

    Happens only when another writer created the same new partition concurrently; the
    data is re-written under the winner's location and the old files become orphans.
    """
    source_uri = table_uri(ns.root, pending.object_id, pending.location)
    commit_version(source_uri, schema, pending.fragments, ns.storage_options)
    data = lance.dataset(source_uri, storage_options=ns.storage_options).to_table()
    fragments = write_new_fragments(
        data,
        table_uri(ns.root, target_id, target),
        schema,
        storage_options=ns.storage_options,
        max_rows_per_file=max_rows_per_file,
    )
    return Pending(pending.key, target_id, target, fragments, pending.rows, pending.stats)


def place_pending(
    ns: PartitionedNamespace,
    pending: dict[str, Pending],
    spec_id: int,
    schema: NamespaceSchema,
    max_rows_per_file: int,
) -> list[tuple[Pending, dict[str, Any], PartitionTable | None]]:
    """Each pending entry with its partition values and the table that already holds that
    partition (None: a new one). An entry written under a location another writer's new
    table won meanwhile is moved there first (:func:`relocate`); ``pending`` is updated."""
    spec = ns.specs[spec_id]
    found = ns.find_partitions(spec.spec_id, [entry.key for entry in pending.values()])
    placed = []
    for location in list(pending):
        entry = pending[location]
        values = dict(zip(spec.field_ids, entry.key, strict=True))
        existing = found.get(tuple(canonical_float(v) for v in entry.key))
        if existing is not None and existing.location != entry.location:
            entry = relocate(entry, existing.object_id, existing.location, ns, schema, max_rows_per_file)
            del pending[location]
            pending[entry.location] = entry
        placed.append((entry, values, existing))
    return placed


def check_files(
    root: str,
    pending: Iterable[Pending],
    field_ids: Sequence[str],
    storage_options: Mapping[str, str] | None = None,
) -> None:
    """Every new fragment's data files exist (one stat each, in parallel), or the write
    fails naming the partition and the file, before anything is committed."""
    entries = list(pending)
    with ThreadPoolExecutor(max_workers=min(PARALLEL_STATS, max(1, len(entries)))) as pool:
        missing = list(
            pool.map(
                lambda p: missing_data_files(table_uri(root, p.object_id, p.location), p.fragments, storage_options),
                entries,
            )
        )
    for entry, files in zip(entries, missing, strict=True):
        if files:
            where = describe_key([(fid, None) for fid in field_ids], entry.key)
            raise ConcurrentModification(
                f"write to {root}: partition {where}: data file {files[0]} is missing"
                f"{f' (and {len(files) - 1} more)' if len(files) > 1 else ''}; it was deleted while the write ran "
                "(a vacuum with a short retention?). Nothing was committed; run the write again"
            )
