"""One ``__manifest`` version read into Python: :class:`NamespaceState`.

A state is immutable and shared. Its rows are decoded on first use, as Arrow columns for
scan planning and as :class:`~partitioning.state.partition_tables.PartitionTable` objects
for the rest; while a large version has not been read whole, its lookups decode only the
rows asked for. :mod:`partitioning.state.loading` reads and checks a version into one, and
:class:`ManifestHandle` is what the commit functions need of a namespace that holds one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from partitioning.errors import CorruptNamespace, InvalidInput
from partitioning.spec.partition_spec import PartitionSpec
from partitioning.spec.schema import NamespaceSchema
from partitioning.spec.values import canonical_float
from partitioning.state.lean_rows import LeanRows, plain_row
from partitioning.state.lookup import namespace_rows, rows_by_id, table_rows_for_keys
from partitioning.state.partition_tables import PartitionTable, TableCommit
from partitioning.state.rows import ReadRows
from partitioning.state.scan import table_rows_by_spec
from partitioning.stats.skipping import RowStats
from partitioning.storage.locations import PartitionKey, spec_id_of
from partitioning.storage.manifest import ROW_ADDRESS, ManifestStore, partition_column
from partitioning.storage.paths import table_uri

if TYPE_CHECKING:
    from partitioning.storage.guard import Guard
    from partitioning.storage.history import Operation

__all__ = ["ManifestHandle", "NamespaceState", "Once"]

T = TypeVar("T")


@dataclass(frozen=True)
class NamespaceState:
    """One ``__manifest`` version, decoded and checked. Immutable and shared:
    :func:`partitioning.state.loading.read_state` hands the same object to every load of that
    version (see :data:`partitioning.state.loading.STATE_CACHE_SIZE`).

    :attr:`manifest` is every row as Arrow columns, made by ``rows_source`` on first use
    (a version a commit derived from the one before is computed only if asked for).
    Derived views are built on first use and then kept with the state: :attr:`table_rows`
    (Arrow, what scan planning prunes) and the Python-level :attr:`rows`, :attr:`tables`
    and :attr:`by_key`, so planning a scan never pays for the Python objects."""

    root: str
    version: int
    metadata: dict[str, str]
    schema: NamespaceSchema
    specs: dict[int, PartitionSpec]
    rows_source: Callable[[], pa.Table] = field(repr=False, compare=False)
    read_source: Once[ReadRows] | None = field(default=None, repr=False, compare=False)
    # A large version read a few columns and rows at a time until something needs it whole.
    lean: LeanRows | None = field(default=None, repr=False, compare=False)

    @cached_property
    def manifest(self) -> pa.Table:
        return self.rows_source()

    @cached_property
    def read(self) -> ReadRows | None:
        """The whole version as Lance read it (rows and addresses); None for a derived state."""
        return self.read_source() if self.read_source is not None else None

    @property
    def read_done(self) -> ReadRows | None:
        """:attr:`read` if this state has read its version whole already (else None, without reading)."""
        return self.read if self.read_source is not None and self.read_source.done else None

    def _lean(self) -> LeanRows | None:
        """Where lookups go while the version has not been read whole (None: to :attr:`manifest`)."""
        return self.lean if self.read_done is None else None

    @property
    def row_addresses(self) -> pa.Array | None:
        """Each manifest row's Lance address, when this state was read (not derived)."""
        return self.read.addresses if self.read is not None else None

    def addresses_of(self, object_ids: Iterable[str]) -> dict[str, int] | None:
        """The Lance row address (``_rowaddr``) in version :attr:`version` of each row with
        one of these ids (ids not in the version are left out); None for a state that was
        derived from the one before rather than read (its addresses are not known), or when
        an id is on several rows."""
        lean = self._lean()
        if lean is not None:
            found = lean.rows_by_id(set(object_ids))
            if found is not None:
                if any(len(rows) > 1 for rows in found.values()):
                    return None  # an id on several rows (another client's doing): found by id, every copy
                return {i: rows[0][ROW_ADDRESS] for i, rows in found.items()}
        if self.row_addresses is None:
            return None
        wanted = pa.array(sorted(set(object_ids)), pa.string())
        mask = pc.is_in(self.manifest.column("object_id"), value_set=wanted)
        ids = self.manifest.column("object_id").filter(mask).to_pylist()
        if len(ids) != len(set(ids)):
            return None  # an id on several rows (another client's doing): found by id, every copy
        return dict(zip(ids, self.row_addresses.filter(mask).to_pylist(), strict=True))

    @property
    def current_spec(self) -> PartitionSpec:
        return self.specs[max(self.specs)]

    def spec(self, spec_id: int) -> PartitionSpec:
        """Spec version ``spec_id``; an unknown one is an input error naming the known ones."""
        try:
            return self.specs[spec_id]
        except KeyError:
            raise InvalidInput(
                f"no partition spec v{spec_id}; specs are {', '.join(f'v{i}' for i in sorted(self.specs))}"
            ) from None

    @cached_property
    def table_rows(self) -> Mapping[int, pa.Table]:
        """Per known spec version, its table rows as Arrow columns (``object_id``, ``location``, the
        ``read_*`` columns and that spec's ``partition_field_*`` columns), in manifest order."""
        return table_rows_by_spec(self.manifest, self.specs)

    @cached_property
    def row_stats(self) -> Mapping[int, RowStats]:
        """Per known spec version, the column statistics of its table rows, decoded on first use."""
        return {spec_id: RowStats(rows) for spec_id, rows in self.table_rows.items()}

    @cached_property
    def rows(self) -> list[dict[str, Any]]:
        return self.manifest.to_pylist()

    @cached_property
    def rows_by_id(self) -> dict[str, dict[str, Any]]:
        return {r["object_id"]: r for r in self.rows}

    @cached_property
    def tables(self) -> list[PartitionTable]:
        """Every table row of a known spec version; a row whose ``location`` is not one
        directory under the root, or is another row's, is refused (one line naming it)."""
        out = []
        owner: dict[str, str] = {}
        for row in self.rows:
            spec_id = spec_id_of(row["object_id"])
            if row["object_type"] != "table" or spec_id not in self.specs:
                continue
            other = owner.setdefault(row["location"], row["object_id"])
            if other != row["object_id"]:
                raise CorruptNamespace(
                    f"__manifest table rows {other!r} and {row['object_id']!r} both have location "
                    f"{row['location']!r}; remove one with PartitionedNamespace.remove_tables"
                )
            out.append(self._table(spec_id, row))
        return sorted(out, key=lambda p: p.object_id)

    @cached_property
    def by_key(self) -> dict[tuple[int, PartitionKey], PartitionTable]:
        return {(p.spec_id, p.key): p for p in self.tables}

    def _table(self, spec_id: int, row: Mapping[str, Any]) -> PartitionTable:
        return PartitionTable(
            object_id=row["object_id"],
            location=row["location"],
            uri=table_uri(self.root, row["object_id"], row["location"]),
            spec_id=spec_id,
            values={f.field_id: row.get(partition_column(f.field_id)) for f in self.specs[spec_id].fields},
            read_version=row.get("read_version"),
            read_branch=row.get("read_branch"),
            read_tag=row.get("read_tag"),
        )

    # -- lookups that decode only the rows asked for (partitioning.state.lookup) -------------------------
    def find_tables(self, spec_id: int, keys: Iterable[PartitionKey]) -> dict[PartitionKey, PartitionTable]:
        """The table of each partition key of spec ``spec_id`` in ``keys`` that exists; only
        those rows are decoded (a commit touching one of 20,000 partitions reads one)."""
        wanted = {tuple(canonical_float(v) for v in k) for k in keys}
        if "by_key" in self.__dict__:
            return {k: t for k in wanted if (t := self.by_key.get((spec_id, k))) is not None}
        found = self._found_tables
        missing = {k for k in wanted if (spec_id, k) not in found}
        if missing:
            spec = self.spec(spec_id)
            lean = self._lean()
            found_rows = lean.table_rows(spec, missing) if lean is not None else None
            if found_rows is not None:
                rows = found_rows
            else:
                source = self.table_rows[spec_id] if "table_rows" in self.__dict__ else self.manifest
                rows = table_rows_for_keys(source, spec, missing)
            for k in missing:
                found[(spec_id, k)] = self._table(spec_id, rows[k]) if k in rows else None
        return {k: t for k in wanted if (t := found[(spec_id, k)]) is not None}

    def rows_for(self, object_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        """The manifest rows with these object ids (absent ids are left out), as dicts."""
        wanted = set(object_ids)
        if "rows_by_id" in self.__dict__:
            return {i: r for i in wanted if (r := self.rows_by_id.get(i)) is not None}
        found = self._found_rows
        missing = wanted - found.keys()
        if missing:
            lean = self._lean()
            copies = lean.rows_by_id(missing) if lean is not None else None
            if copies is not None:
                rows = {i: plain_row(same_id[-1]) for i, same_id in copies.items()}
            else:
                rows = rows_by_id(self.manifest, missing)
            for i in missing:
                found[i] = rows.get(i)
        return {i: dict(r) for i in wanted if (r := found[i]) is not None}

    # What the lookups above found (None: absent), kept with this state (a successor starts empty).
    @cached_property
    def _found_tables(self) -> dict[tuple[int, PartitionKey], PartitionTable | None]:
        return {}

    @cached_property
    def _found_rows(self) -> dict[str, dict[str, Any] | None]:
        return {}

    def tables_by_id(self, object_ids: Iterable[str]) -> dict[str, PartitionTable]:
        """The partition tables (of known spec versions) with these object ids; only their rows are decoded."""
        out = {}
        for object_id, row in self.rows_for(object_ids).items():
            spec_id = spec_id_of(object_id)
            if row["object_type"] == "table" and spec_id in self.specs:
                out[object_id] = self._table(spec_id, row)
        return out

    def namespaces_for(
        self, spec: PartitionSpec, keys: Iterable[PartitionKey] | None
    ) -> dict[tuple[str, PartitionKey], str]:
        """The partition namespaces of ``spec`` above ``keys`` (None: all of them)."""
        if keys is None:
            return namespace_rows(self.manifest, spec, None)
        wanted = {tuple(canonical_float(v) for v in k) for k in keys}
        lean = self._lean()
        found = lean.namespace_rows(spec, wanted) if lean is not None else None
        return found if found is not None else namespace_rows(self.manifest, spec, wanted)

    def location_holders(self, locations: Iterable[str]) -> list[tuple[str, str]]:
        """``(object_id, location)`` of every row whose location is one of ``locations``."""
        wanted = sorted(set(locations))
        if not wanted:
            return []
        lean = self._lean()
        if lean is not None:
            return lean.location_holders(wanted)
        manifest = self.manifest
        holders = manifest.filter(pc.is_in(manifest.column("location"), value_set=pa.array(wanted, pa.string())))
        return list(zip(holders.column("object_id").to_pylist(), holders.column("location").to_pylist(), strict=True))


class ManifestHandle(Protocol):
    """What :mod:`partitioning.state.commits` and :mod:`partitioning.state.evolution` use of a namespace."""

    root: str
    _store: ManifestStore
    _state: NamespaceState

    def refresh(self) -> object: ...

    def commit_once(
        self,
        commits: Sequence[TableCommit],
        *,
        replace_all: bool = False,
        write_id: str | None = None,
        operation: Operation | None = None,
        guard: Guard | None = None,
    ) -> int: ...


class Once(Generic[T]):
    """A thunk run once, then forgotten, so a derived state does not keep its base alive."""

    def __init__(self, fn: Callable[[], T]) -> None:
        self._fn: Callable[[], T] | None = fn
        self._value: T | None = None

    @property
    def done(self) -> bool:
        return self._fn is None

    def __call__(self) -> T:
        if self._fn is not None:
            self._value, self._fn = self._fn(), None
        assert self._value is not None
        return self._value
