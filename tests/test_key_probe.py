"""The driver's key probe (pipelines.write.matches.key_probe) keeps exactly the target rows
whose integer key the source has, whether it tests a bitmap of the source's keys (a narrow
range of values) or binary-searches them (a wide one); the oracle is Python's own set."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from partitioning.namespace import PartitionedNamespace
from pipelines.write.matches import key_probe

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
NEAR = st.integers(min_value=-300, max_value=300)
KEYS = st.lists(st.one_of(NEAR, INT64), min_size=1, max_size=60)
TARGET = st.lists(st.one_of(st.none(), NEAR, INT64), max_size=120)
EXTREMES = [-(2**63), 2**63 - 1, -(2**63) + 1, 2**63 - 2, 0, -1]


@pytest.fixture(scope="module")
def namespace(tmp_path_factory: pytest.TempPathFactory) -> PartitionedNamespace:
    root = Path(tmp_path_factory.mktemp("probe")) / "ns"
    return PartitionedNamespace.create(str(root), pa.schema([("id", pa.int64()), ("p", pa.int32())]), ["p"])


@settings(max_examples=200, deadline=None)
@given(keys=KEYS, target=TARGET)
@example(keys=[5, 7, 9], target=[None, 4, 5, 6, 7, 8, 9, 10, *EXTREMES])  # a bitmap
@example(keys=[-(2**63), 2**63 - 1], target=[None, *EXTREMES, 5])  # binary search
@example(keys=[2**63 - 3, 2**63 - 1], target=[*EXTREMES, 2**63 - 3, -(2**63) + 2])  # a bitmap at the top
@example(keys=[-(2**63), -(2**63) + 2], target=[*EXTREMES, -(2**63) + 2, 2**63 - 3])  # a bitmap at the bottom
def test_the_probe_keeps_the_rows_whose_key_the_source_has(
    namespace: PartitionedNamespace, keys: list[int], target: list[int | None]
) -> None:
    probe = key_probe(namespace, ["id"], pa.table({"id": pa.array(keys, pa.int64())}), ["id"])
    rows = pa.table({"id": pa.array(target, pa.int64()), "n": pa.array(range(len(target)), pa.int64())})
    kept = probe.keep(rows).column("n").to_pylist()
    wanted = set(keys)
    assert kept == [n for n, value in enumerate(target) if value is not None and value in wanted]


def test_a_narrow_range_is_a_bitmap_and_a_wide_one_is_searched(namespace: PartitionedNamespace) -> None:
    narrow = key_probe(namespace, ["id"], pa.table({"id": pa.array([1, 64], pa.int64())}), ["id"])
    wide = key_probe(namespace, ["id"], pa.table({"id": pa.array([1, 10**6], pa.int64())}), ["id"])
    assert narrow.bits is not None and wide.bits is None
