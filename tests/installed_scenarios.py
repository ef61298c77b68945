"""What a user of the installed wheel runs (tests/test_installed.py runs it with the installed
package's interpreter, outside the repository): ``python installed_scenarios.py <mode> <work>``.

- ``plain``: a plain ``SparkSession.builder.getOrCreate()`` with nothing configured, as a
  notebook's own ``spark``; its first call of the package, a ``write_partitioned``, adds the
  packaged jar, so ``format("lance_partitioned")`` then is the JVM layer.
- ``jars``: a session started with ``spark.jars`` = ``python -m pipelines.jar`` and the catalog.
- ``job``: run by ``spark-submit`` on ``local-cluster`` with the environment as ``--archives``.
- ``python-only``: a plain session where the jar is missing: the Python source, and one warning.

Each prints one JSON line: where the package was imported from, Spark's answers, the rows
plain pylance reads (the oracle), and the plans' "K of N partition tables".
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
from pyspark.sql import SparkSession

PARTITIONS = 60


def namespace(root: str) -> list[int]:
    """A namespace of 600 rows in 60 partitions (Spark-free); the ids with p = 7, read with pylance."""
    from partitioning import PartitionedNamespace
    from partitioning.tables.write import write_table

    if not Path(root, "__manifest").exists():
        ns = PartitionedNamespace.create(root, pa.schema([("id", pa.int64()), ("p", pa.int32())]), ["p"])
        ids = list(range(600))
        write_table(ns, pa.table({"id": ids, "p": pa.array([i % PARTITIONS for i in ids], pa.int32())}))
    manifest = lance.dataset(f"{root}/__manifest")
    out: list[int] = []
    for row in manifest.to_table(filter="object_type = 'table' AND partition_field_p = 7").to_pylist():
        out += lance.dataset(f"{root}/{row['location']}", version=row["read_version"]).to_table()["id"].to_pylist()
    return sorted(out)


def plan_of(spark: SparkSession, sql: str) -> str:
    return str(spark.sql(f"EXPLAIN {sql}").collect()[0][0])


def format_reads(spark: SparkSession, root: str) -> dict[str, Any]:
    spark.read.format("lance_partitioned").load(root).createOrReplaceTempView("events")
    got = sorted(r[0] for r in spark.sql("SELECT id FROM events WHERE p = 7").collect())
    return {
        "where": got,
        "where_plan": f"scanning 1 of {PARTITIONS} partition tables"
        in plan_of(spark, "SELECT id FROM events WHERE p = 7"),
        "count": spark.sql("SELECT count(*) FROM events WHERE p = 7").collect()[0][0],
    }


def sql_dml(spark: SparkSession, warehouse: str) -> dict[str, Any]:
    spark.sql("CREATE NAMESPACE IF NOT EXISTS lance.shop")
    spark.sql("CREATE TABLE lance.shop.orders (id BIGINT, country STRING, amount BIGINT) PARTITIONED BY (country)")
    spark.sql("INSERT INTO lance.shop.orders VALUES (1, 'US', 10), (2, 'DE', 20), (3, 'FR', 30), (4, 'US', 40)")
    spark.sql("UPDATE lance.shop.orders SET amount = amount + 1 WHERE id = 1")
    spark.sql("DELETE FROM lance.shop.orders WHERE country = 'FR'")
    spark.createDataFrame(
        [(2, "DE", 200), (5, "JP", 50)], "id long, country string, amount long"
    ).createOrReplaceTempView("changes")
    spark.sql(
        "MERGE INTO lance.shop.orders t USING changes s ON t.id = s.id "
        "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
    )
    root = Path(warehouse, "shop", "orders")
    stored = []
    for row in lance.dataset(f"{root}/__manifest").to_table(filter="object_type = 'table'").to_pylist():
        table = lance.dataset(f"{root}/{row['location']}", version=row["read_version"]).to_table()
        stored += [tuple(r.values()) for r in table.select(["id", "country", "amount"]).to_pylist()]
    plan = plan_of(spark, "SELECT * FROM lance.shop.orders WHERE country = 'US'")
    return {"dml": sorted(stored), "sql_plan": "scanning 1 of 3 partition tables" in plan}


def refused_write(spark: SparkSession, root: str) -> str | None:
    """A value the write checks inside a Spark task ('x' for the int partition column): the
    error, after a marker line on stderr (what follows it is this write's output)."""
    from pipelines import write_partitioned

    print("=== refused write", file=sys.stderr, flush=True)
    bad = spark.createDataFrame([(1000 + i, "7" if i % 50 else "x") for i in range(200)], "id long, p string")
    try:
        write_partitioned(bad, root, mode="append")
    except Exception as exc:  # the error the user gets, whatever its class: reported as text
        return str(exc)
    return None


def main(mode: str, work: str) -> None:
    import pipelines

    out: dict[str, Any] = {"package": pipelines.__file__, "sys_path": sys.path}
    root = os.path.join(work, "events")
    out["oracle"] = namespace(root)
    if mode == "python-only":  # the jar is gone: the Python source, said in one warning
        spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
        pipelines.register_data_source(spark)
        spark.read.format("lance_partitioned").load(root).createOrReplaceTempView("events")
        out["where"] = sorted(r[0] for r in spark.sql("SELECT id FROM events WHERE p = 7").collect())
    elif mode == "plain":
        spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
        # the session's first call of the package is a write: it brings the JVM layer for format(...)
        pipelines.write_partitioned(
            spark.range(3).selectExpr("id", "'x' AS k"), os.path.join(work, "first"), partition_by=["k"]
        )
        out.update(format_reads(spark, root))
        spark.conf.set("spark.sql.catalog.lance", "lance_partitioned.LanceCatalog")
        spark.conf.set("spark.sql.catalog.lance.warehouse", os.path.join(work, "wh-plain"))
        out.update(sql_dml(spark, os.path.join(work, "wh-plain")))
        out["refused"] = refused_write(spark, root)
    elif mode == "jars":
        from pipelines.jar import jar_path

        warehouse = os.path.join(work, "wh-jars")
        spark = (
            SparkSession.builder.master("local[2]")
            .config("spark.ui.enabled", "false")
            .config("spark.jars", str(jar_path()))
            .config("spark.sql.catalog.lance", "lance_partitioned.LanceCatalog")
            .config("spark.sql.catalog.lance.warehouse", warehouse)
            .getOrCreate()
        )
        out.update(format_reads(spark, root))
        out.update(sql_dml(spark, warehouse))
    else:
        spark = pipelines.build_session("installed job")
        pipelines.register_data_source(spark)
        out.update(format_reads(spark, root))
        pythons = spark.sparkContext.parallelize(range(8), 8).map(lambda _: sys.executable).collect()
        out["executors"] = sorted(set(pythons))
    print(json.dumps(out, default=str))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
