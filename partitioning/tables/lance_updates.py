"""``UPDATE`` run by Lance's own engine on each partition table, then ONE ``__manifest`` commit.

When the condition and every new value are ones DataFusion evaluates exactly as Spark
(:func:`partitioning.sql.rowfilter.exact_lance_filter`,
:func:`partitioning.sql.assign.lance_assignments`) and no row can change partition,
:func:`update_in_lance` calls ``LanceDataset.update`` on each table the condition can touch,
from :data:`~partitioning.tables.write.PARALLEL_COMMITS` threads: Lance scans, computes and
writes the rows and commits one version per table. Nothing is visible until the
``__manifest`` commit that points at those versions (the protocol every writer follows).

Each table is updated at the version the operation read, with no retry of Lance's own: a
version that is not exactly the next one (another client committed in between, and Lance
would have rebased onto it) or any Lance error makes it decline (None) and the caller takes
its own path, which rebases onto such versions. The ``__manifest`` commit requires the
updated tables unchanged since the read; other tables' changes are judged by the read set
as for any rewrite (:class:`~partitioning.tables.rewrites.ReadSet`).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from partitioning.errors import ConcurrentModification, PartitioningError, first_line
from partitioning.namespace import PartitionedNamespace, TableCommit
from partitioning.sql.assign import lance_assignments
from partitioning.sql.filters import Filter
from partitioning.sql.rowfilter import exact_lance_filter
from partitioning.sql.tokens import Dialect
from partitioning.storage.alignment import dataset_columns
from partitioning.storage.datasets import DEFAULT_COMMIT_ATTEMPTS
from partitioning.storage.guard import Guard
from partitioning.storage.history import Operation
from partitioning.storage.intents import Intent
from partitioning.tables.rewrites import ReadSet, ReadSetChanged, RewriteResult
from partitioning.tables.write import PARALLEL_COMMITS

__all__ = ["update_in_lance"]

log = logging.getLogger("lance_partitioned")


@dataclass(frozen=True)
class _Updated:
    object_id: str
    version: int
    rows: int
    fragments: int
    files: int
    bytes: int


class _Declined(PartitioningError):
    """This table's update is not Lance's to run (the caller takes its own path)."""


def update_in_lance(
    ns: PartitionedNamespace,
    read: Mapping[str, int],
    *,
    set: Mapping[str, str],
    where: Filter,
    dialect: Dialect,
    read_set: ReadSet,
    operation: Operation,
    started: float | None = None,
    guard: Guard | None = None,
    intent: Intent | None = None,
    max_attempts: int = DEFAULT_COMMIT_ATTEMPTS,
) -> RewriteResult | None:
    """``UPDATE ... SET set WHERE where`` (``where`` bound and exactly understood) on the
    tables of ``read`` (object id -> the version read) by Lance's ``update``, committed in
    one ``__manifest`` commit; None, with the reason in one INFO line, when Lance does not
    run it exactly (nothing is then referenced by ``__manifest``).

    Raises :class:`ReadSetChanged` when an updated table or the read set changed before
    the commit (the caller runs the operation again)."""
    reason = _refusal(ns, set)
    tables = ns.tables_by_id(read)
    if reason is None and len(tables) != len(read):
        reason = "a partition table it read is gone"
    if reason is not None:
        log.info("lance_partitioned: update of %s: not Lance's update (%s)", ns.root, reason)
        return None
    schema = ns.namespace_schema
    arrow = schema.arrow

    def run(object_id: str) -> _Updated:
        table = tables[object_id]
        if table.read_branch is not None or table.read_tag is not None or table.read_version != read[object_id]:
            raise _Declined(f"table {object_id} is not read at a plain version of its own")
        dataset = ns.open_table(table)
        mapping = dataset_columns(dataset.schema, schema)
        condition = exact_lance_filter(where, arrow, mapping)
        values = lance_assignments(set, arrow, dialect, mapping)
        if condition is None or values is None:
            raise _Declined(f"table {object_id}: DataFusion would not evaluate it as Spark does")
        before = {f.fragment_id for f in dataset.get_fragments()}
        try:
            done = dataset.update(values, where=None if condition == "TRUE" else condition, conflict_retries=0)
        except (OSError, RuntimeError, ValueError) as exc:
            raise _Declined(f"table {object_id}: {first_line(exc)}") from exc
        if dataset.version != read[object_id] + 1:
            raise _Declined(f"table {object_id}: version {dataset.version} is not the one after the version read")
        new = [frag for frag in dataset.get_fragments() if frag.fragment_id not in before]
        files = [f for frag in new for f in frag.metadata.files]
        size = sum(int(f.file_size_bytes or 0) for f in files)
        return _Updated(object_id, dataset.version, int(done["num_rows_updated"]), len(new), len(files), size)

    try:
        with ThreadPoolExecutor(max_workers=max(1, min(PARALLEL_COMMITS, len(read)))) as pool:
            updated = list(pool.map(run, sorted(read)))
    except _Declined as exc:
        log.info("lance_partitioned: update of %s: not Lance's update (%s)", ns.root, exc)
        return None
    return _commit(ns, read, updated, schema.to_json(), read_set, operation, started, guard, intent, max_attempts)


def _refusal(ns: PartitionedNamespace, set: Mapping[str, str]) -> str | None:
    """Why Lance's update cannot run ``set`` on ``ns`` whatever the tables hold, or None."""
    fields = [
        ns.namespace_schema.field_by_id(i) for spec in ns.specs.values() for f in spec.fields for i in f.source_ids
    ]
    sources = {f.name for f in fields if f is not None}
    moving = sorted(c for c in set if c in sources)
    if moving:
        return f"it sets the partition source column {moving[0]!r}: rows may change partition"
    return None


def _commit(
    ns: PartitionedNamespace,
    read: Mapping[str, int],
    updated: list[_Updated],
    schema_json: str,
    read_set: ReadSet,
    operation: Operation,
    started: float | None,
    guard: Guard | None,
    intent: Intent | None,
    max_attempts: int,
) -> RewriteResult:
    rows = sum(u.rows for u in updated)
    recorded = operation.with_metrics(
        rows_added=rows,
        rows_removed=rows,
        rows_updated=rows,
        bytes_added=sum(u.bytes for u in updated),
        files_added=sum(u.files for u in updated),
        partitions_touched=sum(1 for u in updated if u.rows),
        partitions_created=0,
    )
    if started is not None:
        recorded = recorded.timed(started)
    last: ConcurrentModification | None = None
    for attempt in range(1, max_attempts + 1):
        ns.refresh(guard=guard)
        if ns.namespace_schema.to_json() != schema_json:
            raise ConcurrentModification(
                f"the schema of {ns.root} changed while this operation ran; nothing was committed, run it again"
            )
        now = read_set.plan(ns)
        moved = sorted(u.object_id for u in updated if now.get(u.object_id) != read[u.object_id])
        if moved:
            raise ReadSetChanged(f"{ns.root}: partition table {moved[0]} changed while this update ran")
        difference = read_set.changed(ns, read, {})
        if difference is not None:
            raise ReadSetChanged(f"{ns.root}: {difference} while this update ran")
        current = ns.tables_by_id(u.object_id for u in updated)
        commits = [
            TableCommit(t.spec_id, t.values, t.location, u.version, u.object_id)
            for u in updated
            for t in [current[u.object_id]]
        ]
        try:
            version = ns.commit_once(commits, operation=recorded, guard=guard, intent=intent)
        except ConcurrentModification as exc:
            last = exc
            time.sleep(random.uniform(0.01, 0.05) * attempt)
            continue
        log.info(
            "lance_partitioned: update of %s: Lance's update on %d partition table(s), %d row(s)",
            ns.root,
            len(updated),
            rows,
        )
        return RewriteResult(
            root=ns.root,
            mode="update",
            manifest_version=version,
            rows_written=rows,
            partitions_touched=sum(1 for u in updated if u.rows),
            partitions_created=0,
            fragments_written=sum(u.fragments for u in updated),
            attempts=attempt,
            rows_deleted=rows,
            rows_updated=rows,
            rows_inserted=0,
        )
    raise ConcurrentModification(
        f"update on {ns.root} gave up after {max_attempts} __manifest commit attempts lost to concurrent writers; "
        f"nothing of it is visible (last conflict: {last})"
    ) from last
