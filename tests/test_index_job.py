"""jobs/index.py: build a vector or scalar index, optimize, list; bad input is one error line."""

from __future__ import annotations

import lance
import numpy as np
import pyarrow as pa

from jobs import index
from partitioning import PartitionedNamespace
from partitioning.tables.write import write_table

DIM = 16
SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("c", pa.string()), pa.field("v", pa.list_(pa.float32(), DIM))])


def make(root: str) -> None:
    ns = PartitionedNamespace.create(root, SCHEMA, ["c"])
    v = np.random.default_rng(0).standard_normal((610, DIM)).astype(np.float32)
    write_table(
        ns,
        pa.table(
            {
                "id": pa.array(range(610), pa.int64()),
                "c": ["a"] * 600 + ["b"] * 10,
                "v": pa.FixedSizeListArray.from_arrays(pa.array(v.ravel()), DIM),
            },
            schema=SCHEMA,
        ),
    )


def test_index_job_builds_and_lists(spark, tmp_path, capsys):
    root = str(tmp_path / "ns")
    make(root)
    base = ["--root", root]
    assert index.main([*base, "--column", "v", "--index-type", "IVF_FLAT", "--param", "num_partitions=4"]) == 0
    assert index.main([*base, "--column", "id", "--index-type", "BTREE"]) == 0
    capsys.readouterr()
    assert index.main([*base, "--list"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == "4 indexes"
    lines = sorted("\t".join(line.split("\t")[1:]) for line in out[:-1])
    assert lines == [
        "id_idx\tBTREE\tid\tindexed=10\tunindexed=0",
        "id_idx\tBTREE\tid\tindexed=600\tunindexed=0",
        "v_idx\tIVF_FLAT\tv\tindexed=10\tunindexed=0",
        "v_idx\tIVF_FLAT\tv\tindexed=600\tunindexed=0",
    ]
    for t in PartitionedNamespace.load(root).partitions():
        ds = lance.dataset(t.uri, version=t.read_version)
        assert ds.stats.index_stats("v_idx")["num_indexed_rows"] == ds.count_rows()


def test_index_job_bad_input_is_one_line(tmp_path, capsys):
    root = str(tmp_path / "ns")
    make(root)
    assert index.main(["--root", root, "--column", "v", "--param", "bogus=3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: unknown index parameter 'bogus' for IVF_PQ; allowed:")
    assert index.main(["--root", root, "--column", "v", "--param", "num_partitions=x"]) == 2
    assert capsys.readouterr().err.strip() == "error: --param 'num_partitions=x' is not KEY=INTEGER"
