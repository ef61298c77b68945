"""The namespace REST server against a hostile client, on 127.0.0.1.

Protocol-level attacks go over raw sockets (so nothing between the test and the server
fixes a request up): silent and slow connections, short and oversized bodies, request
smuggling through an unread body or a doubly framed one. Input attacks go through
``http.client``: traversal ids, every ill-typed ``version``, ``limit`` and pinning header,
bad tokens. The oracle for every answer is the in-process client on the same root. Each
test is bounded in time (socket timeouts, joins with timeouts).
"""

from __future__ import annotations

import datetime as dt
import http.client
import json
import os
import re
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lance_namespace as ln
import pyarrow as pa
import pytest
from lance_namespace import DescribeTableRequest, ListNamespacesRequest, ListTablesRequest
from lance_namespace.errors import ErrorCode, LanceNamespaceError

from jobs.serve import is_loopback
from partitioning import NamespaceServer, PartitionedNamespace
from partitioning.service.namespace_api import PartitionedLanceNamespace
from partitioning.service.rest import KEEP_ALIVE_TIMEOUT, MANIFEST_VERSION_HEADER, MAX_BODY_BYTES
from partitioning.service.rest_guards import BODY_TIMEOUT, HEAD_TIMEOUT
from partitioning.tables.write import write_table
from tests.test_namespace_api import SCHEMA, _rows

REPO = Path(__file__).resolve().parents[1]
TOKEN = "s3cret"
SLACK = 2.0  # seconds a deadline may be late on a loaded 2-core machine


@dataclass(frozen=True)
class Served:
    """A tiny namespace with two commits: what the in-process client answered at the first."""

    root: str
    other: str  # a second namespace beside the root, which no id may reach
    first: int  # the __manifest version of the first commit
    at_first: dict[str, Any]
    table: str  # a table id ('$'-joined) the second commit changed


def _answers(client: PartitionedLanceNamespace, days: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {"v1": client.list_namespaces(ListNamespacesRequest(id=["v1"])).model_dump(exclude_none=True)}
    for day in days:
        try:
            out[f"tables {day}"] = client.list_tables(ListTablesRequest(id=["v1", day])).model_dump(exclude_none=True)
            table = client.describe_table(DescribeTableRequest(id=["v1", day, "dataset"]))
            out[f"describe {day}"] = table.model_dump(mode="json", exclude_none=True, exclude={"context"})
        except LanceNamespaceError as exc:
            out[f"tables {day}"] = int(exc.code)
    return out


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Served:
    base = tmp_path_factory.mktemp("rest")
    root, other = str(base / "ns"), str(base / "other")
    write_table(PartitionedNamespace.create(other, SCHEMA, ["day"]), _rows(range(3)))
    write_table(PartitionedNamespace.create(root, SCHEMA, ["day"]), _rows(range(6)))
    first = PartitionedNamespace.load(root).manifest_version
    client = PartitionedLanceNamespace(root)
    days = client.list_namespaces(ListNamespacesRequest(id=["v1"])).namespaces or []
    at_first = _answers(client, days)
    # the second commit appends to one day and adds a new one
    more = pa.table(
        {"id": [100, 101], "day": [dt.date(2025, 12, 10), dt.date(2026, 1, 1)], "name": ["a", "b"]}, schema=SCHEMA
    )
    write_table(PartitionedNamespace.load(root), more)
    changed = [d for d in days if _answers(client, [d])[f"describe {d}"] != at_first[f"describe {d}"]]
    assert len(changed) == 1
    return Served(root, other, first, at_first, f"v1${changed[0]}$dataset")


@pytest.fixture(scope="module")
def server(served: Served) -> Iterator[NamespaceServer]:
    with NamespaceServer(served.root) as server:
        yield server


@pytest.fixture(scope="module")
def guarded(served: Served) -> Iterator[NamespaceServer]:
    with NamespaceServer(served.root, token=TOKEN) as server:
        yield server


def _connect(server: NamespaceServer, timeout: float = 10.0) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _read(sock: socket.socket, *, quiet: float = 1.0, limit: float = 10.0) -> tuple[bytes, bool]:
    """Everything the server sends until it closes (then True) or is ``quiet`` seconds silent."""
    data, end = b"", time.monotonic() + limit
    sock.settimeout(quiet)
    while time.monotonic() < end:
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            return data, False
        except ConnectionResetError:
            return data, True
        if not chunk:
            return data, True
        data += chunk
    return data, False


def _statuses(data: bytes) -> list[int]:
    return [int(code) for code in re.findall(rb"HTTP/1\.1 (\d{3}) ", data)]


def _json_body(data: bytes) -> dict[str, Any]:
    return json.loads(data.split(b"\r\n\r\n", 1)[1])


def _http(
    server: NamespaceServer, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None
) -> tuple[int, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


# -- connections that hold the server: silent, slow, short ----------------------------------------


def _silent_connections_are_closed_and_keep_no_request_waiting(server: NamespaceServer) -> None:
    opened = time.monotonic()
    idle = [_connect(server) for _ in range(300)]
    try:
        start = time.monotonic()
        assert _http(server, "GET", "/v1/namespace/v1/list")[0] == 200
        assert time.monotonic() - start < 2.0
        selector = selectors.DefaultSelector()
        for sock in idle:
            sock.setblocking(False)
            selector.register(sock, selectors.EVENT_READ)
        open_ = set(idle)
        deadline = opened + KEEP_ALIVE_TIMEOUT + SLACK
        while open_ and time.monotonic() < deadline:
            for key, _ in selector.select(timeout=0.5):
                closing = key.fileobj
                assert isinstance(closing, socket.socket)
                try:
                    assert closing.recv(1024) == b""  # closed, without a word
                except ConnectionResetError:
                    pass
                selector.unregister(closing)
                open_.discard(closing)
        assert not open_, f"{len(open_)} of 300 silent connections still open after {KEEP_ALIVE_TIMEOUT + SLACK} s"
    finally:
        for sock in idle:
            sock.close()


def _a_head_sent_a_line_at_a_time_is_cut_off(server: NamespaceServer) -> None:
    with _connect(server) as sock:
        start = time.monotonic()
        sock.sendall(b"GET /v1/namespace/v1/list HTTP/1.1\r\n")
        sock.settimeout(1.0)
        closed = None
        while closed is None and time.monotonic() - start < HEAD_TIMEOUT + KEEP_ALIVE_TIMEOUT + SLACK:
            try:
                sock.sendall(b"X-Slow: 1\r\n")  # each line well inside the keep-alive timeout
                if sock.recv(1024) == b"":
                    closed = time.monotonic()
            except TimeoutError:
                continue
            except (ConnectionResetError, BrokenPipeError):
                closed = time.monotonic()
        assert closed is not None and closed - start < HEAD_TIMEOUT + SLACK


def _a_short_body_is_answered_408_and_its_connection_closed(server: NamespaceServer) -> None:
    with _connect(server) as sock:
        start = time.monotonic()
        sock.sendall(b"POST /v1/namespace/v1/describe HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
        data, closed = _read(sock, quiet=BODY_TIMEOUT + SLACK)
        assert _statuses(data) == [408] and closed
        assert time.monotonic() - start < BODY_TIMEOUT + SLACK
        assert _json_body(data)["code"] == 13


def test_silent_slow_and_short_requests_are_cut_off_in_time(server: NamespaceServer) -> None:
    """Three clients at once (each waits out a deadline): 300 silent connections, closed within
    the keep-alive timeout while a valid request is answered at once; a head sent a line at a
    time, cut off at the head deadline; a body shorter than its Content-Length, answered 408."""
    scenarios = [
        _silent_connections_are_closed_and_keep_no_request_waiting,
        _a_head_sent_a_line_at_a_time_is_cut_off,
        _a_short_body_is_answered_408_and_its_connection_closed,
    ]
    with ThreadPoolExecutor(len(scenarios)) as pool:
        for outcome in [pool.submit(scenario, server) for scenario in scenarios]:
            outcome.result(timeout=KEEP_ALIVE_TIMEOUT + HEAD_TIMEOUT + 3 * SLACK)


# -- bodies: oversized, chunked ---------------------------------------------------------------------


def test_an_oversized_content_length_is_refused_before_the_body_is_sent(server: NamespaceServer) -> None:
    with _connect(server) as sock:
        sock.sendall(
            b"POST /v1/namespace/v1/describe HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (MAX_BODY_BYTES + 1)
        )
        data, closed = _read(sock, quiet=2.0)
        assert _statuses(data) == [413] and closed
        assert _json_body(data)["code"] == 13


def test_an_oversized_chunked_body_is_refused_before_it_ends(server: NamespaceServer) -> None:
    with _connect(server) as sock:
        sock.sendall(b"POST /v1/namespace/v1/describe HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
        chunk = b"%x\r\n%s\r\n" % (1 << 16, b" " * (1 << 16))
        for _ in range(MAX_BODY_BYTES >> 16):  # exactly the limit ...
            sock.sendall(chunk)
        sock.sendall(b"1\r\n \r\n")  # ... and one byte over it; the last chunk never comes
        data, closed = _read(sock, quiet=3.0)
        assert _statuses(data) == [413] and closed


def test_a_chunked_body_is_read_as_a_body(served: Served, server: NamespaceServer) -> None:
    version = PartitionedLanceNamespace(served.root).describe_table(DescribeTableRequest(id=served.table.split("$")))
    body = json.dumps({"version": version.version}).encode()
    with _connect(server) as sock:
        sock.sendall(
            f"POST /v1/table/{served.table}/describe HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
            + b"%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n" % (5, body[:5], len(body) - 5, body[5:])
            # the next request on the connection: the chunks' framing must leave it whole
            + b"GET /v1/namespace/v1/list HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        data, closed = _read(sock, quiet=3.0)
    assert closed
    assert _statuses(data) == [200, 200]
    assert f'"version":{version.version}'.encode() in data and b'"namespaces"' in data


# -- smuggling --------------------------------------------------------------------------------------

INNER = b"GET /v1/namespace/v1/list HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer s3cret\r\n\r\n"


@pytest.mark.parametrize("method", ["POST /v1/namespace/v1/describe", "GET /v1/namespace/v1/list"])
def test_a_refused_request_whose_body_is_a_request_gets_one_answer(guarded: NamespaceServer, method: str) -> None:
    with _connect(guarded) as sock:
        sock.sendall(f"{method} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(INNER)}\r\n\r\n".encode() + INNER)
        data, closed = _read(sock, quiet=2.0)
    assert _statuses(data) == [401] and closed
    assert b"connection: close" in data.lower()


def test_a_body_that_is_a_request_is_a_body(server: NamespaceServer) -> None:
    with _connect(server) as sock:
        sock.sendall(b"POST /v1/namespace/v1/describe HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(INNER))
        sock.sendall(INNER)
        data, _ = _read(sock, quiet=1.5)
    assert _statuses(data) == [400]  # not JSON; and no second answer


@pytest.mark.parametrize(
    "framing",
    [
        # CL.TE: a front end reading Content-Length would pass the request below as a second one
        b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + INNER,
        # TE.CL: one reading the chunks would; with Content-Length, the chunk is a request
        b"Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(INNER), INNER),
        b"Content-Length: 5\r\nTransfer-Encoding: xchunked\r\n\r\n0\r\n\r\n" + INNER,
        b"Transfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n\r\n0\r\n\r\n" + INNER,
        b"Transfer-Encoding : chunked\r\n\r\n0\r\n\r\n" + INNER,
        b"Content-Length: 5\r\nContent-Length: 6\r\n\r\n0\r\n\r\n" + INNER,
    ],
    ids=["cl-te", "te-cl", "xchunked", "two-te", "te-space", "two-cl"],
)
def test_a_doubly_framed_body_is_refused_with_one_answer(server: NamespaceServer, framing: bytes) -> None:
    with _connect(server) as sock:
        sock.sendall(b"POST /v1/namespace/v1/describe HTTP/1.1\r\nHost: x\r\n" + framing)
        data, closed = _read(sock, quiet=2.0)
    assert _statuses(data) == [400] and closed


# -- inputs -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "GET /v1/namespace/../list",
        "GET /v1/namespace/%2e%2e/list",
        "GET /v1/namespace/%2E%2E%24other/list",
        "GET /v1/namespace/..%2Fother/list",
        "GET /v1/namespace/..%2Fother/list?delimiter=%2F",
        "GET /v1/namespace/../../other/list",
        "GET /v1/namespace/{abs}/table/list",
        "GET /v1/namespace/{abs_raw}/list",
        "GET /v1/namespace/%24%24/list",
        "GET /v1/namespace/v1%00/list",
        "POST /v1/table/..%2F..%2Fother%24v1%24x%24dataset/describe",
        "POST /v1/table/%2e%2e/describe",
        "POST /v1/table/./describe",
        "POST /v1/table/{abs}%24dataset/describe",
        "POST /v1/namespace/%2e%2e%2F%2e%2e/describe",
    ],
)
def test_traversal_ids_never_leave_the_root(served: Served, server: NamespaceServer, path: str) -> None:
    method, target = path.split(" ")
    target = target.format(abs=served.other.replace("/", "%2F"), abs_raw=served.other)
    status, body = _http(server, method, target, b"{}" if method == "POST" else None)
    assert status in (400, 404), (target, status, body)
    assert body["code"] in (1, 4, 13)


BAD_BODIES = [
    b'{"version": "abc"}',
    b'{"version": "3"}',
    b'{"version": true}',
    b'{"version": false}',
    b'{"version": -5}',
    b'{"version": 1.5}',
    b'{"version": 1e3}',
    b'{"version": 18446744073709551616}',
    b'{"version": [1]}',
    b'{"version": {"v": 1}}',
    b"[]",
    b'"x"',
    b"5",
    b"null",
    b"{",
    b"\xff\xfe",
    b"[" * 100_000 + b"]" * 100_000,
    b'{"a":' * 20 + b"1" + b"}" * 20,
]


@pytest.mark.parametrize("action", ["describe", "exists"])
def test_every_ill_typed_body_is_a_400(served: Served, server: NamespaceServer, action: str) -> None:
    for body in BAD_BODIES:
        status, answer = _http(server, "POST", f"/v1/table/{served.table}/{action}", body)
        assert (status, answer["code"]) == (400, 13), (body[:40], answer)
    assert _http(server, "POST", f"/v1/table/{served.table}/describe", b'{"version": null}')[0] == 200


@pytest.mark.parametrize("limit", ["abc", "-1", "1.5", "0", "+3", "1e3", "9" * 5000, "%EF%BC%93"])
def test_a_bad_limit_is_a_400(server: NamespaceServer, limit: str) -> None:
    for action in ("list", "table/list"):
        status, answer = _http(server, "GET", f"/v1/namespace/v1/{action}?limit={limit}")
        assert (status, answer["code"]) == (400, 13), answer


@pytest.mark.parametrize(
    "authorization",
    [
        None,
        "Bearer wrong",
        "Bearer S3CRET",
        "Bearer S3cret",
        "Bearer s3cre",
        "Bearer s3cret2",
        "Basic s3cret",
        TOKEN,
        "Bearer",
    ],
)
def test_a_missing_or_wrong_token_is_a_401_that_closes(guarded: NamespaceServer, authorization: str | None) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", guarded.port, timeout=10)
    try:
        conn.request(
            "GET", "/v1/namespace/v1/list", headers={} if authorization is None else {"Authorization": authorization}
        )
        response = conn.getresponse()
        assert response.status == 401 and json.loads(response.read())["code"] == ErrorCode.UNAUTHENTICATED
        assert response.getheader("connection") == "close"
    finally:
        conn.close()
    # the scheme is case-insensitive (RFC 9110 11.1); the token is not
    for good in (f"Bearer {TOKEN}", f"bearer {TOKEN}"):
        assert _http(guarded, "GET", "/v1/namespace/v1/list", headers={"Authorization": good})[0] == 200


def test_an_unexpected_error_is_a_500_without_its_detail(
    server: NamespaceServer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def fail(request: Any) -> Any:
        raise RuntimeError("secret detail of the failure")

    monkeypatch.setattr(server.api, "list_namespaces", fail)
    status, answer = _http(server, "GET", "/v1/namespace/v1/list")
    assert (status, answer) == (500, {"error": "internal error", "code": ErrorCode.INTERNAL})
    assert "secret detail of the failure" in caplog.text  # logged, with its stack, for the operator


# -- load -------------------------------------------------------------------------------------------


def test_fifty_clients_of_two_hundred_requests_get_the_in_process_answers(
    served: Served, server: NamespaceServer
) -> None:
    client = PartitionedLanceNamespace(served.root)
    day = served.table.split("$")[1]
    latest = client.describe_table(DescribeTableRequest(id=served.table.split("$")))
    assert latest.version is not None
    requests = [
        ("GET", "/v1/namespace/v1/list", None, client.list_namespaces(ListNamespacesRequest(id=["v1"]))),
        ("GET", f"/v1/namespace/v1${day}/table/list", None, client.list_tables(ListTablesRequest(id=["v1", day]))),
        ("POST", f"/v1/table/{served.table}/describe", b"{}", latest),
        ("POST", f"/v1/table/{served.table}/describe", b'{"version": %d}' % latest.version, latest),
        (
            "GET",
            "/v1/namespace/v1/list?limit=1",
            None,
            client.list_namespaces(ListNamespacesRequest(id=["v1"], limit=1)),
        ),
    ]
    expected = [(m, p, b, a.model_dump(mode="json", exclude_none=True, exclude={"context"})) for m, p, b, a in requests]
    failures: list[str] = []
    answered = [0] * 50

    def run(worker: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        try:
            conn.connect()
            assert conn.sock is not None
            conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for i in range(200):
                method, path, body, answer = expected[(worker + i) % len(expected)]
                conn.request(method, path, body=body)
                response = conn.getresponse()
                got = json.loads(response.read())
                if response.status != 200 or got != answer:
                    failures.append(f"{method} {path}: {response.status} {got}")
                answered[worker] += 1
        except (OSError, http.client.HTTPException) as exc:
            failures.append(f"worker {worker}: {exc!r}")
        finally:
            conn.close()

    threads = [threading.Thread(target=run, args=(w,)) for w in range(50)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads)
    assert failures == []
    assert sum(answered) == 50 * 200


# -- pinning ----------------------------------------------------------------------------------------


def test_a_pinned_request_is_answered_from_its_manifest_version(served: Served, server: NamespaceServer) -> None:
    pin = {MANIFEST_VERSION_HEADER: str(served.first)}
    days = _http(server, "GET", "/v1/namespace/v1/list")[1]["namespaces"]
    assert len(days) == len(served.at_first["v1"]["namespaces"]) + 1  # the second commit added a day
    pinned: dict[str, Any] = {"v1": _http(server, "GET", "/v1/namespace/v1/list", headers=pin)[1]}
    latest: dict[str, Any] = {}
    for day in days:
        status, tables = _http(server, "GET", f"/v1/namespace/v1${day}/table/list", headers=pin)
        pinned[f"tables {day}"] = tables if status == 200 else tables["code"]
        if status == 200:
            pinned[f"describe {day}"] = _http(
                server, "POST", f"/v1/table/v1${day}$dataset/describe", b"{}", headers=pin
            )[1]
            latest[day] = _http(server, "POST", f"/v1/table/v1${day}$dataset/describe", b"{}")[1]
    new_day = (set(days) - set(served.at_first["v1"]["namespaces"])).pop()
    expected = {**served.at_first, f"tables {new_day}": 1}  # the new day is no namespace at the first version
    assert pinned == expected
    assert any(latest[d] != served.at_first[f"describe {d}"] for d in latest)  # unpinned: the latest answers
    described = _http(server, "POST", "/v1/namespace/%24/describe", b"{}", headers=pin)[1]
    assert described["properties"]["manifest_version"] == str(served.first)
    # pylance's REST client pins every request with the header as a property
    client = ln.connect("rest", {"uri": server.uri, f"header.{MANIFEST_VERSION_HEADER}": str(served.first)})
    assert client.list_namespaces(ListNamespacesRequest(id=["v1"])).namespaces == served.at_first["v1"]["namespaces"]


@pytest.mark.parametrize(
    "value", [b"0", b"-1", b"abc", b"1.5", b"+3", b"3x", b"0x3", b"10000000000000000000", b"9" * 40, b"\xd9\xa3", b""]
)
def test_a_bad_pinning_header_is_a_400_naming_it(server: NamespaceServer, value: bytes) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        conn.putrequest("GET", "/v1/namespace/v1/list")
        conn.putheader(MANIFEST_VERSION_HEADER, value)
        conn.endheaders()
        response = conn.getresponse()
        answer = json.loads(response.read())
    finally:
        conn.close()
    assert (response.status, answer["code"]) == (400, 13)
    assert MANIFEST_VERSION_HEADER in answer["error"] and repr(value.decode("latin-1"))[:20] in answer["error"]


def test_a_pinning_header_sent_twice_is_a_400(served: Served, server: NamespaceServer) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        conn.putrequest("GET", "/v1/namespace/v1/list")
        conn.putheader(MANIFEST_VERSION_HEADER, str(served.first))
        conn.putheader(MANIFEST_VERSION_HEADER, str(served.first + 1))
        conn.endheaders()
        response = conn.getresponse()
        assert response.status == 400 and MANIFEST_VERSION_HEADER in json.loads(response.read())["error"]
    finally:
        conn.close()


# -- the serve job ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        *[("127.0.0.1", True), ("127.8.9.10", True), ("::1", True), ("[::1]", True), ("localhost", True)],
        *[("LOCALHOST", True), ("::ffff:127.0.0.1", True), ("0.0.0.0", False), ("::", False), ("10.0.0.5", False)],
        *[("example.com", False), ("", False)],
    ],
)
def test_loopback_hosts(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


# the job as run with ``--host 0.0.0.0``, but bound to 127.0.0.1 all the same: the test reaches no other interface
_SERVE_ON_LOOPBACK = """
import sys
import jobs.serve as serve
real = serve.NamespaceServer
serve.NamespaceServer = lambda root, host, **kw: real(root, host="127.0.0.1", **kw)
sys.exit(serve.main(sys.argv[1:]))
"""


def test_the_serve_job_warns_on_an_open_host_and_finishes_a_request_in_flight(served: Served) -> None:
    with subprocess.Popen(
        [sys.executable, "-c", _SERVE_ON_LOOPBACK, "--root", served.root, "--host", "0.0.0.0", "--port", "0"],
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        try:
            line = proc.stdout.readline()  # type: ignore[union-attr]
            assert line.startswith(f"serving {served.root} at http://127.0.0.1:"), line
            port = int(line.rsplit(":", 1)[1])
            body = b'{"version": null}'
            with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
                sock.sendall(
                    f"POST /v1/table/{served.table}/describe HTTP/1.1\r\nHost: x\r\n".encode()
                    + b"Content-Length: %d\r\n\r\n%s" % (len(body), body[:4])
                )
                time.sleep(0.5)  # the request is in flight: its head is read, its body is not all there
                proc.send_signal(signal.SIGTERM)
                time.sleep(0.5)
                sock.sendall(body[4:])
                data, _ = _read(sock, quiet=5.0)
            assert _statuses(data) == [200]
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    warnings = [line for line in err.splitlines() if line.startswith("warning:")]
    assert warnings == [
        f"warning: serving {served.root} on 0.0.0.0 without --token-env: anyone who can reach this port "
        "can read the namespace"
    ], err
