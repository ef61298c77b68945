"""The pre-rewrite namespace REST server (``http.server``), kept only as a benchmark baseline.

This is ``partitioning/service/rest.py`` as it was before it moved to Starlette + uvicorn,
unchanged but for this docstring: benchmarks/test_bench_namespace.py serves the same root with
it beside the new server to compare requests/s and latency. It has none of the new server's
timeouts, framing checks or input checks (idle connections stay open, a short body holds a
thread, a 401 leaves its body unread): never serve with it.
"""

from __future__ import annotations

import hmac
import json
import logging
import socket
import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from lance_namespace import (
    DescribeNamespaceRequest,
    DescribeTableRequest,
    ListNamespacesRequest,
    ListTablesRequest,
    NamespaceExistsRequest,
    TableExistsRequest,
)
from lance_namespace.errors import ErrorCode, LanceNamespaceError

from partitioning.errors import InvalidInput, NamespaceNotFound, Unsupported
from partitioning.service.namespace_api import PartitionedLanceNamespace

__all__ = ["MAX_BODY_BYTES", "NamespaceServer"]

MAX_BODY_BYTES = 1 << 20
_log = logging.getLogger(__name__)
_STATUS = {
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


class _Unauthenticated(LanceNamespaceError):
    code = ErrorCode.UNAUTHENTICATED


def _limit(query: Mapping[str, list[str]]) -> int | None:
    text = query.get("limit", [None])[0]
    if text is None:
        return None
    try:
        return int(text)
    except ValueError as exc:
        raise InvalidInput(f"limit must be a whole number, not {text!r}") from exc


def _routes(api: PartitionedLanceNamespace) -> dict[tuple[str, str, str], Callable[..., Any]]:
    """(method, kind, action) -> the call that answers it, given the id, query and body."""
    return {
        ("GET", "namespace", "list"): lambda ids, q, b: api.list_namespaces(
            ListNamespacesRequest(id=ids, page_token=q.get("page_token", [None])[0], limit=_limit(q))
        ),
        ("GET", "namespace", "table/list"): lambda ids, q, b: api.list_tables(
            ListTablesRequest(id=ids, page_token=q.get("page_token", [None])[0], limit=_limit(q))
        ),
        ("POST", "namespace", "describe"): lambda ids, q, b: api.describe_namespace(DescribeNamespaceRequest(id=ids)),
        ("POST", "namespace", "exists"): lambda ids, q, b: api.namespace_exists(NamespaceExistsRequest(id=ids)),
        ("POST", "table", "describe"): lambda ids, q, b: api.describe_table(
            DescribeTableRequest(id=ids, version=b.get("version"))
        ),
        ("POST", "table", "exists"): lambda ids, q, b: api.table_exists(
            TableExistsRequest(id=ids, version=b.get("version"))
        ),
    }


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        # headers and body leave in two writes: without this, Nagle's algorithm and the
        # client's delayed ACK hold every answer back about 40 ms
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:
        _log.debug("%s " + format, self.address_string(), *args)

    def do_GET(self) -> None:
        self._answer()

    def do_POST(self) -> None:
        self._answer()

    def do_DELETE(self) -> None:
        self._answer()

    def _answer(self) -> None:
        try:
            status, body = 200, self._call()
        except LanceNamespaceError as exc:
            code = ErrorCode(getattr(exc, "code", ErrorCode.INTERNAL))
            status, body = _STATUS.get(code, 500), {"error": str(exc), "code": int(code)}
        except Exception:
            _log.exception("lance_partitioned: namespace request %s %s failed", self.command, self.path)
            status, body = 500, {"error": "internal error", "code": int(ErrorCode.INTERNAL)}
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _call(self) -> dict[str, Any]:
        token = self.server.token
        if token is not None:
            sent = self.headers.get("Authorization", "")
            if not hmac.compare_digest(sent.encode(), f"Bearer {token}".encode()):
                raise _Unauthenticated("this namespace server needs 'Authorization: Bearer <token>'")
        length = self.headers.get("Content-Length") or "0"
        size = int(length) if length.isdigit() else -1
        if size < 0:
            self.close_connection = True
            raise InvalidInput(f"Content-Length {length!r} is not a number of bytes")
        if size > MAX_BODY_BYTES:
            self.close_connection = True
            raise InvalidInput(f"request body of {size} bytes is over the limit of {MAX_BODY_BYTES}")
        raw = self.rfile.read(size) if size else b""
        try:
            body = json.loads(raw) if raw else {}
        except ValueError as exc:
            raise InvalidInput(f"request body is not JSON: {exc}") from exc
        url = urlsplit(self.path)
        query = parse_qs(url.query)
        parts = url.path.strip("/").split("/")
        if parts[0] != "v1" or len(parts) < 2 or parts[1] not in ("namespace", "table"):
            raise Unsupported(f"{self.command} {url.path} is not a route this read-only server answers")
        if len(parts) < 4:  # an id a client resolved away (``..``) or left out
            raise NamespaceNotFound(f"{url.path} names no namespace or table")
        kind, object_id, action = parts[1], unquote(parts[2]), "/".join(parts[3:])
        call = self.server.routes.get((self.command, kind, action))
        if call is None:
            raise Unsupported(
                f"{self.command} {kind} {action} is not served: the server is read-only; change the namespace "
                "with the project's API (writes, drop_partitions, ...)"
            )
        delimiter = query.get("delimiter", ["$"])[0] or "$"
        ids = [] if object_id in ("", delimiter) else object_id.split(delimiter)
        response = call(ids, query, body if isinstance(body, dict) else {})
        return response.model_dump(mode="json", exclude_none=True, exclude={"context"})


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], api: PartitionedLanceNamespace, token: str | None) -> None:
        super().__init__(address, _Handler)
        self.routes = _routes(api)
        self.token = token


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
        self._server = _Server((host, port), self.api, token)
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def uri(self) -> str:
        host = self._server.server_address[0]
        return f"http://{host.decode() if isinstance(host, bytes) else host}:{self.port}"

    def start(self) -> NamespaceServer:
        self._thread = threading.Thread(target=self._server.serve_forever, name="lance_partitioned-rest", daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        self._server.serve_forever()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join()

    def __enter__(self) -> NamespaceServer:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()
