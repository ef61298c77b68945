"""``ALTER TABLE`` on a catalog table, through the namespace's own schema evolution.

The JVM layer sends Spark's ``TableChange`` list as JSON: ``ADD COLUMN`` (nullable, top
level), ``RENAME COLUMN``, ``DROP COLUMN`` and ``ALTER COLUMN ... TYPE`` (widening), each the
namespace's own schema evolution (field ids kept or never reused). A statement's changes
are applied to the schema one after another in memory and stored as ONE schema change
(:func:`partitioning.state.evolution.evolve_schema`), so ``ALTER TABLE t DROP COLUMNS (a, b)``
whose second change is refused changes nothing. Anything else is refused in one line
before any change is made.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from pyspark.sql.types import DataType, StructField, StructType, _parse_datatype_json_value

from partitioning.errors import InvalidInput, SchemaError
from partitioning.namespace import PartitionedNamespace
from partitioning.spec.schema import NamespaceSchema
from partitioning.state.commits import DEFAULT_COMMIT_RETRIES
from partitioning.state.evolution import coerce_columns, evolve_schema, with_widened_column, without_column
from partitioning.storage.history import Operation
from pipelines.columns.schema import spark_to_arrow_schema

__all__ = ["alter_table"]

_SUPPORTED = "ADD COLUMN (nullable, top level), RENAME COLUMN, DROP COLUMN, ALTER COLUMN ... TYPE (widening)"


def _name(change: Mapping[str, Any]) -> str:
    path = change.get("path") or []
    if len(path) != 1:
        raise InvalidInput(f"ALTER TABLE: nested field {'.'.join(map(str, path))} cannot be changed; {_SUPPORTED}")
    return str(path[0])


def _arrow_type(change: Mapping[str, Any]) -> Any:
    dtype: DataType = _parse_datatype_json_value(json.loads(str(change["type"])))
    return spark_to_arrow_schema(StructType([StructField("c", dtype)])).field("c").type


def alter_table(root: str, changes: Sequence[Mapping[str, Any]], options: Mapping[str, str] | None) -> dict[str, Any]:
    """Apply ``changes`` in order (all checked first); the namespace's new schema version."""
    plan = []
    for change in changes:
        kind = change.get("kind")
        if kind == "add":
            if not change.get("nullable", True):
                raise InvalidInput(f"ALTER TABLE ADD COLUMN {_name(change)}: a new column must be nullable")
            if change.get("position"):
                raise InvalidInput(f"ALTER TABLE ADD COLUMN {_name(change)}: FIRST / AFTER is not supported")
            plan.append(("add", _name(change), _arrow_type(change)))
        elif kind == "rename":
            plan.append(("rename", _name(change), str(change["new"])))
        elif kind == "drop":
            plan.append(("drop", _name(change), bool(change.get("if_exists"))))
        elif kind == "type":
            plan.append(("type", _name(change), _arrow_type(change)))
        else:
            raise InvalidInput(f"ALTER TABLE: {change.get('what', kind)} is not supported; supported: {_SUPPORTED}")
    ns = PartitionedNamespace.load(root, options)

    def change(schema: NamespaceSchema) -> NamespaceSchema:
        for kind, name, arg in plan:
            if kind == "add":
                schema = schema.with_columns(coerce_columns({name: arg}))
            elif kind == "rename":
                schema = schema.with_renamed(name, arg)
            elif kind == "drop":
                if name not in schema.arrow.names:
                    if arg:
                        continue
                    raise SchemaError(
                        f"ALTER TABLE DROP COLUMN: no column {name!r}; columns are {', '.join(schema.arrow.names)}"
                    )
                schema = without_column(ns, name)(schema)
            else:
                schema = with_widened_column(ns, name, arg)(schema)
        return schema

    shown = "; ".join(f"{kind} {name}" for kind, name, _ in plan)
    operation = Operation("EVOLVE_SCHEMA", {"change": "alter_table", "changes": shown})
    evolve_schema(ns, change, max_retries=DEFAULT_COMMIT_RETRIES, operation=operation)
    return {"version": ns.refresh().manifest_version}
