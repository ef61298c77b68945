"""Writing and changing rows from Spark: writes, merges, updates.

``dataframe`` is ``write_partitioned``; ``fragments`` writes any DataFrame's rows as Lance
fragments on the executors (every write door shares it). ``rewrite`` (``update_rows``,
``replace_where``) and ``merge`` (``merge_partitioned``) read their ``targets``, rerun in
``rounds`` when they lose a race, and keep ``small`` changes in the driver; a merge reads
only the target rows the source's keys can match (``matches``); a default merge is an
``upsert``: the matched rows found in the driver, the source appended, no join; a merge with
``set=`` is a ``set_merge``: the matched rows recomputed in the driver, no join either, as
are the other clauses without a condition (update only, delete matched, insert new keys). An
input that is plainly parquet files is read by pyarrow in the driver (``file_rows``) when
small enough, with no Spark job.

May import: source, read, columns, the session modules, :mod:`partitioning`. Imported by maintenance.
"""
