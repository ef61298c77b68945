"""A second session of the same Spark application (``spark.newSession()``) reads the format too.

Spark 4.3 checks a new data source name against the active session's registry, so a
session whose parent had registered ``lance_partitioned`` could not register it
(DATA_SOURCE_ALREADY_EXISTS); :func:`pipelines.session_calls.register_once` registers it with
the session made active, and leaves the active session as it was.
"""

from __future__ import annotations

import pyarrow as pa

from partitioning import PartitionedNamespace
from partitioning.tables.write import write_table
from pipelines import read_partitioned, register_data_source


def _active(spark):
    return spark._jvm.org.apache.spark.sql.SparkSession.getActiveSession()


def test_a_second_session_registers_the_format_its_parent_has(spark, tmp_path):
    root = str(tmp_path / "ns")
    schema = pa.schema([("id", pa.int64()), ("country", pa.string())])
    ns = PartitionedNamespace.create(root, schema, ["country"])
    write_table(ns, pa.table({"id": [1, 2, 3], "country": ["US", "DE", "US"]}, schema=schema))
    register_data_source(spark)
    assert spark.read.format("lance_partitioned").load(root).count() == 3

    before = _active(spark)
    other = spark.newSession()
    assert read_partitioned(other, root, filter="country = 'US'").count() == 2
    assert other.read.format("lance_partitioned").load(root).count() == 3
    after = _active(spark)
    assert after.isDefined() == before.isDefined()
    assert not before.isDefined() or after.get().equals(before.get())
    assert spark.read.format("lance_partitioned").load(root).count() == 3
