"""Reading one partition table slice in a Spark task: :func:`read_slice`.

It opens a :class:`~partitioning.plan.table_rows.TableSlice` at its version and streams it
through :func:`partitioning.plan.table_rows.read_table`; an error becomes one line naming
the table, without the Python worker's traceback. The data source's tasks
(:mod:`pipelines.source.reader`), the storage-partitioned join, the driver's local reads
and the small rewrites all read rows through here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence

import lance
import pyarrow as pa

from partitioning.errors import PartitioningError, first_line
from partitioning.plan.table_rows import TableSlice, read_table
from partitioning.spec.schema import NamespaceSchema
from partitioning.sql.filters import Filter
from partitioning.state.partition_tables import open_partition_table
from pipelines.spark_errors import hide_worker_traceback

__all__ = ["read_slice"]


def read_slice(
    piece: TableSlice,
    schema: NamespaceSchema,
    output: Sequence[str],
    scan_filter: Filter,
    *,
    exact: Filter | None = None,
    row_address: bool = False,
    storage_options: Mapping[str, str] | None = None,
    dataset: lance.LanceDataset | None = None,
    keep: Callable[[pa.Table], pa.Table] | None = None,
) -> Iterator[pa.RecordBatch]:
    """:func:`read_table` of one slice (``keep``: as there), opened at its version unless
    ``dataset`` is that table already; any error is one line naming the table."""
    try:
        if dataset is None:
            dataset = open_partition_table(
                piece.uri, piece.read_version, piece.read_branch, piece.read_tag, storage_options
            )
        yield from read_table(
            dataset, piece, schema, output, scan_filter, exact=exact, row_address=row_address, keep=keep
        )
    except PartitioningError as exc:
        hide_worker_traceback()
        if piece.object_id in str(exc):
            raise
        raise type(exc)(f"read partition table {piece.object_id}: {exc}") from exc
    except (OSError, RuntimeError, ValueError, pa.ArrowException) as exc:
        hide_worker_traceback()
        message = f"read partition table {piece.object_id} ({piece.uri}): {first_line(exc)}"
        raise PartitioningError(message) from exc
