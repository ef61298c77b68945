"""The ``__manifest`` Lance table of a partitioned namespace (SPEC-NOTES 1, 5, 6).

This module is the only writer of ``__manifest``. It keeps pylance's
directory-namespace columns exactly as pylance creates them, adds the
``read_*`` and ``partition_field_*`` columns, stores the root properties in the
table metadata, and writes rows with ``merge_insert`` on ``object_id``.
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
from collections.abc import Mapping, Sequence

import lance
import pyarrow as pa
import pyarrow.fs as pafs
from lance.dataset import LanceOperation, Transaction

from partitioning.errors import (
    CorruptNamespace,
    InvalidInput,
    NamespaceAlreadyExists,
    NamespaceNotFound,
    PartitioningError,
    first_line,
    translate_lance_errors,
)
from partitioning.storage.paths import (
    contained,
    is_file,
    join_uri,
    local_dir,
    newest_listed_version,
    read_number,
    unborn_manifest,
    version_files,
)
from partitioning.storage.roots import (
    filesystem_of,
    normalize_storage_options,
    resolve_root,
    storage_error,
    storage_errors,
    store_unreachable,
)
from partitioning.storage.staged import applied_tokens, effective_properties, properties_of, staged_key, staged_tokens

__all__ = [
    "HINT_FILE",
    "INDEX_KEY_PREFIX",
    "MANIFEST_DIR",
    "ManifestStore",
    "manifest_schema",
    "note_latest",
    "partition_column",
]

_log = logging.getLogger(__name__)

MANIFEST_DIR = "__manifest"
# creating a namespace takes two commits: its rows (version 1), then its spec and schema
FIRST_READABLE_VERSION = 2
# Fragments and batches a ``__manifest`` read keeps in flight: a first read in a process takes
# about two thirds of the time with Lance's defaults (12 vs 16 ms at 20,000 tables, 47 vs 74 ms at 100,000).
READAHEAD = 8
# Lance's row address column (fragment id << 32 | offset), read with a version's rows.
ROW_ADDRESS = "_rowaddr"
SCHEMA_KEY = "schema"
SPEC_KEY_PREFIX = "partition_spec_v"
# root properties holding index definitions (partitioning.search.index_model)
INDEX_KEY_PREFIX = "lance_partitioned.index."
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


def partition_column(field_id: str) -> str:
    return f"{PARTITION_COLUMN_PREFIX}{field_id}"


def manifest_schema(partition_columns: Mapping[str, pa.DataType]) -> pa.Schema:
    """The full ``__manifest`` schema for the given partition field ids and result types."""
    extra = [pa.field(partition_column(fid), t, nullable=True) for fid, t in partition_columns.items()]
    return pa.schema([*BASE_FIELDS, *VERSION_FIELDS, *extra])


class ManifestStore:
    """Reads and writes one ``__manifest`` dataset."""

    def __init__(self, root: str, storage_options: Mapping[str, str] | None = None) -> None:
        self.root = resolve_root(root)
        self.uri = join_uri(self.root, MANIFEST_DIR)
        self.storage_options = normalize_storage_options(storage_options)

    # -- open / create -------------------------------------------------------------------
    def exists(self) -> bool:
        try:
            self.dataset()
        except NamespaceNotFound:
            return False
        return True

    def dataset(self, version: int | None = None) -> lance.LanceDataset:
        """``__manifest``, at ``version`` or the latest; a version it does not have is one
        line naming the versions it has (``InvalidInput``), a missing root NamespaceNotFound,
        an unreadable version CorruptNamespace naming it and an older one to read."""
        if version is not None and (isinstance(version, bool) or not isinstance(version, int) or version < 1):
            raise InvalidInput(f"__manifest version must be a positive integer, got {version!r}")
        with storage_errors(self.storage_options), translate_lance_errors(f"open {self.uri}"):
            if version is None:
                return self._latest()
            try:
                # opened directly, so an older version stays readable when the latest is damaged
                return lance.dataset(self.uri, version=version, storage_options=self.storage_options)
            except (ValueError, OSError) as exc:
                if "not found" not in str(exc).lower():
                    raise CorruptNamespace(
                        f"{self.root}: __manifest version {version} cannot be read ({first_line(exc)}); "
                        "read another version (manifest_version= / versionAsOf)"
                    ) from exc
                latest = self._latest()
                versions = [v["version"] for v in latest.versions()] or [latest.version]
                vacuumed = f" (versions before {min(versions)} were vacuumed)" if min(versions) > 1 else ""
                first = max(min(versions), FIRST_READABLE_VERSION)
                raise InvalidInput(
                    f"{self.root} has no __manifest version {version}; the readable versions are "
                    f"{first}..{max(versions)}{vacuumed}"
                ) from exc

    def _latest(self) -> lance.LanceDataset:
        try:
            known = latest_known(self.uri, self.storage_options)  # no listing of every version
            ds = lance.dataset(self.uri, version=known, storage_options=self.storage_options)
        except ValueError as exc:
            refused = storage_error(exc, self.storage_options)
            if refused is not None:
                raise refused from exc
            if "not found" in str(exc).lower():
                raise NamespaceNotFound(f"no namespace at {self.root}: {self.uri} does not exist") from exc
            if store_unreachable(exc):
                raise PartitioningError(
                    f"cannot read {self.uri}: the store did not answer ({first_line(exc)}); check the storage "
                    "options (endpoint, region, credentials)"
                ) from exc
            newest = newest_listed_version(self.uri, self.storage_options)
            which = f"version {newest}" if newest is not None else "its latest version"
            older = f"manifest_version={newest - 1}" if newest is not None and newest > 1 else "manifest_version=<N>"
            raise CorruptNamespace(
                f"{self.root}: __manifest {which} cannot be read ({first_line(exc)}); read an older version with "
                f"PartitionedNamespace.load(root, {older}) or the reader option versionAsOf, and restore from it"
            ) from exc
        if ds.version == 1 and not ds.metadata:
            raise NamespaceNotFound(
                f"no namespace at {self.root}: its creation has not finished (a writer is creating it, or "
                "died doing so; the next write that creates it starts over)"
            )
        remember(self.uri, ds.version)
        return ds

    def create(
        self, rows: pa.Table, metadata: Mapping[str, str], *, properties: Mapping[str, str] | None = None
    ) -> lance.LanceDataset:
        """Create ``__manifest`` with its first rows, then store the root properties; both
        commits carry the Lance transaction ``properties`` (what history shows)."""
        props = dict(properties or {})
        with storage_errors(self.storage_options), translate_lance_errors(f"create {self.uri}"):
            if unborn_manifest(self.uri, self.storage_options):  # a creator died between its two commits
                fs, path = filesystem_of(contained(self.root, self.uri), self.storage_options)
                fs.delete_dir(path)  # inside-root
            try:
                ds = lance.write_dataset(
                    rows,
                    self.uri,
                    schema=rows.schema,
                    mode="create",
                    storage_options=self.storage_options,
                    transaction_properties=props,
                )
            except OSError as exc:
                if "already exists" in str(exc).lower() or "exists" in str(exc).lower():
                    raise NamespaceAlreadyExists(f"a namespace already exists at {self.root}") from exc
                raise
        self.update_metadata(metadata, base=ds, transaction_properties=props)
        return self.dataset()

    # -- reads -----------------------------------------------------------------------------
    @staticmethod
    def metadata_of(ds: lance.LanceDataset) -> dict[str, str]:
        """The root properties of one version (staged ones a restore applied included:
        :mod:`partitioning.storage.staged`)."""
        return properties_of(ds)

    @staticmethod
    def rows_of(
        ds: lance.LanceDataset,
        columns: list[str] | None = None,
        filter: str | None = None,
        *,
        with_row_address: bool = False,
    ) -> pa.Table:
        with translate_lance_errors(f"read {ds.uri}"):
            return ds.to_table(
                columns=columns,
                filter=filter,
                with_row_address=with_row_address,
                fragment_readahead=READAHEAD,
                batch_readahead=READAHEAD,
            )

    # -- writes ----------------------------------------------------------------------------
    def add_partition_columns(self, columns: Mapping[str, pa.DataType]) -> None:
        """Add nullable ``partition_field_*`` columns (all NULL; no data is rewritten)."""
        if columns:
            with translate_lance_errors(f"add columns to {self.uri}"):
                self.dataset().add_columns([pa.field(partition_column(f), t) for f, t in columns.items()])

    def update_metadata(
        self,
        properties: Mapping[str, str | None],
        *,
        base: lance.LanceDataset | None = None,
        replace: bool = False,
        transaction_properties: Mapping[str, str] | None = None,
    ) -> int:
        """Set root properties (``__manifest`` table metadata) in one commit on ``base``
        (default: the latest version), keeping the others unless ``replace``; a None value
        removes its key. The commit carries ``transaction_properties`` (what history shows).
        A concurrent change of the same keys since ``base`` raises
        :class:`ConcurrentModification`. Returns the version.

        On a version whose rows applied a restore's staged properties
        (:mod:`partitioning.storage.staged`), those become the plain properties in this commit;
        staged properties nobody applied yet are kept."""
        read = base if base is not None else self.dataset()
        updates: dict[str, str | None] = dict(properties)
        raw = dict(read.metadata or {})
        staged = staged_tokens(raw)
        applied = applied_tokens(read) & set(staged) if staged else set()
        if applied:
            # a restore's staged properties are the namespace's: write them as the plain ones
            kept = {staged_key(t): v for t, v in staged.items() if t not in applied}
            base_props = {} if replace else effective_properties(raw, applied)
            merged = {**base_props, **updates, **kept}
            updates, replace = {k: v for k, v in merged.items() if v is not None}, True
        elif replace:
            updates = {**{staged_key(t): v for t, v in staged.items()}, **updates}
        update = LanceOperation.UpdateConfig(table_metadata_updates=LanceOperation.UpdateMap(updates, replace))
        txn = Transaction(read.version, update, transaction_properties=dict(transaction_properties or {}))
        with translate_lance_errors(f"update properties of {self.uri}"):
            committed = lance.LanceDataset.commit(
                self.uri, txn, read_version=read.version, storage_options=self.storage_options, max_retries=0
            )
        note_latest(self.uri, committed.version, self.storage_options)
        return int(committed.version)

    def merge_rows(
        self,
        ds: lance.LanceDataset,
        rows: pa.Table,
        *,
        delete_other_partitions: bool = False,
        delete_ids: Sequence[str] = (),
        delete_others: bool = False,
        transaction_properties: Mapping[str, str] | None = None,
    ) -> lance.LanceDataset:
        """Upsert rows by ``object_id`` in ONE commit based on ``ds``'s version, carrying
        ``transaction_properties``; returns the committed version, opened.

        Lance's own retries are off: a commit made since ``ds`` that touches the same rows
        (every commit rewrites the ``v<N>`` lock rows) raises :class:`ConcurrentModification`,
        and the caller rebases. With ``delete_other_partitions`` every partition namespace
        or table row absent from ``rows`` is deleted in the same commit; ``delete_ids``
        deletes exactly those rows; ``delete_others`` every row absent from ``rows``.
        """
        if sum((delete_other_partitions, bool(delete_ids), delete_others)) > 1:
            raise ValueError("delete_other_partitions, delete_ids and delete_others exclude each other")
        with translate_lance_errors(f"commit {self.uri}"):
            builder = ds.merge_insert("object_id").when_matched_update_all().when_not_matched_insert_all()
            if delete_other_partitions:
                builder = builder.when_not_matched_by_source_delete("object_id LIKE '%$%'")
            elif delete_ids:
                quoted = ", ".join("'" + i.replace("'", "''") + "'" for i in delete_ids)
                builder = builder.when_not_matched_by_source_delete(f"object_id IN ({quoted})")
            elif delete_others:
                builder = builder.when_not_matched_by_source_delete()
            txn, _ = builder.conflict_retries(0).execute_uncommitted(rows.select(ds.schema.names).cast(ds.schema))
            txn.transaction_properties = dict(transaction_properties or {})
            committed = lance.LanceDataset.commit(
                self.uri, txn, read_version=ds.version, storage_options=self.storage_options, max_retries=0
            )
        note_latest(self.uri, committed.version, self.storage_options)
        return committed


# -- the latest version without listing every version ---------------------------------------
# Lance finds a dataset's latest version by listing ``_versions``, one entry per version
# (about 1 ms per 1,000 on local disk), and a stream commits a version every micro-batch.
# On a local disk the open starts instead from a version that was the latest: the highest of
# the one this process saw last and the one in ``__manifest/HINT_FILE`` (like Delta's
# ``_last_checkpoint``), which every commit through this store notes. It checks that
# version's file is there and steps forward one stat at a time while the next exists. Every
# commit adds the next number, so this is the latest, as a listing gives it, as long as no
# version above the start was removed: vacuum, which may remove versions above a kept one
# (a live write's base), first notes the latest, which every start is at least. (Lance
# commits on a base whose successors were removed without a conflict: a start below such a
# gap would lose writes.) When the start's file is gone, more than _MAX_STEPS versions are
# new, or on an object store (a LIST answers 1,000 versions at once), Lance lists.

HINT_FILE = "_latest_version_hint"
_SEEN: dict[str, int] = {}
_LOCK = threading.Lock()
_MAX_STEPS = 64  # past this many new versions, a listing is cheaper than stepping


def remember(uri: str, version: int) -> None:
    """Record that ``uri`` has ``version`` (the highest one seen is kept)."""
    with _LOCK:
        if version > _SEEN.get(uri, 0):
            _SEEN[uri] = version


def note_latest(uri: str, version: int, storage_options: Mapping[str, str] | None) -> None:
    """``version`` of ``uri`` is the latest (just committed, or opened by vacuum): remember
    it, and write it to the hint file unless that holds a higher one (best effort)."""
    remember(uri, version)
    try:
        base = local_dir(uri, storage_options)
        if base is not None and (read_number(f"{base}/{HINT_FILE}") or 0) < version:
            fd, tmp = tempfile.mkstemp(prefix=HINT_FILE + ".", dir=base)
            with os.fdopen(fd, "w") as out:
                out.write(str(version))
            os.replace(tmp, f"{base}/{HINT_FILE}")
    except (OSError, ValueError) as exc:
        _log.debug("no version hint for %s: %s", uri, exc)


def latest_known(uri: str, storage_options: Mapping[str, str] | None) -> int | None:
    """The latest version of ``uri``, stepped to from the one remembered or hinted; None
    when neither is known, the start's file is gone, or ``uri`` is not local (then list)."""
    try:
        fs, base = filesystem_of(uri, storage_options)
        if not isinstance(fs, pafs.LocalFileSystem):
            return None
        base = base.rstrip("/")
        start = max(_SEEN.get(uri, 0), read_number(f"{base}/{HINT_FILE}") or 0)
        if not start:
            return None
        kind = next((i for i, name in enumerate(version_files(base, start)) if is_file(fs, name)), None)
        if kind is None:
            return None
        version = start
        for _ in range(_MAX_STEPS):
            if not is_file(fs, version_files(base, version + 1)[kind]):
                return version
            version += 1
    except (OSError, ValueError):
        return None
    return None
