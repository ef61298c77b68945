"""Metadata tables (partitions_table, files_table) against independent oracles.

Oracles: the rows the test wrote, grouped with pyarrow (bucket values from mmh3);
Lance's own ``count_rows`` and fragments of each table at its recorded version; the
sizes of the files in each table's ``data`` directory (``os.path.getsize``); and the
wall clock around each commit.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import struct
from dataclasses import dataclass

import lance
import mmh3
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from lance.fragment import FragmentMetadata

from partitioning import InvalidInput, PartitionedNamespace, SchemaError, TableCommit
from partitioning.plan.inspect import files_table, partitions_table
from partitioning.storage.datasets import commit_version, write_new_fragments
from partitioning.storage.paths import join_uri
from partitioning.tables.deletes import delete_rows
from partitioning.tables.write import write_table

SCHEMA = pa.schema([("country", pa.string()), ("n", pa.int64()), ("amount", pa.float64())])
BUCKETS = 3


def _rows(country: str, ns: range) -> pa.Table:
    return pa.table(
        {"country": [country] * len(ns), "n": list(ns), "amount": [float(i) / 4 for i in ns]}, schema=SCHEMA
    )


def _bucket(n: int) -> int:
    return abs(mmh3.hash(struct.pack("<q", n), 0, signed=True)) % BUCKETS


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


@dataclass(frozen=True)
class Built:
    root: str
    first_version: int
    first_window: tuple[dt.datetime, dt.datetime]
    delete_window: tuple[dt.datetime, dt.datetime]
    live: pa.Table  # every row still visible at the latest manifest version
    bucket_field: str


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """US/DE/FR under spec v1 (country), an append (2 fragments), a delete, then spec v2 (bucket[3](n))."""
    root = str(tmp_path_factory.mktemp("inspect") / "ns")
    ns = PartitionedNamespace.create(root, SCHEMA, ["country"])
    first = pa.concat_tables([_rows("US", range(0, 40)), _rows("DE", range(100, 125)), _rows("FR", range(200, 215))])
    t0 = _now()
    first_version = write_table(ns, first).manifest_version
    t1 = _now()
    second = pa.concat_tables([_rows("US", range(40, 50)), _rows("DE", range(125, 130))])
    write_table(ns, second)
    t2 = _now()
    assert delete_rows(root, "n < 5 OR n = 120").rows == 6
    t3 = _now()
    ns = PartitionedNamespace.load(root)
    ns.evolve_partition_spec([f"bucket[{BUCKETS}](n)"])
    third = _rows("JP", range(300, 330))
    write_table(ns, third)
    everything = pa.concat_tables([first, second, third])
    live = everything.filter(pc.invert(pc.or_(pc.less(everything["n"], 5), pc.equal(everything["n"], 120))))
    return Built(root, first_version, (t0, t1), (t2, t3), live, ns.current_spec.fields[0].field_id)


def _key(row: dict) -> tuple[int, object]:
    part = row["partition"]
    return (1, part["country"]) if row["spec_id"] == 1 else (2, part[_bucket_name(part)])


def _bucket_name(part: dict) -> str:
    (name,) = [k for k in part if k != "country"]
    return name


def _expected_rows(live: pa.Table) -> dict[tuple[int, object], int]:
    """Rows per partition, grouped from the written rows with pyarrow (spec v2 rows by mmh3 bucket)."""
    old = live.filter(pc.not_equal(live["country"], "JP")).group_by("country").aggregate([("n", "count")])
    counts = zip(old["country"].to_pylist(), old["n_count"].to_pylist(), strict=True)
    out: dict[tuple[int, object], int] = {(1, c): k for c, k in counts}
    new = live.filter(pc.equal(live["country"], "JP"))
    buckets = pa.table({"b": [_bucket(n) for n in new["n"].to_pylist()]}).group_by("b").aggregate([("b", "count")])
    out.update({(2, b): k for b, k in zip(buckets["b"].to_pylist(), buckets["b_count"].to_pylist(), strict=True)})
    return out


def _data_dir_bytes(uri: str) -> int:
    data = os.path.join(uri, "data")
    return sum(os.path.getsize(os.path.join(data, f)) for f in os.listdir(data))


def test_partitions_table_matches_lance_and_the_written_rows(built: Built) -> None:
    table = partitions_table(built.root)
    rows = table.to_pylist()
    assert {_key(r): r["row_count"] for r in rows} == _expected_rows(built.live)
    assert table.column("object_id").to_pylist() == sorted(table.column("object_id").to_pylist())
    for r in rows:
        uri = join_uri(built.root, r["location"])
        ds = lance.dataset(uri, version=r["read_version"])
        fragments = ds.get_fragments()
        assert r["row_count"] == ds.count_rows()
        assert r["fragment_count"] == len(fragments)
        assert r["deleted_rows"] == sum(f.metadata.physical_rows - f.count_rows() for f in fragments)
        assert r["size_bytes"] == _data_dir_bytes(uri)  # no compaction or failed write left other files
        assert r["indexes"] == []
    by_key = {_key(r): r for r in rows}
    assert (by_key[(1, "US")]["fragment_count"], by_key[(1, "US")]["deleted_rows"]) == (2, 5)
    assert (by_key[(1, "DE")]["fragment_count"], by_key[(1, "DE")]["deleted_rows"]) == (2, 1)
    assert (by_key[(1, "FR")]["fragment_count"], by_key[(1, "FR")]["deleted_rows"]) == (1, 0)
    lo, hi = built.delete_window
    assert lo - dt.timedelta(seconds=1) <= by_key[(1, "US")]["last_updated"] <= hi + dt.timedelta(seconds=1)


def test_partition_struct_spans_spec_versions(built: Built) -> None:
    table = partitions_table(built.root)
    partition = table.schema.field("partition").type
    assert [(f.name, f.type) for f in partition] == [("country", pa.string()), (built.bucket_field, pa.int32())]
    for r in table.to_pylist():
        if r["spec_id"] == 1:
            assert r["partition"][built.bucket_field] is None and r["partition"]["country"] in ("US", "DE", "FR")
        else:
            assert r["spec_id"] == 2 and r["partition"]["country"] is None
    assert sorted(set(table.column("spec_id").to_pylist())) == [1, 2]


def test_files_table_sums_to_the_partitions(built: Built) -> None:
    parts = {r["object_id"]: r for r in partitions_table(built.root).to_pylist()}
    files = files_table(built.root).to_pylist()
    assert sum(f["row_count"] for f in files) == built.live.num_rows
    for object_id, p in parts.items():
        mine = [f for f in files if f["object_id"] == object_id]
        assert len(mine) == p["fragment_count"]
        assert sum(f["row_count"] for f in mine) == p["row_count"]
        assert sum(f["deleted_rows"] for f in mine) == p["deleted_rows"]
        assert sum(f["size_bytes"] for f in mine) == p["size_bytes"]
        uri = join_uri(built.root, p["location"])
        on_disk = {os.path.join(uri, "data", name) for name in os.listdir(os.path.join(uri, "data"))}
        assert {f["path"] for f in mine} == on_disk
        for f in mine:
            assert f["data_files"] == [f["path"]]
            assert f["size_bytes"] == os.path.getsize(f["path"])
            assert f["partition"] == p["partition"] and f["spec_id"] == p["spec_id"]
            assert f["row_count"] == f["physical_rows"] - f["deleted_rows"]


def _holding(ns: PartitionedNamespace, column: str, value: object) -> set[str]:
    """The tables holding a row with ``column = value`` (read with pylance)."""
    return {p.object_id for p in ns.partitions() if value in ns.open_table(p).to_table().column(column).to_pylist()}


def test_filter_prunes_like_a_read(built: Built) -> None:
    """The tables a read keeps: by partition values (spec v2 has no country field, so its
    tables cannot be pruned by it) and then by column statistics."""
    ns = PartitionedNamespace.load(built.root)
    everything = ns.partitions()
    cases = [
        (
            "country = 'US'",
            "country",
            "US",
            lambda p: p.spec_id == 2 or p.values.get("country") == "US",
            partitions_table,
        ),
        (
            "n = 301",
            "n",
            301,
            lambda p: p.spec_id == 1 or p.values.get(built.bucket_field) == _bucket(301),
            partitions_table,
        ),
        ("country = 'FR'", "country", "FR", lambda p: p.spec_id == 2 or p.values.get("country") == "FR", files_table),
    ]
    for f, column, value, by_values, table in cases:
        got = set(table(built.root, filter=f).column("object_id").to_pylist())
        assert got == {t.object_id for t in ns.plan_scan(f)}, f
        assert _holding(ns, column, value) <= got <= {p.object_id for p in everything if by_values(p)}, f


def test_manifest_version_travel(built: Built) -> None:
    table = partitions_table(built.root, manifest_version=built.first_version)
    rows = {r["partition"]["country"]: r for r in table.to_pylist()}
    assert {c: r["row_count"] for c, r in rows.items()} == {"US": 40, "DE": 25, "FR": 15}
    assert all(r["fragment_count"] == 1 and r["deleted_rows"] == 0 and r["spec_id"] == 1 for r in rows.values())
    lo, hi = built.first_window
    for r in rows.values():
        assert lo - dt.timedelta(seconds=1) <= r["last_updated"] <= hi + dt.timedelta(seconds=1)
        assert (
            r["row_count"] == lance.dataset(join_uri(built.root, r["location"]), version=r["read_version"]).count_rows()
        )
    ns = PartitionedNamespace.load(built.root)
    same = partitions_table(ns, manifest_version=built.first_version)
    assert same.equals(table)
    assert files_table(built.root, manifest_version=built.first_version).num_rows == 3


def test_empty_namespace_gives_empty_tables_with_the_schema(tmp_path) -> None:
    root = str(tmp_path / "empty")
    PartitionedNamespace.create(root, SCHEMA, ["country", "bucket[4](n)"])
    parts = partitions_table(root)
    files = files_table(root)
    assert parts.num_rows == 0 and files.num_rows == 0
    want = pa.struct([("country", pa.string()), ("n_bucket", pa.int32())])
    assert parts.schema.field("partition").type == want and files.schema.field("partition").type == want
    assert parts.schema.names == [
        "spec_id",
        "partition",
        "object_id",
        "location",
        "read_version",
        "row_count",
        "deleted_rows",
        "fragment_count",
        "size_bytes",
        "last_updated",
        "indexes",
    ]
    assert files.schema.names[:5] == ["object_id", "spec_id", "partition", "read_version", "fragment_id"]


@pytest.mark.parametrize(
    ("kwargs", "error", "words"),
    [
        ({"filter": "country = = 'US'"}, InvalidInput, "cannot parse filter"),
        ({"filter": "nosuch = 1"}, SchemaError, "unknown column 'nosuch'"),
        ({"manifest_version": 999}, InvalidInput, "has no __manifest version 999"),
        ({"manifest_version": 0}, InvalidInput, "positive integer"),
    ],
)
def test_bad_input_is_one_line(built: Built, kwargs, error, words) -> None:
    for fn in (partitions_table, files_table):
        with pytest.raises(error) as info:
            fn(built.root, **kwargs)
        assert words in str(info.value) and "\n" not in str(info.value)


def test_index_names_and_unrecorded_file_sizes(tmp_path) -> None:
    """An index built by another Lance client and recorded in the manifest is listed; data files
    whose size the manifest does not record (old Lance writers) are measured on disk."""
    root = str(tmp_path / "ns")
    ns = PartitionedNamespace.create(root, SCHEMA, ["country"])
    location = ns.new_table_location(1, {"country": "US"})
    uri = join_uri(root, location)
    fragments = [
        f
        for chunk in (range(0, 30), range(30, 50))
        for f in write_new_fragments(_rows("US", chunk), uri, ns.namespace_schema)
    ]
    stripped = []
    for f in fragments:
        meta = f.to_json()
        for data_file in meta["files"]:
            data_file.pop("file_size_bytes", None)
        stripped.append(FragmentMetadata.from_json(json.dumps(meta)))
    version = commit_version(uri, ns.namespace_schema, stripped, None)
    ds = lance.dataset(uri, version=version)
    assert all(d.file_size_bytes is None for f in ds.get_fragments() for d in f.metadata.files)
    ds.create_scalar_index("n", "BTREE", name="n_idx")
    ns.commit_tables([TableCommit(1, {"country": "US"}, location, lance.dataset(uri).version)])
    (row,) = partitions_table(root).to_pylist()
    assert row["indexes"] == ["n_idx"]
    assert (row["row_count"], row["fragment_count"]) == (50, 2)
    assert row["size_bytes"] == _data_dir_bytes(uri) > 0
    files = files_table(root).to_pylist()
    assert sorted(f["size_bytes"] for f in files) == sorted(os.path.getsize(f["path"]) for f in files)


def test_spark_tables_read_filters_in_the_session_dialect(spark, built: Built) -> None:
    from pipelines.maintenance.inspect import files_table as spark_files
    from pipelines.maintenance.inspect import partitions_table as spark_partitions

    # Spark reads "US" as a string literal; DataFusion (the Spark-free default) as a column,
    # a comparison of two columns that prunes nothing
    everything = partitions_table(built.root).num_rows
    assert partitions_table(built.root, filter='country = "US"').num_rows == everything
    df = spark_partitions(spark, built.root, 'country = "US"')
    assert df.schema["partition"].dataType.fieldNames() == ["country", built.bucket_field]
    got = {(r["spec_id"], r["partition"]["country"], r["partition"][built.bucket_field]): r for r in df.collect()}
    expected = _expected_rows(built.live)
    by_values = {
        (s, v if s == 1 else None, v if s == 2 else None): n for (s, v), n in expected.items() if s == 2 or v == "US"
    }
    ns = PartitionedNamespace.load(built.root)
    assert {r["object_id"] for r in got.values()} == {t.object_id for t in ns.plan_scan("country = 'US'")}
    assert {k: r["row_count"] for k, r in got.items()} == {k: n for k, n in by_values.items() if k in got}
    assert len(got) < everything
    assert all(r["last_updated"] is not None and r["indexes"] == [] for r in got.values())
    files = spark_files(spark, built.root)
    assert files.groupBy().sum("row_count").collect()[0][0] == built.live.num_rows
    empty = spark_partitions(spark, built.root, "country = 'XX' AND n = 1", manifest_version=built.first_version)
    assert empty.count() == 0 and empty.columns == df.columns
