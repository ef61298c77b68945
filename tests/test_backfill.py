"""backfill_columns: columns computed per fragment by Spark tasks, stored beside the old files.

Oracles: pandas/numpy on the source rows read by pylance before the backfill, Spark's own
``selectExpr`` for SQL expressions, sha256 of every data file on disk and Lance's own
fragment metadata for "nothing rewritten", pylance for what another Lance client sees.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import sys
import time
from decimal import Decimal
from pathlib import Path

import lance
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pyspark import cloudpickle
from pyspark.sql import functions as F

from partitioning import PartitionedNamespace
from partitioning.errors import ConcurrentModification, InvalidInput, PartitioningError, SchemaError
from partitioning.tables.deletes import delete_rows
from partitioning.tables.vacuum import vacuum
from partitioning.tables.write import write_table
from pipelines.backfill.api import backfill_columns
from pipelines.read.dataframe import read_partitioned

# the functions below travel to Spark's workers by value (a user's would be importable there)
cloudpickle.register_pickle_by_value(sys.modules[__name__])

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64()),
        pa.field("country", pa.string()),
        pa.field("amount", pa.int64()),
        pa.field("text", pa.string()),
    ]
)


def rows(start: int, n: int) -> pa.Table:
    ids = np.arange(start, start + n, dtype=np.int64)
    return pa.table(
        {
            "id": ids,
            "country": pa.array(np.array(["US", "DE", "FR"])[ids % 3]),
            "amount": (ids * 7) % 1000,
            "text": [None if i % 11 == 0 else f"row {i}" for i in ids.tolist()],
        },
        schema=SCHEMA,
    )


def make(root: str, fragments: int = 3, n: int = 300) -> PartitionedNamespace:
    """Three partitions, ``fragments`` fragments each, some rows deleted (deletion vectors)."""
    ns = PartitionedNamespace.create(root, SCHEMA, ["country"])
    for f in range(fragments):
        write_table(ns, rows(f * n, n))
    delete_rows(root, "id % 17 = 5")
    return PartitionedNamespace.load(root)


def lance_rows(root: str) -> pd.DataFrame:
    """Every row as pylance reads the partition datasets at the recorded versions."""
    ns = PartitionedNamespace.load(root)
    parts = [lance.dataset(t.uri, version=t.read_version).to_table().to_pandas() for t in ns.partitions()]
    return pd.concat(parts).sort_values("id").reset_index(drop=True)


def file_digests(root: str) -> dict[str, str]:
    """sha256 of every Lance data file of the partition datasets, read from disk."""
    out = {}
    for path in Path(root).rglob("*.lance"):
        if "__manifest" not in path.parts:
            out[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def fragment_files(root: str) -> dict[tuple[str, int], list[tuple[str, int]]]:
    """(table, fragment id) -> its data files (path, size) in Lance's fragment metadata."""
    ns = PartitionedNamespace.load(root)
    out = {}
    for t in ns.partitions():
        for f in lance.dataset(t.uri, version=t.read_version).get_fragments():
            out[(t.object_id, f.fragment_id)] = [(d.path, d.file_size_bytes) for d in f.metadata.files]
    return out


def first_call(marker: Path) -> bool:
    """True for the first caller in any process (the one whose exclusive create of ``marker`` works)."""
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        return False
    return True


def embed(batch: pd.DataFrame) -> pd.DataFrame:
    text = batch["text"].fillna("")
    return pd.DataFrame(
        {
            "amount_x2": batch["amount"] * 2,
            "label": np.where(batch["amount"] > 500, "big", "small"),
            "vec": [
                np.array([len(t), a, a / 2, 1.0], dtype=np.float32) for t, a in zip(text, batch["amount"], strict=True)
            ],
        }
    )


OUT = {"amount_x2": "int64", "label": "string", "vec": pa.list_(pa.float32(), 4)}


def test_python_function_adds_columns_without_rewriting_a_file(spark, tmp_path):
    root = str(tmp_path / "ns")
    ns = make(root)
    before = lance_rows(root)
    digests, files = file_digests(root), fragment_files(root)
    version = ns.manifest_version

    result = backfill_columns(spark, root, embed, read_columns=["amount", "text"], output_schema=OUT, batch_rows=64)

    assert result.columns_added == ("amount_x2", "label", "vec") and result.rows_backfilled == len(before)
    after = lance_rows(root)
    expected = embed(before)
    assert after["id"].tolist() == before["id"].tolist()
    assert after["amount_x2"].tolist() == expected["amount_x2"].tolist()
    assert after["label"].tolist() == expected["label"].tolist()
    np.testing.assert_array_equal(np.stack(after["vec"]), np.stack(expected["vec"]))
    # every earlier data file is still there, byte for byte, and still each fragment's
    now = file_digests(root)
    assert all(now[p] == d for p, d in digests.items())
    assert len(set(now) - set(digests)) == len(files)  # one new file per fragment
    for key, old in fragment_files(root).items():
        assert old[: len(files[key])] == files[key] and len(old) == len(files[key]) + 1
    # one visible commit: the versions in between only stage the schema
    ops = PartitionedNamespace.load(root).history().to_pylist()
    new = [o for o in ops if o["version"] > version]
    assert [o["operation"] for o in new] == ["BACKFILL"] * len(new)
    assert [dict(o["parameters"]).get("step") for o in sorted(new, key=lambda o: o["version"])] == [
        "stage",
        None,
        "finish",
    ]
    # Spark reads them, with the vector as array<float>
    df = read_partitioned(spark, root).where("country = 'DE'").select("id", "amount_x2").toPandas()
    assert df.sort_values("id")["amount_x2"].tolist() == expected[before["country"] == "DE"]["amount_x2"].tolist()


def test_arrow_function_and_every_output_type(spark, tmp_path):
    root = str(tmp_path / "ns")
    make(root, fragments=2, n=120)
    before = lance_rows(root)
    out = pa.schema(
        [
            pa.field("i8", pa.int8()),
            pa.field("i32", pa.int32()),
            pa.field("f32", pa.float32()),
            pa.field("f64", pa.float64()),
            pa.field("flag", pa.bool_()),
            pa.field("s", pa.string()),
            pa.field("raw", pa.binary()),
            pa.field("day", pa.date32()),
            pa.field("at", pa.timestamp("us", tz="UTC")),
            pa.field("money", pa.decimal128(12, 2)),
            pa.field("v16", pa.list_(pa.float16(), 2)),
            pa.field("v64", pa.list_(pa.float64(), 3)),
            pa.field("tags", pa.list_(pa.string())),
        ]
    )

    def compute(batch: pa.RecordBatch) -> pa.RecordBatch:
        a = batch.column("amount").to_numpy()
        i = batch.column("id").to_numpy()
        return pa.record_batch(
            {
                "i8": pa.array((a % 100).astype(np.int8)),
                "i32": pa.array(a.astype(np.int32)),
                "f32": pa.array(a.astype(np.float32) / 3),
                "f64": pa.array(a / 7.0),
                "flag": pa.array(a % 2 == 0),
                "s": pa.array([f"#{x}" for x in i]),
                "raw": pa.array([bytes([x % 256]) * 3 for x in i], pa.binary()),
                "day": pa.array([dt.date(2025, 1, 1) + dt.timedelta(days=int(x)) for x in i], pa.date32()),
                "at": pa.array([dt.datetime(2025, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=int(x)) for x in i]),
                "money": pa.array([Decimal(int(x)) / 100 for x in a], pa.decimal128(12, 2)),
                "v16": pa.FixedSizeListArray.from_arrays(pa.array(np.repeat(a, 2).astype(np.float16)), 2),
                "v64": pa.array([[x, -x, 0.5] for x in a.tolist()], pa.list_(pa.float64(), 3)),
                "tags": pa.array([["a"] * int(x % 3) for x in i]),
            }
        )

    result = backfill_columns(spark, root, compute, read_columns=["id", "amount"], output_schema=out)
    assert result.fragments_backfilled == 6
    after = lance_rows(root)
    expected = compute(pa.RecordBatch.from_pandas(before[["id", "amount"]], preserve_index=False)).to_pandas()
    for name in out.names:
        got, want = after[name].tolist(), expected[name].tolist()
        if name.startswith("v"):
            np.testing.assert_array_equal(np.stack(got), np.stack(want))
        elif name == "tags":
            assert [list(x) for x in got] == [list(x) for x in want]
        else:
            assert got == want, name


def test_sql_expressions_match_sparks_own_answer(spark, tmp_path):
    root = str(tmp_path / "ns")
    text_id = make(root).namespace_schema.id_of("text")
    before = lance_rows(root)
    exprs = {"amount_usd": "amount * 1.1", "shout": "upper(coalesce(text, 'none'))", "text": "concat(text, '!')"}

    result = backfill_columns(spark, root, exprs, filter="country IN ('US', 'FR')")

    assert result.columns_added == ("amount_usd", "shout") and result.columns_replaced == ("text",)
    oracle = (
        spark.createDataFrame(before[["id", "country", "amount", "text"]])
        .selectExpr("id", "country", *[f"{e} AS {n}" for n, e in exprs.items()], "text AS old_text")
        .toPandas()
        .sort_values("id")
        .reset_index(drop=True)
    )
    after = read_partitioned(spark, root).toPandas().sort_values("id").reset_index(drop=True)
    chosen = oracle["country"].isin(["US", "FR"])
    assert after["amount_usd"][chosen].tolist() == oracle["amount_usd"][chosen].tolist()
    assert after["shout"][chosen].tolist() == oracle["shout"][chosen].tolist()
    assert after["text"][chosen].tolist() == oracle["text"][chosen].tolist()
    # the partition the filter left out reads NULL in new columns and keeps its old values
    assert after["amount_usd"][~chosen].isna().all() and after["shout"][~chosen].isna().all()
    assert after["text"][~chosen].tolist() == oracle["old_text"][~chosen].tolist()
    # the replaced column kept its field id
    assert PartitionedNamespace.load(root).namespace_schema.id_of("text") == text_id


def test_replacing_keeps_the_field_id_and_only_the_chosen_partitions_change(spark, tmp_path):
    root = str(tmp_path / "ns")
    ns = make(root)
    text_id = ns.namespace_schema.id_of("text")
    before = lance_rows(root)
    version = ns.manifest_version

    result = backfill_columns(
        spark,
        root,
        lambda b: pd.DataFrame({"amount": b["amount"] + 1}),
        read_columns=["amount"],
        output_schema={"amount": "int32"},
        filter="country = 'DE'",
    )

    ns = PartitionedNamespace.load(root)
    assert ns.manifest_version == version + 1  # replacing only: exactly one __manifest commit
    assert result.columns_replaced == ("amount",) and ns.namespace_schema.id_of("text") == text_id
    assert ns.schema.field("amount").type == pa.int64()
    after = lance_rows(root)
    de = before["country"] == "DE"
    assert after["amount"][de].tolist() == (before["amount"][de] + 1).tolist()
    assert after["amount"][~de].tolist() == before["amount"][~de].tolist()


@pytest.mark.parametrize(
    ("output", "message"),
    [
        ({"country": "string"}, "source of partition field"),
        ({"amount": pa.list_(pa.int64())}, "cannot be cast to the column's type int64"),
        ({"Amount": "int64"}, "differs only in case from column 'amount'"),
        ({"x": "no_such_type"}, "unknown type 'no_such_type'"),
    ],
)
def test_bad_output_schemas_are_one_line(spark, tmp_path, output, message):
    root = str(tmp_path / "ns")
    ns = make(root, fragments=1, n=30)
    with pytest.raises(SchemaError, match=message):
        backfill_columns(spark, root, lambda b: b, read_columns=["amount"], output_schema=output)
    assert PartitionedNamespace.load(root).manifest_version == ns.manifest_version


def _fails_on_de(batch: pd.DataFrame) -> pd.DataFrame:
    if (batch["amount"] == 7).any():
        raise ZeroDivisionError("model exploded")
    return pd.DataFrame({"y": batch["amount"]})


@pytest.mark.parametrize(
    ("fn", "message"),
    [
        (lambda b: pd.DataFrame({"y": b["amount"]}).head(1), r"returned 1 rows for \d+ input rows"),
        (lambda b: pd.DataFrame({"z": b["amount"]}), r"returned columns \[z\]; output_schema has \[y\]"),
        (lambda b: pd.DataFrame({"y": b["text"]}), r"column 'y' is string, which cannot be cast to int64"),
        (
            _fails_on_de,
            r"backfill function _fails_on_de failed on partition table .*\(country=DE\), "
            r"fragment \d+: ZeroDivisionError: model exploded",
        ),
    ],
)
def test_a_failing_function_is_one_line_and_commits_nothing(spark, tmp_path, fn, message):
    root = str(tmp_path / "ns")
    ns = make(root, fragments=2, n=30)
    before, digests = lance_rows(root), file_digests(root)
    with pytest.raises(PartitioningError, match=message) as info:
        backfill_columns(spark, root, fn, read_columns=["amount", "text"], output_schema={"y": "int64"})
    assert "\n" not in str(info.value) and "Traceback" not in str(info.value)
    assert "partition table" in str(info.value)
    ns2 = PartitionedNamespace.load(root)
    assert ns2.manifest_version == ns.manifest_version and ns2.schema.names == SCHEMA.names
    assert lance_rows(root).equals(before) and set(digests) <= set(file_digests(root))


def test_bad_sql_is_one_line(spark, tmp_path):
    root = str(tmp_path / "ns")
    make(root, fragments=1, n=30)
    with pytest.raises(InvalidInput, match=r"backfill expression y = 'nope \+ 1'.*nope"):
        backfill_columns(spark, root, {"y": "nope + 1"})


def test_a_retry_with_the_same_write_id_is_a_no_op(spark, tmp_path):
    root = str(tmp_path / "ns")
    make(root, fragments=1, n=60)
    first = backfill_columns(spark, root, {"y": "amount + 1"}, write_id="bf-1")
    version, digests = PartitionedNamespace.load(root).manifest_version, file_digests(root)
    again = backfill_columns(spark, root, {"y": "amount + 1"}, write_id="bf-1")
    assert first.skipped is None and again.skipped is not None and "bf-1" in again.skipped
    assert PartitionedNamespace.load(root).manifest_version == version and file_digests(root) == digests


def test_a_task_killed_after_writing_files_leaves_nothing_visible(spark, tmp_path):
    root = str(tmp_path / "ns")
    ns = make(root, fragments=2, n=60)
    before, digests = lance_rows(root), file_digests(root)
    marker = tmp_path / "written"

    def dies_late(batch: pd.DataFrame) -> pd.DataFrame:
        if marker.exists():
            os._exit(3)  # the Python worker dies after another fragment's file was written
        marker.touch()
        return pd.DataFrame({"y": batch["amount"]})

    with pytest.raises(PartitioningError):
        backfill_columns(
            spark, root, dies_late, read_columns=["amount"], output_schema={"y": "int64"}, rows_per_task=10**6
        )
    assert marker.exists()
    ns2 = PartitionedNamespace.load(root)
    assert ns2.manifest_version == ns.manifest_version and "y" not in ns2.schema.names
    assert lance_rows(root).equals(before)
    # the files the dead backfill wrote are orphans: vacuum removes them, and only them
    assert set(file_digests(root)) > set(digests)
    vacuum(root, dt.timedelta(0), allow_short_retention=True)
    assert file_digests(root) == digests
    done = backfill_columns(spark, root, {"y": "amount"})
    assert done.rows_backfilled == len(before) and lance_rows(root)["y"].tolist() == before["amount"].tolist()


def test_rows_appended_meanwhile_are_kept_and_reported(spark, tmp_path):
    root = str(tmp_path / "ns")
    make(root, fragments=2, n=60)
    before = lance_rows(root)
    marker = tmp_path / "appended"

    def appends_once(batch: pd.DataFrame) -> pd.DataFrame:
        if first_call(marker):
            write_table(PartitionedNamespace.load(root), rows(10_000, 30))
        return pd.DataFrame({"y": batch["amount"] * 3})

    result = backfill_columns(spark, root, appends_once, read_columns=["amount"], output_schema={"y": "int64"})
    after = lance_rows(root)
    assert result.rows_left_null == 30 and len(after) == len(before) + 30
    old = after["id"] < 10_000
    assert after["y"][old].tolist() == (before["amount"] * 3).tolist()
    assert after["y"][~old].isna().all()


def test_a_compaction_meanwhile_recomputes_only_the_compacted_partitions(spark, tmp_path):
    """Issue 48: a backfill beside compaction commits; the partitions compacted while it ran
    are computed again at their new versions (the others are not), and every row gets its
    value (pylance reads it back)."""
    from partitioning.tables.compaction import compact_local

    root = str(tmp_path / "ns")
    make(root, fragments=3, n=60)
    before = lance_rows(root)
    marker, calls = tmp_path / "compacted", tmp_path / "calls"
    calls.mkdir()

    def compacts_one_partition_once(batch: pd.DataFrame) -> pd.DataFrame:
        (calls / f"{os.getpid()}-{time.monotonic_ns()}-{batch['country'].iloc[0]}").touch()
        if first_call(marker):
            compact_local(PartitionedNamespace.load(root), filter="country = 'US'")
        return pd.DataFrame({"y": batch["amount"]})

    result = backfill_columns(
        spark, root, compacts_one_partition_once, read_columns=["amount", "country"], output_schema={"y": "int64"}
    )
    after = lance_rows(root)
    assert after.drop(columns=["y"]).equals(before) and after["y"].tolist() == before["amount"].tolist()
    assert "y" in PartitionedNamespace.load(root).schema.names and result.rows_left_null == 0
    countries = sorted(p.name.rsplit("-", 1)[1] for p in calls.iterdir())
    # 3 fragments per partition read once; the compacted US partition's one new fragment read again
    assert countries.count("DE") == 3 and countries.count("FR") == 3 and countries.count("US") == 4, countries


def test_a_partition_rewritten_at_every_rerun_fails_in_one_clean_line_and_loses_nothing(spark, tmp_path):
    from partitioning.tables.compaction import compact_local

    root = str(tmp_path / "ns")
    ns = make(root, fragments=3, n=60)
    before = lance_rows(root)

    def compacts_every_time(batch: pd.DataFrame) -> pd.DataFrame:
        local = PartitionedNamespace.load(root)
        write_table(local, rows(50_000 + int(time.monotonic_ns() % 10**6) * 10, 3).filter(pc.field("country") == "DE"))
        compact_local(PartitionedNamespace.load(root), filter="country = 'DE'")
        return pd.DataFrame({"y": batch["amount"]})

    with pytest.raises(ConcurrentModification, match=r"rewritten .* 5 time\(s\)\); nothing was committed") as err:
        backfill_columns(
            spark,
            root,
            compacts_every_time,
            read_columns=["amount"],
            output_schema={"y": "int64"},
            filter="country = 'DE'",
        )
    assert "preempted" not in str(err.value) and "\n" not in str(err.value)
    ns2 = PartitionedNamespace.load(root)
    assert ns2.manifest_version > ns.manifest_version and "y" not in ns2.schema.names
    assert set(before["id"]) <= set(lance_rows(root)["id"])


def test_indexes_survive_unless_they_index_a_replaced_column(spark, tmp_path):
    from pipelines.search.indexes import create_scalar_index, create_vector_index

    root = str(tmp_path / "ns")
    schema = pa.schema(
        [pa.field("id", pa.int64()), pa.field("c", pa.string()), pa.field("v", pa.list_(pa.float32(), 8))]
    )
    ns = PartitionedNamespace.create(root, schema, ["c"])
    rng = np.random.default_rng(7)
    n = 600
    vectors = pa.FixedSizeListArray.from_arrays(pa.array(rng.standard_normal(n * 8).astype(np.float32)), 8)
    write_table(ns, pa.table({"id": np.arange(n), "c": ["a", "b"] * (n // 2), "v": vectors}, schema=schema))
    create_vector_index(root, "v", index_type="IVF_FLAT", num_partitions=2, spark=spark)
    create_scalar_index(root, "id", spark=spark)

    def negate(batch: pa.RecordBatch) -> pa.RecordBatch:
        flat = batch.column("v").flatten().to_numpy()
        return pa.record_batch({"v": pa.FixedSizeListArray.from_arrays(pa.array(-flat), 8), "w": batch.column("id")})

    result = backfill_columns(
        spark, root, negate, read_columns=["id", "v"], output_schema={"v": pa.list_(pa.float32(), 8), "w": "int64"}
    )

    assert sorted(name for _, name in result.indexes_dropped) == ["v_idx", "v_idx"]
    for t in PartitionedNamespace.load(root).partitions():
        ds = lance.dataset(t.uri, version=t.read_version)
        names = {i.name for i in ds.describe_indices()}
        assert "v_idx" not in names and "id_idx" in names
        table = ds.to_table()
        want = -np.stack(vectors.to_numpy(zero_copy_only=False))[table.column("id").to_numpy()]
        np.testing.assert_array_equal(np.stack(table.column("v").to_numpy(zero_copy_only=False)), want)
        q = want[0]
        got = ds.to_table(nearest={"column": "v", "q": q, "k": 1})
        assert got.column("id")[0].as_py() == table.column("id")[0].as_py()
        assert ds.to_table(filter="id < 10", columns=["id", "w"]).column("w").to_pylist() == [
            i for i in range(10) if i in set(table.column("id").to_pylist())
        ]


def test_sql_backfill_runs_in_tasks_with_many_fragments_per_task(spark, tmp_path):
    root = str(tmp_path / "ns")
    make(root, fragments=4, n=50)
    before = lance_rows(root)
    result = backfill_columns(spark, root, {"k": "id % 5", "t2": "length(text)"}, batch_rows=7, rows_per_task=120)
    after = lance_rows(root)
    assert result.fragments_backfilled == 12
    assert after["k"].tolist() == (before["id"] % 5).tolist()
    want = spark.createDataFrame(before[["id", "text"]]).select("id", F.length("text").alias("t2")).toPandas()
    assert after["t2"].astype("Int64").tolist() == want.sort_values("id")["t2"].astype("Int64").tolist()


class Crash(RuntimeError):
    """The driver 'dies' right before its ``__manifest`` commit."""


def test_a_driver_dying_before_its_manifest_commit_leaves_nothing_visible(spark, tmp_path, monkeypatch):
    root = str(tmp_path / "ns")
    ns = make(root, fragments=2, n=60)
    before = lance_rows(root)

    def crash(self, *args, **kwargs):
        raise Crash("killed before the __manifest commit")

    monkeypatch.setattr(PartitionedNamespace, "commit_once", crash)
    with pytest.raises(Crash):
        backfill_columns(spark, root, {"y": "amount * 2", "text": "upper(text)"})
    monkeypatch.undo()
    # every dataset got its Merge version, the schema was staged: none of it is visible
    ns2 = PartitionedNamespace.load(root)
    assert "y" not in ns2.schema.names and ns2.namespace_schema.to_json() == ns.namespace_schema.to_json()
    assert lance_rows(root).equals(before)
    assert all(lance.dataset(t.uri).version > t.read_version for t in ns2.partitions())
    done = backfill_columns(spark, root, {"y": "amount * 2", "text": "upper(text)"})
    after = lance_rows(root)
    assert done.rows_backfilled == len(before) and after["y"].tolist() == (before["amount"] * 2).tolist()
    assert after["text"].tolist() == before["text"].str.upper().tolist()


def test_rows_deleted_meanwhile_stay_deleted(spark, tmp_path):
    root = str(tmp_path / "ns")
    make(root, fragments=2, n=60)
    before = lance_rows(root)
    marker = tmp_path / "deleted"

    def deletes_once(batch: pd.DataFrame) -> pd.DataFrame:
        if first_call(marker):
            delete_rows(root, "id % 10 = 3")
        return pd.DataFrame({"y": batch["amount"] + 5})

    result = backfill_columns(spark, root, deletes_once, read_columns=["amount"], output_schema={"y": "int64"})
    after = lance_rows(root)
    kept = before[before["id"] % 10 != 3].reset_index(drop=True)
    assert result.rows_left_null == 0 and after["id"].tolist() == kept["id"].tolist()
    assert after["y"].tolist() == (kept["amount"] + 5).tolist()


def test_struct_outputs_are_added_and_replaced(spark, tmp_path):
    root = str(tmp_path / "ns")
    make(root, fragments=1, n=60)
    before = lance_rows(root)
    kind = pa.struct([("half", pa.int64()), ("name", pa.string())])

    def pair(batch: pa.RecordBatch, bump: int = 0) -> pa.RecordBatch:
        a = batch.column("amount").to_pylist()
        return pa.record_batch({"s": pa.array([{"half": x // 2 + bump, "name": f"n{x}"} for x in a], kind)})

    backfill_columns(spark, root, pair, read_columns=["amount"], output_schema={"s": kind})
    backfill_columns(
        spark, root, lambda b: pair(b, 1), read_columns=["amount"], output_schema={"s": kind}, fn_input="arrow"
    )
    after = lance_rows(root)
    assert after["s"].tolist() == [{"half": x // 2 + 1, "name": f"n{x}"} for x in before["amount"]]


def test_a_lost_race_while_staging_the_schema_is_retried(spark, tmp_path, monkeypatch):
    import partitioning.tables.backfill.commit as commit_module

    root = str(tmp_path / "ns")
    make(root, fragments=1, n=60)
    before = lance_rows(root)
    real, calls = commit_module.stage_properties, []

    def loses_once(*args, **kwargs):
        calls.append(args[2])
        if len(calls) == 1:
            raise ConcurrentModification("another properties commit won")
        return real(*args, **kwargs)

    monkeypatch.setattr(commit_module, "stage_properties", loses_once)
    result = backfill_columns(spark, root, {"y": "amount + 7"})
    assert result.attempts == 2 and lance_rows(root)["y"].tolist() == (before["amount"] + 7).tolist()
    assert PartitionedNamespace.load(root).schema.names == [*SCHEMA.names, "y"]
