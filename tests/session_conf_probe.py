"""Run by tests/test_session_conf.py under spark-submit: prints, as JSON, what ``build_session``
ended up with, including which Python the workers ran."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import pyarrow as pa

from pipelines.session import build_session


def main() -> None:
    spark = build_session("lance_partitioned: session conf probe")

    def probe(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for _ in batches:
            yield pa.RecordBatch.from_pydict({"m": [os.environ.get("LP_PYTHON_WRAPPER", "")]})

    worker = spark.range(1).mapInArrow(probe, "m string").collect()[0][0]
    conf = spark.sparkContext.getConf()
    print(
        json.dumps(
            {
                "shuffle": spark.conf.get("spark.sql.shuffle.partitions"),
                "ui": conf.get("spark.ui.enabled"),
                "python": conf.get("spark.pyspark.python"),
                "worker": worker,
                "time_zone": spark.conf.get("spark.sql.session.timeZone"),
            }
        )
    )
    spark.stop()


if __name__ == "__main__":
    main()
