"""Spark-free core of the Lance partitioned namespace: specs, schema, transforms, __manifest."""

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
from partitioning.schema import NamespaceSchema
from partitioning.spec import PartitionField, PartitionSpec, parse_partition_by
from partitioning.transforms import Transform, parse_transform

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
