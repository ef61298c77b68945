"""Lance namespace clients over REST: describing a table of a namespace with many partitions.

Our server (:class:`partitioning.NamespaceServer`, which answers from ``__manifest``) against
pylance's own ``RestAdapter`` serving the same root as a plain directory namespace, both
through pylance's ``RestNamespace`` client, requests interleaved one by one: ``describe_table``
of the one written table, p50 and p99 over ``REQUESTS`` each, and listing every partition
namespace page by page (ours; the directory namespace lists directories, and only one is
written here). Two shapes: 2,000 and 20,000 partitions (tests/wide_namespace.py). Target:
a describe within 2x the directory namespace's.

The HTTP stacks side by side (:func:`test_http_stacks_side_by_side`): our server (Starlette on
uvicorn's h11), the ``http.server`` one it replaced (benchmarks/baseline_http_server.py) and
pylance's ``RestAdapter`` (a directory namespace on the same root), each in its own process so
the load's client threads share no interpreter lock with a server. Requests per second and
p99 latency of ``describe_table`` and ``list_tables``, at 1 client and at 50 concurrent
clients (keep-alive ``http.client`` connections), the median of ``REPEATS`` runs
interleaved across the servers.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import lance_namespace as ln
import pytest
from lance.namespace import RestAdapter
from lance_namespace import DescribeTableRequest, ListNamespacesRequest, ListTablesRequest

from partitioning import NamespaceServer
from tests.wide_namespace import wide_namespace

pytestmark = pytest.mark.bench

REQUESTS = 1_000
REPO = Path(__file__).resolve().parents[1]


def _table_id(client: ln.LanceNamespace) -> list[str]:
    ids = ["v1"]
    while not client.list_tables(ListTablesRequest(id=ids)).tables:
        ids.append(client.list_namespaces(ListNamespacesRequest(id=ids)).namespaces[0])
    return [*ids, "dataset"]


def _pct(samples: list[float], q: float) -> float:
    return sorted(samples)[min(len(samples) - 1, int(q * len(samples)))] * 1000


@pytest.mark.parametrize("partitions", [2_000, 20_000])
def test_describe_table_over_rest_vs_a_directory_namespace(tmp_path: Path, partitions: int) -> None:
    root = wide_namespace(tmp_path, partitions)
    adapter = RestAdapter("dir", {"root": root}, port=0)
    adapter.start()
    try:
        with NamespaceServer(root) as server:
            ours = ln.connect("rest", {"uri": server.uri})
            theirs = ln.connect("rest", {"uri": f"http://127.0.0.1:{adapter.port}"})
            table = _table_id(ours)
            assert theirs.describe_table(DescribeTableRequest(id=table)).location == (
                ours.describe_table(DescribeTableRequest(id=table)).location
            )
            times: dict[str, list[float]] = {"ours": [], "directory": []}
            for _ in range(REQUESTS):
                for name, client in (("ours", ours), ("directory", theirs)):
                    start = time.perf_counter()
                    client.describe_table(DescribeTableRequest(id=table))
                    times[name].append(time.perf_counter() - start)
            start = time.perf_counter()
            listed = 0
            for day in ours.list_namespaces(ListNamespacesRequest(id=["v1"])).namespaces:
                token = None
                while True:
                    page = ours.list_namespaces(ListNamespacesRequest(id=["v1", day], limit=1000, page_token=token))
                    listed += len(page.namespaces)
                    token = page.page_token
                    if not token:
                        break
            listing = time.perf_counter() - start
    finally:
        adapter.stop()
    assert listed == partitions
    ratio = statistics.median(times["ours"]) / statistics.median(times["directory"])
    print(
        f"\n{partitions} partitions: describe_table p50/p99 ours {_pct(times['ours'], 0.5):.2f}/"
        f"{_pct(times['ours'], 0.99):.2f} ms, directory {_pct(times['directory'], 0.5):.2f}/"
        f"{_pct(times['directory'], 0.99):.2f} ms ({ratio:.2f}x, target <= 2x); "
        f"every partition namespace listed in {listing:.2f} s"
    )


# -- the HTTP stacks side by side ------------------------------------------------------------------

REPEATS = 5
PER_CLIENT = {1: 400, 50: 40}  # requests each client sends in one run
STACKS = {
    "ours": "Starlette + uvicorn h11 (new)",
    "before": "http.server (before)",
    "dir": "pylance RestAdapter (dir)",
}
_SERVE = """
import sys
kind, root = sys.argv[1:3]
if kind == "dir":
    from lance.namespace import RestAdapter
    server = RestAdapter("dir", {"root": root}, port=0)
    server.start()
else:
    if kind == "ours":
        from partitioning import NamespaceServer
    else:
        from benchmarks.baseline_http_server import NamespaceServer
    server = NamespaceServer(root).start()
print(server.port, flush=True)
sys.stdin.read()
server.stop()
"""


@contextmanager
def _served(kind: str, root: str) -> Iterator[int]:
    """The port of a server of ``kind`` on ``root`` in a process of its own, stopped on exit."""
    with subprocess.Popen(
        [sys.executable, "-c", _SERVE, kind, root],
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as proc:
        try:
            yield int(proc.stdout.readline())  # type: ignore[union-attr]
        finally:
            proc.stdin.close()  # type: ignore[union-attr]
            proc.wait(timeout=60)


def _connection(port: int) -> http.client.HTTPConnection:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.connect()
    assert conn.sock is not None
    conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as urllib3 and reqwest clients do
    return conn


def _ask(conn: http.client.HTTPConnection, request: tuple[str, str, bytes | None]) -> bytes:
    method, path, body = request
    conn.request(method, path, body=body, headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    data = response.read()
    assert response.status == 200, data
    return data


def _run(port: int, request: tuple[str, str, bytes | None], clients: int) -> tuple[float, float]:
    """Requests per second and p99 latency (ms) of ``clients`` connections sending ``request`` at once."""
    conns = [_connection(port) for _ in range(clients)]
    latencies: list[list[float]] = [[] for _ in range(clients)]
    ready = threading.Barrier(clients + 1)

    def client(i: int) -> None:
        ready.wait()
        for _ in range(PER_CLIENT[clients]):
            start = time.perf_counter()
            _ask(conns[i], request)
            latencies[i].append(time.perf_counter() - start)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    ready.wait()
    start = time.perf_counter()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - start
    for conn in conns:
        conn.close()
    samples = [x for xs in latencies for x in xs]
    assert len(samples) == clients * PER_CLIENT[clients]
    return len(samples) / wall, _pct(samples, 0.99)


def test_http_stacks_side_by_side(tmp_path: Path) -> None:
    root = wide_namespace(tmp_path, 2_000)
    table = _table_id(ln.connect("partitioned", {"root": root}))
    requests = {
        "describe_table": ("POST", f"/v1/table/{'$'.join(table)}/describe", b"{}"),
        "list_tables": ("GET", f"/v1/namespace/{'$'.join(table[:-1])}/table/list", None),
    }
    results: dict[tuple[str, str, int], list[tuple[float, float]]] = {}
    with _served("ours", root) as ours, _served("before", root) as before, _served("dir", root) as directory:
        ports = {"ours": ours, "before": before, "dir": directory}
        for request in requests.values():  # the same answers from all three
            answers = {}
            for name, port in ports.items():
                conn = _connection(port)
                answers[name] = json.loads(_ask(conn, request))
                conn.close()
            assert answers["ours"] == answers["before"]
            assert answers["dir"].get("location", answers["dir"]) == answers["ours"].get("location", answers["ours"])
        for kind, request in requests.items():
            for clients in PER_CLIENT:
                for _ in range(REPEATS):
                    for name, port in ports.items():
                        results.setdefault((kind, name, clients), []).append(_run(port, request, clients))
    lines = [
        f"\nHTTP stacks on a {2_000:,}-partition namespace: median of {REPEATS} interleaved runs "
        f"({PER_CLIENT[1]} requests at 1 client, {PER_CLIENT[50]} x 50 clients)",
        f"{'request':<15}{'server':<32}{'1 client req/s':>15}{'p99 ms':>9}{'50 clients req/s':>18}{'p99 ms':>9}",
    ]
    for kind in requests:
        for name, label in STACKS.items():
            row = f"{kind:<15}{label:<32}"
            for clients in PER_CLIENT:
                runs = results[(kind, name, clients)]
                rate, p99 = statistics.median(r for r, _ in runs), statistics.median(p for _, p in runs)
                row += f"{rate:>{15 if clients == 1 else 18}.0f}{p99:>9.2f}"
            lines.append(row)
    print("\n".join(lines))
