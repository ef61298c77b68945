"""A backfill's commit: each partition dataset once (a Lance ``Merge``), then ``__manifest`` once.

The fragments the tasks wrote (:mod:`partitioning.tables.backfill.plan`) keep every data file
they had and gain one. Per table, :func:`_merged` lists the dataset's fragments with the
new files, points a replaced column's new copy at its Lance field id (the old files'
copy is tombstoned, Lance's ``-2``) and commits ONE ``Merge`` version. Indexes on other
columns are kept; a Lance index on a replaced column would describe the old values, so
it is dropped from that partition (a second version), and the namespace's index
definition stays for :func:`pipelines.search.indexes.optimize_indexes` to rebuild it.

New columns reach the namespace schema atomically with the rows: the new schema is
staged first (a root property readers ignore, :mod:`partitioning.storage.staged`) and the
``__manifest`` commit pointing at the new dataset versions applies it. A crash before
that leaves nothing visible.

Concurrency: a table whose recorded version moved while the tasks ran is rebased when
the other commit only appended fragments (they are left NULL in the new columns and
counted in :attr:`BackfillResult.rows_left_null`) or only deleted rows (its deletion
vectors are kept); when it rewrote a fragment the backfill read (compaction, update),
that table is :class:`Rewritten`: the caller's ``recompute`` runs the backfill again for
those tables only (at their new versions) and the commit goes on with the rest; from the
second rerun on it holds an exclusive intent on its tables (other commits to them wait
for its commit, :mod:`partitioning.storage.intents`), so that rerun cannot lose; without
it the commit raises :class:`~partitioning.errors.ConcurrentModification`: nothing is
visible, and running the backfill again is safe.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial

from partitioning.errors import ConcurrentModification, PartitioningError
from partitioning.namespace import PartitionedNamespace
from partitioning.state.commits import (
    finish_properties,
    release_intent,
    stage_properties,
    take_intent_for,
    unstage_properties,
)
from partitioning.storage.datasets import DEFAULT_COMMIT_ATTEMPTS
from partitioning.storage.guard import Guard
from partitioning.storage.history import Operation
from partitioning.storage.intents import Intent
from partitioning.storage.manifest import SCHEMA_KEY
from partitioning.tables.backfill.merge import Committed, Rewritten, merged_or_rewritten
from partitioning.tables.backfill.plan import BackfillColumns, TablePlan, WrittenFragment
from partitioning.tables.write import PARALLEL_COMMITS, CommitResult, already_committed

__all__ = ["BackfillResult", "Recompute", "Rewritten", "commit_backfill"]

RERUNS = 4  # times the tables another writer rewrote are backfilled again before the commit gives up
INTENT_AFTER = 2  # reruns before the backfill takes an exclusive intent on its tables, so the next cannot lose

Recompute = Callable[[Sequence[str]], tuple[list[TablePlan], list[WrittenFragment]]]
"""Backfill these tables (object ids) again at the versions ``__manifest`` records now."""


@dataclass(frozen=True)
class BackfillResult(CommitResult):
    """What a backfill did: the columns it added and replaced, the fragments and rows it
    computed, the bytes of the new files; ``rows_left_null``: rows appended by another
    writer while it ran (its commit kept them, without values in the new columns);
    ``indexes_dropped``: (partition table, index) pairs dropped because they indexed a
    replaced column."""

    columns_added: tuple[str, ...] = ()
    columns_replaced: tuple[str, ...] = ()
    fragments_backfilled: int = 0
    rows_backfilled: int = 0
    bytes_written: int = 0
    rows_left_null: int = 0
    indexes_dropped: tuple[tuple[str, str], ...] = ()
    seconds: float = 0.0

    def summary(self) -> str:
        if self.skipped:
            return super().summary()
        parts = [f"added {', '.join(self.columns_added)}" if self.columns_added else ""]
        parts.append(f"replaced {', '.join(self.columns_replaced)}" if self.columns_replaced else "")
        what = "; ".join(p for p in parts if p)
        tail = f"; {self.rows_left_null:,} rows appended meanwhile left NULL" if self.rows_left_null else ""
        dropped = f"; {len(self.indexes_dropped)} indexes on replaced columns dropped" if self.indexes_dropped else ""
        return (
            f"{self.root}: backfill ({what}): {self.rows_backfilled:,} rows in {self.fragments_backfilled} fragments "
            f"of {self.partitions_touched} partitions, {self.bytes_written:,} bytes written, "
            f"__manifest v{self.manifest_version}, {self.seconds:.1f} s{tail}{dropped}"
        )


def commit_backfill(
    ns: PartitionedNamespace,
    columns: BackfillColumns,
    plans: Sequence[TablePlan],
    written: Sequence[WrittenFragment],
    *,
    write_id: str | None,
    guard: Guard | None,
    operation: Operation,
    started: float,
    attempts: int = DEFAULT_COMMIT_ATTEMPTS,
    recompute: Recompute | None = None,
) -> BackfillResult:
    """Commit what the tasks wrote: one version per table, then ONE visible ``__manifest``
    commit (see the module's docstring). ``recompute`` backfills again the tables another
    writer rewrote meanwhile (at most :data:`RERUNS` times)."""
    plans, written = list(plans), list(written)
    last: ConcurrentModification | None = None
    reruns = 0
    attempt = 0
    held: list[Intent] = []  # an exclusive intent, once other writers kept rewriting its tables
    longest = 0.0
    try:
        while attempt < attempts:
            attempt += 1
            by_table = _by_table(plans, written)
            rows, written_bytes = sum(w.rows for w in written), sum(w.bytes_written for w in written)
            ns.refresh(guard=guard)
            skipped = already_committed(ns, "backfill", write_id)
            if skipped is not None:
                return BackfillResult(**{**skipped.__dict__})
            if ns.namespace_schema.to_json() != columns.before.to_json():
                raise ConcurrentModification(
                    f"the schema of {ns.root} changed while the backfill ran; nothing was committed, run it again"
                )
            now = ns.tables_by_id(p.table.object_id for p in plans)
            gone = [p.table.object_id for p in plans if p.table.object_id not in now]
            if gone:
                raise ConcurrentModification(
                    f"partition table {gone[0]} was removed while the backfill ran; nothing was committed, run it again"
                )

            with ThreadPoolExecutor(max_workers=max(1, min(PARALLEL_COMMITS, len(plans)))) as pool:
                versions = [now[p.table.object_id].read_version for p in plans]
                tables = [by_table[p.table.object_id] for p in plans]
                outcomes = list(
                    pool.map(
                        merged_or_rewritten,
                        plans,
                        versions,
                        tables,
                        [columns] * len(plans),
                        [ns.storage_options] * len(plans),
                    )
                )
            rewritten = [o for o in outcomes if isinstance(o, Rewritten)]
            if rewritten:
                if recompute is None or reruns >= RERUNS:
                    raise ConcurrentModification(
                        f"backfill of {ns.root}: {rewritten[0]} (another writer rewrote it {reruns + 1} time(s)); "
                        "nothing was committed, run it again"
                    ) from rewritten[0]
                reruns += 1
                attempt -= 1  # a rerun is not a lost commit race
                again = {o.object_id for o in rewritten}
                if not held and reruns >= INTENT_AFTER:
                    taken = take_intent_for(
                        ns,
                        [p.table.object_id for p in plans],
                        longest,
                        what="backfill",
                        refresh=partial(ns.refresh, guard=guard),
                    )
                    held.extend([taken] if taken is not None else [])
                began = time.monotonic()
                fresh_plans, fresh = recompute(sorted(again))
                longest = max(longest, time.monotonic() - began)
                plans = [p for p in plans if p.table.object_id not in again] + fresh_plans
                written = [w for w in written if w.object_id not in again] + fresh
                continue
            done = [o for o in outcomes if isinstance(o, Committed)]
            recorded_op = operation.with_metrics(
                rows_backfilled=rows,
                bytes_added=written_bytes,
                files_added=len(written),
                partitions_touched=len(done),
                columns_added=len(columns.added),
                columns_replaced=len(columns.replaced),
            ).timed(started)
            token = None
            try:
                token = _stage(ns, columns, operation) if columns.added else None
                version = ns.commit_once(
                    [d.commit for d in done],
                    write_id=write_id,
                    operation=recorded_op,
                    guard=guard,
                    applied=token,
                    intent=held[0] if held else None,
                )
                held.clear()  # the commit removed it
            except ConcurrentModification as exc:
                last = exc
                if token is not None:
                    unstage_properties(ns._store, token, operation)
                time.sleep(random.uniform(0.01, 0.05) * attempt)
                continue
            if token is not None:
                finish_properties(ns._store, operation)
                ns.refresh()
            return BackfillResult(
                root=ns.root,
                mode="backfill",
                manifest_version=version,
                partitions_touched=len(done),
                fragments_written=len(written),
                attempts=attempt,
                write_id=write_id,
                columns_added=columns.added,
                columns_replaced=columns.replaced,
                fragments_backfilled=len(written),
                rows_backfilled=rows,
                bytes_written=written_bytes,
                rows_left_null=sum(d.left_null for d in done),
                indexes_dropped=tuple((d.commit.object_id or "", name) for d in done for name in d.dropped),
                seconds=time.monotonic() - started,
            )
        raise ConcurrentModification(
            f"backfill of {ns.root} gave up after {attempts} __manifest commit attempts lost to concurrent writers; "
            f"nothing of it is visible (last conflict: {last})"
        ) from last
    finally:
        if held:
            release_intent(ns, held[0], operation=Operation("INTENT", {"operation": "backfill", "step": "release"}))


def _by_table(plans: Sequence[TablePlan], written: Sequence[WrittenFragment]) -> dict[str, dict[int, WrittenFragment]]:
    """The written fragments by table and fragment id; every planned fragment must be there."""
    by_table: dict[str, dict[int, WrittenFragment]] = {}
    for w in written:
        by_table.setdefault(w.object_id, {})[w.fragment_id] = w
    for plan in plans:
        missing = [fid for fid, _ in plan.fragments if fid not in by_table.get(plan.table.object_id, {})]
        if missing:
            raise PartitioningError(f"backfill of {plan.label}: fragment {missing[0]} was not written")
    return by_table


def _stage(ns: PartitionedNamespace, columns: BackfillColumns, operation: Operation) -> str:
    """Stage the namespace's properties with the new schema; the token to apply."""
    props = {**ns._state.metadata, SCHEMA_KEY: columns.after.to_json()}
    token = stage_properties(ns._store, ns._store.dataset(ns.manifest_version), props, operation)
    ns.refresh()
    return token
