"""Catalog work for the JVM layer's ``TableCatalog`` (``java/lance_partitioned/LanceCatalog.java``).

A catalog is a warehouse root; a Spark namespace ``db`` is the directory ``<warehouse>/db``
and a table ``db.events`` the partitioned namespace rooted at ``<warehouse>/db/events`` (a
directory holding ``__manifest``). Every call arrives through
:class:`pipelines.jvm.source.BridgeSource` (``lp.call``) and answers JSON; errors are one
:class:`~partitioning.errors.PartitioningError` line.

Names are input: an identifier part must be a plain name (no ``/``, ``\\``, ``.``/``..``,
control characters, at most 255 bytes), so a table never resolves outside its warehouse.

``DROP TABLE`` removes the table from the catalog: its ``__manifest`` goes, the partition
datasets stay (each still an ordinary Lance dataset). ``DROP TABLE ... PURGE`` also
deletes the data: every Lance-written entry under the table root, nothing else.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
from pyspark.sql.types import StructType

from partitioning.errors import InvalidInput, NamespaceAlreadyExists, NamespaceNotFound, SpecError, TableNotFound
from partitioning.namespace import PartitionedNamespace
from partitioning.plan.identity_match import identity_everywhere
from partitioning.plan.inspect import partition_type
from partitioning.storage.history import version_at, version_of_write
from partitioning.storage.lease_files import LEASE_DIR
from partitioning.storage.manifest import MANIFEST_DIR, ManifestStore
from partitioning.storage.orphans import remove_empty_dirs
from partitioning.storage.paths import join_uri
from partitioning.storage.roots import filesystem_of, resolve_root
from partitioning.storage.unborn import purge_namespace, remove_manifest, table_dirs
from pipelines.columns.schema import namespace_schema_from_spark, spark_schema
from pipelines.columns.spec_transforms import describe_partitioning, partition_spec
from pipelines.jvm.alter import alter_table
from pipelines.jvm.delete_rows import exact_delete
from pipelines.jvm.metadata import metadata_table, partition_values
from pipelines.jvm.stage import plan_staged
from pipelines.jvm.update_rows import sql_update
from pipelines.shared_roots import is_relative_path

__all__ = ["call_catalog", "table_root"]

Options = Mapping[str, str] | None
MAX_NAME_BYTES = 255
# table properties Spark sets itself; anything else a user sets is refused, not ignored
SPARK_PROPERTIES = frozenset({"provider", "owner", "location", "comment", "external", "is_managed_location"})


def call_catalog(call: str, args: Mapping[str, Any], storage_options: Options) -> Any:
    """Run one catalog call; its JSON-able answer."""
    handlers: dict[str, Callable[[Mapping[str, Any], Options], Any]] = {
        "describe": describe,
        "list_namespaces": list_namespaces,
        "namespace_exists": namespace_exists,
        "create_namespace": create_namespace,
        "drop_namespace": drop_namespace,
        "list_tables": list_tables,
        "create_table": create_table,
        "drop_table": drop_table,
        "alter_table": lambda a, o: alter_table(root_of(a), a.get("changes") or [], o),
        "stage_table": stage_table,
        "metadata_table": lambda a, o: metadata_table(root_of(a), a, o),
        "partition_values": lambda a, o: partition_values(root_of(a), a, o),
        "write_id_version": write_id_version,
        "exact_delete": exact_delete,
        "sql_update": sql_update,
    }
    handler = handlers.get(call)
    if handler is None:
        raise InvalidInput(f"unknown call {call!r} of the JVM layer; calls are: {', '.join(sorted(handlers))}")
    try:
        return handler(args, storage_options)
    except (TableNotFound, NamespaceNotFound) as exc:
        if not args.get("missing_ok"):
            raise
        return {"error": "not_found", "message": str(exc)}
    except NamespaceAlreadyExists as exc:
        return {"error": "exists", "message": str(exc)}


# -- names ----------------------------------------------------------------------------------------
def check_name(part: Any, what: str) -> str:
    """One identifier part as a directory name, or one line saying why not."""
    if not isinstance(part, str) or not part:
        raise InvalidInput(f"{what} name must be a non-empty string, got {part!r}")
    bad = next((c for c in part if c in "/\\" or ord(c) < 32 or ord(c) == 127), None)
    if bad is not None or part in (".", "..") or len(part.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        reason = f"character {bad!r}" if bad is not None else "'.', '..' or more than 255 bytes"
        raise InvalidInput(f"{what} name {part!r} is not allowed ({reason}); use letters, digits, '_' or '-'")
    if part in (MANIFEST_DIR, LEASE_DIR) or part.startswith("__"):
        raise InvalidInput(f"{what} name {part!r} is reserved")
    return part


def table_root(warehouse: str, namespace: Sequence[str], name: str) -> str:
    """Where table ``namespace.name`` of the warehouse lives."""
    root = resolve_root(warehouse)
    for part in namespace:
        root = join_uri(root, check_name(part, "namespace"))
    return join_uri(root, check_name(name, "table"))


def root_of(args: Mapping[str, Any]) -> str:
    if "root" in args:
        return resolve_root(str(args["root"]))
    return table_root(str(args["warehouse"]), list(args.get("namespace") or []), str(args["name"]))


def _namespace_dir(args: Mapping[str, Any]) -> str:
    root = resolve_root(str(args["warehouse"]))
    for part in args.get("namespace") or []:
        root = join_uri(root, check_name(part, "namespace"))
    return root


# -- tables ---------------------------------------------------------------------------------------
def describe(args: Mapping[str, Any], options: Options) -> dict[str, Any]:
    """What the JVM layer needs of a table at a version: root, version, Spark schema, partitioning,
    the identity partition columns every spec with tables shares, and a cheap column."""
    root = root_of(args)
    if "root" in args:
        from pipelines.shared_roots import check_source_root

        master = args.get("master")
        check_source_root(str(args["root"]), str(master) if master else None, bool(args.get("connect")))
    version = args.get("version")
    if args.get("timestamp_micros") is not None:
        when = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=int(args["timestamp_micros"]))
        version = version_at(root, when, storage_options=options)
    elif args.get("timestamp_text") is not None:
        if version is not None:
            raise InvalidInput("give the option versionAsOf or timestampAsOf, not both")
        zone = args.get("time_zone")
        version = version_at(
            root, str(args["timestamp_text"]), time_zone=str(zone) if zone else None, storage_options=options
        )
    if version is not None and not str(version).isdigit():
        label = args.get("version_label") or "VERSION AS OF"
        raise InvalidInput(f"{label} must be a __manifest version number, got {version!r}")
    try:
        ns = PartitionedNamespace.load(root, options, manifest_version=int(version) if version is not None else None)
    except NamespaceNotFound as exc:
        raw = str(args.get("root", ""))
        if raw and is_relative_path(raw):
            from pipelines.source.datasource import relative_path_missing

            raise NamespaceNotFound(relative_path_missing(raw, bool(args.get("connect")))) from exc
        raise
    from pipelines.read_options import read_schema

    schema = read_schema(ns.namespace_schema)
    spec = ns.current_spec
    return {
        "root": ns.root,
        "version": ns.manifest_version,
        "schema": schema.json(),
        "partitioning": describe_partitioning(spec, ns.namespace_schema),
        "identity": sorted(identity_everywhere(ns)),
        "cheap": _cheap_column(schema),
        "partition_schema": spark_schema(pa.schema(list(partition_type(ns)))).json(),
        "properties": {
            "lance_partitioned.manifest_version": str(ns.manifest_version),
            "lance_partitioned.partition_spec": spec.to_json(),
            "location": ns.root,
        },
    }


def _cheap_column(schema: StructType) -> str | None:
    """The column a read that needs none reads (a row count): the narrowest fixed-width one."""
    order = ("boolean", "byte", "short", "integer", "date", "float", "long", "timestamp", "double")
    ranked = [
        (order.index(f.dataType.typeName()), i, f.name) for i, f in enumerate(schema) if f.dataType.typeName() in order
    ]
    if ranked:
        return min(ranked)[2]
    return schema.fields[0].name if schema.fields else None


def create_table(args: Mapping[str, Any], options: Options) -> dict[str, Any]:
    """``CREATE TABLE``: a new namespace with the statement's schema and ``PARTITIONED BY``."""
    root = root_of(args)
    check_properties(args, root)
    struct = StructType.fromJson(json.loads(str(args["schema"])))
    schema = namespace_schema_from_spark(struct)
    spec = partition_spec(partitioning_of(args), schema)
    if ManifestStore(root, options).exists():
        raise NamespaceAlreadyExists(f"table already exists at {root}")
    remove_dropped_table(root, options)
    ns = PartitionedNamespace.create(root, schema, spec, options)
    return describe({"root": ns.root}, options)


def stage_table(args: Mapping[str, Any], options: Options) -> dict[str, Any]:
    """``CREATE TABLE ... AS SELECT`` / ``REPLACE TABLE`` / ``CREATE OR REPLACE TABLE``, checked
    before any row is written (:mod:`pipelines.jvm.stage`); nothing changes here but the
    leftovers of a dropped table where a table is created."""
    root = root_of(args)
    check_properties(args, root)
    partitioning_of(args)
    if not ManifestStore(root, options).exists() and args.get("kind") != "replace":
        remove_dropped_table(root, options)
    replacement = plan_staged(root, args, options)
    return {"root": replacement.root, "creates": replacement.creates}


def write_id_version(args: Mapping[str, Any], options: Options) -> dict[str, Any]:
    """Whether a write id was committed before, and at which ``__manifest`` version (-1: older than
    the history searched): a write under it commits nothing, which the JVM layer logs."""
    ns = PartitionedNamespace.load(root_of(args), options)
    write_id = str(args["write_id"])
    if not ns.write_id_committed(write_id):
        return {"committed": False}
    at = version_of_write(ns.root, write_id, storage_options=ns.storage_options)
    return {"committed": True, "version": at if at is not None else -1}


def check_properties(args: Mapping[str, Any], root: str) -> None:
    """A new table's properties: Spark's own, and ``LOCATION`` only where the table lives."""
    properties = {str(k): str(v) for k, v in (args.get("properties") or {}).items()}
    unknown = sorted(k for k in properties if k not in SPARK_PROPERTIES and not k.startswith("option."))
    if unknown:
        raise InvalidInput(
            f"table property {unknown[0]!r} is not supported by lance_partitioned tables (none are settable yet)"
        )
    location = properties.get("location")
    if location is not None and resolve_root(location) != root and not args.get("location_allowed"):
        raise InvalidInput(
            f"LOCATION {location!r}: a table of this catalog lives under its warehouse, at {root}; leave LOCATION out"
        )


def partitioning_of(args: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """A new table's ``PARTITIONED BY`` transforms; a table without is refused."""
    transforms = list(args.get("partitioning") or [])
    if not transforms:
        raise SpecError(
            "a lance_partitioned table needs PARTITIONED BY (...): e.g. PARTITIONED BY (country), "
            "(bucket(16, id)), (year(ts), month(ts), day(ts)) or (truncate(4, name))"
        )
    return transforms


def drop_table(args: Mapping[str, Any], options: Options) -> dict[str, Any]:
    """``DROP TABLE``: the ``__manifest`` goes; with ``purge`` every Lance-written entry goes too."""
    root = root_of(args)
    store = ManifestStore(root, options)
    if not store.exists():
        return {"dropped": False}
    if args.get("purge"):
        tables = [t.uri for t in PartitionedNamespace.load(root, options).partitions()]
        purge_namespace(root, options, tables)
        remove_empty_dirs(resolve_root(str(args["warehouse"])), [root], options)  # inside the warehouse
        return {"dropped": True, "purged": True}
    remove_manifest(root, options)
    return {"dropped": True, "purged": False}


def remove_dropped_table(root: str, options: Options) -> None:
    """A table created where one was dropped without PURGE (or replaced: REPLACE TABLE drops,
    then creates) takes the place of its leftovers: the partition datasets and leases the
    dropped table left go first. Anything else there refuses the create (nothing is deleted)."""
    fs, path = filesystem_of(root, options)
    infos = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
    tables = table_dirs(root, options)
    leftovers = {t.rsplit("/", 1)[-1] for t in tables} | {LEASE_DIR}
    if not infos or any(i.base_name not in leftovers for i in infos):
        return
    purge_namespace(root, options, tables)


# -- namespaces -----------------------------------------------------------------------------------
def _children(directory: str, options: Options) -> list[tuple[str, bool]]:
    """(name, is a table) of each directory below ``directory``."""
    fs, path = filesystem_of(directory, options)
    try:
        infos = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
    except (FileNotFoundError, NotADirectoryError):
        return []
    out = []
    for info in sorted(infos, key=lambda i: i.base_name):
        if info.type != pafs.FileType.Directory or info.base_name.startswith((".", "_")):
            continue
        manifest = fs.get_file_info(f"{info.path}/{MANIFEST_DIR}")
        out.append((info.base_name, manifest.type == pafs.FileType.Directory))
    return out


def list_tables(args: Mapping[str, Any], options: Options) -> list[str]:
    return [name for name, table in _children(_namespace_dir(args), options) if table]


def list_namespaces(args: Mapping[str, Any], options: Options) -> list[str]:
    return [name for name, table in _children(_namespace_dir(args), options) if not table]


def namespace_exists(args: Mapping[str, Any], options: Options) -> bool:
    directory = _namespace_dir(args)
    if not args.get("namespace"):
        return True
    fs, path = filesystem_of(directory, options)
    info = fs.get_file_info(path)
    if info.type != pafs.FileType.Directory:
        return False
    return fs.get_file_info(f"{path}/{MANIFEST_DIR}").type == pafs.FileType.NotFound


def create_namespace(args: Mapping[str, Any], options: Options) -> bool:
    if namespace_exists(args, options):
        raise NamespaceAlreadyExists(f"namespace {'.'.join(args.get('namespace') or [])} already exists")
    fs, path = filesystem_of(_namespace_dir(args), options)
    fs.create_dir(path, recursive=True)
    return True


def drop_namespace(args: Mapping[str, Any], options: Options) -> bool:
    directory = _namespace_dir(args)
    if not namespace_exists(args, options):
        return False
    if _children(directory, options):
        raise InvalidInput(
            f"namespace {'.'.join(args.get('namespace') or [])} is not empty; drop its tables and namespaces first"
        )
    remove_empty_dirs(resolve_root(str(args["warehouse"])), [directory], options)
    return True
