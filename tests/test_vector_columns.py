"""Vector columns (issue 13): fixed-size float lists written from Spark arrays and ML vectors.

pylance reading each partition dataset is the oracle for what is stored; numpy computes
the expected values (float32/float16 rounding) independently of the code under test.
"""

from __future__ import annotations

import pickle

import lance
import numpy as np
import pyarrow as pa
import pytest
from pyspark.ml.linalg import DenseVector, SparseVector, VectorUDT
from pyspark.sql import types as T

from partitioning import PartitionedNamespace
from partitioning.errors import InvalidInput, SchemaError
from partitioning.spec.schema import NamespaceSchema
from partitioning.spec.vectors import cast_vectors, is_vector_type, spark_facing_type, vector_dimension
from partitioning.tables.write import write_table
from pipelines import read_partitioned, register_data_source, write_partitioned
from pipelines.columns.schema import spark_schema
from pipelines.read.join import join_partitioned_with_plan

DIM = 4
RNG = np.random.default_rng(13)
VECTORS = [[float(x) for x in RNG.normal(size=DIM)] for _ in range(6)]
NP_TYPES = {pa.float16(): np.float16, pa.float32(): np.float32, pa.float64(): np.float64}


def _schema(value_type: pa.DataType) -> pa.Schema:
    return pa.schema([pa.field("id", pa.int64()), pa.field("c", pa.string()), pa.field("v", pa.list_(value_type, DIM))])


def _rows() -> list[tuple[int, str, list[float] | None]]:
    """Six vectors in two partitions, plus a NULL vector in each."""
    rows: list[tuple[int, str, list[float] | None]] = [(i, "ab"[i % 2], v) for i, v in enumerate(VECTORS)]
    return [*rows, (6, "a", None), (7, "b", None)]


def _stored(root: str) -> pa.Table:
    """Every partition dataset at the version __manifest records, read with pylance, by id."""
    ns = PartitionedNamespace.load(root)
    tables = [lance.dataset(p.uri, version=p.read_version).to_table() for p in ns.partitions()]
    return pa.concat_tables(tables).sort_by("id")


def _expected(vectors: list[list[float] | None], *steps: type) -> list[list[float] | None]:
    """``vectors`` rounded through numpy dtypes in order (e.g. float32 then float16)."""
    out = []
    for v in vectors:
        if v is None:
            out.append(None)
            continue
        a = np.asarray(v, dtype=np.float64)
        for dtype in steps:
            a = a.astype(dtype)
        out.append([float(x) for x in a])
    return out


def _by_id(rows: list) -> dict[int, list[float] | None]:
    return {r["id"]: (list(r["v"]) if r["v"] is not None else None) for r in rows}


def test_vector_type_helpers_and_spark_schema() -> None:
    assert is_vector_type(pa.list_(pa.float16(), 8)) and vector_dimension(pa.list_(pa.float64(), 8)) == 8
    assert not is_vector_type(pa.list_(pa.float32())) and not is_vector_type(pa.list_(pa.int32(), 4))
    with pytest.raises(ValueError, match="not a vector type"):
        vector_dimension(pa.list_(pa.float32()))
    assert spark_facing_type(pa.list_(pa.float16(), 4)) == pa.list_(pa.float32())
    got = {t: spark_schema(_schema(t))["v"].dataType for t in NP_TYPES}
    assert got == {
        pa.float16(): T.ArrayType(T.FloatType()),
        pa.float32(): T.ArrayType(T.FloatType()),
        pa.float64(): T.ArrayType(T.DoubleType()),
    }


def test_cast_vectors_counts_wrong_lengths_and_keeps_nulls() -> None:
    target = pa.list_(pa.float32(), 3)
    good = pa.array([[1, 2, 3], None, [4, 5, 6]], pa.list_(pa.float64()))
    cast = cast_vectors(good, target, "emb")
    assert cast.type == target and cast.to_pylist() == [[1.0, 2.0, 3.0], None, [4.0, 5.0, 6.0]]
    # a chunk of only NULL lists: pyarrow's own list -> fixed-size list cast crashes on it
    all_null = pa.chunked_array(
        [pa.array([None, None], pa.list_(pa.float64())), pa.array([[7, 8, 9]], pa.list_(pa.float64()))]
    )
    assert cast_vectors(all_null, target, "emb").to_pylist() == [None, None, [7.0, 8.0, 9.0]]
    bad = pa.chunked_array([pa.array([[1, 2], None, [1, 2, 3]]), pa.array([[1, 2, 3, 4], [], [9, 9, 9]])])
    with pytest.raises(SchemaError) as info:
        cast_vectors(bad, target, "emb")
    assert str(info.value) == "column 'emb': expected vectors of dimension 3, 3 rows have another length"
    # Spark ML vectors reach Arrow as struct<type, size, indices, values>: dense (1) and sparse (0)
    ml = pa.StructArray.from_arrays(
        [
            pa.array([1, 0, 1], pa.int8()),
            pa.array([None, 3, None], pa.int32()),
            pa.array([None, [2], None], pa.list_(pa.int32())),
            pa.array([[1.5, 2.5, 3.5], [7.0], None], pa.list_(pa.float64())),
        ],
        names=["type", "size", "indices", "values"],
        mask=pa.array([False, False, True]),
    )
    assert cast_vectors(ml, target, "emb").to_pylist() == [[1.5, 2.5, 3.5], [0.0, 0.0, 7.0], None]
    with pytest.raises(SchemaError, match="column 'emb': cannot store string"):
        cast_vectors(pa.array(["x"]), target, "emb")


def test_namespace_schema_pickles_vector_field_ids() -> None:
    """pyarrow's own pickle drops the fixed-size list child's field id; the data source
    writer is pickled to its commit, which then saw a "changed" schema."""
    schema = NamespaceSchema.from_arrow(_schema(pa.float32()))
    child = pickle.loads(pickle.dumps(schema)).arrow.field("v").type.value_field
    assert child.metadata == {b"lance:field_id": b"3"}


def test_write_table_refuses_wrong_lengths_without_committing(tmp_path) -> None:
    ns = PartitionedNamespace.create(str(tmp_path / "ns"), _schema(pa.float32()), ["c"])
    before = ns.manifest_version
    table = pa.table(
        {"id": [0, 1, 2], "c": ["a", "b", "a"], "v": [[1.0, 2.0, 3.0, 4.0], [1.0], [1.0, 2.0, 3.0, 4.0, 5.0]]}
    )
    with pytest.raises(InvalidInput, match=r"^column 'v': expected vectors of dimension 4, 2 rows have"):
        write_table(ns, table)
    assert PartitionedNamespace.load(ns.root).manifest_version == before


@pytest.mark.parametrize("value_type", [pa.float16(), pa.float32(), pa.float64()], ids=str)
def test_write_partitioned_creates_a_vector_namespace(spark, tmp_path, value_type) -> None:
    root = str(tmp_path / "ns")
    element = T.DoubleType() if value_type == pa.float64() else T.FloatType()
    struct = T.StructType(
        [
            T.StructField("id", T.LongType()),
            T.StructField("c", T.StringType()),
            T.StructField("v", T.ArrayType(element)),
        ]
    )
    rows = _rows()
    write_partitioned(spark.createDataFrame(rows, struct), root, partition_by=["c"], schema=_schema(value_type))

    stored = _stored(root)
    assert stored.schema.field("v").type == pa.list_(value_type, DIM)
    steps = (np.float64,) if value_type == pa.float64() else (np.float32, NP_TYPES[value_type])
    expected = dict(enumerate(_expected([v for _, _, v in rows], *steps)))
    assert _by_id(stored.to_pylist()) == expected
    assert stored.column("v").null_count == 2

    df = read_partitioned(spark, root)
    assert df.schema["v"].dataType == T.ArrayType(element)
    assert _by_id([r.asDict() for r in df.collect()]) == expected


def test_double_arrays_and_ml_vectors_append_into_float32(spark, tmp_path) -> None:
    root = str(tmp_path / "ns")
    ns = PartitionedNamespace.create(root, _schema(pa.float32()), ["c"])
    doubles = spark.createDataFrame([(i, c, v) for i, c, v in _rows()], "id long, c string, v array<double>")
    write_partitioned(doubles, root)
    ml_schema = T.StructType(
        [T.StructField("id", T.LongType()), T.StructField("c", T.StringType()), T.StructField("v", VectorUDT())]
    )
    ml_rows = [
        (10, "a", DenseVector([0.5, -1.25, 3.0, 1e-8])),
        (11, "b", SparseVector(DIM, {1: 2.5, 3: -4.0})),
        (12, "a", None),
    ]
    write_partitioned(spark.createDataFrame(ml_rows, ml_schema), root)

    stored = _stored(root)
    assert stored.schema.field("v").type == pa.list_(pa.float32(), DIM)
    ml_values = [[0.5, -1.25, 3.0, 1e-8], [0.0, 2.5, 0.0, -4.0], None]
    vectors = [v for _, _, v in _rows()] + ml_values
    ids = [i for i, _, _ in _rows()] + [10, 11, 12]
    assert _by_id(stored.to_pylist()) == dict(zip(ids, _expected(vectors, np.float32), strict=True))
    assert PartitionedNamespace.load(root).manifest_version == ns.manifest_version + 2


def test_write_partitioned_refuses_wrong_lengths(spark, tmp_path) -> None:
    root = str(tmp_path / "ns")
    ns = PartitionedNamespace.create(root, _schema(pa.float32()), ["c"])
    rows = [*_rows(), (20, "a", [1.0, 2.0]), (21, "b", [1.0] * 5), (22, "b", [])]
    df = spark.createDataFrame(rows, "id long, c string, v array<float>").repartition(2)
    with pytest.raises(InvalidInput) as info:
        write_partitioned(df, root)
    assert str(info.value) == "column 'v': expected vectors of dimension 4, 3 rows have another length"
    after = PartitionedNamespace.load(root)
    assert after.manifest_version == ns.manifest_version and after.partitions() == []


def test_data_source_writes_vectors_and_refuses_wrong_lengths(spark, tmp_path) -> None:
    register_data_source(spark)
    root = str(tmp_path / "ns")
    PartitionedNamespace.create(root, _schema(pa.float64()), ["c"])
    df = spark.createDataFrame(_rows(), "id long, c string, v array<float>")
    df.write.format("lance_partitioned").mode("append").save(root)
    ml = spark.createDataFrame(
        [(30, "b", SparseVector(DIM, {0: 1.5})), (31, "a", None)],
        T.StructType(
            [T.StructField("id", T.LongType()), T.StructField("c", T.StringType()), T.StructField("v", VectorUDT())]
        ),
    )
    ml.write.format("lance_partitioned").mode("append").save(root)

    stored = _stored(root)
    expected = dict(enumerate(_expected([v for _, _, v in _rows()], np.float32, np.float64)))
    expected.update({30: [1.5, 0.0, 0.0, 0.0], 31: None})
    assert stored.schema.field("v").type == pa.list_(pa.float64(), DIM)
    assert _by_id(stored.to_pylist()) == expected

    version = PartitionedNamespace.load(root).manifest_version
    bad = spark.createDataFrame(
        [(40, "a", [1.0]), (41, "b", [2.0] * 3), (42, "a", None)], "id long, c string, v array<float>"
    )
    with pytest.raises(Exception) as info:
        bad.write.format("lance_partitioned").mode("append").save(root)
    assert "column 'v': expected vectors of dimension 4, 2 rows have another length" in str(info.value)
    assert PartitionedNamespace.load(root).manifest_version == version
    assert _by_id(_stored(root).to_pylist()) == expected

    # a new namespace from ML vectors: no dimension is known, so a variable list<double>
    fresh = str(tmp_path / "fresh")
    ml.write.format("lance_partitioned").option("partition_by", "c").mode("append").save(fresh)
    stored = _stored(fresh)
    assert stored.schema.field("v").type == pa.list_(pa.float64())
    assert _by_id(stored.to_pylist()) == {30: [1.5, 0.0, 0.0, 0.0], 31: None}


def test_reads_filters_and_columns_with_a_vector_column(spark, tmp_path) -> None:
    register_data_source(spark)
    root = str(tmp_path / "ns")
    ns = PartitionedNamespace.create(root, _schema(pa.float32()), ["c"])
    write_table(
        ns, pa.table({"id": [r[0] for r in _rows()], "c": [r[1] for r in _rows()], "v": [r[2] for r in _rows()]})
    )
    stored = _by_id(_stored(root).to_pylist())
    in_a = {i: v for i, v in stored.items() if i % 2 == 0}

    loaded = spark.read.format("lance_partitioned").load(root)
    assert loaded.schema["v"].dataType == T.ArrayType(T.FloatType())
    assert _by_id([r.asDict() for r in loaded.where("c = 'a'").collect()]) == in_a
    picked = spark.read.format("lance_partitioned").option("columns", "v,id").load(root)
    assert picked.columns == ["v", "id"]
    assert _by_id([r.asDict() for r in picked.collect()]) == stored
    filtered = read_partitioned(spark, root, filter="c = 'a' AND id < 6", columns=["id", "v"])
    assert _by_id([r.asDict() for r in filtered.collect()]) == {i: v for i, v in in_a.items() if i < 6}


def test_join_partitioned_with_a_vector_column(spark, tmp_path) -> None:
    root = str(tmp_path / "ns")
    ns = PartitionedNamespace.create(root, _schema(pa.float16()), ["c"])
    write_table(
        ns, pa.table({"id": [r[0] for r in _rows()], "c": [r[1] for r in _rows()], "v": [r[2] for r in _rows()]})
    )
    stored = _by_id(_stored(root).to_pylist())
    other = str(tmp_path / "other")
    labels = spark.createDataFrame([(i, f"label{i}", "ab"[i % 2]) for i in range(8)], "id long, label string, c string")
    write_partitioned(labels, other, partition_by=["c"])
    joined, plan = join_partitioned_with_plan(spark, root, other, on=["id", "c"])
    assert plan.compatible  # the storage-partitioned join (the lance_partitioned_join source)
    got = {r["id"]: (r["label"], list(r["v"]) if r["v"] is not None else None) for r in joined.collect()}
    assert got == {i: (f"label{i}", v) for i, v in stored.items()}
