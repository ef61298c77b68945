"""Full-text search across partitions, ranked by BM25 with the statistics of the whole table.

One Lance dataset scores a query token ``t`` in a document of ``dl`` tokens holding it
``f`` times as ``idf(t) * (k1 + 1) * f / (f + k1 * (1 - b + b * dl / avgdl))`` with
``k1 = 1.2``, ``b = 0.75``, ``idf(t) = ln((N - n(t) + 0.5) / (n(t) + 0.5) + 1)``, ``N`` the
documents of its index (rows with at least one token), ``n(t)`` those holding ``t`` and
``avgdl`` the index's tokens over ``N``; a query's score is the sum over its distinct
tokens, all in float32 (Lance's ``lance-index`` ``scalar/inverted/scorer.rs``:
``IndexBM25Scorer``, ``idf``, ``K1``, ``B``). Each partition's index knows only its own
``N``, ``n(t)`` and ``avgdl``, so per-partition scores are not comparable, and merging the
partitions' own top-k by score is not what one dataset returns.

Here every partition's text is held as postings tokenized by Lance's own analyzer with the
options of its INVERTED index (:mod:`partitioning.search.text_postings`). A search then
(1) adds up ``N``, the total token count and each query token's ``n(t)`` over every
partition table of the manifest version: the statistics one dataset holding all the rows
has (a filter narrows the rows returned, not the statistics, as Lance's prefilter does);
(2) scores every row of the selected partitions that holds a query token with those
statistics and Lance's float32 arithmetic (``ln`` is the C library's ``logf``, which Lance
calls); (3) keeps the ``k`` best (ties by partition order, then row) and takes their
columns with one Lance ``take`` per partition holding any.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import lance
import numpy as np
import pyarrow as pa

from partitioning.errors import InvalidInput, SchemaError, translate_lance_errors
from partitioning.namespace import PartitionedNamespace
from partitioning.search.index_model import recorded_specs
from partitioning.search.indexes import column_name
from partitioning.search.pinned import is_pinned, open_task, options_key
from partitioning.search.query_args import output_columns, positive
from partitioning.search.text_postings import Postings, index_tokenizer, is_held, postings_of, tokenize
from partitioning.spec.field_ids import field_id_of
from partitioning.spec.schema import NamespaceSchema
from partitioning.sql.binding import bind
from partitioning.sql.filters import Dialect, Filter, TrueFilter, columns_of, is_exactly_understood
from partitioning.sql.from_sql import parse_filter
from partitioning.sql.rowfilter import arrow_predicate
from partitioning.state.scan import ScanTask
from partitioning.storage.alignment import dataset_columns, reconcile

__all__ = [
    "SCORE",
    "TextPlan",
    "bm25_scores",
    "partition_postings",
    "plan_text_search",
    "postings_key",
    "search_text",
    "text_column",
]

SCORE = "_score"
K1 = np.float32(1.2)
B = np.float32(0.75)
THREADS = 8
_T = TypeVar("_T")
_A = TypeVar("_A")
_libm = ctypes.util.find_library("m")
_logf: Any = None
if _libm:
    _logf = ctypes.CDLL(_libm).logf
    _logf.restype = ctypes.c_float
    _logf.argtypes = [ctypes.c_float]


@dataclass(frozen=True)
class TextPlan:
    """A full-text search fixed at one ``__manifest`` version. Picklable (no datasets).
    ``tables`` are every partition table (the statistics), ``selected`` the indexes of
    those the filter keeps (the rows returned)."""

    root: str
    storage_options: Mapping[str, str] | None
    schema: NamespaceSchema
    column: str
    tokens: tuple[str, ...]
    options: tuple[tuple[str, Any], ...]
    output: tuple[str, ...]
    filter: Filter
    k: int
    tables: tuple[ScanTask, ...]
    selected: tuple[int, ...]
    manifest_version: int
    names: tuple[str, ...]  # the column's name in each of ``tables``

    @property
    def output_schema(self) -> pa.Schema:
        fields = [pa.field(c, self.schema.arrow.field(c).type) for c in self.output]
        return pa.schema([*fields, pa.field(SCORE, pa.float32())])


def text_column(ns: PartitionedNamespace, column: str | None) -> str:
    """The searched column: ``column``, or the one column with a recorded INVERTED index."""
    arrow = ns.schema
    if column is None:
        inverted = sorted(
            {column_name(ns, s) for s in recorded_specs(ns.properties).values() if s.index_type == "INVERTED"}
        )
        if len(inverted) != 1:
            found = f"INVERTED indexes on {', '.join(inverted)}" if inverted else "no INVERTED index"
            raise InvalidInput(f"the namespace has {found}; pass column= the text column to search")
        column = inverted[0]
    if column not in arrow.names:
        raise SchemaError(f"unknown column {column!r}; columns are: {', '.join(arrow.names)}")
    t = arrow.field(column).type
    if not (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)):
        raise SchemaError(f"column {column!r} is {t}, not a string column; full-text search needs text")
    return column


def _lookup(dataset: lance.LanceDataset, schema: NamespaceSchema, column: str) -> tuple[Any, str | None, bool]:
    """(index tokenizer options, the column's name in the dataset or None, whether it has rows)."""
    name = dataset_columns(dataset.schema, schema).get(column)
    if name is None:
        return None, None, False  # added after this table was written: all NULL, no document
    return index_tokenizer(dataset, name), name, dataset.count_rows() > 0


@functools.lru_cache(maxsize=4096)
def _pinned_lookup(
    uri: str, version: int, options: tuple[tuple[str, str], ...], schema: _Keyed, column: str, fid: Any
) -> tuple[Any, str | None, bool]:
    task = ScanTask("", "", uri, 0, version, None, None, None)
    return _lookup(open_task(task, dict(options) or None), schema.schema, column)


def _tokenizer(task: ScanTask, ns: PartitionedNamespace, column: str) -> tuple[Any, str | None]:
    """(the tokenizer options of the table's INVERTED index on ``column``, the column's name
    in the table or ``None`` when the table has no such column). A version pinned by the
    manifest is looked up once (by the column's field id, which fixes its name there)."""
    if is_pinned(task):
        assert task.read_version is not None
        fid = field_id_of(ns.namespace_schema.arrow.field(column))
        key = options_key(ns.storage_options)
        found, name, rows = _pinned_lookup(task.uri, task.read_version, key, _Keyed(ns.namespace_schema), column, fid)
    else:
        found, name, rows = _lookup(open_task(task, ns.storage_options), ns.namespace_schema, column)
    if name is not None and found is None and rows:
        raise InvalidInput(
            f"partition table {task.object_id} has no INVERTED index on column {column!r}; build it with "
            f"create_scalar_index(root, {column!r}, 'INVERTED')"
        )
    return found, name


class _Keyed:
    """A namespace schema as a cache key that only the field ids of its columns identify
    (what :func:`dataset_columns` reads besides the dataset's own schema)."""

    def __init__(self, schema: NamespaceSchema) -> None:
        self.schema = schema
        self.key = tuple((f.name, field_id_of(f)) for f in schema.arrow)

    def __hash__(self) -> int:
        return hash(self.key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Keyed) and self.key == other.key


def plan_text_search(
    ns: PartitionedNamespace,
    query_text: str,
    *,
    k: int = 10,
    column: str | None = None,
    filter: str | Filter | None = None,
    columns: Sequence[str] | None = None,
    dialect: Dialect | None = None,
) -> TextPlan:
    """Check the arguments (one line each), tokenize the query, and plan the tables.

    Every partition table with rows needs an INVERTED index on ``column``, all with the same
    tokenizer options. ``filter`` (SQL in ``dialect``, default DataFusion SQL) prunes the
    partitions through ``__manifest`` and is applied to the rows; it must be one evaluated
    exactly (comparisons, IN, BETWEEN, LIKE, IS NULL, NOT, AND, OR of columns and literals).
    """
    name = text_column(ns, column)
    positive("k", k)
    if not isinstance(query_text, str) or not query_text.strip():
        raise InvalidInput(f"query_text must be a non-empty string, got {query_text!r}")
    arrow = ns.schema
    output = output_columns(arrow, columns, SCORE, "score")
    d = dialect or Dialect.datafusion("UTC")
    bound = bind(parse_filter(filter, d) if isinstance(filter, str) or filter is None else filter, arrow, d)
    if not is_exactly_understood(bound):
        raise InvalidInput(
            f"search filter {filter!r} is more than search evaluates (comparisons, IN, BETWEEN, LIKE, IS NULL, NOT, "
            "AND, OR of columns and literals)"
        )
    tables = tuple(ns.plan_scan(None, dialect=d))
    kept = {t.object_id for t in (tables if isinstance(bound, TrueFilter) else ns.plan_scan(bound, dialect=d))}
    pinned = [i for i, t in enumerate(tables) if is_pinned(t)]  # cached lookups: cheaper than threads
    moving = [i for i, t in enumerate(tables) if not is_pinned(t)]
    looked = dict(zip(moving, _map(lambda i: _tokenizer(tables[i], ns, name), moving, THREADS), strict=True))
    looked.update((i, _tokenizer(tables[i], ns, name)) for i in pinned)
    found = [looked[i] for i in range(len(tables))]
    kinds = {opts for opts, _ in found if opts is not None}
    if len(kinds) > 1:
        raise InvalidInput(
            f"the INVERTED indexes on column {name!r} tokenize differently in different partitions "
            f"({len(kinds)} option sets); rebuild them with create_scalar_index(root, {name!r}, 'INVERTED')"
        )
    options = kinds.pop() if kinds else ()
    tokens = tuple(dict.fromkeys(tokenize(query_text, options))) if options else ()
    with_column = [i for i, (_, has) in enumerate(found) if has is not None]
    return TextPlan(
        ns.root,
        ns.storage_options,
        ns.namespace_schema,
        name,
        tokens,
        options,
        output,
        bound,
        k,
        tuple(tables[i] for i in with_column),
        tuple(j for j, i in enumerate(with_column) if tables[i].object_id in kept),
        ns.manifest_version,
        tuple(str(found[i][1]) for i in with_column),
    )


def _map(fn: Callable[[_A], _T], items: Sequence[_A], threads: int) -> list[_T]:
    if len(items) <= 1 or threads <= 1:
        return [fn(i) for i in items]
    with ThreadPoolExecutor(max_workers=min(threads, len(items))) as pool:
        return list(pool.map(fn, items))


def postings_key(plan: TextPlan, i: int) -> Hashable | None:
    """The cache key of table ``i``'s postings: its pinned version, or ``None`` (not kept)."""
    task = plan.tables[i]
    return (task.uri, task.read_version, options_key(plan.storage_options)) if is_pinned(task) else None


def partition_postings(plan: TextPlan, i: int) -> Postings:
    """Table ``i``'s postings of the searched column (kept in this process when pinned)."""
    dataset = open_task(plan.tables[i], plan.storage_options)
    return postings_of(dataset, plan.names[i], plan.options, postings_key(plan, i))


def _is_held(plan: TextPlan, i: int) -> bool:
    key = postings_key(plan, i)
    return key is not None and is_held(key, plan.names[i], plan.options)


def _ln(x: np.float32) -> np.float32:
    """``x.ln()`` as Lance computes it: the C library's ``logf`` (``math.log`` rounded without one)."""
    return np.float32(_logf(float(x)) if _logf is not None else math.log(float(x)))


def bm25_scores(
    documents: int, tokens: int, df: Sequence[int], freqs: Sequence[np.ndarray], lengths: Sequence[np.ndarray]
) -> list[np.ndarray]:
    """Each query token's float32 BM25 term score for its entries (``freqs``, ``lengths``),
    with ``documents``, total ``tokens`` and per token ``df`` the statistics of the whole
    index, in the order of Lance's operations (``IndexBM25Scorer``)."""
    f32 = np.float32
    n = f32(documents)
    avgdl = f32(tokens) / n
    out = []
    for count, freq, length in zip(df, freqs, lengths, strict=True):
        idf = _ln(f32((n - f32(count) + f32(0.5)) / (f32(count) + f32(0.5)) + f32(1.0)))
        fr = freq.astype(f32)
        norm = K1 * (f32(1.0) - B + B * length.astype(f32) / avgdl)
        out.append((idf * ((K1 + f32(1.0)) * fr / (fr + norm))).astype(f32))
    return out


def _allowed(plan: TextPlan, task: ScanTask) -> np.ndarray | None:
    """The rows of the table the filter keeps (a mask by position), or None for all."""
    if isinstance(plan.filter, TrueFilter):
        return None
    dataset = open_task(task, plan.storage_options)
    mapping = dataset_columns(dataset.schema, plan.schema)
    needed = [c for c in plan.schema.arrow.names if c in columns_of(plan.filter)]
    with translate_lance_errors(f"search partition table {task.object_id}"):
        if needed:
            raw = dataset.to_table(columns=[mapping[c] for c in needed if c in mapping])
            rows = reconcile(raw, mapping, needed, plan.schema, task.object_id)
        else:
            rows = pa.Table.from_arrays([], schema=pa.schema([])).append_column(
                "__n", pa.nulls(dataset.count_rows(), pa.int8())
            )
    count = rows.num_rows
    rows = rows.append_column("__pos", pa.array(np.arange(count, dtype=np.int64)))
    mask = np.zeros(count, dtype=bool)
    mask[rows.filter(arrow_predicate(plan.filter, plan.schema.arrow)).column("__pos").to_numpy()] = True
    return mask


def search_text(plan: TextPlan, *, threads: int = THREADS) -> pa.Table:
    """The plan's global top-k: the output columns and ``_score``, best first."""
    empty = plan.output_schema.empty_table()
    if not plan.tokens or not plan.selected:
        return empty
    held = [i for i in range(len(plan.tables)) if _is_held(plan, i)]  # no thread for a cache lookup
    made = [i for i in range(len(plan.tables)) if i not in set(held)]
    got = dict(zip(made, _map(lambda i: partition_postings(plan, i), made, threads), strict=True))
    got.update((i, partition_postings(plan, i)) for i in held)
    postings = [got[i] for i in range(len(plan.tables))]
    documents = sum(p.documents for p in postings)
    total = sum(p.tokens for p in postings)
    df = [sum(0 if (s := p.entries(t)) is None else s.stop - s.start for p in postings) for t in plan.tokens]
    if documents == 0 or not any(df):
        return empty
    masks = _map(lambda j: _allowed(plan, plan.tables[j]), plan.selected, threads if plan.filter != TrueFilter() else 1)
    keys, freqs, lengths = [], [], []
    for token in plan.tokens:
        parts = [
            (j, p.rows[s], p.freqs[s], p.lengths[s])
            for j in plan.selected
            for p in [postings[j]]
            if (s := p.entries(token))
        ]
        keys.append(np.concatenate([np.int64(j) << 40 | r for j, r, _, _ in parts]) if parts else np.empty(0, np.int64))
        freqs.append(np.concatenate([f for _, _, f, _ in parts]) if parts else np.empty(0, np.int32))
        lengths.append(np.concatenate([n for _, _, _, n in parts]) if parts else np.empty(0, np.int32))
    scores = bm25_scores(documents, total, df, freqs, lengths)
    unique, where = np.unique(np.concatenate(keys), return_inverse=True)
    acc = np.zeros(len(unique), dtype=np.float32)
    start = 0
    for term in scores:  # a document's terms are added in query order, in float32
        acc[where[start : start + len(term)]] += term
        start += len(term)
    owner, rows = unique >> 40, unique & ((1 << 40) - 1)
    keep = np.ones(len(unique), dtype=bool)
    for j, mask in zip(plan.selected, masks, strict=True):
        if mask is not None:
            mine = owner == j
            keep[mine] = mask[rows[mine]]
    acc, owner, rows = acc[keep], owner[keep], rows[keep]
    order = np.lexsort((rows, owner, -acc))[: plan.k]
    return _take(plan, owner[order], rows[order], acc[order], threads)


def _take(plan: TextPlan, owner: np.ndarray, rows: np.ndarray, scores: np.ndarray, threads: int) -> pa.Table:
    """The output columns of the winning rows, in their order (one Lance take per table)."""
    if len(rows) == 0:
        return plan.output_schema.empty_table()
    tables = [int(j) for j in np.unique(owner)]

    def one(j: int) -> pa.Table:
        task = plan.tables[j]
        dataset = open_task(task, plan.storage_options)
        mapping = dataset_columns(dataset.schema, plan.schema)
        mine = np.sort(rows[owner == j])
        with translate_lance_errors(f"search partition table {task.object_id}"):
            raw = dataset.take(mine.tolist(), columns=[mapping[c] for c in plan.output if c in mapping])
        return reconcile(raw, mapping, list(plan.output), plan.schema, task.object_id)

    taken = _map(one, tables, 1)
    placed = np.concatenate([np.flatnonzero(owner == j)[np.argsort(rows[owner == j], kind="stable")] for j in tables])
    result = pa.concat_tables(taken).take(pa.array(np.argsort(placed, kind="stable")))
    return result.append_column(SCORE, pa.array(scores.astype(np.float32), pa.float32()))
