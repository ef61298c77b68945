"""PartitionedNamespace on real Lance datasets: __manifest layout (SPEC-NOTES 1, 4, 5),
multi-partition commit (16), runtime properties (17), errors (18), pylance interop (6).
"""

from __future__ import annotations

import datetime as dt
import json
import re
import shutil

import lance
import pyarrow as pa
import pytest
from lance.namespace import DirectoryNamespace
from lance_namespace import (
    CreateNamespaceRequest,
    DescribeNamespaceRequest,
    DescribeTableRequest,
    ListNamespacesRequest,
    ListTablesRequest,
)
from lance_namespace.errors import (
    ConcurrentModificationError,
    NamespaceAlreadyExistsError,
    NamespaceNotFoundError,
)

from partitioning.errors import (
    ConcurrentModification,
    CorruptNamespace,
    NamespaceAlreadyExists,
    NamespaceNotFound,
)
from partitioning.namespace import PartitionedNamespace, TableCommit
from partitioning.spec.partition_spec import PartitionSpec

LOCATION_RE = re.compile(r"^[0-9a-f]{8}_v1(\$[a-z0-9]{16})+\$dataset$")
NAME_RE = re.compile(r"^[a-z0-9]{16}$")

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("event_date", pa.date32()),
        pa.field("country", pa.string()),
    ]
)
SPEC_V1 = {
    "id": 1,
    "fields": [
        {
            "field_id": "event_date",
            "source_ids": [1],
            "transform": {"type": "identity"},
            "result_type": {"type": "date32"},
        },
        {"field_id": "country", "source_ids": [2], "transform": {"type": "identity"}, "result_type": {"type": "utf8"}},
    ],
}
D10 = dt.date(2025, 12, 10)
D11 = dt.date(2025, 12, 11)
PARTITION_VALUES = [
    {"event_date": D10, "country": "US"},
    {"event_date": D10, "country": "a$b/c=d e"},
    {"event_date": D10, "country": None},
    {"event_date": D11, "country": ""},
    {"event_date": D11, "country": "München/漢字 $=/"},
    {"event_date": None, "country": None},
    {"event_date": None, "country": "US"},
]


def _manifest(root: str) -> lance.LanceDataset:
    return lance.dataset(root + "/__manifest")


def _rows(root: str) -> dict[str, dict]:
    return {r["object_id"]: r for r in _manifest(root).to_table().to_pylist()}


def _partition_table(values: dict, ids: list[int]) -> pa.Table:
    n = len(ids)
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "event_date": pa.array([values["event_date"]] * n, pa.date32()),
            "country": pa.array([values["country"]] * n, pa.string()),
        },
        schema=SCHEMA,
    )


def _one_line(err: BaseException) -> str:
    message = str(err)
    assert message.strip()
    assert "\n" not in message.strip(), message
    return message


@pytest.fixture
def root(tmp_path) -> str:
    return str(tmp_path / "ns")


@pytest.fixture
def empty_ns(root) -> PartitionedNamespace:
    return PartitionedNamespace.create(root, SCHEMA, json.dumps(SPEC_V1))


@pytest.fixture
def filled(empty_ns, root):
    """The namespace after ONE commit of every PARTITION_VALUES partition."""
    ns = empty_ns
    written = []
    commits = []
    for i, values in enumerate(PARTITION_VALUES):
        loc = ns.new_table_location(1, values)
        data = _partition_table(values, [10 * i, 10 * i + 1])
        ds = lance.write_dataset(data, root + "/" + loc)
        written.append((values, loc, ds.version, data))
        commits.append(TableCommit(1, values, loc, ds.version))
    before = _manifest(root).version
    returned = ns.commit_tables(commits)
    return ns, written, before, returned


# ------------------------------------------------------------------------------------------
# create: __manifest layout
# ------------------------------------------------------------------------------------------
def test_root_properties_live_in_table_metadata(empty_ns, root):
    ds = _manifest(root)
    assert sorted(ds.metadata) == ["partition_spec_v1", "schema"]
    assert all(isinstance(v, str) for v in ds.metadata.values())
    assert json.loads(ds.metadata["partition_spec_v1"]) == SPEC_V1
    assert ds.metadata["partition_spec_v1"] == json.dumps(SPEC_V1, separators=(",", ":"))
    schema = json.loads(ds.metadata["schema"])
    assert [f["name"] for f in schema["fields"]] == ["id", "event_date", "country"]
    assert [f["metadata"]["lance:field_id"] for f in schema["fields"]] == ["0", "1", "2"]
    assert [f["type"] for f in schema["fields"]] == [{"type": "int64"}, {"type": "date32"}, {"type": "utf8"}]
    # nothing in the Arrow schema metadata, and no property row
    assert not ds.schema.metadata
    assert empty_ns.properties == ds.metadata


def test_manifest_columns(empty_ns, root, tmp_path):
    schema = _manifest(root).schema
    assert schema.names == [
        "object_id",
        "object_type",
        "location",
        "metadata",
        "base_objects",
        "read_version",
        "read_branch",
        "read_tag",
        "partition_field_event_date",
        "partition_field_country",
    ]
    object_id = schema.field("object_id")
    assert object_id.type == pa.string()
    assert object_id.nullable is False
    assert object_id.metadata == {b"lance-schema:unenforced-primary-key:position": b"0"}
    assert schema.field("read_version").type == pa.uint64()
    assert schema.field("read_branch").type == pa.string()
    assert schema.field("read_tag").type == pa.string()
    assert schema.field("partition_field_event_date").type == pa.date32()
    assert schema.field("partition_field_country").type == pa.string()
    for name in ("read_version", "read_branch", "read_tag", "partition_field_event_date", "partition_field_country"):
        assert schema.field(name).nullable is True, name
    # the directory-namespace columns are exactly the ones pylance creates
    plain_root = str(tmp_path / "plain")
    DirectoryNamespace(root=plain_root).create_namespace(CreateNamespaceRequest(id=["a"]))
    pylance_schema = _manifest(plain_root).schema
    assert pylance_schema.names == ["object_id", "object_type", "location", "metadata", "base_objects"]
    for f in pylance_schema:
        assert schema.field(f.name).equals(f, check_metadata=True), f.name


def test_partition_columns_are_typed_by_result_type(tmp_path):
    root = str(tmp_path / "typed")
    schema = pa.schema(
        [
            pa.field("id", pa.int64()),
            pa.field("ts", pa.timestamp("us", tz="UTC")),
            pa.field("name", pa.string()),
            pa.field("amount", pa.decimal128(10, 2)),
        ]
    )
    PartitionedNamespace.create(root, schema, ["day(ts)", "bucket[16](id)", "truncate[3](name)", "amount", "ts"])
    mschema = _manifest(root).schema
    assert mschema.field("partition_field_ts_day").type == pa.int32()
    assert mschema.field("partition_field_id_bucket").type == pa.int32()
    assert mschema.field("partition_field_name_trunc").type == pa.string()
    assert mschema.field("partition_field_amount").type == pa.decimal128(10, 2)
    assert mschema.field("partition_field_ts").type == pa.timestamp("us", tz="UTC")


def test_v1_namespace_row(empty_ns, root):
    rows = _rows(root)
    assert list(rows) == ["v1"]
    v1 = rows["v1"]
    assert v1["object_type"] == "namespace"
    assert v1["metadata"] == "{}"
    assert v1["location"] is None
    assert v1["read_version"] is None
    assert v1["partition_field_event_date"] is None
    assert v1["partition_field_country"] is None
    assert empty_ns.partitions() == []


def test_create_accepts_spec_objects_text_and_dicts(tmp_path):
    for i, spec in enumerate([PartitionSpec.from_json(SPEC_V1), json.dumps(SPEC_V1), SPEC_V1]):
        ns = PartitionedNamespace.create(str(tmp_path / f"r{i}"), SCHEMA, spec)
        assert ns.current_spec.to_dict() == SPEC_V1
        assert sorted(ns.specs) == [1]


# ------------------------------------------------------------------------------------------
# commit_tables: one manifest commit for many partitions
# ------------------------------------------------------------------------------------------
def test_one_commit_advances_the_manifest_by_exactly_one(filled, root):
    ns, _, before, returned = filled
    after = _manifest(root).version
    assert after == before + 1
    assert returned == after
    assert ns.manifest_version == after


def test_partitions_round_trip_values_locations_and_versions(filled, root):
    ns, written, _, _ = filled
    parts = ns.partitions()
    assert len(parts) == len(PARTITION_VALUES)
    by_location = {p.location: p for p in parts}
    assert sorted(by_location) == sorted(loc for _, loc, _, _ in written)
    for values, loc, version, _ in written:
        p = by_location[loc]
        assert LOCATION_RE.match(loc), loc
        assert p.values == values
        assert p.read_version == version == 1
        assert p.read_branch is None and p.read_tag is None
        assert p.spec_id == 1
        assert p.object_id == loc[9:]
        assert p.uri == root + "/" + loc
    assert [p.object_id for p in parts] == sorted(p.object_id for p in parts)


def test_partitions_sharing_a_first_level_value_share_its_namespace(filled):
    _, written, _, _ = filled
    first_level = {}
    for values, loc, _, _ in written:
        parts = loc[9:].split("$")
        assert parts[0] == "v1" and parts[-1] == "dataset" and len(parts) == 4
        assert all(NAME_RE.match(p) for p in parts[1:3])
        first_level.setdefault(values["event_date"], set()).add(parts[1])
    assert {k: len(v) for k, v in first_level.items()} == {D10: 1, D11: 1, None: 1}
    assert len(set().union(*first_level.values())) == 3


def test_manifest_rows_inherit_partition_values(filled, root):
    _, written, _, _ = filled
    rows = _rows(root)
    # 1 spec namespace + 3 first-level + 7 second-level namespaces + 7 tables
    assert len(rows) == 1 + 3 + 7 + 7
    assert sorted(r["object_type"] for r in rows.values()).count("table") == 7
    for values, loc, version, _ in written:
        _, first, second, _ = loc[9:].split("$")
        level1 = rows[f"v1${first}"]
        level2 = rows[f"v1${first}${second}"]
        table = rows[f"v1${first}${second}$dataset"]
        assert level1["object_type"] == level2["object_type"] == "namespace"
        assert (level1["partition_field_event_date"], level1["partition_field_country"]) == (values["event_date"], None)
        assert (level2["partition_field_event_date"], level2["partition_field_country"]) == (
            values["event_date"],
            values["country"],
        )
        assert (table["partition_field_event_date"], table["partition_field_country"]) == (
            values["event_date"],
            values["country"],
        )
        for r in (level1, level2, table):
            assert r["metadata"] == "{}"
        assert level1["read_version"] is None and level2["read_version"] is None
        assert level1["location"] is None and level2["location"] is None
        assert table["object_type"] == "table"
        assert table["location"] == loc
        assert table["read_version"] == version


def test_refresh_and_load_see_committed_partitions(empty_ns, root):
    other = PartitionedNamespace.load(root)
    assert other.partitions() == []
    values = PARTITION_VALUES[0]
    loc = empty_ns.new_table_location(1, values)
    ds = lance.write_dataset(_partition_table(values, [1]), root + "/" + loc)
    empty_ns.commit_tables([TableCommit(1, values, loc, ds.version)])
    assert other.partitions() == []  # a loaded namespace is a snapshot
    assert other.manifest_version == _manifest(root).version - 1
    other.refresh()
    assert [(p.location, p.values, p.read_version) for p in other.partitions()] == [(loc, values, 1)]
    assert other.manifest_version == _manifest(root).version
    fresh = PartitionedNamespace.load(root)
    assert fresh.partitions() == other.partitions()
    assert fresh.manifest_version == _manifest(root).version
    old = PartitionedNamespace.load(root, manifest_version=other.manifest_version - 1)
    assert old.partitions() == []


def test_existing_partition_keeps_its_location_and_read_version_advances(filled, root):
    ns, written, _, _ = filled
    values, loc, _, data = written[0]
    assert ns.new_table_location(1, values) == loc
    ds = lance.write_dataset(data, root + "/" + loc, mode="append")
    assert ds.version == 2
    ns.commit_tables([TableCommit(1, values, loc, ds.version)])
    p = ns.find_partition(1, values)
    assert p is not None
    assert (p.location, p.read_version) == (loc, 2)
    assert len(ns.partitions()) == len(PARTITION_VALUES)


def test_commit_refuses_to_lower_read_version(filled, root):
    ns, written, _, _ = filled
    values, loc, _, data = written[1]
    ds = lance.write_dataset(data, root + "/" + loc, mode="append")
    ns.commit_tables([TableCommit(1, values, loc, ds.version)])
    version = _manifest(root).version
    with pytest.raises(ConcurrentModification) as info:
        ns.commit_tables([TableCommit(1, values, loc, 1)])
    assert info.value.code == 14
    assert isinstance(info.value, ConcurrentModificationError)
    _one_line(info.value)
    assert _manifest(root).version == version
    assert ns.find_partition(1, values).read_version == 2


# ------------------------------------------------------------------------------------------
# Runtime properties (SPEC-NOTES 17, Appendix E)
# ------------------------------------------------------------------------------------------
def test_describe_spec_version_namespace(filled):
    ns, _, _, _ = filled
    assert ns.describe_namespace(["v1"]) == {"partition_spec": json.dumps(SPEC_V1, separators=(",", ":"))}


def test_describe_partition_namespaces(filled):
    ns, written, _, _ = filled
    for values, loc, _, _ in written:
        _, first, second, _ = loc[9:].split("$")
        expected_date = (
            {} if values["event_date"] is None else {"partition.event_date": values["event_date"].isoformat()}
        )
        assert ns.describe_namespace(["v1", first]) == expected_date
        if values["country"] is not None:
            assert ns.describe_namespace(["v1", first, second]) == {"partition.country": values["country"]}
    d10 = next(loc for values, loc, _, _ in written if values["event_date"] == D10)
    assert ns.describe_namespace(["v1", d10[9:].split("$")[1]]) == {"partition.event_date": "2025-12-10"}


def test_describe_timestamps_and_ints(tmp_path):
    root = str(tmp_path / "ts")
    schema = pa.schema(
        [pa.field("ts", pa.timestamp("us", tz="UTC")), pa.field("n", pa.int64()), pa.field("d", pa.date32())]
    )
    ns = PartitionedNamespace.create(root, schema, ["ts", "n", "year(d)"])
    ts = dt.datetime(2025, 12, 10, 10, 30, 15, 250000, tzinfo=dt.UTC)
    values = {"ts": ts, "n": -(2**40), "d_year": 2025}
    loc = ns.new_table_location(1, values)
    data = pa.table(
        {
            "ts": pa.array([ts], schema.field("ts").type),
            "n": pa.array([-(2**40)], pa.int64()),
            "d": pa.array([dt.date(2025, 3, 1)]),
        },
        schema=schema,
    )
    ds = lance.write_dataset(data, root + "/" + loc)
    ns.commit_tables([TableCommit(1, values, loc, ds.version)])
    _, a, b, c, _ = loc[9:].split("$")
    (ts_prop,) = ns.describe_namespace(["v1", a]).items()
    assert ts_prop[0] == "partition.ts"
    assert ts_prop[1].startswith("2025-12-10T10:30:15.250")
    assert dt.datetime.fromisoformat(ts_prop[1]) == ts
    assert ns.describe_namespace(["v1", a, b]) == {"partition.n": "-1099511627776"}
    assert ns.describe_namespace(["v1", a, b, c]) == {"partition.d_year": "2025"}
    assert ns.partitions()[0].values == values


@pytest.mark.parametrize("ids", [["v2"], ["v1", "zzzzzzzzzzzzzzzz"], ["nope"], ["v1", "a", "b", "c"]])
def test_describe_unknown_namespace(filled, ids):
    ns, _, _, _ = filled
    with pytest.raises(NamespaceNotFound) as info:
        ns.describe_namespace(ids)
    assert info.value.code == 1
    assert isinstance(info.value, NamespaceNotFoundError)
    _one_line(info.value)


def test_describe_a_table_id_is_not_a_namespace(filled):
    ns, written, _, _ = filled
    with pytest.raises(NamespaceNotFound):
        ns.describe_namespace(written[0][1][9:].split("$"))


# ------------------------------------------------------------------------------------------
# Errors (SPEC-NOTES 18)
# ------------------------------------------------------------------------------------------
def test_create_twice_raises_already_exists(empty_ns, root):
    version = _manifest(root).version
    with pytest.raises(NamespaceAlreadyExists) as info:
        PartitionedNamespace.create(root, SCHEMA, SPEC_V1)
    assert info.value.code == 2
    assert isinstance(info.value, NamespaceAlreadyExistsError)
    assert root in _one_line(info.value)
    assert _manifest(root).version == version


def test_load_without_manifest_raises_not_found(tmp_path):
    missing = str(tmp_path / "nothing")
    with pytest.raises(NamespaceNotFound) as info:
        PartitionedNamespace.load(missing)
    assert info.value.code == 1
    assert missing in _one_line(info.value)


def test_load_of_a_plain_directory_namespace(tmp_path):
    plain = str(tmp_path / "plain")
    DirectoryNamespace(root=plain).create_namespace(CreateNamespaceRequest(id=["a"]))
    with pytest.raises(NamespaceNotFound) as info:
        PartitionedNamespace.load(plain)
    assert info.value.code == 1
    message = _one_line(info.value)
    assert "not a partitioned namespace" in message
    assert plain in message


def test_corrupt_spec_json(filled, root):
    _manifest(root).update_metadata({"partition_spec_v1": "{not json"})
    assert _manifest(root).metadata["partition_spec_v1"] == "{not json"
    with pytest.raises(CorruptNamespace) as info:
        PartitionedNamespace.load(root)
    message = _one_line(info.value)
    assert "partition_spec_v1" in message
    assert info.value.code == 19


def test_corrupt_schema_json(filled, root):
    _manifest(root).update_metadata({"schema": "[oops"})
    with pytest.raises(CorruptNamespace) as info:
        PartitionedNamespace.load(root)
    assert "schema" in _one_line(info.value)


# ------------------------------------------------------------------------------------------
# Interop with pylance's DirectoryNamespace (SPEC-NOTES 6)
# ------------------------------------------------------------------------------------------
def _walk_directory_namespace(dirns: DirectoryNamespace, ns_id: list[str], namespaces: list, tables: list) -> None:
    for name in dirns.list_tables(ListTablesRequest(id=ns_id)).tables:
        tables.append([*ns_id, name])
    for child in dirns.list_namespaces(ListNamespacesRequest(id=ns_id)).namespaces:
        namespaces.append([*ns_id, child])
        _walk_directory_namespace(dirns, [*ns_id, child], namespaces, tables)


def test_pylance_lists_and_describes_everything(filled, root):
    ns, written, _, _ = filled
    manifest_version = _manifest(root).version
    dirns = DirectoryNamespace(root=root)
    namespaces: list[list[str]] = []
    tables: list[list[str]] = []
    _walk_directory_namespace(dirns, [], namespaces, tables)

    rows = _rows(root)
    expected_namespaces = sorted(oid for oid, r in rows.items() if r["object_type"] == "namespace")
    assert sorted("$".join(n) for n in namespaces) == expected_namespaces
    assert sorted("$".join(t) for t in tables) == sorted(p.object_id for p in ns.partitions())
    assert len(tables) == len(PARTITION_VALUES)

    for n in namespaces:
        described = dirns.describe_namespace(DescribeNamespaceRequest(id=n))
        assert described.properties in (None, {})

    by_object_id = {loc[9:]: (loc, data) for _, loc, _, data in written}
    for t in tables:
        described = dirns.describe_table(DescribeTableRequest(id=t, load_detailed_metadata=True))
        loc, data = by_object_id["$".join(t)]
        assert described.location.endswith("/" + loc)
        assert described.version == 1
        ds = lance.dataset(described.location)
        assert ds.to_table().sort_by("id").equals(data.sort_by("id"))
    # read-only calls left __manifest alone
    assert _manifest(root).version == manifest_version
    assert _manifest(root).schema.names[-2:] == ["partition_field_event_date", "partition_field_country"]


def test_pylance_mutating_calls_drop_our_columns(filled, root, tmp_path):
    """Why this project never calls DirectoryNamespace's mutating operations on a partitioned root.

    Observed with pylance 14.0.2: ``create_namespace`` on a partitioned root rewrites
    ``__manifest`` with pylance's fixed five columns, so ``read_version``,
    ``read_branch``, ``read_tag`` and every ``partition_field_*`` column are gone (the
    rows and the table metadata survive). Done on a copy of the root.
    """
    copy = str(tmp_path / "copy")
    shutil.copytree(root, copy)
    before = _manifest(copy)
    assert "read_version" in before.schema.names
    rows_before = before.count_rows()

    DirectoryNamespace(root=copy).create_namespace(CreateNamespaceRequest(id=["zzz"]))

    after = _manifest(copy)
    assert after.schema.names == ["object_id", "object_type", "location", "metadata", "base_objects"]
    assert not any(n.startswith("partition_field_") for n in after.schema.names)
    assert "read_version" not in after.schema.names
    assert after.count_rows() == rows_before + 1
    assert sorted(after.metadata) == ["partition_spec_v1", "schema"]
    # the original root is untouched
    assert "read_version" in _manifest(root).schema.names
    # and loading the damaged copy says what happened instead of reading NULL partition values
    with pytest.raises(CorruptNamespace, match=r"lacks column read_version .*DirectoryNamespace"):
        PartitionedNamespace.load(copy)


def test_partition_namespace_names_are_random_per_namespace(tmp_path):
    """SPEC-NOTES 4: names are drawn from a CSPRNG, so they do not derive from the values."""
    values = {"event_date": D10, "country": "US"}
    names = set()
    for i in range(4):
        ns = PartitionedNamespace.create(str(tmp_path / f"r{i}"), SCHEMA, SPEC_V1)
        loc = ns.new_table_location(1, values)
        assert LOCATION_RE.match(loc), loc
        names.add(tuple(loc[9:].split("$")[1:3]))
    assert len(names) == 4
