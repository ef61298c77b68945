"""Grouping the (table, row address) pairs a change deletes, in Arrow: the same mapping a plain
Python grouping gives (object id -> sorted unique addresses), whatever the order, repeats
and chunking of the pairs."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from partitioning.plan.table_rows import addresses_of
from partitioning.storage.datasets import offsets_by_fragment

pairs = st.lists(
    st.tuples(st.sampled_from(["v1$a$dataset", "v1$b$dataset", "ß$c"]), st.integers(0, 2**40)), max_size=300
)


@settings(max_examples=60, deadline=None)
@given(pairs, st.integers(1, 5))
def test_addresses_group_as_plain_python_does(rows: list[tuple[str, int]], chunks: int) -> None:
    expected: dict[str, set[int]] = {}
    for table, address in rows:
        expected.setdefault(table, set()).add(address)
    size = max(1, len(rows) // chunks)
    pieces = [rows[i : i + size] for i in range(0, len(rows), size)] or [[]]
    table = pa.Table.from_batches(
        [
            pa.record_batch(
                [pa.array([t for t, _ in p], pa.string()), pa.array([a for _, a in p], pa.int64())], names=["t", "a"]
            )
            for p in pieces
        ]
    )
    assert addresses_of(table, "t", "a") == {t: sorted(a) for t, a in expected.items()}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2**31 - 1), st.integers(0, 2**32 - 1)), max_size=200))
def test_row_addresses_split_by_fragment_as_plain_python_does(pairs: list[tuple[int, int]]) -> None:
    """What a table's commit deletes: fragment id (high 32 bits) -> its sorted unique row offsets."""
    expected: dict[int, set[int]] = {}
    for fragment, offset in pairs:
        expected.setdefault(fragment, set()).add(offset)
    addresses = [fragment * 2**32 + offset for fragment, offset in pairs]
    assert offsets_by_fragment(addresses) == {f: sorted(o) for f, o in expected.items()}
    # grouped addresses arrive sorted and unique (addresses_of), which skips the unique;
    # sorted ones with repeats must not
    for ordered in (sorted(set(addresses)), sorted(addresses * 2)):
        assert offsets_by_fragment(ordered) == {f: sorted(o) for f, o in expected.items()}
