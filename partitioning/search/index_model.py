"""Index definitions and the shared vector model of a partitioned namespace (issue 13).

An index of the namespace is one Lance index of the same name in each partition
dataset. Its definition (:class:`IndexSpec`: column by namespace field id, type, metric,
parameters) is a ``__manifest`` property ``lance_partitioned.index.<name>``, so a later
:func:`pipelines.search.indexes.optimize_indexes` indexes new partitions the same way.

A vector index is built with ONE model (IVF centroids, and a PQ codebook for the PQ
types) trained once on a sample across the partitions: distances are comparable across
partitions and partitions too small to train on are indexed as well. The model is an
immutable Arrow IPC file named by its SHA-256, ``<root>/_index_models/<sha256>.arrow``
(:data:`MODEL_DIR`, which vacuum never deletes). The recorded path is untrusted input:
:func:`load_model` accepts only that exact shape, inside the root, with matching content.
"""

from __future__ import annotations

import hashlib
import json
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import lance
import pyarrow as pa
from lance.indices import IndicesBuilder

from partitioning.errors import (
    ConcurrentModification,
    CorruptNamespace,
    InvalidInput,
    PartitioningError,
    first_line,
    translate_lance_errors,
)
from partitioning.storage.locations import MODEL_DIR
from partitioning.storage.manifest import INDEX_KEY_PREFIX, ManifestStore
from partitioning.storage.paths import contained, join_uri
from partitioning.storage.roots import filesystem_of

__all__ = [
    "IndexSpec",
    "VectorModel",
    "load_model",
    "model_kwargs",
    "record_spec",
    "recorded_specs",
    "save_model",
    "train_model",
]

PROPERTY_PREFIX = INDEX_KEY_PREFIX
_MODEL_RE = re.compile(rf"^{MODEL_DIR}/([0-9a-f]{{64}})\.arrow$")
_MIN_PQ_SAMPLE = 512  # PQ training needs 256 codes x a sample rate of at least 2


@dataclass(frozen=True)
class IndexSpec:
    """One index of the namespace: ``column_id`` is the namespace field id of its column."""

    name: str
    column_id: int
    index_type: str
    metric: str | None = None
    params: tuple[tuple[str, int], ...] = ()
    model: str | None = None

    @property
    def is_vector(self) -> bool:
        return self.index_type.startswith("IVF_")

    def param(self, key: str) -> int | None:
        return dict(self.params).get(key)

    def to_json(self) -> str:
        body = {
            "name": self.name,
            "column_id": self.column_id,
            "index_type": self.index_type,
            "metric": self.metric,
            "params": dict(self.params),
            "model": self.model,
        }
        return json.dumps(body, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> IndexSpec:
        try:
            body = json.loads(text)
            params = tuple(sorted((str(k), int(v)) for k, v in dict(body.get("params") or {}).items()))
            model = body.get("model")
            return cls(
                str(body["name"]),
                int(body["column_id"]),
                str(body["index_type"]),
                None if body.get("metric") is None else str(body["metric"]),
                params,
                None if model is None else str(model),
            )
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise CorruptNamespace(f"index definition {text[:80]!r} in __manifest is not valid: {exc}") from exc


def recorded_specs(properties: Mapping[str, str]) -> dict[str, IndexSpec]:
    """The index definitions recorded in the namespace properties, by index name."""
    return {
        key[len(PROPERTY_PREFIX) :]: IndexSpec.from_json(value)
        for key, value in properties.items()
        if key.startswith(PROPERTY_PREFIX)
    }


DEFINITION_ATTEMPTS = 8


def record_spec(root: str, spec: IndexSpec, storage_options: Mapping[str, str] | None) -> None:
    """Record ``spec`` in the ``__manifest`` properties (replacing one of the same name)."""
    from partitioning.state.commits import commit_metadata
    from partitioning.storage.history import Operation

    store = ManifestStore(root, storage_options)
    properties = {f"{PROPERTY_PREFIX}{spec.name}": spec.to_json()}
    recorded = Operation("INDEX", {"index": spec.name, "step": "definition"})
    for attempt in range(DEFINITION_ATTEMPTS):
        try:
            commit_metadata(store, store.dataset(), properties, recorded)
            return
        except ConcurrentModification:
            if attempt == DEFINITION_ATTEMPTS - 1:
                raise


@dataclass(frozen=True)
class VectorModel:
    """IVF centroids (``k`` vectors of the column's dimension) and, for PQ, the codebook."""

    ivf_centroids: pa.FixedSizeListArray
    pq_codebook: pa.FixedSizeListArray | None = None

    def to_ipc(self) -> bytes:
        cols: dict[str, pa.Array] = {"ivf_centroids": _one_row(self.ivf_centroids)}
        if self.pq_codebook is not None:
            cols["pq_codebook"] = _one_row(self.pq_codebook)
        sink = pa.BufferOutputStream()
        table = pa.table(cols)
        with pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)
        return bytes(sink.getvalue().to_pybytes())

    @classmethod
    def from_ipc(cls, data: bytes) -> VectorModel:
        table = pa.ipc.open_file(pa.BufferReader(data)).read_all()
        centroids = table.column("ivf_centroids").combine_chunks().flatten()
        codebook = (
            table.column("pq_codebook").combine_chunks().flatten() if "pq_codebook" in table.schema.names else None
        )
        return cls(centroids, codebook)


def _one_row(values: pa.Array) -> pa.ListArray:
    return pa.ListArray.from_arrays(pa.array([0, len(values)], pa.int32()), values)


def train_model(
    sample: pa.FixedSizeListArray,
    index_type: str,
    metric: str,
    num_partitions: int,
    num_sub_vectors: int | None,
    max_iters: int = 50,
) -> VectorModel:
    """Train IVF (and PQ for the PQ types) once on ``sample`` (non-NULL vectors), in a temporary dataset."""
    n = len(sample)
    if n < 2 * num_partitions:
        raise InvalidInput(
            f"cannot train {index_type} with num_partitions={num_partitions}: the sample has {n} vectors, "
            f"{2 * num_partitions} needed; pass a smaller num_partitions"
        )
    pq = num_sub_vectors is not None
    if pq and n < _MIN_PQ_SAMPLE:
        raise InvalidInput(
            f"cannot train the PQ codebook of {index_type}: the sample has {n} vectors, {_MIN_PQ_SAMPLE} needed "
            "(use IVF_FLAT or IVF_SQ for so few rows)"
        )
    with tempfile.TemporaryDirectory(prefix="lance_partitioned_model_") as tmp:
        try:
            ds = lance.write_dataset(pa.table({"v": sample}), join_uri(tmp, "sample.lance"))
            builder = IndicesBuilder(ds, "v")
            ivf = builder.train_ivf(
                num_partitions, distance_type=metric, sample_rate=min(256, n // num_partitions), max_iters=max_iters
            )
            codebook = None
            if pq:
                trained = builder.train_pq(ivf, num_sub_vectors, sample_rate=min(256, n // 256), max_iters=max_iters)
                codebook = trained.codebook
        except (ValueError, OSError, RuntimeError) as exc:
            raise InvalidInput(f"cannot train the {index_type} model: {first_line(exc)}") from exc
    return VectorModel(ivf.centroids, codebook)


def save_model(root: str, model: VectorModel, storage_options: Mapping[str, str] | None) -> str:
    """Write ``model`` once under ``root`` (content-named, so never overwritten); its relative path."""
    data = model.to_ipc()
    relative = f"{MODEL_DIR}/{hashlib.sha256(data).hexdigest()}.arrow"
    fs, path = filesystem_of(join_uri(root, relative), storage_options)
    with translate_lance_errors(f"write the index model {relative} under {root}"):
        fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
        with fs.open_output_stream(path) as out:
            out.write(data)
    return relative


def load_model(root: str, relative: str, storage_options: Mapping[str, str] | None) -> VectorModel:
    """The model recorded as ``relative``: only ``_index_models/<sha256>.arrow`` inside
    ``root`` is read, and its content must hash to its name."""
    match = _MODEL_RE.match(relative) if isinstance(relative, str) else None
    if match is None:
        raise CorruptNamespace(
            f"index model path {str(relative)[:120]!r} recorded in {root}/__manifest is not "
            f"{MODEL_DIR}/<sha256>.arrow; refusing to read it"
        )
    uri = join_uri(root, relative)
    try:
        contained(root, uri)
    except PartitioningError as exc:
        raise CorruptNamespace(f"index model {relative!r} lies outside {root}; refusing to read it") from exc
    fs, path = filesystem_of(uri, storage_options)
    try:
        with fs.open_input_stream(path) as src:
            data = bytes(src.read())
    except (OSError, pa.ArrowException) as exc:
        raise CorruptNamespace(f"cannot read the index model {uri}: {first_line(exc)}") from exc
    if hashlib.sha256(data).hexdigest() != match.group(1):
        raise CorruptNamespace(f"index model {uri} does not match its name (damaged or replaced)")
    try:
        return VectorModel.from_ipc(data)
    except (pa.ArrowException, KeyError) as exc:
        raise CorruptNamespace(f"index model {uri} is not a valid model: {first_line(exc)}") from exc


def model_kwargs(spec: IndexSpec, model: VectorModel | None) -> dict[str, Any]:
    """Keyword arguments for ``create_index_uncommitted`` of a vector ``spec`` with ``model``."""
    out: dict[str, Any] = {"metric": spec.metric or "l2"}
    if model is not None:
        out["ivf_centroids"] = model.ivf_centroids
        out["num_partitions"] = len(model.ivf_centroids)
        if model.pq_codebook is not None:
            out["pq_codebook"] = model.pq_codebook
            out["num_sub_vectors"] = spec.param("num_sub_vectors")
    for key in ("m", "ef_construction"):
        if spec.param(key) is not None:
            out[key] = spec.param(key)
    return out
