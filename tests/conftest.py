"""Shared fixtures: one local[2] SparkSession per run, and the golden vectors from ../shared."""

from __future__ import annotations

import datetime as dt
import decimal
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

CONFORMANCE_DIR = Path(__file__).resolve().parents[2] / "shared" / "conformance"


def load_conformance(name: str) -> dict[str, Any]:
    path = CONFORMANCE_DIR / name
    if not path.exists():
        raise FileNotFoundError(f"golden vectors missing: {path} (../shared/conformance beside the repo)")
    return json.loads(path.read_text())


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
