"""A partitioned namespace through ``lance_namespace``: what any Lance client sees.

The oracles are pylance's own ``DirectoryNamespace`` on the same root (the shape of the
tree and the table locations, where both see committed tables), pylance reading the
tables at the versions we describe (the rows must be the rows written, counted from the
input with pyarrow), and the input data itself for the partition values.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from pathlib import Path

import lance
import lance_namespace as ln
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from lance_namespace import (
    CreateTableRequest,
    CreateTableVersionRequest,
    DescribeNamespaceRequest,
    DescribeTableRequest,
    DropNamespaceRequest,
    DropTableRequest,
    InsertIntoTableRequest,
    ListNamespacesRequest,
    ListTablesRequest,
    ListTableVersionsRequest,
    NamespaceExistsRequest,
    TableExistsRequest,
)
from lance_namespace.errors import (
    ErrorCode,
    InvalidInputError,
    NamespaceNotFoundError,
    TableNotFoundError,
    UnsupportedOperationError,
)

from partitioning import PartitionedNamespace
from partitioning.service.namespace_api import PartitionedLanceNamespace
from partitioning.tables.write import write_table

SCHEMA = pa.schema([("id", pa.int64()), ("day", pa.date32()), ("name", pa.string())])


def _rows(ids: range) -> pa.Table:
    return pa.table(
        {
            "id": list(ids),
            "day": [dt.date(2025, 12, 10) + dt.timedelta(days=i % 3) for i in ids],
            "name": [f"n{i}" for i in ids],
        },
        schema=SCHEMA,
    )


@pytest.fixture()
def root(tmp_path: Path) -> str:
    """Two spec versions: v1 by (day, bucket[2](id)), v2 by day only, each with committed rows."""
    root = str(tmp_path / "ns")
    ns = PartitionedNamespace.create(root, SCHEMA, ["day", "bucket[2](id)"])
    write_table(ns, _rows(range(0, 40)))
    ns = PartitionedNamespace.load(root)
    ns.evolve_partition_spec(["day"])
    write_table(PartitionedNamespace.load(root), _rows(range(40, 70)))
    return root


def _ours(root: str) -> ln.LanceNamespace:
    return ln.connect("partitioned", {"root": root})


def _tree(client: ln.LanceNamespace, ids: list[str] | None = None) -> dict[str, object]:
    """Every namespace under ``ids`` with its tables, walked through the client's own calls."""
    ids = ids or []
    out: dict[str, object] = {}
    for table in client.list_tables(ListTablesRequest(id=ids)).tables or []:
        out[table] = "table"
    for child in client.list_namespaces(ListNamespacesRequest(id=ids)).namespaces or []:
        out[child] = _tree(client, [*ids, child])
    return out


def _tables(tree: dict[str, object], ids: tuple[str, ...] = ()) -> list[list[str]]:
    found = []
    for name, sub in tree.items():
        found += [[*ids, name]] if sub == "table" else _tables(sub, (*ids, name))  # type: ignore[arg-type]
    return found


def test_the_tree_and_locations_are_pylances_and_the_versions_hold_the_written_rows(root: str) -> None:
    ours, theirs = _ours(root), ln.connect("dir", {"root": root})
    tree = _tree(ours)
    assert tree == _tree(theirs)
    assert sorted(tree) == ["v1", "v2"]
    tables = _tables(tree)
    assert len(tables) == 3 * 2 + 3  # v1: 3 days x 2 buckets; v2: 3 days
    total = 0
    for ids in tables:
        mine = ours.describe_table(DescribeTableRequest(id=ids))
        other = theirs.describe_table(DescribeTableRequest(id=ids))
        assert (mine.location, mine.table, mine.namespace) == (other.location, other.table, other.namespace)
        assert other.version is None and mine.version is not None
        rows = lance.dataset(mine.location, version=mine.version).to_table()
        total += rows.num_rows
        # the rows of a partition table hold the partition value its namespace describes
        day = ours.describe_namespace(DescribeNamespaceRequest(id=ids[:2])).properties
        assert day == {"partition.day": rows.column("day").unique()[0].as_py().isoformat()}
        assert pc.count_distinct(rows.column("day")).as_py() == 1
    assert total == 70


def test_describe_namespace_gives_the_runtime_properties(root: str) -> None:
    client = _ours(root)
    top = client.describe_namespace(DescribeNamespaceRequest(id=[])).properties or {}
    manifest = lance.dataset(str(Path(root) / "__manifest"))
    stored = manifest.metadata  # the root's properties, as Lance keeps them
    assert top == {**stored, "manifest_version": str(manifest.version)}
    for version in ("v1", "v2"):
        spec = client.describe_namespace(DescribeNamespaceRequest(id=[version])).properties
        assert spec == {"partition_spec": stored[f"partition_spec_{version}"]}
    (first_day,) = [n for n in client.list_namespaces(ListNamespacesRequest(id=["v2"])).namespaces or []][:1]
    assert set(client.describe_namespace(DescribeNamespaceRequest(id=["v2", first_day])).properties or {}) == {
        "partition.day"
    }
    assert client.namespace_exists(NamespaceExistsRequest(id=["v1"])) is not None


def test_a_write_in_progress_is_read_by_pylance_through_its_client_and_not_through_ours(root: str) -> None:
    """An append straight to a partition dataset (a write that has not committed to
    ``__manifest``): pylance's client describes the table without a version, so its reader
    sees the extra rows; ours describes the committed version."""
    ours, theirs = _ours(root), ln.connect("dir", {"root": root})
    ids = _tables(_tree(ours))[0]
    location = ours.describe_table(DescribeTableRequest(id=ids)).location
    committed = lance.dataset(location).count_rows()
    lance.write_dataset(lance.dataset(location).to_table().slice(0, 1), location, mode="append")
    theirs_rows = lance.dataset(location, version=theirs.describe_table(DescribeTableRequest(id=ids)).version)
    ours_rows = lance.dataset(location, version=ours.describe_table(DescribeTableRequest(id=ids)).version)
    assert theirs_rows.count_rows() == committed + 1
    assert ours_rows.count_rows() == committed


def test_pages_cover_every_partition_once_in_order(tmp_path: Path) -> None:
    root = str(tmp_path / "ns")
    ns = PartitionedNamespace.create(root, SCHEMA, ["id"])
    write_table(ns, _rows(range(30)))
    client = _ours(root)
    (everything,) = [ln.connect("dir", {"root": root}).list_namespaces(ListNamespacesRequest(id=["v1"])).namespaces]
    pages, token = [], None
    while True:
        page = client.list_namespaces(ListNamespacesRequest(id=["v1"], limit=7, page_token=token))
        pages.append(page.namespaces)
        token = page.page_token
        if token is None:
            break
    assert [len(p) for p in pages] == [7, 7, 7, 7, 2]
    assert [n for p in pages for n in p] == sorted(everything)
    with pytest.raises(InvalidInputError, match="limit"):
        client.list_namespaces(ListNamespacesRequest(id=["v1"], limit=0))


def test_a_commit_is_seen_by_the_next_request(tmp_path: Path) -> None:
    root = str(tmp_path / "ns")
    ns = PartitionedNamespace.create(root, SCHEMA, ["id"])
    client = _ours(root)
    assert client.list_namespaces(ListNamespacesRequest(id=["v1"])).namespaces == []
    write_table(ns, _rows(range(2)))
    assert len(client.list_namespaces(ListNamespacesRequest(id=["v1"])).namespaces or []) == 2


@pytest.mark.parametrize("ids", [["v9"], [".."], ["v1$x"], ["v1/.."], [""], ["v1", "..", "dataset"]])
def test_ids_that_name_nothing_or_escape_are_not_found(root: str, ids: list[str]) -> None:
    client = _ours(root)
    with pytest.raises(NamespaceNotFoundError) as found:
        client.list_namespaces(ListNamespacesRequest(id=ids))
    assert found.value.code == ErrorCode.NAMESPACE_NOT_FOUND
    with pytest.raises(NamespaceNotFoundError):
        client.describe_namespace(DescribeNamespaceRequest(id=ids))
    with pytest.raises(TableNotFoundError) as missing:
        client.describe_table(DescribeTableRequest(id=[*ids, "dataset"]))
    assert missing.value.code == ErrorCode.TABLE_NOT_FOUND


def test_tables_that_do_not_exist_and_versions_not_committed_are_refused(root: str) -> None:
    client = _ours(root)
    ids = _tables(_tree(client))[0]
    for wrong in (["dataset"], [*ids[:-1], "other"], ids[:-1]):
        with pytest.raises(TableNotFoundError):
            client.table_exists(TableExistsRequest(id=wrong))
    version = client.describe_table(DescribeTableRequest(id=ids)).version
    with pytest.raises(InvalidInputError, match="never committed") as err:
        client.describe_table(DescribeTableRequest(id=ids, version=version + 1))
    assert err.value.code == ErrorCode.INVALID_INPUT


def test_only_versions_some_manifest_version_recorded_are_described(tmp_path) -> None:
    """A crashed write's dataset version (never recorded by ``__manifest``) is refused, naming the
    committed ones; a committed older version is described, and reads the rows committed then."""
    from partitioning.tables.write import write_table

    schema = pa.schema([("id", pa.int64()), ("c", pa.string())])
    ns = PartitionedNamespace.create(str(tmp_path / "t"), schema, ["c"])
    write_table(ns, pa.table({"id": [1, 2], "c": ["a", "a"]}, schema=schema))
    (table,) = ns.refresh().partitions()
    first = table.read_version
    # a writer that died after committing its dataset version and before __manifest
    lance.write_dataset(pa.table({"id": [99], "c": ["a"]}, schema=schema), table.uri, mode="append")
    write_table(ns.refresh(), pa.table({"id": [3], "c": ["a"]}, schema=schema))
    (table,) = ns.refresh().partitions()
    crashed = first + 1
    assert table.read_version > crashed
    client = _ours(str(tmp_path / "t"))
    ids = table.object_id.split("$")
    with pytest.raises(InvalidInputError, match=f"version {crashed} was never committed") as err:
        client.describe_table(DescribeTableRequest(id=ids, version=crashed))
    assert f"committed versions are {first}, {table.read_version}" in str(err.value)
    old = client.describe_table(DescribeTableRequest(id=ids, version=first))
    assert sorted(lance.dataset(old.location, version=old.version).to_table()["id"].to_pylist()) == [1, 2]


def test_pylance_opens_only_committed_versions_through_the_client(tmp_path: Path) -> None:
    """``lance.dataset(namespace_client=..., table_id=...)`` (pylance's own call) opens the version
    ``__manifest`` records, not a crashed writer's later one; an older committed version
    opens, an uncommitted one is refused; a pinned client opens what its version recorded."""
    schema = pa.schema([("id", pa.int64()), ("c", pa.string())])
    root = str(tmp_path / "t")
    ns = PartitionedNamespace.create(root, schema, ["c"])
    write_table(ns, pa.table({"id": [1, 2], "c": ["a", "a"]}, schema=schema))
    pin = PartitionedNamespace.load(root).manifest_version
    write_table(PartitionedNamespace.load(root), pa.table({"id": [3], "c": ["a"]}, schema=schema))
    (table,) = PartitionedNamespace.load(root).partitions()
    lance.write_dataset(pa.table({"id": [99], "c": ["a"]}, schema=schema), table.uri, mode="append")  # a crash
    ids = table.object_id.split("$")
    client = _ours(root)

    def ids_read(**kwargs: object) -> list[int]:
        ds = lance.dataset(namespace_client=client, table_id=ids, **kwargs)  # type: ignore[arg-type]
        return sorted(ds.to_table(columns=["id"]).column("id").to_pylist())

    assert lance.dataset(table.uri).count_rows() == 4  # the crashed write's rows are the latest on storage
    assert ids_read() == [1, 2, 3]
    first = client.list_table_versions(ListTableVersionsRequest(id=ids)).versions[0].version
    assert ids_read(version=first) == [1, 2]
    with pytest.raises((OSError, ValueError), match="never committed"):
        ids_read(version=table.read_version + 1)
    client = client.at(pin)
    assert ids_read() == [1, 2]
    listed = client.list_table_versions(ListTableVersionsRequest(id=ids, descending=True))
    assert [v.version for v in listed.versions] == [first]


@pytest.mark.parametrize(
    ("call", "args", "api"),
    [
        ("create_table", (CreateTableRequest(id=["v1", "x", "dataset"]), b""), "write_partitioned"),
        ("drop_table", (DropTableRequest(id=["v1", "x", "dataset"]),), "drop_partitions"),
        ("drop_namespace", (DropNamespaceRequest(id=["v1"]),), "drop_partitions"),
        ("insert_into_table", (InsertIntoTableRequest(id=["v1", "x", "dataset"]), b""), "write_partitioned"),
        (
            "create_table_version",
            (CreateTableVersionRequest(id=["v1", "x", "dataset"], version=9, manifest_path="m"),),
            "__manifest",
        ),
    ],
)
def test_changes_are_refused_with_the_call_to_use(root: str, call: str, args: tuple[object, ...], api: str) -> None:
    before = PartitionedNamespace.load(root).manifest_version
    with pytest.raises(UnsupportedOperationError, match=api) as refused:
        getattr(_ours(root), call)(*args)
    assert refused.value.code == ErrorCode.UNSUPPORTED
    assert PartitionedNamespace.load(root).manifest_version == before


def _walk_total(client: ln.LanceNamespace, between: Callable[[], None] = lambda: None) -> int:
    """Rows of every table, one request at a time (``between`` runs after each table)."""
    total = 0
    for ids in _tables(_tree(client)):
        described = client.describe_table(DescribeTableRequest(id=ids))
        total += lance.dataset(described.location, version=described.version).count_rows()
        between()
    return total


def test_a_pinned_client_walks_one_snapshot_while_commits_land(tmp_path: Path) -> None:
    """Each commit adds 10 rows to every partition; a walk of the unpinned client can mix
    versions, a walk pinned at the version the root's describe gave sums exactly that
    version's rows (counted by pylance at the described table versions)."""
    schema = pa.schema([("id", pa.int64()), ("c", pa.string())])
    root = str(tmp_path / "t")
    batch = iter(range(0, 10_000, 10))

    def commit() -> None:
        start = next(batch)
        write_table(
            PartitionedNamespace.load(root),
            pa.table({"id": list(range(start, start + 10)), "c": ["a", "b"] * 5}, schema=schema),
        )

    PartitionedNamespace.create(root, schema, ["c"])
    commit()
    latest = _ours(root)
    pin = int((latest.describe_namespace(DescribeNamespaceRequest(id=[])).properties or {})["manifest_version"])
    pinned = ln.connect("partitioned", {"root": root, "manifest_version": str(pin)})
    assert _walk_total(pinned, commit) == 10  # two commits landed during the walk
    # unpinned: one table read at the 30-row version, the other after one more commit: a total
    # no version ever had (every committed total is a multiple of 10)
    assert _walk_total(latest, commit) == 35
    assert _walk_total(pinned) == 10
    again = latest.at(pin)
    assert (again.describe_namespace(DescribeNamespaceRequest(id=[])).properties or {})["manifest_version"] == str(pin)
    assert _walk_total(again) == 10
    with pytest.raises(InvalidInputError, match="has no __manifest version 999"):
        latest.at(999).list_namespaces(ListNamespacesRequest(id=[]))


@pytest.mark.parametrize("bad", ["0", "-1", "1.5", "abc", "", "\u0661", "9" * 20])
def test_a_pin_that_is_not_a_positive_whole_number_is_refused(tmp_path: Path, bad: str) -> None:
    message = re.escape(f"manifest_version must be a positive whole number, got {bad!r}")
    with pytest.raises(ValueError, match=message):  # connect wraps the client's error in a ValueError
        ln.connect("partitioned", {"root": str(tmp_path), "manifest_version": bad})
    with pytest.raises(InvalidInputError, match=message):
        PartitionedLanceNamespace(str(tmp_path), manifest_version=bad)


def test_properties_of_the_client_are_checked(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="root"):
        ln.connect("partitioned", {})
    with pytest.raises(ValueError, match="unknown properties \\['colour'\\]"):
        ln.connect("partitioned", {"root": str(tmp_path), "colour": "red"})
    client = ln.connect("partitioned", {"root": str(tmp_path / "none"), "storage.timeout": "30s"})
    with pytest.raises(NamespaceNotFoundError):
        client.list_namespaces(ListNamespacesRequest(id=[]))


def test_an_id_part_holding_the_separator_does_not_reach_a_deeper_namespace(root: str) -> None:
    """``["v1$<child>"]`` joins to the object id of a real partition namespace: it must not be it."""
    client = _ours(root)
    child = (client.list_namespaces(ListNamespacesRequest(id=["v1"])).namespaces or [])[0]
    assert client.describe_namespace(DescribeNamespaceRequest(id=["v1", child])).properties
    with pytest.raises(NamespaceNotFoundError, match="not an id"):
        client.describe_namespace(DescribeNamespaceRequest(id=[f"v1${child}"]))
    with pytest.raises(NamespaceNotFoundError, match="not an id"):
        client.list_tables(ListTablesRequest(id=[f"v1${child}"]))
