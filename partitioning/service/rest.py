"""The partitioned namespace over the Lance Namespace REST protocol, read-only.

:class:`NamespaceServer` serves :class:`~partitioning.service.namespace_api.PartitionedLanceNamespace`
on the routes pylance's ``RestNamespace`` client calls (``lance_namespace.connect("rest",
{"uri": ...})``), so any engine that discovers tables over REST sees the same tree, the same
properties and the same committed versions as a client in this process:

- ``GET  /v1/namespace/{id}/list`` and ``GET /v1/namespace/{id}/table/list`` (``page_token``, ``limit``);
- ``POST /v1/namespace/{id}/describe`` and ``/exists``;
- ``POST /v1/table/{id}/describe`` (``version``) and ``/exists``;
- ``POST /v1/table/{id}/version/list`` (``limit``, ``descending``, ``page_token``) and
  ``/version/describe`` (``version``): the committed versions, which pylance asks for
  because ``describe`` says ``managed_versioning`` (:mod:`partitioning.service.table_versions`).

``{id}`` is the id's parts joined by ``delimiter`` (a query parameter, ``$`` by default; the
delimiter alone is the root). Anything else is refused as unsupported (code 0): the server
never changes the namespace. Errors are the protocol's: a JSON body ``{"error", "code"}``
with the ``lance_namespace`` error code and a matching HTTP status.

Each request reads the latest ``__manifest`` version (a commit made while serving is seen by
the next request), unless it sends ``X-Lance-Manifest-Version: <N>``
(:data:`MANIFEST_VERSION_HEADER`): then every answer comes from version ``N``.

The stack is Starlette on uvicorn's h11 protocol (pure Python, strict framing: a body is read
by its ``Content-Length`` or its chunks, never taken for a next request); the namespace calls
run on a small thread pool (:data:`LOCAL_WORKERS`, :data:`STORE_WORKERS`). Limits (checked in
:mod:`partitioning.service.rest_guards`): a silent connection closes after
:data:`KEEP_ALIVE_TIMEOUT` s; a request head must be complete 5 s after its first byte, its body
5 s later (else 408); a body over :data:`MAX_BODY_BYTES` is refused (413) unread, a head over
:data:`MAX_HEAD_BYTES` too (400); past :data:`MAX_CONNECTIONS` connections, 503. With a ``token``,
every request must carry ``Authorization: Bearer <token>`` (compared in constant time; a refused
request's connection is closed). The server binds to ``127.0.0.1`` unless told otherwise.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import Any
from urllib.parse import parse_qs, unquote

import uvicorn
from lance_namespace import (
    DescribeNamespaceRequest,
    DescribeTableRequest,
    DescribeTableVersionRequest,
    ListNamespacesRequest,
    ListTablesRequest,
    ListTableVersionsRequest,
    NamespaceExistsRequest,
    TableExistsRequest,
)
from lance_namespace.errors import ErrorCode, LanceNamespaceError
from pydantic import BaseModel
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from partitioning.errors import NamespaceNotFound, Unsupported
from partitioning.service.namespace_api import PartitionedLanceNamespace
from partitioning.service.rest_guards import (
    GuardedH11Protocol,
    Refused,
    body_version,
    check_framing,
    check_token,
    descending_of,
    json_object,
    limit_of,
    pinned_version,
    read_body,
)

__all__ = ["MANIFEST_VERSION_HEADER", "MAX_BODY_BYTES", "NamespaceServer"]

MAX_BODY_BYTES = 1 << 20
MANIFEST_VERSION_HEADER = "X-Lance-Manifest-Version"
KEEP_ALIVE_TIMEOUT = 5
"""Seconds a connection may stay silent: before its first request and between requests."""
MAX_HEAD_BYTES = 16 << 10
MAX_CONNECTIONS = 1000
BACKLOG = 2048
SHUTDOWN_TIMEOUT = 10
"""Seconds :meth:`NamespaceServer.stop` lets in-flight requests finish before it cancels them."""
LOCAL_WORKERS = max(2, min(4, os.cpu_count() or 1))
"""Threads answering a local root, whose reads mostly hold the interpreter lock: more only contend
for it (2 cores, 50 clients: p99 about 55 ms with 2 threads, 135 ms with 40, as many requests/s)."""
STORE_WORKERS = 32
"""Threads answering an object-store root, whose reads wait on the network."""
_log = logging.getLogger(__name__)
_STATUS: dict[int, int] = {
    ErrorCode.UNSUPPORTED: 406,
    ErrorCode.NAMESPACE_NOT_FOUND: 404,
    ErrorCode.TABLE_NOT_FOUND: 404,
    ErrorCode.TABLE_VERSION_NOT_FOUND: 404,
    ErrorCode.INVALID_INPUT: 400,
    ErrorCode.UNAUTHENTICATED: 401,
    ErrorCode.PERMISSION_DENIED: 403,
    ErrorCode.CONCURRENT_MODIFICATION: 409,
    ErrorCode.SERVICE_UNAVAILABLE: 503,
}
_Query = Mapping[str, list[str]]
_Call = Callable[[PartitionedLanceNamespace, list[str], _Query, dict[str, Any]], BaseModel]
# (method, kind, action) -> the call that answers it, given the client, the id, the query and the body
_ROUTES: dict[tuple[str, str, str], _Call] = {
    ("GET", "namespace", "list"): lambda api, ids, q, b: api.list_namespaces(
        ListNamespacesRequest(id=ids, page_token=q.get("page_token", [None])[0], limit=limit_of(q))
    ),
    ("GET", "namespace", "table/list"): lambda api, ids, q, b: api.list_tables(
        ListTablesRequest(id=ids, page_token=q.get("page_token", [None])[0], limit=limit_of(q))
    ),
    ("POST", "namespace", "describe"): lambda api, ids, q, b: api.describe_namespace(DescribeNamespaceRequest(id=ids)),
    ("POST", "namespace", "exists"): lambda api, ids, q, b: api.namespace_exists(NamespaceExistsRequest(id=ids)),
    ("POST", "table", "describe"): lambda api, ids, q, b: api.describe_table(
        DescribeTableRequest(id=ids, version=body_version(b))
    ),
    ("POST", "table", "exists"): lambda api, ids, q, b: api.table_exists(
        TableExistsRequest(id=ids, version=body_version(b))
    ),
    ("POST", "table", "version/list"): lambda api, ids, q, b: api.list_table_versions(
        ListTableVersionsRequest(
            id=ids, page_token=q.get("page_token", [None])[0], limit=limit_of(q), descending=descending_of(q)
        )
    ),
    ("POST", "table", "version/describe"): lambda api, ids, q, b: api.describe_table_version(
        DescribeTableVersionRequest(id=ids, version=body_version(b))
    ),
}
_TWO_PART_ACTIONS = {("namespace", "table", "list"), ("table", "version", "list"), ("table", "version", "describe")}
_ACTIONS = {action for _, _, action in _ROUTES}
_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]


def _error(status: int, code: ErrorCode, message: str, *, close: bool = False) -> Response:
    return JSONResponse({"error": message, "code": int(code)}, status, {"connection": "close"} if close else None)


class _Endpoint:
    """Answers every request: the transport checks here, the namespace call on a worker thread."""

    def __init__(self, api: PartitionedLanceNamespace, token: str | None, workers: ThreadPoolExecutor) -> None:
        self.api, self.workers = api, workers
        self.token = None if token is None else token.encode()

    async def respond(self, request: Request) -> Response:
        try:
            check_framing(request.headers)
            if self.token is not None:
                check_token(request.headers, self.token)
            raw = await read_body(request, MAX_BODY_BYTES)
        except Refused as exc:
            return _error(exc.status, exc.code, str(exc), close=exc.close)
        except ClientDisconnect:  # no one is left to answer
            return Response(status_code=400, headers={"connection": "close"})
        except Exception:
            _log.exception(
                "lance_partitioned: reading namespace request %s %s failed", request.method, request.url.path
            )
            return _error(500, ErrorCode.INTERNAL, "internal error", close=True)
        status, body = await asyncio.get_running_loop().run_in_executor(self.workers, self.answer, request, raw)
        return JSONResponse(body, status)

    def answer(self, request: Request, raw: bytes) -> tuple[int, dict[str, Any]]:
        try:
            return 200, self.call(request, raw)
        except LanceNamespaceError as exc:
            code = int(getattr(exc, "code", ErrorCode.INTERNAL))
            return _STATUS.get(code, 500), {"error": str(exc), "code": code}
        except Exception:
            _log.exception("lance_partitioned: namespace request %s %s failed", request.method, request.url.path)
            return 500, {"error": "internal error", "code": int(ErrorCode.INTERNAL)}

    def call(self, request: Request, raw: bytes) -> dict[str, Any]:
        method, path = request.method, request.scope["raw_path"].decode("latin-1")
        parts = path.strip("/").split("/")
        if parts[0] != "v1" or len(parts) < 2 or parts[1] not in ("namespace", "table"):
            raise Unsupported(f"{method} {path} is not a route this read-only server answers")
        kind = parts[1]
        # the id is all between the kind and the action: a '/' in it, sent as is or escaped, names nothing
        tail = 2 if len(parts) > 4 and (kind, *parts[-2:]) in _TWO_PART_ACTIONS else 1
        if len(parts) < 3 + tail:  # an id a client resolved away (``..``) or left out
            raise NamespaceNotFound(f"{path} names no namespace or table")
        action, object_id = "/".join(parts[-tail:]), unquote("/".join(parts[2:-tail]))
        route = _ROUTES.get((method, kind, action))
        if route is None:
            known = "" if action in _ACTIONS else f" ({action!r} is no action of the protocol)"
            raise Unsupported(
                f"{method} {kind} {action} is not served{known}: the server is read-only; change the namespace "
                "with the project's API (writes, drop_partitions, ...)"
            )
        query = parse_qs(request.scope["query_string"].decode("latin-1"))
        delimiter = query.get("delimiter", ["$"])[0] or "$"
        ids = [] if object_id in ("", delimiter) else object_id.split(delimiter)
        body = json_object(raw)
        pin = pinned_version(request.headers, MANIFEST_VERSION_HEADER)
        api = self.api if pin is None else self.api.at(pin)
        return route(api, ids, query, body).model_dump(mode="json", exclude_none=True, exclude={"context"})


async def _no_route(request: Request, exc: Exception) -> Response:
    """A method or target outside every route: unsupported, and the connection closed (its body is unread)."""
    return _error(406, ErrorCode.UNSUPPORTED, f"{request.method} is not a route this server answers", close=True)


def _listen(host: str, port: int) -> socket.socket:
    found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, kind, proto, _, address = found[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(BACKLOG)
    except OSError:
        sock.close()
        raise
    return sock


class NamespaceServer:
    """Serve the partitioned namespace at ``root`` over the Lance Namespace REST protocol.

    A context manager: ``with NamespaceServer(root) as server:`` serves on
    ``http://127.0.0.1:{server.port}`` until the block ends (``port=0`` picks a free port).
    ``token`` requires ``Authorization: Bearer <token>`` on every request."""

    def __init__(
        self,
        root: str,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        storage_options: Mapping[str, str] | None = None,
        token: str | None = None,
    ) -> None:
        properties = {f"storage.{k}": v for k, v in (storage_options or {}).items()}
        self.api = PartitionedLanceNamespace(root, **properties)
        local = "://" not in root or root.startswith("file://")
        self._workers = ThreadPoolExecutor(LOCAL_WORKERS if local else STORE_WORKERS, "lance_partitioned-rest")
        app = Starlette(
            routes=[Route("/{path:path}", _Endpoint(self.api, token, self._workers).respond, methods=_METHODS)],
            exception_handlers={HTTPException: _no_route},
        )
        config = uvicorn.Config(
            app,
            http=GuardedH11Protocol,
            ws="none",
            lifespan="off",
            loop="asyncio",
            log_config=None,
            access_log=False,
            proxy_headers=False,
            server_header=False,
            backlog=BACKLOG,
            timeout_keep_alive=KEEP_ALIVE_TIMEOUT,
            limit_concurrency=MAX_CONNECTIONS,
            h11_max_incomplete_event_size=MAX_HEAD_BYTES,
            timeout_graceful_shutdown=SHUTDOWN_TIMEOUT,
        )
        self._socket = _listen(host, port)
        self._server = uvicorn.Server(config)
        self._serving = False
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._socket.getsockname()[1])

    @property
    def uri(self) -> str:
        host = self._socket.getsockname()[0]
        return f"http://{f'[{host}]' if ':' in host else host}:{self.port}"

    def start(self) -> NamespaceServer:
        """Serve on a background thread; return once the server accepts connections."""
        self._thread = threading.Thread(target=self.serve_forever, name="lance_partitioned-rest", daemon=True)
        self._thread.start()
        while not self._server.started:
            if not self._thread.is_alive():
                raise RuntimeError(f"the namespace server for {self.api.root} stopped while starting")
            time.sleep(0.005)
        return self

    def serve_forever(self) -> None:
        """Serve on this thread until :meth:`stop` (or, on the main thread, SIGINT or SIGTERM)."""
        self._serving = True
        try:
            self._server.run(sockets=[self._socket])
        finally:
            self._done.set()

    def stop(self) -> None:
        """Stop accepting, let in-flight requests finish (at most :data:`SHUTDOWN_TIMEOUT` s), then return."""
        self._server.should_exit = True
        if self._serving:
            self._done.wait()
        if self._thread is not None:
            self._thread.join()
        self._socket.close()
        self._workers.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> NamespaceServer:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()
