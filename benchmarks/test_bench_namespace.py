"""Lance namespace clients over REST: describing a table of a namespace with many partitions.

Our server (:class:`partitioning.NamespaceServer`, which answers from ``__manifest``) against
pylance's own ``RestAdapter`` serving the same root as a plain directory namespace, both
through pylance's ``RestNamespace`` client, requests interleaved one by one: ``describe_table``
of the one written table, p50 and p99 over ``REQUESTS`` each, and listing every partition
namespace page by page (ours; the directory namespace lists directories, and only one is
written here). Two shapes: 2,000 and 20,000 partitions (tests/wide_namespace.py). Target:
a describe within 2x the directory namespace's.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import lance_namespace as ln
import pytest
from lance.namespace import RestAdapter
from lance_namespace import DescribeTableRequest, ListNamespacesRequest, ListTablesRequest

from partitioning import NamespaceServer
from tests.wide_namespace import wide_namespace

pytestmark = pytest.mark.bench

REQUESTS = 1_000


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
