"""The ``lance_partitioned`` Python data source: what Spark calls to read and write.

``datasource`` registers it; ``reader`` fixes a read plan from the DataFrame's options and
``slices`` reads one partition table slice as Spark's batches; ``nearest`` is its vector
search option; ``writer`` is its write side. ``stream_writer`` is ``writeStream``'s side
(one ``__manifest`` commit per micro-batch, exactly once), and ``stream_reader``
``readStream``'s side, over what each ``__manifest`` version appended
(:mod:`partitioning.plan.appended`).

May import: columns, search, the session modules, :mod:`partitioning`. Imported by read,
write, maintenance and jvm.
"""
