"""Schema evolution of a partitioned namespace: add, rename, drop and widen columns.

Schema changes only touch ``__manifest`` (the ``schema`` property); partition datasets
are brought up to date by the next write into them, and reads reconcile old partitions
by field id (missing columns read NULL, narrower types are cast, renamed columns are
found by id, dropped columns are ignored, a re-added name is a NEW column).
"""

from __future__ import annotations

import decimal
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pytest
from chispa import assert_df_equality
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from partitioning import ConcurrentModification, PartitionedNamespace, PartitionTable, SchemaError, SpecError
from partitioning.tables.fragments import FragmentWriter, add_partition_columns
from partitioning.tables.write import commit_write, conform_table, write_table
from pipelines.read.dataframe import read_partitioned
from pipelines.write.dataframe import write_partitioned

pytestmark = pytest.mark.slow

Dec = decimal.Decimal


# -- helpers ------------------------------------------------------------------------------------------


def make_ns(
    tmp_path: Path, schema: pa.Schema, spec: Sequence[str], rows: Sequence[dict[str, Any]]
) -> PartitionedNamespace:
    root = str(tmp_path / "ns")
    ns = PartitionedNamespace.create(root, schema, list(spec))
    write_table(ns, pa.Table.from_pylist(list(rows), schema=schema))
    return ns


def expected_df(spark: SparkSession, fields: Sequence[tuple[str, T.DataType]], rows: Sequence[tuple]) -> DataFrame:
    schema = T.StructType([T.StructField(name, t, True) for name, t in fields])
    return spark.createDataFrame(list(rows), schema)


def by_value(ns: PartitionedNamespace, field_id: str) -> dict[Any, PartitionTable]:
    """Partition tables of the namespace keyed by the value of one partition field."""
    return {p.values[field_id]: p for p in ns.partitions()}


def dataset_of(ns: PartitionedNamespace, location: str) -> lance.LanceDataset:
    """The latest version of a partition dataset, opened directly with Lance."""
    return lance.dataset(f"{ns.root}/{location}")


def snapshot(ns: PartitionedNamespace) -> dict[str, tuple[str, int | None, int]]:
    """object_id -> (location, manifest read_version, latest dataset version)."""
    return {p.object_id: (p.location, p.read_version, dataset_of(ns, p.location).version) for p in ns.partitions()}


# -- 1. add_columns -----------------------------------------------------------------------------------

ADD_SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("c", pa.string()), pa.field("v", pa.int32())])


def test_add_columns_assigns_fresh_ids_and_old_partitions_read_null(spark: SparkSession, tmp_path: Path) -> None:
    """A new column gets id == previous next_field_id; old rows read NULL; old and new partitions accept it."""
    ns = make_ns(
        tmp_path,
        ADD_SCHEMA,
        ["c"],
        [{"id": 1, "c": "x", "v": 10}, {"id": 2, "c": "x", "v": 20}, {"id": 3, "c": "y", "v": 30}],
    )
    assert ns.namespace_schema.next_field_id == 3
    old = by_value(ns, "c")

    result = ns.add_columns({"e": "string"})
    assert result.id_of("e") == 3
    assert result.next_field_id == 4
    assert ns.namespace_schema.id_of("e") == 3
    assert ns.namespace_schema.next_field_id == 4
    assert ns.schema.names == ["id", "c", "v", "e"]
    assert ns.schema.field("e").type == pa.string()
    assert ns.schema.field("e").metadata[b"lance:field_id"] == b"3"
    assert [ns.namespace_schema.id_of(n) for n in ["id", "c", "v"]] == [0, 1, 2]

    # two more columns at once, as a list of fields: consecutive ids
    ns.add_columns([pa.field("f", pa.float64()), pa.field("g", pa.int64())])
    assert [ns.namespace_schema.id_of(n) for n in ["f", "g"]] == [4, 5]
    assert ns.namespace_schema.next_field_id == 6

    fields = [
        ("id", T.LongType()),
        ("c", T.StringType()),
        ("v", T.IntegerType()),
        ("e", T.StringType()),
        ("f", T.DoubleType()),
        ("g", T.LongType()),
    ]
    before = [(1, "x", 10, None, None, None), (2, "x", 20, None, None, None), (3, "y", 30, None, None, None)]
    assert_df_equality(read_partitioned(spark, ns.root), expected_df(spark, fields, before), ignore_row_order=True)

    # a write into the OLD partition x and a NEW partition z
    write_table(
        ns,
        pa.table(
            {
                "id": pa.array([4, 5], pa.int64()),
                "c": ["x", "z"],
                "v": pa.array([40, None], pa.int32()),
                "e": ["new-x", "new-z"],
                "f": [0.5, None],
                "g": pa.array([None, 7], pa.int64()),
            }
        ),
    )
    after = by_value(ns, "c")
    assert sorted(after) == ["x", "y", "z"]
    assert after["x"].object_id == old["x"].object_id
    assert after["x"].read_version > old["x"].read_version
    assert after["y"].read_version == old["y"].read_version

    rows = [
        (1, "x", 10, None, None, None),
        (2, "x", 20, None, None, None),
        (3, "y", 30, None, None, None),
        (4, "x", 40, "new-x", 0.5, None),
        (5, "z", None, "new-z", None, 7),
    ]
    assert_df_equality(read_partitioned(spark, ns.root), expected_df(spark, fields, rows), ignore_row_order=True)


def test_add_columns_rejects_existing_names_and_non_nullable_fields(tmp_path: Path) -> None:
    """Adding an existing name, or a non-nullable column, is a SchemaError naming the column."""
    ns = make_ns(tmp_path, ADD_SCHEMA, ["c"], [{"id": 1, "c": "x", "v": 10}])
    before_json = ns.namespace_schema.to_json()

    with pytest.raises(SchemaError, match=r"column 'v' already exists") as info:
        ns.add_columns({"v": "string"})
    assert isinstance(info.value, ValueError)

    with pytest.raises(SchemaError, match=r"new column 'req' must be nullable") as info:
        ns.add_columns(pa.field("req", pa.int32(), nullable=False))
    assert isinstance(info.value, ValueError)

    with pytest.raises(SchemaError, match=r"'v'"):
        ns.add_columns(pa.schema([pa.field("ok", pa.int32()), pa.field("v", pa.int64())]))

    assert PartitionedNamespace.load(ns.root).namespace_schema.to_json() == before_json
    assert ns.namespace_schema.next_field_id == 3


# -- 2. rename_column ---------------------------------------------------------------------------------

RENAME_SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("b", pa.string()), pa.field("v", pa.int32())])
RENAME_ROWS = [{"id": 1, "b": "x", "v": 1}, {"id": 2, "b": "y", "v": 2}]


def test_rename_keeps_the_id_and_the_partition_spec_still_works(spark: SparkSession, tmp_path: Path) -> None:
    """After b -> bb: writes into old and new partitions, a bb filter reads and prunes correctly."""
    ns = make_ns(tmp_path, RENAME_SCHEMA, ["b"], RENAME_ROWS)
    old = by_value(ns, "b")
    assert ns.namespace_schema.id_of("b") == 1

    result = ns.rename_column("b", "bb")
    assert result.id_of("bb") == 1
    assert ns.schema.names == ["id", "bb", "v"]
    assert ns.namespace_schema.next_field_id == 3
    (field,) = ns.current_spec.fields
    assert tuple(field.source_ids) == (1,)

    write_table(ns, pa.table({"id": pa.array([3, 4], pa.int64()), "bb": ["x", "z"], "v": pa.array([3, 4], pa.int32())}))
    after = by_value(ns, "b")
    assert sorted(after) == ["x", "y", "z"]
    assert after["x"].object_id == old["x"].object_id
    assert after["x"].read_version > old["x"].read_version

    fields = [("id", T.LongType()), ("bb", T.StringType()), ("v", T.IntegerType())]
    assert_df_equality(
        read_partitioned(spark, ns.root, filter="bb = 'x'"),
        expected_df(spark, fields, [(1, "x", 1), (3, "x", 3)]),
        ignore_row_order=True,
    )

    plan = ns.plan_scan("bb = 'x'")
    assert len(list(plan)) == 1
    assert [t.object_id for t in plan] == [old["x"].object_id]
    plan_y = ns.plan_scan("bb = 'y'")
    assert [t.object_id for t in plan_y] == [old["y"].object_id]


def test_rename_to_an_existing_name_raises(tmp_path: Path) -> None:
    """Renaming onto an existing column name (or renaming an unknown column) is a SchemaError."""
    ns = make_ns(tmp_path, RENAME_SCHEMA, ["b"], RENAME_ROWS)
    with pytest.raises(SchemaError, match=r"cannot rename 'b' to 'v': column 'v' already exists"):
        ns.rename_column("b", "v")
    with pytest.raises(SchemaError, match=r"unknown column 'nope'"):
        ns.rename_column("nope", "other")
    assert PartitionedNamespace.load(ns.root).schema.names == ["id", "b", "v"]


def test_a_filter_on_the_old_name_after_a_rename_is_a_value_error(spark: SparkSession, tmp_path: Path) -> None:
    """read_partitioned with the pre-rename name fails with a one-line ValueError naming the column."""
    ns = make_ns(tmp_path, RENAME_SCHEMA, ["b"], RENAME_ROWS)
    ns.rename_column("b", "bb")
    with pytest.raises(ValueError, match=r"'b'"):
        read_partitioned(spark, ns.root, filter="b = 'x'").collect()


def test_plan_scan_on_the_old_name_after_a_rename_is_a_value_error(tmp_path: Path) -> None:
    """ns.plan_scan with the pre-rename name is an unknown column: a ValueError naming it, not a full scan."""
    ns = make_ns(tmp_path, RENAME_SCHEMA, ["b"], RENAME_ROWS)
    ns.rename_column("b", "bb")
    with pytest.raises(ValueError, match=r"'b'"):
        ns.plan_scan("b = 'x'")


# -- 3. drop_column -----------------------------------------------------------------------------------

DROP_SCHEMA = pa.schema(
    [pa.field("id", pa.int64()), pa.field("c", pa.string()), pa.field("d", pa.string()), pa.field("w", pa.int32())]
)


def test_drop_column_rules_and_readding_a_name_gives_a_new_column(spark: SparkSession, tmp_path: Path) -> None:
    """Sources of the current spec cannot go; others can; a re-added name is a new id, NULL in old partitions."""
    ns = make_ns(
        tmp_path,
        DROP_SCHEMA,
        ["c AS cpart"],
        [
            {"id": 1, "c": "x", "d": "old-1", "w": 1},
            {"id": 2, "c": "x", "d": "old-2", "w": 2},
            {"id": 3, "c": "y", "d": "old-3", "w": 1},
        ],
    )
    old = by_value(ns, "cpart")

    with pytest.raises(SpecError) as info:
        ns.drop_column("c")
    message = str(info.value)
    assert "'c'" in message
    assert "v1" in message
    assert "'cpart'" in message
    assert ns.schema.names == ["id", "c", "d", "w"]

    ns.drop_column("d")
    assert ns.schema.names == ["id", "c", "w"]
    assert ns.namespace_schema.next_field_id == 4
    assert read_partitioned(spark, ns.root).columns == ["id", "c", "w"]

    ns.add_columns({"d": "string"})
    assert ns.namespace_schema.id_of("d") == 4
    assert ns.namespace_schema.next_field_id == 5
    fields = [("id", T.LongType()), ("c", T.StringType()), ("w", T.IntegerType()), ("d", T.StringType())]

    # a write into old partition x: its dropped d must not come back, the new d holds only new values
    write_table(
        ns, pa.table({"id": pa.array([4], pa.int64()), "c": ["x"], "w": pa.array([4], pa.int32()), "d": ["new"]})
    )
    assert by_value(ns, "cpart")["x"].object_id == old["x"].object_id
    rows = [(1, "x", 1, None), (2, "x", 2, None), (3, "y", 1, None), (4, "x", 4, "new")]
    assert_df_equality(read_partitioned(spark, ns.root), expected_df(spark, fields, rows), ignore_row_order=True)
    # partition y was never rewritten: its physical column "d" is the dropped one (old id), so it is NULL here
    assert_df_equality(
        read_partitioned(spark, ns.root, filter="d IS NULL"),
        expected_df(spark, fields, [(1, "x", 1, None), (2, "x", 2, None), (3, "y", 1, None)]),
        ignore_row_order=True,
    )


def test_dropping_a_source_of_an_old_spec_only_is_allowed(spark: SparkSession, tmp_path: Path) -> None:
    """After evolving the spec away from c, c can be dropped and v1 partitions still read."""
    ns = make_ns(
        tmp_path,
        DROP_SCHEMA,
        ["c"],
        [{"id": 1, "c": "x", "d": "d1", "w": 1}, {"id": 2, "c": "y", "d": "d2", "w": 2}],
    )
    ns.evolve_partition_spec(["w"])
    write_table(
        ns, pa.table({"id": pa.array([3], pa.int64()), "c": ["x"], "d": ["d3"], "w": pa.array([3], pa.int32())})
    )
    ns.drop_column("c")
    assert ns.schema.names == ["id", "d", "w"]
    assert sorted(ns.specs) == [1, 2]
    assert sorted(p.spec_id for p in ns.partitions()) == [1, 1, 2]

    write_table(ns, pa.table({"id": pa.array([4], pa.int64()), "d": ["d4"], "w": pa.array([3], pa.int32())}))
    fields = [("id", T.LongType()), ("d", T.StringType()), ("w", T.IntegerType())]
    rows = [(1, "d1", 1), (2, "d2", 2), (3, "d3", 3), (4, "d4", 3)]
    assert_df_equality(read_partitioned(spark, ns.root), expected_df(spark, fields, rows), ignore_row_order=True)
    assert sorted(t.spec_id for t in ns.plan_scan("w = 3")) == [1, 1, 2]


# -- 4. widen_column ----------------------------------------------------------------------------------

WIDEN_SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64()),
        pa.field("p", pa.string()),
        pa.field("i", pa.int32()),
        pa.field("f", pa.float32()),
        pa.field("dec", pa.decimal128(10, 2)),
    ]
)
WIDEN_ROWS = [
    {"id": 1, "p": "a", "i": 7, "f": 1.5, "dec": Dec("12.34")},
    {"id": 2, "p": "b", "i": -3, "f": 0.25, "dec": Dec("-0.01")},
    {"id": 3, "p": "a", "i": None, "f": None, "dec": None},
]


def test_widen_columns_casts_old_partitions_and_accepts_wide_values(spark: SparkSession, tmp_path: Path) -> None:
    """int32->int64, float32->float64, decimal(10,2)->decimal(12,2): old rows read cast, wide values fit."""
    ns = make_ns(tmp_path, WIDEN_SCHEMA, ["p"], WIDEN_ROWS)
    ids = [ns.namespace_schema.id_of(n) for n in WIDEN_SCHEMA.names]
    old = by_value(ns, "p")

    ns.widen_column("i", "int64")
    ns.widen_column("f", pa.float64())
    ns.widen_column("dec", pa.decimal128(12, 2))
    assert [ns.schema.field(n).type for n in ["i", "f", "dec"]] == [pa.int64(), pa.float64(), pa.decimal128(12, 2)]
    assert [ns.namespace_schema.id_of(n) for n in WIDEN_SCHEMA.names] == ids
    assert ns.namespace_schema.next_field_id == 5

    fields = [
        ("id", T.LongType()),
        ("p", T.StringType()),
        ("i", T.LongType()),
        ("f", T.DoubleType()),
        ("dec", T.DecimalType(12, 2)),
    ]
    before = [(1, "a", 7, 1.5, Dec("12.34")), (2, "b", -3, 0.25, Dec("-0.01")), (3, "a", None, None, None)]
    assert_df_equality(read_partitioned(spark, ns.root), expected_df(spark, fields, before), ignore_row_order=True)

    write_table(
        ns,
        pa.table(
            {
                "id": pa.array([4], pa.int64()),
                "p": ["a"],
                "i": pa.array([2**31 + 5], pa.int64()),
                "f": pa.array([1e300], pa.float64()),
                "dec": pa.array([Dec("1234567890.12")], pa.decimal128(12, 2)),
            }
        ),
    )
    after = by_value(ns, "p")
    assert after["a"].object_id == old["a"].object_id
    assert after["a"].read_version > old["a"].read_version
    assert after["b"].read_version == old["b"].read_version
    rows = [*before, (4, "a", 2147483653, 1e300, Dec("1234567890.12"))]
    assert_df_equality(read_partitioned(spark, ns.root), expected_df(spark, fields, rows), ignore_row_order=True)


def test_invalid_widenings_are_schema_errors(tmp_path: Path) -> None:
    """Narrowing, int -> string and a decimal scale change are SchemaErrors naming the column and the rules."""
    ns = make_ns(tmp_path, WIDEN_SCHEMA, ["p"], WIDEN_ROWS[:1])
    before_json = ns.namespace_schema.to_json()
    allowed = r"allowed: int8/int16/int32 -> a wider signed int, float32 -> float64, decimal"
    with pytest.raises(SchemaError, match=rf"cannot widen column 'id' from int64 to int32; {allowed}") as info:
        ns.widen_column("id", "int32")
    assert isinstance(info.value, ValueError)
    with pytest.raises(SchemaError, match=rf"cannot widen column 'i' from int32 to string; {allowed}"):
        ns.widen_column("i", "string")
    with pytest.raises(SchemaError, match=rf"cannot widen column 'dec' from decimal128\(10, 2\) to .*; {allowed}"):
        ns.widen_column("dec", pa.decimal128(14, 4))
    with pytest.raises(SchemaError, match=rf"cannot widen column 'f' from float.* to float.*; {allowed}"):
        ns.widen_column("f", pa.float32())
    assert PartitionedNamespace.load(ns.root).namespace_schema.to_json() == before_json


def test_widening_a_partition_source_is_a_spec_error(tmp_path: Path) -> None:
    """A bucket source cannot be widened, not even once it is only a source of an old spec."""
    schema = pa.schema([pa.field("x", pa.int32()), pa.field("y", pa.int32())])
    ns = make_ns(tmp_path, schema, ["bucket[4](x)"], [{"x": 1, "y": 1}, {"x": 2, "y": 2}])
    with pytest.raises(SpecError, match=r"cannot widen column 'x'.*'x_bucket'.*v1"):
        ns.widen_column("x", "int64")
    ns.evolve_partition_spec(["y AS ypart"])
    with pytest.raises(SpecError, match=r"cannot widen column 'x'.*v1"):
        ns.widen_column("x", "int64")
    with pytest.raises(SpecError, match=r"cannot widen column 'y'.*'ypart'.*v2"):
        ns.widen_column("y", "int64")
    assert [ns.schema.field(n).type for n in ["x", "y"]] == [pa.int32(), pa.int32()]


# -- 5. schema changes never rewrite partitions -------------------------------------------------------


def test_schema_operations_never_touch_partition_datasets(tmp_path: Path) -> None:
    """add, rename, drop and widen change only __manifest: locations, read_versions and dataset versions stay."""
    schema = pa.schema(
        [pa.field("id", pa.int64()), pa.field("p", pa.string()), pa.field("b", pa.string()), pa.field("i", pa.int32())]
    )
    ns = make_ns(
        tmp_path,
        schema,
        ["p"],
        [{"id": 1, "p": "a", "b": "b1", "i": 1}, {"id": 2, "p": "b", "b": "b2", "i": 2}],
    )
    write_table(
        ns, pa.table({"id": pa.array([3], pa.int64()), "p": ["a"], "b": ["b3"], "i": pa.array([3], pa.int32())})
    )
    before = snapshot(ns)
    assert len(before) == 2
    schemas = {p.object_id: dataset_of(ns, p.location).schema for p in ns.partitions()}
    manifest_before = ns.manifest_version

    ns.add_columns({"e": "string"})
    assert snapshot(ns) == before
    ns.rename_column("b", "bb")
    assert snapshot(ns) == before
    ns.drop_column("bb")
    assert snapshot(ns) == before
    ns.widen_column("i", "int64")

    reloaded = PartitionedNamespace.load(ns.root)
    assert reloaded.manifest_version > manifest_before
    assert reloaded.schema.names == ["id", "p", "i", "e"]
    assert snapshot(reloaded) == before
    assert {p.object_id: dataset_of(ns, p.location).schema for p in reloaded.partitions()} == schemas


# -- 6. an old partition is still an ordinary Lance dataset of the current shape -----------------------


def test_old_partition_after_a_write_has_the_current_shape(tmp_path: Path) -> None:
    """After add/rename/drop/widen and a write, an old partition opened with lance has the namespace columns."""
    schema = pa.schema(
        [
            pa.field("id", pa.int64()),
            pa.field("p", pa.string()),
            pa.field("b", pa.string()),
            pa.field("d", pa.string()),
            pa.field("i", pa.int32()),
        ]
    )
    ns = make_ns(
        tmp_path,
        schema,
        ["p"],
        [
            {"id": 1, "p": "a", "b": "b1", "d": "d1", "i": 10},
            {"id": 2, "p": "a", "b": None, "d": "d2", "i": None},
            {"id": 3, "p": "z", "b": "b3", "d": "d3", "i": 30},
        ],
    )
    old = by_value(ns, "p")
    ns.add_columns({"e": "string"})
    ns.rename_column("b", "bb")
    ns.drop_column("d")
    ns.widen_column("i", "int64")
    write_table(
        ns,
        pa.table(
            {
                "id": pa.array([4], pa.int64()),
                "p": ["a"],
                "bb": ["b4"],
                "i": pa.array([2**40], pa.int64()),
                "e": ["e4"],
            }
        ),
    )

    a = by_value(ns, "p")["a"]
    assert a.location == old["a"].location
    ds = dataset_of(ns, a.location)
    assert ds.version == a.read_version
    assert ds.schema.names == ["id", "p", "bb", "i", "e"]
    assert ds.schema.names == ns.schema.names
    assert [f.type for f in ds.schema] == [pa.int64(), pa.string(), pa.string(), pa.int64(), pa.string()]
    assert [f.type for f in ds.schema] == [f.type for f in ns.schema]
    assert [f.metadata[b"lance_partitioned:field_id"] for f in ds.schema] == [b"0", b"1", b"2", b"4", b"5"]
    assert sorted(ds.to_table().to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "p": "a", "bb": "b1", "i": 10, "e": None},
        {"id": 2, "p": "a", "bb": None, "i": None, "e": None},
        {"id": 4, "p": "a", "bb": "b4", "i": 2**40, "e": "e4"},
    ]
    assert ds.count_rows(filter="bb = 'b1'") == 1

    # the partition that was not written keeps its old, untouched shape
    z = by_value(ns, "p")["z"]
    assert z.read_version == old["z"].read_version
    assert dataset_of(ns, z.location).schema.names == ["id", "p", "b", "d", "i"]


# -- 7. fragments written under the old schema ---------------------------------------------------------


def test_a_write_begun_under_the_old_schema_cannot_commit(spark: SparkSession, tmp_path: Path) -> None:
    """Fragments written before add_columns fail to commit with ConcurrentModification; nothing changes."""
    ns = make_ns(tmp_path, ADD_SCHEMA, ["c"], [{"id": 1, "c": "x", "v": 10}, {"id": 2, "c": "y", "v": 20}])
    versions = {p.object_id: p.read_version for p in ns.partitions()}

    table = pa.table({"id": pa.array([3, 4], pa.int64()), "c": ["x", "new"], "v": pa.array([30, 40], pa.int32())})
    writer = FragmentWriter.for_namespace(ns)
    keyed = add_partition_columns(
        conform_table(table, ns.namespace_schema), ns.current_spec.fields, ns.namespace_schema
    )
    messages = pa.Table.from_batches(list(writer(keyed.to_batches())), schema=writer.output_schema)
    assert messages.num_rows == 2

    ns.add_columns({"e": "string"})
    manifest_after_add = ns.manifest_version
    with pytest.raises(ConcurrentModification, match=r"schema .* changed"):
        commit_write(ns, messages, schema=writer.schema)

    fresh = PartitionedNamespace.load(ns.root)
    assert fresh.manifest_version == manifest_after_add
    assert {p.object_id: p.read_version for p in fresh.partitions()} == versions
    fields = [("id", T.LongType()), ("c", T.StringType()), ("v", T.IntegerType()), ("e", T.StringType())]
    assert_df_equality(
        read_partitioned(spark, ns.root),
        expected_df(spark, fields, [(1, "x", 10, None), (2, "y", 20, None)]),
        ignore_row_order=True,
    )


# -- 8. the Spark write path after schema changes ------------------------------------------------------


def test_spark_write_after_add_and_rename(spark: SparkSession, tmp_path: Path) -> None:
    """write_partitioned with the evolved columns appends to old and new partitions; the mixed read is right."""
    ns = make_ns(tmp_path, RENAME_SCHEMA, ["b"], RENAME_ROWS)
    old = by_value(ns, "b")
    ns.add_columns({"e": "string"})
    ns.rename_column("b", "bb")

    spark_schema = T.StructType(
        [
            T.StructField("id", T.LongType()),
            T.StructField("bb", T.StringType()),
            T.StructField("v", T.IntegerType()),
            T.StructField("e", T.StringType()),
        ]
    )
    df = spark.createDataFrame([(3, "x", 3, "e3"), (4, "w", None, "e4"), (5, "y", 5, None)], spark_schema)
    write_partitioned(df, ns.root)

    ns.refresh()
    after = by_value(ns, "b")
    assert sorted(after) == ["w", "x", "y"]
    assert after["x"].object_id == old["x"].object_id
    assert after["y"].object_id == old["y"].object_id

    fields = [("id", T.LongType()), ("bb", T.StringType()), ("v", T.IntegerType()), ("e", T.StringType())]
    rows = [(1, "x", 1, None), (2, "y", 2, None), (3, "x", 3, "e3"), (4, "w", None, "e4"), (5, "y", 5, None)]
    assert_df_equality(read_partitioned(spark, ns.root), expected_df(spark, fields, rows), ignore_row_order=True)


# -- 9. filters on a column that old partitions lack ---------------------------------------------------


def test_filter_on_a_column_old_partitions_lack(spark: SparkSession, tmp_path: Path) -> None:
    """The added column is NULL for old partitions (SPEC-NOTES 14): e = 'x' keeps new rows, e IS NULL old ones."""
    ns = make_ns(
        tmp_path,
        ADD_SCHEMA,
        ["c"],
        [{"id": 1, "c": "x", "v": 1}, {"id": 2, "c": "y", "v": 2}, {"id": 3, "c": "y", "v": 3}],
    )
    ns.add_columns({"e": "string"})
    write_table(
        ns,
        pa.table(
            {
                "id": pa.array([4, 5, 6], pa.int64()),
                "c": ["y", "z", "z"],
                "v": pa.array([4, 5, 6], pa.int32()),
                "e": ["x", "x", "other"],
            }
        ),
    )
    fields = [("id", T.LongType()), ("c", T.StringType()), ("v", T.IntegerType()), ("e", T.StringType())]
    assert_df_equality(
        read_partitioned(spark, ns.root, filter="e = 'x'"),
        expected_df(spark, fields, [(4, "y", 4, "x"), (5, "z", 5, "x")]),
        ignore_row_order=True,
    )
    assert_df_equality(
        read_partitioned(spark, ns.root, filter="e IS NULL"),
        expected_df(spark, fields, [(1, "x", 1, None), (2, "y", 2, None), (3, "y", 3, None)]),
        ignore_row_order=True,
    )
    # e is not a partition source, so no partition is pruned
    assert len(ns.plan_scan("e = 'x'")) == 3
