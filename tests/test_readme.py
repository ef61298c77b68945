"""README.md is the front door: short, with the two commands, a tour that runs, and links into docs/.

Its code runs with the docs pages' (tests/test_docs.py: one process, each page in order,
its output blocks compared with what it printed); these tests keep its shape.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"


def blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```$", text, flags=re.MULTILINE | re.DOTALL)


def test_the_readme_is_a_front_door() -> None:
    assert len(README.read_text().splitlines()) <= 300


def test_the_two_commands_come_first() -> None:
    text = README.read_text()
    first = blocks(text, "bash")[0]
    assert [line.split("#")[0].strip() for line in first.splitlines()] == ["make run", "make test"]
    assert text.index("## Two commands") < text.index("## A tour")


def test_the_tour_writes_reads_queries_merges_searches_and_maintains() -> None:
    (tour,) = blocks(README.read_text(), "python")
    code = [line.split("#")[0] for line in tour.splitlines()]
    assert len([line for line in code if line.strip()]) <= 30
    for call in ("write_partitioned(", "read_partitioned(spark, root, filter=", "spark.sql(", "merge_partitioned("):
        assert any(call in line for line in code), call
    for call in ("search_partitioned(", "compact(", "vacuum(", "history("):
        assert any(call in line for line in code), call


def test_the_readme_links_to_every_docs_page() -> None:
    links = set(re.findall(r"\]\((docs/[^)#]+)", README.read_text()))
    assert all((REPO / link).is_file() for link in links), links
    pages = {f"docs/{p.name}" for p in (REPO / "docs").glob("*.md")}
    assert pages <= links, pages - links
