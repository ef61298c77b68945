"""The code in README.md and docs/*.md runs, page by page, as a new user would run it.

Every fenced block has a language, and what the tests do with it depends on it:

- ```python blocks run, in order, page by page. Each page is self-contained: it starts from
  its own ``spark = build_session(...)`` line (or from data it makes itself) and gets a fresh
  scope and a fresh, empty working directory. All pages run in ONE fresh Python process,
  with warnings as errors as in pytest.ini; ``build_session`` returns the session that is
  already active, so the JVM starts once.
- ```sql blocks run the same way, statement by statement (``;`` ends one), through the
  page's ``spark.sql``; a query's rows are shown.
- ```text blocks right after a python or sql block that ran are that block's output: every
  line of it must be printed by that block, in order (``...`` stands for any text; lines the
  block printed in between may be left out).
- ```bash blocks are the commands of the docs (a separate test runs them from a fresh clone);
  here they are only checked for an interpreter path a Spark worker can find.
- ```mermaid blocks are diagrams: ``tests/test_architecture.py`` holds the code to the arrows
  of the architecture page's.

A block preceded by ``<!-- docs-test: not run: REASON -->`` is shown but not run (for a
block that needs a remote service or shows a file of another tool); a text block preceded by
``<!-- docs-test: output not checked: REASON -->`` is not compared. None is left out without
a reason.
"""

from __future__ import annotations

import json
import os
import re
import struct
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import mmh3
import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS = REPO / "docs"
MARKER = re.compile(r"^<!-- docs-test: (?P<kind>not run|output not checked): (?P<reason>\S.*?) -->$")
LANGUAGES = {"python", "bash", "text", "sql", "mermaid"}  # mermaid: tests/test_architecture.py
RUN = {"python", "sql"}


@dataclass(frozen=True)
class Block:
    """One fenced block: its language, its first code line (1-based), its code (dedented)."""

    page: str
    line: int
    lang: str
    code: str
    marker: str | None = None  # "not run" or "output not checked"
    reason: str | None = None
    output_of: int | None = None  # the line of the python/sql block this text block is the output of

    @property
    def runs(self) -> bool:
        return self.lang in RUN and self.marker is None


def fenced_blocks(text: str, page: str = "page.md") -> list[Block]:
    """Every fenced block of a markdown text, with its marker and whose output it shows."""
    lines = text.splitlines()
    blocks: list[Block] = []
    previous_end = -2  # the line index of the previous block's closing fence
    previous: Block | None = None
    i = 0
    while i < len(lines):
        stripped = lines[i].strip()
        if stripped.startswith("```"):
            indent = len(lines[i]) - len(lines[i].lstrip())
            lang = stripped[3:].strip()
            start = i + 1
            end = next((j for j in range(start, len(lines)) if lines[j].strip() == "```"), None)
            if end is None:
                raise ValueError(f"{page}:{i + 1}: a fence that is never closed")
            code = "\n".join(line[indent:] if not line[:indent].strip() else line.lstrip() for line in lines[start:end])
            before = next((j for j in range(i - 1, -1, -1) if lines[j].strip()), None)
            marker = MARKER.match(lines[before].strip()) if before is not None else None
            output_of = None
            if (
                lang == "text"
                and marker is None
                and previous is not None
                and previous.runs
                and all(not lines[j].strip() for j in range(previous_end + 1, i))
            ):
                output_of = previous.line
            block = Block(
                page,
                start + 1,
                lang,
                code + "\n",
                marker.group("kind") if marker else None,
                marker.group("reason") if marker else None,
                output_of,
            )
            blocks.append(block)
            previous, previous_end = block, end
            i = end
        i += 1
    return blocks


def pages() -> list[Path]:
    """README.md, then the docs pages in the order of mkdocs.yml's nav."""
    nav = re.findall(r"^\s+- [^:\n]+: (\S+\.md)\s*$", (REPO / "mkdocs.yml").read_text(), flags=re.MULTILINE)
    listed = [DOCS / name for name in nav if (DOCS / name).is_file()]
    rest = sorted(set(DOCS.glob("*.md")) - set(listed))
    return [README, *listed, *rest]


def page_name(path: Path) -> str:
    return str(path.relative_to(REPO))


RUNNER = r"""
import json, os, pathlib, sys, time, traceback, warnings
warnings.filterwarnings("error")
warnings.filterwarnings("ignore", category=DeprecationWarning, module="pyspark.*")
warnings.filterwarnings("ignore", category=FutureWarning, module="pyspark.*")
warnings.filterwarnings("ignore", category=DeprecationWarning, module="pandas.*")
warnings.filterwarnings("ignore", message=".*distutils.*", category=DeprecationWarning)
repo, plan = pathlib.Path(sys.argv[1]), json.loads(pathlib.Path(sys.argv[2]).read_text())
work = pathlib.Path.cwd()
session = None


def statements(sql):
    return [s.strip() for s in sql.split(";\n") if s.strip().rstrip(";").strip()]


for page, blocks in plan:
    here = work / "pages" / page.replace("/", "_")
    here.mkdir(parents=True)
    os.chdir(here)
    scope = {"__name__": "__docs__"}
    print(f"=== page {page}", flush=True)
    for line, lang, code in blocks:
        print(f"=== block {page} {line}", flush=True)
        started = time.perf_counter()
        try:
            if lang == "python":
                exec(compile("\n" * (line - 1) + code, str(repo / page), "exec"), scope)
            else:
                for statement in statements(code):
                    result = scope["spark"].sql(statement.rstrip(";"))
                    if statement.split(None, 1)[0].upper() in ("SELECT", "SHOW", "DESCRIBE", "WITH"):
                        result.show(truncate=False)
        except BaseException:
            print(f"=== failed {page} {line}", flush=True)
            traceback.print_exc(file=sys.stdout)
            sys.stdout.flush()
            break
        finally:
            session = scope.get("spark", session)
        print(f"=== ok {time.perf_counter() - started:.1f} s", flush=True)
os.chdir(work)
if session is not None:
    session.stop()
print("=== done", flush=True)
"""


@dataclass
class Run:
    proc: subprocess.CompletedProcess[str]
    seconds: float
    output: dict[tuple[str, int], list[str]]  # (page, line) -> the lines that block printed
    failed: dict[str, str]  # page -> the failing block's traceback
    ran: list[tuple[str, int]]


def parse_run(stdout: str) -> tuple[dict[tuple[str, int], list[str]], dict[str, str], list[tuple[str, int]]]:
    output: dict[tuple[str, int], list[str]] = {}
    failed: dict[str, str] = {}
    ran: list[tuple[str, int]] = []
    current: tuple[str, int] | None = None
    failing: str | None = None
    for line in stdout.splitlines():
        if line.startswith("=== block "):
            _, _, page, number = line.split(" ")
            current, failing = (page, int(number)), None
            output[current] = []
        elif line.startswith("=== ok ") and current is not None:
            ran.append(current)
            current = None
        elif line.startswith("=== failed "):
            failing = line.split(" ")[2]
            failed[failing] = ""
        elif line.startswith("=== "):
            current, failing = None, None
        elif failing is not None:
            failed[failing] += line + "\n"
        elif current is not None:
            output[current].append(line.rstrip())
    return output, failed, ran


def run_blocks(paths: list[Path], work: Path) -> Run:
    plan = []
    for path in paths:
        runnable = [(b.line, b.lang, b.code) for b in fenced_blocks(path.read_text(), page_name(path)) if b.runs]
        if runnable:
            plan.append((page_name(path), runnable))
    (work / "plan.json").write_text(json.dumps(plan))
    (work / "run_docs.py").write_text(RUNNER)
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "run_docs.py", str(REPO), "plan.json"],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    return Run(proc, time.perf_counter() - started, *parse_run(proc.stdout))


def matches(expected: list[str], printed: list[str]) -> str | None:
    """None when every expected line (``...`` = any text) is printed, in order; else the first one missing."""
    at = 0
    for line in expected:
        if not line.strip():
            continue
        pattern = re.compile(".*".join(re.escape(part) for part in line.rstrip().split("...")))
        at = next((k + 1 for k in range(at, len(printed)) if pattern.fullmatch(printed[k])), -1)
        if at < 0:
            return line
    return None


ALL_PAGES = pages()
ALL_BLOCKS = [b for path in ALL_PAGES for b in fenced_blocks(path.read_text(), page_name(path))]
RUN_PAGES = sorted({b.page for b in ALL_BLOCKS if b.runs}, key=[page_name(p) for p in ALL_PAGES].index)


@pytest.fixture(scope="module")
def docs_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    run = run_blocks(ALL_PAGES, tmp_path_factory.mktemp("docs"))
    print(f"\nthe docs' code ran in {run.seconds:.1f} s")
    return run


# --- the parser


def test_the_block_parser_finds_code_markers_and_outputs() -> None:
    text = "\n".join(
        [
            "intro",
            "```python",
            "print(1)",
            "```",
            "",
            "```text",
            "1",
            "```",
            "<!-- docs-test: not run: needs a server -->",
            "```python",
            "y",
            "```",
            "```text",
            "not an output: the block above does not run",
            "```",
            "- a list item:",
            "",
            "  ```bash",
            "  make run",
            "  ```",
        ]
    )
    blocks = fenced_blocks(text)
    assert [(b.line, b.lang, b.code, b.marker, b.reason, b.output_of) for b in blocks] == [
        (3, "python", "print(1)\n", None, None, None),
        (7, "text", "1\n", None, None, 3),
        (11, "python", "y\n", "not run", "needs a server", None),
        (14, "text", "not an output: the block above does not run\n", None, None, None),
        (19, "bash", "make run\n", None, None, None),
    ]


def test_output_lines_match_in_order_with_ellipses() -> None:
    printed = ["a", "/tmp/x/warehouse/events: 9 rows", "b", "c"]
    assert matches([".../warehouse/events: 9 rows", "c"], printed) is None
    assert matches(["c", "a"], printed) == "a"
    assert matches(["d"], printed) == "d"


def test_the_run_parser_splits_output_by_block() -> None:
    stdout = "\n".join(
        ["=== page a.md", "=== block a.md 3", "x ", "=== ok 0.1 s", "=== block a.md 9", "=== failed a.md 9", "Trace"]
    )
    assert parse_run(stdout) == ({("a.md", 3): ["x"], ("a.md", 9): []}, {"a.md": "Trace\n"}, [("a.md", 3)])


# --- the pages, without running them


def test_every_block_has_a_known_language_or_says_why_not() -> None:
    unknown = [
        f"{b.page}:{b.line} ```{b.lang}" for b in ALL_BLOCKS if b.lang not in LANGUAGES and b.marker != "not run"
    ]
    assert not unknown, f"blocks need a language of {sorted(LANGUAGES)} or a not-run marker: {unknown}"


def test_json_blocks_are_json() -> None:
    for b in ALL_BLOCKS:
        if b.lang == "json":
            json.loads(b.code)


def test_blocks_left_out_say_why() -> None:
    assert all(b.reason and b.reason.strip() for b in ALL_BLOCKS if b.marker)
    assert sum(b.runs for b in ALL_BLOCKS) >= 10


def test_every_page_is_in_the_nav() -> None:
    nav = re.findall(r"^\s+- [^:\n]+: (\S+\.md)\s*$", (REPO / "mkdocs.yml").read_text(), flags=re.MULTILINE)
    assert sorted(nav) == sorted(p.name for p in DOCS.glob("*.md"))


def test_bash_blocks_give_spark_an_absolute_python() -> None:
    """Spark Connect and cluster executors start Python in other directories: a relative one is not found."""
    relative = re.compile(
        r"(PYSPARK_PYTHON|PYSPARK_DRIVER_PYTHON|spark\.pyspark\.(driver\.)?python)=(?![\"']?(\$PWD|/))"
    )
    bad = [f"{b.page}:{b.line}" for b in ALL_BLOCKS if b.lang == "bash" and not b.marker and relative.search(b.code)]
    assert not bad, f'give PYSPARK_PYTHON as "$PWD/.venv/bin/python": {bad}'


def test_no_issue_numbers_in_the_docs() -> None:
    for path in ALL_PAGES:
        assert not re.search(r"\bissues? \d+", path.read_text(), flags=re.IGNORECASE), path


@pytest.mark.parametrize("page", RUN_PAGES)
def test_each_page_starts_its_own_session(page: str) -> None:
    """The first line of a page's code that uses ``spark`` is its own ``spark = build_session(...)``."""
    code = "\n".join(b.code for b in ALL_BLOCKS if b.page == page and b.runs)
    uses = [line for line in code.splitlines() if re.search(r"\bspark\b", line.split("#")[0])]
    if uses:
        assert re.match(r"spark = build_session\(", uses[0]), uses[0]


# --- the pages, run


def test_the_docs_run_in_one_process(docs_run: Run) -> None:
    proc = docs_run.proc
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    assert proc.stdout.rstrip().endswith("=== done")
    assert "partition spec:" not in proc.stderr  # no spec in the docs puts far-apart days together


@pytest.mark.parametrize("page", RUN_PAGES)
def test_every_block_of_the_page_runs(docs_run: Run, page: str) -> None:
    assert page not in docs_run.failed, f"{page}:\n{docs_run.failed.get(page)}\n{docs_run.proc.stderr[-3000:]}"
    expected = [(b.page, b.line) for b in ALL_BLOCKS if b.page == page and b.runs]
    assert [r for r in docs_run.ran if r[0] == page] == expected


@pytest.mark.parametrize("page", sorted({b.page for b in ALL_BLOCKS if b.output_of}))
def test_the_output_the_page_shows_is_printed(docs_run: Run, page: str) -> None:
    for b in ALL_BLOCKS:
        if b.page == page and b.output_of:
            printed = docs_run.output.get((page, b.output_of), [])
            missing = matches(b.code.splitlines(), printed)
            assert missing is None, (
                f"{page}:{b.line}: {missing!r} not printed by the block at line {b.output_of}:\n" + ("\n".join(printed))
            )


def test_the_partition_values_getting_started_shows(docs_run: Run) -> None:
    """The first namespace's row: time parts of 2025-12-10 23:30 UTC, and bucket[16] of 42 by mmh3."""
    bucket = abs(mmh3.hash(struct.pack("<q", 42), seed=0, signed=True)) % 16
    row = rf"\|2025-12-10 23:30:00\|\s*US\|\s*42\|\s*2025\|\s*12\|\s*10\|\s*{bucket}\|"
    shown = [b.code for b in ALL_BLOCKS if b.page == "docs/getting-started.md" and b.output_of]
    assert any(re.search(row, code) for code in shown), shown
    printed = [
        line for (page, _), lines in docs_run.output.items() if page == "docs/getting-started.md" for line in lines
    ]
    assert any(re.search(row, line) for line in printed), printed


@pytest.mark.parametrize(
    "line",
    [
        "lance_partitioned: scanning 1 of 9 partition tables (spec v1: 1/9) at __manifest v3",
        "residual filter: ((country = 'US') AND (ts < TIMESTAMP '2025-12-11 00:00:00Z'))",
    ],
)
def test_the_plan_reading_prints(docs_run: Run, line: str) -> None:
    shown = [b.code for b in ALL_BLOCKS if b.page == "docs/reading.md" and b.output_of]
    assert any(line in code.splitlines() for code in shown)
    printed = [line for (page, _), lines in docs_run.output.items() if page == "docs/reading.md" for line in lines]
    assert line in printed


# --- the site


def _all_names(init: Path) -> list[str]:
    import ast

    for node in ast.parse(init.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            return [ast.literal_eval(e) for e in node.value.elts]  # type: ignore[attr-defined]
    raise AssertionError(f"no __all__ in {init}")


def test_the_reference_covers_every_public_name_and_job() -> None:
    directives = set(re.findall(r"^::: (\S+)$", (DOCS / "reference.md").read_text(), flags=re.MULTILINE))
    expected = {f"pipelines.{n}" for n in _all_names(REPO / "pipelines" / "__init__.py")}
    expected |= {f"partitioning.{n}" for n in _all_names(REPO / "partitioning" / "__init__.py")}
    expected |= {f"jobs.{p.stem}" for p in (REPO / "jobs").glob("*.py") if not p.stem.startswith("_")}
    assert expected <= directives, sorted(expected - directives)


def test_the_site_builds_strict(tmp_path: Path) -> None:
    """What ``make docs`` runs: no broken link, anchor or reference."""
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings_handlers.python")
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "site" / "reference" / "index.html").is_file()
