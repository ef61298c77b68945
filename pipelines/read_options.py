"""What a read hands the ``lance_partitioned`` source: its Spark schema and the session's SQL dialect.

Shared by :mod:`pipelines.read.dataframe` (which sets the options) and :mod:`pipelines.source.datasource`
(which reads them); :func:`pipelines.source.reader.dialect_from_options` is the inverse of
:func:`dialect_options`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from pyspark.sql import SparkSession
from pyspark.sql.types import StructType

from partitioning.errors import SchemaError
from partitioning.plan.table_rows import ROW_ADDRESS, ROW_TABLE
from partitioning.spec.schema import NamespaceSchema
from partitioning.sql.filters import Dialect
from pipelines.columns.schema import spark_schema

__all__ = ["dialect_options", "read_schema", "session_dialect"]


def read_schema(
    schema: NamespaceSchema, columns: str | Sequence[str] | None = None, *, row_address: bool = False
) -> StructType:
    """The Spark schema of a read: the namespace schema, or the named subset in that order;
    with ``row_address``, then each row's table id and Lance row address."""
    full = spark_schema(schema)
    if columns:
        names = [c.strip() for c in columns.split(",")] if isinstance(columns, str) else list(columns)
        unknown = [c for c in names if c not in full.names]
        if unknown:
            raise SchemaError(
                f"unknown column(s) {', '.join(map(repr, unknown))}; columns are: {', '.join(full.names)}"
            )
        full = StructType([full[c] for c in names])
    return full.add(ROW_TABLE, "string", False).add(ROW_ADDRESS, "long", False) if row_address else full


def _conf(spark: SparkSession, key: str, default: str) -> str:
    value = spark.conf.get(key, default)
    return default if value is None else str(value)


def session_dialect(spark: SparkSession) -> Dialect:
    """How this session's SQL reads a filter: its time zone and parser settings."""
    return Dialect(
        "spark",
        _conf(spark, "spark.sql.session.timeZone", "UTC"),
        escaped_string_literals=_conf(spark, "spark.sql.parser.escapedStringLiterals", "false").lower() == "true",
        double_quoted_identifiers=_conf(spark, "spark.sql.ansi.doubleQuotedIdentifiers", "false").lower() == "true",
        case_sensitive=_conf(spark, "spark.sql.caseSensitive", "false").lower() == "true",
        timestamp_ntz_default=_conf(spark, "spark.sql.timestampType", "TIMESTAMP_LTZ").upper() == "TIMESTAMP_NTZ",
        ansi=_conf(spark, "spark.sql.ansi.enabled", "true").lower() == "true",
    )


def dialect_options(dialect: Dialect) -> dict[str, str]:
    """The read options that carry ``dialect`` to the data source."""
    conf = {
        "escapedStringLiterals": dialect.escaped_string_literals,
        "doubleQuotedIdentifiers": dialect.double_quoted_identifiers,
        "caseSensitive": dialect.case_sensitive,
        "timestampNTZ": dialect.timestamp_ntz_default,
        "ansi": dialect.ansi,
    }
    return {"timeZone": dialect.time_zone, "sqlConf": json.dumps(conf, sort_keys=True)}
