"""One pruning line per scan: ``read_partitioned`` logs its plan once, on the driver.

The data source's ``partitions()`` runs in Spark's planner worker, where a log line
reaches nobody (and would repeat for every scan of the DataFrame), so it logs nothing.
"""

from __future__ import annotations

import logging
import re

import pyarrow as pa

from partitioning import PartitionedNamespace
from partitioning.tables.write import write_table
from pipelines import read_partitioned
from pipelines.source.datasource import LancePartitionedDataSource

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("country", pa.string())])
LOGGER = "lance_partitioned"


def _namespace(root: str) -> None:
    ns = PartitionedNamespace.create(root, SCHEMA, ["country"])
    write_table(ns, pa.table({"id": [1, 2, 3], "country": ["US", "CN", "US"]}, schema=SCHEMA))


def test_one_read_and_collect_log_one_pruning_line(spark, tmp_path, caplog):
    root = str(tmp_path / "ns")
    _namespace(root)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        df = read_partitioned(spark, root, filter="country = 'US'")
        assert sorted(r.id for r in df.collect()) == [1, 3]
        assert df.count() == 2
    lines = [r.getMessage() for r in caplog.records if r.name == LOGGER and "scanning" in r.getMessage()]
    assert len(lines) == 1, lines
    assert re.fullmatch(
        r"lance_partitioned: scanning 1 of 2 partition tables \(spec v1: 1/2\) at __manifest v\d+", lines[0]
    )


def test_the_source_plans_without_logging(tmp_path, caplog):
    root = str(tmp_path / "ns")
    _namespace(root)
    source = LancePartitionedDataSource({"path": root, "filter": "country = 'US'"})
    reader = source.reader(source.schema())
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        parts = reader.partitions()
        reader.partitions()
    assert len(parts) == 1
    assert [r.getMessage() for r in caplog.records if r.name == LOGGER] == []
