"""Every operation and every job on a Spark Connect session, checked against an independent oracle.

Run by tests/test_connect.py in a subprocess (a Connect session cannot start beside a
classic one) with ``SPARK_REMOTE=local[2]``, so :func:`pipelines.session.build_session`
starts a local Connect server, in a scratch working directory: every root is relative on
purpose. Prints one JSON line per check, ``{"label", "got", "want"}``. The expected side is
computed here in plain Python from the input rows; the stored side is read with pylance
from the partition datasets, never with this project's readers.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import lance
import mmh3
import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
from pyspark.sql import functions as F
from pyspark.sql import types as T
from search_data import DIM, brute_force, create, data_of, make_table

from jobs import compact as compact_job
from jobs import delete as delete_job
from jobs import demo as demo_job
from jobs import evolve as evolve_job
from jobs import ingest as ingest_job
from jobs import join as join_job
from jobs import query as query_job
from jobs import vacuum as vacuum_job
from partitioning import NamespaceAlreadyExists, PartitionedNamespace
from pipelines import (
    backfill_columns,
    compact,
    delete_rows,
    drop_partitions,
    join_partitioned,
    merge_partitioned,
    optimize_manifest,
    read_partitioned,
    register_data_source,
    update_rows,
    vacuum,
    write_partitioned,
)
from pipelines.columns import murmur3 as sm3
from pipelines.read.join import join_partitioned_with_plan
from pipelines.search.indexes import create_vector_index
from pipelines.search.queries import knn_join, search_partitioned
from pipelines.session import build_session, is_connect
from pipelines.session_calls import default_parallelism

COUNTRIES = ("US", "DE", "FR")
SCHEMA = "id long, country string, amount long"
Row = tuple[int, str, int]


def check(label: str, got: Any, want: Any) -> None:
    print(json.dumps({"label": label, "got": got, "want": want}, default=str), flush=True)


def rows(ids: Sequence[int], country: str | None = None) -> list[Row]:
    return [(i, country or COUNTRIES[i % 3], i * 3) for i in ids]


def stored(root: str) -> list[Row]:
    """All rows of the namespace, read with pylance from each partition table at its read_version."""
    out: list[Row] = []
    for p in PartitionedNamespace.load(root).partitions():
        table = lance.dataset(p.uri, version=p.read_version).to_table(columns=["id", "country", "amount"])
        out.extend(zip(*(table.column(c).to_pylist() for c in ("id", "country", "amount")), strict=True))
    return sorted(out)


def misplaced(root: str) -> list[str]:
    """Partition tables holding a row of another country (there must be none)."""
    bad = []
    for p in PartitionedNamespace.load(root).partitions():
        countries = set(lance.dataset(p.uri, version=p.read_version).to_table().column("country").to_pylist())
        if countries - {p.values["country"]}:
            bad.append(p.object_id)
    return bad


def fragments(root: str) -> int:
    return sum(
        len(lance.dataset(p.uri, version=p.read_version).get_fragments())
        for p in PartitionedNamespace.load(root).partitions()
    )


def ids(df: Any) -> list[int]:
    return sorted(r[0] for r in df.select("id").collect())


@contextlib.contextmanager
def quiet() -> Iterator[tuple[io.StringIO, io.StringIO]]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        yield out, err


def job(label: str, main: Callable[[list[str]], int], argv: list[str], status: int = 0) -> str:
    with quiet() as (out, err):
        code = main(argv)
    check(f"job {label}: exit status", code, status)
    if status:
        lines = err.getvalue().strip().splitlines()
        check(f"job {label}: one error line", len(lines), 1)
    return out.getvalue()


def worker_marker(spark: Any) -> str | None:
    def probe(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for _ in batches:
            yield pa.RecordBatch.from_pydict({"m": [os.environ.get("LP_PYTHON_WRAPPER")]})

    return spark.range(1).mapInArrow(probe, "m string").collect()[0][0]


def server_job_tags() -> list[str]:
    """The job tags the local Connect server's Spark recorded (the server runs in this process)."""
    from pyspark import SparkContext

    jobs = SparkContext._active_spark_context._jsc.sc().statusStore().jobsList(None)
    return [str(jobs.apply(i).jobTags().mkString(",")) for i in range(jobs.size())]


def session_checks(spark: Any) -> None:
    check("the session is Spark Connect", is_connect(spark), True)
    check("default parallelism from the master", default_parallelism(spark), 2)
    check("PYSPARK_SUBMIT_ARGS --conf wins", spark.conf.get("spark.sql.shuffle.partitions"), "5")
    check("workers run the user's PYSPARK_PYTHON", worker_marker(spark), "wrapped")
    check("defaults fill what the user did not set", spark.conf.get("spark.sql.session.timeZone"), "UTC")
    check("the Java murmur3 UDF is registered", sm3.java_murmur3(spark), True)
    words = [None, "", "a", "ab", "abc", "abcd", "Straße", "user_12345"]
    df = spark.createDataFrame(list(enumerate(words)), "i int, s string")
    hashed = sorted(tuple(r) for r in sm3.with_murmur3(df, F.col("s"), "h", T.StringType()).select("i", "h").collect())
    want = [(i, None if w is None else mmh3.hash(w.encode(), 0, signed=True)) for i, w in enumerate(words)]
    check("the Java murmur3 UDF on Connect", hashed, want)


def writes(spark: Any) -> None:
    root = "rel/orders"
    first = write_partitioned(spark.createDataFrame(rows(range(30)), SCHEMA), root, partition_by=["country"])
    check("write creates", (first.rows_written, stored(root)), (30, rows(range(30))))
    check("a relative root is under the working directory", os.path.isdir("rel/orders/__manifest"), True)
    write_partitioned(spark.createDataFrame(rows(range(30, 60)), SCHEMA), root)
    check("write appends", stored(root), rows(range(60)))
    write_partitioned(spark.createDataFrame(rows(range(100, 104), "US"), SCHEMA), root, mode="overwrite_partitions")
    want = sorted([r for r in rows(range(60)) if r[1] != "US"] + rows(range(100, 104), "US"))
    check("overwrite_partitions replaces only the written partitions", stored(root), want)
    check("rows sit in their own partition", misplaced(root), [])
    try:
        write_partitioned(spark.createDataFrame(rows([1]), SCHEMA), root, mode="error")
        check("mode=error refuses an existing namespace", "no error", "NamespaceAlreadyExists")
    except NamespaceAlreadyExists:
        check("mode=error refuses an existing namespace", "NamespaceAlreadyExists", "NamespaceAlreadyExists")
    skipped = write_partitioned(spark.createDataFrame(rows([1]), SCHEMA), root, mode="ignore")
    check("mode=ignore skips", (bool(skipped.skipped), stored(root)), (True, want))
    write_partitioned(spark.createDataFrame(rows(range(200, 212)), SCHEMA), "rel/over", partition_by=["country"])
    write_partitioned(spark.createDataFrame(rows(range(300, 303), "DE"), SCHEMA), "rel/over", mode="overwrite")
    check("overwrite replaces everything", stored("rel/over"), rows(range(300, 303), "DE"))
    tags = server_job_tags()
    check("write jobs carry their tag", any("lance_partitioned:_write_fragments_orders" in t for t in tags), True)
    check("tags are removed afterwards", sorted(spark.getTags()), [])


def reads(spark: Any) -> None:
    root = "rel/orders"
    want = stored(root)
    got = ids(read_partitioned(spark, root, filter="country = 'DE' AND amount > 30"))
    check("read_partitioned with a filter", got, sorted(r[0] for r in want if r[1] == "DE" and r[2] > 30))
    register_data_source(spark)
    # The format's path is read by the server, whose Python workers run in a per-session
    # directory: only read_partitioned/write_partitioned resolve a relative root on the client.
    df = spark.read.format("lance_partitioned").load(os.path.abspath(root))
    check("format read, where", ids(df.where("country = 'FR'")), sorted(r[0] for r in want if r[1] == "FR"))
    check("format read, reused", df.count(), len(want))
    opt = spark.read.format("lance_partitioned").option("filter", "amount < 30").load(os.path.abspath(root))
    check("format read, filter option", ids(opt), sorted(r[0] for r in want if r[2] < 30))


def sql_doors(spark: Any) -> None:
    """The JVM layer on the Connect server: the catalog, WHERE pruning, COUNT(*), time travel, DML."""
    warehouse = os.path.abspath("warehouse")
    spark.conf.set("spark.sql.catalog.lance", "lance_partitioned.LanceCatalog")
    spark.conf.set("spark.sql.catalog.lance.warehouse", warehouse)
    spark.sql("CREATE NAMESPACE lance.db")
    spark.sql("CREATE TABLE lance.db.t (id bigint, country string, amount bigint) PARTITIONED BY (country)")
    first = rows(range(12))
    spark.sql("INSERT INTO lance.db.t VALUES " + ", ".join(f"({i}, '{c}', {a})" for i, c, a in first))
    root = os.path.join(warehouse, "db", "t")
    version = PartitionedNamespace.load(root).manifest_version
    plan = spark.sql("EXPLAIN SELECT * FROM lance.db.t WHERE country = 'US'").collect()[0][0]
    check("SQL WHERE prunes on Connect", "scanning 1 of 3 partition tables" in plan, True)
    check("SQL WHERE rows", ids(spark.sql("SELECT id FROM lance.db.t WHERE country = 'US'")), [0, 3, 6, 9])
    check("COUNT(*)", spark.sql("SELECT count(*) FROM lance.db.t WHERE country = 'DE'").collect()[0][0], 4)
    spark.sql("UPDATE lance.db.t SET amount = -1 WHERE id = 1")
    spark.sql("DELETE FROM lance.db.t WHERE country = 'FR'")
    spark.createDataFrame([(3, "US", 300), (99, "DE", 990)], SCHEMA).createOrReplaceTempView("connect_src")
    spark.sql(
        "MERGE INTO lance.db.t t USING connect_src s ON t.id = s.id "
        "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
    )
    want = sorted(
        [(i, c, -1 if i == 1 else (300 if i == 3 else a)) for i, c, a in first if c != "FR"] + [(99, "DE", 990)]
    )
    check("UPDATE, DELETE, MERGE on Connect", stored(root), want)
    old = spark.sql(f"SELECT id FROM lance.db.t VERSION AS OF {version}")
    check("VERSION AS OF on Connect", ids(old), list(range(12)))
    df = spark.read.format("lance_partitioned").load(root)
    check("a reused DataFrame prunes per scan", [ids(df.where("country = 'US'")), df.count()], [[0, 3, 6, 9], 9])


def sql_replaces(spark: Any) -> None:
    """Atomic REPLACE / CTAS through the JVM layer on the Connect server (tests/replace_scenarios.py)."""
    import replace_scenarios

    warehouse = os.path.abspath("warehouse")
    try:
        spark.sql("CREATE TABLE lance.db.bad PARTITIONED BY (bucket(0, id)) AS SELECT 1L AS id")
        refused = "no error"
    except Exception as exc:
        refused = str(exc)
    check(
        "a project error is one line on Connect",
        refused,
        "[LANCE_SPEC_ERROR] bucket: num_buckets must be an integer >= 1, got 0",
    )
    checks = replace_scenarios.across_doors(spark, warehouse)
    check("replace scenarios ran", len(checks) > 20, True)
    for label, got, want in checks:
        check(f"replace: {label}", got, want)


def refusal(action: Callable[[], Any]) -> str:
    """The first line of the error ``action`` raises, without Spark's error class prefix."""
    try:
        action()
    except Exception as exc:
        lines = [line for line in str(exc).splitlines() if "relative path" in line]
        line = lines[0] if lines else str(exc).splitlines()[0]
        return re.sub(r"^\[LANCE_[A-Z_]+\] ", "", line.split("InvalidInput: ", 1)[-1])
    return "no error"


def relative_source_paths(spark: Any) -> None:
    """The server plans a data source in its own session directory: a relative path there is
    refused, not resolved somewhere the client never looks (it used to create the namespace
    under /tmp/spark-*/userFiles-*). Runs after joins, which registers the join format."""
    register_data_source(spark)
    want = (
        "relative path 'rel/orders' cannot be used with a data source on Spark Connect: the server would "
        "resolve it in its own session directory, not the client's; pass an absolute path or URI, or use "
        "read_partitioned/write_partitioned, which resolve it on the client"
    )
    check(
        "format load of a relative path",
        refusal(lambda: spark.read.format("lance_partitioned").load("rel/orders").count()),
        want,
    )
    df = spark.createDataFrame(rows(range(3)), SCHEMA)
    new = df.write.format("lance_partitioned").mode("append").option("partition_by", "country")
    check("format save to a new relative path", refusal(lambda: new.save("rel/orders")), want)
    join = spark.read.format("lance_partitioned_join").options(
        left="rel/orders", right=os.path.abspath("rel/orders"), on='["id"]'
    )
    check("join format with a relative side", refusal(lambda: join.load().count()), want)
    check("nothing was written", stored("rel/orders") == stored(os.path.abspath("rel/orders")), True)


def source_writes(spark: Any) -> None:
    root = os.path.abspath("rel/source")
    writer = spark.createDataFrame(rows(range(20)), SCHEMA).write.format("lance_partitioned")
    writer.mode("append").option("partition_by", "country").save(root)
    spark.createDataFrame(rows(range(20, 26)), SCHEMA).write.format("lance_partitioned").mode("append").save(root)
    check("format write: append", stored(root), rows(range(26)))
    dynamic = spark.createDataFrame(rows(range(40, 42), "DE"), SCHEMA).write.format("lance_partitioned")
    dynamic.mode("overwrite").option("partitionOverwriteMode", "dynamic").save(root)
    want = sorted([r for r in rows(range(26)) if r[1] != "DE"] + rows(range(40, 42), "DE"))
    check("format write: dynamic overwrite", stored(root), want)
    static = spark.createDataFrame(rows(range(50, 53), "FR"), SCHEMA).write.format("lance_partitioned")
    static.mode("overwrite").save(root)
    check("format write: static overwrite", stored(root), rows(range(50, 53), "FR"))


def joins(spark: Any) -> None:
    left = [(k, k * 10) for k in range(40)]
    right = [(k, f"r{k}") for k in range(20, 60)]
    write_partitioned(spark.createDataFrame(left, "k long, a long"), "rel/left", partition_by=["bucket[4](k)"])
    write_partitioned(spark.createDataFrame(right, "k long, b string"), "rel/right", partition_by=["bucket[4](k)"])
    write_partitioned(spark.createDataFrame(right, "k long, b string"), "rel/right3", partition_by=["bucket[3](k)"])
    want = sorted((k, a, f"r{k}") for k, a in left if 20 <= k < 60)
    df, plan = join_partitioned_with_plan(spark, "rel/left", "rel/right", "k")
    check("storage-partitioned join is used", plan.compatible, True)
    check("storage-partitioned join rows", sorted(tuple(r) for r in df.collect()), want)
    fallback = join_partitioned(spark, "rel/left", "rel/right3", "k")
    check("fallback join rows", sorted(tuple(r) for r in fallback.collect()), want)


def vector_search(spark: Any) -> None:
    """Index build (Spark tasks), both search paths, knn_join and the nearest option, against numpy."""
    root = os.path.abspath("rel/vectors")
    tables = [make_table(600, 3, null_every=4)]
    create(root, tables)
    data = data_of(tables)
    report = create_vector_index(root, "v", index_type="IVF_FLAT", num_partitions=4, spark=spark, driver_max_values=0)
    check("vector index: every partition", report.tables, 4)
    listed = PartitionedNamespace.load(root).indexes().to_pylist()
    # Lance counts the rows of the fragments an index covers, NULL vectors included.
    check("vector index: rows indexed", sum(r["indexed_rows"] for r in listed), len(data.ids))
    check("vector index: none unindexed", sum(r["unindexed_rows"] for r in listed), 0)
    q = np.random.default_rng(1).standard_normal(DIM).astype(np.float32)
    want = brute_force(data, q, 5)
    for label, limit in (("driver", 32), ("spark job", 0)):
        df = search_partitioned(spark, root, q, k=5, exact=True, driver_max_partitions=limit)
        check(f"search, {label}", [r["id"] for r in df.collect()], want)
    queries = spark.createDataFrame([("a", q.tolist())], "qid string, q array<float>")
    df = knn_join(spark, queries, root, k=5, query_id="qid", query_column="q", exact=True)
    check("knn_join", [r["id"] for r in df.orderBy("_distance").collect()], want)
    nearest = json.dumps({"q": q.tolist(), "k": 5, "exact": True})
    df = spark.read.format("lance_partitioned").option("nearest", nearest).load(root)
    check("nearest option", [r["id"] for r in df.collect()], want)


def maintenance(spark: Any) -> None:
    root = "rel/small"
    for start in range(0, 40, 10):
        write_partitioned(
            spark.createDataFrame(rows(range(start, start + 10)), SCHEMA),
            root,
            partition_by=None if start else ["country"],
        )
    check("four appends make four fragments per partition", fragments(root), 12)
    report = compact(root, spark=spark, local_max_rows=0)  # force the executor path
    check("compact rewrites on the executors", (report.fragments_before, report.fragments_after), (12, 3))
    check("compact keeps every row", (fragments(root), stored(root)), (3, rows(range(40))))
    delete_rows(root, "amount > 90 AND country <> 'US'", spark=spark)
    want = [r for r in rows(range(40)) if not (r[2] > 90 and r[1] != "US")]
    check("delete_rows (Spark SQL)", stored(root), want)
    drop_partitions(root, "country = 'FR'", spark=spark)
    want = [r for r in want if r[1] != "FR"]
    check("drop_partitions", stored(root), want)
    vacuum(root, dt.timedelta(0), allow_short_retention=True)
    check("vacuum keeps what the latest version reads", stored(root), want)
    optimize_manifest(root)
    check("optimize_manifest keeps every row", stored(root), want)


def merges_and_updates(spark: Any) -> None:
    """merge_partitioned and update_rows through Spark Connect: the target read by tasks
    (mapInArrow over the source's reader), every row of it (the plan cannot be asked)."""
    root = "rel/mu"
    write_partitioned(spark.createDataFrame(rows(range(12)), SCHEMA), root, partition_by=["country"])
    source = [(1, "FR", 100), (4, "US", 400), (50, "DE", 5)]  # 1 moves from DE to FR; 50 is new
    merge_partitioned(spark.createDataFrame(source, SCHEMA), root, on="id")
    by_id = {r[0]: r for r in rows(range(12))}
    by_id.update({r[0]: r for r in source})
    check("merge through Connect", (stored(root), misplaced(root)), (sorted(by_id.values()), []))
    update_rows(root, set={"amount": "amount * 2"}, where="id % 2 = 0", spark=spark)
    want = sorted((i, c, a * 2 if i % 2 == 0 else a) for i, c, a in by_id.values())
    check("update_rows through Connect", stored(root), want)


def _tripled(batch: Any) -> Any:
    import pandas as pd

    if (batch["amount"] == 777).any():
        raise ValueError("no 777")
    return pd.DataFrame({"amount3": batch["amount"] * 3})


def backfills(spark: Any) -> None:
    """backfill_columns through Spark Connect: a Python function and Spark SQL, computed in
    tasks, read back with pylance; a failing function is one line and commits nothing."""
    root = "rel/bf"
    write_partitioned(spark.createDataFrame(rows(range(12)), SCHEMA), root, partition_by=["country"])
    backfill_columns(spark, root, _tripled, read_columns=["amount"], output_schema={"amount3": "int64"})
    backfill_columns(spark, root, {"label": "concat(country, '-', CAST(id AS STRING))"}, filter="country = 'US'")
    got = []
    for p in PartitionedNamespace.load(root).partitions():
        ds = lance.dataset(p.uri, version=p.read_version)  # only US got a file with label
        t = ds.to_table(columns=[c for c in ("id", "amount3", "label") if c in ds.schema.names])
        labels = t.column("label").to_pylist() if "label" in t.column_names else [None] * t.num_rows
        got.extend(zip(t.column("id").to_pylist(), t.column("amount3").to_pylist(), labels, strict=True))
    want = [(i, a * 3, f"{c}-{i}" if c == "US" else None) for i, c, a in rows(range(12))]
    check("backfill through Connect", sorted(got), sorted(want))
    write_partitioned(spark.createDataFrame([(99, "DE", 777)], SCHEMA), root)
    version = PartitionedNamespace.load(root).manifest_version
    try:
        backfill_columns(spark, root, _tripled, read_columns=["amount"], output_schema={"amount3": "int64"})
        line = "no error"
    except Exception as exc:  # the error as the user sees it
        line = str(exc)
    check(
        "a failing backfill through Connect",
        ("(country=DE), fragment" in line, "ValueError: no 777" in line, "\n" in line),
        (True, True, False),
    )
    check("nothing committed", PartitionedNamespace.load(root).manifest_version, version)


def streams(spark: Any) -> None:
    """Structured Streaming through Spark Connect: a file stream into a namespace (one commit a
    batch, write ids from the checkpoint's query id), that namespace read as a stream into
    another, and foreachBatch with batch_write_id; rows read back with pylance."""
    source, root, copy = (os.path.abspath(p) for p in ("rel/stream-in", "rel/st", "rel/st-copy"))
    os.makedirs(source)
    for i in range(3):
        part = rows(range(i * 10, i * 10 + 10))
        pq.write_table(
            pa.table({k: [r[j] for r in part] for j, k in enumerate(("id", "country", "amount"))}),
            f"{source}/part-{i}.parquet",
        )
    query = (
        spark.readStream.schema(SCHEMA)
        .option("maxFilesPerTrigger", 1)
        .parquet(source)
        .writeStream.format("lance_partitioned")
        .option("checkpointLocation", os.path.abspath("rel/ck1"))
        .option("partition_by", "country")
        .trigger(availableNow=True)
        .start(root)
    )
    query.awaitTermination()
    check("a file stream through Connect", stored(root), sorted(rows(range(30))))
    with open("rel/ck1/metadata") as f:
        query_id = json.load(f)["id"]
    history = PartitionedNamespace.load(root).history().to_pylist()
    ids = sorted(dict(r["parameters"]).get("write_id") for r in history if r["operation"] == "WRITE")
    check("one commit a batch, keyed by query and batch", ids, [f"{query_id}-{b}" for b in range(3)])
    spark.readStream.format("lance_partitioned").load(root).writeStream.format("lance_partitioned").option(
        "checkpointLocation", os.path.abspath("rel/ck2")
    ).option("partition_by", "country").trigger(availableNow=True).start(copy).awaitTermination()
    check("a namespace read as a stream through Connect", stored(copy), stored(root))

    target, checkpoint = os.path.abspath("rel/st-fb"), os.path.abspath("rel/ck3")

    def each(batch_df: Any, batch_id: int) -> None:
        from pipelines import batch_write_id, write_partitioned

        write_id = batch_write_id(batch_df, batch_id, checkpoint_location=checkpoint)
        write_partitioned(batch_df, target, partition_by=["country"], write_id=write_id)

    spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 2).parquet(source).writeStream.foreachBatch(
        each
    ).option("checkpointLocation", checkpoint).trigger(availableNow=True).start().awaitTermination()
    check("foreachBatch with batch_write_id through Connect", stored(target), sorted(rows(range(30))))


def jobs(spark: Any) -> None:
    events = pa.table(
        {
            "event_id": pa.array(range(30), pa.int64()),
            "ts": pa.array(
                [dt.datetime(2025, 12, 10 + i % 2, tzinfo=dt.UTC) for i in range(30)], pa.timestamp("us", tz="UTC")
            ),
            "country": pa.array([("US", "CN")[i % 2] for i in range(30)]),
            "user_id": pa.array([i * 7 for i in range(30)], pa.int64()),
        }
    )
    os.makedirs("in", exist_ok=True)
    pq.write_table(events, "in/events.parquet")
    root = "rel/jobs"
    job(
        "ingest",
        ingest_job.main,
        ["--root", root, "--input", "in/events.parquet", "--format", "parquet", "--partition-by", "country"],
    )
    job("ingest again", ingest_job.main, ["--root", root, "--input", "in/events.parquet", "--format", "parquet"])
    job(
        "query",
        query_job.main,
        [
            "--root",
            root,
            "--filter",
            "country = 'US'",
            "--columns",
            "event_id",
            "--output",
            "out/us",
            "--output-format",
            "csv",
        ],
    )
    parts = [os.path.join("out/us", f) for f in sorted(os.listdir("out/us")) if f.endswith(".csv")]
    written = [i for part in parts for i in pacsv.read_csv(part).column("event_id").to_pylist()]
    check("job query output", sorted(written), sorted(list(range(0, 30, 2)) * 2))
    job("query bad filter", query_job.main, ["--root", root, "--filter", "country = = 'US'"], status=2)
    job("compact", compact_job.main, ["--root", root])
    job("delete", delete_job.main, ["--root", root, "--filter", "event_id < 4"])
    ns = PartitionedNamespace.load(root)
    left = sorted(
        i
        for p in ns.partitions()
        for i in lance.dataset(p.uri, version=p.read_version).to_table().column("event_id").to_pylist()
    )
    check("jobs ingest, compact, delete", left, sorted([i for i in range(4, 30)] * 2))
    job("evolve", evolve_job.main, ["add-column", "--root", root, "note:string"])
    check("job evolve", "note" in PartitionedNamespace.load(root).schema.names, True)
    job("vacuum", vacuum_job.main, ["--root", root, "--retain-hours", "0", "--allow-short-retention"])
    job(
        "join",
        join_job.main,
        ["--left", "rel/left", "--right", "rel/right", "--on", "k", "--output", "out/j", "--output-format", "csv"],
    )
    joined = sum(pacsv.read_csv(os.path.join("out/j", f)).num_rows for f in os.listdir("out/j") if f.endswith(".csv"))
    check("job join output rows", joined, 20)
    job("demo", demo_job.main, ["--root", "rel/demo", "--rows", "300", "--days", "2", "--countries", "2"])
    ns = PartitionedNamespace.load("rel/demo")
    check("job demo rows", sum(lance.dataset(p.uri, version=p.read_version).count_rows() for p in ns.partitions()), 300)


def reused_dataframes(spark: Any) -> None:
    """tests/reuse_scenarios.py on this Connect session: one DataFrame reused across filters,
    self-joins, unions, views, cache and explain gives Spark's answer every time."""
    import reuse_scenarios

    root = os.path.abspath("reuse/ns")
    reuse_scenarios.make_namespace(root)
    results = reuse_scenarios.all_scenarios(spark, root)
    check("reuse: enough scenarios ran", len(results) > 60, True)
    for label, got, want in results:
        check(f"reuse: {label}", got, want)


def main(workdir: str) -> None:
    os.makedirs(workdir, exist_ok=True)
    os.chdir(workdir)
    started = time.perf_counter()
    spark = build_session("lance_partitioned connect tests", master="local[2]")
    print(f"connect session: {time.perf_counter() - started:.1f} s", file=sys.stderr)
    for part in (
        session_checks,
        writes,
        reads,
        sql_doors,
        sql_replaces,
        source_writes,
        joins,
        relative_source_paths,
        vector_search,
        maintenance,
        merges_and_updates,
        backfills,
        streams,
        jobs,
        reused_dataframes,
    ):
        started = time.perf_counter()
        part(spark)
        print(f"{part.__name__}: {time.perf_counter() - started:.1f} s", file=sys.stderr)
    print("DONE", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
