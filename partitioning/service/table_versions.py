"""A partition table's committed versions, as Lance's managed versioning asks for them.

pylance's ``lance.dataset(namespace_client=..., table_id=...)`` ignores the ``version`` a
``describe_table`` answer names and opens the latest version on storage, a crashed
writer's included, unless the answer says ``managed_versioning``: then it asks the
namespace for the latest version (``list_table_versions``, limit 1, descending) and for
any other one (``describe_table_version``), and opens the manifest file named there. This
module names those files: a version's manifest under ``_versions/`` in Lance's V2 naming
(``u64::MAX - version``, 20 digits) or V1 (``<version>.manifest``, where that file exists),
as an object-store path (no scheme, no leading ``/``, as pylance's own directory
namespace gives it).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from lance_namespace import TableVersion

from partitioning.errors import InvalidInput

__all__ = ["field_of", "manifest_path", "table_version", "version_of"]

_U64_MAX = (1 << 64) - 1


def manifest_path(uri: str, version: int) -> str:
    """The object-store path of ``uri``'s manifest of ``version``."""
    local = "://" not in uri or uri.startswith("file://")
    base = (uri.removeprefix("file://") if local else urlsplit(uri).path).rstrip("/")
    v2 = f"{base}/_versions/{_U64_MAX - version:020d}.manifest"
    if local and not os.path.exists(v2):
        v1 = f"{base}/_versions/{version}.manifest"
        if os.path.exists(v1):
            return v1.lstrip("/")
    return v2.lstrip("/")


def table_version(uri: str, version: int) -> TableVersion:
    return TableVersion(version=version, manifest_path=manifest_path(uri, version))


def field_of(request: Any, name: str) -> Any:
    """A request field: Lance's Rust core passes requests as dicts, Python callers as models."""
    if isinstance(request, Mapping):
        return request.get(name)
    return getattr(request, name, None)


def version_of(value: Any, what: str = "version") -> int | None:
    """A requested table version: None (the committed one) or a whole number >= 0."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidInput(f"{what} must be a whole number >= 0, got {value!r}")
    return value
