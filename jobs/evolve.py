"""Evolve a partitioned namespace: its partition spec, or its schema by field id.

Run under spark-submit, e.g.::

    PYSPARK_PYTHON=.venv/bin/python .venv/bin/spark-submit --master local[2] \\
        --properties-file spark-conf/spark-defaults.conf jobs/evolve.py \\
        add-partition-field --root warehouse/events "bucket[16](user_id) AS user_bucket"

Subcommands::

    add-partition-field  --root R EXPR...      new spec = current fields + EXPR ("year(ts)", "bucket[8](id) AS b")
    drop-partition-field --root R FIELD_ID...  new spec = current fields without these field ids
    replace-spec         --root R EXPR...      new spec = exactly EXPR
    add-column           --root R NAME:TYPE... nullable columns, new field ids (TYPE: int64, string, decimal(12,2))
    rename-column        --root R OLD NEW      the field id stays
    drop-column          --root R NAME         its field id is never reused
    widen-column         --root R NAME TYPE    int32->int64, float32->float64, decimal precision up

Only ``__manifest`` changes; partition datasets are not rewritten. Prints the new spec
or schema. A bad request prints one ``error:`` line and exits with status 2.

An object-store root (``s3://``, ``gs://``, ``az://``) takes Lance's storage options as
``--storage-option KEY=VALUE`` (repeatable, e.g. ``--storage-option aws_region=eu-west-1``).
"""

from __future__ import annotations

import argparse
import sys

from jobs._cli import add_storage_option_argument, finish, run, storage_options
from partitioning import PartitionedNamespace, SpecError
from partitioning.spec.arrow_json import parse_type
from partitioning.spec.field_ids import field_id_of
from partitioning.spec.schema import NamespaceSchema

SPEC_COMMANDS = ("add-partition-field", "drop-partition-field", "replace-spec")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="evolve", description="Evolve a Lance partitioned namespace.")
    sub = parser.add_subparsers(dest="command", required=True)

    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text)
        p.add_argument("--root", required=True, help="namespace root (path or URI)")
        add_storage_option_argument(p)
        return p

    command("add-partition-field", "add partition fields").add_argument("fields", nargs="+", metavar="EXPR")
    command("drop-partition-field", "drop partition fields").add_argument("field_ids", nargs="+", metavar="FIELD_ID")
    command("replace-spec", "replace the partition spec").add_argument("fields", nargs="+", metavar="EXPR")
    command("add-column", "add nullable columns").add_argument("columns", nargs="+", metavar="NAME:TYPE")
    p = command("rename-column", "rename a column")
    p.add_argument("old")
    p.add_argument("new")
    command("drop-column", "drop a column").add_argument("name")
    p = command("widen-column", "widen a column's type")
    p.add_argument("name")
    p.add_argument("type")
    return parser.parse_args(argv)


def _columns(specs: list[str]) -> dict[str, str]:
    out = {}
    for text in specs:
        name, sep, type_name = text.partition(":")
        if not sep or not name or not type_name:
            raise SpecError(f"bad column {text!r}; expected NAME:TYPE, e.g. country:string")
        parse_type(type_name)
        out[name] = type_name
    return out


def describe_schema(schema: NamespaceSchema) -> str:
    lines = [f"schema (next field id {schema.next_field_id}):"]
    lines += [f"  {field_id_of(f):>4}  {f.name}  {f.type}" for f in schema.arrow]
    return "\n".join(lines)


def evolve(ns: PartitionedNamespace, args: argparse.Namespace) -> str:
    """Apply one subcommand; returns what to print."""
    current = list(ns.current_spec.fields)
    if args.command == "add-partition-field":
        spec = ns.evolve_partition_spec([*current, *args.fields])
    elif args.command == "replace-spec":
        spec = ns.evolve_partition_spec(list(args.fields))
    elif args.command == "drop-partition-field":
        known = [f.field_id for f in current]
        unknown = [fid for fid in args.field_ids if fid not in known]
        if unknown:
            raise SpecError(
                f"no partition field {unknown[0]!r} in the current spec v{ns.current_spec.spec_id}; "
                f"its fields are: {', '.join(known)}"
            )
        spec = ns.evolve_partition_spec([f for f in current if f.field_id not in args.field_ids])
    else:
        if args.command == "add-column":
            schema = ns.add_columns(_columns(args.columns))
        elif args.command == "rename-column":
            schema = ns.rename_column(args.old, args.new)
        elif args.command == "drop-column":
            schema = ns.drop_column(args.name)
        else:
            schema = ns.widen_column(args.name, args.type)
        return describe_schema(schema)
    return f"partition spec {spec}\n{spec.to_json()}"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)

    def body() -> None:
        print(evolve(PartitionedNamespace.load(args.root, storage_options(args)), args))

    return run(body)


if __name__ == "__main__":
    sys.exit(finish(main()))
