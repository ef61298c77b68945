"""The commands of README.md and docs/*.md run as written, from a clone of the repository.

Every ```bash block not marked ``<!-- docs-test: not run: REASON -->`` is checked here:

- by default, without running anything heavy: every ``make`` target exists in the Makefile,
  every job script exists and its arguments parse (its own ``parse_args``), every file a
  command names exists (or an earlier command makes it), and an interpreter handed to Spark
  is absolute (Spark Connect and executors start Python in other directories);
- under the ``slow`` marker, for real: the blocks run in order with ``bash -e`` in this
  checkout (CI's is a fresh clone), as a new user would run them (``make test`` left out).
"""

from __future__ import annotations

import importlib
import re
import shlex
import subprocess
from pathlib import Path

import pytest
from test_docs import ALL_BLOCKS, Block

REPO = Path(__file__).resolve().parents[1]
COMMANDS = [b for b in ALL_BLOCKS if b.lang == "bash" and b.marker is None]
MADE_BY_COMMANDS = ("warehouse/",)  # `make run` and the jobs write there


def _commands(block: Block) -> list[list[str]]:
    """The block's commands as argument lists (continuation lines joined, comments dropped)."""
    text = block.code.replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        words = shlex.split(line, comments=True)
        if words:
            out.append(words)
    return out


def _strip_env(words: list[str]) -> tuple[dict[str, str], list[str]]:
    env = {}
    while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
        key, _, value = words[0].partition("=")
        env[key] = value
        words = words[1:]
    return env, words


def _targets() -> set[str]:
    text = (REPO / "Makefile").read_text()
    return {m.group(1) for m in re.finditer(r"^([A-Za-z][\w-]*):", text, re.M)}


def _job_args(words: list[str]) -> tuple[str, list[str]] | None:
    """(job module, its arguments) of a ``spark-submit ... jobs/x.py ...`` or ``python jobs/x.py ...``."""
    for i, word in enumerate(words):
        if re.fullmatch(r"jobs/\w+\.py", word):
            return word, words[i + 1 :]
    return None


def test_the_docs_have_commands_to_check() -> None:
    assert len(COMMANDS) >= 5, [f"{b.page}:{b.line}" for b in COMMANDS]


@pytest.mark.parametrize("block", COMMANDS, ids=[f"{b.page}:{b.line}" for b in COMMANDS])
def test_every_command_names_what_exists_and_parses(block: Block) -> None:
    targets = _targets()
    for words in _commands(block):
        env, words = _strip_env(words)
        for key in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON"):
            if key in env:
                assert env[key].startswith(("$PWD/", "/")), f"{block.page}:{block.line}: {key}={env[key]}"
        if words[0] == "make":
            missing = [t for t in words[1:] if not t.startswith("-") and t not in targets]
            assert not missing, f"{block.page}:{block.line}: no Makefile target {missing}"
            continue
        assert words[0].startswith(".venv/bin/"), f"{block.page}:{block.line}: {words[0]} is not the project's"
        for word in words:
            if word.startswith(("jobs/", "spark-conf/")):
                assert (REPO / word).is_file(), f"{block.page}:{block.line}: {word} does not exist"
            if word.startswith("build/"):
                assert word == "build/lance-partitioned-udfs.jar", word  # `make` builds it
        for option in [w for w in words if w.startswith("--conf")]:
            assert option == "--conf"
        job = _job_args(words)
        if job is not None:
            module = importlib.import_module(job[0].removesuffix(".py").replace("/", "."))
            args = [a.replace("$PWD", str(REPO)) for a in job[1]]
            module.parse_args(args)  # argparse exits (a failure here) on an unknown flag


@pytest.mark.slow
def test_every_command_runs_as_written() -> None:
    """In this checkout (CI's is a fresh clone), in the order the pages give them."""
    for block in COMMANDS:
        code = "\n".join(ln for ln in block.code.splitlines() if not ln.strip().startswith("make test"))
        proc = subprocess.run(
            ["bash", "-e", "-c", code], cwd=REPO, capture_output=True, text=True, timeout=1200, check=False
        )
        assert proc.returncode == 0, f"{block.page}:{block.line}\n{code}\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}"
