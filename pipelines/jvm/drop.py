"""Metadata-only deletes for the JVM layer: ``DELETE FROM t WHERE <identity partition condition>``
(Spark's ``SupportsDeleteV2``) and ``TRUNCATE TABLE``.

The condition selects whole partition tables (:mod:`partitioning.plan.identity_match`); ONE
``__manifest`` commit removes them and the namespaces left empty, on the protected path.
Their files stay for time travel until vacuum. A race with another commit is retried on
the new state (the condition is evaluated again).
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from partitioning.errors import ConcurrentModification
from partitioning.namespace import PartitionedNamespace
from partitioning.plan.identity_match import matching_tables
from partitioning.sql.binding import bind
from partitioning.sql.filters import Dialect
from partitioning.sql.predicates import predicates_from_json
from partitioning.storage.guard import guarded
from partitioning.storage.history import Operation

__all__ = ["drop_matching"]

ATTEMPTS = 8
_DIALECT = Dialect("spark", "UTC", case_sensitive=True)


def drop_matching(
    root: str,
    exact_json: str | None,
    version: int | None,
    storage_options: Mapping[str, str] | None,
    *,
    truncate: bool = False,
) -> int | None:
    """Remove the tables the predicates select (every table with ``truncate``); the new
    ``__manifest`` version, or None when nothing matched."""
    started = time.monotonic()
    ns = PartitionedNamespace.load(root, storage_options)
    with guarded(ns.root, ns.storage_options, bases=(version,) if version else ()) as guard:
        for _ in range(ATTEMPTS):
            ns.refresh(guard=guard)
            exact = bind(predicates_from_json(exact_json), ns.namespace_schema.arrow, _DIALECT)
            plan = ns.plan_scan(exact)
            doomed = [t.object_id for t in (plan.tasks if truncate else matching_tables(ns, plan.tasks, exact))]
            if not doomed:
                return None
            name = "DELETE"
            params = {"truncate": "true"} if truncate else {"sql": "true"}
            operation = Operation(name, params, {"partitions_removed": len(doomed)}).timed(started)
            try:
                return ns.remove_tables(doomed, operation=operation, guard=guard)
            except ConcurrentModification:
                continue
    raise ConcurrentModification(f"DELETE on {ns.root} lost {ATTEMPTS} __manifest races; nothing was deleted")
