"""The ``nearest`` read option of the ``lance_partitioned`` data source.

``spark.read.format("lance_partitioned").option("nearest", json.dumps({"column": "v",
"q": [...], "k": 10})).load(root)`` is the global top-k of
:func:`pipelines.search.queries.search_partitioned`: the selected columns plus ``_distance``,
nearest first. The JSON object may also hold ``metric``, ``nprobes``,
``refine_factor``, ``exact`` (or ``use_index: false``) and ``prefilter``; the ``filter``
option (with ``timeZone``/``sqlConf``) is the search filter, and ``columns`` selects
columns.

The scan is one input partition that runs the whole search. The reader is built from
the options alone (it defines no ``pushFilters``), so PySpark 4.3's sharing of one read
plan between scans of a DataFrame cannot change its result: a ``.where(...)`` on the
result is applied by Spark to the top-k rows.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import FloatType, StructType

from partitioning.errors import InvalidInput, PartitioningError
from partitioning.namespace import PartitionedNamespace
from partitioning.search.nearest import DISTANCE, plan_search, query_matrix, search_tasks
from pipelines.search.queries import to_spark_table
from pipelines.source.reader import dialect_from_options
from pipelines.spark_errors import hide_worker_traceback

__all__ = ["NEAREST_KEYS", "NearestReader", "nearest_schema", "parse_nearest"]

NEAREST_KEYS = ("column", "q", "k", "metric", "nprobes", "refine_factor", "exact", "use_index", "prefilter")
_NOT_WITH_NEAREST = ("prune_filter", "with_row_address")


def parse_nearest(text: str) -> dict[str, Any]:
    """The ``nearest`` option's JSON object, with its keys checked (one line on error)."""
    try:
        spec = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"option nearest is not JSON: {exc.msg}") from exc
    if not isinstance(spec, dict):
        raise InvalidInput('option nearest must be a JSON object such as {"column": "v", "q": [...], "k": 10}')
    unknown = sorted(set(spec) - set(NEAREST_KEYS))
    if unknown:
        raise InvalidInput(f"unknown key {unknown[0]!r} in option nearest; keys are: {', '.join(NEAREST_KEYS)}")
    if "q" not in spec:
        raise InvalidInput('option nearest needs "q", the query vector')
    for key in ("exact", "use_index", "prefilter"):
        if key in spec and not isinstance(spec[key], bool):
            raise InvalidInput(f"option nearest: {key!r} must be true or false, got {spec[key]!r}")
    return spec


def nearest_schema(schema: StructType) -> StructType:
    """The read schema with ``_distance`` added."""
    return StructType([*schema.fields]).add(DISTANCE, FloatType(), True)


class NearestReader(DataSourceReader):
    """One input partition that searches every planned partition table and yields the top-k."""

    def __init__(self, ns: PartitionedNamespace, schema: StructType, options: Mapping[str, str]) -> None:
        for key in _NOT_WITH_NEAREST:
            if key in options:
                raise InvalidInput(f"option {key} cannot be combined with option nearest")
        spec = parse_nearest(options["nearest"])
        columns = [c for c in schema.names if c != DISTANCE]
        self.plan = plan_search(
            ns,
            k=spec.get("k", 10),
            column=spec.get("column"),
            filter=options.get("filter"),
            metric=spec.get("metric"),
            nprobes=spec.get("nprobes"),
            refine_factor=spec.get("refine_factor"),
            exact=bool(spec.get("exact", False)) or spec.get("use_index") is False,
            columns=columns,
            prefilter=spec.get("prefilter", True),
            dialect=dialect_from_options(options),
        )
        self.query = query_matrix(spec["q"], self.plan.column, self.plan.dimension)

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(0)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        try:
            found = search_tasks(self.plan, self.plan.tasks, self.query)[0]
        except PartitioningError:
            hide_worker_traceback()
            raise
        yield from to_spark_table(found).to_batches()
