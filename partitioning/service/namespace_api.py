"""``lance_namespace.LanceNamespace`` over a partitioned namespace: what any Lance client sees.

pylance's own ``DirectoryNamespace`` lists a root's directories, uncommitted ones included,
with no properties, and describes each table without a version, so a client reads its
latest version: rows a crashed or running write left there. This implementation answers
from ``__manifest`` instead (the latest version at each request, so a commit made since
is seen):

- namespaces and tables are those the version records, sorted by name and paged
  (``page_token`` is the last name of the page before);
- ``describe_namespace`` gives the runtime properties (SPEC-NOTES 17): the root's
  properties and ``manifest_version`` (the ``__manifest`` version the answer was read at),
  ``partition_spec`` on ``v<N>``, ``partition.<field_id>`` on a partition;
- a client made with the property ``manifest_version`` (or :meth:`~PartitionedLanceNamespace.at`)
  answers every request from that version: a consistent snapshot across requests;
- ``describe_table`` gives the table's location and ``version = read_version``, with
  ``read_branch`` / ``read_tag`` in its properties where recorded;
- every change is refused (:class:`partitioning.errors.Unsupported`) with the project call
  that makes it through ``__manifest``.

An id part that is empty, ``.``/``..`` or holds ``$`` or ``/`` names nothing: it is not found.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from lance_namespace import (
    DescribeNamespaceRequest,
    DescribeNamespaceResponse,
    DescribeTableRequest,
    DescribeTableResponse,
    DescribeTableVersionRequest,
    DescribeTableVersionResponse,
    LanceNamespace,
    ListNamespacesRequest,
    ListNamespacesResponse,
    ListTablesRequest,
    ListTablesResponse,
    ListTableVersionsRequest,
    ListTableVersionsResponse,
    NamespaceExistsRequest,
    NamespaceExistsResponse,
    TableExistsRequest,
    TableExistsResponse,
)

from partitioning.errors import InvalidInput, NamespaceNotFound, TableNotFound, TableVersionNotFound, Unsupported
from partitioning.namespace import PartitionedNamespace, PartitionTable
from partitioning.service.table_versions import field_of, table_version, version_of
from partitioning.storage.history import committed_table_versions
from partitioning.storage.locations import TABLE_NAME

__all__ = ["IMPL_NAME", "MANIFEST_VERSION", "PartitionedLanceNamespace", "parse_manifest_version"]

IMPL_NAME = "partitioned"
STORAGE_PREFIX = "storage."
MANIFEST_VERSION = "manifest_version"


def parse_manifest_version(text: object, what: str = MANIFEST_VERSION) -> int:
    """A pinned ``__manifest`` version given as text (a property, a header): ASCII digits, 1..10**19-1."""
    if isinstance(text, bool) or not isinstance(text, (str, int)):
        raise InvalidInput(f"{what} must be a positive whole number, got {text!r}")
    if isinstance(text, int):
        value = text
    elif not (text.isascii() and text.isdigit() and len(text) < 20):
        raise InvalidInput(f"{what} must be a positive whole number, got {text!r}")
    else:
        value = int(text)
    if not 1 <= value < 10**19:
        raise InvalidInput(f"{what} must be a positive whole number, got {text!r}")
    return value


def _checked(id_list: Sequence[str] | None, what: Callable[[str], Exception]) -> list[str]:
    ids = list(id_list or [])
    for part in ids:
        if not isinstance(part, str) or part in ("", ".", "..") or "$" in part or "/" in part:
            raise what(f"{'$'.join(map(str, ids))!r} is not an id of a partitioned namespace")
    return ids


def _page(names: list[str], token: str | None, limit: int | None) -> tuple[list[str], str | None]:
    if limit is not None and limit <= 0:
        raise InvalidInput(f"limit must be a positive number of entries, not {limit}")
    start = [n for n in names if token is None or n > token]
    page = start if limit is None else start[:limit]
    return page, (page[-1] if limit is not None and len(start) > limit else None)


def _uri(path: str) -> str:
    return path if "://" in path else f"file://{path}"


class PartitionedLanceNamespace(LanceNamespace):
    """A partitioned namespace at ``root``, read-only, for Lance namespace clients.

    ``properties``: ``storage.<key>`` options reach the root's store (as ``storage_options``);
    ``manifest_version`` pins the client to that ``__manifest`` version; any other key is refused."""

    def __init__(self, root: str | None = None, manifest_version: str | int | None = None, **properties: str) -> None:
        if not root:
            raise InvalidInput("the partitioned namespace client needs the property 'root'")
        unknown = sorted(k for k in properties if not k.startswith(STORAGE_PREFIX))
        if unknown:
            raise InvalidInput(
                f"unknown properties {unknown}: allowed are 'root', '{MANIFEST_VERSION}' and '{STORAGE_PREFIX}<key>'"
            )
        self.root = root
        self.storage_options = {k[len(STORAGE_PREFIX) :]: v for k, v in properties.items()}
        self.manifest_version = None if manifest_version is None else parse_manifest_version(manifest_version)

    def at(self, manifest_version: int) -> PartitionedLanceNamespace:
        """This client pinned to ``__manifest`` version ``manifest_version``: every answer
        comes from that version (one that vacuum removed is refused, naming the readable ones)."""
        storage = {STORAGE_PREFIX + k: v for k, v in self.storage_options.items()}
        return PartitionedLanceNamespace(self.root, manifest_version, **storage)

    def namespace_id(self) -> str:
        pin = "" if self.manifest_version is None else f", manifest_version: {self.manifest_version}"
        return f"PartitionedLanceNamespace {{ root: {self.root!r}{pin} }}"

    def _namespace(self) -> PartitionedNamespace:
        return PartitionedNamespace.load(
            self.root, self.storage_options or None, manifest_version=self.manifest_version
        )

    def list_namespaces(self, request: ListNamespacesRequest) -> ListNamespacesResponse:
        ids = _checked(request.id, NamespaceNotFound)
        names, _ = self._namespace().children(ids)
        page, token = _page(names, request.page_token, request.limit)
        return ListNamespacesResponse(namespaces=page, page_token=token)

    def describe_namespace(self, request: DescribeNamespaceRequest) -> DescribeNamespaceResponse:
        ids = _checked(request.id, NamespaceNotFound)
        ns = self._namespace()
        properties = ns.describe_namespace(ids)
        if not ids:
            properties = {**properties, MANIFEST_VERSION: str(ns.manifest_version)}
        return DescribeNamespaceResponse(properties=properties)

    def namespace_exists(self, request: NamespaceExistsRequest) -> NamespaceExistsResponse:
        self._namespace().describe_namespace(_checked(request.id, NamespaceNotFound))
        return NamespaceExistsResponse()

    def list_tables(self, request: ListTablesRequest) -> ListTablesResponse:
        ids = _checked(request.id, NamespaceNotFound)
        _, names = self._namespace().children(ids)
        page, token = _page(names, request.page_token, request.limit)
        return ListTablesResponse(tables=page, page_token=token)

    def _table(self, id_list: Sequence[str] | None) -> tuple[list[str], str, PartitionTable]:
        ids = _checked(id_list, TableNotFound)
        object_id = "$".join(ids)
        found = self._namespace().tables_by_id([object_id]) if len(ids) > 1 and ids[-1] == TABLE_NAME else {}
        table = found.get(object_id)
        if table is None or table.read_version is None:
            raise TableNotFound(f"table {object_id!r} not found in {self.root}")
        return ids, object_id, table

    def _committed(self, object_id: str, table: PartitionTable) -> list[int]:
        """The table's committed versions up to the one this client's ``__manifest`` version records."""
        found = committed_table_versions(self.root, object_id, storage_options=self.storage_options or None)
        assert table.read_version is not None
        return [v for v in found if v <= table.read_version] or [table.read_version]

    def _check_committed(self, object_id: str, table: PartitionTable, version: int, error: type[Exception]) -> None:
        if version == table.read_version:
            return
        committed = self._committed(object_id, table)
        if version not in committed:
            shown = ", ".join(str(v) for v in committed[-20:])
            more = f" (the last 20 of {len(committed)})" if len(committed) > 20 else ""
            raise error(
                f"table {object_id!r}: version {version} was never committed through __manifest; "
                f"committed versions are {shown}{more}"
            )

    def describe_table(self, request: DescribeTableRequest) -> DescribeTableResponse:
        ids, object_id, table = self._table(request.id)
        asked = version_of(request.version)
        version = table.read_version if asked is None else asked
        assert version is not None
        self._check_committed(object_id, table, version, InvalidInput)
        properties = {k: v for k, v in (("read_branch", table.read_branch), ("read_tag", table.read_tag)) if v}
        location = _uri(table.uri)
        return DescribeTableResponse(
            table=ids[-1],
            namespace=ids[:-1],
            version=version,
            location=location,
            table_uri=location,
            properties=properties,
            # Lance then opens the version list_table_versions names, not the latest on storage
            managed_versioning=True if not properties else None,
        )

    def list_table_versions(self, request: ListTableVersionsRequest) -> ListTableVersionsResponse:
        """The table's committed versions (ascending, or ``descending``), paged by ``limit`` and
        ``page_token`` (the last version of the page before); the first, descending, is the
        version this client's ``__manifest`` version records."""
        _, object_id, table = self._table(field_of(request, "id"))
        if field_of(request, "branch"):
            raise Unsupported(f"table {object_id!r}: partition tables are read on main; branch is not supported")
        limit, token = field_of(request, "limit"), field_of(request, "page_token")
        descending = bool(field_of(request, "descending"))
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0):
            raise InvalidInput(f"limit must be a positive number of entries, not {limit!r}")
        if limit == 1 and descending and token is None:
            versions = [int(table.read_version or 0)]
        else:
            versions = sorted(self._committed(object_id, table), reverse=descending)
        if token is not None:
            after = version_of(int(token) if str(token).isdigit() else token, "page_token")
            assert after is not None
            versions = [v for v in versions if (v < after if descending else v > after)]
        page = versions if limit is None else versions[:limit]
        more = limit is not None and len(versions) > limit
        return ListTableVersionsResponse(
            versions=[table_version(table.uri, v) for v in page], page_token=str(page[-1]) if more else None
        )

    def describe_table_version(self, request: DescribeTableVersionRequest) -> DescribeTableVersionResponse:
        """One committed version of the table (None: the one this client's ``__manifest``
        version records); any other is :class:`TableVersionNotFound`, naming the committed ones."""
        _, object_id, table = self._table(field_of(request, "id"))
        if field_of(request, "branch"):
            raise Unsupported(f"table {object_id!r}: partition tables are read on main; branch is not supported")
        asked = version_of(field_of(request, "version"))
        version = table.read_version if asked is None else asked
        assert version is not None
        self._check_committed(object_id, table, version, TableVersionNotFound)
        return DescribeTableVersionResponse(version=table_version(table.uri, version))

    def table_exists(self, request: TableExistsRequest) -> TableExistsResponse:
        self.describe_table(DescribeTableRequest(id=request.id, version=request.version))
        return TableExistsResponse()


# Each change a Lance client could ask for, and the project call that makes it through __manifest
# (or, for versions, the call that reads the namespace's own versions).
_REFUSED = {
    "create_namespace": "a write (write_partitioned, write_table): it creates the partition namespaces it needs",
    "drop_namespace": "drop_partitions",
    "create_table": "write_partitioned or write_table",
    "declare_table": "write_partitioned or write_table",
    "create_empty_table": "write_partitioned or write_table",
    "register_table": "write_partitioned or write_table",
    "deregister_table": "drop_partitions",
    "drop_table": "drop_partitions",
    "rename_table": "a new namespace written from this one",
    "restore_table": "restore (a whole namespace at a __manifest version)",
    "insert_into_table": "write_partitioned(mode='append')",
    "merge_insert_into_table": "merge_partitioned",
    "update_table": "update_rows",
    "delete_from_table": "delete_rows",
    "alter_table_add_columns": "PartitionedNamespace.add_columns",
    "alter_table_alter_columns": "PartitionedNamespace.rename_column or widen_column",
    "alter_table_drop_columns": "PartitionedNamespace.drop_column",
    "create_table_index": "create_vector_index or create_scalar_index",
    "create_table_scalar_index": "create_scalar_index",
    "drop_table_index": "a new index definition (create_vector_index, create_scalar_index)",
    "create_table_version": "a write: every commit goes through __manifest",
    "batch_create_table_versions": "a write: every commit goes through __manifest",
    "batch_commit_tables": "a write: every commit goes through __manifest",
    "batch_delete_table_versions": "vacuum",
}


def _refusal(name: str, api: str) -> Callable[..., Any]:
    def refuse(self: PartitionedLanceNamespace, *args: Any, **kwargs: Any) -> Any:
        if "version" in name and "create" not in name and "delete" not in name:
            raise Unsupported(
                f"{name}: the versions of the partitioned namespace at {self.root} are its __manifest "
                f"versions; use {api}"
            )
        raise Unsupported(
            f"{name} would change the partitioned namespace at {self.root} behind its __manifest; use {api}"
        )

    refuse.__name__ = refuse.__qualname__ = name
    refuse.__doc__ = f"Refused: use {api}."
    return refuse


for _name, _api in _REFUSED.items():
    setattr(PartitionedLanceNamespace, _name, _refusal(_name, _api))
