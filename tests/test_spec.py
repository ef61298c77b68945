"""Partition specs and fields: spec JSON (Appendix A/E, SPEC-NOTES 2), validation errors
(SPEC-NOTES 18), parse_partition_by, expression fields (SPEC-NOTES 13), frozen models.

Appendix A and Appendix E are read from the spec text itself (seeds/001_...txt).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import struct

import mmh3
import pyarrow as pa
import pytest
from conftest import SPEC_FILE, load_conformance, vector_array, vector_type
from lance_namespace.errors import InvalidInputError

from partitioning.errors import SchemaError, SpecError
from partitioning.namespace import PartitionedNamespace
from partitioning.spec.partition_by import parse_partition_by
from partitioning.spec.partition_spec import PartitionField, PartitionSpec
from partitioning.spec.schema import NamespaceSchema
from partitioning.spec.transforms import (
    BucketTransform,
    IdentityTransform,
    MultiBucketTransform,
    TruncateTransform,
    YearTransform,
)

SPEC_TEXT = SPEC_FILE.read_text()


def _json_after(text: str, *markers: str):
    """The first JSON value in ``text`` after each marker in turn (a marker alone on its line first)."""
    pos = 0
    for i, marker in enumerate(markers):
        if i == 0:
            line_start = text.find("\n" + marker + "\n", pos)
            assert line_start >= 0, f"spec text has no line {marker!r}"
            pos = line_start + len(marker) + 2
        else:
            pos = text.index(marker, pos) + len(marker)
    start = text.index("{", pos)
    value, _ = json.JSONDecoder().raw_decode(text[start:])
    return value


APPENDIX_A = _json_after(SPEC_TEXT, "Appendix A: Metadata Example")
APPENDIX_E_V1 = _json_after(
    SPEC_TEXT, "Appendix E: Runtime Namespace Properties Example", 'DescribeNamespace(["v1"]) returns:'
)


def test_appendix_extraction_found_the_examples():
    assert sorted(APPENDIX_A) == ["partition_spec_v1", "partition_spec_v2", "schema"]
    assert list(APPENDIX_E_V1) == ["properties"]
    assert list(APPENDIX_E_V1["properties"]) == ["partition_spec"]


@pytest.fixture
def appendix_schema() -> NamespaceSchema:
    return NamespaceSchema.from_json(json.dumps(APPENDIX_A["schema"]))


@pytest.fixture
def schema() -> NamespaceSchema:
    """Appendix A's columns (ids 0, 1, 2) plus tags (3, its item 4) and ts (5)."""
    arrow = pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            pa.field("event_date", pa.date32()),
            pa.field("country", pa.string()),
            pa.field("tags", pa.list_(pa.int64())),
            pa.field("ts", pa.timestamp("us", tz="UTC")),
        ]
    )
    ns = NamespaceSchema.from_arrow(arrow)
    assert [ns.id_of(n) for n in ("id", "event_date", "country", "tags", "ts")] == [0, 1, 2, 3, 5]
    return ns


# ------------------------------------------------------------------------------------------
# Spec JSON round trip (Appendix A, Appendix E)
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("key,spec_id", [("partition_spec_v1", 1), ("partition_spec_v2", 2)])
def test_appendix_a_spec_round_trip(key, spec_id):
    obj = APPENDIX_A[key]
    spec = PartitionSpec.from_json(json.dumps(obj))
    assert spec.spec_id == spec_id
    assert spec.to_dict() == obj
    assert json.loads(spec.to_json()) == obj
    assert PartitionSpec.from_json(obj) == spec
    assert PartitionSpec.from_json(spec.to_json()) == spec


def test_appendix_a_spec_fields_parse_to_the_documented_transforms():
    v2 = PartitionSpec.from_json(APPENDIX_A["partition_spec_v2"])
    assert v2.field_ids == ["event_year", "country"]
    year, country = v2.fields
    assert year.source_ids == (1,)
    assert year.transform == YearTransform()
    assert year.expression is None
    assert year.result_type == {"type": "int32"}
    assert country.source_ids == (2,)
    assert country.transform == IdentityTransform()
    assert country.result_type == {"type": "utf8"}


def test_appendix_a_schema_round_trip(appendix_schema):
    obj = APPENDIX_A["schema"]
    out = appendix_schema.to_dict()
    assert out["fields"] == obj["fields"]
    # The only addition is the persisted next free field id (SPEC-NOTES 3: it must survive a reload).
    assert {k: v for k, v in out.items() if k != "fields"} == {"metadata": {"lance:next_field_id": "3"}}
    again = NamespaceSchema.from_json(appendix_schema.to_json())
    assert again.to_dict() == out
    assert [f.name for f in appendix_schema.arrow] == ["id", "event_date", "country"]
    assert appendix_schema.arrow.field("id").nullable is False
    assert appendix_schema.arrow.field("event_date").type == pa.date32()


def test_appendix_a_specs_validate_against_the_appendix_schema(appendix_schema):
    for key in ("partition_spec_v1", "partition_spec_v2"):
        PartitionSpec.from_json(APPENDIX_A[key]).validate(appendix_schema)


def test_v1_to_json_is_appendix_e_exactly():
    spec = PartitionSpec.from_json(json.dumps(APPENDIX_A["partition_spec_v1"], indent=2))
    assert spec.to_json() == APPENDIX_E_V1["properties"]["partition_spec"]


def test_to_json_is_compact():
    spec = PartitionSpec.from_json(APPENDIX_A["partition_spec_v2"])
    text = spec.to_json()
    assert text == json.dumps(APPENDIX_A["partition_spec_v2"], separators=(",", ":"))
    assert " " not in text and "\n" not in text


def test_optional_keys_are_omitted():
    spec = PartitionSpec(
        1,
        [
            PartitionField("b", [0], "bucket[16]"),
            PartitionField("t", [2], "truncate[2]", result_type="utf8"),
            PartitionField("e", [0], expression="col0 % 10", result_type="int64"),
        ],
    )
    assert spec.to_dict() == {
        "id": 1,
        "fields": [
            {
                "field_id": "b",
                "source_ids": [0],
                "transform": {"type": "bucket", "num_buckets": 16},
                "result_type": {"type": "int32"},
            },
            {
                "field_id": "t",
                "source_ids": [2],
                "transform": {"type": "truncate", "width": 2},
                "result_type": {"type": "utf8"},
            },
            {"field_id": "e", "source_ids": [0], "expression": "col0 % 10", "result_type": {"type": "int64"}},
        ],
    }


# ------------------------------------------------------------------------------------------
# Validation errors: SpecError (a ValueError), one line, naming the offending thing
# ------------------------------------------------------------------------------------------
def _spec_json(field: dict, spec_id: int = 1) -> str:
    return json.dumps({"id": spec_id, "fields": [field]})


def _check_error(exc_info, cls, *needles: str) -> None:
    err = exc_info.value
    assert isinstance(err, cls)
    assert isinstance(err, ValueError)
    assert isinstance(err, InvalidInputError)
    assert err.code == 13  # SPEC-NOTES 18: InvalidInput
    message = str(err)
    assert message.strip()
    assert "\n" not in message.strip(), message
    assert "Traceback" not in message
    for needle in needles:
        assert needle in message, f"{needle!r} not in {message!r}"


def test_error_unknown_source_id(schema):
    spec = PartitionSpec(1, [PartitionField("x", [99], "identity", result_type="int64")])
    with pytest.raises(SpecError) as info:
        spec.validate(schema)
    _check_error(info, SpecError, "99", "'x'")


def test_error_hour_on_a_date(schema):
    spec = PartitionSpec(1, [PartitionField("h", [1], "hour")])
    with pytest.raises(SpecError) as info:
        spec.validate(schema)
    _check_error(info, SpecError, "hour", "event_date")


def test_error_bucket_on_a_list_column(schema):
    spec = PartitionSpec(1, [PartitionField("b", [3], "bucket[4]")])
    with pytest.raises(SpecError) as info:
        spec.validate(schema)
    _check_error(info, SpecError, "bucket", "tags")


def test_error_truncate_on_a_date(schema):
    spec = PartitionSpec(1, [PartitionField("t", [1], "truncate[4]", result_type="date32")])
    with pytest.raises(SpecError) as info:
        spec.validate(schema)
    _check_error(info, SpecError, "truncate", "event_date")


@pytest.mark.parametrize("n", [0, -3])
def test_error_num_buckets_below_one(n):
    text = _spec_json(
        {
            "field_id": "b",
            "source_ids": [0],
            "transform": {"type": "bucket", "num_buckets": n},
            "result_type": {"type": "int32"},
        }
    )
    with pytest.raises(SpecError) as info:
        PartitionSpec.from_json(text)
    _check_error(info, SpecError, "num_buckets", str(n))
    with pytest.raises(SpecError) as info:
        PartitionField("b", [0], f"bucket[{n}]")
    _check_error(info, SpecError, "num_buckets")


@pytest.mark.parametrize("w", [0, -1])
def test_error_width_below_one(w):
    text = _spec_json(
        {
            "field_id": "t",
            "source_ids": [2],
            "transform": {"type": "truncate", "width": w},
            "result_type": {"type": "utf8"},
        }
    )
    with pytest.raises(SpecError) as info:
        PartitionSpec.from_json(text)
    _check_error(info, SpecError, "width", str(w))


def test_error_both_transform_and_expression():
    text = _spec_json(
        {
            "field_id": "both",
            "source_ids": [0],
            "transform": {"type": "identity"},
            "expression": "col0",
            "result_type": {"type": "int64"},
        }
    )
    with pytest.raises(SpecError) as info:
        PartitionSpec.from_json(text)
    _check_error(info, SpecError, "'both'", "transform", "expression")
    with pytest.raises(SpecError) as info:
        PartitionField("both", [0], "identity", expression="col0", result_type="int64")
    _check_error(info, SpecError, "'both'", "transform", "expression")


def test_error_neither_transform_nor_expression():
    text = _spec_json({"field_id": "neither", "source_ids": [0], "result_type": {"type": "int64"}})
    with pytest.raises(SpecError) as info:
        PartitionSpec.from_json(text)
    _check_error(info, SpecError, "'neither'", "transform", "expression")
    with pytest.raises(SpecError) as info:
        PartitionField("neither", [0], result_type="int64")
    _check_error(info, SpecError, "'neither'")


def test_error_duplicate_field_id():
    field = {"field_id": "dup", "source_ids": [0], "transform": {"type": "identity"}, "result_type": {"type": "int64"}}
    text = json.dumps({"id": 1, "fields": [field, dict(field, source_ids=[2], result_type={"type": "utf8"})]})
    with pytest.raises(SpecError) as info:
        PartitionSpec.from_json(text)
    _check_error(info, SpecError, "'dup'", "duplicate")


def test_error_result_type_inconsistent_with_year():
    text = _spec_json(
        {"field_id": "yr", "source_ids": [1], "transform": {"type": "year"}, "result_type": {"type": "int64"}}
    )
    with pytest.raises(SpecError) as info:
        PartitionSpec.from_json(text)
    _check_error(info, SpecError, "'yr'", "int64", "year")


def test_error_result_type_inconsistent_with_identity_source(schema):
    spec = PartitionSpec(1, [PartitionField("ident", [0], "identity", result_type="int32")])
    with pytest.raises(SpecError) as info:
        spec.validate(schema)
    _check_error(info, SpecError, "'ident'", "int32", "'id'")


def test_error_expression_does_not_parse(schema):
    spec = PartitionSpec(1, [PartitionField("e", [0], expression="col0 +* 1", result_type="int64")])
    with pytest.raises(SpecError) as info:
        spec.validate(schema)
    _check_error(info, SpecError, "'e'", "col0 +* 1")


def test_error_expression_fails_on_a_null_row(schema):
    expression = "cast('x' as int) + col0"
    spec = PartitionSpec(1, [PartitionField("e", [0], expression=expression, result_type="int64")])
    with pytest.raises(SpecError) as info:
        spec.validate(schema)
    _check_error(info, SpecError, "'e'", expression)


def test_error_non_deterministic_expression(schema):
    spec = PartitionSpec(1, [PartitionField("r", [0], expression="col0 + random()", result_type="float64")])
    with pytest.raises(SpecError) as info:
        spec.validate(schema)
    _check_error(info, SpecError, "'r'", "random", "deterministic")


def test_error_expression_refers_to_a_missing_column(schema):
    spec = PartitionSpec(1, [PartitionField("e", [0], expression="col0 + col1", result_type="int64")])
    with pytest.raises(SpecError) as info:
        spec.validate(schema)
    _check_error(info, SpecError, "'e'", "col1")


def test_error_spec_id_zero():
    with pytest.raises(SpecError) as info:
        PartitionSpec(0, [PartitionField("c", [2], "identity", result_type="utf8")])
    _check_error(info, SpecError, "spec id", "0")
    with pytest.raises(SpecError) as info:
        PartitionSpec.from_json(
            _spec_json(
                {
                    "field_id": "c",
                    "source_ids": [2],
                    "transform": {"type": "identity"},
                    "result_type": {"type": "utf8"},
                },
                spec_id=0,
            )
        )
    _check_error(info, SpecError, "spec id", "0")


@pytest.mark.parametrize("text", ['{"id":1, fields', "", "[1, 2", "not json at all"])
def test_error_bad_json_text(text):
    with pytest.raises(SpecError) as info:
        PartitionSpec.from_json(text)
    _check_error(info, SpecError, "JSON")


def test_error_spec_json_not_an_object():
    with pytest.raises(SpecError) as info:
        PartitionSpec.from_json("[1, 2]")
    _check_error(info, SpecError, "object")


@pytest.mark.parametrize("source_ids", ["0", ["a"], [1.5], None, {"0": 1}])
def test_error_source_ids_of_wrong_type(source_ids):
    text = _spec_json(
        {"field_id": "s", "source_ids": source_ids, "transform": {"type": "identity"}, "result_type": {"type": "int64"}}
    )
    with pytest.raises(SpecError) as info:
        PartitionSpec.from_json(text)
    _check_error(info, SpecError, "source_ids")


def test_error_source_ids_of_wrong_type_in_the_constructor():
    with pytest.raises(SpecError) as info:
        PartitionField("s", ["a"], "identity", result_type="int64")
    _check_error(info, SpecError, "'s'", "source_ids")
    with pytest.raises(SpecError) as info:
        PartitionField("s", [], "identity", result_type="int64")
    _check_error(info, SpecError, "'s'", "source_ids")


def test_create_with_an_invalid_spec_writes_nothing(tmp_path, schema):
    root = tmp_path / "ns"
    bad = _spec_json(
        {"field_id": "h", "source_ids": [1], "transform": {"type": "hour"}, "result_type": {"type": "int32"}}
    )
    with pytest.raises(SpecError) as info:
        PartitionedNamespace.create(str(root), schema, bad)
    _check_error(info, SpecError, "hour", "event_date")
    assert not (root / "__manifest").exists()


# ------------------------------------------------------------------------------------------
# parse_partition_by
# ------------------------------------------------------------------------------------------
def test_parse_partition_by_builds_the_expected_fields(schema):
    spec = parse_partition_by(
        [
            "year(event_date) as event_year",
            "country",
            "bucket[16](id)",
            "multi_bucket[8](id, country)",
            "truncate[2](country)",
        ],
        schema,
    )
    assert spec.spec_id == 1
    assert spec.to_dict() == {
        "id": 1,
        "fields": [
            {
                "field_id": "event_year",
                "source_ids": [1],
                "transform": {"type": "year"},
                "result_type": {"type": "int32"},
            },
            {
                "field_id": "country",
                "source_ids": [2],
                "transform": {"type": "identity"},
                "result_type": {"type": "utf8"},
            },
            {
                "field_id": "id_bucket",
                "source_ids": [0],
                "transform": {"type": "bucket", "num_buckets": 16},
                "result_type": {"type": "int32"},
            },
            {
                "field_id": "id_country_bucket",
                "source_ids": [0, 2],
                "transform": {"type": "multi_bucket", "num_buckets": 8},
                "result_type": {"type": "int32"},
            },
            {
                "field_id": "country_trunc",
                "source_ids": [2],
                "transform": {"type": "truncate", "width": 2},
                "result_type": {"type": "utf8"},
            },
        ],
    }
    assert [f.transform for f in spec.fields] == [
        YearTransform(),
        IdentityTransform(),
        BucketTransform(16),
        MultiBucketTransform(8),
        TruncateTransform(2),
    ]


def test_parse_partition_by_unknown_column(schema):
    with pytest.raises(SchemaError) as info:
        parse_partition_by(["day(nope)"], schema)
    _check_error(info, SchemaError, "'nope'", "id", "event_date", "country", "tags", "ts")


def test_parse_partition_by_rejects_an_incompatible_type(schema):
    with pytest.raises(SpecError) as info:
        parse_partition_by(["hour(event_date)"], schema)
    _check_error(info, SpecError, "hour", "event_date")


# ------------------------------------------------------------------------------------------
# Expression fields agree with the transform path (SPEC-NOTES 13)
# ------------------------------------------------------------------------------------------
IDS = pa.array([1, None, 34, -5, 2**40, -(2**63)], pa.int64())
COUNTRIES = pa.array(["US", "x", None, "", "漢字", None], pa.string())
DATES = pa.array(
    [dt.date(2025, 12, 10), None, dt.date(1969, 12, 31), dt.date(2000, 2, 29), dt.date(1, 1, 1), dt.date(9999, 12, 31)],
    pa.date32(),
)


def _mmh3_int64(v: int) -> int:
    return mmh3.hash(struct.pack("<q", v), 0, signed=True)


def test_expression_multi_bucket_equals_transform(schema):
    field = PartitionField("e", [0, 2], expression="abs(murmur3_multi(col0, col1)) % 8", result_type="int32")
    field.validate(schema)
    out = field.apply([IDS, COUNTRIES], schema)
    assert out.type == pa.int32()
    assert out.to_pylist() == MultiBucketTransform(8).apply(IDS, COUNTRIES).to_pylist()
    # and both agree with mmh3 over the concatenated non-null bytes
    expected = []
    for i, c in zip(IDS.to_pylist(), COUNTRIES.to_pylist(), strict=True):
        data = (b"" if i is None else struct.pack("<q", i)) + (b"" if c is None else c.encode())
        expected.append(None if i is None and c is None else abs(mmh3.hash(data, 0, signed=True)) % 8)
    assert out.to_pylist() == expected


def test_expression_bucket_equals_transform(schema):
    field = PartitionField("e", [0], expression="abs(murmur3(col0)) % 16", result_type="int32")
    field.validate(schema)
    out = field.apply([IDS], schema)
    assert out.to_pylist() == BucketTransform(16).apply(IDS).to_pylist()
    assert out.to_pylist() == [None if v is None else abs(_mmh3_int64(v)) % 16 for v in IDS.to_pylist()]
    transform_field = PartitionField("b", [0], "bucket[16]")
    assert transform_field.apply([IDS], schema).to_pylist() == out.to_pylist()


def test_expression_year_equals_transform(schema):
    field = PartitionField("e", [1], expression="date_part('year', col0)", result_type="int32")
    field.validate(schema)
    out = field.apply([DATES], schema)
    assert out.type == pa.int32()
    assert out.to_pylist() == YearTransform().apply(DATES).to_pylist()
    assert out.to_pylist() == [2025, None, 1969, 2000, 1, 9999]


def test_transform_fields_match_the_spec_derived_expressions(schema):
    """Each transform field equals an expression field holding the transform's derived expression."""
    cases = [
        (PartitionField("y", [1], "year"), [DATES]),
        (PartitionField("m", [1], "month"), [DATES]),
        (PartitionField("d", [1], "day"), [DATES]),
        (PartitionField("b", [0], "bucket[7]"), [IDS]),
        (PartitionField("mb", [0, 2], "multi_bucket[1024]"), [IDS, COUNTRIES]),
    ]
    for field, columns in cases:
        expression = field.transform.derived_expression(len(field.source_ids))
        expr_field = PartitionField("x", field.source_ids, expression=expression, result_type=field.result_type)
        expr_field.validate(schema)
        assert expr_field.apply(columns, schema).to_pylist() == field.apply(columns, schema).to_pylist(), expression


_MURMUR3 = load_conformance("murmur3.json")


@pytest.mark.parametrize(
    "entry",
    [pytest.param(e, id=f"{e['type']}-{e['value']}") for e in _MURMUR3["single"]],
)
def test_expression_murmur3_reproduces_the_golden_vectors(entry):
    t = vector_type(entry["type"])
    ns_schema = NamespaceSchema.from_arrow(pa.schema([pa.field("c", t)]))
    field = PartitionField("h", [0], expression="murmur3(col0)", result_type="int32")
    field.validate(ns_schema)
    assert field.apply([vector_array(entry["type"], entry["value"])], ns_schema).to_pylist() == [entry["murmur3"]]
    bucket_field = PartitionField("b", [0], expression="abs(murmur3(col0)) % 1024", result_type="int32")
    out = bucket_field.apply([vector_array(entry["type"], entry["value"])], ns_schema)
    assert out.to_pylist() == [entry["bucket"]["1024"]]


@pytest.mark.parametrize(
    "entry",
    [pytest.param(e, id="+".join(f"{c['type']}-{c['value']}" for c in e["columns"])) for e in _MURMUR3["multi"]],
)
def test_expression_murmur3_multi_reproduces_the_golden_vectors(entry):
    types = [vector_type(c["type"]) for c in entry["columns"]]
    ns_schema = NamespaceSchema.from_arrow(pa.schema([pa.field(f"c{i}", t) for i, t in enumerate(types)]))
    cols = ", ".join(f"col{i}" for i in range(len(types)))
    field = PartitionField(
        "mb", list(range(len(types))), expression=f"abs(murmur3_multi({cols})) % 16", result_type="int32"
    )
    field.validate(ns_schema)
    arrays = [vector_array(c["type"], c["value"]) for c in entry["columns"]]
    assert field.apply(arrays, ns_schema).to_pylist() == [entry["bucket"]["16"]]


# ------------------------------------------------------------------------------------------
# Column removal resistance: a dropped source column reads as NULL
# ------------------------------------------------------------------------------------------
def test_dropped_source_in_multi_bucket_transform_is_ignored(schema):
    field = PartitionField("mb", [0, 2], "multi_bucket[8]")
    out = field.apply([IDS, None], schema)
    assert out.to_pylist() == [None if v is None else abs(_mmh3_int64(v)) % 8 for v in IDS.to_pylist()]


def test_dropped_source_in_multi_bucket_expression_is_ignored(schema):
    field = PartitionField("e", [0, 2], expression="abs(murmur3_multi(col0, col1)) % 8", result_type="int32")
    out = field.apply([IDS, None], schema)
    assert out.to_pylist() == [None if v is None else abs(_mmh3_int64(v)) % 8 for v in IDS.to_pylist()]


def test_dropped_source_in_an_expression_reads_as_null(schema):
    """Spec: 'If a source field ID is not found in the schema, the column should be interpreted as NULL',
    and a single-column expression returns NULL for NULL. col1 (event_date) is dropped here."""
    field = PartitionField("e", [0, 1], expression="date_part('year', col1)", result_type="int32")
    out = field.apply([IDS, None], schema)
    assert out.type == pa.int32()
    assert out.to_pylist() == [None] * len(IDS)


# ------------------------------------------------------------------------------------------
# Frozen models
# ------------------------------------------------------------------------------------------
def test_models_are_frozen(schema):
    spec = PartitionSpec.from_json(APPENDIX_A["partition_spec_v2"])
    field = spec.fields[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.spec_id = 3  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.fields = ()  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        field.field_id = "other"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        field.transform = None  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        BucketTransform(4).num_buckets = 8  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        schema.next_field_id = 0  # type: ignore[misc]
    assert spec.spec_id == 2
    assert field.field_id == "event_year"


def test_equal_specs_are_equal_and_hash_equal():
    a = PartitionSpec.from_json(json.dumps(APPENDIX_A["partition_spec_v2"]))
    b = PartitionSpec.from_json(json.dumps(APPENDIX_A["partition_spec_v2"], indent=4))
    c = PartitionSpec(
        2,
        [
            PartitionField("event_year", [1], "year"),
            PartitionField("country", [2], "identity", result_type={"type": "utf8"}),
        ],
    )
    assert a == b == c
    assert hash(a) == hash(b) == hash(c)
    assert len({a, b, c}) == 1
    assert hash(a.fields[0]) == hash(c.fields[0])
    other = PartitionSpec.from_json(APPENDIX_A["partition_spec_v1"])
    assert other != a
    assert len({a, other}) == 2
