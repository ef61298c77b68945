"""Vector and full-text search, and index builds, driven by Spark.

``queries`` has ``search_partitioned`` and ``knn_join``; ``text`` has
``search_text_partitioned`` (BM25 with the whole table's statistics); ``indexes`` builds
indexes with one shared vector model and a segment per partition.

May import: the session modules, :mod:`partitioning`. Imported by source (the ``nearest`` option).
"""
