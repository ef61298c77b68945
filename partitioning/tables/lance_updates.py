"""``UPDATE`` run by Lance's own engine on each partition table, then ONE ``__manifest`` commit.

When the condition and every new value are ones DataFusion evaluates exactly as Spark
(:func:`partitioning.sql.rowfilter.exact_lance_filter`,
:func:`partitioning.sql.assign.lance_assignments`) and no row can change partition,
:func:`update_in_lance` calls ``LanceDataset.update`` on each table the condition can touch,
from :data:`~partitioning.tables.write.PARALLEL_COMMITS` threads: Lance scans, computes and
writes the rows and commits one version per table. Tables are first probed for a
matching row (:func:`_run`), since Lance commits a version even when no row matches.
Nothing is visible until the ``__manifest`` commit that points at those
versions (the protocol every writer follows).

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

import lance
import pyarrow as pa

from partitioning.errors import ConcurrentModification, PartitioningError, first_line
from partitioning.namespace import PartitionedNamespace, TableCommit
from partitioning.spec.field_ids import field_id_of
from partitioning.sql.assign import lance_assignments
from partitioning.sql.filters import Filter
from partitioning.sql.rowfilter import exact_lance_filter
from partitioning.sql.tokens import Dialect
from partitioning.stats.bounds import StatsChange, TableStats, collect_stats
from partitioning.storage.alignment import dataset_columns, is_aligned
from partitioning.storage.datasets import DEFAULT_COMMIT_ATTEMPTS
from partitioning.storage.guard import Guard
from partitioning.storage.history import Operation
from partitioning.storage.intents import Intent
from partitioning.tables.rewrites import ReadSet, ReadSetChanged, RewriteResult
from partitioning.tables.write import PARALLEL_COMMITS

__all__ = ["update_in_lance"]

log = logging.getLogger("lance_partitioned")

PROBED_FIRST = 16  # tables probed for a matching row before the update is taken as broad


@dataclass(frozen=True)
class _Changed:
    object_id: str
    version: int
    rows: int
    fragments: int
    files: int
    bytes: int
    stats: StatsChange  # the updated columns' bounds widened by the values written


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
    if reason is not None:
        log.info("lance_partitioned: update of %s: not Lance's update (%s)", ns.root, reason)
        return None
    changed = _run(ns, read, set, where, dialect)
    if changed is None:
        return None
    rows = sum(u.rows for u in changed)
    version, attempt = _commit(
        ns, read, changed, read_set, _metrics(operation, changed, started), guard, intent, max_attempts
    )
    return RewriteResult(
        root=ns.root,
        mode="update",
        manifest_version=version,
        rows_written=rows,
        partitions_touched=len(changed),
        partitions_created=0,
        fragments_written=sum(u.fragments for u in changed),
        attempts=attempt,
        rows_deleted=rows,
        rows_updated=rows,
        rows_inserted=0,
    )


@dataclass(frozen=True)
class _Planned:
    object_id: str
    dataset: lance.LanceDataset
    where: str | None  # the exact Lance filter; None: every row
    values: dict[str, str]


def _run(
    ns: PartitionedNamespace, read: Mapping[str, int], set: Mapping[str, str], where: Filter, dialect: Dialect
) -> list[_Changed] | None:
    """Lance's update on each table of ``read`` (at the version read) holding a row ``where``
    selects, from threads: the tables that changed; None when one declines. Every table is
    first opened and its filter and values rendered, so a decline comes before any update.
    Lance's update commits a version even when no row matches, so tables are probed for one
    matching row (a scan that stops at the first): the first :data:`PROBED_FIRST`, and the
    rest only when one of those has none. A point update changes only the tables holding
    its rows; a broad one pays for 16 probes, and a table it misses gets a version with the
    same rows, which the commit records like the others."""
    tables = ns.tables_by_id(read)
    schema = ns.namespace_schema
    updated = [schema.arrow.field(n) for n in {c.split(".")[0] for c in set} if schema.arrow.get_field_index(n) >= 0]
    # every table updated here has the namespace's own columns (is_aligned): one SQL for all
    mapping = dataset_columns(schema.dataset_arrow, schema)
    condition = exact_lance_filter(where, schema.arrow, mapping)
    values = lance_assignments(set, schema.arrow, dialect, mapping)

    def plan(object_id: str) -> _Planned:
        table = tables.get(object_id)
        if table is None:
            raise _Declined(f"partition table {object_id} is gone")
        if table.read_branch is not None or table.read_tag is not None or table.read_version != read[object_id]:
            raise _Declined(f"table {object_id} is not read at a plain version of its own")
        dataset = ns.open_table(table)
        if not is_aligned(dataset, schema):  # a widened, renamed or added column: the other path aligns it
            raise _Declined(f"table {object_id}: its columns are not yet the namespace's")
        if condition is None or values is None:
            raise _Declined(f"table {object_id}: DataFusion would not evaluate it as Spark does")
        return _Planned(object_id, dataset, None if condition == "TRUE" else condition, values)

    def matches(planned: _Planned) -> bool:
        try:
            probe = planned.dataset.scanner(columns=[], filter=planned.where, limit=1, with_row_address=True)
            return bool(probe.to_table().num_rows)
        except (OSError, RuntimeError, ValueError) as exc:
            raise _Declined(f"table {planned.object_id}: {first_line(exc)}") from exc

    def update(planned: _Planned) -> _Changed:
        dataset, object_id = planned.dataset, planned.object_id
        before = {f.fragment_id for f in dataset.get_fragments()}
        try:
            done = dataset.update(planned.values, where=planned.where, conflict_retries=0)
        except (OSError, RuntimeError, ValueError) as exc:
            raise _Declined(f"table {object_id}: {first_line(exc)}") from exc
        if dataset.version != read[object_id] + 1:
            raise _Declined(f"table {object_id}: version {dataset.version} is not the one after the version read")
        new = [frag for frag in dataset.get_fragments() if frag.fragment_id not in before]
        files = [f for frag in new for f in frag.metadata.files]
        size = sum(int(f.file_size_bytes or 0) for f in files)
        stats = _written_stats(new, read[object_id], updated)
        return _Changed(object_id, dataset.version, int(done["num_rows_updated"]), len(new), len(files), size, stats)

    try:
        with ThreadPoolExecutor(max_workers=max(1, min(PARALLEL_COMMITS, len(read)))) as pool:
            planned = list(pool.map(plan, sorted(read)))
            sample = list(pool.map(matches, planned[:PROBED_FIRST]))
            if all(sample):  # a broad update: the rest are taken as matching (a miss gets a version anyway)
                chosen = planned
            else:
                rest = list(pool.map(matches, planned[PROBED_FIRST:]))
                chosen = [p for p, hit in zip(planned, sample + rest, strict=True) if hit]
            return list(pool.map(update, chosen))
    except _Declined as exc:
        log.info("lance_partitioned: update of %s: not Lance's update (%s)", ns.root, exc)
        return None


def _written_stats(new: list[lance.LanceFragment], base: int, updated: list[pa.Field]) -> StatsChange:
    """The table keeps its statistics, the updated columns' widened by the values Lance wrote
    (its new fragments hold only the rewritten rows; their old values stay inside the bounds)."""
    names = [f.name for f in updated]
    if not names:
        return StatsChange(TableStats(0), base)
    try:
        written = pa.concat_tables([frag.to_table(columns=names) for frag in new]) if new else None
    except (OSError, RuntimeError, ValueError):
        written = None
    if written is None:
        return StatsChange(TableStats(0), base, forget=frozenset(str(field_id_of(f)) for f in updated))
    seen = collect_stats(written, pa.schema(updated))
    lost = frozenset(str(field_id_of(f)) for f in updated) - set(seen.columns)
    return StatsChange(TableStats(0), base, forget=lost, widen=seen.columns)


def _metrics(operation: Operation, changed: list[_Changed], started: float | None) -> Operation:
    rows = sum(u.rows for u in changed)
    recorded = operation.with_metrics(
        rows_added=rows,
        rows_removed=rows,
        rows_updated=rows,
        bytes_added=sum(u.bytes for u in changed),
        files_added=sum(u.files for u in changed),
        partitions_touched=len(changed),
        partitions_created=0,
    )
    return recorded.timed(started) if started is not None else recorded


def _refusal(ns: PartitionedNamespace, set: Mapping[str, str]) -> str | None:
    """Why Lance's update cannot run ``set`` on ``ns`` whatever the tables hold, or None."""
    fields = [
        ns.namespace_schema.top_level_field_by_id(i)
        for spec in ns.specs.values()
        for f in spec.fields
        for i in f.source_ids
    ]
    sources = {f.name for f in fields if f is not None}
    moving = sorted(c for c in set if c in sources)
    if moving:
        return f"it sets the partition source column {moving[0]!r}: rows may change partition"
    return None


def _commit(
    ns: PartitionedNamespace,
    read: Mapping[str, int],
    changed: list[_Changed],
    read_set: ReadSet,
    recorded: Operation,
    guard: Guard | None,
    intent: Intent | None,
    max_attempts: int,
) -> tuple[int, int]:
    """ONE ``__manifest`` commit of the tables' new versions: (its version, the attempts)."""
    schema_json = ns.namespace_schema.to_json()
    what = recorded.name.lower()
    last: ConcurrentModification | None = None
    for attempt in range(1, max_attempts + 1):
        ns.refresh(guard=guard)
        if ns.namespace_schema.to_json() != schema_json:
            raise ConcurrentModification(
                f"the schema of {ns.root} changed while this operation ran; nothing was committed, run it again"
            )
        now = read_set.plan(ns)
        moved = sorted(u.object_id for u in changed if now.get(u.object_id) != read[u.object_id])
        if moved:
            raise ReadSetChanged(f"{ns.root}: partition table {moved[0]} changed while this {what} ran")
        difference = read_set.changed(ns, read, {})
        if difference is not None:
            raise ReadSetChanged(f"{ns.root}: {difference} while this {what} ran")
        current = ns.tables_by_id(u.object_id for u in changed)
        commits = [
            TableCommit(t.spec_id, t.values, t.location, u.version, u.object_id, u.stats)
            for u in changed
            for t in [current[u.object_id]]
        ]
        try:
            version = ns.commit_once(commits, operation=recorded, guard=guard, intent=intent)
        except ConcurrentModification as exc:
            last = exc
            time.sleep(random.uniform(0.01, 0.05) * attempt)
            continue
        log.info(
            "lance_partitioned: %s of %s: Lance's %s on %d partition table(s), %d row(s)",
            what,
            ns.root,
            what,
            len(changed),
            sum(u.rows for u in changed),
        )
        return version, attempt
    raise ConcurrentModification(
        f"{what} on {ns.root} gave up after {max_attempts} __manifest commit attempts lost to concurrent writers; "
        f"nothing of it is visible (last conflict: {last})"
    ) from last
