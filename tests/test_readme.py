"""The README's Python blocks run, in order, as a new user would run them.

Every fenced ```python block of README.md is executed in one fresh Python process (its own
SparkSession, started by the README's own ``build_session`` line) in an empty working
directory, with warnings as errors as in pytest.ini. A block preceded by the line
``<!-- readme-test: not run: REASON -->`` is shown but not run (for a block that needs a
remote service); none may be left out without a reason.
"""

from __future__ import annotations

import json
import re
import struct
import subprocess
import sys
from pathlib import Path

import mmh3
import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
NOT_RUN = re.compile(r"^<!-- readme-test: not run: (?P<reason>\S.*) -->$")

RUNNER = """
import json, pathlib, sys, time, warnings
warnings.filterwarnings("error")
warnings.filterwarnings("ignore", category=DeprecationWarning, module="pyspark.*")
warnings.filterwarnings("ignore", category=FutureWarning, module="pyspark.*")
warnings.filterwarnings("ignore", category=DeprecationWarning, module="pandas.*")
warnings.filterwarnings("ignore", message=".*distutils.*", category=DeprecationWarning)
readme, blocks = sys.argv[1], json.loads(pathlib.Path(sys.argv[2]).read_text())
scope = {"__name__": "__readme__"}
for line, code in blocks:
    print(f"=== README.md line {line}", flush=True)
    started = time.perf_counter()
    exec(compile("\\n" * (line - 1) + code, readme, "exec"), scope)
    print(f"=== {time.perf_counter() - started:.1f} s", flush=True)
if "spark" in scope:
    scope["spark"].stop()
print("=== done", flush=True)
"""


def python_blocks(text: str) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """``(first code line, code)`` of each ```python block to run, and ``(line, reason)`` of those not run."""
    lines = text.splitlines()
    run, not_run = [], []
    i = 0
    while i < len(lines):
        if lines[i].strip() == "```python":
            start = i + 1
            end = next(j for j in range(start, len(lines)) if lines[j].strip() == "```")
            previous = next((lines[j].strip() for j in range(i - 1, -1, -1) if lines[j].strip()), "")
            marker = NOT_RUN.match(previous)
            if marker:
                not_run.append((start + 1, marker.group("reason")))
            else:
                run.append((start + 1, "\n".join(lines[start:end]) + "\n"))
            i = end
        i += 1
    return run, not_run


def test_the_block_parser_finds_code_and_markers() -> None:
    marker = "<!-- readme-test: not run: needs a server -->"
    text = "\n".join(["intro", "```python", "x = 1", "```", "", marker, "```python", "y", "```", "```bash", "z", "```"])
    assert python_blocks(text) == ([(3, "x = 1\n")], [(8, "needs a server")])


@pytest.fixture(scope="module")
def readme_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], int]:
    blocks, _ = python_blocks(README.read_text())
    work = tmp_path_factory.mktemp("readme")
    (work / "blocks.json").write_text(json.dumps(blocks))
    (work / "run_readme.py").write_text(RUNNER)
    proc = subprocess.run(
        [sys.executable, "run_readme.py", str(README), "blocks.json"],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    return proc, len(blocks)


def test_every_python_block_runs_in_order(readme_run: tuple[subprocess.CompletedProcess[str], int]) -> None:
    proc, count = readme_run
    assert proc.returncode == 0, f"README block failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    assert proc.stdout.count("=== README.md line ") == count >= 6
    assert proc.stdout.rstrip().endswith("=== done")
    assert "partition spec:" not in proc.stderr  # no spec in the README puts far-apart days together


def test_blocks_not_run_say_why() -> None:
    run, not_run = python_blocks(README.read_text())
    assert len(run) >= 6
    assert all(reason.strip() for _, reason in not_run)


def test_the_partition_values_the_readme_shows(readme_run: tuple[subprocess.CompletedProcess[str], int]) -> None:
    """The Python example's row: time parts of 2025-12-10 23:30 UTC, and bucket[16] of 42 by mmh3."""
    proc, _ = readme_run
    bucket = abs(mmh3.hash(struct.pack("<q", 42), seed=0, signed=True)) % 16
    row = rf"\|2025-12-10 23:30:00\|\s*US\|\s*42\|\s*2025\|\s*12\|\s*10\|\s*{bucket}\|"
    assert re.search(row, proc.stdout), proc.stdout[:3000]
    assert f"# ts_year=2025, ts_month=12, ts_day=10, user_id_bucket={bucket}" in README.read_text()


@pytest.mark.parametrize(
    "line",
    [
        "lance_partitioned: scanning 1 of 9 partition tables (spec v1: 1/9) at __manifest v4",
        "residual filter: ((country = 'US') AND (ts < TIMESTAMP '2025-12-11 00:00:00Z'))",
    ],
)
def test_the_plan_the_readme_prints(readme_run: tuple[subprocess.CompletedProcess[str], int], line: str) -> None:
    proc, _ = readme_run
    assert f"# {line}" in README.read_text()
    assert line in proc.stdout.splitlines()
