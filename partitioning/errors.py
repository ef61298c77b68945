"""One error root for the project, mapped onto ``lance_namespace`` error classes.

Every error a user can trigger is a :class:`PartitioningError`. Each subclass also
inherits the matching ``lance_namespace`` error so that callers handling namespace
errors by class or by ``code`` (seed 004) see the codes they expect. Errors caused
by bad input additionally subclass :class:`ValueError`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

from lance_namespace.errors import (
    ConcurrentModificationError,
    InvalidInputError,
    InvalidTableStateError,
    LanceNamespaceError,
    NamespaceAlreadyExistsError,
    NamespaceNotFoundError,
    TableNotFoundError,
    TableVersionNotFoundError,
    UnsupportedOperationError,
)


class PartitioningError(LanceNamespaceError):
    """Root of every error raised by this project."""


class InvalidInput(PartitioningError, InvalidInputError, ValueError):
    """Bad input from the caller (code 13)."""


class SpecError(InvalidInput):
    """A partition spec or partition field is invalid."""


class SchemaError(InvalidInput):
    """A schema, column or type is invalid or incompatible."""


class NamespaceNotFound(PartitioningError, NamespaceNotFoundError):
    """The root or a child namespace does not exist (code 1)."""


class NamespaceAlreadyExists(PartitioningError, NamespaceAlreadyExistsError):
    """A partitioned namespace already exists at the root (code 2)."""


class TableNotFound(PartitioningError, TableNotFoundError):
    """A partition table does not exist (code 4)."""


class TableVersionNotFound(PartitioningError, TableVersionNotFoundError):
    """A version of a partition table no ``__manifest`` version recorded (code 11)."""


class ConcurrentModification(PartitioningError, ConcurrentModificationError):
    """A ``__manifest`` commit lost to concurrent writers too many times (code 14)."""


class CorruptNamespace(PartitioningError, InvalidTableStateError):
    """The stored namespace metadata cannot be parsed (code 19)."""


class Unsupported(PartitioningError, UnsupportedOperationError):
    """An operation a partitioned namespace refuses, such as a namespace client's direct
    table change that would bypass ``__manifest`` (code 0)."""


_RUST_LOCATION = re.compile(r",?\s*/\S+\.rs:\d+:\d+")


def first_line(exc: BaseException, limit: int = 400) -> str:
    """The first line of an error's text, without Rust source locations, at most ``limit`` characters."""
    text = _RUST_LOCATION.sub("", str(exc)).strip()
    line = text.splitlines()[0].strip() if text else type(exc).__name__
    return line if len(line) <= limit else line[: limit - 3] + "..."


@contextmanager
def translate_lance_errors(action: str, *, missing: type[PartitioningError] | None = None) -> Iterator[None]:
    """Turn errors escaping pylance/pyarrow into one-line :class:`PartitioningError` s.

    This is the single place where errors from the storage layer are translated.
    ``action`` says what was being done, e.g. ``"open __manifest at /data/ns"``. With
    ``missing`` a file that is not found (inside a dataset that exists) raises that class.
    """
    try:
        yield
    except PartitioningError:
        raise
    except FileNotFoundError as exc:
        raise (missing or NamespaceNotFound)(f"{action}: not found ({first_line(exc)})") from exc
    except (OSError, RuntimeError, ValueError) as exc:
        line = first_line(exc)
        if "not found" in line.lower() or "does not exist" in line.lower():
            if missing is not None:
                raise missing(
                    f"{action}: a file of a committed version is missing ({line}); "
                    "read an older __manifest version (versionAsOf) or restore the file"
                ) from exc
            raise NamespaceNotFound(f"{action}: not found ({line})") from exc
        if "conflict" in line.lower() or "concurrent" in line.lower():
            raise ConcurrentModification(f"{action}: {line}") from exc
        raise PartitioningError(f"{action}: {line}") from exc
