"""Spark schemas <-> namespace schemas (JsonArrowSchema with field ids).

Spark types map to Arrow as SPEC-NOTES 7 lists: TimestampType is
``timestamp[us, tz=UTC]`` and TimestampNTZType is ``timestamp[us]``, so every
Spark atomic type round-trips Spark -> JSON -> Spark unchanged.
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.errors import PySparkTypeError
from pyspark.sql import types as T
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_type

from partitioning.errors import SchemaError
from partitioning.schema import NamespaceSchema

__all__ = ["namespace_schema_from_spark", "spark_schema", "spark_to_arrow_schema"]


def spark_to_arrow_schema(struct: T.StructType) -> pa.Schema:
    """The Arrow schema of a Spark schema, naming the column of any unsupported type."""
    fields = []
    for f in struct.fields:
        try:
            arrow_type = to_arrow_type(f.dataType, timezone="UTC", error_on_duplicated_field_names_in_struct=True)
        except (PySparkTypeError, TypeError, ValueError) as exc:
            raise SchemaError(
                f"column {f.name!r}: Spark type {f.dataType.simpleString()} cannot be stored in a Lance namespace"
            ) from exc
        fields.append(pa.field(f.name, arrow_type, nullable=f.nullable))
    return pa.schema(fields)


def namespace_schema_from_spark(struct: T.StructType) -> NamespaceSchema:
    """A new namespace schema for a Spark schema, with field ids assigned from 0."""
    return NamespaceSchema.from_arrow(spark_to_arrow_schema(struct))


def spark_schema(schema: NamespaceSchema | pa.Schema) -> T.StructType:
    """The Spark schema of a namespace schema (field-id metadata dropped)."""
    arrow = schema.plain if isinstance(schema, NamespaceSchema) else schema
    return from_arrow_schema(arrow, prefer_timestamp_ntz=True)
