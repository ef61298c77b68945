"""Root properties staged for a row commit: how a restore changes properties and rows atomically.

A Lance commit is one operation: table metadata (where the root properties live) and
rows cannot change in one commit. A restore needs both (the restored version's schema
and specs, and its rows), and a crash between two commits must not leave rows of one
state under the properties of another. So a restore *stages* the properties it needs
under a key of its own (``lance_partitioned.staged.<token>``), which changes nothing
for readers, and then commits its rows with ``lance_partitioned.applied = <token>`` in
the ``v<N>`` rows' metadata. From that commit on, the staged properties are the
namespace's (:func:`effective_properties`); a crash before it leaves a staged key nobody
applied, which every reader ignores. The next properties commit on an applied version
writes them as the plain properties and drops the staged key
(:meth:`partitioning.storage.manifest.ManifestStore.update_metadata`); a restore does that itself
right after its rows commit.

The schema's next field id never goes back: the effective schema takes the larger of
the staged and the plain one (a column added between staging and applying keeps its id
used).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

import lance

from partitioning.errors import CorruptNamespace
from partitioning.spec.schema import NamespaceSchema

__all__ = [
    "APPLIED_KEY",
    "STAGED_PREFIX",
    "applied_tokens",
    "effective_properties",
    "properties_of",
    "staged_key",
    "staged_tokens",
]

STAGED_PREFIX = "lance_partitioned.staged."
APPLIED_KEY = "lance_partitioned.applied"
_SCHEMA_KEY = "schema"  # partitioning.storage.manifest.SCHEMA_KEY (which imports this module)


def staged_key(token: str) -> str:
    return f"{STAGED_PREFIX}{token}"


def staged_tokens(raw: Mapping[str, str]) -> dict[str, str]:
    """token -> the staged properties' JSON text."""
    return {k[len(STAGED_PREFIX) :]: v for k, v in raw.items() if k.startswith(STAGED_PREFIX)}


def applied_tokens(ds: lance.LanceDataset) -> set[str]:
    """The tokens the ``v<N>`` rows of this ``__manifest`` version say were applied."""
    rows = ds.to_table(
        columns=["object_id", "metadata"], filter="object_type = 'namespace' AND NOT contains(object_id, '$')"
    )
    out = set()
    for text in rows.column("metadata").to_pylist():
        try:
            token = json.loads(text or "{}").get(APPLIED_KEY)
        except (ValueError, AttributeError):
            continue
        if isinstance(token, str):
            out.add(token)
    return out


def effective_properties(raw: Mapping[str, str], applied: Iterable[str]) -> dict[str, str]:
    """The namespace's root properties: the applied staged set if there is one, else the
    plain keys; staged keys are never part of them."""
    plain = {k: v for k, v in raw.items() if not k.startswith(STAGED_PREFIX)}
    staged = staged_tokens(raw)
    token = next((t for t in sorted(applied) if t in staged), None)
    if token is None:
        return plain
    try:
        props = json.loads(staged[token])
        if not isinstance(props, dict) or not all(isinstance(v, str) for v in props.values()):
            raise ValueError("not an object of strings")
    except ValueError as exc:
        raise CorruptNamespace(f"staged root properties {staged_key(token)} are corrupt: {exc}") from exc
    if _SCHEMA_KEY in props and _SCHEMA_KEY in plain:
        restored = NamespaceSchema.from_json(props[_SCHEMA_KEY])
        now = NamespaceSchema.from_json(plain[_SCHEMA_KEY])
        if now.next_field_id > restored.next_field_id:
            props[_SCHEMA_KEY] = NamespaceSchema(restored.arrow, now.next_field_id).to_json()
    return dict(props)


def properties_of(ds: lance.LanceDataset) -> dict[str, str]:
    """:func:`effective_properties` of one ``__manifest`` version (its rows are read only
    when it holds staged properties)."""
    raw = dict(ds.metadata or {})
    if not staged_tokens(raw):
        return raw
    return effective_properties(raw, applied_tokens(ds))
