"""jobs/describe.py on a small skewed namespace: printed layout, history and percentiles, and the PNG.

Partition sizes are chosen so the percentiles can be worked out by hand (numpy's linear
interpolation: position (n - 1) * p / 100 between the sorted values).
"""

from __future__ import annotations

import re

import matplotlib.image
import pyarrow as pa
import pytest

from jobs import describe
from partitioning import PartitionedNamespace
from partitioning.tables.write import write_table

SCHEMA = pa.schema([("country", pa.string()), ("n", pa.int64())])
SIZES = {"AT": 10, "BE": 20, "DE": 40, "ES": 50, "US": 1000}  # NL: 3 appends of 10 rows


def _rows(country: str, count: int, start: int = 0) -> pa.Table:
    return pa.table({"country": [country] * count, "n": list(range(start, start + count))}, schema=SCHEMA)


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("describe") / "ns")
    ns = PartitionedNamespace.create(path, SCHEMA, ["country"])
    write_table(ns, pa.concat_tables([_rows(c, k) for c, k in SIZES.items()]))
    for i in range(3):
        write_table(ns, _rows("NL", 10, start=10 * i))
    return path


def _numbers(line: str) -> list[float]:
    return [float(x.replace(",", "")) for x in line.split()[1:]]


def test_describe_prints_layout_history_and_percentiles(root: str, tmp_path, capsys) -> None:
    plot = tmp_path / "skew.png"
    assert describe.main(["--root", root, "--plot", str(plot)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].startswith(f"{root}  (__manifest v")
    assert "  v1: v1[country=identity(0)]" in lines
    assert sum("read_version=" in line for line in lines) == 6
    history = lines.index(next(line for line in lines if line.startswith("history (last ")))
    assert [line.split()[3] for line in lines[history + 1 : history + 5]] == ["WRITE"] * 4
    assert "partitions: 6  rows: 1,150  deleted rows: 0" in out
    rows = next(line for line in lines if line.startswith("rows "))
    assert _numbers(rows) == [10, 22.5, 35, 47.5, 525, 952.5, 1000]
    fragments = next(line for line in lines if line.startswith("fragments "))
    assert _numbers(fragments) == [1, 1, 1, 1, 2, 2.9, 3]
    assert "skew (largest / median rows): 28.6x" in lines
    assert "outliers: 1 partition: country=US (1,000 rows)" in lines
    assert re.search(r"small files: 1 partition of 2\+ fragments .*: country=NL \(3 fragments\)$", out, re.M)
    assert lines[-1] == f"describe: wrote {plot}"


def test_describe_writes_a_png(root: str, tmp_path, capsys) -> None:
    plot = tmp_path / "skew.png"
    assert describe.main(["--root", root, "--plot", str(plot), "--history", "0", "--max-tables", "2"]) == 0
    out = capsys.readouterr().out
    assert "    ... and 4 more partition tables" in out and "history: (not shown)" in out
    data = plot.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    assert len(data) > 5_000
    image = matplotlib.image.imread(str(plot))
    height, width = image.shape[:2]
    assert (width, height) == (1200, 700)
    assert image.std() > 0.05  # not a blank canvas


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--filter", "country = = 'US'"], "cannot parse filter"),
        (["--version", "99"], "has no __manifest version 99"),
        (["--history", "-1"], "--history must be at least 0"),
        (["--plot", "/nonexistent-dir/x.png"], "cannot write the plot"),
    ],
)
def test_bad_input_is_one_error_line(root: str, capsys, args, words) -> None:
    assert describe.main(["--root", root, *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and words in err and "\n" not in err


def test_missing_root_is_one_error_line(tmp_path, capsys) -> None:
    assert describe.main(["--root", str(tmp_path / "nothing")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "no namespace at" in err and "\n" not in err
