"""jobs/backfill.py: an embedding backfilled by a user's function (optionally indexed); bad input is one line.

The user's module lives only in the test's tmp_path, on the driver's ``sys.path``: Spark's
Python workers, started with the session, cannot import it, so the tasks work only because
the job pickles the module by value.
"""

from __future__ import annotations

import hashlib
import sys
import textwrap
import uuid
from collections.abc import Iterator

import lance
import numpy as np
import pyarrow as pa
import pytest
from pyspark import cloudpickle

from jobs import backfill
from partitioning import PartitionedNamespace
from partitioning.tables.write import write_table

DIM = 8
ROWS = 300
SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("c", pa.string()), pa.field("text", pa.string())])

MODULE = '''
import hashlib

import numpy as np

DIM = 8


def vector(text):
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
    return np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)


def embed(texts):
    """A 2-D array, one row per text."""
    return np.stack([vector(t) for t in texts])


def embed_lists(texts):
    """A list of lists."""
    return [vector(t).tolist() for t in texts]


def embed_pair(frame):
    """Two columns in, one vector per row out."""
    return np.stack([vector(f"{c}/{t}") for c, t in zip(frame["c"], frame["text"])])


def too_wide(texts):
    return np.zeros((len(texts), DIM + 1), np.float32)


NOT_A_FUNCTION = 3
'''


def expected(text: str) -> np.ndarray:
    """The test's own answer for one text, computed independently of the job."""
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
    return np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)


@pytest.fixture
def user_module(tmp_path, monkeypatch) -> Iterator[str]:
    """The name of a fresh module in tmp_path, importable by the driver only."""
    name = f"embed_{uuid.uuid4().hex[:10]}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    if name in sys.modules:
        if cloudpickle.cloudpickle._is_registered_pickle_by_value(sys.modules[name]):
            cloudpickle.unregister_pickle_by_value(sys.modules[name])
        del sys.modules[name]


def make(root: str) -> list[dict]:
    rows = [{"id": i, "c": "abc"[i % 3], "text": f"document {i} about {i % 7}"} for i in range(ROWS)]
    write_table(PartitionedNamespace.create(root, SCHEMA, ["c"]), pa.Table.from_pylist(rows, schema=SCHEMA))
    return rows


def read_back(root: str, column: str) -> dict[int, np.ndarray]:
    out = {}
    for t in PartitionedNamespace.load(root).partitions():
        table = lance.dataset(t.uri, version=t.read_version).to_table(columns=["id", column])
        assert table.schema.field(column).type == pa.list_(pa.float32(), DIM)
        for i, v in zip(table.column("id").to_pylist(), table.column(column).to_pylist(), strict=True):
            out[i] = np.asarray(v, np.float32)
    return out


@pytest.mark.parametrize(
    ("fn", "columns"), [("embed", ["text"]), ("embed_lists", ["text"]), ("embed_pair", ["c", "text"])]
)
def test_backfill_job_writes_the_functions_vectors(spark, tmp_path, capsys, user_module, fn, columns):
    root = str(tmp_path / "ns")
    rows = make(root)
    argv = ["--root", root, "--fn", f"{user_module}:{fn}", "--output", "emb", "--dim", str(DIM)]
    for c in columns:
        argv += ["--column", c]
    assert backfill.main(argv) == 0
    assert cloudpickle.cloudpickle._is_registered_pickle_by_value(sys.modules[user_module])
    out = capsys.readouterr().out
    assert f"{root}: backfill (added emb): {ROWS} rows in 3 fragments of 3 partitions" in out
    got = read_back(root, "emb")
    assert sorted(got) == list(range(ROWS))
    for r in rows:
        text = f"{r['c']}/{r['text']}" if fn == "embed_pair" else r["text"]
        np.testing.assert_array_equal(got[r["id"]], expected(text))


def test_backfill_job_builds_a_vector_index(spark, tmp_path, capsys, user_module):
    root = str(tmp_path / "ns")
    make(root)
    argv = ["--root", root, "--column", "text", "--fn", f"{user_module}:embed", "--output", "emb", "--dim", str(DIM)]
    assert backfill.main([*argv, "--index", "IVF_FLAT", "--param", "num_partitions=2"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1].startswith(f"index {root}: emb_idx on 3 tables")
    q = np.random.default_rng(7).standard_normal(DIM).astype(np.float32)
    for t in PartitionedNamespace.load(root).partitions():
        ds = lance.dataset(t.uri, version=t.read_version)
        assert [i.name for i in ds.describe_indices()] == ["emb_idx"]
        table = ds.to_table(columns=["id", "emb"])
        vectors = np.stack([np.asarray(v, np.float32) for v in table.column("emb").to_pylist()])
        ids = np.asarray(table.column("id").to_pylist())
        brute = ids[np.argsort(((vectors - q) ** 2).sum(axis=1), kind="stable")[:3]].tolist()
        nearest = {"column": "emb", "q": q, "k": 3, "nprobes": 2}
        assert "ANN" in ds.scanner(nearest=nearest).explain_plan()
        assert ds.to_table(columns=["id"], nearest=nearest).column("id").to_pylist() == brute


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--fn", "nosuchmodule_xyz:f"], "error: --fn 'nosuchmodule_xyz:f': cannot import 'nosuchmodule_xyz' ("),
        (["--fn", "{mod}"], "error: --fn '{mod}' is not MODULE:FUNCTION"),
        (["--fn", "{mod}:missing"], "error: --fn '{mod}:missing': module '{mod}' has no attribute 'missing'"),
        (["--fn", "{mod}:NOT_A_FUNCTION"], "error: --fn '{mod}:NOT_A_FUNCTION' is a int, not a function"),
        (["--fn", "{mod}:too_wide"], "error: --fn {mod}:too_wide returned an array of shape (100, 9); column 'emb' "),
        (["--dim", "0"], "error: --dim must be a positive integer, got 0"),
        (["--column", "nope"], "error: read column 'nope' is not in the namespace; columns are: id, c, text"),
        (["--index", "BTREE"], "error: unknown vector index type 'BTREE'; allowed: IVF_PQ"),
        (["--param", "num_partitions=2"], "error: --param and --metric go with --index"),
    ],
)
def test_backfill_job_bad_input_is_one_line(spark, tmp_path, capsys, user_module, args, message):
    root = str(tmp_path / "ns")
    make(root)
    before = PartitionedNamespace.load(root).manifest_version
    argv = {"--root": root, "--column": "text", "--fn": f"{user_module}:embed", "--output": "emb", "--dim": str(DIM)}
    argv.update(dict(zip(args[::2], [a.format(mod=user_module) for a in args[1::2]], strict=True)))
    assert backfill.main([x for kv in argv.items() for x in kv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith(message.format(mod=user_module)), err[0]
    assert PartitionedNamespace.load(root).manifest_version == before
