"""PySpark's worker daemon, quiet when Spark stops reading early.

``.show(n)``, ``LIMIT`` and ``take`` close a Python worker's socket as soon as Spark has
the rows it needs; PySpark's daemon then prints a ``BrokenPipeError`` (or
``ConnectionResetError``) traceback for a worker that did nothing wrong. With
``spark.python.daemon.module=lance_partitioned_daemon`` (set by
:func:`pipelines.session.build_session`) such a worker ends as PySpark ends it, without the
traceback; every other error is PySpark's as before. The module imports nothing but
PySpark's daemon, which forks the workers: no thread may start before the fork.
"""

from __future__ import annotations

import socket

import pyspark.daemon as _daemon

_worker = _daemon.worker


def _quiet_worker(sock: socket.socket, authenticated: bool) -> int:
    try:
        return _worker(sock, authenticated)
    except (BrokenPipeError, ConnectionResetError):
        return 1  # Spark closed the connection: this worker process ends, as PySpark's would


_daemon.worker = _quiet_worker

if __name__ == "__main__":
    _daemon.manager()
