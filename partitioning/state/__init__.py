"""One ``__manifest`` version as Python reads it, prunes it and commits the next.

``loading`` reads and checks a version into a ``namespace_state`` (its table rows are
``partition_tables``), whole (``rows``) or, for a large one, only what a commit touches
(``lookup``, ``lean_rows``). ``pruning`` (built from ``pruning_terms``) selects the tables a
filter may match and ``scan`` plans their reads. ``commits`` makes the next version from the
rows of ``commit_rows``; ``upkeep`` keeps ``__manifest`` compact as commits go;
``evolution`` changes the spec or the schema; ``describe`` gives runtime properties, a
layout and the indexes.

May import: storage, spec, sql, :mod:`partitioning.errors`. Imported by
:mod:`partitioning.namespace_view`, :mod:`partitioning.namespace` and the operation packages.
"""
