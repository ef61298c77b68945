"""Shared fixtures: one local[2] SparkSession per run, and the golden vectors (tests/conformance).

The golden vectors and the spec's text are the repository's own copy, so a clone with
nothing beside it (a user's, a fork's CI, a packager's build) runs every test;
tests/test_conformance_copy.py compares the copy with ``../shared`` where that exists.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

CONFORMANCE_DIR = Path(__file__).resolve().parent / "conformance"
SPEC_FILE = CONFORMANCE_DIR / "spec.txt"  # the spec (seed 001), for the tests of its appendices


def load_conformance(name: str) -> dict[str, Any]:
    return json.loads((CONFORMANCE_DIR / name).read_text())


_ARROW_TYPES = {
    "int8": pa.int8(),
    "int16": pa.int16(),
    "int32": pa.int32(),
    "int64": pa.int64(),
    "uint8": pa.uint8(),
    "uint16": pa.uint16(),
    "uint32": pa.uint32(),
    "uint64": pa.uint64(),
    "float32": pa.float32(),
    "float64": pa.float64(),
    "date32": pa.date32(),
    "utf8": pa.string(),
    "binary_hex": pa.binary(),
    "bool": pa.bool_(),
    "timestamp[us, tz=UTC]": pa.timestamp("us", tz="UTC"),
    "timestamp[us]": pa.timestamp("us"),
    "timestamp[ms]": pa.timestamp("ms"),
    "decimal128(10, 2)": pa.decimal128(10, 2),
}


def vector_type(name: str) -> pa.DataType:
    return _ARROW_TYPES[name]


def vector_value(type_name: str, value: Any) -> Any:
    """A golden-vector value as the Python value Arrow expects for ``type_name``."""
    if value is None:
        return None
    if type_name == "binary_hex":
        return bytes.fromhex(value)
    if type_name == "date32":
        return dt.date.fromisoformat(value)
    if type_name.startswith("timestamp"):
        parsed = dt.datetime.fromisoformat(value)
        if "tz=" in type_name:
            return parsed.replace(tzinfo=dt.UTC) if parsed.tzinfo is None else parsed.astimezone(dt.UTC)
        return parsed
    if type_name.startswith("decimal"):
        return decimal.Decimal(value)
    return value


def vector_array(type_name: str, value: Any) -> pa.Array:
    return pa.array([vector_value(type_name, value)], type=vector_type(type_name))


@pytest.fixture(scope="session")
def murmur3_vectors() -> dict[str, Any]:
    return load_conformance("murmur3.json")


@pytest.fixture(scope="session")
def transform_vectors() -> dict[str, Any]:
    return load_conformance("transforms.json")


@pytest.fixture(scope="session")
def spark():
    """The run's only SparkSession (local[2]), configured from spark-conf/."""
    from pipelines.session import build_session

    session = build_session("lance-partitioned-tests", master="local[2]")
    yield session
    session.stop()


@pytest.fixture
def joins(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many merges went through Spark's join (``pipelines.write.merge._join``, counted)."""
    import pipelines.write.merge as merge_module

    calls: list[int] = []
    real = merge_module._join

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(merge_module, "_join", counted)
    return calls


@pytest.fixture
def spark_tasks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows are read and written by Spark's tasks, never by the driver's small path
    (:mod:`pipelines.write.small`), whatever the size of the test's data."""
    import pipelines.write.small as small

    monkeypatch.setattr(small, "SMALL_MAX_TABLES", -1)
    monkeypatch.setattr(small, "SMALL_WRITE_BYTES", -1)
    monkeypatch.setattr(small, "SMALL_MAX_ROWS", -1)


# -- a real S3 API: moto's standalone server ---------------------------------------------------
S3_BUCKET = "lance-partitioned-tests"


@dataclass(frozen=True)
class S3Server:
    """A running ``moto_server``: its endpoint and the Lance storage options that reach it."""

    endpoint: str
    bucket: str

    @property
    def options(self) -> dict[str, str]:
        return {
            "aws_endpoint": self.endpoint,
            "aws_region": "us-east-1",
            "aws_access_key_id": "testing",
            "aws_secret_access_key": "testing",
            "allow_http": "true",
        }

    def client(self):
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )

    def keys(self, prefix: str) -> list[str]:
        """Every object key under ``prefix`` (listed with boto3, independently of this project)."""
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix)
        return sorted(o["Key"] for page in pages for o in page.get("Contents", []))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """``moto_server`` on a free localhost port for the whole run (no network), with one bucket."""
    exe = Path(sys.executable).parent / "moto_server"
    if not exe.exists():
        raise FileNotFoundError(f"{exe} is missing: install the dev extra (moto[server])")
    port = _free_port()
    log = (tmp_path_factory.mktemp("moto") / "moto.log").open("w")
    proc = subprocess.Popen([str(exe), "-H", "127.0.0.1", "-p", str(port)], stdout=log, stderr=subprocess.STDOUT)
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1).close()
            break
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"moto_server did not start on port {port}; see {log.name}") from None
            time.sleep(0.1)
    server = S3Server(endpoint, S3_BUCKET)
    server.client().create_bucket(Bucket=S3_BUCKET)
    yield server
    proc.terminate()
    proc.wait(timeout=10)
    log.close()


@pytest.fixture
def s3_root(s3_server) -> str:
    """A fresh ``s3://`` root (a new key prefix) in the test bucket."""
    return f"s3://{s3_server.bucket}/{uuid.uuid4().hex[:12]}/ns"
