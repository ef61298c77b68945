"""An independent MERGE / UPDATE in plain Python (SQL semantics: NULL keys never match),
delta-rs's merge with the same clauses, and helpers that read what a namespace holds with
Lance's own reader, table by table."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import lance

from partitioning.namespace import PartitionedNamespace

Row = dict[str, Any]


class Duplicate(Exception):
    """Two source rows act on one target row: the merge must be refused."""


@dataclass(frozen=True)
class Case:
    """One merge, as SQL for the engine and as Python for the oracle."""

    when_matched: str = "update"
    when_not_matched: str = "insert"
    when_not_matched_by_source: str = "ignore"
    condition: tuple[str, Callable[[Row, Row], bool]] | None = None
    assignments: tuple[Mapping[str, str], Callable[[Row, Row], Row]] | None = None
    target_filter: tuple[str, Callable[[Row], bool]] | None = None
    # SQL's WHEN NOT MATCHED BY SOURCE AND <condition> THEN DELETE (the oracle only)
    by_source_condition: Callable[[Row], bool] | None = None

    def kwargs(self) -> dict[str, Any]:
        return {
            "when_matched": self.when_matched,
            "when_not_matched": self.when_not_matched,
            "when_not_matched_by_source": self.when_not_matched_by_source,
            "matched_condition": self.condition[0] if self.condition else None,
            "set": dict(self.assignments[0]) if self.assignments else None,
            "target_filter": self.target_filter[0] if self.target_filter else None,
        }


def merge(target: Sequence[Row], source: Sequence[Row], keys: Sequence[str], case: Case) -> list[Row]:
    """The target after the merge; raises :class:`Duplicate` where the engine must refuse."""

    def key(row: Row) -> tuple[Any, ...] | None:
        k = tuple(row[c] for c in keys)
        return None if any(v is None for v in k) else k

    in_scope = case.target_filter[1] if case.target_filter else (lambda _: True)
    by_key: dict[tuple[Any, ...], list[Row]] = {}
    for s in source:
        k = key(s)
        if k is not None:
            by_key.setdefault(k, []).append(s)
    out: list[Row] = []
    matched_keys: set[tuple[Any, ...]] = set()
    for t in target:
        k = key(t)
        candidates = by_key.get(k, []) if k is not None and in_scope(t) else []
        if candidates:
            matched_keys.add(k)  # type: ignore[arg-type]
            acting = []
            if case.when_matched != "ignore":
                acting = [s for s in candidates if case.condition is None or case.condition[1](s, t)]
            if len(acting) > 1:
                raise Duplicate(k)
            if not acting:
                out.append(dict(t))
            elif case.when_matched == "update":
                chosen = acting[0]
                out.append(case.assignments[1](chosen, t) if case.assignments else dict(chosen))
            continue
        if case.when_not_matched_by_source == "delete" and in_scope(t):
            if case.by_source_condition is None or case.by_source_condition(t):
                continue
        out.append(dict(t))
    if case.when_not_matched == "insert":
        out.extend(dict(s) for s in source if key(s) is None or key(s) not in matched_keys)
    return out


def update(target: Sequence[Row], assign: Callable[[Row], Row], where: Callable[[Row], bool]) -> list[Row]:
    return [assign(dict(t)) if where(t) else dict(t) for t in target]


def stored_rows(root: str, partition_column: str | None = None) -> list[Row]:
    """Every row of every partition table at its recorded version (Lance's reader); with
    ``partition_column``, also checks each row sits in the table of its value."""
    ns = PartitionedNamespace.load(root)
    rows: list[Row] = []
    for table in ns.partitions():
        data = lance.dataset(table.uri, version=table.read_version).to_table().to_pylist()
        if partition_column is not None:
            (value,) = table.values.values()
            misplaced = [r for r in data if r[partition_column] != value]
            assert not misplaced, f"rows {misplaced[:3]} sit in the partition of {partition_column}={value}"
        rows.extend(data)
    return rows


def canonical(rows: Sequence[Row], columns: Sequence[str]) -> list[tuple[Any, ...]]:
    return sorted((tuple(r.get(c) for c in columns) for r in rows), key=lambda t: [(v is None, v) for v in t])


EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def _shown(value: Any) -> Any:
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return (value - EPOCH) // dt.timedelta(microseconds=1)
    return value


def canonical_values(rows: Sequence[Row], columns: Sequence[str]) -> list[tuple[Any, ...]]:
    """:func:`canonical` with floats as their repr (NaN equal to NaN, -0.0 apart from 0.0)
    and instants as microseconds since the epoch."""
    return canonical([{k: _shown(v) for k, v in r.items()} for r in rows], columns)


def delta_merge(uri: str, source: Any, predicate: str, modes: tuple[str, str]) -> dict[str, Any]:
    """delta-rs's merge of the Arrow ``source`` (alias ``s``) into the Delta table at ``uri``
    (alias ``t``) on ``predicate``, with ``modes`` (when_matched: update, delete or ignore;
    when_not_matched: insert or ignore) as clauses; its metrics."""
    from deltalake import DeltaTable

    merger = DeltaTable(uri).merge(source, predicate, source_alias="s", target_alias="t")
    if modes[0] == "update":
        merger = merger.when_matched_update_all()
    elif modes[0] == "delete":
        merger = merger.when_matched_delete()
    if modes[1] == "insert":
        merger = merger.when_not_matched_insert_all()
    return merger.execute()
