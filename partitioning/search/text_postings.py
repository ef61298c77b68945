"""A partition's text column as BM25 postings, tokenized exactly as its Lance INVERTED index.

Lance scores a full-text query with statistics of the whole index it searches: the number
of documents, their total token count (so the average length) and, per query token, the
number of documents holding it. A partition's own index knows only its own, so its scores
are not comparable with another partition's. This module gives every partition the raw
material of those statistics, from which :mod:`partitioning.search.text` scores with the
statistics of the whole table:

- :func:`index_tokenizer` reads the tokenizer options of the partition's INVERTED index on
  a column (``describe_indices()`` details);
- :func:`postings_of` tokenizes every row of the column with ``lance.tokenize`` and those
  options (Lance's own analyzer: the tokens the index holds), and keeps per token the rows
  holding it with their frequency, per row its length in tokens, the number of documents
  (rows with at least one token, as Lance counts them) and the total token count.

Postings of a version pinned by ``__manifest`` never change, so they are kept per process
(:data:`CACHE_BYTES`, ``LANCE_PARTITIONED_TEXT_CACHE_BYTES``, least recently used go first).
"""

from __future__ import annotations

import os
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import lance
import numpy as np
import pyarrow as pa

from partitioning.errors import InvalidInput, translate_lance_errors
from partitioning.search.pinned import VersionCache

__all__ = ["CACHE_BYTES", "Postings", "hold", "index_tokenizer", "is_held", "postings_from", "postings_of", "tokenize"]

CACHE_BYTES = int(os.environ.get("LANCE_PARTITIONED_TEXT_CACHE_BYTES", 256 << 20))
# the options of lance.tokenize, by their name in the index details
_OPTIONS = (
    "base_tokenizer",
    "language",
    "max_token_length",
    "lower_case",
    "stem",
    "remove_stop_words",
    "custom_stop_words",
    "ascii_folding",
    "min_ngram_length",
    "max_ngram_length",
    "prefix_only",
    "split_identifiers",
    "split_on_numerics",
    "preserve_original",
    "index_operators",
)
# a word the simple and whitespace tokenizers keep whole: rows are tokenized in batches joined by it
_BREAK = "qzxjv7rowbreak7qzxjv"
_BATCH = 256  # rows per lance.tokenize call (one call costs about 30 us whatever its length)
_cache: VersionCache[Postings] = VersionCache(CACHE_BYTES)


def index_tokenizer(dataset: lance.LanceDataset, column: str) -> tuple[tuple[str, Any], ...] | None:
    """The ``lance.tokenize`` options of the dataset's INVERTED index on ``column`` (its name in
    the dataset), or ``None`` when it has none. Sorted pairs, so that equal options compare equal."""
    with translate_lance_errors(f"list indexes of {dataset.uri}"):
        described = dataset.describe_indices()
    for index in described:
        if list(index.field_names) != [column] or "Inverted" not in index.type_url:
            continue
        details = dict(index.details or {})
        if details.get("document_granularity", "row") != "row":
            raise InvalidInput(
                f"the INVERTED index {index.name!r} on column {column!r} of {dataset.uri} indexes list elements; "
                "full-text search across partitions needs one document per row"
            )
        options: dict[str, Any] = {k: details[k] for k in _OPTIONS if k in details}
        if details.get("lance_tokenizer"):
            options["analyzer"] = details["lance_tokenizer"]
        if isinstance(options.get("custom_stop_words"), list):
            options["custom_stop_words"] = tuple(options["custom_stop_words"])
        return tuple(sorted(options.items()))
    return None


def tokenize(text: str, options: Sequence[tuple[str, Any]]) -> list[str]:
    """The tokens Lance's analyzer with ``options`` makes of ``text``, in order."""
    kwargs: dict[str, Any] = {k: list(v) if isinstance(v, tuple) else v for k, v in options}
    return [t.text for t in lance.tokenize(text, **kwargs)]


def _tokenize_rows(texts: Sequence[str], options: Sequence[tuple[str, Any]]) -> list[list[str]]:
    """Each text's tokens. The simple and whitespace tokenizers split at spaces, so a batch of
    rows joined by a break word is one call; a batch whose break count is off (a row holding
    the word) is tokenized row by row."""
    if dict(options).get("base_tokenizer", "simple") not in ("simple", "whitespace") or "analyzer" in dict(options):
        return [tokenize(t, options) for t in texts]
    brk = tokenize(_BREAK, options)
    out: list[list[str]] = []
    for start in range(0, len(texts), _BATCH):
        chunk = texts[start : start + _BATCH]
        flat = tokenize(f" {_BREAK} ".join(chunk), options) if len(brk) == 1 else []
        rows: list[list[str]] = [[]]
        for token in flat:
            if token == brk[0]:
                rows.append([])
            else:
                rows[-1].append(token)
        out.extend(rows if len(brk) == 1 and len(rows) == len(chunk) else [tokenize(t, options) for t in chunk])
    return out


@dataclass(frozen=True)
class Postings:
    """One partition's text column, as Lance's index sees it. ``vocabulary`` maps a token to
    its id; ``starts[i]:starts[i + 1]`` are token ``i``'s entries in ``rows`` (row positions,
    ascending: offsets for ``take``) and ``freqs``; ``lengths`` is each entry's document
    length in tokens. ``documents`` counts the rows with a token, ``tokens`` all tokens."""

    vocabulary: Mapping[str, int]
    starts: np.ndarray
    rows: np.ndarray
    freqs: np.ndarray
    lengths: np.ndarray
    documents: int
    tokens: int

    @property
    def nbytes(self) -> int:
        words = sum(len(w) + 80 for w in self.vocabulary)  # a str and its dict slot
        return words + self.starts.nbytes + self.rows.nbytes + self.freqs.nbytes + self.lengths.nbytes

    def entries(self, token: str) -> slice | None:
        i = self.vocabulary.get(token)
        return None if i is None else slice(int(self.starts[i]), int(self.starts[i + 1]))


def postings_from(texts: pa.Array, options: Sequence[tuple[str, Any]]) -> Postings:
    """The postings of one column's values (row ``i`` is position ``i``; NULLs hold no token)."""
    values = texts.to_pylist()
    present = [i for i, v in enumerate(values) if v is not None]
    tokenized = _tokenize_rows([values[i] for i in present], options)
    sizes = np.fromiter((len(t) for t in tokenized), dtype=np.int64, count=len(tokenized))
    vocabulary: dict[str, int] = {}
    ids = np.fromiter(
        (vocabulary.setdefault(w, len(vocabulary)) for t in tokenized for w in t),
        dtype=np.int64,
        count=int(sizes.sum()),
    )
    owner = np.repeat(np.asarray(present, dtype=np.int64), sizes)
    length_of = np.zeros(len(values), dtype=np.int64)
    length_of[present] = sizes
    key, freqs = np.unique(ids * max(1, len(values)) + owner, return_counts=True)  # by token, then row
    token, rows = np.divmod(key, max(1, len(values)))
    starts = np.searchsorted(token, np.arange(len(vocabulary) + 1))
    return Postings(
        vocabulary,
        starts.astype(np.int64),
        rows.astype(np.int64),
        freqs.astype(np.int32),
        length_of[rows].astype(np.int32),
        int(np.count_nonzero(sizes)),
        int(sizes.sum()),
    )


def is_held(key: Hashable, column: str, options: Sequence[tuple[str, Any]]) -> bool:
    """Whether this process holds the postings of ``column`` of the pinned version ``key``."""
    return (key, column, tuple(options)) in _cache


def hold(key: Hashable, column: str, options: Sequence[tuple[str, Any]], postings: Postings) -> None:
    """Keep ``postings`` (of ``column`` of the pinned version ``key``) while the cache has room."""
    _cache.put((key, column, tuple(options)), postings)


def postings_of(
    dataset: lance.LanceDataset, column: str, options: Sequence[tuple[str, Any]], key: Hashable | None
) -> Postings:
    """The partition's postings of ``column`` (its name in the dataset), from the cache when
    ``key`` (a pinned version) is given."""

    def compute() -> Postings:
        with translate_lance_errors(f"read column {column!r} of {dataset.uri}"):
            texts = dataset.to_table(columns=[column]).column(column).combine_chunks()
        return postings_from(texts, options)

    return _cache.get_or_compute((key, column, tuple(options)) if key is not None else None, compute)
