"""Metadata tables and partition listings for the JVM layer's catalog (``MetadataTable.java``, ``LanceTable.java``).

- ``SELECT * FROM lance.db.t.history``: one row per ``__manifest`` version (version,
  timestamp, operation, parameters, metrics), newest first, as :func:`pipelines.history`;
  the way to find the version ``VERSION AS OF`` wants.
- ``.partitions`` / ``.files``: :mod:`partitioning.plan.inspect`'s tables (one row per
  partition table / per fragment), Iceberg's ``t.partitions`` and ``t.files``.
- ``SHOW PARTITIONS t [PARTITION (...)]``: each partition table's values, one column per
  partition field of every spec version (NULL for the fields of other versions).

Rows go to the JVM as a base64 Arrow IPC stream typed as the Spark schema sent with them.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from partitioning.errors import InvalidInput
from partitioning.namespace import PartitionedNamespace
from partitioning.plan import inspect
from pipelines.columns.schema import spark_schema, to_arrow_schema

__all__ = ["metadata_table", "partition_values"]

KINDS = ("history", "partitions", "files")


def _version(args: Mapping[str, Any]) -> int | None:
    version = args.get("version")
    if version is not None and not str(version).isdigit():
        raise InvalidInput(f"VERSION AS OF must be a __manifest version number, got {version!r}")
    return int(version) if version is not None else None


def _answer(table: pa.Table) -> dict[str, Any]:
    schema = spark_schema(table.schema)
    table = table.cast(to_arrow_schema(schema))
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as stream:
        stream.write_table(table)
    return {"schema": schema.json(), "rows": base64.b64encode(sink.getvalue().to_pybytes()).decode("ascii")}


def metadata_table(root: str, args: Mapping[str, Any], options: Mapping[str, str] | None) -> dict[str, Any]:
    """The rows of metadata table ``args["kind"]`` of the table at ``root``."""
    kind = str(args.get("kind"))
    if kind not in KINDS:
        raise InvalidInput(f"unknown metadata table {kind!r}; metadata tables are {', '.join(KINDS)}")
    ns = PartitionedNamespace.load(root, options, manifest_version=_version(args))
    if kind == "history":
        history = ns.history()  # up to the version read
        return _answer(history.filter(pc.less_equal(history.column("version"), ns.manifest_version)))
    build = inspect.partitions_table if kind == "partitions" else inspect.files_table
    return _answer(build(ns))


def partition_values(root: str, args: Mapping[str, Any], options: Mapping[str, str] | None) -> dict[str, Any]:
    """Each partition table's values (``SHOW PARTITIONS``), one column per partition field."""
    ns = PartitionedNamespace.load(root, options, manifest_version=_version(args))
    struct = inspect.partition_type(ns)
    columns: dict[str, list[Any]] = {f.name: [] for f in struct}
    for table in ns.partitions():
        for name in columns:
            columns[name].append(table.values.get(name))
    return _answer(pa.table({f.name: pa.array(columns[f.name], f.type) for f in struct}))
