"""A merge that is an upsert: the matched target rows found in the driver, no join in Spark.

``merge_partitioned(source, root, on=keys)`` with its default clauses (a matched target row
becomes the source row, an unmatched source row is inserted, nothing else) changes the
target exactly as "delete the target rows whose key the source has, then append the
source". So the driver probes the source's keys against the key columns of the tables the
merge reads (Lance reads only the keys and row addresses, in threads); the matched rows'
addresses are the deletions and the source's rows the new fragments. A source Spark
estimates at most :data:`COLLECT_ESTIMATE` bytes (a parquet file of a few hundred thousand
rows) or holds in memory is collected once, conformed: its keys and its rows come from that
one pass and the driver writes the fragments; a larger one gives its keys
(:func:`pipelines.write.matches.source_keys`) and its rows are written by Spark's tasks as any
write. No target row crosses into Spark and no join runs (``benchmarks/test_bench_merge.py``
times it against delta-rs; the figures are in the docs' benchmarks page).

It is taken only when all of these hold, otherwise the merge joins in Spark as before:
the tables it reads hold at most :data:`PROBE_MAX_ROWS` rows (beyond, Spark's tasks read
the keys, on every executor there is); the default clauses with no ``set``,
``matched_condition`` or ``target_filter``; the source has exactly the namespace's
columns; its keys compare in Arrow as in Spark and were collected (same types, no floats;
not Spark Connect; a deterministic plan unless collected with the rows); no key the source
has is held by two target rows (each would become a copy of the source row).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession

from partitioning.errors import InvalidInput, PartitioningError, first_line
from partitioning.namespace import PartitionedNamespace
from partitioning.plan.table_rows import ROW_ADDRESS, ROW_TABLE, TableSlice
from partitioning.spec.schema import NamespaceSchema
from partitioning.sql.filters import Filter, TrueFilter, columns_of
from partitioning.sql.rowfilter import arrow_predicate
from partitioning.storage.orphans import delete_files
from partitioning.storage.paths import table_uri
from partitioning.tables.fragments import FragmentWriter
from pipelines.read.local import OPENERS, opened_tables
from pipelines.session import is_connect
from pipelines.spark_errors import spark_errors
from pipelines.write.file_rows import file_rows
from pipelines.write.fragments import conform_dataframe, write_rows
from pipelines.write.matches import MAX_KEY_ROWS, as_int64, integer_like, key_probe, keys_comparable, source_keys
from pipelines.write.small import pushed_filter

__all__ = [
    "COLLECT_ESTIMATE",
    "PROBE_MAX_ROWS",
    "HeldSource",
    "Upsert",
    "declined_clauses",
    "exact_target_filter",
    "is_upsert",
    "matched_rows",
    "open_targets",
    "present_keys",
    "refuse_duplicate_keys",
]

COLLECT_ESTIMATE = 16 << 20
FILE_COLLECT_BYTES = 64 << 20  # a source of parquet files pyarrow reads (pipelines.write.file_rows)
PROBE_MAX_ROWS = 50_000_000  # target rows whose keys the driver reads; beyond, Spark's tasks do
Written = tuple[pa.Table, FragmentWriter]  # commit messages and the writer (write_rows)

log = logging.getLogger("lance_partitioned")


@dataclass(frozen=True)
class Upsert:
    """What :meth:`HeldSource.upsert` found: the target rows it deletes (``matched``), the
    source's rows conformed and collected (None: Spark's tasks write them), those rows written
    already (``written``: messages and writer, or None) and the target tables opened at the
    versions read, by object id (their commit reuses them)."""

    matched: pa.Table
    rows: pa.Table | None
    written: Written | None
    opened: Mapping[str, lance.LanceDataset]


def is_upsert(
    source_columns: Sequence[str],
    names: Sequence[str],
    *,
    modes: tuple[str, str, str],
    set: Mapping[str, str] | None,
    matched_condition: str | None,
    target_filter: str | None,
) -> bool:
    """Whether a merge with these clauses is "delete the matched rows, append the source"
    (with a ``target_filter``: the matched rows within it, when it is exactly evaluable
    here, :meth:`HeldSource.upsert`)."""
    plain = set is None and matched_condition is None
    return plain and modes == ("update", "insert", "ignore") and sorted(source_columns) == sorted(names)


def declined_clauses(
    modes: tuple[str, str, str],
    set: Mapping[str, str] | None,
    matched_condition: str | None,
    target_filter: str | None,
    source_columns: Sequence[str],
    names: Sequence[str],
) -> str:
    """Why a merge with these clauses is not one the driver computes without a join."""
    if modes[2] != "ignore":
        return f"when_not_matched_by_source={modes[2]!r}"
    if modes[:2] == ("ignore", "ignore"):
        return "when_matched='ignore', when_not_matched='ignore'"
    if matched_condition:
        return "a matched_condition"
    if set and modes[:2] != ("update", "insert"):
        clauses = zip(("when_matched", "when_not_matched"), modes[:2], ("update", "insert"), strict=True)
        return "set= with " + ", ".join(f"{k}={m!r}" for k, m, d in clauses if m != d)
    if set and target_filter:
        return "set= with a target_filter"
    if sorted(source_columns) != sorted(names):
        return "the source's columns are not the namespace's" + (" (set= needs its types too)" if set else "")
    if set:
        return "a set= value not computed here exactly as Spark, or a source with other column types"
    return "a target_filter not evaluated here exactly as Spark"


def exact_target_filter(session: SparkSession, ns: PartitionedNamespace, target_filter: str | None) -> Filter | None:
    """``target_filter`` bound (:class:`TrueFilter` without one), when this process evaluates
    it exactly as Spark; None when only Spark can."""
    if not target_filter:
        return TrueFilter()
    pushed = pushed_filter(session, ns, target_filter)
    return None if pushed is None else pushed[1]


class HeldSource:
    """A merge source's keys (and, when small, its rows) per namespace schema, collected once
    for every round; the keys also serve the rebase's check of other writers' rows."""

    def __init__(self, source: DataFrame, keys: Sequence[str], *, small: bool) -> None:
        self.source, self.keys, self.small = source, list(keys), small  # small: held in memory already
        self.keys_by_schema: dict[str, pa.Table | None] = {}
        self._rows: dict[str, pa.Table | None] = {}
        self.why: str | None = None  # why the last upsert() could not be done so (the merge's INFO line)

    def upsert(
        self,
        ns: PartitionedNamespace,
        read: Mapping[str, int],
        columns: Sequence[str] | None = None,
        *,
        within: Filter | None = None,
        prewrite: bool = False,
        refuse: bool = True,
    ) -> Upsert | None:
        """The target rows (:func:`matched_rows`, with ``columns``: default the keys) the upsert
        deletes, the source's rows conformed and collected (None: Spark's tasks write
        them) and, with ``prewrite``, those rows written as fragments (:func:`write_rows`, in a
        thread while the target's keys are probed: the upsert appends them whatever matches);
        None when it cannot be done so (fragments written then are deleted again). ``within``
        (a target filter, bound and exactly understood): only the target rows it selects match
        (Spark's answer on them, in Arrow). ``refuse``: refuse two source rows on one matched
        target row (a merge that changes matched rows)."""
        schema = ns.namespace_schema.to_json()
        self.rows(ns)
        if schema not in self.keys_by_schema:
            self.keys_by_schema[schema] = source_keys(self.source, ns.namespace_schema, self.keys)
        wanted = self.keys_by_schema[schema]
        read_columns = list(columns) if columns is not None else list(self.keys)
        if isinstance(within, TrueFilter):
            within = None
        if within is not None:
            read_columns += sorted(columns_of(within) - set(read_columns))
        if wanted is None:
            self.why = (
                "the source's keys were not collected (a key type Arrow does not compare as Spark, "
                f"a non-deterministic source, or more than {MAX_KEY_ROWS:,} keys)"
            )
            return None
        predicate = arrow_predicate(within, ns.namespace_schema.arrow) if within is not None else None
        if within is not None and predicate is None:
            self.why = "the target_filter is not evaluated in Arrow"
            return None
        rows = self._rows.get(schema)
        repeats = _repeats(wanted, self.keys)  # a source that may be refused writes nothing first
        matched = written = opened = None
        with ThreadPoolExecutor(max_workers=1) as pool:
            writing = pool.submit(write_rows, rows, ns) if prewrite and rows is not None and not repeats else None
            try:
                opened = open_targets(ns, read)
                if opened is not None:
                    matched = matched_rows(ns, read, self.keys, wanted, read_columns, opened=opened)
            finally:
                written = writing.result() if writing is not None else None
                if matched is None and written is not None:
                    _discard(ns, written[0])
        if matched is None:
            self.why = (
                f"the target's keys were not probed in the driver (more than {PROBE_MAX_ROWS:,} rows, "
                "a table not readable here, or a key two target rows hold)"
            )
            return None
        if predicate is not None:
            matched = matched.filter(predicate).select([*(columns or self.keys), ROW_TABLE, ROW_ADDRESS])
        if refuse:
            refuse_duplicate_keys(matched, wanted, self.keys, repeats=repeats)
        return Upsert(matched, rows, written, opened or {})

    def rows(self, ns: PartitionedNamespace) -> pa.Table | None:
        """The source's rows conformed to ``ns``'s schema and collected here (and their keys
        noted), once per schema; None when the source is too large to collect."""
        schema = ns.namespace_schema.to_json()
        if schema not in self._rows:
            rows = _collected(self.source, ns.namespace_schema, self.keys, self.small)
            self._rows[schema] = rows
            if rows is not None:
                self.keys_by_schema[schema] = present_keys(rows, self.keys)
        return self._rows[schema]


def _collected(source: DataFrame, schema: NamespaceSchema, keys: Sequence[str], small: bool) -> pa.Table | None:
    """``source``'s rows conformed to ``schema``, collected here when it is ``small`` or Spark
    estimates its plan at most :data:`COLLECT_ESTIMATE` bytes (files: their size) and it has at most
    :data:`MAX_KEY_ROWS` rows: keys and rows then come from one pass (so the plan need not be
    deterministic) and the driver writes the fragments, without Python workers. A source that
    is plainly parquet files is read by pyarrow instead, at most :data:`FILE_COLLECT_BYTES`
    in Arrow (:mod:`pipelines.write.file_rows`), with no Spark job."""
    if is_connect(source.sparkSession) or not keys_comparable(source, schema, keys):
        return None
    with spark_errors("merge: conform the source"):
        conformed = conform_dataframe(source, schema)
    if not small:
        files = file_rows(conformed, max_bytes=FILE_COLLECT_BYTES, max_rows=MAX_KEY_ROWS)
        if files is not None:
            return files
        plan = source._jdf.queryExecution().optimizedPlan()  # classic-only (guarded by is_connect above)
        if int(str(plan.stats().sizeInBytes())) > COLLECT_ESTIMATE:
            return None
    with spark_errors("merge: collect the source"):
        rows = conformed.limit(MAX_KEY_ROWS + 1).toArrow()
    return rows if rows.num_rows <= MAX_KEY_ROWS else None


def present_keys(rows: pa.Table, keys: Sequence[str]) -> pa.Table:
    """The key tuples of ``rows`` without a NULL (a NULL key matches nothing)."""
    table = rows.select(list(keys))
    for k in keys:
        table = table.filter(pc.is_valid(table.column(k)))
    return table


def matched_rows(
    ns: PartitionedNamespace,
    read: Mapping[str, int],
    keys: Sequence[str],
    wanted: pa.Table,
    columns: Sequence[str] | None = None,
    *,
    opened: Mapping[str, lance.LanceDataset] | None = None,
) -> pa.Table | None:
    """The rows of the tables ``read`` whose key tuple is in ``wanted`` (the source's):
    ``_lance_table``, ``_lance_rowaddr`` and ``columns`` (default: the keys), read here. None when the tables hold
    more than :data:`PROBE_MAX_ROWS` rows or one cannot be read here, or when a key the
    source has is held by more than one target row. ``opened``: the tables, opened already
    (:func:`open_targets`)."""
    output = list(columns) if columns is not None else list(keys)
    empty = pa.schema(
        [*[pa.field(k, pa.null()) for k in output], pa.field(ROW_TABLE, pa.string()), pa.field(ROW_ADDRESS, pa.int64())]
    )
    if opened is None:
        opened = open_targets(ns, read)
    if opened is None:
        return None
    if wanted.num_rows == 0 or not opened:
        return empty.empty_table()
    probe = key_probe(ns, keys, wanted, output)
    tables = ns.tables_by_id(read)
    pieces = [TableSlice(t.object_id, t.uri, t.read_version, t.read_branch, t.read_tag) for t in tables.values()]
    try:
        with ThreadPoolExecutor(max_workers=OPENERS) as pool:
            parts = list(pool.map(lambda piece: list(probe.matching([piece], opened)), pieces))
    except PartitioningError as exc:
        log.debug("probing the target keys of %s in the driver failed (%s)", ns.root, first_line(exc))
        return None
    batches = [b for part in parts for b in part]
    if not batches:
        return empty.empty_table()
    found = pa.Table.from_batches(batches)
    if found.num_rows and _repeats(found, keys):
        return None  # each of those target rows becomes a copy of the source row: Spark's join does that
    return found


def _discard(ns: PartitionedNamespace, messages: pa.Table) -> None:
    """Delete the data files of fragments written (``messages``) that will never be committed."""
    uris = []
    for object_id, location, fragments in zip(
        messages.column("object_id").to_pylist(),
        messages.column("location").to_pylist(),
        messages.column("fragments").to_pylist(),
        strict=True,
    ):
        base = table_uri(ns.root, object_id, location).rstrip("/")
        uris += [
            f"{base}/data/{f['path']}" for m in json.loads(fragments) for f in m["files"] if f.get("base_id") is None
        ]
    delete_files(ns.root, uris, ns.storage_options)


def open_targets(ns: PartitionedNamespace, read: Mapping[str, int]) -> dict[str, lance.LanceDataset] | None:
    """The tables ``read`` opened at their versions, by object id; None when one is not in
    ``ns`` or has no version, when they hold more than :data:`PROBE_MAX_ROWS` rows (their
    fragment metadata: Spark's tasks then read the keys, on as many executors as there are)
    or one cannot be opened here."""
    tables = ns.tables_by_id(read)
    if len(tables) != len(read) or any(t.read_version is None for t in tables.values()):
        return None
    pieces = [TableSlice(t.object_id, t.uri, t.read_version, t.read_branch, t.read_tag) for t in tables.values()]
    try:
        datasets = opened_tables(ns, pieces)
    except PartitioningError as exc:
        log.debug("opening the tables of %s in the driver failed (%s)", ns.root, first_line(exc))
        return None
    counts = [f.metadata.physical_rows for d in datasets for f in d.get_fragments()]
    if None in counts or sum(c or 0 for c in counts) > PROBE_MAX_ROWS:
        return None  # (a client that does not record its fragments' rows: not known to be few)
    return {p.object_id: d for p, d in zip(pieces, datasets, strict=True)}


def _repeats(table: pa.Table, keys: Sequence[str]) -> bool:
    """Whether a key tuple other than a NULL key is held by more than one row: one sort in
    numpy for a single integer-like key, else :func:`_repeated`."""
    if len(keys) == 1 and integer_like(table.schema.field(keys[0]).type):
        values = np.sort(as_int64(pc.drop_null(table.column(keys[0]))))
        return bool(values.size > 1 and (values[1:] == values[:-1]).any())
    return _repeated(table, keys).num_rows > 0


def _repeated(table: pa.Table, keys: Sequence[str]) -> pa.Table:
    """The key tuples ``table`` holds more than once."""
    counts = table.group_by(list(keys)).aggregate([([], "count_all")])
    return counts.filter(pc.greater(counts.column("count_all"), 1))


def refuse_duplicate_keys(
    matched: pa.Table, wanted: pa.Table, keys: Sequence[str], *, repeats: bool | None = None
) -> None:
    """Delta's rule, as the join path checks it: two source rows may not update one target row.
    ``repeats``: whether ``wanted`` repeats a key tuple, when known already."""
    if matched.num_rows == 0 or not (_repeats(wanted, keys) if repeats is None else repeats):
        return
    twice = _repeated(wanted, keys)
    typed = twice.select(list(keys)).cast(pa.schema([matched.schema.field(k) for k in keys]))
    hit = matched.join(typed, list(keys), join_type="left semi")
    if hit.num_rows == 0:
        return
    shown = ", ".join(f"{k}={hit.column(k)[0].as_py()!r}" for k in keys)
    raise InvalidInput(
        f"merge: {hit.num_rows:,} target row(s) are matched by more than one source row (e.g. {shown}); "
        "deduplicate the source on the keys; nothing was changed"
    )
