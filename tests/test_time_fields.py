"""A month/day/hour partition field without the next coarser part of its column is logged.

The spec's ``day`` is ``date_part('day', col)``, the day of the month (seed 001, transform
table), so ``day(ts)`` alone puts the 10th of every month into one partition.
"""

from __future__ import annotations

import datetime as dt
import logging

import pyarrow as pa
import pytest

from partitioning import PartitionedNamespace, parse_partition_by
from partitioning.spec.schema import NamespaceSchema

SCHEMA = pa.schema(
    [("ts", pa.timestamp("us", tz="UTC")), ("d", pa.date32()), ("country", pa.string()), ("user_id", pa.int64())]
)
LOGGER = "partitioning.spec.partition_by"


def _logged(caplog: pytest.LogCaptureFixture, exprs: list[str]) -> list[str]:
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        parse_partition_by(exprs, NamespaceSchema.from_arrow(SCHEMA))
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


def test_day_is_the_day_of_the_month_so_two_months_share_a_partition() -> None:
    spec = parse_partition_by(["day(ts)"], NamespaceSchema.from_arrow(SCHEMA))
    jan, feb = dt.datetime(2025, 1, 10, tzinfo=dt.UTC), dt.datetime(2025, 2, 10, tzinfo=dt.UTC)
    values = spec.fields[0].apply([pa.array([jan, feb], SCHEMA.field("ts").type)], NamespaceSchema.from_arrow(SCHEMA))
    assert values.to_pylist() == [jan.day, feb.day] == [10, 10]


@pytest.mark.parametrize(
    ("exprs", "expected"),
    [
        (
            ["day(ts)", "country"],
            "partition spec: day(ts) without month(ts) puts the 10th of every month into one partition "
            "(day is the day of the month, 1-31); partition by year(ts), month(ts), day(ts) instead",
        ),
        (
            ["year(ts)", "day(ts)"],
            "partition spec: day(ts) without month(ts) puts the 10th of every month into one partition "
            "(day is the day of the month, 1-31); partition by year(ts), month(ts), day(ts) instead",
        ),
        (
            ["month(d)"],
            "partition spec: month(d) without year(d) puts every year's December into one partition "
            "(month is 1-12); partition by year(d), month(d) instead",
        ),
        (
            ["month(ts)", "day(ts)"],
            "partition spec: month(ts) without year(ts) puts every year's December into one partition "
            "(month is 1-12); partition by year(ts), month(ts), day(ts) instead",
        ),
        (
            ["year(ts)", "month(ts)", "hour(ts)"],
            "partition spec: hour(ts) without day(ts) puts the 13:00 hour of every day into one partition "
            "(hour is 0-23); partition by year(ts), month(ts), day(ts), hour(ts) instead",
        ),
    ],
)
def test_a_time_part_without_its_coarser_part_is_one_logged_line(
    caplog: pytest.LogCaptureFixture, exprs: list[str], expected: str
) -> None:
    assert _logged(caplog, exprs) == [expected]


@pytest.mark.parametrize(
    "exprs",
    [
        ["year(ts)"],
        ["year(ts)", "month(ts)"],
        ["year(ts)", "month(ts)", "day(ts)", "hour(ts)", "bucket[16](user_id)"],
        ["day(ts)", "ts AS t"],  # the identity field already tells every instant apart
        ["year(d)", "month(d)", "day(d)", "country"],
    ],
)
def test_complete_time_hierarchies_log_nothing(caplog: pytest.LogCaptureFixture, exprs: list[str]) -> None:
    assert _logged(caplog, exprs) == []


def test_each_column_is_judged_on_its_own_fields(caplog: pytest.LogCaptureFixture) -> None:
    lines = _logged(caplog, ["year(d)", "month(d)", "day(ts)"])
    assert len(lines) == 1
    assert lines[0].startswith("partition spec: day(ts) without month(ts) ")


def test_create_and_evolve_log_it(tmp_path, caplog: pytest.LogCaptureFixture) -> None:  # type: ignore[no-untyped-def]
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        ns = PartitionedNamespace.create(str(tmp_path / "ns"), SCHEMA, ["day(ts)"])
        ns.evolve_partition_spec(["year(ts)", "month(ts)", "day(ts)"])
        ns.evolve_partition_spec(["month(ts)"])
    lines = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert [line.split(" puts ")[0] for line in lines] == [
        "partition spec: day(ts) without month(ts)",
        "partition spec: month(ts) without year(ts)",
    ]
