"""Planning from Arrow columns and the cache of decoded ``__manifest`` versions (issue 16), Spark-free.

Namespaces are real ``__manifest`` Lance tables in tmp_path (planning opens no partition
table, so the tables are recorded with ``commit_tables`` and never written). Expected
plans come from a plain-Python evaluation of the filter over each table's partition
values (``PartitionedNamespace.partitions()``, the object path), never from the pruner.
"""

from __future__ import annotations

import datetime as dt
import shutil
import tempfile
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from partitioning import PartitionedNamespace, TableCommit
from partitioning.spec.partition_spec import PartitionSpec
from partitioning.state import loading as state_module
from partitioning.state.scan import table_rows_by_spec
from partitioning.storage.locations import spec_id_of
from partitioning.storage.manifest import manifest_schema

SCHEMA = pa.schema([("a", pa.int64()), ("b", pa.string()), ("c", pa.date32())])
COLUMNS = ("a", "b", "c")
DOMAIN: dict[str, list[Any]] = {
    "a": [None, -1, 0, 1, 2, 3],
    "b": [None, "", "x", "xy", "y"],
    "c": [None, dt.date(2025, 1, 1), dt.date(2025, 1, 2), dt.date(2025, 3, 1)],
}


def _commit(ns: PartitionedNamespace, spec_id: int, rows: Sequence[Mapping[str, Any]]) -> None:
    ns.commit_tables([TableCommit(spec_id, dict(v), ns.new_table_location(spec_id, v), 1) for v in rows])


# -- the cache of decoded versions ----------------------------------------------------------------
def test_every_load_sees_the_latest_version_and_a_version_decodes_once(tmp_path: Path) -> None:
    root = str(tmp_path / "ns")
    ns = PartitionedNamespace.create(root, SCHEMA, ["a"])
    _commit(ns, 1, [{"a": 1}])
    first = PartitionedNamespace.load(root)
    again = PartitionedNamespace.load(root)
    assert again._state is first._state
    assert [p.values["a"] for p in again.partitions()] == [1]

    _commit(ns, 1, [{"a": 2}])
    latest = PartitionedNamespace.load(root)
    assert latest.manifest_version == first.manifest_version + 1
    assert sorted(p.values["a"] for p in latest.partitions()) == [1, 2]
    assert len(latest.plan_scan("a = 2")) == 1 and len(first.plan_scan("a = 2")) == 0

    older = PartitionedNamespace.load(root, manifest_version=first.manifest_version)
    assert older._state is first._state
    assert [p.values["a"] for p in older.partitions()] == [1]


def test_a_namespace_created_again_at_the_same_root_is_not_served_from_the_cache(tmp_path: Path) -> None:
    """Same root, same version numbers, other content: the cache key is the version's content."""
    root = str(tmp_path / "ns")
    ns = PartitionedNamespace.create(root, SCHEMA, ["a"])
    _commit(ns, 1, [{"a": 1}])
    before = PartitionedNamespace.load(root)
    assert len(before.plan_scan("a = 1")) == 1
    shutil.rmtree(root)
    ns = PartitionedNamespace.create(root, SCHEMA, ["a"])
    _commit(ns, 1, [{"a": 7}])
    after = PartitionedNamespace.load(root)
    assert after.manifest_version == before.manifest_version
    assert [p.values["a"] for p in after.partitions()] == [7]
    assert len(after.plan_scan("a = 1")) == 0
    assert [t.object_id for t in after.plan_scan("a = 7")] == [p.object_id for p in after.partitions()]


def test_the_cache_is_bounded(tmp_path: Path) -> None:
    root = str(tmp_path / "ns")
    ns = PartitionedNamespace.create(root, SCHEMA, ["a"])
    for i in range(state_module.STATE_CACHE_SIZE + 2):
        _commit(ns, 1, [{"a": i}])
        PartitionedNamespace.load(root)
    assert len(state_module._cache) == state_module.STATE_CACHE_SIZE
    assert all(s.version > ns.manifest_version - state_module.STATE_CACHE_SIZE for s in state_module._cache.values())


def test_a_damaged_version_is_refused_on_every_load(tmp_path: Path) -> None:
    import lance

    from partitioning import CorruptNamespace

    root = str(tmp_path / "ns")
    PartitionedNamespace.create(root, SCHEMA, ["a"])
    lance.dataset(f"{root}/__manifest").update_metadata({"schema": "{oops"})
    for _ in range(2):
        with pytest.raises(CorruptNamespace, match="'schema'"):
            PartitionedNamespace.load(root)


# -- which manifest rows are the tables of which spec version -------------------------------------
def test_table_rows_by_spec_follows_spec_id_of() -> None:
    """Namespace rows are not tables; ``v01$`` is spec 1 (as ``spec_id_of`` reads it), ``v10$`` is not."""
    field = {"field_id": "a", "source_ids": [0], "transform": {"type": "identity"}, "result_type": {"type": "int64"}}
    spec1, spec10 = (PartitionSpec.coerce({"id": i, "fields": [field]}) for i in (1, 10))
    ids = [
        ("v1", "namespace"),
        ("v1$p", "namespace"),
        ("v1$p$t", "table"),
        ("v01$q", "table"),
        ("v10$r", "table"),
        ("v1x$s", "table"),
        ("w1$u", "table"),
        ("v2$v", "table"),
    ]
    schema = manifest_schema({"a": pa.int64()})
    rows = [dict.fromkeys(schema.names) | {"object_id": i, "object_type": k, "location": f"0_{i}"} for i, k in ids]
    manifest = pa.Table.from_pylist(rows, schema=schema)
    got = table_rows_by_spec(manifest, {1: spec1, 10: spec10})
    expected = {
        s: [i for i, k in ids if k == "table" and spec_id_of(i) == s] for s in (1, 10)
    }  # the object path's reading
    assert (
        {s: t.column("object_id").to_pylist() for s, t in got.items()}
        == expected
        == {
            1: ["v1$p$t", "v01$q"],
            10: ["v10$r"],
        }
    )
    assert got[1].column_names == [
        *("object_id", "location", "read_version", "read_branch", "read_tag"),
        "metadata",
        "partition_field_a",
    ]


# -- the Arrow plan equals a plain-Python evaluation over the object path -------------------------
OPS = ("=", "!=", "<", "<=", ">", ">=")


def _sql_literal(v: Any) -> str:
    if isinstance(v, dt.date):
        return f"DATE '{v.isoformat()}'"
    if isinstance(v, str):
        return f"'{v}'"
    return str(v)


def _leaf(column: str) -> st.SearchStrategy[tuple[Any, ...]]:
    values = st.sampled_from([v for v in DOMAIN[column] if v is not None])
    return st.one_of(
        st.tuples(st.just("cmp"), st.just(column), st.sampled_from(OPS), values),
        st.tuples(st.just("in"), st.just(column), st.lists(values, min_size=1, max_size=3)),
        st.tuples(st.just("null"), st.just(column), st.booleans()),
    )


FILTERS = st.recursive(
    st.sampled_from(COLUMNS).flatmap(_leaf),
    lambda children: st.tuples(st.sampled_from(["and", "or"]), st.lists(children, min_size=2, max_size=3)),
    max_leaves=6,
)


def _sql(node: tuple[Any, ...]) -> str:
    kind = node[0]
    if kind == "cmp":
        return f"{node[1]} {node[2]} {_sql_literal(node[3])}"
    if kind == "in":
        return f"{node[1]} IN ({', '.join(_sql_literal(v) for v in node[2])})"
    if kind == "null":
        return f"{node[1]} IS {'' if node[2] else 'NOT '}NULL"
    return "(" + f" {kind.upper()} ".join(_sql(c) for c in node[1]) + ")"


def _may_match(node: tuple[Any, ...], values: Mapping[str, Any]) -> bool:
    """Can a row in a partition with these identity ``values`` satisfy ``node``? A column the spec
    does not partition by can hold anything; a NULL partition value makes a comparison unknown."""
    kind = node[0]
    if kind == "and":
        return all(_may_match(c, values) for c in node[1])
    if kind == "or":
        return any(_may_match(c, values) for c in node[1])
    column = node[1]
    if column not in values:
        return True
    v = values[column]
    if kind == "null":
        return (v is None) == node[2]
    if v is None:
        return False
    if kind == "in":
        return v in node[2]
    lit = node[3]
    return {
        "=": v == lit,
        "!=": v != lit,
        "<": v < lit,
        "<=": v <= lit,
        ">": v > lit,
        ">=": v >= lit,
    }[node[2]]


def _subsets() -> st.SearchStrategy[list[str]]:
    return st.lists(st.sampled_from(COLUMNS), min_size=1, max_size=3, unique=True)


@st.composite
def _namespaces(draw: st.DrawFn) -> tuple[list[list[str]], list[list[dict[str, Any]]]]:
    specs = draw(st.lists(_subsets(), min_size=1, max_size=2))
    tables = []
    for columns in specs:
        keys = st.tuples(*(st.sampled_from(DOMAIN[c]) for c in columns))
        chosen = draw(st.lists(keys, max_size=12, unique=True))
        tables.append([dict(zip(columns, k, strict=True)) for k in chosen])
    return specs, tables


@settings(max_examples=30, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(namespace=_namespaces(), filters=st.lists(FILTERS, min_size=1, max_size=4))
def test_arrow_plan_equals_python_evaluation_over_partitions(namespace: Any, filters: Any) -> None:
    specs, tables = namespace
    with tempfile.TemporaryDirectory() as tmp:
        root = str(Path(tmp) / "ns")
        ns = PartitionedNamespace.create(root, SCHEMA, specs[0])
        for spec_id, (columns, rows) in enumerate(zip(specs, tables, strict=True), start=1):
            if spec_id > 1:
                ns.evolve_partition_spec(columns)
            if rows:
                _commit(ns, spec_id, rows)
        for cold in (False, True):
            if cold:
                state_module.clear_state_cache()
            loaded = PartitionedNamespace.load(root)
            partitions = loaded.partitions()
            assert len(partitions) == sum(len(rows) for rows in tables)
            everything = loaded.plan_scan(None)
            assert [t.object_id for t in everything] == [p.object_id for p in partitions]
            assert everything.total == {s: n for s, n in Counter(p.spec_id for p in partitions).items()} | {
                s: 0 for s in loaded.specs if not any(p.spec_id == s for p in partitions)
            }
            for node in filters:
                plan = loaded.plan_scan(_sql(node))
                expected = [p for p in partitions if _may_match(node, p.values)]
                assert [t.object_id for t in plan] == [p.object_id for p in expected], _sql(node)
                assert [(t.location, t.spec_id, t.read_version) for t in plan] == [
                    (p.location, p.spec_id, p.read_version) for p in expected
                ]
