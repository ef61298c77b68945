"""Spark-free core of the Lance partitioned namespace: specs, schema, transforms, __manifest.

The floor plan, bottom up (a package imports only those below it; ``docs/architecture.md``
draws the arrows and ``tests/test_architecture.py`` holds the code to them):

- ``errors``: the one exception root and its subclasses; ``progress``: progress lines.
- :mod:`partitioning.sql`: filter text, the filter tree, binding, DataFusion.
- :mod:`partitioning.spec`: partition specs, transforms, murmur3, expressions, the schema.
- :mod:`partitioning.storage`: roots, paths, the ``__manifest`` store, partition datasets,
  leases, the protected path, orphans.
- :mod:`partitioning.stats`: column statistics per partition table and the data skipping
  they allow.
- :mod:`partitioning.state`: one ``__manifest`` version read, pruned, planned and committed.
- ``namespace_view`` and ``namespace``: :class:`PartitionedNamespace`, the entry point
  (the view holds its read side).
- :mod:`partitioning.tables` (writes, rewrites, maintenance, restore),
  :mod:`partitioning.search` (vectors and indexes) and :mod:`partitioning.plan` (joins,
  metadata tables): the operations, which never import each other.
- :mod:`partitioning.service`: the namespace as Lance namespace clients see it
  (``lance_namespace.connect("partitioned", {"root": ...})``, registered below), and
  :class:`NamespaceServer`, the same over the Lance Namespace REST protocol, and
  :func:`dataset` / :func:`write_arrow`, Spark-free reads and writes for DuckDB, Polars
  and small producers.

This module keeps the public names; imports from the modules are private and may move.
"""

import os

# pylance logs a warning for every fragment written to a not-yet-created dataset, which
# is every new partition; keep its Rust log to errors unless the user chose a level.
os.environ.setdefault("LANCE_LOG", "error")

from lance_namespace import register_namespace_impl

from partitioning.errors import (
    ConcurrentModification,
    CorruptNamespace,
    InvalidInput,
    NamespaceAlreadyExists,
    NamespaceNotFound,
    PartitioningError,
    SchemaError,
    SpecError,
    TableNotFound,
    Unsupported,
)
from partitioning.namespace import PartitionedNamespace, PartitionTable, TableCommit
from partitioning.service.arrow import dataset, write_arrow
from partitioning.service.rest import NamespaceServer
from partitioning.spec.partition_by import parse_partition_by
from partitioning.spec.partition_spec import PartitionField, PartitionSpec
from partitioning.spec.schema import NamespaceSchema
from partitioning.spec.transforms import Transform, parse_transform

__all__ = [
    "ConcurrentModification",
    "CorruptNamespace",
    "InvalidInput",
    "NamespaceAlreadyExists",
    "NamespaceNotFound",
    "NamespaceSchema",
    "NamespaceServer",
    "PartitionField",
    "PartitionSpec",
    "PartitionTable",
    "PartitionedNamespace",
    "PartitioningError",
    "SchemaError",
    "SpecError",
    "TableCommit",
    "TableNotFound",
    "Transform",
    "Unsupported",
    "dataset",
    "parse_partition_by",
    "parse_transform",
    "write_arrow",
]

register_namespace_impl("partitioned", "partitioning.service.namespace_api.PartitionedLanceNamespace")
