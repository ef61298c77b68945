"""The namespace on a real S3 API: moto's standalone server (``s3_server`` in conftest), no network.

Every entry point that opens the namespace takes Lance storage options, and the Spark
tasks get them with what they are pickled with (reader, writer, lease reference,
compaction task). No AWS variable is set in the environment, so a call that lost its
options would go to the real AWS (unreachable here) and fail: nothing passes by accident.
What is in the bucket is checked with boto3, independently of this project; expected
rows are written out by hand.
"""

from __future__ import annotations

import datetime as dt
import json
import threading
import uuid

import lance
import lance.fragment
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from botocore.exceptions import ClientError
from pyspark import cloudpickle
from pyspark.errors import IllegalArgumentException
from pyspark.sql import types as T

import pipelines
from jobs import compact as compact_job
from jobs import delete as delete_job
from jobs import demo as demo_job
from jobs import evolve as evolve_job
from jobs import ingest as ingest_job
from jobs import join as join_job
from jobs import query as query_job
from jobs import vacuum as vacuum_job
from partitioning import PartitionedNamespace
from partitioning.errors import InvalidInput, PartitioningError
from partitioning.plan.join import plan_namespace_join
from partitioning.plan.join_columns import join_output_schema
from partitioning.plan.join_local import local_join
from partitioning.sql.filters import Dialect
from partitioning.storage.roots import (
    arrow_filesystem_kwargs,
    filesystem_of,
    parse_storage_option_args,
    storage_option_pairs,
    storage_options_from,
)
from partitioning.tables.compaction import compact_local, plan_compaction
from partitioning.tables.deletes import delete_rows, drop_partitions
from partitioning.tables.maintenance import optimize_manifest
from partitioning.tables.vacuum import vacuum
from partitioning.tables.write import write_table
from pipelines import read_partitioned, register_data_source, write_partitioned
from pipelines.read.join import join_partitioned_with_plan
from pipelines.source.writer import LancePartitionedWriter

SCHEMA = pa.schema(
    [pa.field("id", pa.int64(), nullable=False), pa.field("country", pa.string()), pa.field("v", pa.int64())]
)
SPARK_SCHEMA = "id long, country string, v long"
Row = tuple[int, str | None, int]


def _table(rows: list[Row]) -> pa.Table:
    return pa.Table.from_pylist([{"id": i, "country": c, "v": v} for i, c, v in rows], schema=SCHEMA)


def _rows(ns: PartitionedNamespace, columns: tuple[str, ...] = ("id", "country", "v")) -> list[tuple]:
    """Every visible row (each table at its read_version), sorted; columns a table lacks are None."""
    out = []
    for p in ns.partitions():
        for r in ns.open_table(p).to_table().to_pylist():
            out.append(tuple(r.get(c) for c in columns))
    return sorted(out, key=repr)


def _key_prefix(root: str) -> str:
    return root.split("://", 1)[1].split("/", 1)[1] + "/"


def _table_keys(s3_server, root: str, location: str) -> list[str]:
    return s3_server.keys(f"{_key_prefix(root)}{location}/")


def _spark_rows(df) -> list[tuple]:
    return sorted((tuple(r) for r in df.collect()), key=repr)


# -- the storage options themselves --------------------------------------------------------------
def test_arrow_filesystem_arguments_follow_lance_option_names():
    lance_options = {
        "aws_endpoint": "http://127.0.0.1:9000",
        "AWS_REGION": "eu-west-1",
        "aws_access_key_id": "AKID",
        "aws_secret_access_key": "SECRET",
        "aws_session_token": "TOKEN",
        "allow_http": "true",
        "aws_virtual_hosted_style_request": "true",
        "timeout": "30s",
    }
    assert arrow_filesystem_kwargs("s3", lance_options) == {
        "access_key": "AKID",
        "secret_key": "SECRET",
        "session_token": "TOKEN",
        "region": "eu-west-1",
        "scheme": "http",
        "endpoint_override": "127.0.0.1:9000",
        "force_virtual_addressing": True,
    }
    assert arrow_filesystem_kwargs("s3", {"endpoint": "minio.local:9000", "skip_signature": "true"}) == {
        "scheme": "https",
        "endpoint_override": "minio.local:9000",
        "anonymous": True,
    }
    azure = {"azure_storage_account_name": "acct", "account_key": "a2V5", "azure_storage_endpoint": "http://h:10000"}
    assert arrow_filesystem_kwargs("az", azure) == {
        "account_name": "acct",
        "account_key": "a2V5",
        "blob_storage_scheme": "http",
        "blob_storage_authority": "h:10000",
    }
    assert arrow_filesystem_kwargs("gs", {"google_skip_signature": "true"}) == {"anonymous": True}


def test_job_arguments_and_data_source_options_carry_storage_options():
    assert parse_storage_option_args(["aws_region=eu-west-1", "aws_endpoint=http://h:9000/", "token=a=b"]) == {
        "aws_region": "eu-west-1",
        "aws_endpoint": "http://h:9000/",
        "token": "a=b",
    }
    assert parse_storage_option_args([]) is None
    with pytest.raises(InvalidInput, match=r"--storage-option 'aws_region' must be KEY=VALUE"):
        parse_storage_option_args(["aws_region"])
    pairs = storage_option_pairs({"aws_region": "eu-west-1", "allow_http": True})
    assert pairs == {"storage.aws_region": "eu-west-1", "storage.allow_http": "true"}
    assert storage_options_from({"path": "/x", "STORAGE.AWS_REGION": "eu-west-1"}) == {"AWS_REGION": "eu-west-1"}
    assert storage_options_from({"path": "/x", "versionAsOf": "3"}) is None


def test_filesystem_of_reaches_the_store_the_options_name(s3_server, s3_root):
    s3_server.client().put_object(Bucket=s3_server.bucket, Key=_key_prefix(s3_root) + "probe.txt", Body=b"x")
    fs, path = filesystem_of(f"{s3_root}/probe.txt", s3_server.options)
    assert path == f"{s3_server.bucket}/{_key_prefix(s3_root)}probe.txt"
    with fs.open_input_stream(path) as f:
        assert f.read() == b"x"


def test_moto_refuses_a_second_conditional_put(s3_server, s3_root):
    """Lance commits a version on s3:// by a put with ``If-None-Match: *`` (its
    ConditionalPutCommitHandler): the store must refuse the second one, and moto does."""
    client, key = s3_server.client(), _key_prefix(s3_root) + "_versions/1.manifest"
    client.put_object(Bucket=s3_server.bucket, Key=key, Body=b"first", IfNoneMatch="*")
    with pytest.raises(ClientError) as err:
        client.put_object(Bucket=s3_server.bucket, Key=key, Body=b"second", IfNoneMatch="*")
    assert err.value.response["Error"]["Code"] == "PreconditionFailed"
    assert client.get_object(Bucket=s3_server.bucket, Key=key)["Body"].read() == b"first"


def test_racing_lance_commits_on_s3_all_land(s3_server, s3_root):
    """Six commits from the same version at once: each conditional put of a version that
    another commit took first is refused, and Lance rebases and retries, so none is lost."""
    opts, uri = s3_server.options, f"{s3_root}/plain"
    lance.write_dataset(pa.table({"x": [0]}), uri, storage_options=opts)
    fragments = [lance.fragment.write_fragments(pa.table({"x": [i]}), uri, storage_options=opts) for i in range(1, 7)]
    start = threading.Barrier(len(fragments), timeout=60)
    errors: list[BaseException] = []

    def commit(new: list) -> None:
        try:
            start.wait()
            lance.LanceDataset.commit(uri, lance.LanceOperation.Append(new), read_version=1, storage_options=opts)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=commit, args=(f,)) for f in fragments]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    ds = lance.dataset(uri, storage_options=opts)
    assert ds.version == 7
    assert sorted(ds.to_table().column("x").to_pylist()) == [0, 1, 2, 3, 4, 5, 6]


def test_a_value_lance_refuses_is_one_line_naming_the_option(s3_server, s3_root):
    PartitionedNamespace.create(s3_root, SCHEMA, ["country"], s3_server.options)
    with pytest.raises(InvalidInput, match=r"^storage option 'timeout' was refused by Lance: .*\"soon\"") as err:
        PartitionedNamespace.load(s3_root, {**s3_server.options, "timeout": "soon"})
    assert "\n" not in str(err.value)
    with pytest.raises(InvalidInput, match=r"storage option 'connect_timeout' was refused by Lance"):
        PartitionedNamespace.create(f"{s3_root}2", SCHEMA, ["country"], {**s3_server.options, "connect_timeout": "x"})
    with pytest.raises(InvalidInput, match=r"storage option 'aws_endpoint' must be an http:// or https:// URL"):
        PartitionedNamespace.load(s3_root, {**s3_server.options, "aws_endpoint": "127.0.0.1 9000"})
    # a key Lance does not know goes to Lance, which (pylance 14) ignores it
    loaded = PartitionedNamespace.load(s3_root, {**s3_server.options, "no_such_option": "1"})
    assert loaded.schema.names == SCHEMA.names and loaded.storage_options["no_such_option"] == "1"


def test_without_the_options_the_store_is_not_reached(s3_server, s3_root):
    PartitionedNamespace.create(s3_root, SCHEMA, ["country"], s3_server.options)
    missing_endpoint = {k: v for k, v in s3_server.options.items() if k != "aws_endpoint"}
    with pytest.raises(PartitioningError, match=r"^cannot read .*the store did not answer") as err:
        PartitionedNamespace.load(s3_root, {**missing_endpoint, "client_max_retries": "0", "timeout": "2s"})
    assert "\n" not in str(err.value)


# -- Spark-free: create, write, prune, time travel, evolve, maintenance, concurrency --------------
def test_create_write_prune_time_travel_and_evolve_on_s3(s3_server, s3_root, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    opts = s3_server.options
    ns = PartitionedNamespace.create(s3_root, SCHEMA, ["country"], opts)
    assert ns.root == s3_root
    first = write_table(ns, _table([(1, "US", 10), (2, "CN", 20), (3, "DE", 30)]))
    write_table(ns, _table([(4, "US", 40)]))
    write_table(ns, _table([(5, "CN", 50)]), mode="overwrite_partitions")
    assert _rows(ns.refresh()) == [(1, "US", 10), (3, "DE", 30), (4, "US", 40), (5, "CN", 50)]
    plan = ns.plan_scan("country = 'US'")
    assert [t.object_id for t in plan] == [p.object_id for p in ns.partitions() if p.values["country"] == "US"]

    old = PartitionedNamespace.load(s3_root, opts, manifest_version=first.manifest_version)
    assert _rows(old) == [(1, "US", 10), (2, "CN", 20), (3, "DE", 30)]

    ns.evolve_partition_spec(["country", "bucket[2](id)"])
    ns.add_columns({"note": pa.string()})
    write_table(ns, pa.table({"id": [6], "country": ["US"], "v": [60], "note": ["new"]}))
    assert _rows(ns.refresh(), ("id", "country", "note")) == [
        (1, "US", None),
        (3, "DE", None),
        (4, "US", None),
        (5, "CN", None),
        (6, "US", "new"),
    ]
    assert sorted(PartitionedNamespace.load(s3_root, opts).specs) == [1, 2]

    prefix = _key_prefix(s3_root)
    keys = s3_server.keys(prefix)
    assert any(k.startswith(f"{prefix}__manifest/_versions/") for k in keys)
    for p in ns.partitions():
        assert any(k.endswith(".lance") for k in _table_keys(s3_server, s3_root, p.location)), p.location
    assert list(tmp_path.iterdir()) == []  # nothing landed on local disk


def test_maintenance_on_s3(s3_server, s3_root):
    opts = s3_server.options
    ns = PartitionedNamespace.create(s3_root, SCHEMA, ["country"], opts)
    for rows in ([(1, "US", 1), (2, "CN", 2)], [(3, "US", 3), (4, "DE", 4)], [(5, "US", 5), (6, "CN", 6)]):
        write_table(ns, _table(rows))
    us = next(p for p in ns.partitions() if p.values["country"] == "US")
    assert len(ns.open_table(us).get_fragments()) == 3

    report = compact_local(ns)
    assert report.fragments_after < report.fragments_before
    assert (
        len(ns.open_table(next(p for p in ns.refresh().partitions() if p.object_id == us.object_id)).get_fragments())
        == 1
    )
    assert delete_rows(s3_root, "v = 3", storage_options=opts).rows == 1
    dropped = next(p for p in ns.refresh().partitions() if p.values["country"] == "DE")
    assert drop_partitions(s3_root, "country = 'DE'", storage_options=opts).tables == 1
    optimize_manifest(s3_root, storage_options=opts)
    expected = [(1, "US", 1), (2, "CN", 2), (5, "US", 5), (6, "CN", 6)]
    assert _rows(ns.refresh()) == expected

    # a write in progress holds a lease under _writes on S3; a vacuum meanwhile keeps its files
    lease_keys: list[list[str]] = []

    def during_write(_: pa.Table) -> None:
        lease_keys.append([k for k in s3_server.keys(f"{_key_prefix(s3_root)}_writes/") if k.endswith(".json")])
        vacuum(s3_root, dt.timedelta(0), allow_short_retention=True, storage_options=opts)

    write_table(ns, _table([(7, "NL", 7)]), before_commit=during_write)
    assert len(lease_keys[0]) == 1
    assert [k for k in s3_server.keys(f"{_key_prefix(s3_root)}_writes/") if k.endswith(".json")] == []
    expected.append((7, "NL", 7))
    assert _rows(ns.refresh()) == expected

    assert _table_keys(s3_server, s3_root, dropped.location) == []  # the vacuum removed the dropped table
    vacuum(s3_root, dt.timedelta(0), allow_short_retention=True, storage_options=opts)
    assert ns.refresh().orphans() == []
    assert _rows(ns.refresh()) == expected
    assert len(lance.dataset(f"{s3_root}/__manifest", storage_options=opts).versions()) == 1


def test_two_concurrent_writers_on_s3_both_commit(s3_server, s3_root):
    opts = s3_server.options
    PartitionedNamespace.create(s3_root, SCHEMA, ["country"], opts)
    both_written = threading.Barrier(2, timeout=60)
    errors: list[BaseException] = []

    def writer(rows: list[Row]) -> None:
        try:
            ns = PartitionedNamespace.load(s3_root, opts)
            write_table(ns, _table(rows), before_commit=lambda _: both_written.wait())
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [
        threading.Thread(target=writer, args=([(1, "US", 1), (2, "CN", 2)],)),
        threading.Thread(target=writer, args=([(3, "US", 3), (4, "DE", 4)],)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    ns = PartitionedNamespace.load(s3_root, opts)
    assert _rows(ns.refresh()) == [(1, "US", 1), (2, "CN", 2), (3, "US", 3), (4, "DE", 4)]
    assert sorted(p.values["country"] for p in ns.partitions()) == ["CN", "DE", "US"]


def test_join_plan_reads_both_sides_on_s3(s3_server, s3_root):
    opts = s3_server.options
    left = PartitionedNamespace.create(f"{s3_root}/left", SCHEMA, ["bucket[4](id)"], opts)
    right_schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("w", pa.string())])
    right = PartitionedNamespace.create(f"{s3_root}/right", right_schema, ["bucket[4](id)"], opts)
    write_table(left, _table([(1, "US", 10), (2, "CN", 20), (3, "DE", 30), (4, "US", 40)]))
    write_table(right, pa.table({"id": [2, 3, 5], "w": ["b", "c", "e"]}, schema=right_schema))
    plan = plan_namespace_join(left.refresh(), right.refresh(), ["id"], "inner", dialect=Dialect.datafusion())
    assert plan.compatible
    output = join_output_schema(left.namespace_schema, right.namespace_schema, ("id",), None)
    joined = []
    for task in plan.tasks:
        lhs = pa.concat_tables([left.open_table(t).to_table() for t in task.left], promote_options="default")
        rhs = pa.concat_tables([right.open_table(t).to_table() for t in task.right], promote_options="default")
        if task.left and task.right:
            joined.extend(local_join(lhs, rhs, ["id"], "inner", output).to_pylist())
    assert sorted(tuple(r.values()) for r in joined) == [(2, "CN", 20, "b"), (3, "DE", 30, "c")]


# -- Spark: the tasks get the options -------------------------------------------------------------
def test_spark_write_read_prune_and_time_travel_on_s3(spark, s3_server, s3_root):
    opts = s3_server.options
    register_data_source(spark)
    df = spark.createDataFrame([(1, "US", 10), (2, "CN", 20), (3, "DE", 30)], SPARK_SCHEMA)
    first = write_partitioned(df, s3_root, partition_by=["country"], storage_options=opts)
    write_partitioned(spark.createDataFrame([(4, "US", 40)], SPARK_SCHEMA), s3_root, storage_options=opts)
    write_partitioned(
        spark.createDataFrame([(5, "CN", 50)], SPARK_SCHEMA), s3_root, mode="overwrite_partitions", storage_options=opts
    )
    now = [(1, "US", 10), (3, "DE", 30), (4, "US", 40), (5, "CN", 50)]
    assert _spark_rows(read_partitioned(spark, s3_root, storage_options=opts)) == now

    def source():
        return spark.read.format("lance_partitioned").options(**storage_option_pairs(opts))

    assert _spark_rows(source().option("versionAsOf", first.manifest_version).load(s3_root)) == [
        (1, "US", 10),
        (2, "CN", 20),
        (3, "DE", 30),
    ]

    # pruning, shown by the store: with CN's data files gone, only scans that skip CN succeed
    ns = PartitionedNamespace.load(s3_root, opts)
    cn = next(p for p in ns.partitions() if p.values["country"] == "CN")
    client = s3_server.client()
    for key in _table_keys(s3_server, s3_root, cn.location):
        if key.endswith(".lance"):
            client.delete_object(Bucket=s3_server.bucket, Key=key)
    us = [(1, "US", 10), (4, "US", 40)]
    assert _spark_rows(read_partitioned(spark, s3_root, filter="country = 'US'", storage_options=opts)) == us
    assert _spark_rows(source().option("filter", "country = 'US'").load(s3_root)) == us
    with pytest.raises(Exception, match=r"CorruptNamespace|missing|not found"):
        source().load(s3_root).collect()

    write_partitioned(
        spark.createDataFrame([(9, "NL", 90)], SPARK_SCHEMA), s3_root, mode="overwrite", storage_options=opts
    )
    assert _spark_rows(read_partitioned(spark, s3_root, storage_options=opts)) == [(9, "NL", 90)]


def test_a_refused_option_is_one_line_through_spark_too(spark, s3_server, s3_root):
    register_data_source(spark)
    PartitionedNamespace.create(s3_root, SCHEMA, ["country"], s3_server.options)
    bad = {**s3_server.options, "timeout": "soon"}
    with pytest.raises(InvalidInput, match=r"^storage option 'timeout' was refused by Lance"):
        read_partitioned(spark, s3_root, storage_options=bad)
    with pytest.raises(IllegalArgumentException) as err:
        spark.read.format("lance_partitioned").options(**storage_option_pairs(bad)).load(s3_root).collect()
    assert str(err.value).startswith("[LANCE_INVALID_INPUT] storage option 'timeout' was refused by Lance")
    assert "Traceback" not in str(err.value)


def test_data_source_writes_on_s3(spark, s3_server, s3_root):
    register_data_source(spark)
    pairs = storage_option_pairs(s3_server.options)

    def save(rows: list[Row], mode: str, **options: str) -> None:
        writer = spark.createDataFrame(rows, SPARK_SCHEMA).repartition(2).write.format("lance_partitioned")
        writer.mode(mode).options(**pairs, **options).save(s3_root)

    def read() -> list[tuple]:
        return _rows(PartitionedNamespace.load(s3_root, s3_server.options))

    save([(1, "US", 1), (2, "CN", 2), (3, "DE", 3)], "append", partition_by="country")
    save([(4, "US", 4)], "append")
    assert read() == [(1, "US", 1), (2, "CN", 2), (3, "DE", 3), (4, "US", 4)]
    save([(5, "US", 5)], "overwrite", partitionOverwriteMode="dynamic")
    assert read() == [(2, "CN", 2), (3, "DE", 3), (5, "US", 5)]
    save([(6, "NL", 6)], "overwrite", partitionOverwriteMode="static")
    assert read() == [(6, "NL", 6)]
    assert [k for k in s3_server.keys(f"{_key_prefix(s3_root)}_writes/") if k.endswith(".json")] == []


def test_a_pickled_writer_task_writes_and_keeps_its_lease_alive_on_s3(s3_server, s3_root):
    """What Spark ships to a data source write task: the writer, pickled. Its storage
    options reach the fragment writes and the lease heartbeat."""
    spark_schema = T.StructType(
        [
            T.StructField("id", T.LongType(), False),
            T.StructField("country", T.StringType()),
            T.StructField("v", T.LongType()),
        ]
    )
    options = {"path": s3_root, "partition_by": "country", **storage_option_pairs(s3_server.options)}
    writer = LancePartitionedWriter(options, spark_schema, False)
    assert writer.lease is not None
    lease_key = writer.lease.uri.split(f"s3://{s3_server.bucket}/", 1)[1]

    def heartbeat() -> dt.datetime:
        body = s3_server.client().get_object(Bucket=s3_server.bucket, Key=lease_key)["Body"].read()
        return dt.datetime.fromisoformat(json.loads(body)["heartbeat"])

    taken = heartbeat()
    task = cloudpickle.loads(cloudpickle.dumps(writer))
    message = task.write(iter(_table([(1, "US", 1), (2, "CN", 2)]).to_batches()))
    assert heartbeat() > taken
    writer.commit([message])
    assert _rows(PartitionedNamespace.load(s3_root, s3_server.options)) == [(1, "US", 1), (2, "CN", 2)]
    assert lease_key not in s3_server.keys(lease_key)


def test_spark_maintenance_wrappers_on_s3(spark, s3_server, s3_root):
    opts = s3_server.options
    ns = PartitionedNamespace.create(s3_root, SCHEMA, ["country"], opts)
    for rows in ([(1, "US", 1), (2, "CN", 2)], [(3, "US", 3)], [(4, "US", 4), (5, "CN", 5)], [(6, "DE", 6)]):
        write_table(ns, _table(rows))
    assert all(dict(t.storage_options) == opts for t in plan_compaction(ns.refresh()))
    cn = next(p for p in ns.partitions() if p.values["country"] == "CN")

    report = pipelines.compact(s3_root, spark=spark, storage_options=opts, local_max_rows=0)  # on executors
    assert (report.tables, report.fragments_before, report.fragments_after) == (2, 5, 2)
    assert pipelines.delete_rows(s3_root, "v = 3", spark=spark, storage_options=opts).rows == 1
    assert pipelines.drop_partitions(s3_root, "country = 'CN'", spark=spark, storage_options=opts).tables == 1
    pipelines.optimize_manifest(s3_root, storage_options=opts)
    pipelines.vacuum(s3_root, dt.timedelta(0), allow_short_retention=True, storage_options=opts)

    expected = [(1, "US", 1), (4, "US", 4), (6, "DE", 6)]
    assert _rows(PartitionedNamespace.load(s3_root, opts)) == expected
    assert _spark_rows(read_partitioned(spark, s3_root, storage_options=opts)) == expected
    assert _table_keys(s3_server, s3_root, cn.location) == []
    us = next(p for p in PartitionedNamespace.load(s3_root, opts).partitions() if p.values["country"] == "US")
    assert len(lance.dataset(us.uri, version=us.read_version, storage_options=opts).get_fragments()) == 1


def _join_inputs(s3_server, s3_root: str) -> tuple[str, str, str]:
    """Left and right partitioned alike on ``bucket[4](id)`` (storage-partitioned join), and a
    right side partitioned on another column (Spark's join)."""
    opts = s3_server.options
    right_schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("w", pa.string())])
    left = PartitionedNamespace.create(f"{s3_root}/left", SCHEMA, ["bucket[4](id)"], opts)
    write_table(left, _table([(1, "US", 10), (2, "CN", 20), (3, "DE", 30), (4, "US", 40)]))
    right_rows = pa.table({"id": [2, 3, 5], "w": ["b", "c", "e"]}, schema=right_schema)
    for name, spec in (("right", "bucket[4](id)"), ("other", "w")):
        write_table(PartitionedNamespace.create(f"{s3_root}/{name}", right_schema, [spec], opts), right_rows)
    return f"{s3_root}/left", f"{s3_root}/right", f"{s3_root}/other"


def test_join_partitioned_on_s3(spark, s3_server, s3_root):
    opts = s3_server.options
    left, right, other = _join_inputs(s3_server, s3_root)
    assert join_partitioned_with_plan(spark, left, right, "id", storage_options=opts)[1].compatible
    assert not join_partitioned_with_plan(spark, left, other, "id", storage_options=opts)[1].compatible
    left_join = pipelines.join_partitioned(spark, left, right, ["id"], "left", storage_options=opts)
    assert left_join.columns == ["id", "country", "v", "w"]
    assert _spark_rows(left_join) == [(1, "US", 10, None), (2, "CN", 20, "b"), (3, "DE", 30, "c"), (4, "US", 40, None)]
    shuffled = pipelines.join_partitioned(spark, left, other, "id", filter_left="v > 10", storage_options=opts)
    assert _spark_rows(shuffled) == [(2, "CN", 20, "b"), (3, "DE", 30, "c")]


# -- the jobs, in-process against the test session, with --storage-option ------------------------
def _job_options(s3_server) -> list[str]:
    return [arg for k, v in s3_server.options.items() for arg in ("--storage-option", f"{k}={v}")]


def test_jobs_on_s3(spark, s3_server, s3_root, tmp_path, capsys):
    so = _job_options(s3_server)
    inputs = tmp_path / "in"
    inputs.mkdir()
    first = [(1, "US", 10), (2, "CN", 20)]
    second = [(3, "US", 30), (4, "DE", 40)]
    pq.write_table(_table(first), inputs / "first.parquet")
    pq.write_table(_table(second), inputs / "second.parquet")

    ingest_args = ["--root", s3_root, "--format", "parquet", *so]
    assert ingest_job.main([*ingest_args, "--input", str(inputs / "first.parquet"), "--partition-by", "country"]) == 0
    assert ingest_job.main([*ingest_args, "--input", str(inputs / "second.parquet")]) == 0
    out = capsys.readouterr().out
    assert "ingest: 2 rows, 2 partitions touched (2 new)" in out
    assert "ingest: 2 rows, 2 partitions touched (1 new)" in out
    assert _rows(PartitionedNamespace.load(s3_root, s3_server.options)) == sorted(first + second, key=repr)

    assert compact_job.main(["--root", s3_root, *so]) == 0
    ns = PartitionedNamespace.load(s3_root, s3_server.options)
    us = next(p for p in ns.partitions() if p.values["country"] == "US")
    assert len(lance.dataset(us.uri, version=us.read_version, storage_options=s3_server.options).get_fragments()) == 1

    assert delete_job.main(["--root", s3_root, "--filter", "v = 30", *so]) == 0
    assert evolve_job.main(["add-column", "--root", s3_root, *so, "note:string"]) == 0
    assert vacuum_job.main(["--root", s3_root, "--retain-hours", "0", "--allow-short-retention", *so]) == 0
    capsys.readouterr()

    output = tmp_path / "us.parquet"
    assert query_job.main(["--root", s3_root, "--filter", "country = 'US'", "--output", str(output), *so]) == 0
    assert "lance_partitioned: scanning 1 of 3 partition tables (spec v1: 1/3)" in capsys.readouterr().out
    assert pq.read_table(output).to_pylist() == [{"id": 1, "country": "US", "v": 10, "note": None}]

    left, right, _ = _join_inputs(s3_server, f"{s3_root}-join")
    joined = tmp_path / "joined.csv"
    argv = ["--left", left, "--right", right, "--on", "id", *so, "--output", str(joined), "--output-format", "csv"]
    assert join_job.main(argv) == 0
    assert "join: storage-partitioned join used" in capsys.readouterr().out
    parts = [pacsv.read_csv(f) for f in sorted(joined.glob("*.csv")) if f.stat().st_size > 0]
    rows = pa.concat_tables(parts).to_pylist()
    assert sorted(tuple(r.values()) for r in rows) == [(2, "CN", 20, "b"), (3, "DE", 30, "c")]


JOBS = [compact_job, delete_job, demo_job, evolve_job, ingest_job, join_job, query_job, vacuum_job]


@pytest.mark.parametrize("job", JOBS, ids=lambda job: job.__name__.rsplit(".", 1)[-1])
def test_a_malformed_storage_option_is_one_line_and_exit_2(job, capsys):
    argv = {
        evolve_job: ["add-column", "--root", "s3://b/ns", "--storage-option", "aws_region", "note:string"],
        ingest_job: ["--root", "s3://b/ns", "--input", "x", "--format", "parquet", "--storage-option", "aws_region"],
        join_job: ["--left", "s3://b/l", "--right", "s3://b/r", "--on", "id", "--storage-option", "aws_region"],
        delete_job: ["--root", "s3://b/ns", "--filter", "id = 1", "--storage-option", "aws_region"],
    }.get(job, ["--root", "s3://b/ns", "--storage-option", "aws_region"])
    assert job.main(argv) == 2
    err = capsys.readouterr().err
    assert err == "error: --storage-option 'aws_region' must be KEY=VALUE, e.g. aws_region=eu-west-1\n"


def test_the_catalog_on_s3(spark, s3_server):
    """The SQL doors on an object store: a warehouse on s3:// with the catalog's storage
    options; WHERE prunes (shown by the store: the other partitions' data files are gone),
    DML commits, DROP TABLE PURGE leaves no key behind (listed with boto3)."""
    prefix = uuid.uuid4().hex[:12]
    name = f"lance_s3_{prefix}"
    spark.conf.set(f"spark.sql.catalog.{name}", "lance_partitioned.LanceCatalog")
    spark.conf.set(f"spark.sql.catalog.{name}.warehouse", f"s3://{s3_server.bucket}/{prefix}/wh")
    for key, value in s3_server.options.items():
        spark.conf.set(f"spark.sql.catalog.{name}.storage.{key}", value)
    table = f"{name}.db.events"
    spark.sql(f"CREATE TABLE {table} (id bigint, country string, v bigint) PARTITIONED BY (country)")
    spark.sql(f"INSERT INTO {table} VALUES (1, 'US', 10), (2, 'CN', 20), (3, 'DE', 30)")
    spark.sql(f"UPDATE {table} SET v = v + 1 WHERE country = 'US'")
    spark.sql(f"DELETE FROM {table} WHERE id = 3")
    root = f"s3://{s3_server.bucket}/{prefix}/wh/db/events"
    ns = PartitionedNamespace.load(root, s3_server.options)
    assert _rows(ns) == [(1, "US", 11), (2, "CN", 20)]
    cn = next(p for p in ns.partitions() if p.values["country"] == "CN")
    for key in _table_keys(s3_server, root, cn.location):
        if key.endswith(".lance"):
            s3_server.client().delete_object(Bucket=s3_server.bucket, Key=key)
    assert [tuple(r) for r in spark.sql(f"SELECT * FROM {table} WHERE country = 'US'").collect()] == [(1, "US", 11)]
    spark.sql(f"DROP TABLE {table} PURGE")
    assert s3_server.keys(f"{prefix}/wh/db/events/") == []
