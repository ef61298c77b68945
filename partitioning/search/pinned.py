"""Partition datasets opened once per pinned version, with Lance's index cache.

A version pinned by ``__manifest`` (a ``read_version``, no branch or tag) never changes,
so its dataset object, and the metric of its vector index, are kept per process
(:data:`PINNED_DATASETS`, least recently used go first): without the dataset object every
search reads the index from storage again (3x slower). Branch and tag reads may move and
are opened each time. What is computed from a pinned version (its vectors, its postings) is
kept in a :class:`VersionCache`, bounded by bytes.
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping
from typing import Generic, Protocol, TypeVar

import lance

from partitioning.errors import translate_lance_errors
from partitioning.state.partition_tables import open_partition_table
from partitioning.state.scan import ScanTask

__all__ = ["PINNED_DATASETS", "VersionCache", "index_metric", "is_pinned", "open_task", "options_key", "pinned_metric"]

PINNED_DATASETS = 256  # partition datasets kept open per process, with their index caches


class _Sized(Protocol):
    @property
    def nbytes(self) -> int: ...


V = TypeVar("V", bound=_Sized)


class VersionCache(Generic[V]):
    """Values computed from pinned versions, kept per process while they hold at most
    ``limit`` bytes together (least recently used go first; a larger one is not kept)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._values: OrderedDict[Hashable, V] = OrderedDict()
        self._held = 0

    def __len__(self) -> int:
        return len(self._values)

    @property
    def held(self) -> int:
        """The bytes the values kept hold together."""
        return self._held

    def keys(self) -> list[Hashable]:
        """The keys kept, least recently used first."""
        with self._lock:
            return list(self._values)

    def __contains__(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._values

    def get(self, key: Hashable) -> V | None:
        with self._lock:
            found = self._values.get(key)
            if found is not None:
                self._values.move_to_end(key)
            return found

    def put(self, key: Hashable, value: V) -> None:
        if value.nbytes > self.limit:
            return
        with self._lock:
            if key not in self._values:
                self._values[key] = value
                self._held += value.nbytes
            while self._held > self.limit:
                _, gone = self._values.popitem(last=False)
                self._held -= gone.nbytes

    def get_or_compute(self, key: Hashable | None, compute: Callable[[], V]) -> V:
        """The value for ``key`` (None: not pinned, computed and not kept)."""
        found = self.get(key) if key is not None else None
        if found is None:
            found = compute()
            if key is not None:
                self.put(key, found)
        return found


def is_pinned(task: ScanTask) -> bool:
    return task.read_version is not None and task.read_branch is None and task.read_tag is None


def options_key(storage_options: Mapping[str, str] | None) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((storage_options or {}).items()))


@functools.lru_cache(maxsize=PINNED_DATASETS * 4)
def pinned_metric(uri: str, version: int, options: tuple[tuple[str, str], ...], column: str) -> str | None:
    return index_metric(_pinned(uri, version, options), column)


def open_task(task: ScanTask, storage_options: Mapping[str, str] | None) -> lance.LanceDataset:
    """The partition's dataset as the manifest pins it (kept open when pinned)."""
    if not is_pinned(task):
        return open_partition_table(task.uri, task.read_version, task.read_branch, task.read_tag, storage_options)
    assert task.read_version is not None
    return _pinned(task.uri, task.read_version, options_key(storage_options))


@functools.lru_cache(maxsize=PINNED_DATASETS)
def _pinned(uri: str, version: int, options: tuple[tuple[str, str], ...]) -> lance.LanceDataset:
    return open_partition_table(uri, version, None, None, dict(options) or None)


def index_metric(dataset: lance.LanceDataset, column: str) -> str | None:
    """The metric of the dataset's vector index on ``column`` (its dataset name), if any."""
    with translate_lance_errors(f"list indexes of {dataset.uri}"):
        for index in dataset.describe_indices():
            if list(index.field_names) != [column] or "Vector" not in index.type_url:
                continue
            found = (index.details or {}).get("metric_type")  # index_stats costs ~30 ms a partition
            if not isinstance(found, str):
                indices = dataset.stats.index_stats(index.name).get("indices") or [{}]
                found = indices[0].get("metric_type")
            if isinstance(found, str):
                return found.lower()
    return None
