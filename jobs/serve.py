"""Serve a partitioned namespace to Lance clients over the Lance Namespace REST protocol.

Needs no Spark; run it with the project's interpreter, e.g.::

    .venv/bin/python jobs/serve.py --root warehouse/events --port 2333

Prints ``serving <root> at http://127.0.0.1:<port>`` and answers until it is stopped
(Ctrl-C or SIGTERM: it stops accepting, lets the requests in flight finish, and exits with
status 0). Clients connect with
``lance_namespace.connect("rest", {"uri": "http://127.0.0.1:2333"})`` (pylance's
``RestNamespace``) and see the namespaces, properties and committed table versions
``__manifest`` records; the server is read-only. ``--port 0`` picks a free port.
``--host`` binds elsewhere than localhost; ``--token-env NAME`` requires
``Authorization: Bearer <token>``, the token read from the environment variable ``NAME``
(never from the command line, where other users of the machine could read it). A ``--host``
that is not a loopback address (``127.0.0.0/8``, ``::1``, ``localhost``) without
``--token-env`` prints one ``warning:`` line to stderr, then serves. Bad input prints one
``error:`` line and exits with status 2.

An object-store root (``s3://``, ``gs://``, ``az://``) takes Lance's storage options as
``--storage-option KEY=VALUE`` (repeatable).
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import signal
import sys
import threading

from jobs._cli import add_storage_option_argument, finish, run, storage_options
from partitioning import InvalidInput, PartitionedNamespace
from partitioning.service.rest import NamespaceServer


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="serve", description="Serve a Lance partitioned namespace over REST.")
    parser.add_argument("--root", required=True, help="namespace root (path or URI)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=2333, help="port (default 2333; 0 picks a free one)")
    parser.add_argument("--token-env", help="environment variable holding the bearer token clients must send")
    add_storage_option_argument(parser)
    return parser.parse_args(argv)


def is_loopback(host: str) -> bool:
    """Whether ``host`` is ``localhost`` or a loopback address (127.0.0.0/8, ::1, or IPv4-mapped)."""
    if host.lower().rstrip(".") == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:  # a host name: it may resolve anywhere
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return bool(address.is_loopback or (mapped is not None and mapped.is_loopback))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    stop = threading.Event()

    def body() -> None:
        token = None
        if args.token_env:
            token = os.environ.get(args.token_env)
            if not token:
                raise InvalidInput(f"--token-env {args.token_env}: the environment variable is unset or empty")
        options = storage_options(args)
        PartitionedNamespace.load(args.root, options)  # a root that is not a namespace fails here, once
        try:
            server = NamespaceServer(args.root, host=args.host, port=args.port, storage_options=options, token=token)
        except OSError as exc:
            raise InvalidInput(f"cannot serve on {args.host}:{args.port}: {exc.strerror or exc}") from exc
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        if token is None and not is_loopback(args.host):
            print(
                f"warning: serving {args.root} on {args.host} without --token-env: anyone who can reach this port "
                "can read the namespace",
                file=sys.stderr,
                flush=True,
            )
        with server:
            print(f"serving {args.root} at {server.uri}", flush=True)
            stop.wait()

    return run(body)


if __name__ == "__main__":
    sys.exit(finish(main()))
