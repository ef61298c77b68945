"""Vector search and index builds driven by Spark.

``queries`` has ``search_partitioned`` and ``knn_join``; ``indexes`` builds indexes with one
shared vector model and a segment per partition.

May import: the session modules, :mod:`partitioning`. Imported by source (the ``nearest`` option).
"""
