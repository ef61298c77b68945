"""Partition spec evolution: versioned specs, field-id reuse, writes and pruned reads across versions."""

from __future__ import annotations

import datetime as dt
import json

import lance
import pyarrow as pa
import pytest
from lance.namespace import DirectoryNamespace
from lance_namespace import ListNamespacesRequest

from partitioning import PartitionedNamespace, PartitionField, SpecError
from partitioning.tables.write import write_table

SCHEMA = pa.schema(
    [pa.field("id", pa.int64(), nullable=False), pa.field("event_date", pa.date32()), pa.field("country", pa.string())]
)
D10, D11, OLD = dt.date(2025, 12, 10), dt.date(2025, 12, 11), dt.date(2024, 6, 1)


def _rows(ids, dates, countries) -> pa.Table:
    return pa.table({"id": list(ids), "event_date": list(dates), "country": list(countries)}, schema=SCHEMA)


@pytest.fixture
def evolved(tmp_path):
    """The spec's example: v1 identity(event_date), then v2 year(event_date) + identity(country)."""
    root = str(tmp_path / "ns")
    ns = PartitionedNamespace.create(root, SCHEMA, ["event_date"])
    write_table(ns, _rows([1, 2, 3], [D10, D11, OLD], ["US", "CN", "US"]))
    v1_tables = {p.object_id: (p.location, p.read_version) for p in ns.partitions()}
    ns.evolve_partition_spec(["year(event_date) AS event_year", "country"])
    write_table(ns, _rows([4, 5, 6, 7], [D10, D10, D11, OLD], ["US", "CN", "US", None]))
    return root, v1_tables


def test_evolution_writes_the_new_spec_version(evolved):
    root, _ = evolved
    ds = lance.dataset(f"{root}/__manifest")
    assert sorted(ds.metadata) == ["partition_spec_v1", "partition_spec_v2", "schema"]
    assert json.loads(ds.metadata["partition_spec_v2"]) == {
        "id": 2,
        "fields": [
            {
                "field_id": "event_year",
                "source_ids": [1],
                "transform": {"type": "year"},
                "result_type": {"type": "int32"},
            },
            {
                "field_id": "country",
                "source_ids": [2],
                "transform": {"type": "identity"},
                "result_type": {"type": "utf8"},
            },
        ],
    }
    assert ds.schema.field("partition_field_event_year").type == pa.int32()
    assert ds.schema.field("partition_field_country").type == pa.string()
    assert ds.schema.field("partition_field_event_date").type == pa.date32()
    v2 = ds.to_table(filter="object_id = 'v2'").to_pylist()
    assert [(r["object_type"], r["metadata"]) for r in v2] == [("namespace", "{}")]
    listed = DirectoryNamespace(root=root).list_namespaces(ListNamespacesRequest(id=[])).namespaces
    assert sorted(listed) == ["v1", "v2"]
    ns = PartitionedNamespace.load(root)
    assert ns.current_spec.spec_id == 2
    assert json.loads(ns.describe_namespace(["v2"])["partition_spec"])["id"] == 2


def test_new_writes_use_the_new_spec_and_old_partitions_stay(evolved):
    root, v1_tables = evolved
    ns = PartitionedNamespace.load(root)
    v1 = {p.object_id: (p.location, p.read_version) for p in ns.partitions() if p.spec_id == 1}
    assert v1 == v1_tables
    v2 = sorted((p.values["event_year"], p.values["country"]) for p in ns.partitions() if p.spec_id == 2)
    assert v2 == [(2024, None), (2025, "CN"), (2025, "US")]
    ids = {}
    for p in ns.partitions():
        ids[p.object_id] = sorted(ns.open_table(p).to_table().column("id").to_pylist())
    assert sorted(i for v in ids.values() for i in v) == [1, 2, 3, 4, 5, 6, 7]


def test_the_spec_example_prunes_per_version(evolved):
    """event_date = 2025-12-10 scans the exact v1 table and the 2025 v2 tables; country prunes v2 only."""
    root, _ = evolved
    ns = PartitionedNamespace.load(root)
    by_id = {p.object_id: p for p in ns.partitions()}

    def scanned(f):
        return sorted((t.spec_id, tuple(by_id[t.object_id].values.values())) for t in ns.plan_scan(f))

    assert scanned("event_date = DATE '2025-12-10'") == [(1, (D10,)), (2, (2025, "CN")), (2, (2025, "US"))]
    assert scanned("event_date = DATE '2025-12-10' AND country = 'US'") == [(1, (D10,)), (2, (2025, "US"))]
    plan = ns.plan_scan("event_date = DATE '2025-12-10' AND country = 'US'")
    assert plan.summary.startswith("lance_partitioned: scanning 2 of 6 partition tables (spec v1: 1/3, spec v2: 1/3)")
    assert plan[0].residual == "event_date = DATE '2025-12-10' AND country = 'US'"


def test_field_ids_are_reused_for_the_same_signature(evolved):
    root, _ = evolved
    ns = PartitionedNamespace.load(root)
    v3 = ns.evolve_partition_spec(["event_date AS renamed_but_same", "bucket[4](id)"])
    assert [f.field_id for f in v3.fields] == ["event_date", "id_bucket"]
    v4 = ns.evolve_partition_spec([PartitionField("event_year", [1], "year")])
    assert [f.field_id for f in v4.fields] == ["event_year"]
    columns = lance.dataset(f"{root}/__manifest").schema.names
    assert [c for c in columns if c.startswith("partition_field_")] == [
        "partition_field_event_date",
        "partition_field_event_year",
        "partition_field_country",
        "partition_field_id_bucket",
    ]


def test_reusing_an_id_with_another_signature_is_one_line(evolved):
    root, _ = evolved
    ns = PartitionedNamespace.load(root)
    with pytest.raises(SpecError) as info:
        ns.evolve_partition_spec(["month(event_date) AS event_year"])
    message = str(info.value)
    assert message == (
        "field_id 'event_year' already means event_year=year(1) in an earlier spec; a field with a different "
        "source or transform needs a new id (e.g. 'event_year_v3' via 'AS')"
    )
    assert sorted(PartitionedNamespace.load(root).specs) == [1, 2]


def test_dropping_a_field_and_writing_again(tmp_path):
    root = str(tmp_path / "ns")
    ns = PartitionedNamespace.create(root, SCHEMA, ["country", "bucket[4](id)"])
    write_table(ns, _rows([1, 2], [D10, D11], ["US", "US"]))
    v2 = ns.evolve_partition_spec(["country"])
    assert [f.field_id for f in v2.fields] == ["country"]
    write_table(ns, _rows([3, 4], [D10, D11], ["US", "CN"]))
    v2_tables = [p for p in ns.partitions() if p.spec_id == 2]
    assert sorted(p.values["country"] for p in v2_tables) == ["CN", "US"]
    # by partition values: v2 has no bucket field, so its US table may hold id 1
    plan = ns.plan_scan("country = 'US' AND id = 1", column_stats=False)
    buckets = {t.spec_id for t in plan}
    assert buckets == {1, 2}
    assert sum(1 for t in plan if t.spec_id == 1) == 1
    # its column statistics say it holds ids 3 .. 3 only
    assert [t.spec_id for t in ns.plan_scan("country = 'US' AND id = 1")] == [1]
    assert [t.spec_id for t in ns.plan_scan("country = 'US' AND id = 3")] == [2]


def test_describe_namespace_covers_every_spec_version_and_their_partitions(evolved):
    """SPEC-NOTES 17 on an evolved root: each v<N> gives its spec, each level its own value."""
    root, _ = evolved
    ns = PartitionedNamespace.load(root)
    for spec_id, spec in ns.specs.items():
        assert json.loads(ns.describe_namespace([f"v{spec_id}"])["partition_spec"]) == json.loads(spec.to_json())
    v1_days = set()
    v2_levels = set()
    for p in ns.partitions():
        levels = p.object_id.split("$")[:-1]
        props = [ns.describe_namespace(levels[: k + 1]) for k in range(1, len(levels))]
        if p.spec_id == 1:
            v1_days.add(props[0]["partition.event_date"])
        else:
            year = props[0]["partition.event_year"]
            country = props[1].get("partition.country")
            v2_levels.add((year, country))
            assert set(props[1]) <= {"partition.country"}
    assert v1_days == {"2025-12-10", "2025-12-11", "2024-06-01"}
    assert v2_levels == {("2025", "US"), ("2025", "CN"), ("2024", None)}
