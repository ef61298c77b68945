"""The ``lance_partitioned`` Python Data Source (reads; writes are in :mod:`pipelines.source.writer`).

``spark.read.format("lance_partitioned").load(root)`` reads the namespace at the
``__manifest`` version current when the DataFrame is created (or ``versionAsOf``, or
``timestampAsOf``: the last version committed at or before that time, a zone-less time
read in the ``timeZone`` option):
schema and data of one DataFrame always come from one version, however often and in
however many scans it is used. Load again to see later writes.

Read options (names are case-insensitive; any other option is an error):
``versionAsOf``, ``columns`` (a comma-separated subset), ``filter`` (pruned and applied
by the source; see :mod:`pipelines.source.reader`), ``prune_filter`` (pruning only; the caller
applies it), ``timeZone`` and ``sqlConf`` (how the filters' SQL is read; set by
:func:`pipelines.read.dataframe.read_partitioned` from the session), ``rows_per_split``,
``max_partitions``, ``with_row_address`` (adds ``_lance_table`` and ``_lance_rowaddr``),
``object_ids`` (a JSON list: read only these partition tables; used by merge and update),
``nearest`` (a vector search returning the global top-k with ``_distance``; see
:mod:`pipelines.source.nearest`), and ``storage.<key>``: a Lance storage option (``storage.aws_endpoint``,
``storage.aws_region``, ...), used on the driver and, pickled with the reader, by
every task. A relative ``path`` is made absolute where the source plans: the driver on
classic Spark, the server on Spark Connect (where the client's working directory is
unknown, so a missing namespace at a relative path says so; :func:`read_partitioned` and
:func:`write_partitioned` resolve on the client). The source registered in a session
knows the session's master and refuses a relative path on a cluster whose executors do
not share the driver's files (:func:`pipelines.shared_roots.check_root_for_master`).

A catalog table (``CREATE TABLE t USING lance_partitioned LOCATION '<root>'``): Spark
4.3 passes its options only to the ``schema()`` call of ``CREATE TABLE``; the schema
returned then carries the root (:func:`pipelines.source.writer.with_root`), and a later
read with no ``path`` option takes the root from the schema Spark hands ``reader()``.

Which filters prune: PySpark 4.3 shares one read plan between all scans of a DataFrame
(see :mod:`pipelines.source.reader`), so filters Spark pushes (``df.where(...)``) are handed
back to Spark and prune nothing; the ``filter``/``prune_filter`` options and
``read_partitioned(filter=...)`` prune. :func:`register_data_source` probes once per
Spark version whether pushed filters are kept per scan, and only then registers the
source that prunes with them too.
"""

from __future__ import annotations

import logging
import re
import urllib.parse
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, ClassVar

from pyspark.errors import PySparkException
from pyspark.sql import SparkSession
from pyspark.sql import datasource as ds
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    InputPartition,
)
from pyspark.sql.types import StructType

from partitioning.errors import InvalidInput, NamespaceNotFound, PartitioningError, SpecError
from partitioning.namespace import PartitionedNamespace
from partitioning.storage.history import version_at
from partitioning.storage.manifest import ManifestStore
from partitioning.storage.roots import STORAGE_OPTION_PREFIX, resolve_root, storage_options_from
from pipelines.jar import add_to_session, jar_path
from pipelines.read_options import read_schema
from pipelines.session import is_connect
from pipelines.session_calls import register_bound
from pipelines.shared_roots import check_source_root, is_relative_path
from pipelines.source.reader import LancePartitionedReader, PerScanPushdownReader
from pipelines.source.stream_reader import STREAM_READ_OPTIONS, LancePartitionedStreamReader, RefusedStreamReader
from pipelines.source.stream_writer import LancePartitionedStreamWriter
from pipelines.source.writer import LancePartitionedWriter, root_in_schema, with_root
from pipelines.spark_errors import hide_worker_traceback, quiet_query_context_logs

__all__ = [
    "READ_OPTIONS",
    "LancePartitionedDataSource",
    "PerScanPushdownDataSource",
    "pushdown_is_per_scan",
    "register_data_source",
]

log = logging.getLogger("lance_partitioned")
READ_OPTIONS = (
    "path",
    "versionAsOf",
    "timestampAsOf",
    "columns",
    "filter",
    "prune_filter",
    "timeZone",
    "sqlConf",
    "rows_per_split",
    "max_partitions",
    "with_row_address",
    "object_ids",
    "nearest",
)
_PROBED: dict[str, bool] = {}
LAST_SHARED_PLAN_VERSION = (4, 3, 0)


JVM_MARKER = "spark.lance_partitioned.format"
CONNECT_MARKER = "spark.lance_partitioned.connect"


def register_data_source(spark: SparkSession) -> None:
    """Make ``format("lance_partitioned")`` available in this session.

    With the project's jar on the classpath the format is its JVM provider (per-scan
    pushdown, a catalog, SQL DML; ``java/lance_partitioned``), whose Python engine Spark
    registers by itself (``pyspark_lance_partitioned``): nothing to register. Without the
    jar it is this Python source, registered once per session, classic or Spark Connect,
    bound to its master (:func:`pipelines.session_calls.register_bound`)."""
    jvm_layer(spark)


def jvm_layer(spark: SparkSession) -> bool:
    """Whether ``format("lance_partitioned")`` is the jar's JVM provider in this session; the
    first call finds out by registering the Python source (refused by Spark when a JVM
    source has the name), and remembers it in the session conf :data:`JVM_MARKER`."""
    quiet_query_context_logs()
    state = spark.conf.get(JVM_MARKER, None)
    if state is None:
        if not is_connect(spark):
            add_to_session(spark)  # a session started without the jar gets it (and its log filter) now
        per_scan = pushdown_is_per_scan(spark)
        try:
            register_bound(spark, PerScanPushdownDataSource if per_scan else LancePartitionedDataSource)
            state = "python"
        except PySparkException as exc:
            if "DATA_SOURCE_ALREADY_EXISTS" not in str(exc):
                raise
            state = "jvm"
        if state == "python" and per_scan:
            spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
        if state == "python":
            jar = jar_path()
            where = str(jar) if jar is not None else "the jar (python -m pipelines.jar)"
            log.warning(
                "lance_partitioned: this session has no JVM layer, so format('lance_partitioned') reads every "
                "partition table a .where or SQL WHERE could skip, reads every column for COUNT(*), and there is "
                "no SQL catalog or DML; start Spark with --jars %s (spark.jars=%s)",
                where,
                where,
            )
        if state == "jvm" and is_connect(spark):
            spark.conf.set(CONNECT_MARKER, "true")  # the JVM layer refuses relative roots for this client
        spark.conf.set(JVM_MARKER, state)
    return state == "jvm"


def relative_path_missing(path: str, connect: bool) -> str:
    """The line for a relative ``path`` with no namespace where the source resolved it (on a
    Spark Connect server: the server's working directory, not the client's)."""
    if not connect:
        return f"no namespace at {path!r} (relative to the working directory: {resolve_root(path)!r})"
    return (
        f"relative path {path!r} was resolved on the Spark server as {resolve_root(path)!r}, which holds no "
        "namespace; use an absolute path or URI (read_partitioned/write_partitioned resolve on the client)"
    )


# What Spark adds for a catalog table (CREATE TABLE ... USING lance_partitioned).
_CATALOG_KEYS = ("location", "provider", "owner", "external", "is_managed_location")


def lowered_options(options: Mapping[str, str]) -> dict[str, str]:
    """Options with lower-case keys; a catalog table's ``option.<k>`` as ``k``, its location as path."""
    out = {}
    for key, value in options.items():
        k = key.lower()
        out[k[len("option.") :] if k.startswith("option.") else k] = value
    if "path" not in out and out.get("location"):
        out["path"] = out["location"]
    path = out.get("path")
    if path and path.startswith("file:"):
        out["path"] = urllib.parse.urlparse(path).path
    return out


class LancePartitionedDataSource(DataSource):
    reader_class: type[LancePartitionedReader] = LancePartitionedReader
    # Set by register_data_source (pipelines.session_calls.session_bound).
    session_master: ClassVar[str | None] = None
    session_connect: ClassVar[bool] = False

    @classmethod
    def name(cls) -> str:
        return "lance_partitioned"

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.pinned_version: int | None = None

    def _namespace(self, schema: StructType | None = None) -> PartitionedNamespace:
        options = lowered_options(self.options)
        root = options.get("path") or (root_in_schema(schema) if schema is not None else None)
        if not root:
            raise SpecError("load(path) is required: the namespace root")
        check_source_root(root, self.session_master, self.session_connect)
        version = options.get("versionasof")
        when = options.get("timestampasof")
        if when is not None and version is not None:
            raise InvalidInput("give the option versionAsOf or timestampAsOf, not both")
        pinned: int | None = self.pinned_version
        if version is not None:
            try:
                pinned = int(version)
            except ValueError:
                raise InvalidInput(f"option versionAsOf must be a __manifest version number, got {version!r}") from None
        elif pinned is None and when is not None:
            opts = storage_options_from(options)
            pinned = version_at(root, when, time_zone=options.get("timezone"), storage_options=opts)
        try:
            return PartitionedNamespace.load(root, storage_options_from(options), manifest_version=pinned)
        except NamespaceNotFound as exc:
            if is_relative_path(root):
                raise NamespaceNotFound(relative_path_missing(root, self.session_connect)) from exc
            raise

    def schema(self) -> StructType:
        with one_line_errors():
            check_options(self.options, tuple(dict.fromkeys(READ_OPTIONS + STREAM_READ_OPTIONS)), "read")
            ns = self._namespace()
            self.pinned_version = ns.manifest_version  # pickled with this object: every scan reads it
            options = lowered_options(self.options)
            row_address = (options.get("with_row_address") or "false").lower() == "true"
            schema = read_schema(ns.namespace_schema, options.get("columns"), row_address=row_address)
            if "nearest" in options:
                from pipelines.source.nearest import nearest_schema

                schema = nearest_schema(schema)
            if "provider" in options:  # CREATE TABLE ... USING lance_partitioned: Spark stores this schema
                schema = with_root(schema, ns.root)
            return schema

    def reader(self, schema: StructType) -> DataSourceReader:
        with one_line_errors():
            check_options(self.options, READ_OPTIONS, "read")
            ns = self._namespace(schema)
            options = lowered_options(self.options)
            if "nearest" in options:
                from pipelines.source.nearest import NearestReader

                return NearestReader(ns, schema, options)
            return self.reader_class(ns, schema, options)

    def writer(self, schema: StructType, overwrite: bool) -> LancePartitionedWriter:
        options = lowered_options(self.options)
        path = options.get("path")
        with one_line_errors():
            if path:
                check_source_root(path, self.session_master, self.session_connect)
            return new_writer(dict(self.options), schema, overwrite, self.session_connect)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        try:
            check_options(self.options, STREAM_READ_OPTIONS, "streaming read")
            options = lowered_options(self.options)
            root = options.get("path") or root_in_schema(schema)
            if not root:
                raise SpecError("readStream...load(path) is required: the namespace root")
            check_source_root(root, self.session_master, self.session_connect)
            ns = PartitionedNamespace.load(root, storage_options_from(options))
            return LancePartitionedStreamReader(ns, schema, options)
        except PartitioningError as exc:
            return RefusedStreamReader(exc)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        with one_line_errors():
            path = lowered_options(self.options).get("path")
            if path:
                check_source_root(path, self.session_master, self.session_connect)
            return LancePartitionedStreamWriter(dict(self.options), schema, overwrite)


def new_writer(
    options: dict[str, str], schema: StructType, overwrite: bool, connect: bool = False
) -> LancePartitionedWriter:
    """The data source writer; a relative path with no namespace (and no ``partition_by``) says
    where it was looked for."""
    lowered = lowered_options(options)
    path = lowered.get("path")
    try:
        return LancePartitionedWriter(options, schema, overwrite)
    except SpecError as exc:
        if path and "partition_by" not in lowered and is_relative_path(path) and not _namespace_at(path, lowered):
            raise NamespaceNotFound(relative_path_missing(path, connect)) from exc
        raise


class PerScanPushdownDataSource(LancePartitionedDataSource):
    """The same source, also pruning with Spark's pushed filters (Spark keeps them per scan)."""

    reader_class = PerScanPushdownReader


def _namespace_at(path: str, options: Mapping[str, str]) -> bool:
    return ManifestStore(path, storage_options_from(options)).exists()


@contextmanager
def one_line_errors() -> Iterator[None]:
    """Our errors raised while Spark plans the source (a Python worker) are reported without
    the worker's traceback: Spark's prefix, then ``partitioning.errors.X: <line>``."""
    try:
        yield
    except PartitioningError:
        hide_worker_traceback()
        raise


def check_options(options: Mapping[str, str], allowed: tuple[str, ...], what: str) -> None:
    known = {a.lower() for a in (*allowed, *_CATALOG_KEYS)}
    unknown = sorted(k for k in lowered_options(options) if k not in known and not k.startswith(STORAGE_OPTION_PREFIX))
    if unknown:
        raise InvalidInput(
            f"unknown {what} option {unknown[0]!r} for format lance_partitioned; {what} options are: "
            + ", ".join(a for a in allowed if a != "path")
            + f", {STORAGE_OPTION_PREFIX}<key> (a Lance storage option)"
        )


# -- does this Spark keep pushed filters per scan? -----------------------------------------------


class _ProbeSource(DataSource):
    """Two rows (x = 0, 1); the reader accepts ``x = 1`` and applies it itself."""

    @classmethod
    def name(cls) -> str:
        return "lance_partitioned_pushdown_probe"

    def schema(self) -> str:
        return "x int"

    def reader(self, schema: StructType) -> DataSourceReader:
        return _ProbeReader()


class _ProbeReader(DataSourceReader):
    def __init__(self) -> None:
        self.only: int | None = None

    def pushFilters(self, filters: list[ds.Filter]) -> Iterator[ds.Filter]:
        for f in filters:
            if isinstance(f, ds.EqualTo) and f.attribute == ("x",):
                self.only = f.value
            else:
                yield f

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(0)]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        for x in (0, 1):
            if self.only is None or x == self.only:
                yield (x,)


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text)[:3])


def pushdown_is_per_scan(spark: SparkSession, *, probe: bool = False) -> bool:
    """Whether this Spark gives each scan its own pushdown result (probed once per version).

    Spark up to 4.3.0 shares the first scan's plan (checked in the 4.3.0 jar:
    ``PythonDataSourceV2.readInfo``), so those versions are not probed unless ``probe``.
    The probe is the reuse case itself: one DataFrame counted with a pushed filter, then
    without; a shared plan answers 1 the second time.
    """
    version = spark.version
    if not probe and _version(version) <= LAST_SHARED_PLAN_VERSION:
        return False
    if probe or version not in _PROBED:
        key = "spark.sql.python.filterPushdown.enabled"
        before = spark.conf.get(key, "false")
        spark.conf.set(key, "true")
        try:
            spark.dataSource.register(_ProbeSource)
            df = spark.read.format(_ProbeSource.name()).load()
            df.filter("x = 1").count()
            _PROBED[version] = df.count() == 2
        finally:
            spark.conf.set(key, before or "false")
        log.info("Spark %s keeps pushed filters per scan: %s", version, _PROBED[version])
    return _PROBED[version]
