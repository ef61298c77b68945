"""Row-level changes rebase onto commits they do not depend on (issue 48, part 1).

Spark-free and deterministic: another writer's commit is made to land between a delete's
search for its rows and its commit (inside the row finder). The oracle is plain pylance
reading every partition table at the version ``__manifest`` records, against rows computed
here in Python.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import lance
import pyarrow as pa
import pytest

from partitioning import PartitionedNamespace
from partitioning.sql.filters import Dialect
from partitioning.state.scan import ScanTask
from partitioning.tables.compaction import compact_local
from partitioning.tables.deletes import delete_rows, rows_to_delete_datafusion
from partitioning.tables.rebase import Touches
from partitioning.tables.write import write_table

SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.int32()), ("v", pa.string())])


def _rows(ids: Sequence[int]) -> pa.Table:
    return pa.table({"id": list(ids), "p": [i % 3 for i in ids], "v": [f"r{i}" for i in ids]}, schema=SCHEMA)


def _stored(root: str) -> list[int]:
    """Every committed row's id, read with plain pylance at the recorded versions."""
    manifest = lance.dataset(str(Path(root) / "__manifest")).to_table().to_pylist()
    ids: list[int] = []
    for row in manifest:
        if row["object_type"] == "table":
            ds = lance.dataset(str(Path(root) / row["location"]), version=row["read_version"])
            ids += ds.to_table(columns=["id"]).column("id").to_pylist()
    return sorted(ids)


@pytest.fixture()
def root(tmp_path: Path) -> str:
    root = str(tmp_path / "ns")
    write_table(PartitionedNamespace.create(root, SCHEMA, ["p"]), _rows(range(300)))
    return root


def _finder_that_lets_a_commit_in(commit: object, calls: list[int]):  # type: ignore[no-untyped-def]
    """A row finder (DataFusion) during whose first call another writer commits."""

    def find(ns: PartitionedNamespace, tasks: Sequence[ScanTask], filter_sql: str) -> Mapping[str, Sequence[int]]:
        found = rows_to_delete_datafusion(ns, tasks, filter_sql)
        calls.append(len(calls) + 1)
        if len(calls) == 1:
            commit()  # type: ignore[operator]
        return found

    return find


def test_a_delete_commits_beside_an_append_it_cannot_match_without_searching_again(root: str) -> None:
    calls: list[int] = []
    appended = range(100_000, 100_030)

    def append() -> None:
        write_table(PartitionedNamespace.load(root), _rows(appended))

    report = delete_rows(root, "id < 40", find_rows=_finder_that_lets_a_commit_in(append, calls))
    assert calls == [1]  # rebased: the rows were found once
    assert report.rows == 40
    assert _stored(root) == sorted([*range(40, 300), *appended])


def test_appended_rows_the_delete_selects_make_it_search_again_and_go_too(root: str) -> None:
    calls: list[int] = []

    def append() -> None:
        write_table(PartitionedNamespace.load(root), _rows([5_000, 5_001, 100_000]))

    delete_rows(root, "id < 40 OR id = 5000", find_rows=_finder_that_lets_a_commit_in(append, calls))
    assert calls == [1, 2]
    assert _stored(root) == sorted([*range(40, 300), 5_001, 100_000])


def test_a_compaction_of_the_rows_a_delete_removes_makes_it_search_again(root: str) -> None:
    write_table(PartitionedNamespace.load(root), _rows(range(300, 330)))  # a second fragment to compact with
    calls: list[int] = []

    def compact() -> None:
        report = compact_local(PartitionedNamespace.load(root))
        assert report.tables, report

    delete_rows(root, "id < 40", find_rows=_finder_that_lets_a_commit_in(compact, calls))
    assert calls == [1, 2]
    assert _stored(root) == list(range(40, 330))


def test_another_delete_of_other_rows_in_the_same_fragment_is_rebased_onto(root: str) -> None:
    calls: list[int] = []

    def other_delete() -> None:
        delete_rows(root, "id >= 290")

    delete_rows(root, "id < 40", find_rows=_finder_that_lets_a_commit_in(other_delete, calls))
    assert calls == [1]
    assert _stored(root) == list(range(40, 290))


def test_the_same_rows_deleted_by_another_writer_make_it_search_again(root: str) -> None:
    calls: list[int] = []

    def other_delete() -> None:
        delete_rows(root, "id < 10")

    report = delete_rows(root, "id < 40", find_rows=_finder_that_lets_a_commit_in(other_delete, calls))
    assert calls == [1, 2]
    assert report.rows == 30
    assert _stored(root) == list(range(40, 300))


@pytest.mark.parametrize(
    ("condition", "keys", "touched"),
    [
        ("id < 400", None, [3]),
        ("id >= 100000 AND v LIKE 'r1%'", None, [100_000, 100_001]),
        (None, None, [3, 100_000, 100_001, 200_000]),
        ("v IS NULL", None, []),
        (None, pa.table({"id": [3, 200_000, 7]}), [3, 200_000]),
        ("p = 0", pa.table({"id": [3, 200_000, 7]}), [3]),
        # keys that cannot be compared as the table's count every row the condition selects
        ("p = 0", pa.table({"id": ["x"]}), [3]),
        # a condition this process cannot evaluate exactly counts every row
        ("upper(v) = 'R3'", None, [3, 100_000, 100_001, 200_000]),
    ],
)
def test_touches_counts_the_rows_spark_would_select(
    condition: str | None, keys: pa.Table | None, touched: list[int]
) -> None:
    rows = pa.table(
        {"id": [3, 100_000, 100_001, 200_000], "p": [0, 1, 2, 1], "v": ["r3", "r100000", "r100001", "x"]},
        schema=SCHEMA,
    )
    touches = Touches.of_sql(condition, Dialect(), SCHEMA, keys)
    view = rows.select(touches.columns(SCHEMA))
    assert touches.count(view, view.schema) == len(touched)
