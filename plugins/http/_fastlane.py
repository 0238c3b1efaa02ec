"""The daemon's connection handler: a lean HTTP/1.1 lane in front of hypercorn.

Each accepted connection starts here. Requests for routes with a ``fast_handler`` (the
A2A JSON-RPC and HTTP+JSON endpoints) are parsed by ``_h1``, checked by the shared
``Gate`` and answered directly, keep-alive and pipelining included. The first request
that is anything else (another route, a websocket upgrade, ``Expect``, HEAD/OPTIONS, or
a fast handler that declines, e.g. to stream SSE) is handed to hypercorn's own
per-connection server with the bytes read so far replayed first; from then on the
connection belongs to hypercorn (and Quart). So is a connection that opens with the HTTP/2
prior-knowledge preface.

Every wait has a deadline: the first request head within ``http.head_timeout_s`` of the
accept, a keep-alive connection idles at most ``http.keep_alive_s`` and a later head then
completes within ``head_timeout_s`` of its first byte, a body arrives within
``BODY_TIMEOUT_S`` and a response that has to wait for room in the socket is written within
``SEND_TIMEOUT_S`` (or the read deadline still running, for an early refusal).

The lane also admits connections (``admit``): at ``http.max_connections`` open ones, the
one idle the longest (no request under way) is closed to make room, and if none is idle
the newcomer gets a fixed 503 and is closed. A connection has one cancel scope whose
deadline is that of the wait under way (none while a handler runs or after a hand-off):
moving a deadline costs a fraction of entering a new scope per receive and send.
"""

from __future__ import annotations

import errno
import logging
import math
import os
import socket
import time
from collections.abc import Callable
from typing import Any

import trio
from roost.kernel import RoostError

from ._common import (
    Refusal,
    canonical_path,
    common_headers,
    connection_base_url,
    internal_error,
    overloaded_response,
    refusal_for,
    render_refusal,
    too_large,
)
from ._h1 import (
    ParseError,
    RequestHead,
    RequestParser,
    error_response,
    reason_code,
    render_response,
)
from ._plain import PlainRequest, PlainResponse
from ._trace_headers import fast_lane_headers

log = logging.getLogger("roost.http")
access_log = logging.getLogger("roost.http.access")

MAX_RECV = 65536
BODY_TIMEOUT_S = 30.0
SEND_TIMEOUT_S = 30.0
FAST_METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE"})
# accept() failing for want of descriptors or memory: wait for room, never spin or crash
CAPACITY_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
OUT_OF_FDS_WAIT_S = 0.5
WARN_EVERY_S = 10.0


class ReplayStream:
    """A socket stream whose first ``receive_some`` returns bytes already read from it."""

    def __init__(self, stream: Any, data: bytes) -> None:
        self.transport_stream = stream
        self.socket = stream.socket
        self._data = data

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        if self._data:
            data, self._data = self._data, b""
            await trio.lowlevel.checkpoint()
            return data
        return await self.transport_stream.receive_some(max_bytes)

    async def send_all(self, data: bytes) -> None:
        await self.transport_stream.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.transport_stream.wait_send_all_might_not_block()

    async def send_eof(self) -> None:
        await self.transport_stream.send_eof()

    async def aclose(self) -> None:
        await self.transport_stream.aclose()


class _Closed(Exception):
    """The peer went away or a deadline passed: close the connection quietly."""


class FastLane:
    """Serve connections: fast routes here, everything else through ``hand_off(stream)``.

    ``route(method, path)`` returns ``(endpoint, path_args)`` or None; ``state`` is the
    app's ``DaemonState`` (gate, settings, fast handlers, body limits)."""

    def __init__(
        self,
        state: Any,
        route: Callable[[str, str], tuple[str, dict[str, Any]] | None],
        hand_off: Callable[[Any], Any],
    ) -> None:
        self.state = state
        self.route = route
        self.hand_off = hand_off
        settings = state.settings
        self.keep_alive_s = settings.keep_alive_s
        self.head_timeout_s = settings.head_timeout_s
        self.max_connections = settings.max_connections
        self.closing = False
        self.open = 0  # connections admitted and not yet closed
        # Scopes of connections idle now (no request under way), the longest idle first.
        self._idle: dict[trio.CancelScope, None] = {}
        self._room = trio.Event()  # set when a connection closes
        self._warned: dict[str, float] = {}
        # common_headers of a request without Origin, for a response with no headers of its own
        self._plain_headers = [(name, value) for name, value, _ in common_headers(settings, None)]

    def close(self) -> None:
        """Graceful shutdown: idle connections (between requests, or not yet sent anything)
        close now, busy ones after their response."""
        self.closing = True
        for scope in list(self._idle):
            scope.cancel()

    # ---- admission ---------------------------------------------------------------------

    async def serve_listener(self, listener: Any, nursery: trio.Nursery) -> None:
        """Accept connections from ``listener`` until cancelled; each is served in ``nursery``.

        Unlike ``trio.serve_listeners``, running out of descriptors (EMFILE and the like)
        logs one line every ``WARN_EVERY_S`` and waits for a connection to close (at most
        ``OUT_OF_FDS_WAIT_S``), closing the longest-idle one to free a descriptor."""
        async with listener:
            while True:
                try:
                    stream = await listener.accept()
                except OSError as exc:
                    if exc.errno not in CAPACITY_ERRNOS:
                        raise
                    self._warn(
                        "fds",
                        "cannot accept connections: %s (open: %d; http.max_connections: %d); "
                        "waiting for one to close. Lower http.max_connections or raise the "
                        "open-file limit (ulimit -n)",
                        os.strerror(exc.errno or 0),
                        self.open,
                        self.max_connections,
                    )
                    self._evict_idle()
                    with trio.move_on_after(OUT_OF_FDS_WAIT_S):
                        await self._room.wait()
                    continue
                self.admit(stream, nursery)

    def admit(self, stream: Any, nursery: trio.Nursery) -> None:
        """Serve ``stream`` in ``nursery``, or refuse it with a 503 when the daemon is at
        ``http.max_connections`` and no connection is idle to make room."""
        if self.open >= self.max_connections and not self._evict_idle():
            self._warn(
                "limit",
                "connection limit reached (%d open, http.max_connections); new connections get 503",
                self.open,
            )
            _refuse_now(stream)
            return
        self.open += 1
        nursery.start_soon(self._serve, stream)

    async def _serve(self, stream: Any) -> None:
        try:
            await self.handle(stream)
        finally:
            self.open -= 1
            self._room.set()
            self._room = trio.Event()

    def _evict_idle(self) -> bool:
        """Close the connection idle the longest; False when none is idle."""
        if not self._idle:
            return False
        scope = next(iter(self._idle))
        del self._idle[scope]
        scope.cancel()
        return True

    def _warn(self, key: str, message: str, *args: Any) -> None:
        now = time.monotonic()
        if now - self._warned.get(key, -math.inf) >= WARN_EVERY_S:
            self._warned[key] = now
            log.warning(message, *args)

    # ---- one connection ----------------------------------------------------------------

    async def handle(self, stream: Any) -> None:
        """Serve one accepted connection until it closes or is handed off."""
        try:
            remote_addr = str(stream.socket.getpeername()[0])
        except (AttributeError, OSError, IndexError, TypeError):
            remote_addr = None
        try:
            local = stream.socket.getsockname()
            local_addr = str(local[0])
        except (AttributeError, OSError, IndexError, TypeError):
            local, local_addr = None, None
        conn = (remote_addr, local_addr, connection_base_url(self.state.public_url, local))
        parser = RequestParser()
        try:
            # Cancelled at a deadline (or by close() while idle): the connection just closes.
            with trio.CancelScope() as io:
                first = True
                while True:
                    try:
                        head = await self._read_head(stream, io, parser, first)
                    except ParseError as exc:
                        await self._send(stream, io, error_response(exc))
                        await _linger(stream)
                        return
                    if head is None:
                        return
                    first = False
                    # HTTP/2 prior knowledge (head.http_version "2.0", method PRI) is handed off too
                    plain = not (head.upgrade or head.expect) and head.method in FAST_METHODS and head.http_version != "2.0"
                    found = self.route(head.method, head.path) if plain else None
                    handler = None if found is None else self.state.fast_handlers.get(found[0])
                    if handler is None:
                        io.deadline = math.inf  # hypercorn keeps its own deadlines
                        await self.hand_off(ReplayStream(stream, parser.buffered))
                        return
                    if not await self._serve_one(stream, io, parser, head, found[0], found[1], handler, conn):
                        return
        except _Closed:
            return
        except Exception:
            log.exception("fast lane: unexpected error on a connection from %s", remote_addr)
        finally:
            # idempotent: hypercorn closes a connection it was handed, too
            with trio.CancelScope(shield=True):
                await stream.aclose()

    async def _serve_one(
        self,
        stream: Any,
        io: trio.CancelScope,
        parser: RequestParser,
        head: RequestHead,
        endpoint: str,
        path_args: dict[str, Any],
        handler: Callable[..., Any],
        conn: tuple[str | None, str | None, str],
    ) -> bool:
        """Answer one fast request; False when the connection is done (closed or handed off).
        ``conn``: the peer's address, the address it reached and the daemon's base URL."""
        state = self.state
        started = time.perf_counter()
        remote_addr, local_addr, base_url = conn
        refusal, charged = state.gate.check(endpoint, head.headers, remote_addr, head.content_length, local_addr=local_addr)
        limit = state.body_limits.get(endpoint, state.settings.max_body_bytes)
        renderer = state.error_shapes.by_endpoint.get(endpoint)
        if refusal is not None:
            # Keep the connection only if the unread body is already here to skip.
            keep = False
            if head.keep_alive and not head.chunked and (head.content_length or 0) <= limit:
                keep = parser.body(limit) is not None
            if keep:
                parser.finish()
            await self._respond(stream, io, head, _refusal_response(refusal, renderer), keep, remote_addr, started)
            if not keep:
                await _linger(stream)
            return keep
        try:
            body = await self._read_body(stream, io, parser, limit)
        except ParseError as exc:
            if exc.status == 413:
                refusal = too_large(state.settings, limit, head.path)
            else:
                refusal = Refusal(exc.status, {"code": reason_code(exc.status), "message": exc.message})
            await self._respond(stream, io, head, _refusal_response(refusal, renderer), False, remote_addr, started)
            await _linger(stream)
            return False
        # the path as routed (no trailing slash), as Quart's request.path has it too
        headers = await fast_lane_headers(state, head.method, head.headers, stream)
        request = PlainRequest(
            head.method, canonical_path(head.path), headers, body, query=head.query, remote_addr=remote_addr, base_url=base_url,
            principal=state.gate.principal(head.headers),
        )
        io.deadline = math.inf  # a handler may take as long as its agent does
        try:
            response = await handler(request, **path_args)
        except RoostError as exc:
            response = _refusal_response(refusal_for(exc, head.path), renderer)
        except Exception as exc:
            log.error("unexpected error serving %s", head.path, exc_info=exc)
            response = _refusal_response(internal_error(), renderer)
        if response is None:  # declined: Quart serves it (and charges the rate limit itself)
            if charged is not None:
                state.limiter.refund(charged)
            await self.hand_off(ReplayStream(stream, parser.buffered))
            return False
        parser.finish()
        keep = head.keep_alive and not self.closing
        await self._respond(stream, io, head, response, keep, remote_addr, started)
        return keep

    async def _respond(
        self,
        stream: Any,
        io: trio.CancelScope,
        head: RequestHead,
        response: PlainResponse,
        keep: bool,
        remote_addr: str | None,
        started: float,
    ) -> None:
        origin = head.headers.get("origin")
        if origin is None and not response.headers:  # the usual case: what the loop below yields
            headers = [("content-type", response.content_type), *self._plain_headers]
        else:
            headers = [("content-type", response.content_type), *response.headers]
            present = {name.lower() for name, _ in headers}
            for name, value, replace in common_headers(self.state.settings, origin):
                lower = name.lower()
                if replace and lower in present:
                    headers = [(n, v) for n, v in headers if n.lower() != lower]
                if replace or lower not in present:
                    headers.append((name, value))
        data = render_response(response.status, headers, response.body, keep_alive=keep, http_version=head.http_version)
        await self._send(stream, io, data)
        if access_log.isEnabledFor(logging.INFO):
            micros = int((time.perf_counter() - started) * 1e6)
            access_log.info('%s "%s %s HTTP/%s" %s %s %sus', remote_addr, head.method, head.path, head.http_version, response.status, len(response.body), micros)

    async def _send(self, stream: Any, io: trio.CancelScope, data: bytes) -> None:
        try:
            if type(stream) is trio.SocketStream and data:
                await _send_all(stream, data, io)
            else:
                io.deadline = trio.current_time() + SEND_TIMEOUT_S
                await stream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            raise _Closed from None

    async def _receive(self, stream: Any, io: trio.CancelScope, deadline: float, *, idle: bool) -> bytes:
        if io.deadline != deadline:
            io.deadline = deadline
        if idle:
            if self.closing:
                raise _Closed
            self._idle[io] = None
        try:
            data = await stream.receive_some(MAX_RECV)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            raise _Closed from None
        finally:
            if idle:
                self._idle.pop(io, None)
        # A deadline or close() that came as the data did: never run a handler in a cancelled scope.
        if io.cancel_called or not data:
            raise _Closed
        return data

    async def _read_head(self, stream: Any, io: trio.CancelScope, parser: RequestParser, first: bool) -> RequestHead | None:
        deadline = trio.current_time() + (self.head_timeout_s if first else self.keep_alive_s)
        head = parser.head()
        if head is not None:
            # Pipelined: the request was read with an earlier one. A send does not yield when
            # the socket takes the bytes at once (see _send_all), so yield here: every request
            # passes at least one schedule point, and one connection cannot starve the others.
            await trio.lowlevel.checkpoint()
            return head
        while head is None:
            # Idle (nothing of a request yet, first one included): close() ends the wait.
            idle = not parser.buffer
            try:
                data = await self._receive(stream, io, deadline, idle=idle)
            except _Closed:
                return None
            if idle and not first:  # a new request began: it gets the head timeout from now
                deadline = trio.current_time() + self.head_timeout_s
            parser.feed(data)
            head = parser.head()
        return head

    async def _read_body(self, stream: Any, io: trio.CancelScope, parser: RequestParser, limit: int) -> bytes:
        deadline = trio.current_time() + BODY_TIMEOUT_S
        while (body := parser.body(limit)) is None:
            parser.feed(await self._receive(stream, io, deadline, idle=False))
        return body


async def _send_all(stream: trio.SocketStream, data: bytes, io: trio.CancelScope) -> None:
    """``stream.send_all(data)`` without its closing schedule point when the socket takes
    every byte at once (a send that must wait for room yields while it waits, and gets
    ``SEND_TIMEOUT_S`` from then on ``io``: a response that fits costs no deadline change).

    Each request still passes a schedule point: its head or body was received (a receive
    yields whether or not it had to wait) or, pipelined, ``_read_head`` yields for it. A
    cancelled caller is stopped before anything is sent, as by ``send_all``; errors are
    OSError (the caller closes the connection on any)."""
    await trio.lowlevel.checkpoint_if_cancelled()
    fd = stream.socket.fileno()
    if fd < 0 or stream.socket.did_shutdown_SHUT_WR:
        raise trio.ClosedResourceError
    with memoryview(data) as view:
        sent = 0
        while sent < len(view):
            try:
                sent += os.write(fd, view[sent:])
            except BlockingIOError:
                if io.deadline == math.inf:
                    io.deadline = trio.current_time() + SEND_TIMEOUT_S
                await trio.lowlevel.wait_writable(fd)


LINGER_S = 2.0
LINGER_MAX_BYTES = 4 * 1024 * 1024


async def _linger(stream: Any) -> None:
    """Before closing with unread input: end our side, then read and drop what the peer
    still sends (bounded in time and bytes), so the close is not a reset that could
    destroy the error response before the client reads it."""
    with trio.move_on_after(LINGER_S):
        try:
            await stream.send_eof()
            dropped = 0
            while dropped < LINGER_MAX_BYTES:
                data = await stream.receive_some(MAX_RECV)
                if not data:
                    break
                dropped += len(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, trio.BusyResourceError, OSError):
            pass


def _refuse_now(stream: Any) -> None:
    """Answer a connection over the limit without a task: read what it already sent (so
    the close is not a reset that destroys the answer), write the fixed 503, close."""
    sock = stream.socket
    try:
        fd = sock.fileno()
        try:
            os.read(fd, MAX_RECV)
        except (BlockingIOError, InterruptedError):
            pass
        os.write(fd, overloaded_response())
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        pass
    finally:
        sock.close()


def _refusal_response(refusal: Refusal, renderer: Any) -> PlainResponse:
    body, content_type = render_refusal(refusal, renderer)
    return PlainResponse(refusal.status, body, content_type, tuple(refusal.headers.items()))
