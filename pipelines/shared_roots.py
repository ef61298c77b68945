"""Whether a namespace root means one place for the driver and every executor of a session.

A relative root is made absolute on the driver, which only names the place tasks see when
the executors share the driver's file system (a ``local`` or ``local-cluster`` master);
:func:`driver_root` refuses it for any other master, and :func:`check_source_root` (what a
data source calls, with the master it was registered with) also refuses it on Spark Connect,
whose server would resolve it in a directory of its own.
"""

from __future__ import annotations

import os
import re
import urllib.parse

from pyspark.sql import SparkSession

from partitioning.errors import InvalidInput
from partitioning.storage.roots import is_uri, resolve_root

__all__ = ["check_root_for_master", "check_source_root", "driver_root", "is_relative_path", "session_master"]


# Masters whose executors run on this machine, in processes that see the driver's file system.
_SAME_MACHINE_MASTER = re.compile(r"local(\[[^\]]*\])?|local-cluster\[[^\]]*\]")


def session_master(spark: SparkSession) -> str | None:
    """The session's master (``spark.master``), on classic Spark and Spark Connect; None if not known."""
    value = spark.conf.get("spark.master", None)
    return str(value) if value else None


def is_relative_path(root: str) -> bool:
    """Whether ``root`` is a local path relative to a working directory (not a URI, not absolute, not ``~``)."""
    if not isinstance(root, str) or is_uri(root):
        return False
    path = urllib.parse.unquote(urllib.parse.urlsplit(root).path) if root.startswith("file:") else root
    return not os.path.isabs(os.path.expanduser(path))


def check_root_for_master(root: str, master: str | None) -> None:
    """Refuse a relative ``root`` when ``master``'s executors cannot see the driver's file system.

    ``local`` and ``local-cluster`` executors run on the driver's machine, where the
    absolute path the driver makes of ``root`` names the same place; on any other cluster
    manager (``yarn``, ``spark://``, ``k8s://``, ...) it names a directory of the driver's
    machine that the executors do not have. An unknown master (None) is not refused.
    """
    if master is None or not is_relative_path(root) or _SAME_MACHINE_MASTER.fullmatch(master.strip()):
        return
    raise InvalidInput(
        f"relative root {root!r} cannot be used with master {master!r}, whose executors do not see this "
        "machine's files; use a shared URI (s3://, gs://, az://) or an absolute path that every "
        "executor mounts"
    )


def check_source_root(root: str, master: str | None, connect: bool) -> None:
    """:func:`check_root_for_master`, and on Spark Connect refuse any relative ``root``: a
    data source resolves its path on the server, in a per-session directory the client
    never sees (only :func:`driver_root`, called on the client, can resolve it there)."""
    if connect and is_relative_path(root):
        raise InvalidInput(
            f"relative path {root!r} cannot be used with a data source on Spark Connect: the server would "
            "resolve it in its own session directory, not the client's; pass an absolute path or URI, or use "
            "read_partitioned/write_partitioned, which resolve it on the client"
        )
    check_root_for_master(root, master)


def driver_root(spark: SparkSession, root: str) -> str:
    """``root`` as tasks receive it (:func:`partitioning.storage.roots.resolve_root`), after
    :func:`check_root_for_master` with the session's master."""
    check_root_for_master(root, session_master(spark))
    return resolve_root(root)
