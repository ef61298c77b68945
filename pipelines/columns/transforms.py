"""Partition transforms as Spark Columns, matching ``partitioning.spec.transforms`` row for row.

Each function takes and returns a Column so transforms compose inside ``select``.
Time parts are computed in UTC whatever ``spark.sql.session.timeZone`` says;
murmur3 runs as a vectorized ``arrow_udf`` over this project's Arrow murmur3, since
Spark's own ``hash()`` is a different function (seed 42, non-standard tail).
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from partitioning.errors import SpecError
from partitioning.spec.expression import evaluate_expression
from partitioning.spec.partition_spec import PartitionField
from partitioning.spec.schema import NamespaceSchema
from partitioning.spec.transforms import (
    BucketTransform,
    DayTransform,
    HourTransform,
    IdentityTransform,
    MonthTransform,
    MultiBucketTransform,
    Transform,
    TruncateTransform,
    YearTransform,
)
from pipelines.columns.murmur3 import (
    bucket_column,
    murmur3_column,
    murmur3_multi_column,
    native_murmur3_supported,
    with_murmur3,
)
from pipelines.columns.schema import from_arrow_type

__all__ = [
    "bucket",
    "day",
    "hour",
    "identity",
    "month",
    "multi_bucket",
    "murmur3",
    "murmur3_multi",
    "partition_value",
    "select_partition_columns",
    "transform_column",
    "truncate",
    "with_partition_columns",
    "year",
]

_SECONDS_PER_DAY = 86_400
_SECONDS_PER_HOUR = 3_600


def murmur3(col: Column, source_type: T.DataType | None = None) -> Column:
    """The spec's ``murmur3(col)``: signed int32, NULL for NULL (see :mod:`pipelines.columns.murmur3`)."""
    return murmur3_column(col, source_type)


def murmur3_multi(*cols: Column) -> Column:
    """The spec's ``murmur3_multi``: hash of the concatenated non-null values."""
    return murmur3_multi_column(*cols)


def identity(col: Column, source_type: T.DataType | None = None) -> Column:
    """The value unchanged, except floats: -0.0 becomes 0.0 and every NaN the canonical NaN.

    Spark compares -0.0 = 0.0 and NaN = NaN, so each must be one partition value; this
    matches :func:`partitioning.spec.values.canonical_floats` bit for bit.
    """
    if isinstance(source_type, T.FloatType | T.DoubleType):
        return (
            F.when(F.isnan(col), F.lit(float("nan")).cast(source_type))
            .when(col == F.lit(0.0).cast(source_type), F.lit(0.0).cast(source_type))
            .otherwise(col)
        )
    return col


def _utc_date(col: Column, source_type: T.DataType) -> Column:
    """The UTC calendar date of a date or timestamp column."""
    if isinstance(source_type, T.DateType):
        return col
    if isinstance(source_type, T.TimestampNTZType):
        return F.to_date(col)
    if isinstance(source_type, T.TimestampType):
        days = F.floor(F.unix_seconds(col) / F.lit(_SECONDS_PER_DAY)).cast("int")
        return F.date_from_unix_date(days)
    raise SpecError(f"time transforms accept date or timestamp columns, not {source_type.simpleString()}")


def year(col: Column, source_type: T.DataType) -> Column:
    return F.year(_utc_date(col, source_type)).cast("int")


def month(col: Column, source_type: T.DataType) -> Column:
    return F.month(_utc_date(col, source_type)).cast("int")


def day(col: Column, source_type: T.DataType) -> Column:
    """Day of the month (1-31), as the spec's ``date_part('day', ...)``."""
    return F.dayofmonth(_utc_date(col, source_type)).cast("int")


def hour(col: Column, source_type: T.DataType) -> Column:
    if isinstance(source_type, T.TimestampNTZType):
        return F.hour(col).cast("int")
    if isinstance(source_type, T.TimestampType):
        hours = F.floor(F.unix_seconds(col) / F.lit(_SECONDS_PER_HOUR))
        return F.pmod(hours, F.lit(24)).cast("int")
    raise SpecError(f"hour accepts timestamp columns, not {source_type.simpleString()}")


def bucket(col: Column, num_buckets: int, source_type: T.DataType | None = None) -> Column:
    """``abs(murmur3(col)) % num_buckets`` as int in ``[0, N)``."""
    BucketTransform(num_buckets)
    return bucket_column(murmur3_column(col, source_type), num_buckets)


def multi_bucket(cols: Sequence[Column], num_buckets: int) -> Column:
    MultiBucketTransform(num_buckets)
    return bucket_column(murmur3_multi_column(*cols), num_buckets)


def truncate(col: Column, width: int, source_type: T.DataType) -> Column:
    """First ``width`` characters (or bytes), or ``v - (v % width)`` for integers and decimals."""
    TruncateTransform(width)
    if isinstance(source_type, T.StringType | T.BinaryType):
        return F.substring(col, 1, width)
    if isinstance(source_type, T.ByteType | T.ShortType | T.IntegerType | T.LongType | T.DecimalType):
        return (col - (col % F.lit(width))).cast(source_type)
    raise SpecError(
        f"truncate accepts int, long, short, byte, decimal, string or binary, not {source_type.simpleString()}"
    )


def transform_column(transform: Transform, cols: Sequence[Column], source_types: Sequence[T.DataType]) -> Column:
    """Apply a :class:`partitioning.spec.transforms.Transform` to Spark columns."""
    if isinstance(transform, IdentityTransform):
        return identity(cols[0], source_types[0])
    if isinstance(transform, YearTransform):
        return year(cols[0], source_types[0])
    if isinstance(transform, MonthTransform):
        return month(cols[0], source_types[0])
    if isinstance(transform, DayTransform):
        return day(cols[0], source_types[0])
    if isinstance(transform, HourTransform):
        return hour(cols[0], source_types[0])
    if isinstance(transform, BucketTransform):
        return bucket(cols[0], transform.num_buckets, source_types[0])
    if isinstance(transform, MultiBucketTransform):
        return multi_bucket(cols, transform.num_buckets)
    if isinstance(transform, TruncateTransform):
        return truncate(cols[0], transform.width, source_types[0])
    raise SpecError(f"no Spark implementation for transform {transform}")


def _expression_udf(expression: str, result_type: pa.DataType):  # type: ignore[no-untyped-def]
    @F.arrow_udf(from_arrow_type(result_type))  # type: ignore[call-overload, misc]
    def _expression(*values: pa.Array) -> pa.Array:
        return evaluate_expression(expression, values, result_type)

    return _expression


def _sources(field: PartitionField, schema: NamespaceSchema, df: DataFrame) -> tuple[list[Column], list[T.DataType]]:
    """Source Columns and their Spark types; a dropped or absent source is a NULL literal."""
    cols: list[Column] = []
    types: list[T.DataType] = []
    for source in field.source_fields(schema):
        if source is None or source.name not in df.columns:
            cols.append(F.lit(None))
            types.append(T.NullType())
        else:
            cols.append(F.col(f"`{source.name}`"))
            types.append(df.schema[source.name].dataType)
    return cols, types


def partition_value(field: PartitionField, schema: NamespaceSchema, df: DataFrame) -> Column:
    """The Column of one partition field's values over ``df`` (namespace column names)."""
    cols, types = _sources(field, schema, df)
    result_type = field.arrow_result_type(schema)
    if field.transform is not None:
        present = [(c, t) for c, t in zip(cols, types, strict=True) if not isinstance(t, T.NullType)]
        if not present or (not field.transform.multi_source and isinstance(types[0], T.NullType)):
            return F.lit(None).cast(from_arrow_type(result_type))
        cs, ts = zip(*present, strict=True)
        return transform_column(field.transform, cs, ts)
    assert field.expression is not None
    return _expression_udf(field.expression, result_type)(*cols)


def _staged(field: PartitionField, schema: NamespaceSchema, df: DataFrame) -> bool:
    """Whether the field is a bucket hashed natively in successive projections (:func:`with_murmur3`)."""
    if not isinstance(field.transform, BucketTransform):
        return False
    types = _sources(field, schema, df)[1]
    return not isinstance(types[0], T.NullType) and native_murmur3_supported(types[0])


def select_partition_columns(
    df: DataFrame,
    fields: Sequence[PartitionField],
    schema: NamespaceSchema,
    keep: Sequence[str],
    *,
    prefix: str = "__part_",
    types: Sequence[T.DataType] | None = None,
) -> DataFrame:
    """Columns ``keep`` of ``df`` and one column per partition field, named ``<prefix><field_id>``
    (cast to ``types`` if given): one projection (one analysis by Spark) unless a field is a
    bucket hashed in stages, as :func:`with_partition_columns` computes it."""
    outs = [f"{prefix}{f.field_id}" for f in fields]
    kept = [F.col(f"`{n}`") for n in keep]
    casts = list(types) if types is not None else [None] * len(fields)
    if any(_staged(f, schema, df) for f in fields) or set(outs) & set(df.columns):
        with_parts = with_partition_columns(df, fields, schema, prefix=prefix)
        parts = [F.col(o) for o in outs]
    else:
        with_parts = df
        parts = [partition_value(f, schema, df) for f in fields]
    parts = [p if t is None else p.cast(t) for p, t in zip(parts, casts, strict=True)]
    return with_parts.select(*kept, *[p.alias(o) for p, o in zip(parts, outs, strict=True)])


def with_partition_columns(
    df: DataFrame, fields: Sequence[PartitionField], schema: NamespaceSchema, *, prefix: str = "__part_"
) -> DataFrame:
    """``df`` plus one column per partition field, named ``<prefix><field_id>``.

    Unlike :func:`partition_value`, this hashes strings, binary, bytes and shorts
    natively in the JVM (see :func:`pipelines.columns.murmur3.with_murmur3`).
    """
    for f in fields:
        out = f"{prefix}{f.field_id}"
        cols, types = _sources(f, schema, df)
        if isinstance(f.transform, BucketTransform) and not isinstance(types[0], T.NullType):
            df = with_murmur3(df, cols[0], out, types[0])
            df = df.withColumn(out, bucket_column(out, f.transform.num_buckets))
        else:
            df = df.withColumn(out, partition_value(f, schema, df))
    return df
