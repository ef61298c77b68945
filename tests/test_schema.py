"""Namespace schema: field ids (SPEC-NOTES 3), pylance type spellings and lossless round trip (3b).

Type spellings are checked against pylance itself: each type is written as a
one-column Lance dataset, registered in a plain ``DirectoryNamespace`` and described
with ``describe_table``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import lance
import pyarrow as pa
import pytest
from lance.namespace import DirectoryNamespace
from lance_namespace import CreateNamespaceRequest, DescribeTableRequest, RegisterTableRequest

from partitioning.errors import CorruptNamespace, SchemaError
from partitioning.spec.schema import NamespaceSchema

FIELD_ID = "lance:field_id"


def _walk_json(fields: list[dict]) -> Iterator[dict]:
    for f in fields:
        yield f
        yield from _walk_json(f["type"].get("fields") or [])


def _ids_by_path(fields: list[dict], prefix: str = "") -> dict[str, int]:
    out = {}
    for f in fields:
        path = f"{prefix}{f['name']}"
        out[path] = int(f["metadata"][FIELD_ID])
        out.update(_ids_by_path(f["type"].get("fields") or [], path + "."))
    return out


def _strip_metadata(type_json: dict) -> dict:
    """A JsonArrowDataType without any field metadata, at every depth."""
    out = {k: v for k, v in type_json.items() if k != "fields"}
    if "fields" in type_json:
        out["fields"] = [
            {"name": f["name"], "nullable": f["nullable"], "type": _strip_metadata(f["type"])}
            for f in type_json["fields"]
        ]
    return out


def _drop_none(obj):
    if isinstance(obj, dict):
        return {k: _drop_none(v) for k, v in obj.items() if v is not None}
    if isinstance(obj, list):
        return [_drop_none(v) for v in obj]
    return obj


# ------------------------------------------------------------------------------------------
# Field ids: depth-first pre-order from 0, every field (nested included)
# ------------------------------------------------------------------------------------------
NESTED = pa.schema(
    [
        pa.field("a", pa.int32()),
        pa.field("s", pa.struct([pa.field("x", pa.int32()), pa.field("y", pa.list_(pa.string()))])),
        pa.field("l", pa.list_(pa.struct([pa.field("p", pa.int8())]))),
        pa.field("m", pa.map_(pa.string(), pa.struct([pa.field("q", pa.int16())]))),
        pa.field("z", pa.string()),
    ]
)
# Hand-computed pre-order: a field, then its children; a map's child is its entries
# struct, whose children are key and value.
NESTED_IDS = {
    "a": 0,
    "s": 1,
    "s.x": 2,
    "s.y": 3,
    "s.y.item": 4,
    "l": 5,
    "l.item": 6,
    "l.item.p": 7,
    "m": 8,
    "m.entries": 9,
    "m.entries.key": 10,
    "m.entries.value": 11,
    "m.entries.value.q": 12,
    "z": 13,
}


def test_field_ids_are_depth_first_pre_order():
    schema = NamespaceSchema.from_arrow(NESTED)
    d = schema.to_dict()
    assert _ids_by_path(d["fields"]) == NESTED_IDS
    assert schema.next_field_id == 14
    assert d["metadata"] == {"lance:next_field_id": "14"}


def test_every_field_in_the_json_has_a_decimal_field_id():
    d = json.loads(NamespaceSchema.from_arrow(NESTED).to_json())
    fields = list(_walk_json(d["fields"]))
    assert len(fields) == 14
    for f in fields:
        raw = f["metadata"][FIELD_ID]
        assert isinstance(raw, str) and raw.isdigit()
    assert sorted(int(f["metadata"][FIELD_ID]) for f in fields) == list(range(14))


def test_map_json_shape_matches_arrow():
    d = NamespaceSchema.from_arrow(pa.schema([pa.field("m", pa.map_(pa.string(), pa.int64()))])).to_dict()
    m = d["fields"][0]
    assert m["type"]["type"] == "map"
    (entries,) = m["type"]["fields"]
    assert entries["name"] == "entries"
    assert entries["nullable"] is False
    assert [c["name"] for c in entries["type"]["fields"]] == ["key", "value"]
    assert _ids_by_path(d["fields"]) == {"m": 0, "m.entries": 1, "m.entries.key": 2, "m.entries.value": 3}


def test_field_ids_survive_the_json_round_trip():
    schema = NamespaceSchema.from_arrow(NESTED)
    again = NamespaceSchema.from_json(schema.to_json())
    assert _ids_by_path(again.to_dict()["fields"]) == NESTED_IDS
    assert again.next_field_id == 14
    assert again.arrow.equals(schema.arrow, check_metadata=True)


def test_existing_field_ids_are_kept():
    arrow = pa.schema(
        [
            pa.field("b", pa.int64(), metadata={FIELD_ID: "7"}),
            pa.field("c", pa.string()),
        ]
    )
    schema = NamespaceSchema.from_arrow(arrow)
    assert schema.id_of("b") == 7
    assert schema.id_of("c") == 8
    assert schema.next_field_id == 9


def test_duplicate_field_ids_are_rejected():
    arrow = pa.schema(
        [pa.field("b", pa.int64(), metadata={FIELD_ID: "3"}), pa.field("c", pa.string(), metadata={FIELD_ID: "3"})]
    )
    with pytest.raises(SchemaError) as info:
        NamespaceSchema.from_arrow(arrow)
    assert "3" in str(info.value)
    assert "\n" not in str(info.value)


# ------------------------------------------------------------------------------------------
# Ids are never reused
# ------------------------------------------------------------------------------------------
def test_dropped_ids_are_never_reused():
    old = NamespaceSchema.from_arrow(NESTED)
    assert old.id_of("z") == 13  # the highest id: the dangerous case for a max+1 allocator
    kept = [f for f in old.arrow if f.name != "z"]
    new_arrow = pa.schema([*kept, pa.field("added", pa.int64())])
    new = NamespaceSchema.from_arrow(new_arrow, next_field_id=old.next_field_id)
    assert new.id_of("added") == 14
    assert new.next_field_id == 15
    assert _ids_by_path(new.to_dict()["fields"]) == {
        **{k: v for k, v in NESTED_IDS.items() if k != "z"},
        "added": 14,
    }


def test_next_field_id_survives_reload_after_a_drop():
    old = NamespaceSchema.from_arrow(NESTED)
    dropped = NamespaceSchema.from_arrow(
        pa.schema([f for f in old.arrow if f.name != "z"]), next_field_id=old.next_field_id
    )
    assert dropped.next_field_id == 14
    reloaded = NamespaceSchema.from_json(dropped.to_json())
    assert reloaded.next_field_id == 14
    grown = NamespaceSchema.from_arrow(
        pa.schema([*reloaded.arrow, pa.field("z2", pa.string())]), next_field_id=reloaded.next_field_id
    )
    assert grown.id_of("z2") == 14


def test_next_field_id_never_goes_below_the_ids_in_use():
    arrow = pa.schema([pa.field("b", pa.int64(), metadata={FIELD_ID: "20"})])
    schema = NamespaceSchema.from_arrow(arrow, next_field_id=3)
    assert schema.next_field_id == 21


# ------------------------------------------------------------------------------------------
# Types: lossless JSON round trip and pylance spellings
# ------------------------------------------------------------------------------------------
ALL_TYPES = {
    "null": pa.null(),
    "int8": pa.int8(),
    "int16": pa.int16(),
    "int32": pa.int32(),
    "int64": pa.int64(),
    "uint8": pa.uint8(),
    "uint16": pa.uint16(),
    "uint32": pa.uint32(),
    "uint64": pa.uint64(),
    "float16": pa.float16(),
    "float32": pa.float32(),
    "float64": pa.float64(),
    "utf8": pa.string(),
    "large_utf8": pa.large_string(),
    "binary": pa.binary(),
    "large_binary": pa.large_binary(),
    "bool": pa.bool_(),
    "date32": pa.date32(),
    "date64": pa.date64(),
    **{f"timestamp_{u}": pa.timestamp(u) for u in ("s", "ms", "us", "ns")},
    **{f"timestamp_{u}_utc": pa.timestamp(u, tz="UTC") for u in ("s", "ms", "us", "ns")},
    "timestamp_us_new_york": pa.timestamp("us", tz="America/New_York"),
    "timestamp_ms_offset": pa.timestamp("ms", tz="+05:30"),
    "time32_s": pa.time32("s"),
    "time32_ms": pa.time32("ms"),
    "time64_us": pa.time64("us"),
    "time64_ns": pa.time64("ns"),
    **{f"duration_{u}": pa.duration(u) for u in ("s", "ms", "us", "ns")},
    "decimal128_10_2": pa.decimal128(10, 2),
    "decimal128_38_4": pa.decimal128(38, 4),
    "decimal128_1_0": pa.decimal128(1, 0),
    "decimal256_40_5": pa.decimal256(40, 5),
    "fixed_size_binary_16": pa.binary(16),
    "struct": pa.struct([pa.field("x", pa.int32()), pa.field("y", pa.string(), nullable=False)]),
    "struct_with_timestamp": pa.struct([pa.field("t", pa.timestamp("ns", tz="UTC"))]),
    "list": pa.list_(pa.int64()),
    "list_of_timestamps": pa.list_(pa.timestamp("ms")),
    "large_list": pa.large_list(pa.string()),
    "fixed_size_list": pa.list_(pa.float32(), 3),
    "map": pa.map_(pa.string(), pa.int64()),
    "map_of_lists": pa.map_(pa.int32(), pa.list_(pa.timestamp("s", tz="UTC"))),
}


@pytest.mark.parametrize("name", list(ALL_TYPES))
def test_json_round_trip_is_lossless(name):
    t = ALL_TYPES[name]
    can_be_required = not pa.types.is_null(t)  # Arrow forbids a non-nullable null-type field
    arrow = pa.schema([pa.field("c", t), pa.field("c_required", t, nullable=not can_be_required)])
    schema = NamespaceSchema.from_arrow(arrow)
    again = NamespaceSchema.from_json(schema.to_json())
    assert again.arrow.field("c").type == t
    assert again.arrow.field("c_required").type == t
    assert again.arrow.field("c").nullable is True
    assert again.arrow.field("c_required").nullable is not can_be_required
    assert again.arrow.equals(schema.arrow, check_metadata=True)
    assert again.to_dict() == schema.to_dict()
    assert again.next_field_id == schema.next_field_id
    # plain (what partition datasets store) is the input schema
    assert again.plain.equals(arrow, check_metadata=True)


@pytest.mark.parametrize(
    "t,expected",
    [
        (pa.decimal128(10, 2), {"type": "decimal128", "length": 10002}),
        (pa.decimal128(38, 4), {"type": "decimal128", "length": 38004}),
        (pa.decimal256(40, 5), {"type": "decimal256", "length": 40005}),
        (pa.int64(), {"type": "int64"}),
        (pa.string(), {"type": "utf8"}),
        (pa.date32(), {"type": "date32"}),
        (pa.binary(), {"type": "binary"}),
        (pa.timestamp("us", tz="UTC"), {"type": "timestamp"}),
        (pa.timestamp("us"), {"type": "timestamp"}),
    ],
    ids=str,
)
def test_documented_spellings(t, expected):
    assert NamespaceSchema.from_arrow(pa.schema([pa.field("c", t)])).to_dict()["fields"][0]["type"] == expected


@pytest.mark.parametrize(
    "t,meta",
    [
        (pa.timestamp("s"), {"lance:timestamp_unit": "s"}),
        (pa.timestamp("ms"), {"lance:timestamp_unit": "ms"}),
        (pa.timestamp("us"), {"lance:timestamp_unit": "us"}),
        (pa.timestamp("ns"), {"lance:timestamp_unit": "ns"}),
        (pa.timestamp("us", tz="UTC"), {"lance:timestamp_unit": "us", "lance:timestamp_tz": "UTC"}),
        (
            pa.timestamp("ns", tz="America/New_York"),
            {"lance:timestamp_unit": "ns", "lance:timestamp_tz": "America/New_York"},
        ),
        (pa.timestamp("ms", tz="+05:30"), {"lance:timestamp_unit": "ms", "lance:timestamp_tz": "+05:30"}),
    ],
    ids=str,
)
def test_timestamps_keep_unit_and_zone_in_field_metadata(t, meta):
    d = NamespaceSchema.from_arrow(pa.schema([pa.field("ts", t)])).to_dict()
    field = d["fields"][0]
    assert field["type"] == {"type": "timestamp"}
    assert field["metadata"] == {FIELD_ID: "0", **meta}
    assert NamespaceSchema.from_json(json.dumps(d)).arrow.field("ts").type == t


def test_spark_timestamp_and_timestamp_ntz_stay_distinct():
    arrow = pa.schema([pa.field("ts", pa.timestamp("us", tz="UTC")), pa.field("ntz", pa.timestamp("us"))])
    again = NamespaceSchema.from_json(NamespaceSchema.from_arrow(arrow).to_json()).arrow
    assert again.field("ts").type == pa.timestamp("us", tz="UTC")
    assert again.field("ntz").type == pa.timestamp("us")


@pytest.fixture(scope="module")
def pylance_spellings(tmp_path_factory) -> dict[str, dict]:
    """pylance's describe_table JsonArrowSchema field for a one-column dataset of each type."""
    root = str(tmp_path_factory.mktemp("pylance_types"))
    dirns = DirectoryNamespace(root=root)
    dirns.create_namespace(CreateNamespaceRequest(id=["types"]))
    out = {}
    for i, (name, t) in enumerate(ALL_TYPES.items()):
        location = f"{i:08x}_types${name}"
        lance.write_dataset(pa.table({"c": pa.array([None, None], type=t)}), f"{root}/{location}")
        dirns.register_table(RegisterTableRequest(id=["types", name], location=location))
        described = dirns.describe_table(DescribeTableRequest(id=["types", name], load_detailed_metadata=True))
        fields = described.var_schema.to_dict()["fields"]
        assert len(fields) == 1
        out[name] = _drop_none(fields[0])
    return out


@pytest.mark.parametrize("name", list(ALL_TYPES))
def test_type_spelling_matches_pylance(name, pylance_spellings):
    theirs = pylance_spellings[name]
    ours = NamespaceSchema.from_arrow(pa.schema([pa.field("c", ALL_TYPES[name])])).to_dict()["fields"][0]
    assert _strip_metadata(ours["type"]) == _strip_metadata(theirs["type"])
    assert ours["name"] == theirs["name"] == "c"
    assert ours["nullable"] == theirs["nullable"]


# ------------------------------------------------------------------------------------------
# Errors
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "t",
    [pa.dictionary(pa.int32(), pa.string()), pa.dense_union([pa.field("u", pa.int32())])],
    ids=["dictionary", "dense_union"],
)
def test_unsupported_type_names_the_column(t):
    arrow = pa.schema([pa.field("fine", pa.int64()), pa.field("bad_col", t)])
    with pytest.raises(SchemaError) as info:
        NamespaceSchema.from_arrow(arrow)
    message = str(info.value)
    assert isinstance(info.value, ValueError)
    assert "'bad_col'" in message
    assert "\n" not in message


def test_unsupported_nested_type_names_the_field():
    arrow = pa.schema([pa.field("s", pa.struct([pa.field("inner", pa.dictionary(pa.int8(), pa.string()))]))])
    with pytest.raises(SchemaError) as info:
        NamespaceSchema.from_arrow(arrow)
    assert "'inner'" in str(info.value)
    assert "\n" not in str(info.value)


def test_duplicate_column_names_raise():
    with pytest.raises(SchemaError) as info:
        NamespaceSchema.from_arrow(pa.schema([pa.field("a", pa.int32()), pa.field("a", pa.int64())]))
    assert "'a'" in str(info.value)
    assert "duplicate" in str(info.value)
    assert "\n" not in str(info.value)


def test_unknown_column_lookup_names_it_and_lists_columns():
    schema = NamespaceSchema.from_arrow(pa.schema([pa.field("a", pa.int32()), pa.field("b", pa.int64())]))
    with pytest.raises(SchemaError) as info:
        schema.field_by_name("nope")
    assert str(info.value) == "unknown column 'nope'; columns are: a, b"


def test_unknown_type_name_in_json_raises_schema_error():
    text = json.dumps(
        {"fields": [{"name": "c", "nullable": True, "type": {"type": "varchar"}, "metadata": {FIELD_ID: "0"}}]}
    )
    with pytest.raises(SchemaError) as info:
        NamespaceSchema.from_json(text)
    assert "'varchar'" in str(info.value)


@pytest.mark.parametrize(
    "fields,missing",
    [
        ([{"name": "a", "nullable": True, "type": {"type": "int64"}}], "'a'"),
        (
            [
                {
                    "name": "s",
                    "nullable": True,
                    "type": {
                        "type": "struct",
                        "fields": [{"name": "inner", "nullable": True, "type": {"type": "utf8"}}],
                    },
                    "metadata": {FIELD_ID: "0"},
                }
            ],
            "'inner'",
        ),
    ],
    ids=["top_level", "nested"],
)
def test_stored_schema_without_field_ids_is_corrupt(fields, missing):
    with pytest.raises(CorruptNamespace) as info:
        NamespaceSchema.from_json(json.dumps({"fields": fields}))
    assert missing in str(info.value)
    assert FIELD_ID in str(info.value)
    assert "\n" not in str(info.value)
