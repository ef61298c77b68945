"""Exclusive intents: how a merge or update that keeps losing races gets its turn.

A merge or update reads some partition tables, computes, and commits only if none of
them changed meanwhile (:mod:`partitioning.tables.rewrites`). Against a steady writer on the
same partitions, every round can lose. After a few lost rounds the operation takes an
*intent*: a ``__manifest`` commit (``INTENT`` in the history) that records, on every
``v<N>`` lock row, the tables it reads and until when it holds them. Every later commit
that touches one of those tables, or creates a table (it could fall under the
operation's filter), first waits for the intent to end (bounded by its ``until``) and
then rebases (:func:`wait_for_intents`, called by every table commit in
:mod:`partitioning.state.commits`). The holder's own commit removes the intent; a holder that
dies leaves an intent that lapses at ``until`` and is dropped by the next commit.

Because the intent is a row commit of the lock rows, a writer that read the manifest
before it conflicts with it, re-reads and then sees it: no commit slips in between.
Two holders never wait for each other in a circle: a holder waits only for older intents.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from partitioning.errors import ConcurrentModification

__all__ = [
    "INTENT_KEY",
    "Intent",
    "IntentWait",
    "intents_in",
    "with_intents",
]

INTENT_KEY = "lance_partitioned.intents"
_POLL = 0.1
_POLL_MAX = 0.5


class IntentWait(ConcurrentModification):
    """A commit waited for another operation's intent; rebase and commit again."""


@dataclass(frozen=True)
class Intent:
    """One operation's claim on some partition tables until ``until`` (UTC)."""

    token: str
    tables: frozenset[str]
    taken: dt.datetime
    until: dt.datetime
    what: str = "merge"

    def live(self, now: dt.datetime) -> bool:
        return now < self.until

    def blocks(self, touched: Iterable[str], creates: bool, *, own: Intent | None, now: dt.datetime) -> bool:
        """Whether a commit touching ``touched`` (and creating tables, if ``creates``) must wait;
        ``own`` is the committer's intent (which waits only for older ones)."""
        if not self.live(now) or (own is not None and (own.token == self.token or own.taken < self.taken)):
            return False
        return creates or not self.tables.isdisjoint(touched)

    def to_json(self) -> dict[str, Any]:
        return {
            "token": self.token,
            "tables": sorted(self.tables),
            "taken": self.taken.isoformat(),
            "until": self.until.isoformat(),
            "what": self.what,
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Intent:
        return cls(
            str(raw["token"]),
            frozenset(str(t) for t in raw["tables"]),
            dt.datetime.fromisoformat(str(raw["taken"])),
            dt.datetime.fromisoformat(str(raw["until"])),
            str(raw.get("what", "merge")),
        )


def intents_in(rows: Iterable[Mapping[str, Any] | None]) -> list[Intent]:
    """The intents recorded on these ``v<N>`` lock rows (a damaged entry is ignored)."""
    seen: dict[str, Intent] = {}
    for row in rows:
        if not row or not row.get("metadata"):
            continue
        try:
            entries = json.loads(json.loads(row["metadata"]).get(INTENT_KEY, "[]"))
            for entry in entries:
                intent = Intent.from_json(entry)
                seen[intent.token] = intent
        except (ValueError, KeyError, TypeError, AttributeError):
            continue
    return sorted(seen.values(), key=lambda i: i.taken)


def with_intents(
    props: dict[str, Any], *, add: Intent | None = None, remove: str | None = None, now: dt.datetime
) -> dict[str, Any]:
    """A lock row's metadata ``props`` with ``add`` recorded, ``remove`` and lapsed intents dropped."""
    current = intents_in([{"metadata": json.dumps(props)}])
    kept = [i for i in current if i.live(now) and i.token != remove and (add is None or i.token != add.token)]
    if add is not None:
        kept.append(add)
    out = dict(props)
    if kept:
        out[INTENT_KEY] = json.dumps([i.to_json() for i in kept], separators=(",", ":"), sort_keys=True)
    else:
        out.pop(INTENT_KEY, None)
    return out


def blocking(
    intents: Sequence[Intent], touched: Iterable[str], creates: bool, own: Intent | None, now: dt.datetime
) -> Intent | None:
    """The first intent a commit touching ``touched`` must wait for, if any."""
    ids = set(touched)
    return next((i for i in intents if i.blocks(ids, creates, own=own, now=now)), None)


def wait_until_released(intent: Intent, still_held: Any, max_wait: dt.timedelta | None = None) -> float:
    """Poll ``still_held()`` (re-reading the manifest) until the intent is gone or lapses;
    the seconds waited. Then the caller raises :class:`IntentWait` so its commit rebases."""
    started = time.monotonic()
    deadline = intent.until if max_wait is None else min(intent.until, dt.datetime.now(dt.UTC) + max_wait)
    pause = _POLL
    while dt.datetime.now(dt.UTC) < deadline and still_held():
        time.sleep(pause)
        pause = min(_POLL_MAX, pause * 1.5)
    return time.monotonic() - started
