"""Where a relative root can mean one place, and what the data source says when it cannot.

A relative root is made absolute on the driver; that is only the executors' place too
when they run on the driver's machine (``local``, ``local-cluster``). With any other
master it is refused in one line. A non-local master cannot be started here, so the
check is tested with master strings (and the data source bound to one), and end to end
with the real local session, which accepts a relative root.

The data source resolves a relative ``path`` where Spark plans it (on Spark Connect, the
server), so a missing namespace at a relative path says where it was looked for.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark import cloudpickle
from pyspark.errors import IllegalArgumentException
from pyspark.sql import types as T

from partitioning import PartitionedNamespace
from partitioning.errors import InvalidInput, NamespaceNotFound
from partitioning.tables.write import write_table
from pipelines import read_partitioned, register_data_source, write_partitioned
from pipelines.maintenance.operations import compact, delete_rows, drop_partitions
from pipelines.read.join_source import LancePartitionedJoinDataSource
from pipelines.session_calls import session_bound
from pipelines.shared_roots import check_root_for_master, is_relative_path, session_master
from pipelines.source.datasource import LancePartitionedDataSource, PerScanPushdownDataSource

SCHEMA = pa.schema(
    [pa.field("id", pa.int64(), nullable=False), pa.field("country", pa.string()), pa.field("v", pa.int64())]
)
SPARK_SCHEMA = "id long, country string, v long"
SPARK_STRUCT = T.StructType(
    [
        T.StructField("id", T.LongType(), False),
        T.StructField("country", T.StringType()),
        T.StructField("v", T.LongType()),
    ]
)
LOCAL_MASTERS = ["local", "local[2]", "local[*]", "local[4,3]", "local[*, 2]", "local-cluster[2,1,1024]"]
CLUSTER_MASTERS = ["yarn", "spark://10.0.0.5:7077", "k8s://https://kube.example:6443", "mesos://zk://h:2181/mesos"]


def _make(root: str | Path) -> None:
    ns = PartitionedNamespace.create(str(root), SCHEMA, ["country"])
    write_table(ns, pa.Table.from_pylist([{"id": 1, "country": "US", "v": 1}, {"id": 2, "country": "CN", "v": 2}]))


@pytest.mark.parametrize(
    ("root", "relative"),
    [
        ("rel/events", True),
        ("./events", True),
        ("../warehouse/events", True),
        ("events", True),
        ("file:rel/events", True),
        ("/srv/warehouse/events", False),
        ("~/events", False),
        ("file:///srv/events", False),
        ("file:/srv/events", False),
        ("s3://bucket/events", False),
        ("gs://bucket/events", False),
        ("az://container/events", False),
    ],
)
def test_which_roots_are_relative(root, relative):
    assert is_relative_path(root) is relative


@pytest.mark.parametrize("master", LOCAL_MASTERS)
def test_masters_on_the_drivers_machine_accept_a_relative_root(master):
    check_root_for_master("rel/events", master)


@pytest.mark.parametrize("master", CLUSTER_MASTERS)
def test_cluster_masters_refuse_a_relative_root_in_one_line(master):
    with pytest.raises(InvalidInput) as err:
        check_root_for_master("rel/events", master)
    assert str(err.value) == (
        f"relative root 'rel/events' cannot be used with master {master!r}, whose executors do not see this "
        "machine's files; use a shared URI (s3://, gs://, az://) or an absolute path that every executor mounts"
    )
    for shared in ("s3://bucket/events", "/mnt/shared/events", "file:///mnt/shared/events", "~/events"):
        check_root_for_master(shared, master)


def test_an_unknown_master_is_not_refused():
    check_root_for_master("rel/events", None)


def test_the_real_local_session_accepts_a_relative_root(spark, tmp_path, monkeypatch):
    assert session_master(spark) == "local[2]"
    monkeypatch.chdir(tmp_path)
    name = f"rel-{uuid.uuid4().hex[:8]}/events"
    df = spark.createDataFrame([(1, "US", 1), (2, "CN", 2), (3, "US", 3)], SPARK_SCHEMA)
    assert write_partitioned(df, name, partition_by=["country"]).root == str(tmp_path / name)
    assert sorted(tuple(r) for r in read_partitioned(spark, name, filter="country = 'US'").collect()) == [
        (1, "US", 1),
        (3, "US", 3),
    ]
    assert compact(name, spark=spark).tables == 0
    assert delete_rows(name, "v = 3", spark=spark).rows == 1
    assert drop_partitions(name, "country = 'CN'", spark=spark).tables == 1
    assert [tuple(r) for r in read_partitioned(spark, name).collect()] == [(1, "US", 1)]


@pytest.mark.parametrize("source", [LancePartitionedDataSource, PerScanPushdownDataSource])
def test_the_data_source_bound_to_a_cluster_master_refuses_a_relative_path(source, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _make("rel/ns")
    yarn = session_bound(source, "yarn")
    assert issubclass(yarn, source) and yarn.name() == "lance_partitioned"
    with pytest.raises(InvalidInput, match=r"^relative root 'rel/ns' cannot be used with master 'yarn'"):
        yarn({"path": "rel/ns"}).schema()
    with pytest.raises(InvalidInput, match=r"^relative root 'rel/new' cannot be used with master 'yarn'"):
        yarn({"path": "rel/new", "partition_by": "country"}).writer(SPARK_STRUCT, False)
    assert not (tmp_path / "rel" / "new").exists()

    absolute = yarn({"path": str(tmp_path / "rel" / "ns")})
    assert absolute.schema().names == ["id", "country", "v"]
    local = session_bound(source, "local-cluster[2,1,1024]")({"path": "rel/ns"})
    assert local.schema().names == ["id", "country", "v"]


def test_the_bound_master_travels_with_the_registered_class():
    """Spark pickles a registered data source class with cloudpickle; the bound one is not
    importable by name, so it travels by value, with its master and whether it is Connect."""
    bound = session_bound(LancePartitionedDataSource, "spark://10.0.0.5:7077", True)
    assert session_bound(LancePartitionedDataSource, "spark://10.0.0.5:7077", True) is bound
    shipped = cloudpickle.loads(cloudpickle.dumps(bound))
    assert shipped is not LancePartitionedDataSource
    assert issubclass(shipped, LancePartitionedDataSource)
    assert (shipped.session_master, shipped.session_connect) == ("spark://10.0.0.5:7077", True)
    assert (LancePartitionedDataSource.session_master, LancePartitionedDataSource.session_connect) == (None, False)


CONNECT_REFUSAL = (
    r"^relative path 'rel/ns' cannot be used with a data source on Spark Connect: the server would resolve it "
    r"in its own session directory, not the client's; pass an absolute path or URI, or use "
    r"read_partitioned/write_partitioned, which resolve it on the client$"
)


@pytest.mark.parametrize("source", [LancePartitionedDataSource, PerScanPushdownDataSource])
def test_the_data_source_on_connect_refuses_any_relative_path(source, tmp_path, monkeypatch):
    """On Spark Connect the server plans the source in its own per-session directory (a
    relative save() used to create the namespace under /tmp/spark-*/userFiles-*), even
    with a local master."""
    monkeypatch.chdir(tmp_path)
    _make("rel/ns")
    connect = session_bound(source, "local[2]", True)
    with pytest.raises(InvalidInput, match=CONNECT_REFUSAL):
        connect({"path": "rel/ns"}).schema()
    with pytest.raises(InvalidInput, match=CONNECT_REFUSAL.replace("rel/ns", "rel/new")):
        connect({"path": "rel/new", "partition_by": "country"}).writer(SPARK_STRUCT, False)
    assert not (tmp_path / "rel" / "new").exists()
    assert connect({"path": str(tmp_path / "rel" / "ns")}).schema().names == ["id", "country", "v"]
    assert session_bound(source, "local[2]", False)({"path": "rel/ns"}).schema().names == ["id", "country", "v"]


def test_the_join_source_checks_both_roots_like_the_table_source(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _make("rel/ns")
    _make(tmp_path / "abs")
    absolute = str(tmp_path / "abs")

    def options(left: str, right: str) -> dict[str, str]:
        return {"left": left, "right": right, "on": '["id", "country"]', "suffixes": '["_l", "_r"]'}

    on_yarn = session_bound(LancePartitionedJoinDataSource, "yarn", False)
    with pytest.raises(InvalidInput, match=r"^relative root 'rel/ns' cannot be used with master 'yarn'"):
        on_yarn(options(absolute, "rel/ns")).schema()
    on_connect = session_bound(LancePartitionedJoinDataSource, "local[2]", True)
    with pytest.raises(InvalidInput, match=CONNECT_REFUSAL):
        on_connect(options("rel/ns", absolute)).reader(T.StructType())
    want = ["id", "country", "v_l", "v_r"]
    assert on_connect(options(absolute, absolute)).schema().names == want
    assert (
        session_bound(LancePartitionedJoinDataSource, "local[2]", False)(options("rel/ns", absolute)).schema().names
        == want
    )


def _jvm_working_directory(spark) -> str:
    """Where the driver JVM (and so the planner's Python workers) runs."""
    return str(spark.sparkContext._jvm.System.getProperty("user.dir"))


def test_a_missing_relative_path_says_where_the_source_resolved_it(spark, tmp_path):
    register_data_source(spark)
    top = f"rel-{uuid.uuid4().hex[:8]}"
    rel = f"{top}/missing"
    where = os.path.join(_jvm_working_directory(spark), rel)
    expected = f"no namespace at {rel!r} (relative to the working directory: {where!r})"
    with pytest.raises(IllegalArgumentException) as err:
        spark.read.format("lance_partitioned").load(rel)
    assert str(err.value) == f"[LANCE_NAMESPACE_NOT_FOUND] {expected}"

    df = spark.createDataFrame([(1, "US", 1)], SPARK_SCHEMA)
    with pytest.raises(IllegalArgumentException, match=r"^\[LANCE_NAMESPACE_NOT_FOUND\] no namespace at") as err:
        df.write.format("lance_partitioned").mode("append").save(rel)
    assert expected in str(err.value)
    assert not os.path.exists(os.path.join(_jvm_working_directory(spark), top))

    absolute = str(tmp_path / "missing")
    with pytest.raises(IllegalArgumentException) as err:
        spark.read.format("lance_partitioned").load(absolute)
    assert str(err.value).startswith("[LANCE_NAMESPACE_NOT_FOUND] ") and "relative to" not in str(err.value)


def test_a_relative_path_with_no_namespace_in_process(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(NamespaceNotFound) as err:
        LancePartitionedDataSource({"path": "rel/none"}).schema()
    assert str(err.value) == f"no namespace at 'rel/none' (relative to the working directory: '{tmp_path}/rel/none')"
    _make("rel/ns")
    assert LancePartitionedDataSource({"path": "rel/ns"}).schema().names == ["id", "country", "v"]
