"""The Python side of the JVM layer (the DSv2 provider and catalog in ``java/``).

``source`` is the ``lance_partitioned_py`` data source the JVM calls; ``catalog`` answers the
``TableCatalog``, ``alter`` its ``ALTER TABLE``, ``stage`` its staged creates and replaces
(``CREATE TABLE ... AS SELECT``, ``REPLACE TABLE``); ``write`` runs the writes and SQL DML
the JVM plans; ``drop`` the metadata-only deletes; ``delete_rows`` the deletes of rows it
finds exactly, with no Spark job; ``update_rows`` SQL ``UPDATE`` through ``update_rows``'
engine (the session extension's procedure), with no Spark job; ``upsert_rows`` the upserting
SQL ``MERGE INTO`` (the source written by Spark's tasks, the target's keys probed at the
commit: no join in Spark).

May import: source, read, write, columns, the session modules, :mod:`partitioning`. Imported by
nothing in Python: the JVM layer reaches it through the registered data source.
"""
