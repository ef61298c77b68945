"""Makes the Python engine of the JVM layer a Spark data source in every session, by name.

Spark registers, in each JVM, the ``DefaultSource`` of every importable top-level module
named ``pyspark_*`` (``pyspark/sql/worker/lookup_data_sources.py``). This one is
:class:`pipelines.jvm.source.BridgeSource`, ``lance_partitioned_py``: what the jar's
``format("lance_partitioned")`` provider and ``LanceCatalog`` call for all data work, also
in sessions no Python code set up (``spark-sql``, Scala, a Spark Connect server).
"""

from pipelines.jvm.source import BridgeSource as DefaultSource

__all__ = ["DefaultSource"]
