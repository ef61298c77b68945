"""Vector search and indexes, Spark-free.

``index_model`` defines indexes and the shared vector model; ``indexes`` plans, builds and
commits index segments per partition table; ``nearest`` searches across partitions with
``knn_scan`` as the exact brute-force top-k.

May import: :mod:`partitioning.namespace` and everything below it. Imported by :mod:`pipelines`.
"""
