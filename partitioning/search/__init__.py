"""Vector search and indexes, Spark-free.

``index_model`` defines indexes and the shared vector model; ``indexes`` plans, builds and
commits index segments per partition table; ``query_args`` checks a search's arguments;
``pinned`` keeps partition datasets of pinned versions open (with Lance's index cache);
``nearest`` plans and searches across partitions, with ``knn_scan`` as the exact
brute-force top-k of a filtered batch, and ``scanned`` answering unfiltered searches of
small partitions from their vectors in memory (``vector_cache``: the cache and the scoring).
``text`` is full-text search ranked by BM25 with the statistics of the whole table, over
``text_postings`` (each partition's text tokenized as its INVERTED index does, kept per
pinned version).

May import: :mod:`partitioning.namespace` and everything below it. Imported by :mod:`pipelines`.
"""
