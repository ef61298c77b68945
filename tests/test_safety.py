"""Safety: a damaged or hostile ``__manifest`` never makes any operation read, write or delete
outside the namespace root, and vacuum keeps what it must (issue 18, items 1 and 3).

Hostile rows are written the way another client of the spec could: ``ManifestStore.merge_rows``
on the real ``__manifest``. Sentinels live beside the root (a plain Lance dataset, a text file,
a directory); every test snapshots them, paths and bytes, and checks they never change.
Expected rows are written out by hand.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
from pathlib import Path

import lance
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.errors import PySparkException

from partitioning import PartitionedNamespace
from partitioning.errors import CorruptNamespace, PartitioningError
from partitioning.storage.manifest import ManifestStore
from partitioning.storage.paths import check_location, contained, location_problem
from partitioning.tables.compaction import compact_local
from partitioning.tables.deletes import delete_rows, drop_partitions
from partitioning.tables.maintenance import optimize_manifest
from partitioning.tables.restore import restore
from partitioning.tables.vacuum import vacuum
from partitioning.tables.write import write_table
from pipelines.maintenance import operations as spark_maintenance
from pipelines.read.dataframe import read_partitioned
from pipelines.spark_errors import translate_spark_error
from pipelines.write.dataframe import write_partitioned

SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.string())])
ROWS = [(1, "a"), (2, "a"), (3, "b"), (4, "c")]
ZERO = dt.timedelta(0)


# -- helpers --------------------------------------------------------------------------------------
def _table(rows: list[tuple[int, str]]) -> pa.Table:
    return pa.Table.from_pylist([{"id": i, "p": p} for i, p in rows], schema=SCHEMA)


def _snapshot(base: Path, skip: Path) -> dict[str, bytes | None]:
    """Every path under ``base`` outside ``skip``: file bytes, or None for a directory."""
    out: dict[str, bytes | None] = {}
    for path in sorted(base.rglob("*")):
        if path == skip or skip in path.parents:
            continue
        out[str(path.relative_to(base))] = None if path.is_dir() else path.read_bytes()
    return out


def _world(base: Path) -> tuple[str, dict[str, bytes | None]]:
    """A namespace at ``base/ns`` (partitions a, b, c) and sentinels beside it; returns the root
    and the sentinels' snapshot."""
    lance.write_dataset(pa.table({"id": [900, 901], "p": ["victim", "victim"]}), str(base / "victim"))
    (base / "outside.txt").write_text("not yours")
    (base / "outside_dir").mkdir()
    (base / "outside_dir" / "keep.bin").write_bytes(b"\x00\x01keep")
    root = str(base / "ns")
    ns = PartitionedNamespace.create(root, SCHEMA, ["p"])
    write_table(ns, _table(ROWS[:2]))
    write_table(ns, _table(ROWS[2:]))
    return root, _snapshot(base, Path(root))


def _rows(root: str, manifest_version: int | None = None) -> list[tuple[int, str]]:
    """Every visible row, each table read with lance at the manifest's read_version."""
    out = []
    for row in ManifestStore(root).dataset(manifest_version).to_table(filter="object_type = 'table'").to_pylist():
        ds = lance.dataset(f"{root}/{row['location']}", version=row["read_version"])
        out.extend((r["id"], r["p"]) for r in ds.to_table().to_pylist())
    return sorted(out)


def _object_id(root: str, p: str) -> str:
    (found,) = [t.object_id for t in PartitionedNamespace.load(root).partitions() if t.values["p"] == p]
    return found


def _point(root: str, object_id: str, **columns: object) -> None:
    """Rewrite one table row of __manifest, as another client of the spec could."""
    store = ManifestStore(root)
    ds = store.dataset()
    rows = ds.to_table(filter=f"object_id = '{object_id}'").to_pylist()
    rows[0].update(columns)
    store.merge_rows(ds, pa.Table.from_pylist(rows, schema=ds.schema))


def _assert_refusal(exc: BaseException, object_id: str, location: object) -> None:
    text = str(exc)
    assert "\n" not in text, text
    assert object_id in text, text
    assert repr(location)[:60] in text, text


# -- the rule -------------------------------------------------------------------------------------
OID = "v1$k7m2n9p4q8r5s3t6$dataset"
LONG_OID = "v3$" + "$".join(["abcdefghijklmnop"] * 16) + "$dataset"


@pytest.mark.parametrize(
    "location",
    [
        "..",
        ".",
        "",
        "__manifest",
        "../victim",
        "../../x",
        f"b4a3c2d1_{OID}/..",
        "b4a3c2d1_v1$a/b",
        "b4a3c2d1_v1\\..\\victim",
        f"b4a3c2d1_{OID}\x00",
        f"b4a3c2d1_{OID}\n",
        f"b4a3c2d1_{OID}\x1b",
        f"b4a3c2d1_{OID}\u202e",
        "file:///etc",
        "s3://bucket/other",
        "/etc/passwd",
        "C:\\victim",
        "b4a3c2d1_v1$w1x2y3z4a5b6c7d8$dataset",  # another table's directory
        f"B4A3C2D1_{OID}",
        f"b4a3c2d_{OID}",
        "b4a3c2d1_v1_abcdefghijklmnop",  # bounded, but this id fits as a name
        "x" * 300,
        None,
    ],
)
def test_a_location_is_one_directory_under_the_root(location) -> None:
    """Anything but ``<8 hex>_<object_id>`` (or the bounded form for long ids) is refused,
    in one line naming the object id and the location."""
    assert location_problem(OID, location) is not None
    with pytest.raises(CorruptNamespace) as info:
        check_location(OID, location)
    _assert_refusal(info.value, OID, location)


def test_a_plain_name_over_the_file_name_limit_is_refused() -> None:
    """A long object id's own plain name would not fit a file name (such ids get the bounded one)."""
    long_id = f"v1${'z' * 300}$dataset"
    with pytest.raises(CorruptNamespace, match="longer than 255 bytes"):
        check_location(long_id, f"b4a3c2d1_{long_id}")


def test_the_two_names_table_directories_get_are_accepted() -> None:
    assert check_location(OID, f"b4a3c2d1_{OID}") == f"b4a3c2d1_{OID}"
    assert location_problem(LONG_OID, "0a1b2c3d_v3_0123456789abcdef") is None
    assert location_problem(LONG_OID, "0a1b2c3d_v2_0123456789abcdef") is not None  # another spec's


@pytest.mark.parametrize(
    ("root", "target", "inside"),
    [
        ("/data/ns", "/data/ns/a", True),
        ("/data/ns", "/data/ns/a/data/x.lance", True),
        ("/data/ns", "/data/ns", False),
        ("/data/ns", "/data", False),
        ("/data/ns", "/data/ns/../victim", False),
        ("/data/ns", "/data/nsx/a", False),
        ("s3://bucket/ns", "s3://bucket/ns/a/data/x.lance", True),
        ("s3://bucket/ns/", "s3://bucket/ns/a/", True),
        ("s3://bucket/ns", "s3://bucket/ns", False),
        ("s3://bucket/ns", "s3://bucket/ns/../victim", False),
        ("s3://bucket/ns", "s3://bucket/ns/a/./b", False),
        ("s3://bucket/ns", "s3://bucket/ns//a", False),
        ("s3://bucket/ns", "s3://bucket/nsx/a", False),
        ("s3://bucket/ns", "s3://other/ns/a", False),
        ("s3://bucket/ns", "gs://bucket/ns/a", False),
        ("s3://bucket/ns", "/bucket/ns/a", False),
    ],
)
def test_containment_works_on_paths_and_uris(root: str, target: str, inside: bool) -> None:
    if inside:
        assert contained(root, target) == target
    else:
        with pytest.raises(PartitioningError) as info:
            contained(root, target)
        assert "\n" not in str(info.value)


def test_containment_resolves_symlinks(tmp_path: Path) -> None:
    (tmp_path / "ns").mkdir()
    (tmp_path / "victim").mkdir()
    os.symlink(tmp_path / "victim", tmp_path / "ns" / "link")
    with pytest.raises(PartitioningError):
        contained(str(tmp_path / "ns"), str(tmp_path / "ns" / "link" / "file"))


# -- every operation against a hostile row --------------------------------------------------------
HOSTILE = ["..", ".", "__manifest", "../victim", "../../x", "victim/../..", "a\\b", "a\x00b", "a\nb", "file:///tmp"]


@pytest.mark.parametrize("location", HOSTILE)
def test_no_spark_free_operation_follows_a_hostile_location(tmp_path: Path, location: str) -> None:
    """Reads, writes in every mode, compaction, deletes, drops and vacuum refuse in one line
    naming the row; a read pruned away from the row works; nothing outside the root changes.
    ``remove_tables`` repairs the namespace, and vacuum afterwards deletes nothing outside."""
    root, outside = _world(tmp_path)
    oid = _object_id(root, "a")
    _point(root, oid, location=location, read_version=1)
    ns = PartitionedNamespace.load(root)
    hostile_version = ns.manifest_version

    refusals = [
        lambda: restore(root, version=hostile_version),
        lambda: ns.partitions(),
        lambda: ns.plan_scan(),
        lambda: ns.plan_scan("p = 'a'"),
        lambda: write_table(ns, _table([(10, "a")])),
        lambda: write_table(ns, _table([(12, "a")]), mode="overwrite"),
        lambda: compact_local(ns),
        lambda: delete_rows(root, "id = 1"),
        lambda: delete_rows(root, "id >= 2"),
        lambda: drop_partitions(root, "p = 'a'"),
        lambda: vacuum(root, ZERO, allow_short_retention=True),
        lambda: vacuum(root),
    ]
    for operation in refusals:
        with pytest.raises(CorruptNamespace) as info:
            operation()
        _assert_refusal(info.value, oid, location)
    assert _snapshot(tmp_path, Path(root)) == outside
    # the row's column statistics (ids 1 .. 2) prune it away from a plan for id 3: not followed
    assert [t.object_id for t in ns.plan_scan("id = 3")] == [_by_value(root, "b")]

    # writes that touch only other partitions decode only their rows (issue 19): they never
    # read the hostile row, so they neither follow nor refuse it
    write_table(ns, _table([(11, "d")]))
    write_table(ns, _table([(13, "b")]), mode="overwrite_partitions")
    assert _snapshot(tmp_path, Path(root)) == outside
    assert [t.object_id for t in ns.plan_scan("p = 'b'")] == [_by_value(root, "b")]
    optimize_manifest(root)
    assert _snapshot(tmp_path, Path(root)) == outside

    version = ns.refresh().remove_tables([oid])
    for report in (vacuum(root, ZERO, allow_short_retention=True), vacuum(root, ZERO, allow_short_retention=True)):
        assert all(".." not in item and "victim" not in item for item in report.deleted), report.deleted
    assert _snapshot(tmp_path, Path(root)) == outside
    assert _rows(root) == [(4, "c"), (11, "d"), (13, "b")]
    assert PartitionedNamespace.load(root).manifest_version >= version
    write_table(ns, _table([(20, "a")]))
    assert _rows(root) == [(4, "c"), (11, "d"), (13, "b"), (20, "a")]
    assert _snapshot(tmp_path, Path(root)) == outside


def _by_value(root: str, p: str) -> str:
    rows = ManifestStore(root).dataset().to_table(filter=f"object_type = 'table' AND partition_field_p = '{p}'")
    (oid,) = rows.column("object_id").to_pylist()
    return str(oid)


def test_another_tables_directory_is_refused_and_never_deleted(tmp_path: Path) -> None:
    """A row pointing at another partition's directory (inside the root) is refused too, so
    dropping the row and vacuuming does not delete the other partition's data."""
    root, outside = _world(tmp_path)
    ns = PartitionedNamespace.load(root)
    a, b = (next(t for t in ns.partitions() if t.values["p"] == p) for p in ("a", "b"))
    _point(root, a.object_id, location=b.location)
    with pytest.raises(CorruptNamespace) as info:
        PartitionedNamespace.load(root).plan_scan("p = 'a'")
    _assert_refusal(info.value, a.object_id, b.location)
    PartitionedNamespace.load(root).remove_tables([a.object_id])
    vacuum(root, ZERO, allow_short_retention=True)
    assert _rows(root) == [(3, "b"), (4, "c")]
    assert _snapshot(tmp_path, Path(root)) == outside


def test_a_hostile_row_in_an_older_manifest_version_is_never_followed(tmp_path: Path) -> None:
    """Time travel to the version with the row refuses; after the row is removed, vacuum (which
    reads every retained manifest version) leaves the directory it names alone."""
    root, outside = _world(tmp_path)
    oid = _object_id(root, "b")
    _point(root, oid, location="../victim")
    bad_version = ManifestStore(root).dataset().version
    PartitionedNamespace.load(root).remove_tables([oid])
    with pytest.raises(CorruptNamespace) as info:
        PartitionedNamespace.load(root, manifest_version=bad_version).plan_scan()
    _assert_refusal(info.value, oid, "../victim")
    for _ in range(2):
        vacuum(root, dt.timedelta(hours=24))
        vacuum(root, dt.timedelta(hours=1), allow_short_retention=True)
    assert not [o for o in PartitionedNamespace.load(root).orphans() if "victim" in o.uri or ".." in o.uri]
    assert _snapshot(tmp_path, Path(root)) == outside
    assert _rows(root) == [(1, "a"), (2, "a"), (4, "c")]


def test_spark_reads_writes_and_maintenance_refuse_a_hostile_location(spark, tmp_path: Path) -> None:
    """read_partitioned and the format read refuse (Spark's planning error carries our one
    line); a filtered read that prunes the row reads the rest; write_partitioned in every
    mode and the Spark maintenance entry points refuse before any task runs."""
    root, outside = _world(tmp_path)
    oid = _object_id(root, "a")
    _point(root, oid, location="../victim")

    with pytest.raises(CorruptNamespace) as refused:
        read_partitioned(spark, root)  # planned when called: our one line, no Spark trace
    _assert_refusal(refused.value, oid, "../victim")
    for read in (
        lambda: read_partitioned(spark, root).collect(),
        lambda: spark.read.format("lance_partitioned").load(root).collect(),
    ):
        with pytest.raises((PartitioningError, PySparkException)) as info:
            read()
        line = info.value if isinstance(info.value, PartitioningError) else translate_spark_error(info.value, "read")
        assert isinstance(line, CorruptNamespace), line
        _assert_refusal(line, oid, "../victim")
    assert sorted(tuple(r) for r in read_partitioned(spark, root, filter="p = 'b'").collect()) == [(3, "b")]

    df = spark.createDataFrame([(30, "a"), (31, "d")], "id long, p string")
    for mode in ("append", "overwrite", "overwrite_partitions"):
        with pytest.raises(CorruptNamespace) as info:
            write_partitioned(df, root, mode=mode)
        _assert_refusal(info.value, oid, "../victim")
    for operation in (
        lambda: spark_maintenance.compact(root, spark=spark),
        lambda: spark_maintenance.delete_rows(root, "id >= 2", spark=spark),
        lambda: spark_maintenance.drop_partitions(root, "p = 'a'", spark=spark),
        lambda: spark_maintenance.vacuum(root, ZERO, allow_short_retention=True),
    ):
        with pytest.raises(CorruptNamespace) as info:
            operation()
        _assert_refusal(info.value, oid, "../victim")
    assert _snapshot(tmp_path, Path(root)) == outside
    assert lance.dataset(str(tmp_path / "victim")).count_rows() == 2


# -- what vacuum deletes --------------------------------------------------------------------------
def test_vacuum_deletes_only_lance_files_in_a_dropped_table(tmp_path: Path) -> None:
    """A file someone put in a dropped table's directory (and a non-Lance file in a live
    table's data directory) survives; the Lance files go; the kept entry is reported."""
    root, outside = _world(tmp_path)
    ns = PartitionedNamespace.load(root)
    a = next(t for t in ns.partitions() if t.values["p"] == "a")
    b = next(t for t in ns.partitions() if t.values["p"] == "b")
    Path(a.uri, "README.txt").write_text("mine")
    Path(b.uri, "data", "notes.txt").write_text("mine too")
    drop_partitions(root, "p = 'a'")
    report = vacuum(root, ZERO, allow_short_retention=True)
    assert f"table_dir {a.uri} (no retained __manifest version refers to it)" in report.deleted
    assert report.skipped == (f"{a.uri}: README.txt not written by Lance, left in place",)
    assert sorted(p.name for p in Path(a.uri).iterdir()) == ["README.txt"]
    assert Path(a.uri, "README.txt").read_text() == "mine"
    assert Path(b.uri, "data", "notes.txt").read_text() == "mine too"
    assert _rows(root) == [(3, "b"), (4, "c")]
    assert _snapshot(tmp_path, Path(root)) == outside


def test_vacuum_does_not_follow_a_symlinked_table_directory_out_of_the_root(tmp_path: Path) -> None:
    """A directory named like a failed write's table but linking to a dataset outside the root:
    vacuum reports it kept and the outside dataset is untouched."""
    root, outside = _world(tmp_path)
    link = Path(root, "0badf00d_v1$ghostnamespace000$dataset")
    os.symlink(tmp_path / "victim", link)
    report = vacuum(root, ZERO, allow_short_retention=True)
    assert report.skipped == (f"{link}: outside the root (a link?), left in place",)
    assert not any(str(link) in item for item in report.deleted), report.deleted
    assert _snapshot(tmp_path, Path(root)) == outside
    assert lance.dataset(str(tmp_path / "victim")).count_rows() == 2


def test_vacuum_is_idempotent_when_its_targets_are_gone(tmp_path: Path) -> None:
    """A vacuum that died after deleting a dropped table's directory (here: the directory is
    removed by hand) is simply run again: a missing target is success, and is not listed."""
    root, outside = _world(tmp_path)
    ns = PartitionedNamespace.load(root)
    a = next(t for t in ns.partitions() if t.values["p"] == "a")
    drop_partitions(root, "p = 'a'")
    shutil.rmtree(a.uri)
    first = vacuum(root, ZERO, allow_short_retention=True)
    assert not any(a.uri in item for item in first.deleted), first.deleted
    second = vacuum(root, ZERO, allow_short_retention=True)
    assert second.deleted == ()
    assert _rows(root) == [(3, "b"), (4, "c")]
    assert _snapshot(tmp_path, Path(root)) == outside


def test_vacuum_resumes_after_dying_half_way_through_a_directory(tmp_path: Path) -> None:
    """Only part of a dropped table's files are gone (its _versions, say): the next vacuum
    deletes the rest and the directory."""
    root, _ = _world(tmp_path)
    ns = PartitionedNamespace.load(root)
    a = next(t for t in ns.partitions() if t.values["p"] == "a")
    drop_partitions(root, "p = 'a'")
    shutil.rmtree(Path(a.uri, "_versions"))
    report = vacuum(root, ZERO, allow_short_retention=True)
    assert f"table_dir {a.uri} (no retained __manifest version refers to it)" in report.deleted
    assert not Path(a.uri).exists()
    assert vacuum(root, ZERO, allow_short_retention=True).deleted == ()


# -- hypothesis: hostile rows ---------------------------------------------------------------------
_SEGMENTS = st.sampled_from(
    ["..", ".", "", "__manifest", "victim", "outside.txt", "outside_dir", "b4a3c2d1", "data", "_versions", "x"]
)
_SEPARATORS = st.sampled_from(["/", "\\", "\x00", "\n", "\r", "\t", "\x1b", "\x7f", "\u2028", " ", "%2F", "#", "?"])
_PREFIXES = st.sampled_from(["", "/", "file://", "s3://bucket/", "gs://b/", "C:\\", "\\\\host\\share\\", "~/"])


@st.composite
def _hostile_location(draw: st.DrawFn, object_id: str, other: str) -> str:
    kind = draw(st.sampled_from(["path", "valid_looking", "other_table", "long", "own"]))
    if kind == "valid_looking":
        return f"{draw(st.from_regex(r'[0-9a-fA-F]{7,9}', fullmatch=True))}_{object_id}{draw(_SEPARATORS)}"
    if kind == "other_table":
        return other
    if kind == "long":
        return "a" * draw(st.integers(250, 5000))
    if kind == "own":
        return f"b4a3c2d1_{object_id}"
    parts = draw(st.lists(_SEGMENTS, min_size=1, max_size=5))
    seps = draw(st.lists(_SEPARATORS, min_size=len(parts), max_size=len(parts)))
    return draw(_PREFIXES) + "".join(p + s for p, s in zip(parts, seps, strict=True))


_ODD_IDS = st.sampled_from(
    [
        *(None, "v1$../../victim$dataset", "v1$a/b$dataset", "v1$\x00$dataset", "v1$\n$dataset", "v1$..$dataset"),
        *("v9$x$dataset", "v1$\u00e9\u0301$dataset", "v1$" + "z" * 300 + "$dataset"),
    ]
)
_VALUES = st.one_of(st.none(), st.text(max_size=20), st.integers(-(2**63), 2**63 - 1), st.binary(max_size=8))


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("template")
    _world(base)
    return base


@settings(max_examples=30, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_hostile_manifest_rows_never_touch_anything_outside_the_root(
    template: Path, tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    """Any row (location from a grammar of separators, dots, URIs, absolute paths, long names,
    other tables' directories; odd object ids; values of other types): every operation either
    works or fails with one PartitioningError line, and the sentinel tree never changes."""
    base = tmp_path_factory.mktemp("hostile")
    shutil.copytree(template, base, dirs_exist_ok=True)
    root = str(base / "ns")
    outside = _snapshot(base, Path(root))
    ns = PartitionedNamespace.load(root)
    tables = {t.values["p"]: t for t in ns.partitions()}
    victim = tables[data.draw(st.sampled_from(["a", "b"]))]
    other = tables["c"].location
    odd = data.draw(_ODD_IDS)
    object_id = victim.object_id if odd is None else odd
    location = data.draw(_hostile_location(object_id, other))
    value = data.draw(_VALUES)

    store = ManifestStore(root)
    ds = store.dataset()
    row = ds.to_table(filter=f"object_id = '{victim.object_id}'").to_pylist()[0]
    row.update(object_id=object_id, location=location, partition_field_p=value)
    columns = {name: [row[name]] for name in ds.schema.names}
    try:
        store.merge_rows(ds, pa.table(columns))
    except PartitioningError as exc:
        assert "\n" not in str(exc)
        return  # the store itself refused the row (a value that is not a string)
    hostile_version = store.dataset().version

    operations = [
        lambda: PartitionedNamespace.load(root).partitions(),
        lambda: PartitionedNamespace.load(root).plan_scan(),
        lambda: [ns.open_table(t).count_rows() for t in PartitionedNamespace.load(root).partitions()],
        lambda: write_table(PartitionedNamespace.load(root), _table([(50, "a"), (51, "e")])),
        lambda: write_table(PartitionedNamespace.load(root), _table([(52, "b")]), mode="overwrite_partitions"),
        lambda: compact_local(PartitionedNamespace.load(root)),
        lambda: delete_rows(root, "id = 1"),
        lambda: drop_partitions(root, "p = 'a'"),
        lambda: vacuum(root, ZERO, allow_short_retention=True),
        lambda: optimize_manifest(root),
        lambda: restore(root, version=hostile_version),
        lambda: PartitionedNamespace.load(root).remove_tables([object_id]),
        lambda: write_table(PartitionedNamespace.load(root), _table([(53, "c")]), mode="overwrite"),
        lambda: vacuum(root, ZERO, allow_short_retention=True),
        lambda: vacuum(root),
    ]
    for operation in operations:
        try:
            operation()
        except PartitioningError as exc:
            assert "\n" not in str(exc), str(exc)
        assert _snapshot(base, Path(root)) == outside
    shutil.rmtree(base)
