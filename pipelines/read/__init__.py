"""Reading into DataFrames: ``read_partitioned`` and the shuffle-free join.

``dataframe`` is ``read_partitioned``; ``local`` reads a small plan in the driver as a local
relation; ``join`` plans a storage-partitioned join of two namespaces and ``join_source`` is
its data source.

May import: source, columns, the session modules, :mod:`partitioning`. Imported by write and jvm.
"""
