"""The JVM string/binary murmur3 against mmh3, both ways a session can compute it: the Java
UDF (the jar `make` builds) and one ``hash()`` of the zero-padded value (no jar)."""

from __future__ import annotations

import mmh3
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F
from pyspark.sql import types as T

from pipelines import jar
from pipelines.columns import murmur3 as sm3
from pipelines.session import UDF_JAR
from pipelines.session_calls import active_session_kept

_ASCII = st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=127), max_size=40)
_UNICODE = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40)
_SETTINGS = settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(params=["java", "padded"])
def path(request, spark):
    """The test session with the Java UDF, or told it has none (as a session without the jar is)."""
    assert sm3.java_murmur3(spark), f"the test session has no {sm3.JAVA_UDF}: `make` builds {UDF_JAR}"
    if request.param == "padded":
        spark.conf.set(sm3.JAVA_MARKER, "unavailable")
    yield request.param
    spark.conf.set(sm3.JAVA_MARKER, "registered")


def _expected(raw: list[bytes | None]) -> list[int | None]:
    return [None if v is None else mmh3.hash(v, 0, signed=True) for v in raw]


def _staged(df, spark_type: T.DataType) -> list[int | None]:
    out = sm3.with_murmur3(df, F.col("v"), "h", spark_type)
    assert out.columns == [*df.columns, "h"]
    plan = out._jdf.queryExecution().analyzed().toString()
    assert (sm3.JAVA_UDF in plan) == sm3.java_murmur3(df.sparkSession), plan
    return [r.h for r in out.orderBy("i").select("h").collect()]


@_SETTINGS
@given(values=st.lists(st.one_of(st.none(), _ASCII, _UNICODE), max_size=40))
def test_string_hash_matches_mmh3(spark, path, values):
    """ASCII and multi-byte UTF-8, every length 0..40 mod 4, NULL."""
    df = spark.createDataFrame(list(enumerate(values)), "i int, v string")
    assert _staged(df, T.StringType()) == _expected([None if v is None else v.encode() for v in values])


@_SETTINGS
@given(values=st.lists(st.one_of(st.none(), st.binary(max_size=40)), max_size=40))
def test_binary_hash_matches_mmh3(spark, path, values):
    """Arbitrary bytes, including zero bytes and bytes >= 0x80 in the tail (Spark sign-extends those)."""
    rows = [(i, None if v is None else bytearray(v)) for i, v in enumerate(values)]
    df = spark.createDataFrame(rows, "i int, v binary")
    assert _staged(df, T.BinaryType()) == _expected(values)


def test_every_length_and_tail_byte(spark, path):
    """Lengths 0..40 and trailing zero / 0xff bytes, which a padding scheme could confuse."""
    raw = [bytes(range(1, n + 1)) for n in range(41)] + [b"\x00", b"a\x00", b"ab\x00\x00", b"\xff", b"\xff\xff\xff"]
    df = spark.createDataFrame([(i, bytearray(v)) for i, v in enumerate(raw)], "i int, v binary")
    assert _staged(df, T.BinaryType()) == _expected(raw)
    text = [v.decode("latin-1") for v in raw[:41]]
    sdf = spark.createDataFrame(list(enumerate(text)), "i int, v string")
    assert _staged(sdf, T.StringType()) == _expected([v.encode() for v in text])


def test_collated_string_hashes_its_utf8_bytes(spark, path):
    """A UTF8_LCASE column: Spark's hash() would fold case; the spec hashes the bytes."""
    values = ["US", "us", "Straße", "", None]
    df = spark.createDataFrame(list(enumerate(values)), "i int, v string").select(
        "i", F.col("v").cast(T.StringType("UTF8_LCASE")).alias("v")
    )
    got = _staged(df, T.StringType("UTF8_LCASE"))
    assert got == _expected([None if v is None else v.encode() for v in values])
    assert got[0] != got[1]


def test_bucket_column_of_negative_hashes(spark):
    """abs(h) % N (mask for powers of two, remainder otherwise) against Python for both signs."""
    hashes = [-(2**31), -17, -1, 0, 1, 17, 2**31 - 1]
    df = spark.createDataFrame([(i, h) for i, h in enumerate(hashes)], "i int, h int")
    for n in (1, 7, 16, 1000, 1024, 2**31 - 1):
        for hashed in ("h", F.col("h")):
            got = [r.b for r in df.orderBy("i").select(sm3.bucket_column(hashed, n).alias("b")).collect()]
            assert got == [abs(h) % n for h in hashes], (n, hashed)


def test_a_session_without_the_class_uses_the_padded_path(spark, monkeypatch):
    """A class the session cannot load (no jar on its classpath) is one try, then the padded path."""
    monkeypatch.setattr(jar, "PROBE_CLASS", "lance_partitioned.NotOnTheClasspath")
    values = ["", "a", "abcde", "Straße", None]
    with active_session_kept(spark):
        other = spark.newSession()
        assert not sm3.java_murmur3(other)
        assert other.conf.get(sm3.JAVA_MARKER) == "unavailable"
        df = other.createDataFrame(list(enumerate(values)), "i int, v string")
        assert _staged(df, T.StringType()) == _expected([None if v is None else v.encode() for v in values])


_OWN_SESSION = r"""
import json, logging, sys
from pathlib import Path

import lance
from pyspark.sql import SparkSession, functions as F, types as T

from pipelines import session as sessions
from pipelines import jar
from pipelines.columns import murmur3 as sm3
from pipelines.write.dataframe import write_partitioned

lines = []


class Kept(logging.Handler):
    def emit(self, record):
        lines.append(record.getMessage())


logging.getLogger("lance_partitioned").addHandler(Kept())
spark = SparkSession.builder.master("local[2]").appName("a notebook's own session").getOrCreate()
values = ["", "a", "abcde", "Stra\u00dfe", None, "user_123456"]
real = sessions.UDF_JAR
sessions.UDF_JAR = Path(sys.argv[1]) / "nowhere.jar"
first = spark.newSession()
without = sm3.java_murmur3(first)
sessions.UDF_JAR = real
root = sys.argv[1] + "/ns"
rows = spark.createDataFrame([(i, v) for i, v in enumerate(values)], "i int, s string")
write_partitioned(rows, root, partition_by=["bucket[16](s)"])
plan = sm3.with_murmur3(spark.createDataFrame([("x",)], "s string"), F.col("s"), "h", T.StringType())
buckets = {}
for row in lance.dataset(root + "/__manifest").to_table().to_pylist():
    if row["object_type"] == "table":
        t = lance.dataset(root + "/" + row["location"], version=row["read_version"]).to_table()
        for s in t.column("s").to_pylist():
            buckets[s if s is not None else "<null>"] = row["partition_field_s_bucket"]
print(json.dumps({"without": without, "with": sm3.java_murmur3(spark), "lines": lines,
                  "plan": sm3.JAVA_UDF in plan._jdf.queryExecution().analyzed().toString(),
                  "paths": buckets}))
"""


def test_a_session_the_project_did_not_build_adds_the_jar_or_says_it_in_one_line(tmp_path):
    """A notebook's own ``SparkSession`` (no ``spark.jars``): string buckets add the jar at
    run time and hash natively, with the values mmh3 gives; a session where the jar cannot be
    found says so in one WARNING line and uses the padded path."""
    import json
    import os
    import sys

    from subprocess_runs import run_ok

    script = tmp_path / "own_session.py"
    script.write_text(_OWN_SESSION)
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYTHONPATH": str(UDF_JAR.parents[1])}
    env.pop("SPARK_CONF_DIR", None)
    proc = run_ok([sys.executable, str(script), str(tmp_path)], env=env)
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["without"] is False
    assert [line for line in out["lines"] if "padded hash" in line] == [out["lines"][0]]
    assert "--jars" in out["lines"][0] and str(tmp_path / "nowhere.jar") in out["lines"][0]
    assert out["with"] is True and out["plan"] is True
    expected = {v: abs(mmh3.hash(v.encode(), 0, signed=True)) % 16 for v in ["", "a", "abcde", "Straße", "user_123456"]}
    assert out["paths"] == {**expected, "<null>": None}
