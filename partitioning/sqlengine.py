"""Applying a SQL filter to Arrow rows with DataFusion, the engine Lance's own filters use.

Spark-free maintenance (``delete_rows``, ``drop_partitions`` without a SparkSession)
applies its filter with DataFusion, so it accepts what DataFusion SQL accepts (functions,
arithmetic, CASE...) and reads it the way a Lance scan would: ``"x"`` is a column,
backslashes are plain characters, and a timestamp literal without a zone is UTC.
"""

from __future__ import annotations

import pyarrow as pa
from datafusion import SessionContext

from partitioning.errors import InvalidInput, first_line

__all__ = ["ROW_INDEX", "matching_rows"]

ROW_INDEX = "__lance_partitioned_row"


def matching_rows(table: pa.Table, filter_sql: str, *, what: str = "filter") -> list[int]:
    """Indexes of the rows of ``table`` for which ``filter_sql`` is TRUE (DataFusion SQL)."""
    indexed = table.append_column(ROW_INDEX, pa.array(range(table.num_rows), pa.int64()))
    ctx = SessionContext()
    ctx.register_record_batches("t", [indexed.to_batches() or [pa.RecordBatch.from_pylist([], indexed.schema)]])
    try:
        result = ctx.sql(f'SELECT "{ROW_INDEX}" FROM t WHERE ({filter_sql})').to_arrow_table()
    except Exception as exc:  # DataFusion raises plain Exception for planning errors
        raise InvalidInput(f"{what} {filter_sql!r}: {first_line(exc)}") from exc
    return sorted(result.column(ROW_INDEX).to_pylist())
