"""The partitioned namespace over REST, through pylance's own ``RestNamespace`` client.

The in-process client (tests/test_namespace_api.py holds it to pylance's directory
client and to the rows) is the oracle for the answers; pylance's REST client is the
oracle for the protocol: it must parse every answer and map every error to its class.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import lance_namespace as ln
import pytest
from lance_namespace import (
    DescribeNamespaceRequest,
    DescribeTableRequest,
    DropTableRequest,
    ListNamespacesRequest,
    ListTablesRequest,
    NamespaceExistsRequest,
    TableExistsRequest,
)
from lance_namespace.errors import (
    ErrorCode,
    InvalidInputError,
    LanceNamespaceError,
    NamespaceNotFoundError,
    TableNotFoundError,
    UnsupportedOperationError,
)
from test_namespace_api import SCHEMA, _rows, _tables, _tree

from partitioning import NamespaceServer, PartitionedNamespace
from partitioning.service.rest import MANIFEST_VERSION_HEADER, MAX_BODY_BYTES
from partitioning.tables.write import write_table

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture()
def root(tmp_path: Path) -> str:
    root = str(tmp_path / "ns")
    ns = PartitionedNamespace.create(root, SCHEMA, ["day", "bucket[2](id)"])
    write_table(ns, _rows(range(0, 40)))
    PartitionedNamespace.load(root).evolve_partition_spec(["day"])
    write_table(PartitionedNamespace.load(root), _rows(range(40, 70)))
    return root


def _rest(server: NamespaceServer, **headers: str) -> ln.LanceNamespace:
    return ln.connect("rest", {"uri": server.uri, **{f"header.{k}": v for k, v in headers.items()}})


def _answers(client: ln.LanceNamespace) -> dict[str, Any]:
    tree = _tree(client)
    out: dict[str, Any] = {"tree": tree}
    for ids in _tables(tree):
        table = client.describe_table(DescribeTableRequest(id=ids))
        out["$".join(ids)] = (table.version, table.location, table.table, table.namespace, table.properties or {})
        for depth in range(len(ids)):
            out["$".join(ids[:depth])] = client.describe_namespace(DescribeNamespaceRequest(id=ids[:depth])).properties
    return out


def test_rest_answers_are_the_in_process_answers(root: str) -> None:
    with NamespaceServer(root) as server:
        assert _answers(_rest(server)) == _answers(ln.connect("partitioned", {"root": root}))
        client = _rest(server)
        client.namespace_exists(NamespaceExistsRequest(id=["v1"]))
        client.table_exists(TableExistsRequest(id=_tables(_tree(client))[0]))


def test_pylance_over_rest_opens_only_committed_versions_and_pins_a_snapshot(tmp_path: Path) -> None:
    """pylance's ``lance.dataset(namespace_client=<REST client>, table_id=...)`` asks the server
    for the version (managed versioning): the committed one, not a crashed writer's later one;
    a client sending the pinning header gets what that ``__manifest`` version recorded."""
    import lance

    root = str(tmp_path / "ns")
    ns = PartitionedNamespace.create(root, SCHEMA, ["id"])
    write_table(ns, _rows([1, 1]))
    pin = PartitionedNamespace.load(root).manifest_version
    write_table(PartitionedNamespace.load(root), _rows([1]))
    (table,) = PartitionedNamespace.load(root).partitions()
    lance.write_dataset(_rows([1, 1, 1]), table.uri, mode="append")  # a writer that died before __manifest
    ids = table.object_id.split("$")
    with NamespaceServer(root) as server:
        latest = _rest(server)
        pinned = ln.connect("rest", {"uri": server.uri, f"header.{MANIFEST_VERSION_HEADER}": str(pin)})
        assert lance.dataset(table.uri).count_rows() == 6  # the latest on storage holds the crashed rows
        assert lance.dataset(namespace_client=latest, table_id=ids).count_rows() == 3
        assert lance.dataset(namespace_client=pinned, table_id=ids).count_rows() == 2
        with pytest.raises((OSError, ValueError), match="never committed"):
            lance.dataset(namespace_client=latest, table_id=ids, version=table.read_version + 1)


def test_pages_and_a_commit_made_while_serving(tmp_path: Path) -> None:
    root = str(tmp_path / "ns")
    ns = PartitionedNamespace.create(root, SCHEMA, ["id"])
    write_table(ns, _rows(range(12)))
    with NamespaceServer(root) as server:
        client = _rest(server)
        names, token = [], None
        while True:
            page = client.list_namespaces(ListNamespacesRequest(id=["v1"], limit=5, page_token=token))
            names += page.namespaces
            token = page.page_token
            if not token:
                break
        assert names == sorted(names) and len(names) == len(set(names)) == 12
        write_table(PartitionedNamespace.load(root), _rows(range(12, 15)))
        assert len(client.list_namespaces(ListNamespacesRequest(id=["v1"])).namespaces) == 15


@pytest.mark.parametrize(
    ("call", "error", "code"),
    [
        (lambda c: c.list_namespaces(ListNamespacesRequest(id=["v9"])), NamespaceNotFoundError, 1),
        (lambda c: c.list_tables(ListTablesRequest(id=[".."])), NamespaceNotFoundError, 1),
        (lambda c: c.describe_namespace(DescribeNamespaceRequest(id=["v1", "../x"])), NamespaceNotFoundError, 1),
        (lambda c: c.describe_table(DescribeTableRequest(id=["v1", "x", "dataset"])), TableNotFoundError, 4),
        (lambda c: c.list_namespaces(ListNamespacesRequest(id=["v1"], limit=0)), InvalidInputError, 13),
        (lambda c: c.drop_table(DropTableRequest(id=["v1", "x", "dataset"])), UnsupportedOperationError, 0),
    ],
)
def test_errors_arrive_as_their_classes_and_codes(root: str, call: Any, error: type, code: int) -> None:
    with NamespaceServer(root) as server, pytest.raises(error) as raised:
        call(_rest(server))
    assert raised.value.code == code


def test_a_token_is_required_when_set(root: str) -> None:
    with NamespaceServer(root, token="s3cret") as server:
        with pytest.raises(LanceNamespaceError) as refused:
            _rest(server).list_namespaces(ListNamespacesRequest(id=["v1"]))
        assert refused.value.code == ErrorCode.UNAUTHENTICATED
        with pytest.raises(LanceNamespaceError):
            _rest(server, Authorization="Bearer wrong").list_namespaces(ListNamespacesRequest(id=["v1"]))
        assert _rest(server, Authorization="Bearer s3cret").list_namespaces(ListNamespacesRequest(id=["v1"])).namespaces


def test_a_large_body_is_refused_and_a_stalled_request_blocks_no_other(root: str) -> None:
    with NamespaceServer(root) as server:
        stalled = socket.create_connection(("127.0.0.1", server.port))
        stalled.sendall(b"POST /v1/namespace/v1/describe HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
        try:
            assert _rest(server).list_namespaces(ListNamespacesRequest(id=["v1"])).namespaces  # answered meanwhile
            request = urllib.request.Request(
                f"{server.uri}/v1/namespace/v1/describe",
                data=b"{}",
                headers={"Content-Length": str(MAX_BODY_BYTES + 1)},
                method="POST",
            )
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(request, timeout=10)
            assert refused.value.code == 413  # Content Too Large, refused before the body is read
            assert json.loads(refused.value.read())["code"] == ErrorCode.INVALID_INPUT
            for length in ("-5", "x"):  # would read to the end of a stream that never ends
                with socket.create_connection(("127.0.0.1", server.port), timeout=10) as bad:
                    bad.sendall(f"POST /v1/namespace/v1/describe HTTP/1.1\r\nContent-Length: {length}\r\n\r\n".encode())
                    assert b" 400 " in bad.recv(4096).split(b"\r\n")[0]
        finally:
            stalled.close()


def test_the_serve_job_serves_until_it_is_stopped(root: str) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO), LP_TOKEN="t0ken")
    with subprocess.Popen(
        [sys.executable, str(REPO / "jobs" / "serve.py"), "--root", root, "--port", "0", "--token-env", "LP_TOKEN"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        try:
            line = proc.stdout.readline()  # type: ignore[union-attr]
            assert line.startswith(f"serving {root} at http://127.0.0.1:"), line
            client = ln.connect("rest", {"uri": line.split(" at ")[1].strip(), "header.Authorization": "Bearer t0ken"})
            assert client.list_namespaces(ListNamespacesRequest(id=[])).namespaces == ["v1", "v2"]
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err


def test_the_serve_job_refuses_a_root_that_is_not_a_namespace(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(REPO / "jobs" / "serve.py"), "--root", str(tmp_path / "none"), "--port", "0"],
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: ") and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_twenty_thousand_partitions_page_through_rest(tmp_path: Path) -> None:
    """Every partition of a 20,000-partition namespace, listed page by page over REST, once each."""
    from wide_namespace import wide_namespace

    root = wide_namespace(tmp_path, 20_000)
    with NamespaceServer(root) as server:
        client = _rest(server)
        days = client.list_namespaces(ListNamespacesRequest(id=["v1"])).namespaces
        assert len(days) == 20
        seen, pages = [], 0
        for day in days:
            token = None
            while True:
                page = client.list_namespaces(ListNamespacesRequest(id=["v1", day], limit=500, page_token=token))
                seen += [(day, name) for name in page.namespaces]
                pages += 1
                token = page.page_token
                if not token:
                    break
        assert len(seen) == len(set(seen)) == 20_000
        assert pages == 20 * 2
