"""Errors under damage are one line naming the partition, file or version and what to do (issue 18, item 7).

Each case damages a real namespace in tmp_path the way another client, a crash or a
careless hand would: a manifest row pointing at a removed dataset version, a malformed
``schema`` property, a truncated or overwritten latest ``__manifest`` version. Expected
rows of the timestamp deletes are written out by hand.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path

import lance
import pyarrow as pa
import pytest

from partitioning import CorruptNamespace, InvalidInput, PartitionedNamespace, PartitioningError
from partitioning.tables.deletes import delete_rows
from partitioning.tables.write import write_table

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("country", pa.string())])


def _one_line(exc: BaseException) -> str:
    text = str(exc)
    assert "\n" not in text, text
    assert ".rs:" not in text, text
    assert len(text) < 1_000, text
    assert exc.__cause__ is not None or exc.__context__ is not None, "not chained with from"
    return text


def _namespace(root: str) -> PartitionedNamespace:
    ns = PartitionedNamespace.create(root, SCHEMA, ["country"])
    write_table(ns, pa.Table.from_pylist([{"id": i, "country": ["US", "CA"][i % 2]} for i in range(10)], schema=SCHEMA))
    write_table(ns, pa.Table.from_pylist([{"id": 10, "country": "US"}], schema=SCHEMA))
    return PartitionedNamespace.load(root)


def _ids(ns: PartitionedNamespace) -> list[int]:
    return sorted(r["id"] for p in ns.partitions() for r in ns.open_table(p).to_table().to_pylist())


# -- a manifest row whose read_version the dataset no longer has ----------------------------------
def test_missing_dataset_version_names_table_version_and_remedy(tmp_path):
    root = str(tmp_path / "ns")
    ns = _namespace(root)
    us = next(p for p in ns.partitions() if p.values["country"] == "US")
    lance.dataset(f"{root}/__manifest").update({"read_version": "99"}, where=f"object_id = '{us.object_id}'")
    ns = PartitionedNamespace.load(root)
    damaged = next(p for p in ns.partitions() if p.object_id == us.object_id)
    assert damaged.read_version == 99
    with pytest.raises(CorruptNamespace) as info:
        ns.open_table(damaged)
    message = _one_line(info.value)
    assert us.location in message and "version 99" in message
    assert "versions 1..2" in message and "versionAsOf" in message
    older = PartitionedNamespace.load(root, manifest_version=ns.manifest_version - 1)
    assert _ids(older) == list(range(11))


# -- a malformed schema property ------------------------------------------------------------------
BAD_SCHEMAS = {
    "type_not_an_object": json.dumps({"fields": [{"name": "id", "type": "int64", "nullable": False}]}),
    "field_without_name": json.dumps({"fields": [{"type": {"type": "int64"}, "nullable": True}]}),
    "fields_not_a_list": json.dumps({"fields": 3}),
    "not_json": "{oops",
    "nested_too_deep": "[" * 100_000,
    "unknown_type": json.dumps(
        {"fields": [{"name": "id", "type": {"type": "int128"}, "nullable": False, "metadata": {"lance:field_id": "0"}}]}
    ),
}


@pytest.mark.parametrize("text", BAD_SCHEMAS.values(), ids=BAD_SCHEMAS.keys())
def test_malformed_schema_property_is_one_line(tmp_path, text):
    root = str(tmp_path / "ns")
    _namespace(root)
    manifest = lance.dataset(f"{root}/__manifest")
    manifest.update_metadata({"schema": text})
    version = lance.dataset(f"{root}/__manifest").version
    with pytest.raises(CorruptNamespace) as info:
        PartitionedNamespace.load(root)
    message = _one_line(info.value)
    assert "'schema'" in message and f"version {version}" in message and "manifest_version" in message
    assert "validation error" not in message
    assert _ids(PartitionedNamespace.load(root, manifest_version=version - 1)) == list(range(11))


def test_schema_type_error_names_the_json_path(tmp_path):
    """The issue's case: '1 validation error for JsonArrowField' said neither where nor what."""
    root = str(tmp_path / "ns")
    _namespace(root)
    lance.dataset(f"{root}/__manifest").update_metadata({"schema": BAD_SCHEMAS["field_without_name"]})
    with pytest.raises(CorruptNamespace) as info:
        PartitionedNamespace.load(root)
    assert "name: Input should be a valid string" in _one_line(info.value)


# -- a damaged latest __manifest version ----------------------------------------------------------
def _latest_manifest_file(root: str) -> Path:
    files = list(Path(root, "__manifest", "_versions").glob("*.manifest"))
    return max(files, key=lambda f: f.stat().st_mtime_ns)


@pytest.mark.parametrize("damage", ["truncate", "garbage"])
def test_damaged_latest_manifest_names_the_version_and_an_older_one(tmp_path, damage):
    root = str(tmp_path / "ns")
    latest = _namespace(root).manifest_version
    path = _latest_manifest_file(root)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2] if damage == "truncate" else os.urandom(len(data)))
    with pytest.raises(PartitioningError) as info:
        PartitionedNamespace.load(root)
    message = _one_line(info.value)
    assert f"version {latest}" in message and f"manifest_version={latest - 1}" in message
    older = PartitionedNamespace.load(root, manifest_version=latest - 1)
    assert older.manifest_version == latest - 1
    assert _ids(older) == list(range(10))


# -- delete_rows with timestamp literals (DataFusion, no Spark) -----------------------------------
TS_ROWS = [{"id": i, "country": "US", "ts": dt.datetime(2024, 1, 1, i, tzinfo=dt.UTC)} for i in range(6)]


@pytest.mark.parametrize("zone", [None, "UTC", "Europe/Paris"])
@pytest.mark.parametrize(
    ("filter_sql", "deleted"),
    [
        ("ts = TIMESTAMP '2024-01-01 03:00:00'", [3]),
        ("ts = TIMESTAMP '2024-01-01T03:00:00Z'", [3]),
        ("ts = '2024-01-01 03:00:00'", [3]),
        ("ts = TIMESTAMP '2024-01-01 03:00:00+02:00'", [1]),
        ("ts < TIMESTAMP '2024-01-01 02:00:00'", [0, 1]),
        ("ts >= TIMESTAMP '2024-01-01 04:00:00' AND ts <= TIMESTAMP '2024-01-01 05:00:00'", [4, 5]),
    ],
)
def test_delete_rows_with_timestamp_literals(tmp_path, zone, filter_sql, deleted):
    """Zone-less literals are UTC and literals with an offset are that instant, whatever
    the column's zone (a timestamp_ntz column holds UTC wall times, as the project writes them)."""
    schema = pa.schema([*SCHEMA, pa.field("ts", pa.timestamp("us", tz=zone))])
    rows = [dict(r, ts=r["ts"].replace(tzinfo=None)) if zone is None else r for r in TS_ROWS]
    root = str(tmp_path / "ns")
    write_table(PartitionedNamespace.create(root, schema, ["country"]), pa.Table.from_pylist(rows, schema=schema))
    delete_rows(root, filter_sql)
    assert _ids(PartitionedNamespace.load(root)) == [i for i in range(6) if i not in deleted]


def test_delete_rows_with_a_bad_timestamp_literal_is_one_line(tmp_path):
    schema = pa.schema([*SCHEMA, pa.field("ts", pa.timestamp("us"))])
    rows = [dict(r, ts=r["ts"].replace(tzinfo=None)) for r in TS_ROWS]
    root = str(tmp_path / "ns")
    write_table(PartitionedNamespace.create(root, schema, ["country"]), pa.Table.from_pylist(rows, schema=schema))
    with pytest.raises(InvalidInput) as info:
        delete_rows(root, "ts = TIMESTAMP 'garbage'")
    message = _one_line(info.value)
    assert "garbage" in message and "Error parsing timestamp" in message
    assert _ids(PartitionedNamespace.load(root)) == list(range(6))
