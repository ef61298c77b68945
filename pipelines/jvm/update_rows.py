"""SQL ``UPDATE t SET col = expr, ... WHERE cond`` through ``update_rows``' engine, with no Spark job.

With the session extension (``spark.sql.extensions=lance_partitioned.LanceSessionExtensions``)
the JVM layer hands an ``UPDATE`` of a catalog table to :func:`sql_update`: the statement's own
text of each value and of the condition, and the session's SQL settings. It runs a round of
``update_rows`` that needs no SparkSession (:func:`pipelines.write.rewrite.update_here`): Lance's
own ``update`` on each table when DataFusion computes the change exactly as Spark, else the
rows read and the values computed in this process when that is exact. When neither is, or the
statement does not bind here (a qualified column, a subquery, a session variable), it answers
``done: false`` before anything is committed and the JVM layer runs the statement as Spark
plans it (its row-level update), so every answer is Spark's.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

from partitioning.errors import InvalidInput, PartitioningError, first_line
from pipelines.source.reader import dialect_from_options
from pipelines.write.rewrite import update_here
from pipelines.write.rounds import DEFAULT_ATTEMPTS, Round, rerun_on_conflict

__all__ = ["sql_update"]


class _NeedsSpark(PartitioningError):
    """This process does not compute the update exactly as Spark; nothing was committed."""


def sql_update(args: Mapping[str, Any], storage_options: Mapping[str, str] | None) -> dict[str, Any]:
    """Run the update ``args`` describes (``root``, ``set``: JSON of column -> SQL text,
    ``where``: SQL text or empty, ``timeZone``, ``sqlConf``); ``done`` and, when not, ``why``."""
    root = str(args["root"])
    where = str(args.get("where") or "").strip() or None
    dialect = dialect_from_options({"timeZone": str(args["timeZone"]), "sqlConf": str(args["sqlConf"])})
    started = time.monotonic()

    engines: list[str] = []

    def attempt(run: Round) -> Any:
        columns = {c if dialect.case_sensitive else c.lower(): c for c in run.ns.schema.names}
        set = {}
        for column, value in json.loads(str(args["set"])).items():
            name = columns.get(column if dialect.case_sensitive else column.lower())
            if name is None or name in set:
                raise _NeedsSpark(f"column {column!r} is not one of the table's")
            set[name] = value
        here = update_here(run, set=set, where=where, dialect=dialect, started=started)
        if here.result is None:
            raise _NeedsSpark("the condition or a value is not computed here exactly as Spark does")
        engines.append(here.engine)
        return here.result

    try:
        result = rerun_on_conflict(root, "UPDATE", DEFAULT_ATTEMPTS, attempt, storage_options)
    except _NeedsSpark as exc:
        return {"done": False, "why": str(exc)}
    except InvalidInput as exc:  # it does not bind here: Spark's analysis answers it
        return {"done": False, "why": first_line(exc)}
    return {"done": True, "rows": result.rows_updated, "version": result.manifest_version, "engine": engines[-1]}
