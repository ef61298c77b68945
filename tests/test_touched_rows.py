"""Commits decode only the ``__manifest`` rows they touch, and partition values are bounded (issue 19).

Oracles: ``__manifest`` read back with Lance's own reader and matched in plain Python
here; row counts read with Lance per partition table.
"""

from __future__ import annotations

import datetime as dt
import decimal
import gc
import math
import weakref
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from wide_namespace import START, day_rows, wide_namespace

import partitioning.state.loading as state_module
from partitioning import PartitionedNamespace, TableCommit
from partitioning.errors import InvalidInput
from partitioning.state.commit_rows import MAX_PARTITION_VALUE_BYTES
from partitioning.state.loading import clear_state_cache
from partitioning.tables.write import write_table

SCHEMA = pa.schema([("day", pa.date32()), ("country", pa.string()), ("v", pa.int64())])


def _manifest(root: str) -> list[dict[str, Any]]:
    return sorted(lance.dataset(f"{root}/__manifest").to_table().to_pylist(), key=lambda r: r["object_id"])


def _rows(t: pa.Table) -> list[dict[str, Any]]:
    return sorted(t.to_pylist(), key=lambda r: r["object_id"])


def _wide(tmp_path: Path, partitions: int) -> PartitionedNamespace:
    """A namespace with ``partitions`` tables (one written, the others recorded) in two levels."""
    return PartitionedNamespace.load(wide_namespace(tmp_path, partitions))


def _data(day: dt.date, country: str, n: int) -> pa.Table:
    return day_rows(day, country, n)


def _count(ns: PartitionedNamespace, day: dt.date, country: str) -> int:
    table = ns.find_partition(1, {"day": day, "country": country})
    assert table is not None
    return lance.dataset(table.uri, version=table.read_version).count_rows()


# -- an append decodes only its own rows, and its state is what Lance reads back -----------------------
def test_an_append_decodes_only_the_rows_it_touches(tmp_path: Path) -> None:
    ns = _wide(tmp_path, 400)
    state = ns._state
    write_table(ns, _data(START, "C0", 1000))
    write_table(ns, _data(START + dt.timedelta(days=300), "C0", 10))  # a new partition
    for decoded in ("rows", "rows_by_id", "tables", "by_key"):
        assert decoded not in state.__dict__ and decoded not in ns._state.__dict__, decoded
    assert _rows(ns._state.manifest) == _manifest(ns.root)
    fresh = PartitionedNamespace.load(ns.root)
    assert _count(fresh, START, "C0") == 1003
    assert _count(fresh, START + dt.timedelta(days=300), "C0") == 10
    assert len(fresh.partitions()) == 401


def test_the_state_after_each_kind_of_commit_is_what_lance_reads_back(tmp_path: Path) -> None:
    ns = _wide(tmp_path, 50)
    write_table(ns, _data(START + dt.timedelta(days=100), "C0", 5), mode="overwrite_partitions")
    assert _rows(ns._state.manifest) == _manifest(ns.root)
    doomed = [t.object_id for t in ns.partitions()[:3]]
    ns.remove_tables(doomed)
    assert _rows(ns._state.manifest) == _manifest(ns.root)
    assert not set(doomed) & {r["object_id"] for r in _manifest(ns.root)}
    write_table(ns, _data(START, "Z9", 7), mode="overwrite")
    assert _rows(ns._state.manifest) == _manifest(ns.root)
    assert [t.values for t in PartitionedNamespace.load(ns.root).partitions()] == [{"day": START, "country": "Z9"}]


def test_a_commit_after_another_writers_commit_reads_the_manifest_back(tmp_path: Path) -> None:
    ns = _wide(tmp_path, 30)
    other = PartitionedNamespace.load(ns.root)
    write_table(other, _data(START, "C0", 2))
    write_table(ns, _data(START + dt.timedelta(days=200), "C0", 4))
    assert _rows(ns._state.manifest) == _manifest(ns.root)
    fresh = PartitionedNamespace.load(ns.root)
    assert _count(fresh, START, "C0") == 5
    assert _count(fresh, START + dt.timedelta(days=200), "C0") == 4


def test_a_long_running_writer_does_not_keep_every_older_manifest(tmp_path: Path) -> None:
    """Each commit's state is derived from the one before; once computed it must let that one go."""
    ns = _wide(tmp_path, 20)
    first = weakref.ref(ns._state)
    for i in range(4):
        write_table(ns, _data(START + dt.timedelta(days=300 + i), "C0", 1))
    clear_state_cache()
    gc.collect()
    assert first() is None
    assert _rows(ns._state.manifest) == _manifest(ns.root)


# -- lookups match a brute-force scan of the manifest, for every partition value type -------------------
TYPES = {
    "string": (pa.string(), st.text(max_size=4)),
    "int64": (pa.int64(), st.integers(-3, 3)),
    "int32": (pa.int32(), st.integers(-3, 3)),
    "date": (pa.date32(), st.dates(dt.date(1969, 12, 30), dt.date(1970, 1, 2))),
    "bool": (pa.bool_(), st.booleans()),
    "binary": (pa.binary(), st.binary(max_size=3)),
    "double": (pa.float64(), st.sampled_from([0.0, -0.0, 1.5, math.nan, -math.inf])),
    "ts": (
        pa.timestamp("us", tz="UTC"),
        st.datetimes(dt.datetime(2020, 1, 1), dt.datetime(2020, 1, 1, 0, 0, 3), timezones=st.just(dt.UTC)),
    ),
    "dec": (pa.decimal128(5, 2), st.sampled_from([decimal.Decimal("1.00"), decimal.Decimal("-2.50")])),
}


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or a == b
    return a == b


@pytest.mark.parametrize("lean", [False, True], ids=["whole", "lean"])
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_find_partitions_matches_a_brute_force_scan(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch, lean: bool, data: Any
) -> None:
    if lean:  # the version read a few columns and rows at a time (partitioning.state.lean_rows)
        monkeypatch.setattr(state_module, "LEAN_MIN_ROWS", 0)
    first, second = data.draw(st.lists(st.sampled_from(sorted(TYPES)), min_size=2, max_size=2, unique=True))
    schema = pa.schema([("a", TYPES[first][0]), ("b", TYPES[second][0]), ("v", pa.int64())])
    root = str(tmp_path_factory.mktemp("lookup") / "ns")
    ns = PartitionedNamespace.create(root, schema, ["a", "b"])
    value = st.tuples(st.none() | TYPES[first][1], st.none() | TYPES[second][1])
    stored = data.draw(st.lists(value, max_size=12))
    commits, seen = [], []
    for a, b in stored:
        if any(_same(a, x) and _same(b, y) for x, y in seen):
            continue
        seen.append((a, b))
        commits.append(TableCommit(1, {"a": a, "b": b}, ns.new_table_location(1, {"a": a, "b": b}), 1))
    ns.commit_tables(commits)
    probes = seen + data.draw(st.lists(value, max_size=6))
    found = PartitionedNamespace.load(root).find_partitions(1, probes)
    rows = [r for r in _manifest(root) if r["object_type"] == "table"]
    for a, b in probes:
        expected = [
            r["object_id"]
            for r in rows
            if _same(r["partition_field_a"], 0.0 if a == 0.0 and isinstance(a, float) else a)
            and _same(r["partition_field_b"], 0.0 if b == 0.0 and isinstance(b, float) else b)
        ]
        assert len(expected) <= 1
        key = tuple(0.0 if isinstance(v, float) and v == 0.0 else v for v in (a, b))
        hit = next((t for k, t in found.items() if all(_same(x, y) for x, y in zip(k, key, strict=True))), None)
        assert (hit.object_id if hit is not None else None) == (expected[0] if expected else None), (a, b)


# -- partition values are bounded -------------------------------------------------------------------------
def test_a_partition_value_over_the_limit_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    ns = PartitionedNamespace.create(str(tmp_path / "ns"), SCHEMA, ["country"])
    write_table(ns, _data(START, "US", 2))
    before = (ns.manifest_version, sorted(p.name for p in (tmp_path / "ns").iterdir()))
    at_limit = "é" * (MAX_PARTITION_VALUE_BYTES // 2)  # 2 bytes each in UTF-8
    over = at_limit + "x"
    with pytest.raises(InvalidInput) as info:
        write_table(ns, _data(START, over, 1))
    message = str(info.value)
    assert "\n" not in message and "'country'" in message and "1,025 bytes" in message and "1,024" in message
    after = PartitionedNamespace.load(ns.root)
    assert (after.manifest_version, sorted(p.name for p in (tmp_path / "ns").iterdir())) == before
    write_table(ns, _data(START, at_limit, 1))
    assert [
        t.values["country"] for t in PartitionedNamespace.load(ns.root).partitions() if t.values["country"] != "US"
    ] == [at_limit]
    with pytest.raises(InvalidInput, match="1,025 bytes"):
        ns.commit_tables([TableCommit(1, {"country": over}, ns.new_table_location(1, {"country": over}), 1)])


def test_a_binary_partition_value_over_the_limit_is_refused(tmp_path: Path) -> None:
    schema = pa.schema([("k", pa.binary()), ("v", pa.int64())])
    ns = PartitionedNamespace.create(str(tmp_path / "ns"), schema, ["k"])
    with pytest.raises(InvalidInput, match=r"partition field 'k': a value of 2,000 bytes"):
        write_table(ns, pa.table({"k": [b"\x00" * 2000], "v": [1]}, schema=schema))
    assert PartitionedNamespace.load(ns.root).partitions() == []


def test_a_spark_write_with_a_partition_value_over_the_limit_fails_in_one_line(spark, tmp_path: Path) -> None:
    from pipelines.write.dataframe import write_partitioned

    root = str(tmp_path / "ns")
    PartitionedNamespace.create(root, SCHEMA, ["country"])
    df = spark.createDataFrame([(START, "x" * 5000, 1), (START, "US", 2)], "day date, country string, v long")
    with pytest.raises(InvalidInput) as info:
        write_partitioned(df, root, mode="append")
    assert "\n" not in str(info.value) and "'country'" in str(info.value) and "5,000 bytes" in str(info.value)
    assert PartitionedNamespace.load(root).partitions() == []


def test_a_new_table_committed_again_by_a_retry_holds_the_retry_rows_once(tmp_path):
    """A new partition's first commit needs no look at what is there: when a retried write
    commits the same new location again, Lance's Overwrite makes the next version with
    exactly the retry's fragments (read back with Lance at both versions)."""
    from partitioning.spec.schema import NamespaceSchema
    from partitioning.storage.datasets import commit_version, write_new_fragments

    arrow = pa.schema([("id", pa.int64()), ("c", pa.string())])
    schema = NamespaceSchema.from_arrow(arrow)
    uri = str(tmp_path / "t")
    rows = pa.table({"id": [1, 2], "c": ["US", "US"]}, schema=arrow)
    first = commit_version(uri, schema, write_new_fragments(rows, uri, schema), None)
    again = commit_version(uri, schema, write_new_fragments(rows.slice(0, 1), uri, schema), None)
    assert (first, again) == (1, 2)
    assert lance.dataset(uri, version=1).to_table().column("id").to_pylist() == [1, 2]
    assert lance.dataset(uri, version=2).to_table().column("id").to_pylist() == [1]
