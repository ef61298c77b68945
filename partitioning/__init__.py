"""Spark-free core of the Lance partitioned namespace: specs, schema, transforms, __manifest."""

import os

# pylance logs a warning for every fragment written to a not-yet-created dataset, which
# is every new partition; keep its Rust log to errors unless the user chose a level.
os.environ.setdefault("LANCE_LOG", "error")

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
)
from partitioning.namespace import PartitionedNamespace, PartitionTable, TableCommit
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
    "parse_partition_by",
    "parse_transform",
]
