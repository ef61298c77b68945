"""The repository's copy of the golden vectors and the spec is the shared one, where that exists.

The tests read tests/conformance/ only. A checkout beside the project's shared folder
(``../shared``) also checks that the copy has not drifted from it; a clone with nothing
beside it has nothing to compare and runs the copy.
"""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
COPY = HERE / "conformance"
SHARED = HERE.parents[1] / "shared"  # drift: compared only where the folder exists
PAIRS = [
    ("murmur3.json", "conformance/murmur3.json"),
    ("transforms.json", "conformance/transforms.json"),
    ("spec.txt", "seeds/001_276ba7633dd0e29b.txt"),
]


def test_the_copy_is_complete() -> None:
    assert sorted(p.name for p in COPY.iterdir()) == sorted(name for name, _ in PAIRS)
    assert all((COPY / name).stat().st_size > 1000 for name, _ in PAIRS)


@pytest.mark.parametrize(("name", "shared"), PAIRS)
def test_the_copy_matches_the_shared_folder_where_it_exists(name: str, shared: str) -> None:
    source = SHARED / shared  # drift
    if not SHARED.is_dir():
        return  # a clone with nothing beside it: the copy is the reference
    assert (COPY / name).read_bytes() == source.read_bytes(), f"tests/conformance/{name} drifted from {source}"
