"""jobs/search.py: prints the nearest rows; bad input is one ``error:`` line and exit status 2."""

from __future__ import annotations

import numpy as np
from search_data import DIM, brute_force, create, data_of, make_table

from jobs import search as search_job


def test_search_job_prints_the_nearest_rows(spark, tmp_path, capsys):
    root = str(tmp_path / "ns")
    tables = [make_table(600, 81, null_every=9)]
    create(root, tables)
    data = data_of(tables)
    q = np.random.default_rng(2).standard_normal(DIM).astype(np.float32)
    path = str(tmp_path / "q.npy")
    np.save(path, q.reshape(1, DIM))
    argv = ["--root", root, "--column", "v", "--vector-file", path, "--k", "5", "--filter", "c <> 'b'"]
    assert search_job.main([*argv, "--exact", "--columns", "id", "c"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0] == "id\tc\t_distance" and lines[-1] == "search: 5 rows"
    assert [int(line.split("\t")[0]) for line in lines[1:-1]] == brute_force(data, q, 5, data.cats != "b")


def test_search_job_bad_input_is_one_line_and_exit_2(spark, tmp_path, capsys):
    root = str(tmp_path / "ns")
    create(root, [make_table(50, 82)])
    path = str(tmp_path / "q.npy")
    np.save(path, np.zeros(DIM - 1, np.float32))
    assert search_job.main(["--root", root, "--vector-file", path]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "error: query vector has dimension 15, but column 'v' has dimension 16"
    assert search_job.main(["--root", root, "--vector-file", str(tmp_path / "missing.npy")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --vector-file") and "\n" not in err
    np.save(path, np.ones(DIM, np.float32))
    assert search_job.main(["--root", root, "--vector-file", path, "--column", "c"]) == 2
    assert "column 'c' is string, not a vector column" in capsys.readouterr().err
