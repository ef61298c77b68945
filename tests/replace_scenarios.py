"""SQL statements that replace or overwrite a catalog table, failed at every step and run to success.

Used by tests/test_sql_replace.py (classic ``local[2]``), tests/connect_scenarios.py (Spark
Connect) and tests/cluster_scenarios.py (``local-cluster``), through ``spark.sql`` and
``DataFrameWriterV2`` only. Each scenario makes its own table in namespace ``ns``
(``<catalog>.<namespace>``, a ``LanceCatalog`` whose warehouse is ``warehouse``),
runs one statement that fails (in analysis, in a task, or at the commit) and returns
``(label, got, want)`` checks: every ``__manifest`` version, the latest included, reads the
same rows (read with plain pylance from each partition dataset at the version its row
records) and the files that existed are byte for byte the same. Successful statements are
checked against pandas computing the same statements on the same rows, read both by Spark
and by plain pylance.

A commit-time failure is made for real: a Python UDF in one task changes the table's
schema (as another session's ``ALTER TABLE`` would) while the statement runs, so the
statement's commit finds the schema it planned on gone and commits nothing.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import lance
import pandas as pd
from pyspark.sql import functions as F

Check = tuple[str, Any, Any]
ROWS = [(1, "US", 10.0), (2, "DE", 20.0), (3, "FR", 30.0), (4, "US", 40.0), (5, "DE", 50.0), (6, "JP", 60.0)]


def table_rows(root: str, version: int) -> list[tuple[Any, ...]]:
    """The rows ``__manifest`` version ``version`` shows, read with plain pylance."""
    out = []
    for data in partition_tables(root, version):
        out.extend(tuple(sorted(r.items())) for r in data.to_table().to_pylist())
    return sorted(out, key=repr)


def partition_tables(root: str, version: int | None = None) -> Iterator[lance.LanceDataset]:
    """The partition datasets ``__manifest`` version ``version`` (default: the latest) records,
    each at the version its row records, opened with plain pylance."""
    manifest = lance.dataset(f"{root}/__manifest", version=version)
    for row in manifest.to_table(filter="object_type = 'table'").to_pylist():
        yield lance.dataset(f"{root}/{row['location']}", version=row["read_version"])


def snapshot(root: str) -> tuple[dict[int, list[tuple[Any, ...]]], dict[str, str]]:
    """Every readable version's rows, and the bytes (hashed) of every file outside ``__manifest``."""
    manifest = lance.dataset(f"{root}/__manifest")
    versions = {
        v["version"]: table_rows(root, v["version"])
        for v in manifest.versions()
        if lance.dataset(f"{root}/__manifest", version=v["version"]).metadata
    }
    files = {}
    for dirpath, _, names in os.walk(root):
        for name in names:
            path = Path(dirpath, name)
            rel = str(path.relative_to(root))
            if not rel.startswith("__manifest"):
                files[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return versions, files


def latest(root: str) -> int:
    return int(lance.dataset(f"{root}/__manifest").version)


class Table:
    """A fresh table ``lance.<ns>.<name>`` holding :data:`ROWS` after two inserts (three versions)."""

    def __init__(self, spark: Any, warehouse: str, ns: str) -> None:
        self.spark = spark
        self.name = f"t_{uuid.uuid4().hex[:8]}"
        self.ident = f"{ns}.{self.name}"
        self.root = os.path.join(warehouse, *ns.split(".")[1:], self.name)
        spark.sql(f"CREATE TABLE {self.ident} (id BIGINT, country STRING, amount DOUBLE) PARTITIONED BY (country)")
        values = [f"({i}, '{c}', {a})" for i, c, a in ROWS]
        spark.sql(f"INSERT INTO {self.ident} VALUES {', '.join(values[:4])}")
        spark.sql(f"INSERT INTO {self.ident} VALUES {', '.join(values[4:])}")

    def drop(self) -> None:
        self.spark.sql(f"DROP TABLE IF EXISTS {self.ident} PURGE")


def error_of(action: Callable[[], Any]) -> str:
    try:
        action()
    except Exception as exc:  # any error is the statement's failure, reported as a check
        return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return "no error"


def unchanged(label: str, t: Table, action: Callable[[], Any], error: str, *, altered: bool = False) -> Iterator[Check]:
    """Run a failing ``action`` on ``t``: it fails with ``error`` in its first line, and every
    version reads as before (with ``altered``, the concurrent schema change's own version
    is the only new readable one, showing the same rows)."""
    versions, files = snapshot(t.root)
    message = error_of(action)
    yield f"{label}: fails", error in message, True
    after, now = snapshot(t.root)
    yield f"{label}: every earlier version reads the same rows", {v: after.get(v) for v in versions}, versions
    yield f"{label}: the latest version reads the same rows", after[max(after)], versions[max(versions)]
    yield f"{label}: files written before are untouched", {k: now.get(k) for k in files}, files
    if not altered:
        yield f"{label}: no new readable version", sorted(after), sorted(versions)
    rows = sorted(tuple(r) for r in t.spark.sql(f"SELECT id, country, amount FROM {t.ident}").collect())
    yield f"{label}: Spark reads the same rows", rows, sorted(ROWS)


def alter_in_a_task(spark: Any, root: str) -> Any:
    """A UDF whose first call, in a task, adds a column to the table at ``root`` (another writer's
    ``ALTER TABLE``); it returns its argument."""
    marker = f"{root}.altered"

    def alter(value):  # no type hints: Spark would read them as a pandas UDF's
        try:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return value
        os.close(fd)
        from partitioning import PartitionedNamespace

        PartitionedNamespace.load(root).add_columns({"concurrent": "int32"})
        return value

    return F.udf(alter, "double")


# -- the scenarios ----------------------------------------------------------------------------------
def failed_replaces(spark: Any, warehouse: str, ns: str, *, every: bool = True) -> Iterator[Check]:
    """REPLACE / CREATE OR REPLACE / writeTo().createOrReplace() failing in analysis, in a task, at
    the commit (without ``every``: the issue's statement, a task's failure and the commit's)."""
    analysis = {
        "REPLACE with a bad cast (the issue's statement)": (
            "REPLACE TABLE {t} PARTITIONED BY (country) AS SELECT id, country, CAST('x' AS INT) AS bad FROM {t}",
            "CAST_INVALID_INPUT",
        ),
        "CREATE OR REPLACE with bucket(0, id)": (
            "CREATE OR REPLACE TABLE {t} PARTITIONED BY (bucket(0, id)) AS SELECT * FROM {t}",
            "num_buckets must be an integer >= 1, got 0",
        ),
        "CREATE OR REPLACE with days(ts)": (
            "CREATE OR REPLACE TABLE {t} PARTITIONED BY (days(ts)) AS SELECT id, current_timestamp() AS ts FROM {t}",
            "write day(ts)",
        ),
        "REPLACE with a table property": (
            "REPLACE TABLE {t} PARTITIONED BY (country) TBLPROPERTIES ('x' = 'y') AS SELECT * FROM {t}",
            "table property 'x' is not supported",
        ),
        "REPLACE without PARTITIONED BY": ("REPLACE TABLE {t} AS SELECT * FROM {t}", "needs PARTITIONED BY"),
        "REPLACE with a failing task": (
            "REPLACE TABLE {t} PARTITIONED BY (country) AS "
            "SELECT id, country, IF(id = 5, raise_error('boom in a task'), amount) AS amount FROM {t}",
            "boom in a task",
        ),
    }
    chosen = analysis if every else {k: v for k, v in analysis.items() if "issue" in k or "task" in k}
    t = Table(spark, warehouse, ns)  # each failure leaves it as it was: one table for them all
    for label, (sql, error) in chosen.items():
        yield from unchanged(label, t, lambda sql=sql, t=t: spark.sql(sql.format(t=t.ident)), error)
    if not every:
        t.drop()
        yield from _failed_at_the_commit(spark, warehouse, ns)
        return

    failing = spark.table(t.ident).withColumn(
        "amount", F.when(F.col("id") == 5, F.raise_error(F.lit("boom in createOrReplace"))).otherwise(F.col("amount"))
    )
    yield from unchanged(
        "writeTo().createOrReplace() with a failing task",
        t,
        lambda: failing.writeTo(t.ident).partitionedBy(F.col("country")).createOrReplace(),
        "boom in createOrReplace",
    )
    t.drop()
    yield from _failed_at_the_commit(spark, warehouse, ns)


def _failed_at_the_commit(spark: Any, warehouse: str, ns: str) -> Iterator[Check]:
    t = Table(spark, warehouse, ns)
    alter = alter_in_a_task(spark, t.root)
    yield from unchanged(
        "REPLACE whose table changes schema while it runs (fails at the commit)",
        t,
        lambda: (
            spark.table(t.ident)
            .withColumn("amount", alter(F.col("amount")))
            .writeTo(t.ident)
            .partitionedBy(F.bucket(4, F.col("id")))
            .replace()
        ),
        "changed while the replace ran",
        altered=True,
    )
    t.drop()


def failed_overwrites(spark: Any, warehouse: str, ns: str, *, every: bool = True) -> Iterator[Check]:
    """INSERT OVERWRITE (static, a partition) and writeTo().overwritePartitions() failing in a task
    or at the commit (without ``every``: the static one in a task)."""
    statements = {
        "INSERT OVERWRITE (static)": "INSERT OVERWRITE {t} SELECT id, country, {amount} FROM {t}",
        "INSERT OVERWRITE ... PARTITION": (
            "INSERT OVERWRITE {t} PARTITION (country = 'US') SELECT id, {amount} FROM {t} WHERE country = 'US'"
        ),
    }
    t = Table(spark, warehouse, ns)  # each failure leaves it as it was: one table for them all
    for label, sql in statements.items() if every else list(statements.items())[:1]:
        failing = sql.format(t=t.ident, amount="IF(id = 4, raise_error('boom in an overwrite'), amount) AS amount")
        yield from unchanged(f"{label} with a failing task", t, lambda s=failing: spark.sql(s), "boom in an overwrite")
    t.drop()
    if not every:
        return

    t = Table(spark, warehouse, ns)
    alter = alter_in_a_task(spark, t.root)
    yield from unchanged(
        "writeTo().overwritePartitions() whose table changes schema while it runs",
        t,
        lambda: (
            spark.table(t.ident).withColumn("amount", alter(F.col("amount"))).writeTo(t.ident).overwritePartitions()
        ),
        "changed while this write ran",
        altered=True,
    )
    t.drop()


def failed_creates(spark: Any, warehouse: str, ns: str) -> Iterator[Check]:
    """CREATE TABLE ... AS SELECT and writeTo().create() that fail leave no table and no directory."""
    source = Table(spark, warehouse, ns)
    cases = {
        "CTAS with a failing task": (
            lambda name: spark.sql(
                f"CREATE TABLE {ns}.{name} PARTITIONED BY (country) AS "
                f"SELECT id, country, IF(id = 2, raise_error('boom in a CTAS'), amount) AS amount FROM {source.ident}"
            ),
            "boom in a CTAS",
        ),
        "CTAS with a refused spec": (
            lambda name: spark.sql(f"CREATE TABLE {ns}.{name} PARTITIONED BY (hours(id)) AS SELECT 1L AS id"),
            "write hour(id)",
        ),
        "writeTo().create() with a failing task": (
            lambda name: (
                spark.table(source.ident)
                .withColumn("amount", F.when(F.col("id") == 6, F.raise_error(F.lit("boom in create"))).otherwise(1.0))
                .writeTo(f"{ns}.{name}")
                .partitionedBy(F.col("country"))
                .create()
            ),
            "boom in create",
        ),
    }
    for label, (action, error) in cases.items():
        name = f"c_{uuid.uuid4().hex[:8]}"
        message = error_of(lambda action=action, name=name: action(name))
        yield f"{label}: fails", error in message, True
        tables = [r[1] for r in spark.sql(f"SHOW TABLES IN {ns}").collect()]
        yield f"{label}: no table", name in tables, False
        yield f"{label}: no directory left", os.path.exists(os.path.join(warehouse, *ns.split(".")[1:], name)), False
        namespaces = [r[0] for r in spark.sql(f"SHOW NAMESPACES IN {ns}").collect()]
        yield f"{label}: no namespace appears in its place", any(name in n for n in namespaces), False
    source.drop()


def lance_rows(root: str, columns: list[str]) -> list[tuple[Any, ...]]:
    """The latest version's rows, ``columns`` in order, read with plain pylance."""
    out = []
    for data in partition_tables(root):
        out.extend(tuple(r[c] for c in columns) for r in data.to_table(columns=columns).to_pylist())
    return sorted(out, key=repr)


def model_rows(model: pd.DataFrame) -> list[tuple[Any, ...]]:
    return sorted(
        (tuple(None if pd.isna(v) else v for v in r) for r in model.astype(object).itertuples(index=False)), key=repr
    )


def agrees(label: str, t: Table, model: pd.DataFrame) -> Iterator[Check]:
    """Spark's rows and plain Lance's rows of ``t`` are pandas' ``model``, columns and all."""
    columns = list(model.columns)
    yield f"{label}: the columns", t.spark.table(t.ident).columns, columns
    spark_rows = sorted((tuple(r) for r in t.spark.table(t.ident).collect()), key=repr)
    yield f"{label}: Spark's rows are pandas'", spark_rows, model_rows(model)
    yield f"{label}: plain Lance's rows are pandas'", lance_rows(t.root, columns), model_rows(model)


def successful_replaces(spark: Any, warehouse: str, ns: str) -> Iterator[Check]:
    """Replaces and overwrites that succeed: after each, Spark and plain Lance read what pandas
    computes from the same rows; VERSION / TIMESTAMP AS OF before the replace read the old ones."""
    t = Table(spark, warehouse, ns)
    model = pd.DataFrame(ROWS, columns=["id", "country", "amount"])
    before = latest(t.root)
    when = spark.sql(f"SELECT max(timestamp) FROM {t.ident}.history").collect()[0][0]
    spark.sql(
        f"REPLACE TABLE {t.ident} PARTITIONED BY (bucket(4, id)) AS "
        f"SELECT id, country, amount * 2 AS amount, concat('n', id) AS note FROM {t.ident} WHERE id > 1"
    )
    kept = model[model.id > 1]
    model = kept.assign(amount=kept.amount * 2, note="n" + kept.id.astype(str))
    yield from agrees("REPLACE AS SELECT", t, model)
    old = spark.sql(f"SELECT * FROM {t.ident} VERSION AS OF {before}")
    yield "VERSION AS OF before the replace: old columns", old.columns, ["id", "country", "amount"]
    yield "VERSION AS OF before the replace: old rows", sorted(tuple(r) for r in old.collect()), sorted(ROWS)
    at = spark.sql(f"SELECT * FROM {t.ident} TIMESTAMP AS OF '{when.isoformat()}'")
    yield "TIMESTAMP AS OF before the replace: old rows", sorted(tuple(r) for r in at.collect()), sorted(ROWS)
    history = spark.sql(f"SELECT version, operation FROM {t.ident}.history WHERE version > {before}")
    yield "history: the replace is one operation", sorted({r.operation for r in history.collect()}), ["REPLACE"]

    spark.sql(f"REPLACE TABLE {t.ident} (id BIGINT, country STRING) PARTITIONED BY (country)")
    yield from agrees("REPLACE TABLE without AS SELECT", t, pd.DataFrame({"id": [], "country": []}))
    rows = [(7, "NZ"), (8, "NZ"), (9, "AU")]
    spark.createDataFrame(rows, "id long, country string").writeTo(t.ident).partitionedBy(
        F.col("country")
    ).createOrReplace()
    model = pd.DataFrame(rows, columns=["id", "country"])
    yield from agrees("writeTo().createOrReplace()", t, model)

    spark.sql(f"INSERT OVERWRITE {t.ident} PARTITION (country = 'NZ') VALUES (10), (11)")
    model = pd.concat([model[model.country != "NZ"], pd.DataFrame({"id": [10, 11], "country": "NZ"})])
    yield from agrees("INSERT OVERWRITE ... PARTITION", t, model)
    spark.createDataFrame([(12, "AU"), (13, "JP")], "id long, country string").writeTo(t.ident).overwrite(
        F.col("id") > 9
    )
    model = pd.concat([model[model.id <= 9], pd.DataFrame({"id": [12, 13], "country": ["AU", "JP"]})])
    yield from agrees("writeTo().overwrite(id > 9)", t, model)
    spark.sql(f"INSERT OVERWRITE {t.ident} SELECT id + 100, country FROM {t.ident} WHERE country <> 'JP'")
    model = model[model.country != "JP"].assign(id=lambda m: m.id + 100)
    yield from agrees("INSERT OVERWRITE (static)", t, model)
    yield "the table's first rows stay readable", sorted(tuple(r) for r in old.collect()), sorted(ROWS)
    t.drop()


SCENARIOS = (failed_replaces, failed_overwrites, failed_creates, successful_replaces)


def across_doors(spark: Any, warehouse: str, ns: str = "lance.replaces") -> list[Check]:
    """What Spark Connect and ``local-cluster`` run: a replace failing in analysis, in a task and
    at the commit, an overwrite failing in a task, a failed create, and a successful replace
    with time travel before it.
    ``ns``: ``<catalog>.<namespace>``, the catalog's warehouse at ``warehouse``."""
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {ns}")
    checks = list(failed_replaces(spark, warehouse, ns, every=False))
    checks += failed_overwrites(spark, warehouse, ns, every=False)
    checks += failed_creates(spark, warehouse, ns)
    checks += successful_replaces(spark, warehouse, ns)
    return checks
