"""Rerunning a rewrite operation until no partition table it read changed before its commit.

Each :class:`Round` reads the namespace at the latest ``__manifest`` version under the
operation's one lease (:mod:`partitioning.storage.guard`). A round that lost to a concurrent
commit (``ReadSetChanged``) is followed by a random pause that grows with the rounds; after
a few lost rounds the operation takes an exclusive intent on the tables it reads
(:mod:`partitioning.storage.intents`), so its next round cannot lose.
"""

from __future__ import annotations

import dataclasses
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial

from partitioning.errors import ConcurrentModification, InvalidInput
from partitioning.namespace import PartitionedNamespace
from partitioning.state.commits import release_intent, take_intent_for
from partitioning.storage.guard import Guard, guarded
from partitioning.storage.history import Operation
from partitioning.storage.intents import Intent
from partitioning.tables.rewrites import ReadSetChanged, RewriteResult
from pipelines.write.targets import TargetCache

__all__ = ["DEFAULT_ATTEMPTS", "Round", "rerun_on_conflict"]

DEFAULT_ATTEMPTS = 5
INTENT_AFTER = 2  # lost rounds before an operation takes an exclusive intent
BACKOFF = 0.05  # seconds; the pause after lost round n is random in [0, BACKOFF * 2**n], at most BACKOFF_MAX
BACKOFF_MAX = 2.0


@dataclass
class Round:
    """One run of a rewrite operation: the namespace at the ``__manifest`` version it reads,
    the operation's guard (its lease, :mod:`partitioning.storage.guard`), its intent once it took
    one (:mod:`partitioning.storage.intents`), and the target rows earlier rounds read."""

    ns: PartitionedNamespace
    guard: Guard
    cache: TargetCache
    number: int = 1
    intent: Intent | None = None


def rerun_on_conflict(
    root: str,
    what: str,
    max_attempts: int,
    attempt: Callable[[Round], RewriteResult],
    storage_options: Mapping[str, str] | None,
    *,
    intent_after: int = INTENT_AFTER,
) -> RewriteResult:
    """Run ``attempt`` on the latest state until no table it read changed before its commit.

    The operation holds one lease throughout (:mod:`partitioning.storage.guard`), each round's
    ``__manifest`` version recorded as a base before it is read. A lost round is followed by
    a random pause that grows with the rounds; the next round reads again only the tables
    that changed (:class:`TargetCache`). After ``intent_after`` lost rounds the operation
    takes an exclusive intent on the tables it reads (:mod:`partitioning.storage.intents`): commits
    to them wait until its next round has committed, so that round cannot lose.
    """
    if max_attempts < 1:
        raise InvalidInput(f"max_attempts must be at least 1, got {max_attempts}")
    started = time.monotonic()
    last: ReadSetChanged | None = None
    longest = 0.0
    cache = TargetCache()
    intent: Intent | None = None
    with guarded(root, storage_options) as guard:
        try:
            for number in range(1, max_attempts + 1):
                ns = PartitionedNamespace.load(root, storage_options, guard=guard)
                began = time.monotonic()
                holding = intent is not None
                try:
                    result = attempt(Round(ns, guard, cache, number, intent))
                except ReadSetChanged as exc:
                    last = exc
                    longest = max(longest, time.monotonic() - began)
                    if number == max_attempts:
                        break
                    if intent is None and number >= intent_after:
                        intent = take_intent_for(
                            ns, sorted(cache._read), longest, what=what, refresh=partial(ns.refresh, guard=guard)
                        )
                    else:
                        time.sleep(random.uniform(0, min(BACKOFF_MAX, BACKOFF * 2**number)))
                    continue
                intent = None  # its commit removed it
                return dataclasses.replace(
                    result, rounds=number, seconds=round(time.monotonic() - started, 3), intent=holding
                )
        finally:
            cache.release()
            if intent is not None:
                release_intent(ns, intent, operation=Operation("INTENT", {"operation": what, "step": "release"}))
    raise ConcurrentModification(
        f"{what} on {root}: the partitions it read kept changing ({last}); nothing was committed after "
        f"{max_attempts} attempts, run it again"
    ) from last
