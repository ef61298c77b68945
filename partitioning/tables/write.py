"""The write protocol, Spark-free: the driver commit, and :func:`write_table` running it in-process.

1. :class:`partitioning.tables.fragments.FragmentWriter` (picklable, runs in tasks) turns
   Arrow batches that carry partition-value columns into Lance fragments under each
   partition's table location, and yields small commit messages
   (:mod:`partitioning.tables.messages`). Nothing becomes visible.
2. :func:`commit_write` (driver) commits each touched dataset as a new version whose
   fragments are exactly those of the version the manifest points at plus the new
   ones, then makes ONE ``__manifest`` commit that moves every ``read_version``.
   On a manifest conflict it re-reads, re-bases the dataset commits and retries.

Dataset versions that no manifest commit points at (from failed or retried writes)
are never read, so a crash before the manifest commit leaves nothing visible.
:func:`conform_table` applies the write-side schema rules to input rows first.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal

import pyarrow as pa

from partitioning.errors import ConcurrentModification, SchemaError
from partitioning.namespace import PartitionedNamespace, PartitionTable, TableCommit
from partitioning.spec.schema import NamespaceSchema
from partitioning.spec.vectors import as_lists, is_ml_vector_type, is_vector_type
from partitioning.state.commit_rows import check_partition_value_sizes
from partitioning.storage.datasets import DEFAULT_COMMIT_ATTEMPTS, commit_version
from partitioning.storage.guard import Guard, guarded
from partitioning.storage.history import Operation, version_of_write
from partitioning.storage.intents import Intent
from partitioning.storage.paths import check_namespace_root, table_uri
from partitioning.tables.fragments import (
    DEFAULT_MAX_ROWS_PER_FILE,
    FragmentWriter,
    add_partition_columns,
    partition_keys,
)
from partitioning.tables.messages import Pending, check_files, check_rejected, group_messages, place_pending

__all__ = [
    "PARALLEL_COMMITS",
    "CommitResult",
    "WriteMode",
    "already_committed",
    "commit_write",
    "conform_table",
    "write_table",
]

_log = logging.getLogger("lance_partitioned")
WriteMode = Literal["append", "overwrite", "overwrite_partitions"]
WRITE_MODES: tuple[str, ...] = ("append", "overwrite", "overwrite_partitions", "error", "ignore")
# Dataset commits of one write run this many at a time (pylance releases the GIL).
PARALLEL_COMMITS = 8


@dataclass(frozen=True)
class CommitResult:
    """What one write did. ``skipped`` says why nothing was committed, if so."""

    root: str
    mode: str
    manifest_version: int | None
    rows_written: int = 0
    partitions_touched: int = 0
    partitions_created: int = 0
    fragments_written: int = 0
    attempts: int = 0
    write_id: str | None = None
    skipped: str | None = None

    def summary(self) -> str:
        if self.skipped:
            return f"{self.root}: nothing written ({self.skipped})"
        return (
            f"{self.root}: {self.rows_written:,} rows into {self.partitions_touched} partitions "
            f"({self.partitions_created} new, {self.fragments_written} fragments), mode={self.mode}, "
            f"__manifest v{self.manifest_version}"
        )


def already_committed(ns: PartitionedNamespace, mode: str, write_id: str | None) -> CommitResult | None:
    """A skipped result when ``write_id`` was committed before (``ns`` must be fresh), logged
    in one INFO line naming the id and the version that committed it (Delta's ``txnAppId``
    rule: a write id commits once, whatever rows a later write under it carries)."""
    if write_id is None or not ns.write_id_committed(write_id):
        return None
    at = version_of_write(ns.root, write_id, storage_options=ns.storage_options)
    where = f"at __manifest v{at}" if at is not None else "in an earlier __manifest version"
    _log.info("write_id %r was committed %s; this write to %s commits nothing", write_id, where, ns.root)
    skipped = f"write_id {write_id!r} was already committed {where}"
    return CommitResult(ns.root, mode, ns.manifest_version, write_id=write_id, skipped=skipped)


def commit_write(
    ns: PartitionedNamespace,
    messages: pa.Table,
    *,
    mode: WriteMode = "append",
    spec_id: int | None = None,
    schema: NamespaceSchema | None = None,
    write_id: str | None = None,
    max_attempts: int = DEFAULT_COMMIT_ATTEMPTS,
    max_rows_per_file: int = DEFAULT_MAX_ROWS_PER_FILE,
    operation: Operation | None = None,
    naming_seed: bytes | None = None,
    guard: Guard | None = None,
    intent: Intent | None = None,
    replace: Callable[[PartitionedNamespace], Sequence[str]] | None = None,
) -> CommitResult:
    """Driver side of a write: dataset commits, then ONE ``__manifest`` commit.

    ``replace`` (with mode ``overwrite_partitions``): for the state an attempt commits on,
    the ids of the tables the write replaces besides those it writes (an overwrite of the
    partitions a condition selects); the same commit removes them.

    ``naming_seed`` is the seed the write's :class:`FragmentWriter` named new partitions
    with (its ``planner.seed``): the first attempt then does not look for those names in
    ``__manifest``, where nothing can hold them yet (:func:`partitioning.state.commits.commit_once`).

    The commit records ``operation`` (default ``WRITE`` with the mode and write id) with
    the write's metrics added: rows, bytes and files added, partitions touched, created and
    (overwrite) removed, and ``duration_ms`` from this call to the commit.

    ``schema`` is the namespace schema the fragments were written with (default: the
    current one). If the namespace schema changes while the write runs, the write
    fails with :class:`ConcurrentModification` and nothing of it becomes visible.

    Before the dataset commits of each attempt, every new fragment's data files must
    exist (one stat per file, in parallel); a missing one fails the write naming the
    partition and the file, with nothing committed. The caller holds a lease
    (``guard``, :func:`partitioning.storage.guard.guarded`) from before the fragments were written, so
    that vacuum keeps them; the ``__manifest`` commit goes through its protected path.
    ``intent``: the committer's own exclusive intent, removed by this commit
    (:mod:`partitioning.storage.intents`).
    """
    started = time.monotonic()
    if mode not in ("append", "overwrite", "overwrite_partitions"):
        raise SchemaError(f"unknown write mode {mode!r}; allowed: append, overwrite, overwrite_partitions")
    spec = ns.specs[spec_id] if spec_id is not None else ns.current_spec
    written = schema if schema is not None else ns.namespace_schema
    pending = group_messages(check_rejected(messages, written), spec.field_ids)
    last_error: ConcurrentModification | None = None
    for attempt in range(1, max_attempts + 1):
        check_files(ns.root, pending.values(), spec.field_ids, ns.storage_options)
        ns.refresh()
        skipped = already_committed(ns, mode, write_id)
        if skipped is not None:
            return skipped
        if ns.namespace_schema.to_json() != written.to_json():
            raise ConcurrentModification(
                f"the schema of {ns.root} changed while this write ran; nothing was committed, run the write again"
            )
        placed = place_pending(ns, pending, spec.spec_id, written, max_rows_per_file)
        created = sum(existing is None for _, _, existing in placed)
        planned = [(entry, values, existing if mode == "append" else None) for entry, values, existing in placed]

        def commit_one(plan: tuple[Pending, dict[str, Any], PartitionTable | None]) -> TableCommit:
            entry, values, existing = plan
            version = commit_version(
                table_uri(ns.root, entry.object_id, entry.location),
                written,
                entry.fragments,
                ns.storage_options,
                base=ns.open_table(existing) if existing is not None else None,
                verify=False,
            )
            stats = entry.stats_change(existing.read_version if existing is not None else None)
            return TableCommit(spec.spec_id, values, entry.location, version, entry.object_id, stats)

        with ThreadPoolExecutor(max_workers=max(1, min(PARALLEL_COMMITS, len(planned)))) as pool:
            commits = list(pool.map(commit_one, planned))
        recorded = _write_operation(ns, mode, write_id, pending.values(), commits, created, operation)
        removed = list(replace(ns)) if replace is not None else []
        if removed:
            recorded = recorded.with_metrics(partitions_removed=len(set(removed) - {c.object_id for c in commits}))
        try:
            manifest_version = ns.commit_once(
                commits,
                replace_all=(mode == "overwrite"),
                write_id=write_id,
                operation=recorded.timed(started),
                naming_seed=naming_seed if attempt == 1 else None,
                guard=guard,
                intent=intent,
                remove=removed,
            )
        except ConcurrentModification as exc:
            last_error = exc
            time.sleep(random.uniform(0.01, 0.05) * attempt)
            continue
        return CommitResult(
            root=ns.root,
            mode=mode,
            manifest_version=manifest_version,
            rows_written=sum(p.rows for p in pending.values()),
            partitions_touched=len(pending),
            partitions_created=created,
            fragments_written=sum(len(p.fragments) for p in pending.values()),
            attempts=attempt,
            write_id=write_id,
        )
    raise ConcurrentModification(
        f"write to {ns.root} gave up after {max_attempts} __manifest commit attempts lost to concurrent writers; "
        f"nothing of this write is visible (last conflict: {last_error})"
    ) from last_error


def _write_operation(
    ns: PartitionedNamespace,
    mode: str,
    write_id: str | None,
    pending: Iterable[Pending],
    commits: Sequence[TableCommit],
    created: int,
    operation: Operation | None,
) -> Operation:
    """``operation`` (default ``WRITE``) with the write's metrics, the caller's taking precedence."""
    parts = list(pending)
    files = [f for p in parts for fragment in p.fragments for f in fragment.files]
    touched = {c.location for c in commits}
    metrics: dict[str, int | float] = {
        "rows_added": sum(p.rows for p in parts),
        "bytes_added": sum(int(f.file_size_bytes or 0) for f in files),
        "files_added": len(files),
        "partitions_touched": len(parts),
        "partitions_created": created,
    }
    if mode == "overwrite":
        metrics["partitions_removed"] = sum(t.location not in touched for t in ns.partitions())
    base = operation or Operation("WRITE", {"mode": mode, **({"write_id": write_id} if write_id else {})})
    return Operation(base.name, base.parameters, {**metrics, **base.metrics})


def conform_table(table: pa.Table, schema: NamespaceSchema) -> pa.Table:
    """Apply the write-side schema rules (seed 000 section 4) to an Arrow table.

    Unknown columns are an error naming them; missing nullable columns become NULL,
    missing non-nullable ones are an error; values are cast safely to the namespace
    types, and a failing cast names the column. Vector columns (and Spark ML vectors
    going into a list column) become lists of the column's float type here; the
    :class:`FragmentWriter` checks vector lengths.
    """
    target = schema.arrow
    extra = [c for c in table.column_names if c not in target.names]
    if extra:
        raise SchemaError(
            f"column(s) {', '.join(repr(c) for c in extra)} are not in the namespace schema; "
            f"namespace columns are: {', '.join(target.names)}"
        )
    columns = []
    fields = []
    for f in target:
        if f.name not in table.column_names:
            if not f.nullable:
                raise SchemaError(f"column {f.name!r} is required (not nullable) but missing from the input")
            columns.append(pa.nulls(table.num_rows, f.type))
            fields.append(f)
            continue
        col = table.column(f.name)
        if not f.nullable and col.null_count:
            raise SchemaError(f"column {f.name!r} is not nullable but the input has {col.null_count} NULL value(s)")
        if is_vector_type(f.type) or (is_ml_vector_type(col.type) and pa.types.is_list(f.type)):
            lists = as_lists(col, f.type, f.name)
            columns.append(lists)
            fields.append(f.with_type(lists.type))
            continue
        fields.append(f)
        try:
            columns.append(col.cast(f.type, safe=True))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
            first = str(exc).strip().splitlines()[0]
            raise SchemaError(f"column {f.name!r}: cannot cast {col.type} to {f.type}: {first}") from exc
    return pa.Table.from_arrays(columns, schema=pa.schema(fields, metadata=target.metadata))


def write_table(
    ns: PartitionedNamespace,
    table: pa.Table,
    *,
    mode: WriteMode = "append",
    write_id: str | None = None,
    max_rows_per_file: int = DEFAULT_MAX_ROWS_PER_FILE,
    max_open_writers: int = 64,
    before_commit: Callable[[pa.Table], None] | None = None,
) -> CommitResult:
    """Write an Arrow table without Spark, through the same writer and commit protocol.

    The write holds a lease (:func:`partitioning.storage.guard.guarded`) from before its
    first fragment until its commit returns. ``before_commit`` is called with the commit
    messages between the fragment writes and the commit (a hook for tests and tools).
    """
    check_namespace_root(ns.root, ns.storage_options)
    ns.refresh()
    skipped = already_committed(ns, mode, write_id)
    if skipped is not None:
        return skipped
    spec = ns.current_spec
    schema = ns.namespace_schema
    keyed = add_partition_columns(conform_table(table, schema), spec.fields, schema)
    keys = partition_keys(keyed, spec.field_ids)
    for key in keys:
        check_partition_value_sizes(spec.field_ids, key)
    writer = FragmentWriter.for_namespace(
        ns, max_rows_per_file=max_rows_per_file, max_open_writers=max_open_writers, keys=keys
    )
    with guarded(ns.root, ns.storage_options, write_id=write_id, bases=(ns.manifest_version,)) as guard:
        batches = list(writer(keyed.to_batches()))
        messages = pa.Table.from_batches(batches, schema=writer.output_schema)
        if before_commit is not None:
            before_commit(messages)
        return commit_write(
            ns,
            messages,
            mode=mode,
            spec_id=spec.spec_id,
            schema=writer.schema,
            write_id=write_id,
            max_rows_per_file=max_rows_per_file,
            naming_seed=writer.planner.seed,
            guard=guard,
        )
