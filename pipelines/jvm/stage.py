"""Staged creates and replaces for the JVM layer's ``StagingTableCatalog`` (``StagedLanceTable.java``).

``CREATE TABLE ... AS SELECT``, ``REPLACE TABLE [AS SELECT]``, ``CREATE OR REPLACE TABLE`` and
``writeTo(t).create() / replace() / createOrReplace()`` plan a
:class:`~partitioning.tables.replace.Replacement` when Spark stages the table (a refused spec
or type is one line before any row is written), and again when Spark asks for the writer
(:class:`StagedWriter`, ``lp.write=stage``): its tasks write fragments under the new schema
and spec, and its commit, which the staged table runs only when Spark commits the staged
changes, makes them visible in one step (:mod:`partitioning.tables.replace`). A failure
anywhere leaves the table as it was; a failed create leaves nothing behind.

A column the new schema shares with the old one (same name, and the same type as Spark sees
it) keeps its field id and its storage type (a fixed-size vector stays one).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
from pyspark.sql.types import StructType

from partitioning.errors import InvalidInput
from partitioning.spec.field_ids import strip_lance_metadata
from partitioning.storage.guard import Guard
from partitioning.storage.roots import storage_options_from
from partitioning.storage.unborn import discard_uncreated
from partitioning.tables.replace import Replacement, plan_replacement
from partitioning.tables.write import commit_write
from pipelines.columns.schema import spark_schema, spark_to_arrow_schema
from pipelines.columns.spec_transforms import transform_of
from pipelines.source.writer import LancePartitionedWriter, reported_errors

__all__ = ["StagedWriter", "plan_staged"]

KINDS = ("create", "replace", "create_or_replace")


def plan_staged(root: str, args: Mapping[str, Any], options: Mapping[str, str] | None) -> Replacement:
    """The replacement a staged statement makes of ``root`` (``args``: the Spark schema as
    JSON, the ``PARTITIONED BY`` transforms, ``kind``)."""
    kind = str(args.get("kind"))
    if kind not in KINDS:
        raise InvalidInput(f"unknown staged kind {kind!r}; kinds are {', '.join(KINDS)}")
    struct = StructType.fromJson(json.loads(str(args["schema"])))
    spark_types = {f.name: f.dataType for f in struct.fields}

    def same(before: pa.Field, after: pa.Field) -> bool:
        seen = spark_schema(pa.schema([strip_lance_metadata(before)])).fields[0].dataType
        return bool(seen == spark_types.get(after.name))

    parts = [(*transform_of(t), None) for t in args.get("partitioning") or []]
    return plan_replacement(
        root,
        spark_to_arrow_schema(struct),
        parts,
        kind=kind,  # type: ignore[arg-type]
        storage_options=options,
        same=same,
    )


class StagedWriter(LancePartitionedWriter):
    """The rows of a staged table: written under the replacement's schema and spec, committed
    as ONE replace (or create) when the staged table commits."""

    def __init__(self, options: Mapping[str, str], schema: StructType, stage_json: str | None) -> None:
        root = next((v for k, v in options.items() if k.lower() == "path"), None)
        with reported_errors(f"stage the table at {root}"):
            args = json.loads(stage_json or "{}")
            self.replacement = plan_staged(str(root), args, storage_options_from(options))
            self.warehouse = args.get("warehouse")
        super().__init__(options, schema, True)
        self.created = None  # nothing exists before the commit: see _discard_unborn

    def namespace_for(
        self, root: str, opts: Mapping[str, str], schema: StructType, storage_options: Mapping[str, str] | None
    ) -> Any:
        return self.replacement.view(storage_options)

    def _commit(self, messages: list[Any]) -> None:
        what = "create" if self.replacement.creates else "replace"
        with reported_errors(f"commit the {what} of {self.root}"):
            _, combined = self.fragments(messages)
            commit_write(
                self.replacement.view(self.storage_options),
                combined,
                mode="overwrite",
                spec_id=self.spec_id,
                schema=self.fragment_writer.schema,
                write_id=self.write_id,
                max_rows_per_file=self.max_rows_per_file,
                naming_seed=self.fragment_writer.planner.seed,
                guard=Guard.of_ref(self.lease, self.root, self.storage_options),
            )

    def _discard_unborn(self) -> None:
        """A create that failed leaves no directory behind; a replace has nothing to undo."""
        if self.replacement.creates:
            own = self.lease.uri if self.lease else None
            discard_uncreated(self.root, self.storage_options, own, within=self.warehouse)
