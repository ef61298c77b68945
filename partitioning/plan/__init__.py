"""Plans over whole namespaces, Spark-free: joins, metadata tables, whole-partition matches.

``join`` plans a storage-partitioned join, its keys grouped by ``join_keys``, its columns
from ``join_columns``, one group joined in memory by ``join_local``. ``inspect`` gives the
partitions and files metadata tables; ``identity_match`` selects whole partition tables for
a predicate on identity partition columns. ``table_rows`` reads one partition table as
namespace-shaped Arrow batches (Spark's tasks and :func:`partitioning.dataset` both read
through it). ``appended`` finds what each ``__manifest`` version appended (a stream's reads).

May import: :mod:`partitioning.namespace` and everything below it. Imported by :mod:`pipelines`.
"""
