"""The differential suite: every read route gives Spark's own answer (issue 11).

Hypothesis builds random tables (tests/differential.py: NULLs, NaN, +-0.0, +-inf, odd
strings, full-precision decimals, instants near day/month/year/DST boundaries), writes
them under a random layout (every transform kind, sometimes two spec versions), picks a
session time zone, and draws Spark SQL filters. For each filter ``f`` the oracle is
Spark's ``src.where(f)`` on a plain DataFrame of the same rows; compared with it:

- ``read_partitioned(spark, root, filter=f)``;
- ONE reused ``format("lance_partitioned")`` DataFrame ``.where(f)`` for all filters;
- a temp view queried with SQL;
- ``.option("filter", f)`` where the source evaluates ``f`` itself;
- ``plan_scan`` soundness: every matching row lives in a table the plan keeps.

All filters of one table run as one Spark job per route (a UNION ALL of one scan per
filter), which also puts many scans of one DataFrame into one plan.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import reduce
from pathlib import Path
from typing import Any

import differential as gen
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from partitioning import NamespaceSchema, PartitionedNamespace, PartitionField, PartitionSpec
from partitioning.binding import bind
from partitioning.filters import is_exactly_understood, parse_filter
from partitioning.schema import field_id_of
from partitioning.spec import parse_partition_by
from partitioning.write import write_table
from pipelines.datasource import register_data_source
from pipelines.read import read_partitioned, session_dialect

FILTERS_PER_TABLE = 10
STATS = {"tables": 0, "filters": 0, "exact": 0}


def _settings(examples: int) -> settings:
    return settings(
        max_examples=examples,
        deadline=None,
        database=None,
        derandomize=True,
        phases=(Phase.explicit, Phase.generate),
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
    )


@contextmanager
def _zone(spark: SparkSession, zone: str) -> Iterator[None]:
    before = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", zone)
    try:
        yield
    finally:
        spark.conf.set("spark.sql.session.timeZone", before or "UTC")


def _spec(layout: str, ns_schema: NamespaceSchema, spec_id: int) -> PartitionSpec:
    if layout in gen.EXPRESSION_LAYOUTS:
        fields = []
        for n, e in enumerate(gen.EXPRESSION_LAYOUTS[layout]):
            source = field_id_of(ns_schema.arrow.field(e["source"]))
            fields.append(
                PartitionField(f"expr{spec_id}_{n}", [source], expression=e["expression"], result_type=e["type"])
            )
        return PartitionSpec(spec_id, fields)
    aliased = [f"{expr} AS v{spec_id}_{n}" for n, expr in enumerate(gen.LAYOUTS[layout])]
    return parse_partition_by(aliased, ns_schema, spec_id=spec_id)


def _make(root: str, rows: Sequence[dict[str, Any]], layouts: Sequence[str]) -> PartitionedNamespace:
    table = gen.arrow_table(rows)
    ns_schema = NamespaceSchema.from_arrow(gen.ARROW)
    ns = PartitionedNamespace.create(root, ns_schema, _spec(layouts[0], ns_schema, 1))
    cut = len(rows) // len(layouts)
    for n, layout in enumerate(layouts):
        if n:
            ns.evolve_partition_spec(_spec(layout, ns.namespace_schema, n + 1))
        chunk = table.slice(n * cut, None if n == len(layouts) - 1 else cut)
        if chunk.num_rows:
            write_table(ns, chunk)
    return PartitionedNamespace.load(root)


def _ids_per_filter(frames: Sequence[DataFrame]) -> dict[int, list[int]]:
    """One Spark job: the ``k`` of every frame, by frame number."""
    tagged = [df.select(F.lit(n).alias("q"), F.col("k")) for n, df in enumerate(frames)]
    out: dict[int, list[int]] = {n: [] for n in range(len(frames))}
    for row in reduce(DataFrame.unionAll, tagged).collect():
        out[row["q"]].append(row["k"])
    return {n: sorted(v) for n, v in out.items()}


def _plan_misses(ns: PartitionedNamespace, f: str, expected: list[int], spark: SparkSession) -> list[int]:
    home = {}
    for table in ns.partitions():
        for k in ns.open_table(table).to_table(columns=["k"]).column("k").to_pylist():
            home[k] = table.object_id
    kept = {t.object_id for t in ns.plan_scan(f, dialect=session_dialect(spark))}
    return [k for k in expected if home[k] not in kept]


def check_table(spark: SparkSession, rows: list[dict[str, Any]], layouts: list[str], zone: str, fs: list[str]) -> None:
    failures: list[str] = []
    with tempfile.TemporaryDirectory() as tmp, _zone(spark, zone):
        root = str(Path(tmp) / "ns")
        ns = _make(root, rows, layouts)
        register_data_source(spark)
        src = spark.createDataFrame(gen.spark_rows(rows), gen.SPARK)
        expected = _ids_per_filter([src.where(f) for f in fs])
        reused = spark.read.format("lance_partitioned").load(root)
        reused.createOrReplaceTempView("differential_view")
        routes = {
            "read_partitioned(filter=f)": _ids_per_filter([read_partitioned(spark, root, filter=f) for f in fs]),
            "reused DataFrame .where(f)": _ids_per_filter([reused.where(f) for f in fs]),
            "temp view SQL": _ids_per_filter([spark.sql(f"SELECT k FROM differential_view WHERE {f}") for f in fs]),
        }
        dialect = session_dialect(spark)
        exact = [
            n for n, f in enumerate(fs) if is_exactly_understood(bind(parse_filter(f, dialect), ns.schema, dialect))
        ]
        if exact:
            source = spark.read.format("lance_partitioned").option("timeZone", zone)
            frames = [source.option("filter", fs[n]).load(root) for n in exact]
            got = _ids_per_filter(frames)
            routes['.option("filter", f)'] = {n: got[j] for j, n in enumerate(exact)}
        for name, results in routes.items():
            for n, ids in results.items():
                if ids != expected[n]:
                    failures.append(f"{name}: {fs[n]!r}: got {ids}, Spark says {expected[n]}")
        for n, f in enumerate(fs):
            missed = _plan_misses(ns, f, expected[n], spark)
            if missed:
                failures.append(f"plan_scan lost rows {missed} for {f!r}")
        STATS["tables"] += 1
        STATS["filters"] += len(fs)
        STATS["exact"] += len(exact)
    context = f"zone {zone}, layouts {layouts}, rows {rows}"
    assert not failures, context + "\n" + "\n".join(failures)


@st.composite
def cases(draw: st.DrawFn) -> tuple[list[dict[str, Any]], list[str], str, list[str]]:
    rows = draw(gen.rows())
    names = sorted([*gen.LAYOUTS, *gen.EXPRESSION_LAYOUTS])
    layouts = [draw(st.sampled_from(names))]
    if draw(st.integers(0, 3)) == 0:
        layouts.append(draw(st.sampled_from([n for n in names if n != layouts[0]])))
    zone = draw(st.sampled_from(gen.ZONES))
    fs = [draw(gen.filters(rows), label=f"filter{n}") for n in range(FILTERS_PER_TABLE)]
    return rows, layouts, zone, fs


@_settings(10)
@given(case=cases())
def test_every_route_gives_sparks_answer(spark: SparkSession, case: Any) -> None:
    check_table(spark, *case)


@pytest.mark.slow
@_settings(150)
@given(case=cases())
def test_every_route_gives_sparks_answer_many(spark: SparkSession, case: Any) -> None:
    check_table(spark, *case)


def test_the_suite_compares_what_it_says(spark: SparkSession) -> None:
    """Guard: a fixed table under every layout, in every zone, with filters that do match."""
    rows = [
        {**{c: None for c in gen.ARROW.names}, "k": k, "s": s, "i": k, "l": k * 5, "b": k % 2 == 0}
        for k, s in enumerate(["a", "ab", "b", "", "a%b"])
    ]
    for n, layout in enumerate(["identity_string_date", "bucket_long_string", "expression"]):
        zone = gen.ZONES[n % len(gen.ZONES)]
        check_table(spark, rows, [layout], zone, ["s = 'a'", "i >= 2 AND b", "s LIKE 'a%'", "abs(l) > 7"])
