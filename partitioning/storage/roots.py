"""Where a namespace lives: one meaning of a root, and the storage options that reach it.

A root is resolved once, on the driver, before anything is planned
(:func:`resolve_root`): a local path becomes absolute, so every URI a task receives
names the same place on every machine; a URI (``s3://``, ``gs://``, ``az://``,
``file://``) is kept as given.

Storage options are Lance's (``aws_endpoint``, ``aws_region``, ``aws_access_key_id``,
``aws_secret_access_key``, ``allow_http``, ...). They go unchanged to every Lance call,
and :func:`filesystem_of` builds the Arrow filesystem that lists and deletes files
(write leases, orphans, vacuum) from the same options, so both see the same store.
Keys Lance does not know are passed on (Lance 14 ignores them); a value Lance cannot
use is one :class:`InvalidInput` line naming the key (:func:`storage_errors`).
"""

from __future__ import annotations

import functools
import os
import re
import urllib.parse
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import pyarrow.fs as pafs

from partitioning.errors import InvalidInput, PartitioningError, first_line

__all__ = [
    "STORAGE_OPTION_PREFIX",
    "StorageOptions",
    "arrow_filesystem_kwargs",
    "filesystem_of",
    "is_uri",
    "normalize_storage_options",
    "parse_storage_option_args",
    "resolve_root",
    "storage_error",
    "storage_errors",
    "storage_option_pairs",
    "storage_options_from",
    "store_unreachable",
]

StorageOptions = dict[str, str]
_URI_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_TRUE = ("true", "1", "yes", "on")

# Lance's (object_store's) option names, lower case, as aliases of one setting.
_S3 = {
    "access_key": ("aws_access_key_id", "access_key_id"),
    "secret_key": ("aws_secret_access_key", "secret_access_key"),
    "session_token": ("aws_session_token", "session_token", "aws_token", "token"),
    "region": ("aws_region", "region", "aws_default_region", "default_region"),
    "endpoint": ("aws_endpoint", "aws_endpoint_url", "endpoint", "endpoint_url"),
    "virtual_hosted": ("aws_virtual_hosted_style_request", "virtual_hosted_style_request"),
    "skip_signature": ("aws_skip_signature", "skip_signature"),
}
_AZURE = {
    "account_name": ("azure_storage_account_name", "account_name"),
    "account_key": (
        "azure_storage_account_key",
        "azure_storage_access_key",
        "azure_storage_master_key",
        "account_key",
        "access_key",
        "master_key",
    ),
    "sas_token": ("azure_storage_sas_key", "azure_storage_sas_token", "sas_key", "sas_token"),
    "client_id": ("azure_storage_client_id", "client_id", "azure_client_id"),
    "client_secret": ("azure_storage_client_secret", "client_secret", "azure_client_secret"),
    "tenant_id": ("azure_storage_tenant_id", "azure_tenant_id", "tenant_id", "azure_storage_authority_id"),
    "endpoint": ("azure_storage_endpoint", "endpoint", "azure_endpoint"),
}
_GCS = {"skip_signature": ("google_skip_signature", "skip_signature")}
_ALLOW_HTTP = ("allow_http", "aws_allow_http", "azure_allow_http", "google_allow_http")


def is_uri(root: str) -> bool:
    """Whether ``root`` is a URI (``scheme://...``) rather than a local path."""
    return _URI_RE.match(root) is not None


def resolve_root(root: str) -> str:
    """The one meaning of ``root``: a URI unchanged, a local path made absolute (on this machine).

    ``file:/abs`` (how Spark's catalog writes a location) is the local path ``/abs``.
    An empty or non-string root is one :class:`InvalidInput` line.
    """
    if not isinstance(root, str) or not root.strip():
        raise InvalidInput(f"a namespace root must be a non-empty path or URI, got {root!r}")
    if is_uri(root):
        return root
    if root.startswith("file:"):
        root = urllib.parse.unquote(urllib.parse.urlsplit(root).path)
    return os.path.abspath(os.path.expanduser(root))


def _text(key: str, value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    raise InvalidInput(f"storage option {key!r} must be a string, number or boolean, got {type(value).__name__}")


def normalize_storage_options(options: Mapping[str, Any] | None) -> StorageOptions | None:
    """Lance storage options as ``{str: str}`` (None when there are none).

    Keys are kept as given (Lance reads them case-insensitively); booleans become
    ``"true"``/``"false"``. An endpoint must be an ``http(s)://host`` URL: Lance stops the
    process on anything else, so it is refused here with one line naming the key.
    """
    if not options:
        return None
    if not isinstance(options, Mapping):
        raise InvalidInput(f"storage_options must be a mapping of option names to values, got {type(options).__name__}")
    out: StorageOptions = {}
    for key, value in options.items():
        if not isinstance(key, str) or not key.strip():
            raise InvalidInput(f"storage option names must be non-empty strings, got {key!r}")
        text = _text(key, value)
        if key.lower().endswith(("endpoint", "endpoint_url")):
            parts = urllib.parse.urlsplit(text)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                raise InvalidInput(
                    f"storage option {key!r} must be an http:// or https:// URL such as "
                    f"'http://127.0.0.1:9000', got {text!r}"
                )
        out[key] = text
    return out


STORAGE_OPTION_PREFIX = "storage."


def storage_options_from(options: Mapping[str, str]) -> StorageOptions | None:
    """The storage options among a data source's options: ``storage.<key>`` gives ``<key>``."""
    found = {
        key[len(STORAGE_OPTION_PREFIX) :]: value
        for key, value in options.items()
        if key.lower().startswith(STORAGE_OPTION_PREFIX)
    }
    if any(not key for key in found):
        raise InvalidInput(f"option {STORAGE_OPTION_PREFIX!r} needs a storage option name after the dot")
    return normalize_storage_options(found)


def storage_option_pairs(storage_options: Mapping[str, Any] | None) -> dict[str, str]:
    """``storage_options`` as data source options (``storage.<key>``), for ``.options(**...)``."""
    return {f"{STORAGE_OPTION_PREFIX}{k}": v for k, v in (normalize_storage_options(storage_options) or {}).items()}


def parse_storage_option_args(values: Sequence[str] | None) -> StorageOptions | None:
    """A job's repeated ``--storage-option KEY=VALUE`` arguments as storage options (the last
    of a repeated key wins); a value without ``=`` is one line naming it."""
    pairs: dict[str, str] = {}
    for text in values or ():
        key, sep, value = text.partition("=")
        if not sep or not key.strip():
            raise InvalidInput(f"--storage-option {text!r} must be KEY=VALUE, e.g. aws_region=eu-west-1")
        pairs[key.strip()] = value
    return normalize_storage_options(pairs)


def _pick(options: Mapping[str, str], aliases: Mapping[str, tuple[str, ...]]) -> dict[str, str]:
    lowered = {k.lower(): v for k, v in options.items()}
    out = {}
    for setting, names in aliases.items():
        for name in names:
            if name in lowered:
                out[setting] = lowered[name]
                break
    return out


def _allow_http(options: Mapping[str, str]) -> bool:
    lowered = {k.lower(): v for k, v in options.items()}
    return any(lowered.get(name, "").strip().lower() in _TRUE for name in _ALLOW_HTTP)


def _endpoint(url: str, allow_http: bool) -> tuple[str, str]:
    """``(scheme, host[:port])`` of an endpoint URL (a bare host uses https unless http is allowed)."""
    if "://" not in url:
        return ("http" if allow_http else "https"), url.split("/", 1)[0]
    parts = urllib.parse.urlsplit(url)
    return parts.scheme, parts.netloc


def arrow_filesystem_kwargs(scheme: str, options: Mapping[str, str]) -> dict[str, Any]:
    """The Arrow filesystem arguments equivalent to Lance storage ``options`` for ``scheme``
    (``s3``, ``gs``/``gcs``, ``az``/``abfs``/``abfss``); settings Arrow has no argument for are left out."""
    scheme = scheme.lower()
    if scheme in ("s3", "s3a"):
        found = _pick(options, _S3)
        kwargs: dict[str, Any] = {}
        for setting in ("access_key", "secret_key", "session_token", "region"):
            if setting in found:
                kwargs[setting] = found[setting]
        if "endpoint" in found:
            kwargs["scheme"], kwargs["endpoint_override"] = _endpoint(found["endpoint"], _allow_http(options))
        if found.get("virtual_hosted", "").lower() in _TRUE:
            kwargs["force_virtual_addressing"] = True
        if found.get("skip_signature", "").lower() in _TRUE:
            kwargs["anonymous"] = True
        return kwargs
    if scheme in ("gs", "gcs"):
        found = _pick(options, _GCS)
        return {"anonymous": True} if found.get("skip_signature", "").lower() in _TRUE else {}
    if scheme in ("az", "azure", "abfs", "abfss"):
        found = _pick(options, _AZURE)
        kwargs = {
            k: found[k]
            for k in ("account_name", "account_key", "sas_token", "client_id", "client_secret", "tenant_id")
            if k in found
        }
        if "endpoint" in found:
            kwargs["blob_storage_scheme"], kwargs["blob_storage_authority"] = _endpoint(
                found["endpoint"], _allow_http(options)
            )
        return kwargs
    return {}


@functools.lru_cache(maxsize=64)
def _store(scheme: str, options: tuple[tuple[str, str], ...]) -> pafs.FileSystem:
    kwargs = arrow_filesystem_kwargs(scheme, dict(options))
    if scheme in ("s3", "s3a"):
        return pafs.S3FileSystem(**kwargs)
    if scheme in ("gs", "gcs"):
        return pafs.GcsFileSystem(**kwargs)
    if "account_name" not in kwargs:
        raise InvalidInput(
            f"an {scheme}:// root with storage options needs the account name "
            "(storage option 'azure_storage_account_name' or 'account_name')"
        )
    return pafs.AzureFileSystem(**kwargs)


_BUILT_FROM_OPTIONS = ("s3", "s3a", "gs", "gcs", "az", "azure", "abfs", "abfss")


def filesystem_of(uri: str, storage_options: Mapping[str, str] | None = None) -> tuple[pafs.FileSystem, str]:
    """The Arrow filesystem and path of ``uri``, reaching the store the storage options describe.

    A plain path (relative ones too) is local. An ``s3://``, ``gs://`` or ``az://`` URI
    with storage options gets a filesystem built from them (endpoint, region,
    credentials; see :func:`arrow_filesystem_kwargs`); any other URI, and one without
    options, is Arrow's own reading of the URI and the environment.
    """
    if not is_uri(uri):
        return pafs.LocalFileSystem(), os.path.abspath(uri)
    scheme, rest = uri.split("://", 1)
    scheme = scheme.lower()
    if storage_options and scheme in _BUILT_FROM_OPTIONS and "@" not in rest.split("/", 1)[0]:
        fs = _store(scheme, tuple(sorted(storage_options.items())))
        return fs, rest.rstrip("/")
    fs, path = pafs.FileSystem.from_uri(uri)
    return fs, path


_CONFIG_RE = re.compile(r"config(uration)? error|failed to parse|invalid (config|configuration|value)", re.IGNORECASE)
_QUOTED_RE = re.compile(r"\"([^\"]*)\"|'([^']*)'")


def storage_error(exc: BaseException, options: Mapping[str, str] | None) -> InvalidInput | None:
    """One :class:`InvalidInput` line naming the storage option Lance refused in ``exc``, if it is such an error."""
    line = first_line(exc)
    if not options or isinstance(exc, InvalidInput) or _CONFIG_RE.search(line) is None:
        return None
    detail = re.sub(r"^.*?(Generic )?Config(uration)? error:\s*", "", line, flags=re.IGNORECASE)
    quoted = {a or b for a, b in _QUOTED_RE.findall(line)}
    keys = sorted(k for k, v in options.items() if v in quoted or k in quoted or k.lower() in line.lower())
    if keys:
        return InvalidInput(f"storage option {keys[0]!r} was refused by Lance: {detail}")
    return InvalidInput(
        f"storage options were refused by Lance ({detail}); the options given are: {', '.join(sorted(options))}"
    )


_STORE_ERROR_RE = re.compile(
    r"Generic \w+ error|error sending request|HTTP error|dns error|connection refused|timed out", re.IGNORECASE
)


def store_unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` is the object store failing to answer (network, endpoint, credentials),
    not something wrong with what is stored."""
    return _STORE_ERROR_RE.search(first_line(exc)) is not None


@contextmanager
def storage_errors(options: Mapping[str, str] | None) -> Iterator[None]:
    """Lance refusing a storage option, raised as one line naming the option (:func:`storage_error`)."""
    try:
        yield
    except (PartitioningError, OSError, RuntimeError, ValueError) as exc:
        refused = storage_error(exc, options)
        if refused is None:
            raise
        raise refused from exc
