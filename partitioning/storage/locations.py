"""Where partition tables and namespaces live: object ids, directory names, :class:`LocationPlanner`.

An object id is ``v<N>$<name>$...$dataset`` (one ``<name>`` per partition field of spec
version N); its directory is :func:`table_directory` of it. Names of new namespaces are
derived from a per-write seed, so all tasks of one write agree on them without asking
the driver.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import string
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from partitioning.errors import InvalidInput

__all__ = [
    "BOUNDED_TABLE_DIR_RE",
    "MAX_NAME_BYTES",
    "MODEL_DIR",
    "TABLE_DIR_RE",
    "TABLE_NAME",
    "LocationPlanner",
    "PartitionKey",
    "keyed_hex",
    "keyed_namespace_name",
    "object_id_from_location",
    "seed_named",
    "spec_id_of",
    "table_directory",
]

_NAME_ALPHABET = string.ascii_lowercase + string.digits
PartitionKey = tuple[Any, ...]
TABLE_NAME = "dataset"
MODEL_DIR = "_index_models"  # shared vector models (partitioning.search.index_model); vacuum keeps it
MAX_NAME_BYTES = 255
BOUNDED_TABLE_DIR_RE = re.compile(r"^[0-9a-f]{8}_v\d+_[a-z0-9]{16}$")
# any partition table directory name the spec's naming gives (bounded or readable)
TABLE_DIR_RE = re.compile(r"^[0-9a-f]{8}_v\d+((\$[^/]*)*\$dataset|_[a-z0-9]{16})$")


def keyed_hex(seed: bytes, object_id: str) -> str:
    """The 8 lowercase hex digits of a new table's directory, derived like :func:`keyed_namespace_name`."""
    return hmac.new(seed, object_id.encode(), hashlib.sha256).hexdigest()[:8]


def table_directory(seed: bytes, object_id: str) -> str:
    """The directory name of a new partition table.

    ``<8 hex>_<object_id>`` as pylance's DirectoryNamespace names tables, unless that
    would pass the file-name limit of common file systems (:data:`MAX_NAME_BYTES`; a spec
    of 14 or more fields does). Then it is the bounded ``<8 hex>_v<N>_<16 [a-z0-9]>``,
    which does not encode the object id: readers always use the manifest's
    ``location``, and commits carry the object id.
    """
    prefix = keyed_hex(seed, object_id)
    name = f"{prefix}_{object_id}"
    if len(name.encode()) <= MAX_NAME_BYTES:
        return name
    spec = object_id.split("$", 1)[0]
    return f"{prefix}_{spec}_{keyed_namespace_name(seed, object_id, ())}"


def keyed_namespace_name(seed: bytes, parent: str, prefix: PartitionKey) -> str:
    """A 16-character ``[a-z0-9]`` name, pseudo-random under a CSPRNG ``seed``.

    Every task of one write derives the same name for the same new namespace, so
    executors can write new partitions without asking the driver, while names of
    different writes stay unpredictable and unrelated.
    """
    digest = hmac.new(seed, f"{parent}\x00{prefix!r}".encode(), hashlib.sha256).digest()
    n = int.from_bytes(digest, "big")
    chars = []
    for _ in range(16):
        n, r = divmod(n, 36)
        chars.append(_NAME_ALPHABET[r])
    return "".join(chars)


@dataclass(frozen=True)
class LocationPlanner:
    """Where each partition of one spec lives; picklable, so executors can use it.

    Existing partitions keep their object id and location. A new one reuses existing
    ancestor namespaces and names the missing levels with :func:`keyed_namespace_name`,
    so all tasks of one write agree on the names of the namespaces they create. Its
    directory is :func:`table_directory` of its object id.
    """

    spec_id: int
    field_ids: tuple[str, ...]
    existing: Mapping[PartitionKey, tuple[str, str]]
    namespaces: Mapping[tuple[str, PartitionKey], str]
    seed: bytes

    def place(self, key: PartitionKey) -> tuple[str, str]:
        """``(object_id, location)`` of the partition with ``key``."""
        found = self.existing.get(key)
        if found is not None:
            return found
        names: list[str] = []
        for level in range(1, len(self.field_ids) + 1):
            prefix = key[:level]
            parent = "$".join([f"v{self.spec_id}", *names])
            name = self.namespaces.get((parent, prefix))
            names.append(name if name is not None else keyed_namespace_name(self.seed, parent, prefix))
        object_id = "$".join([f"v{self.spec_id}", *names, TABLE_NAME])
        return object_id, table_directory(self.seed, object_id)

    def location(self, key: PartitionKey) -> str:
        return self.place(key)[1]


def seed_named(seed: bytes, key: PartitionKey, object_id: str, location: str) -> tuple[list[str], bool]:
    """What of a new partition's path :class:`LocationPlanner` named under ``seed`` for ``key``.

    Returns the ids (namespaces, then the table) from the first level whose name is
    :func:`keyed_namespace_name` of ``seed`` down to ``object_id``, and whether ``location``
    is :func:`table_directory` of that id. Under a secret seed drawn for one write, those
    names hold about 83 bits no other writer can produce (the spec's random names), so no
    row of any manifest version can hold them but this write's own commit. A name that only
    looks new (an existing namespace's, another client's) does not match and is not returned.
    """
    parts = object_id.split("$")
    for level in range(1, len(parts) - 1):
        if parts[level] == keyed_namespace_name(seed, "$".join(parts[:level]), tuple(key[:level])):
            named = ["$".join(parts[: depth + 1]) for depth in range(level, len(parts) - 1)]
            return [*named, object_id], location == table_directory(seed, object_id)
    return [], False


def spec_id_of(object_id: str) -> int:
    """The spec version N of an object id ``v<N>$...``; -1 if it has none."""
    head = object_id.split("$", 1)[0]
    return int(head[1:]) if head.startswith("v") and head[1:].isdigit() else -1


def object_id_from_location(location: str) -> str:
    """The object id a ``<8 hex>_<object_id>`` table directory encodes."""
    name = location.rstrip("/").rsplit("/", 1)[-1]
    if BOUNDED_TABLE_DIR_RE.match(name):
        raise InvalidInput(
            f"table location {location!r} is a bounded name that does not encode its object id; "
            "pass TableCommit(object_id=...)"
        )
    prefix, sep, object_id = name.partition("_")
    if not sep or len(prefix) != 8:
        raise InvalidInput(f"table location {location!r} is not of the form <8 hex>_<object_id>")
    return object_id
