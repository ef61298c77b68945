"""What the namespace REST server (:mod:`partitioning.service.rest`) checks before it answers.

Two halves, both about hostile or broken clients:

- :class:`GuardedH11Protocol`, uvicorn's h11 protocol with the deadlines uvicorn leaves out:
  a connection that never sends a byte is closed after the keep-alive timeout (uvicorn arms
  that timer only after a first answer), a request head must be complete within
  :data:`HEAD_TIMEOUT` seconds of its first byte (a head sent a byte at a time otherwise
  keeps the connection), and a connection whose answer the client does not read is cut off
  a keep-alive timeout after the answer was complete;
- the request checks: the body read with a size limit and a deadline (:func:`read_body`),
  the bearer token (:func:`check_token`), and the inputs whose wrong type would otherwise
  reach the namespace API: the JSON body (:func:`json_object`), ``version``
  (:func:`body_version`), ``limit`` (:func:`limit_of`) and the pinning header
  (:func:`pinned_version`).

A check that fails raises :class:`Refused`; the server answers it with the protocol's
error body.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import socket
from collections.abc import Mapping
from typing import Any

import h11
from lance_namespace.errors import ErrorCode
from starlette.datastructures import Headers
from starlette.requests import Request
from uvicorn.protocols.http.h11_impl import H11Protocol

from partitioning.errors import InvalidInput

HEAD_TIMEOUT = 5.0
"""Seconds a request head (request line and headers) may take from its first byte."""
BODY_TIMEOUT = 5.0
"""Seconds a request body may take to arrive once its head has."""
MAX_JSON_DEPTH = 8
"""How deep a request body's JSON may nest (the protocol's bodies nest 2 deep)."""
_MAX_VERSION = 1 << 63  # Lance versions are unsigned 64-bit; anything at or above this names none
_MAX_LIMIT_DIGITS = 18


class Refused(Exception):
    """A request refused before it reaches the namespace: its HTTP status, error code and
    whether the connection must close (its body was not read, or its framing is suspect)."""

    def __init__(self, status: int, code: ErrorCode, message: str, *, close: bool = False) -> None:
        super().__init__(message)
        self.status, self.code, self.close = status, code, close


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol, with deadlines on a silent connection, a slow head and an unread answer."""

    _head_deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            # asyncio sets this only on sockets whose proto is IPPROTO_TCP; without it, Nagle's
            # algorithm and the client's delayed ACK hold an answer's second write back ~40 ms
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # the keep-alive timer, armed before the first request as well as after each answer
        self.timeout_keep_alive_task = self.loop.call_later(self.timeout_keep_alive, self.timeout_keep_alive_handler)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        waiting = self.conn.their_state is h11.IDLE and not self.transport.is_closing()
        if waiting and self._head_deadline is None:  # a head has begun: it has HEAD_TIMEOUT to end
            self._head_deadline = self.loop.call_later(HEAD_TIMEOUT, self._cut)
        elif not waiting:
            self._clear_head_deadline()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.transport.is_closing() and self.transport.get_write_buffer_size():
            # closing, but the client is not reading its answer: bound the wait for it
            self.timeout_keep_alive_task = self.loop.call_later(self.timeout_keep_alive, self._cut)

    def timeout_keep_alive_handler(self) -> None:
        if self.transport.get_write_buffer_size():
            self._cut()
        else:
            super().timeout_keep_alive_handler()

    def connection_lost(self, exc: Exception | None) -> None:
        self._clear_head_deadline()
        self._unset_keepalive_if_required()
        super().connection_lost(exc)

    def _clear_head_deadline(self) -> None:
        if self._head_deadline is not None:
            self._head_deadline.cancel()
            self._head_deadline = None

    def _cut(self) -> None:
        self._unset_keepalive_if_required()
        self._head_deadline = None
        self.transport.abort()


def check_framing(headers: Headers) -> None:
    """Refuse a body framed twice (RFC 9112 6.1: the server must close after answering it)."""
    if "transfer-encoding" in headers and "content-length" in headers:
        raise Refused(
            400,
            ErrorCode.INVALID_INPUT,
            "a request with both Transfer-Encoding and Content-Length is refused",
            close=True,
        )


def check_token(headers: Headers, token: bytes) -> None:
    """Require ``Authorization: Bearer <token>`` (the scheme in any case, the token compared in constant time)."""
    scheme, _, sent = headers.get("authorization", "").partition(" ")
    matches = hmac.compare_digest(sent.strip().encode("latin-1"), token)
    if not (matches and scheme.lower() == "bearer"):
        raise Refused(
            401,
            ErrorCode.UNAUTHENTICATED,
            "this namespace server needs 'Authorization: Bearer <token>'",
            close=True,  # the body is left unread: nothing of it may be taken for a next request
        )


async def read_body(request: Request, limit: int) -> bytes:
    """The body, at most ``limit`` bytes (a larger ``Content-Length`` is refused before any is
    read; a chunked body is counted as it arrives), within :data:`BODY_TIMEOUT` seconds."""
    length = request.headers.get("content-length")
    if length is not None and int(length) > limit:  # h11 has checked it is digits
        raise Refused(
            413, ErrorCode.INVALID_INPUT, f"request body of {length} bytes is over the limit of {limit}", close=True
        )
    chunks, size = [], 0
    try:
        async with asyncio.timeout(BODY_TIMEOUT):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise Refused(
                        413, ErrorCode.INVALID_INPUT, f"request body is over the limit of {limit} bytes", close=True
                    )
                chunks.append(chunk)
    except TimeoutError as exc:
        raise Refused(
            408, ErrorCode.INVALID_INPUT, f"request body not received within {BODY_TIMEOUT:g} s", close=True
        ) from exc
    return b"".join(chunks)


def json_object(raw: bytes) -> dict[str, Any]:
    """The body as a JSON object (an empty body is ``{}``), nested at most :data:`MAX_JSON_DEPTH` deep."""
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except ValueError as exc:
        raise InvalidInput(f"request body is not JSON: {exc}") from exc
    except RecursionError as exc:
        raise InvalidInput(f"request body nests deeper than {MAX_JSON_DEPTH} levels") from exc
    if not isinstance(body, dict):
        raise InvalidInput(f"request body must be a JSON object, not {type(body).__name__}")
    level, depth = [body], 1
    while level:
        level = [v for item in level for v in (item.values() if isinstance(item, dict) else item)]
        level = [v for v in level if isinstance(v, dict | list)]
        depth += bool(level)
        if depth > MAX_JSON_DEPTH:
            raise InvalidInput(f"request body nests deeper than {MAX_JSON_DEPTH} levels")
    return body


def body_version(body: Mapping[str, Any]) -> int | None:
    """The body's ``version``: absent or null is the latest; else a non-negative JSON integer."""
    version = body.get("version")
    if version is None:
        return None
    if isinstance(version, bool) or not isinstance(version, int) or not 0 <= version < _MAX_VERSION:
        raise InvalidInput(f"version must be a non-negative whole number or null, not {json.dumps(version)[:40]}")
    return version


def limit_of(query: Mapping[str, list[str]]) -> int | None:
    """The ``limit`` query parameter: absent, or ASCII digits (the namespace refuses 0)."""
    text = query.get("limit", [None])[0]
    if text is None:
        return None
    if not (text.isascii() and text.isdigit() and len(text) <= _MAX_LIMIT_DIGITS):
        raise InvalidInput(f"limit must be a whole number, not {text[:40]!r}")
    return int(text)


def descending_of(query: Mapping[str, list[str]]) -> bool | None:
    """The ``descending`` query parameter: ``true`` or ``false`` (any case), or absent."""
    text = query.get("descending", [None])[0]
    if text is None:
        return None
    if text.lower() not in ("true", "false"):
        raise InvalidInput(f"descending must be true or false, not {text!r}")
    return text.lower() == "true"


def pinned_version(headers: Headers, name: str) -> int | None:
    """The ``__manifest`` version the header ``name`` pins, if it is sent: a positive whole
    number of ASCII digits below 10**19, sent once."""
    values = headers.getlist(name)
    if not values:
        return None
    text = values[0].strip()
    if len(values) > 1 or not (text.isascii() and text.isdigit() and len(text) <= 19 and 0 < int(text) < 10**19):
        shown = ", ".join(repr(v[:40]) for v in values)
        raise InvalidInput(f"header {name}: {shown} is not a positive whole number (a __manifest version)")
    return int(text)
