"""How a write lays rows out in tasks: few partition values in much data are written by every
input task (no shuffle); many values, or little data, are shuffled to one task per value.

Oracles: the input rows (ids from ``spark.range``), the per-task row counts Spark reports
(``spark_partition_id``), and hand-computed partition values.
"""

from __future__ import annotations

import datetime
import math
import struct
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import differential as gen
import lance
import mmh3
import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import pipelines.write.fragments as pw
from partitioning import NamespaceSchema, PartitionField, PartitionSpec
from partitioning.errors import SchemaError
from partitioning.namespace import PartitionedNamespace
from partitioning.spec.field_ids import field_id_of
from partitioning.tables.fragments import FragmentWriter
from partitioning.tables.messages import part_column
from partitioning.tables.write import commit_write, write_table
from pipelines.write.dataframe import write_partitioned

# The layout of Spark's write tasks: small inputs here must not take the driver's path.
pytestmark = pytest.mark.usefixtures("spark_tasks")

SAMPLE = 1_000


@pytest.fixture
def small_sample(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pw, "SAMPLE_ROWS", SAMPLE)


def _fragments(ns: PartitionedNamespace) -> dict[str, int]:
    return {p.values["country"]: len(ns.open_table(p).get_fragments()) for p in ns.partitions()}


def _ids(ns: PartitionedNamespace) -> list[int]:
    return sorted(i for p in ns.partitions() for i in ns.open_table(p).to_table().column("id").to_pylist())


def test_one_value_in_much_data_is_written_by_every_input_task(spark: SparkSession, tmp_path: Path, small_sample):
    rows = 6 * SAMPLE
    df = spark.range(rows, numPartitions=3).select("id", F.lit("US").alias("country"))
    per_task = Counter(r[0] for r in df.select(F.spark_partition_id()).collect())
    assert sorted(per_task.values()) == [2 * SAMPLE] * 3
    result = write_partitioned(df, str(tmp_path / "ns"), partition_by=["country"])
    ns = PartitionedNamespace.load(str(tmp_path / "ns"))
    assert _fragments(ns) == {"US": 3}  # one per input task: nothing was shuffled into one task
    assert result.fragments_written == 3
    assert _ids(ns) == list(range(rows))


def test_few_values_keep_the_rows_per_value_and_task(spark: SparkSession, tmp_path: Path, small_sample):
    rows = 8 * SAMPLE
    df = spark.range(rows, numPartitions=2).select(
        "id", F.element_at(F.array(*map(F.lit, ["US", "DE", "JP"])), (F.col("id") % 3 + 1).cast("int")).alias("country")
    )
    write_partitioned(df, str(tmp_path / "ns"), partition_by=["country"])
    ns = PartitionedNamespace.load(str(tmp_path / "ns"))
    assert _fragments(ns) == {"US": 2, "DE": 2, "JP": 2}
    for p in ns.partitions():
        got = ns.open_table(p).to_table().column("id").to_pylist()
        wanted = {"US": 0, "DE": 1, "JP": 2}[p.values["country"]]
        assert sorted(got) == [i for i in range(rows) if i % 3 == wanted]


def test_many_values_are_shuffled_to_one_fragment_per_value(spark: SparkSession, tmp_path: Path, small_sample):
    rows = 4 * SAMPLE
    df = spark.range(rows, numPartitions=3).select("id", (F.col("id") % 50).cast("string").alias("country"))
    result = write_partitioned(df, str(tmp_path / "ns"), partition_by=["country"], max_open_writers=8)
    ns = PartitionedNamespace.load(str(tmp_path / "ns"))
    assert _fragments(ns) == {str(v): 1 for v in range(50)}
    assert result.fragments_written == 50
    assert _ids(ns) == list(range(rows))


def test_little_data_with_one_value_is_one_fragment(spark: SparkSession, tmp_path: Path, small_sample):
    df = spark.range(SAMPLE // 2, numPartitions=3).select("id", F.lit("US").alias("country"))
    write_partitioned(df, str(tmp_path / "ns"), partition_by=["country"])
    ns = PartitionedNamespace.load(str(tmp_path / "ns"))
    assert _fragments(ns) == {"US": 1}
    assert _ids(ns) == list(range(SAMPLE // 2))


def test_an_input_with_a_shuffle_is_not_sampled_and_is_clustered(spark: SparkSession, tmp_path: Path, small_sample):
    df = spark.range(4 * SAMPLE, numPartitions=2).repartition(3).select("id", F.lit("US").alias("country"))
    write_partitioned(df, str(tmp_path / "ns"), partition_by=["country"])
    ns = PartitionedNamespace.load(str(tmp_path / "ns"))
    assert _fragments(ns) == {"US": 1}
    assert _ids(ns) == list(range(4 * SAMPLE))


def test_the_buffer_budget_flushes_the_largest_partition_first(tmp_path: Path):
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("country", pa.string())])
    ns = PartitionedNamespace.create(str(tmp_path / "ns"), schema, ["country"])
    writer = FragmentWriter.for_namespace(ns, max_open_writers=10, max_buffered_rows=10)
    key = part_column(ns.current_spec.field_ids[0])

    def batch(start: int, countries: list[str]) -> pa.RecordBatch:
        ids = list(range(start, start + len(countries)))
        return pa.RecordBatch.from_pydict({"id": ids, "country": countries, key: countries})

    batches = [batch(0, ["US"] * 6 + ["DE"] * 2), batch(8, ["DE"] * 2 + ["JP"]), batch(11, ["US"])]
    messages = pa.Table.from_batches(list(writer(batches)), schema=writer.output_schema)
    # after batch 2 the buffers hold US 6, DE 4, JP 1 = 11 > 10: US (the largest) is flushed
    assert list(zip(messages.column(key).to_pylist(), messages.column("num_rows").to_pylist(), strict=True)) == [
        ("US", 6),
        ("DE", 4),
        ("JP", 1),
        ("US", 1),
    ]
    result = commit_write(ns, messages, spec_id=ns.current_spec.spec_id, schema=writer.schema)
    assert result.rows_written == 12
    ns = PartitionedNamespace.load(str(tmp_path / "ns"))
    assert _ids(ns) == list(range(12))
    placed = {p.values["country"]: sorted(ns.open_table(p).to_table()["id"].to_pylist()) for p in ns.partitions()}
    assert placed == {
        "US": [0, 1, 2, 3, 4, 5, 11],
        "DE": [6, 7, 8, 9],
        "JP": [10],
    }


def test_batches_with_many_keys_and_nulls_are_split_exactly(tmp_path: Path):
    """Multi-column keys with NULLs, in one batch: every row lands in the partition of its own
    values (oracle: the rows grouped in Python), NULL being one value of its own."""
    schema = pa.schema(
        [pa.field("id", pa.int64(), nullable=False), pa.field("country", pa.string()), pa.field("n", pa.int32())]
    )
    ns = PartitionedNamespace.create(str(tmp_path / "ns"), schema, ["country", "n"])
    countries = ["US", None, "DE", "JP"]
    values = [None, 1, 2]
    rows = [(i, countries[(i * 7) % 4], values[(i * 5) % 3]) for i in range(500)]
    table = pa.Table.from_pylist([{"id": i, "country": c, "n": n} for i, c, n in rows], schema=schema)
    result = write_table(ns, table, max_open_writers=64)
    expected: dict[tuple[str | None, int | None], list[int]] = {}
    for i, c, n in rows:
        expected.setdefault((c, n), []).append(i)
    ns = PartitionedNamespace.load(str(tmp_path / "ns"))
    got = {(p.values["country"], p.values["n"]): ns.open_table(p).to_table()["id"].to_pylist() for p in ns.partitions()}
    assert {k: sorted(v) for k, v in got.items()} == expected
    assert result.fragments_written == len(expected) == 12


@pytest.mark.parametrize("cluster", [False, True], ids=["input-tasks", "shuffled"])
def test_every_row_lands_in_its_own_partition_in_any_session_time_zone(spark: SparkSession, tmp_path: Path, cluster):
    """Without a shuffle the input tasks compute the partition values themselves (Arrow
    transforms); with one the JVM does. Either way, under a non-UTC session time zone,
    every row read back with Lance lies in the partition of its own values (oracle: Python's
    UTC calendar, ``mmh3`` for the bucket, slicing for truncate), NULL included."""
    base = 1_735_689_600  # 2025-01-01T00:00Z
    old = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "Asia/Kolkata")
    try:
        df = spark.range(3000, numPartitions=3).select(
            "id",
            F.timestamp_seconds(F.lit(base) + (F.col("id") * 7919) % (400 * 86_400) - 19_800).alias("ts"),
            F.when(F.col("id") % 50 != 0, F.col("id") % 97).alias("u"),
            F.when(F.col("id") % 40 != 1, F.concat(F.lit("s"), (F.col("id") % 3).cast("string"), F.lit("x"))).alias(
                "s"
            ),
        )
        spec = ["year(ts)", "month(ts)", "bucket[4](u)", "truncate[2](s)"]
        result = write_partitioned(df, str(tmp_path / "ns"), partition_by=spec, cluster=cluster, max_open_writers=8)
    finally:
        spark.conf.set("spark.sql.session.timeZone", old)
    assert result.rows_written == 3000
    ns = PartitionedNamespace.load(str(tmp_path / "ns"))
    seen: list[int] = []
    for p in ns.partitions():
        rows = lance.dataset(p.uri, version=p.read_version).to_table().to_pylist()
        for row in rows:
            when = datetime.datetime.fromtimestamp(row["ts"].timestamp(), datetime.UTC)
            u, s = row["u"], row["s"]
            expected = {
                "ts_year": when.year,
                "ts_month": when.month,
                "u_bucket": None if u is None else abs(mmh3.hash(struct.pack("<q", u), 0, signed=True)) % 4,
                "s_trunc": None if s is None else s[:2],
            }
            assert p.values == expected, row
        seen.extend(r["id"] for r in rows)
    assert sorted(seen) == list(range(3000))
    assert len(ns.partitions()) > 8  # more values than open writers: flushed and reopened


def _fragments_per_partition(root: str) -> list[int]:
    ns = PartitionedNamespace.load(root)
    return sorted(len(ns.open_table(p).get_fragments()) for p in ns.partitions())


@pytest.mark.parametrize(
    ("spec", "source", "clustered"),
    [
        (["bucket[4](id)"], "range", False),  # at most 5 values and an input Spark sizes: no sample
        (["bucket[4](id)", "flag"], "range", False),  # 5 x 3 = 15 values
        (["bucket[40](id)"], "range", True),  # 41 values may be more than 32 open writers: sampled
        (["country"], "range", True),  # unbounded: sampled
        (["bucket[4](id)"], "python list", True),  # an input Spark cannot size: sampled
    ],
)
def test_a_bounded_spec_over_a_large_input_skips_the_sample(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spec, source, clustered
):
    """The sample is made to answer "cluster" whenever it runs (it would need more rows than
    there are); so one fragment per partition means it ran, one per input task means it did not."""
    monkeypatch.setattr(pw, "SAMPLE_ROWS", 2**31 - 1)
    monkeypatch.setattr(pw, "LARGE_INPUT_BYTES", 1)
    rows = 3000
    if source == "range":
        base = spark.range(rows, numPartitions=3)
    else:
        base = spark.sparkContext.parallelize([(i,) for i in range(rows)], 3).toDF(["id"])
    country = F.element_at(F.array(*map(F.lit, "ABCD")), (F.col("id") % 4 + 1).cast("int"))
    df = base.select("id", (F.col("id") % 2 == 0).alias("flag"), country.alias("country"))
    result = write_partitioned(df, str(tmp_path / "ns"), partition_by=spec)
    assert result.rows_written == rows
    per_partition = _fragments_per_partition(str(tmp_path / "ns"))
    if clustered:
        assert per_partition == [1] * len(per_partition)
    else:
        assert per_partition == [3] * len(per_partition)
    assert _ids_of(str(tmp_path / "ns")) == list(range(rows))


def _ids_of(root: str) -> list[int]:
    ns = PartitionedNamespace.load(root)
    return sorted(i for p in ns.partitions() for i in ns.open_table(p).to_table().column("id").to_pylist())


def _layout_rows(n: int) -> list[dict[str, Any]]:
    """Every value the differential generator knows, cycled (a NULL every 7th row per column)."""

    def pick(values: Sequence[Any], k: int, salt: int) -> Any:
        return None if (k + salt) % 7 == 0 else values[(k * (salt + 1)) % len(values)]

    instants = [b + datetime.timedelta(minutes=m) for b in gen._BASE_INSTANTS for m in (-61, -1, 0, 1, 59, 1441)]
    out = []
    for k in range(n):
        ts = pick(instants, k, 1)
        out.append(
            {
                "k": k,
                "i": pick([0, 1, -1, 2, 7, 99, -(2**31), 2**31 - 1], k, 2),
                "l": pick([0, 5, -5, 10, 19, 2**53 + 1, -(2**63), 2**63 - 1], k, 3),
                "s": pick(gen._STRINGS, k, 4),
                "d": pick([datetime.date(2025, 12, 31), datetime.date(2026, 1, 1), datetime.date(2025, 3, 9)], k, 5),
                "ts": ts,
                "ntz": None if ts is None else (ts + datetime.timedelta(hours=7 * (k % 2))).replace(tzinfo=None),
                "f": pick(gen._FLOATS, k, 6),
                "r": pick([0.0, -0.0, math.nan, 0.1, 1.5, -2.25, 16777217.0], k, 7),
                "dec": pick(gen._DECIMALS, k, 8),
                "dsm": pick(gen._SMALL_DECIMALS, k, 9),
                "b": pick([True, False], k, 10),
                "bin": pick([b"", b"\x00", b"\x03", b"ab", b"\xff\x00"], k, 11),
            }
        )
    return out


def _placement(root: str) -> dict[int, str]:
    """Row ``k`` -> the values of the partition it was written to (read back with Lance)."""
    ns = PartitionedNamespace.load(root)
    out = {}
    for p in ns.partitions():
        for k in lance.dataset(p.uri, version=p.read_version).to_table(columns=["k"]).column("k").to_pylist():
            out[k] = repr(sorted(p.values.items()))
    return out


@pytest.mark.parametrize("layout", sorted([*gen.LAYOUTS, *gen.EXPRESSION_LAYOUTS]))
def test_input_tasks_place_every_row_where_the_shuffle_does(spark: SparkSession, tmp_path: Path, layout: str):
    """Every transform kind (and an expression field), under a zone with DST and a 45-minute
    offset: the input tasks' Arrow transforms (no shuffle) put each row into the partition
    the JVM transforms (shuffle) put it into."""
    ns_schema = NamespaceSchema.from_arrow(gen.ARROW)
    if layout in gen.EXPRESSION_LAYOUTS:
        fields = [
            PartitionField(
                f"e{n}",
                [field_id_of(ns_schema.arrow.field(e["source"]))],
                expression=e["expression"],
                result_type=e["type"],
            )
            for n, e in enumerate(gen.EXPRESSION_LAYOUTS[layout])
        ]
        spec: PartitionSpec | list[str] = PartitionSpec(1, fields)
    else:
        spec = gen.LAYOUTS[layout]
    rows = _layout_rows(120)
    old = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "Pacific/Chatham")
    try:
        df = spark.createDataFrame(gen.spark_rows(rows), gen.SPARK).repartition(3, "k")
        placed = {}
        for cluster in (False, True):
            root = str(tmp_path / f"c{cluster}")
            kwargs: dict[str, Any] = {"spec": spec} if isinstance(spec, PartitionSpec) else {"partition_by": spec}
            write_partitioned(df, root, schema=gen.ARROW, cluster=cluster, **kwargs)
            placed[cluster] = _placement(root)
    finally:
        spark.conf.set("spark.sql.session.timeZone", old)
    assert sorted(placed[False]) == list(range(len(rows)))
    assert placed[False] == placed[True]


def test_a_dataframe_that_fits_the_namespace_is_written_without_a_projection(spark: SparkSession, tmp_path: Path):
    """No projection when the columns, their order and types are the namespace's; a nullable
    source going into a non-nullable column is still checked (Spark drops the check only for
    a source that cannot be NULL), and columns in another order are still matched by name."""
    from pipelines.write.fragments import conform_dataframe

    root = str(tmp_path / "ns")
    arrow = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("country", pa.string())])
    PartitionedNamespace.create(root, arrow, ["country"])
    schema = PartitionedNamespace.load(root).namespace_schema
    fits = spark.range(4).select("id", F.lit("US").alias("country"))
    assert conform_dataframe(fits, schema) is fits
    reordered = fits.select("country", "id")
    assert conform_dataframe(reordered, schema) is not reordered
    write_partitioned(reordered, root)
    nullable = spark.createDataFrame([(5, "US"), (None, "US")], "id long, country string")
    assert conform_dataframe(nullable, schema) is not nullable
    with pytest.raises(SchemaError, match="column 'id' is not nullable but the input has NULL") as info:
        write_partitioned(nullable, root)
    assert "\n" not in str(info.value)
    assert _ids(PartitionedNamespace.load(root)) == [0, 1, 2, 3]
