"""History (issue 15, item 1): every ``__manifest`` commit records what made it, and
``history`` lists them newest first. The oracles are the inputs the test wrote (row counts,
filters, modes), Lance's own version list of ``__manifest`` and its raw transaction files."""

from __future__ import annotations

import datetime as dt
import json

import lance
import pyarrow as pa
import pytest
from pyspark.sql.types import MapType, StringType

from partitioning import PartitionedNamespace
from partitioning.errors import InvalidInput
from partitioning.storage.history import METRICS_KEY, OPERATION_KEY, Operation, history_table
from partitioning.storage.manifest import ManifestStore
from partitioning.tables.compaction import compact_local
from partitioning.tables.deletes import delete_rows, drop_partitions
from partitioning.tables.restore import restore
from partitioning.tables.write import write_table
from pipelines import write_partitioned
from pipelines.maintenance.history import history
from pipelines.search.indexes import create_scalar_index

SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("c", pa.string())])


def _lance_versions(root: str) -> list[tuple[int, dt.datetime]]:
    out = []
    for v in lance.dataset(f"{root}/__manifest").versions():
        t = v["timestamp"]
        out.append((int(v["version"]), t.replace(tzinfo=dt.UTC) if t.tzinfo is None else t.astimezone(dt.UTC)))
    return sorted(out, reverse=True)


def test_every_operation_is_recorded_newest_first(spark, tmp_path) -> None:
    root = str(tmp_path / "ns")
    PartitionedNamespace.create(root, SCHEMA, ["c"])
    first = spark.createDataFrame([(i, "US" if i % 3 else "FR") for i in range(30)], "id long, c string")
    second = spark.createDataFrame([(i, "DE") for i in range(100, 107)], "id long, c string")
    third = spark.createDataFrame([(i, ["US", "FR", "IT"][i % 3]) for i in range(200, 212)], "id long, c string")
    write_partitioned(first, root)
    write_partitioned(second, root, write_id="job-7")
    write_partitioned(third, root, mode="overwrite")
    delete_rows(root, "id = 201")
    compact_local(PartitionedNamespace.load(root))  # rewrites the fragment with the deleted row
    drop_partitions(root, "c = 'IT'")
    PartitionedNamespace.load(root).evolve_partition_spec(["c", "bucket[2](id)"])
    PartitionedNamespace.load(root).add_columns({"note": "string"})
    create_scalar_index(root, "id", spark=spark)
    restored = restore(root, version=5)

    df = history(spark, root)
    assert df.schema["parameters"].dataType == MapType(StringType(), StringType())
    rows = df.collect()
    assert [r.version for r in rows] == [v for v, _ in _lance_versions(root)]
    ops = [r.operation for r in rows]
    assert "UNKNOWN" not in ops
    assert ops == [
        "RESTORE",  # properties staged, the rows that apply them, the properties written out
        "RESTORE",
        "RESTORE",
        "INDEX",  # the build, then the definition (a root property)
        "INDEX",
        "EVOLVE_SCHEMA",
        "EVOLVE_SCHEMA",
        "EVOLVE_SPEC",
        "EVOLVE_SPEC",
        "EVOLVE_SPEC",
        "DROP_PARTITIONS",
        "COMPACT",
        "DELETE",
        "WRITE",
        "WRITE",
        "WRITE",
        "CREATE",  # the first manifest row, then the root properties
        "CREATE",
    ], ops
    by_op: dict[str, list] = {}
    for r in rows:
        by_op.setdefault(r.operation, []).append(r)
    writes = by_op["WRITE"]
    assert [w.parameters["mode"] for w in writes] == ["overwrite", "append", "append"]
    assert [w.metrics["rows_added"] for w in writes] == [third.count(), second.count(), first.count()]
    assert [w.metrics["partitions_created"] for w in writes] == [1, 1, 2]  # IT is new; DE; US and FR
    assert writes[0].metrics["partitions_removed"] == 1  # DE is gone after the overwrite
    assert writes[1].parameters["write_id"] == "job-7" and "write_id" not in writes[2].parameters
    assert all(w.metrics["bytes_added"] > 0 and w.metrics["duration_ms"] >= 0 for w in writes)
    assert by_op["DELETE"][0].parameters == {"filter": "id = 201"}
    assert by_op["DELETE"][0].metrics["rows_removed"] == 1
    assert by_op["DROP_PARTITIONS"][0].parameters == {"filter": "c = 'IT'"}
    assert by_op["DROP_PARTITIONS"][0].metrics["partitions_removed"] == 1
    assert by_op["COMPACT"][0].metrics["partitions_touched"] >= 1
    assert {r.parameters["spec_id"] for r in by_op["EVOLVE_SPEC"]} == {"2"}
    assert {r.parameters["change"] for r in by_op["EVOLVE_SCHEMA"]} == {"add_columns"}
    assert by_op["INDEX"][0].metrics["partitions_touched"] == 2  # US and FR (IT dropped)
    assert [r.parameters for r in by_op["RESTORE"]] == [
        {"version": "5", "step": "finish"},
        {"version": "5"},
        {"version": "5", "step": "stage"},
    ]
    assert by_op["RESTORE"][0].version == restored.manifest_version

    # the same from the Spark-free API, limited, and straight from Lance's transaction file
    table = PartitionedNamespace.load(root).history(limit=3)
    assert table.column("version").to_pylist() == [r.version for r in rows[:3]]
    assert table.schema.field("timestamp").type == pa.timestamp("us", tz="UTC")
    props = lance.dataset(f"{root}/__manifest").read_transaction(writes[0].version).transaction_properties
    assert props[OPERATION_KEY] == "WRITE" and json.loads(props[METRICS_KEY])["rows_added"] == 12


def test_commits_made_before_history_are_unknown(tmp_path) -> None:
    """A commit with no recorded operation (made by ManifestStore directly, as before this
    change, or by plain Lance) is UNKNOWN with its own time, next to recorded ones."""
    root = str(tmp_path / "ns")
    ns = PartitionedNamespace.create(root, SCHEMA, ["c"])
    write_table(ns, pa.table({"id": pa.array([1, 2], pa.int64()), "c": ["a", "b"]}))
    store = ManifestStore(root)
    ds = store.dataset()
    row = ds.to_table(filter="object_id = 'v1'")
    store.merge_rows(ds, row)  # the pre-history commit path
    lance.dataset(f"{root}/__manifest").update_metadata({"note": "by hand"})  # plain Lance
    write_table(ns.refresh(), pa.table({"id": pa.array([3], pa.int64()), "c": ["a"]}))
    table = ns.history()
    versions = _lance_versions(root)
    assert table.column("version").to_pylist() == [v for v, _ in versions]
    assert [t.astimezone(dt.UTC) for t in table.column("timestamp").to_pylist()] == [t for _, t in versions]
    assert table.column("operation").to_pylist() == ["WRITE", "UNKNOWN", "UNKNOWN", "WRITE", "CREATE", "CREATE"]
    params = [dict(p) for p in table.column("parameters").to_pylist()]
    assert params[1] == {"lance_operation": "UpdateConfig"} and params[2] == {"lance_operation": "Update"}
    assert [dict(m) for m in table.column("metrics").to_pylist()][1] == {}


def test_operation_is_frozen_and_checked() -> None:
    op = Operation("WRITE", {"mode": "append"}, {"rows_added": 3})
    with pytest.raises(TypeError):
        op.parameters["mode"] = "x"  # type: ignore[index]
    assert Operation("DELETE").parameters == {} and Operation("DELETE").metrics == {}
    assert Operation.from_properties(op.properties()) == op
    with pytest.raises(InvalidInput, match="unknown operation 'WRTIE'"):
        Operation("WRTIE")
    with pytest.raises(InvalidInput, match="metric 'rows' of operation WRITE must be a number"):
        Operation("WRITE", {}, {"rows": "3"})  # type: ignore[dict-item]
    with pytest.raises(InvalidInput, match="history limit must be a positive integer, got 0"):
        history_table("/nonexistent", limit=0)
