"""The ``__manifest`` Lance table of a partitioned namespace (SPEC-NOTES 1, 5, 6).

This module is the only writer of ``__manifest``. It keeps pylance's
directory-namespace columns exactly as pylance creates them, adds the
``read_*`` and ``partition_field_*`` columns, stores the root properties in the
table metadata, and writes rows with ``merge_insert`` on ``object_id``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import lance
import pyarrow as pa
import pyarrow.fs as pafs

from partitioning.errors import InvalidInput, NamespaceAlreadyExists, NamespaceNotFound, translate_lance_errors

MANIFEST_DIR = "__manifest"
SCHEMA_KEY = "schema"
SPEC_KEY_PREFIX = "partition_spec_v"
PARTITION_COLUMN_PREFIX = "partition_field_"
PK_METADATA = {"lance-schema:unenforced-primary-key:position": "0"}

BASE_FIELDS = (
    pa.field("object_id", pa.string(), nullable=False, metadata=PK_METADATA),
    pa.field("object_type", pa.string(), nullable=False),
    pa.field("location", pa.string()),
    pa.field("metadata", pa.string()),
    pa.field("base_objects", pa.list_(pa.field("object_id", pa.string()))),
)
VERSION_FIELDS = (
    pa.field("read_version", pa.uint64()),
    pa.field("read_branch", pa.string()),
    pa.field("read_tag", pa.string()),
)


def join_uri(root: str, name: str) -> str:
    """``root/name`` for local paths and object-store URIs alike."""
    return f"{root.rstrip('/')}/{name}"


def filesystem_of(uri: str) -> tuple[pafs.FileSystem, str]:
    """The Arrow filesystem and path of a URI; a plain path (relative ones too) is local."""
    if "://" not in uri:
        return pafs.LocalFileSystem(), os.path.abspath(uri)
    return pafs.FileSystem.from_uri(uri)


def partition_column(field_id: str) -> str:
    return f"{PARTITION_COLUMN_PREFIX}{field_id}"


def manifest_schema(partition_columns: Mapping[str, pa.DataType]) -> pa.Schema:
    """The full ``__manifest`` schema for the given partition field ids and result types."""
    extra = [pa.field(partition_column(fid), t, nullable=True) for fid, t in partition_columns.items()]
    return pa.schema([*BASE_FIELDS, *VERSION_FIELDS, *extra])


class ManifestStore:
    """Reads and writes one ``__manifest`` dataset."""

    def __init__(self, root: str, storage_options: Mapping[str, str] | None = None) -> None:
        self.root = root
        self.uri = join_uri(root, MANIFEST_DIR)
        self.storage_options = dict(storage_options) if storage_options else None

    # -- open / create -------------------------------------------------------------------
    def exists(self) -> bool:
        try:
            self.dataset()
        except NamespaceNotFound:
            return False
        return True

    def dataset(self, version: int | None = None) -> lance.LanceDataset:
        """``__manifest``, at ``version`` or the latest; a version it does not have is one
        line naming the versions it has (``InvalidInput``), a missing root NamespaceNotFound."""
        if version is not None and (isinstance(version, bool) or not isinstance(version, int) or version < 1):
            raise InvalidInput(f"__manifest version must be a positive integer, got {version!r}")
        with translate_lance_errors(f"open {self.uri}"):
            try:
                latest = lance.dataset(self.uri, storage_options=self.storage_options)
            except ValueError as exc:
                if "not found" in str(exc).lower():
                    raise NamespaceNotFound(f"no namespace at {self.root}: {self.uri} does not exist") from exc
                raise
            if version is None or version == latest.version:
                return latest
            try:
                return latest.checkout_version(version)
            except (ValueError, OSError) as exc:
                versions = [v["version"] for v in latest.versions()] or [latest.version]
                vacuumed = f" (versions before {min(versions)} were vacuumed)" if min(versions) > 1 else ""
                raise InvalidInput(
                    f"{self.root} has no __manifest version {version}; it has versions "
                    f"{min(versions)}..{max(versions)}{vacuumed}"
                ) from exc

    def create(self, rows: pa.Table, metadata: Mapping[str, str]) -> lance.LanceDataset:
        """Create ``__manifest`` with its first rows, then store the root properties."""
        with translate_lance_errors(f"create {self.uri}"):
            try:
                ds = lance.write_dataset(
                    rows, self.uri, schema=rows.schema, mode="create", storage_options=self.storage_options
                )
            except OSError as exc:
                if "already exists" in str(exc).lower() or "exists" in str(exc).lower():
                    raise NamespaceAlreadyExists(f"a namespace already exists at {self.root}") from exc
                raise
            ds.update_metadata(dict(metadata))
            return ds

    # -- reads -----------------------------------------------------------------------------
    @staticmethod
    def metadata_of(ds: lance.LanceDataset) -> dict[str, str]:
        return dict(ds.metadata or {})

    @staticmethod
    def rows_of(ds: lance.LanceDataset, columns: list[str] | None = None, filter: str | None = None) -> pa.Table:
        with translate_lance_errors(f"read {ds.uri}"):
            return ds.to_table(columns=columns, filter=filter)

    # -- writes ----------------------------------------------------------------------------
    def add_partition_columns(self, columns: Mapping[str, pa.DataType]) -> None:
        """Add nullable ``partition_field_*`` columns (all NULL; no data is rewritten)."""
        if columns:
            with translate_lance_errors(f"add columns to {self.uri}"):
                self.dataset().add_columns([pa.field(partition_column(f), t) for f, t in columns.items()])

    def update_metadata(self, properties: Mapping[str, str], *, base: lance.LanceDataset | None = None) -> None:
        """Set root properties (``__manifest`` table metadata), keeping the others.

        With ``base``, a concurrent change of the same keys since that version raises
        :class:`ConcurrentModification` instead of being overwritten.
        """
        with translate_lance_errors(f"update properties of {self.uri}"):
            (base if base is not None else self.dataset()).update_metadata(dict(properties))

    def merge_rows(
        self,
        ds: lance.LanceDataset,
        rows: pa.Table,
        *,
        delete_other_partitions: bool = False,
        delete_ids: Sequence[str] = (),
    ) -> None:
        """Upsert rows by ``object_id`` in ONE commit based on ``ds``'s version.

        Lance's own retries are off: a conflict with a commit made since ``ds`` was read
        raises :class:`ConcurrentModification`, and the caller rebases. With
        ``delete_other_partitions`` every partition namespace or table row absent from
        ``rows`` is deleted in the same commit; ``delete_ids`` deletes exactly those rows.
        """
        if delete_other_partitions and delete_ids:
            raise ValueError("delete_other_partitions and delete_ids exclude each other")
        with translate_lance_errors(f"commit {self.uri}"):
            builder = ds.merge_insert("object_id").when_matched_update_all().when_not_matched_insert_all()
            if delete_other_partitions:
                builder = builder.when_not_matched_by_source_delete("object_id LIKE '%$%'")
            elif delete_ids:
                quoted = ", ".join("'" + i.replace("'", "''") + "'" for i in delete_ids)
                builder = builder.when_not_matched_by_source_delete(f"object_id IN ({quoted})")
            builder.conflict_retries(0).execute(rows.select(ds.schema.names).cast(ds.schema))
