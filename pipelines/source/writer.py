"""Writes through the ``lance_partitioned`` data source.

``df.write.format("lance_partitioned").mode("append" | "overwrite").option(...).save(root)``
goes through the same protocol as :func:`pipelines.write.dataframe.write_partitioned`: tasks
write fragments and return commit messages, and ``commit`` makes the dataset commits
and ONE ``__manifest`` commit. Spark gives a data source writer its input as is, so
partition values are computed with the Arrow transforms inside the tasks and each
task keeps at most ``max_open_writers`` partition buffers.

Options (any other is an error listing these): ``partition_by`` (``"day(ts);
bucket[16](user_id)"`` or a JSON list; creates the namespace, or must match its current
spec), ``partitionOverwriteMode`` (``static`` or ``dynamic``), ``write_id``,
``max_rows_per_file``, ``max_bytes_per_file``, ``max_open_writers``, and
``storage.<key>`` (a Lance storage option; the tasks get them with the pickled writer,
the lease reference and the fragment writer). A relative path is made absolute on the
driver before any task is planned.

Overwrite: ``mode("overwrite")`` replaces everything (``static``) or only the partitions
present in the DataFrame (``dynamic``). The write option wins; without it the session's
``spark.sql.sources.partitionOverwriteMode`` decides, as for Spark's file sources. A
Python data source never sees the session conf, but Spark sets every SQL conf the
session has set as a local property of the job's tasks, so each task reports the value
it saw in its commit message and ``commit`` uses it.

What Spark 4.3 does not hand a Python data source, so only
:func:`pipelines.write.dataframe.write_partitioned` offers it: ``.partitionBy(...)`` (Spark refuses
it before the writer exists: "The provided partitioning or clustering columns do not
match the existing table's"; use ``.option("partition_by", ...)``), and the
``errorifexists`` / ``ignore`` save modes (Spark refuses them with
UNSUPPORTED_DATA_SOURCE_SAVE_MODE). For ``INSERT INTO`` / ``INSERT OVERWRITE`` /
``writeTo()`` on a catalog table Spark gives the writer no table options, not even the
path (``PythonDataSourceV2.getTable`` drops them), only the statement's own:
``INSERT INTO t WITH ('path' = ...)``, ``writeTo(t).option('path', ...)``. Without a path
the error is one line naming those and ``save(root)`` / ``write_partitioned``.

Errors: Spark shows a Python data source's error as the worker's traceback inside its
own error. Our errors name the partition and the cause in one line, and the writer
tells the worker (which exits after reporting it) to leave the traceback out, so the
user sees ``[PYTHON_DATA_SOURCE_ERROR] ... partitioning.errors.X: <line>`` or ``An
exception was thrown from the Python worker: partitioning.errors.X: <line>``; Spark's
own prefix cannot be removed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructField, StructType

from partitioning.errors import InvalidInput, PartitioningError, SpecError
from partitioning.namespace import PartitionedNamespace
from partitioning.spec.partition_by import check_same_spec, parse_partition_by
from partitioning.storage.guard import Guard
from partitioning.storage.leases import LeaseRef, keep_alive, release_lease, take_lease
from partitioning.storage.manifest import ManifestStore
from partitioning.storage.paths import check_namespace_root, check_new_root
from partitioning.storage.roots import STORAGE_OPTION_PREFIX, storage_options_from
from partitioning.storage.unborn import discard_unborn
from partitioning.tables.fragments import DEFAULT_MAX_ROWS_PER_FILE, FragmentWriter, add_partition_columns
from partitioning.tables.write import commit_write, conform_table
from pipelines.columns.schema import merge_spark_schema, namespace_schema_from_spark
from pipelines.spark_errors import hide_worker_traceback

__all__ = [
    "DEFAULT_MAX_OPEN_WRITERS",
    "OVERWRITE_MODES",
    "ROOT_METADATA_KEY",
    "SESSION_OVERWRITE_MODE",
    "WRITE_OPTIONS",
    "LancePartitionedWriter",
    "fragment_messages",
    "positive_int",
    "reported_errors",
    "root_in_schema",
    "with_root",
    "writer_options",
]

WRITE_OPTIONS = (
    "path",
    "partition_by",
    "partitionOverwriteMode",
    "write_id",
    "max_rows_per_file",
    "max_bytes_per_file",
    "max_open_writers",
    "mergeSchema",
)
OVERWRITE_MODES = ("static", "dynamic")
SESSION_OVERWRITE_MODE = "spark.sql.sources.partitionOverwriteMode"
DEFAULT_MAX_OPEN_WRITERS = 32
# Spark 4.3 gives a catalog table's options to the source only at CREATE TABLE (its
# PythonDataSourceV2.getTable drops them); later reads get the schema the catalog stored,
# so the root travels as metadata of that schema's first column.
ROOT_METADATA_KEY = "lance_partitioned.root"


def with_root(schema: StructType, root: str) -> StructType:
    """``schema`` with ``root`` recorded on its first column (see :data:`ROOT_METADATA_KEY`)."""
    first, *rest = schema.fields
    metadata = {**(first.metadata or {}), ROOT_METADATA_KEY: root}
    return StructType([StructField(first.name, first.dataType, first.nullable, metadata), *rest])


def root_in_schema(schema: StructType) -> str | None:
    """The root :func:`with_root` recorded, if ``schema`` came from a catalog table that has one."""
    return next((f.metadata[ROOT_METADATA_KEY] for f in schema.fields if ROOT_METADATA_KEY in (f.metadata or {})), None)


def writer_options(
    options: Mapping[str, str],
    allowed: tuple[str, ...] = WRITE_OPTIONS,
    kind: str = "write",
    hints: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The ``allowed`` options (``path`` first) under their canonical names, without the
    ``storage.<key>`` ones (:func:`partitioning.storage.roots.storage_options_from`); an unknown
    one is an error listing them, with ``hints``' text for a known mistake (lower-case key)."""
    canonical = {name.lower(): name for name in allowed}
    out = {}
    for key, value in options.items():
        if key.lower().startswith(STORAGE_OPTION_PREFIX):
            continue
        name = canonical.get(key.lower())
        if name is None:
            extra = (hints or {}).get(key.lower(), "")
            raise InvalidInput(
                f"unknown lance_partitioned {kind} option {key!r}{extra}; allowed: {', '.join(allowed[1:])}, "
                f"{STORAGE_OPTION_PREFIX}<key> (a Lance storage option)"
            )
        out[name] = value
    return out


def overwrite_mode(value: str, source: str) -> str:
    mode = value.strip().lower()
    if mode not in OVERWRITE_MODES:
        raise InvalidInput(
            f"{source} {value!r} is not a partition overwrite mode; allowed: {', '.join(OVERWRITE_MODES)}"
        )
    return mode


def _true(options: Mapping[str, str], name: str) -> bool:
    value = options.get(name, "false").strip().lower()
    if value not in ("true", "false"):
        raise InvalidInput(f"option {name} must be true or false, got {options[name]!r}")
    return value == "true"


def positive_int(options: Mapping[str, str], name: str) -> int | None:
    """Option ``name`` as a positive integer, None when not given; anything else is one line."""
    if name not in options:
        return None
    try:
        value = int(options[name])
    except ValueError:
        value = 0
    if value < 1:
        raise InvalidInput(f"option {name} must be a positive integer, got {options[name]!r}")
    return value


def _partition_by(text: str) -> list[str]:
    text = text.strip()
    if text.startswith("["):
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            value = None
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise SpecError(f"option partition_by must be a JSON list of strings, got {text!r}")
        return value
    return [part.strip() for part in text.split(";") if part.strip()]


@contextmanager
def reported_errors(action: str) -> Iterator[None]:
    """Errors leave as one-line :class:`PartitioningError` s (others are wrapped, chained).

    Inside a Spark Python worker, which reports the error and exits, the traceback is
    left out of the report (``SPARK_HIDE_TRACEBACK``, read by pyspark when it formats it).
    """
    try:
        yield
    except PartitioningError:
        hide_worker_traceback()
        raise
    except Exception as exc:
        hide_worker_traceback()
        first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), "")
        raise PartitioningError(f"{action}: {type(exc).__name__}: {first}".rstrip(": ")) from exc


def fragment_messages(writer: FragmentWriter, lease: LeaseRef | None, rows: Iterator[pa.RecordBatch]) -> bytes:
    """One task's rows (with their partition columns) written as fragments while the task
    keeps the write's lease alive; the commit messages as Arrow IPC bytes for the driver."""
    with keep_alive(lease):
        batches = list(writer(rows))
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, writer.output_schema) as out:
        for b in batches:
            out.write_batch(b)
    return sink.getvalue().to_pybytes()


@dataclass(frozen=True)
class _Messages(WriterCommitMessage):
    """One task's commit messages (Arrow IPC bytes), and the session's overwrite mode it saw."""

    ipc: bytes
    session_overwrite_mode: str | None = None


class LancePartitionedWriter(DataSourceArrowWriter):
    def __init__(self, options: Mapping[str, str], schema: StructType, overwrite: bool) -> None:
        root = next((v for k, v in options.items() if k.lower() == "path"), None)
        with reported_errors(f"write to {root}"):
            if not root:
                hint = root_in_schema(schema) or "<root>"
                raise SpecError(
                    "no path: Spark 4.3 gives a Python data source writer no table options for INSERT INTO / "
                    f"INSERT OVERWRITE / writeTo() on a catalog table; name the root in the statement: "
                    f"INSERT INTO t WITH ('path' = '{hint}') ..., writeTo(t).option('path', '{hint}'), "
                    "or use df.write.format('lance_partitioned').save(root) / pipelines.write_partitioned(df, root)"
                )
            opts = writer_options(options)
            self.storage_options = storage_options_from(options)
            self.root = root
            self.overwrite = overwrite
            self.write_id = opts.get("write_id")
            self.mode: str | None = "append"
            if overwrite:
                explicit = opts.get("partitionOverwriteMode")
                if explicit is None:
                    self.mode = None  # the session's setting, as the tasks see it
                else:
                    dynamic = overwrite_mode(explicit, "option partitionOverwriteMode") == "dynamic"
                    self.mode = "overwrite_partitions" if dynamic else "overwrite"
            self.max_rows_per_file = positive_int(opts, "max_rows_per_file") or DEFAULT_MAX_ROWS_PER_FILE
            max_bytes = positive_int(opts, "max_bytes_per_file")
            max_open = positive_int(opts, "max_open_writers") or DEFAULT_MAX_OPEN_WRITERS
            existed = ManifestStore(root, self.storage_options).exists()
            ns = self.namespace_for(root, opts, schema, self.storage_options)
            # a namespace this write creates goes again when the write fails (see abort)
            self.created = None if existed else ns.manifest_version
            self.root = ns.root  # absolute: the tasks write and the commit reads exactly here
            spec = ns.current_spec
            self.spec_id = spec.spec_id
            self.fields = spec.fields
            self.schema = ns.namespace_schema
            self.fragment_writer = FragmentWriter.for_namespace(
                ns, max_rows_per_file=self.max_rows_per_file, max_bytes_per_file=max_bytes, max_open_writers=max_open
            )
            # tasks refresh it while they write; commit and abort remove it (a crashed job's lapses)
            self.lease = take_lease(
                ns.root, write_id=self.write_id, storage_options=ns.storage_options, bases=(ns.manifest_version,)
            )

    @staticmethod
    def namespace_for(
        root: str, opts: Mapping[str, str], schema: StructType, storage_options: Mapping[str, str] | None
    ) -> PartitionedNamespace:
        """The namespace at ``root``: checked against ``partition_by`` and merged with ``schema``
        under ``mergeSchema``, or created with ``partition_by`` (the stream writer's too)."""
        store = ManifestStore(root, storage_options)
        root = store.root
        if store.exists():
            check_namespace_root(root, storage_options)
            ns = PartitionedNamespace.load(root, storage_options)
            if "partition_by" in opts:
                wanted = parse_partition_by(_partition_by(opts["partition_by"]), ns.namespace_schema)
                check_same_spec(
                    root, ns.current_spec, wanted, "omit option partition_by to write with the current spec"
                )
            if _true(opts, "mergeSchema"):
                ns = merge_spark_schema(schema, ns)
            return ns
        check_new_root(root, storage_options)
        if "partition_by" not in opts:
            raise SpecError(
                f"no namespace at {root}; to create it, give its partitioning: PARTITIONED BY (...) in SQL, "
                ".partitionBy(...) or .option('partition_by', 'day(ts); country') on a DataFrame write, or "
                "partition_by=[...] to pipelines.write_partitioned"
            )
        ns_schema = namespace_schema_from_spark(schema)
        return PartitionedNamespace.create(
            root, ns_schema, parse_partition_by(_partition_by(opts["partition_by"]), ns_schema), storage_options
        )

    def write(self, iterator: Iterator[pa.RecordBatch]) -> _Messages:
        with reported_errors(f"write to {self.root}"):

            def keyed() -> Iterator[pa.RecordBatch]:
                for batch in iterator:
                    table = conform_table(pa.Table.from_batches([batch]), self.schema)
                    yield from add_partition_columns(table, self.fields, self.schema).to_batches()

            ipc = fragment_messages(self.fragment_writer, self.lease, keyed())
            context = TaskContext.get()
            session = context.getLocalProperty(SESSION_OVERWRITE_MODE) if context is not None else None
            return _Messages(ipc, session)

    def effective_mode(self, messages: list[_Messages]) -> str:
        """The write mode; for ``overwrite`` without the option, the session's setting the tasks saw."""
        if self.mode is not None:
            return self.mode
        seen = {
            overwrite_mode(m.session_overwrite_mode, SESSION_OVERWRITE_MODE)
            for m in messages
            if m.session_overwrite_mode
        }
        if len(seen) > 1:
            raise InvalidInput(f"tasks of one write saw different {SESSION_OVERWRITE_MODE} values: {sorted(seen)}")
        return "overwrite_partitions" if seen == {"dynamic"} else "overwrite"

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        try:
            self._commit(messages)
        except BaseException:
            release_lease(self.lease)
            self._discard_unborn()
            raise
        release_lease(self.lease)

    def _discard_unborn(self) -> None:
        if self.created is not None:
            discard_unborn(self.root, self.created, self.storage_options, self.lease.uri if self.lease else None)

    def fragments(self, messages: list[WriterCommitMessage | None]) -> tuple[list[_Messages], pa.Table]:
        """This write's task messages and the fragments they wrote, as one table."""
        ours = [m for m in messages if isinstance(m, _Messages)]
        tables = [pa.ipc.open_stream(m.ipc).read_all() for m in ours]
        return ours, pa.concat_tables(tables) if tables else self.fragment_writer.output_schema.empty_table()

    def _commit(self, messages: list[WriterCommitMessage | None]) -> None:
        with reported_errors(f"commit the write to {self.root}"):
            ours, combined = self.fragments(messages)
            ns = PartitionedNamespace.load(self.root, self.storage_options)
            commit_write(
                ns,
                combined,
                mode=self.effective_mode(ours),  # type: ignore[arg-type]
                spec_id=self.spec_id,
                schema=self.fragment_writer.schema,
                write_id=self.write_id,
                max_rows_per_file=self.max_rows_per_file,
                naming_seed=self.fragment_writer.planner.seed,
                guard=Guard.of_ref(self.lease, self.root, self.storage_options),
            )

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Nothing to undo: uncommitted fragments are invisible; ``ns.orphans()`` lists them
        and :func:`partitioning.tables.vacuum.vacuum` deletes them once the lease is gone. A
        namespace this write created is removed (:func:`partitioning.storage.unborn.discard_unborn`)."""
        release_lease(self.lease)
        self._discard_unborn()
