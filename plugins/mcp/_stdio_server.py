"""``roost mcp``: roost as an MCP server on stdin/stdout (NDJSON, or ``Content-Length``
framing for a client that opens with it). Only protocol reaches stdout: fd 1 is pointed at
stderr before anything else runs, so a stray ``print`` or child cannot corrupt the stream.

With a live daemon (``<home>/daemon.json``) it bridges stdio to the daemon's ``/mcp`` (one
kernel); otherwise it boots an in-process kernel.
"""

from __future__ import annotations

import json
import logging
import os
from collections import deque
from collections.abc import Awaitable, Callable
from contextlib import suppress
from functools import partial
from typing import TYPE_CHECKING, Any

import trio
from roost.kernel import jsonrpc as rpc

from . import _protocol as p
from ._framing import CONTENT_LENGTH, Frame, NotJson, Oversize, StdioFramer
from .transports._base import BatchedWriter

if TYPE_CHECKING:  # pragma: no cover
    from roost.kernel import KernelAPI

log = logging.getLogger("roost.mcp.stdio")

READ_CHUNK = 65536
BRIDGE_MAX_IN_FLIGHT = 64
BRIDGE_TIMEOUT_S = 600.0

Receive = Callable[[], Awaitable[Any]]
Send = Callable[[Any], Awaitable[None]]


def encode_message(message: Any) -> bytes:
    """Compact UTF-8 JSON (a lone surrogate, which UTF-8 cannot carry, as its ``\\uXXXX``
    escape); a value that is not JSON becomes an internal error for that id."""
    try:
        text = rpc.dumps(message)
    except (TypeError, ValueError, RecursionError) as exc:
        request_id = message.get("id") if isinstance(message, dict) else None
        log.error("cannot encode a reply as JSON: %s", exc)
        error = rpc.error_response(
            request_id, rpc.INTERNAL_ERROR, "internal error: the result is not JSON"
        )
        return json.dumps(error.to_dict(), separators=(",", ":")).encode("utf-8")
    return text.encode("utf-8", "backslashreplace")  # a lone surrogate as its JSON escape


async def stdio_loop(
    receive_stream: trio.abc.ReceiveStream,
    send_stream: trio.abc.SendStream,
    serve: Callable[[Receive, Send], Awaitable[None]],
) -> None:
    """Frame the byte streams into messages and run ``serve(receive, send)``. ``receive()``
    returns a decoded message, or a ``JsonRpcError`` for a line that is not JSON (-32700) or
    a message over ``MAX_MESSAGE_BYTES`` (-32600, drained); EndOfChannel when the peer closes."""
    framer = StdioFramer()
    pending: deque[Any] = deque()
    # Replies that queue up while one is written go out together in the next write.
    writer = BatchedWriter(send_stream)

    ended = False

    async def receive() -> Any:
        nonlocal ended
        while not pending:
            data = b"" if ended else await receive_stream.receive_some(READ_CHUNK)
            if not data:
                if ended or not framer.pending:
                    raise trio.EndOfChannel
                # The input ended inside a message: a last line without its newline is read (as
                # the MCP SDKs do); a Content-Length body cut short is not a message.
                ended = True
                if framer.mode == CONTENT_LENGTH:
                    pending.append(NotJson("", "the input ended inside a Content-Length body"))
                else:
                    pending.extend(framer.feed(b"\n"))
                continue
            pending.extend(framer.feed(data))
        event = pending.popleft()
        if isinstance(event, Frame):
            return event.message
        if isinstance(event, NotJson):
            log.warning("stdin: not JSON (%s): %s", event.error, event.line)
            return rpc.JsonRpcError(
                rpc.PARSE_ERROR, f"parse error: {event.error}; send one JSON-RPC object per line"
            )
        assert isinstance(event, Oversize)
        log.warning("stdin: dropped a message of %d bytes (limit %d)", event.size, event.limit)
        return rpc.JsonRpcError(
            rpc.INVALID_REQUEST,
            f"message of {event.size} bytes is over the limit "
            f"of {event.limit} bytes; it was skipped",
        )

    async def send(message: Any) -> None:
        payload = encode_message(message)
        try:
            data = framer.encode(payload)
        except ValueError as exc:
            request_id = message.get("id") if isinstance(message, dict) else None
            if request_id is None:
                log.error("dropping an outgoing notification: %s", exc)
                return
            error = rpc.error_response(
                request_id, rpc.INTERNAL_ERROR, f"the result is too large to send: {exc}"
            )
            data = framer.encode(encode_message(error.to_dict()))
        await writer.send(data)

    await serve(receive, send)


# ---- in-process ---------------------------------------------------------------------------------


async def serve_kernel_stdio(
    kernel: KernelAPI,
    receive_stream: trio.abc.ReceiveStream,
    send_stream: trio.abc.SendStream,
    *,
    agent: str | None = None,
) -> None:
    """Serve ``kernel``'s host surface (like ``/mcp``), or ``agent``'s own surface (like
    ``/agents/<agent>/mcp``), on a pair of byte streams."""
    from ._connection import serve_connection
    from ._server import McpServer

    server = McpServer(kernel, agent=agent)

    await stdio_loop(receive_stream, send_stream, partial(serve_connection, server))


# ---- bridge to a running daemon ---------------------------------------------------------------


async def _relay_sse(response: Any, deliver: Callable[[Any], Awaitable[None]]) -> None:
    """Hand each JSON message of an SSE response to ``deliver`` (other events are skipped)."""
    from roost.plugins.http.client import sse_events

    from .transports.sse import json_messages

    try:
        async for event in sse_events(response, max_bytes=p.MAX_MESSAGE_BYTES):
            for message in json_messages(event.data):
                await deliver(message)
    except ValueError as exc:  # an event over the 10 MB message limit
        log.warning("daemon stream dropped: %s", exc)


def is_jsonrpc_message(message: Any) -> bool:
    """Whether ``message`` is a JSON-RPC 2.0 request, notification or response (only those
    may reach the client: anything else on stdout breaks its reader)."""
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        return False
    if isinstance(message.get("method"), str):
        return True
    return "id" in message and ("result" in message) != ("error" in message)


class DaemonBridge:
    """Relays MCP messages between a stdio client and a daemon's ``/mcp``. Every request gets
    an answer: the daemon's, or an error saying why there is none."""

    def __init__(
        self, base_url: str, api_key: str | None, *, key_env: str = "ROOST_API_KEY"
    ) -> None:
        self.endpoint = base_url.rstrip("/") + "/mcp"
        self.api_key = api_key
        self.key_env = key_env
        self.session_id: str | None = None
        self.protocol_version: str | None = None
        self._stream_open = False
        self._told: set[str] = set()  # problems already said on stderr (once each)

    def _headers(self, message: Any) -> dict[str, str]:
        headers = {
            "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json",
        }
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        params = message.get("params") if isinstance(message, dict) else None
        version = None
        if isinstance(params, dict) and isinstance(params.get("_meta"), dict):
            version = params["_meta"].get(p.META_PROTOCOL_VERSION)
        if isinstance(version, str):
            headers[p.HEADER_PROTOCOL_VERSION] = version
            headers.update(p.request_headers(message))
        else:
            if self.session_id:
                headers[p.HEADER_SESSION_ID] = self.session_id
            if self.protocol_version:
                headers[p.HEADER_PROTOCOL_VERSION] = self.protocol_version
        return headers

    async def serve(self, receive: Receive, send: Send) -> None:
        import httpx
        from roost.plugins.http import daemon_http_client

        slots = trio.Semaphore(BRIDGE_MAX_IN_FLIGHT)
        timeout = httpx.Timeout(BRIDGE_TIMEOUT_S, connect=10.0)
        async with daemon_http_client(self.endpoint, timeout=timeout) as client:
            try:
                async with trio.open_nursery() as nursery:
                    while True:
                        try:
                            message = await receive()
                        except trio.EndOfChannel:
                            break
                        if isinstance(message, rpc.JsonRpcError):
                            await send(message.to_response().to_dict())
                            continue
                        if isinstance(message, dict) and message.get("method") == p.INITIALIZE:
                            # Inline: later requests need the session id it brings back.
                            await self._relay(client, message, send, nursery)
                            continue
                        await slots.acquire()
                        nursery.start_soon(self._relay_one, client, message, send, nursery, slots)
                    with trio.move_on_after(5):  # the relays in flight may finish first
                        for _ in range(BRIDGE_MAX_IN_FLIGHT):
                            await slots.acquire()
                    nursery.cancel_scope.cancel()
            finally:
                if self.session_id:
                    with trio.move_on_after(2, shield=True), suppress(httpx.HTTPError):
                        await client.delete(self.endpoint, headers=self._headers({}))

    async def _relay_one(self, client, message, send, nursery, slots) -> None:
        try:
            await self._relay(client, message, send, nursery)
        finally:
            slots.release()

    def _refusal(self, status: int, body: bytes) -> str:
        """Why the daemon refused, naming the fix (said once on stderr, too)."""
        from roost.plugins.http.client import http_error_text

        detail = http_error_text(body)
        if status in (401, 403):
            given = "a key that it refused" if self.api_key else "no key"
            message = (
                f"the roost daemon at {self.endpoint} requires an API key and roost mcp sent "
                f"{given} (HTTP {status}{': ' + detail if detail and status == 403 else ''}); "
                f"set {self.key_env} to the daemon's key in the environment of roost mcp (the "
                '"env" of your MCP client\'s server entry), or run roost mcp --no-daemon'
            )
        else:
            message = f"the roost daemon at {self.endpoint} answered HTTP {status}" + (
                f": {detail}" if detail else ""
            )
        if str(status) not in self._told:
            self._told.add(str(status))
            log.error("roost mcp: %s", message)
        return message

    async def _relay(self, client: Any, message: Any, send: Send, nursery: trio.Nursery) -> None:
        import httpx
        from roost.plugins.http.client import read_error_body

        method = message.get("method") if isinstance(message, dict) else None
        request_id = (
            message.get("id") if isinstance(message, dict) and "method" in message else None
        )
        answered = False

        async def deliver(reply: Any) -> None:
            nonlocal answered
            if isinstance(reply, dict) and "method" not in reply and reply.get("id") == request_id:
                answered = True
            await self._forward(reply, send)

        try:
            async with client.stream(
                "POST",
                self.endpoint,
                content=encode_message(message),
                headers=self._headers(message),
            ) as response:
                status = response.status_code
                if method == p.INITIALIZE and status == 200:
                    self.session_id = response.headers.get(p.HEADER_SESSION_ID) or self.session_id
                if status in (401, 403):
                    problem = self._refusal(status, await read_error_body(response))
                elif status == 202:
                    if method == p.INITIALIZED and not self._stream_open:
                        self._stream_open = True
                        nursery.start_soon(self._listen, client, send)
                    problem = (
                        f"the roost daemon at {self.endpoint} accepted the request without "
                        "answering it"
                    )
                elif response.headers.get("content-type", "").startswith("text/event-stream"):
                    await _relay_sse(response, deliver)
                    problem = f"the roost daemon's stream ended without an answer (HTTP {status})"
                else:
                    problem = await self._json_answer(response, request_id, deliver)
        except httpx.HTTPError as exc:
            status, problem = None, f"the roost daemon at {self.endpoint} is unreachable: {exc}"
        if request_id is not None and not answered and problem:
            data = {"http_status": status} if status is not None else None
            await send(rpc.error_response(request_id, rpc.INTERNAL_ERROR, problem, data).to_dict())

    async def _json_answer(self, response: Any, request_id: Any, deliver: Send) -> str | None:
        """Deliver the JSON answer (None), or say what is wrong with it."""
        from roost.plugins.http.client import ResponseTooLarge, read_body

        status = response.status_code
        try:
            raw = await read_body(response, p.MAX_MESSAGE_BYTES, what="the JSON answer")
        except ResponseTooLarge as exc:
            return str(exc)
        try:
            reply = json.loads(raw)
        except ValueError:
            reply = None
        if is_jsonrpc_message(reply) and (request_id is None or reply.get("id") == request_id):
            await deliver(reply)
            return None
        if status >= 400:
            return self._refusal(status, raw)
        return f"the roost daemon answered HTTP {status} without a JSON-RPC response"

    async def _forward(self, reply: Any, send: Send) -> None:
        if not is_jsonrpc_message(reply):
            log.warning(
                "roost mcp: dropped a message from the daemon that is not JSON-RPC: %.200s", reply
            )
            return
        if isinstance(reply.get("result"), dict) and "protocolVersion" in reply["result"]:
            version = reply["result"]["protocolVersion"]
            if isinstance(version, str):
                self.protocol_version = version
        await send(reply)

    async def _listen(self, client: Any, send: Send) -> None:
        """The GET stream: server notifications (list changes) relayed to stdout."""
        import httpx

        try:
            async with client.stream(
                "GET",
                self.endpoint,
                headers={**self._headers({}), "Accept": "text/event-stream"},
                timeout=httpx.Timeout(None, connect=10.0),
            ) as response:
                if response.status_code != 200:
                    return
                await _relay_sse(response, partial(self._forward, send=send))
        except httpx.HTTPError as exc:
            log.warning("lost the daemon's notification stream: %s", exc)


# ---- the command ----------------------------------------------------------------------------


def isolate_stdout() -> int:
    """Keep fd 1 for the protocol only: return a private duplicate of it for the protocol
    and point fd 1 (and ``sys.stdout``) at stderr for everything else."""
    import sys

    protocol_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return protocol_fd


async def run_stdio(config: Any, *, stdout_fd: int, prefer_daemon: bool = True) -> int:
    """Serve MCP on stdin and ``stdout_fd`` (``isolate_stdout``'s) until the client closes stdin
    (bridging to a live daemon when ``prefer_daemon``, else on an in-process kernel)."""
    receive_stream = trio.lowlevel.FdStream(os.dup(0))
    send_stream = trio.lowlevel.FdStream(stdout_fd)
    async with receive_stream, send_stream:
        from roost.plugins.http import find_daemon, resolve_api_key

        daemon = await find_daemon(config.home) if prefer_daemon else None  # alive and healthy
        serve = partial(_serve_booting, config)
        if daemon is not None:
            log.info("roost mcp: bridging to the daemon at %s", daemon.url)
            key_env = getattr(config.http, "api_key_env", None) or "ROOST_API_KEY"
            key = resolve_api_key(config.http, os.environ)[0]
            serve = DaemonBridge(daemon.url, key, key_env=key_env).serve
        await stdio_loop(receive_stream, send_stream, with_inherited_trace(serve, os.environ))
    return 0


def with_inherited_trace(
    serve: Callable[[Receive, Send], Awaitable[None]], environ: Any
) -> Callable[[Receive, Send], Awaitable[None]]:
    """``serve`` putting the trace context of ``environ`` (set when an agent's ``bash`` started
    this process) into each ``tools/call``, continuing the run's chain; a malformed
    ``ROOST_TRACE_DEPTH`` fails every ``tools/call`` with -32602 naming it."""
    from roost.kernel import InvalidTraceContext, TraceContext

    try:
        inherited = TraceContext.from_env(environ)
        invalid = None
    except InvalidTraceContext as exc:
        inherited, invalid = None, exc
    if inherited is None and invalid is None:
        return serve

    async def traced(receive: Receive, send: Send) -> None:
        async def receive_traced() -> Any:
            while True:
                message = await receive()
                if not isinstance(message, dict) or message.get("method") != p.TOOLS_CALL:
                    return message
                if invalid is None:
                    p.carry_trace(inherited, message)
                    return message
                await send(p.field_error(invalid).to_response(message.get("id")).to_dict())

        await serve(receive_traced, send)

    return traced


async def _serve_booting(config: Any, receive: Receive, send: Send) -> None:
    """Answer the client's opening ``initialize`` (or ``server/discover``) at once — it
    needs nothing from the kernel — then boot the kernel and serve everything else."""
    from ._connection import serve_connection
    from ._server import McpServer, ServerSession

    server = McpServer(None)
    session = ServerSession()
    try:
        first = await receive()
    except trio.EndOfChannel:
        return
    held = [first]
    if isinstance(first, dict) and first.get("method") in (p.INITIALIZE, p.DISCOVER):
        if "id" in first:
            held.clear()
            reply = await server.handle(session, first)
            if reply is not None:
                await send(reply)

    async def receive_rest() -> Any:
        if held:
            return held.pop()
        return await receive()

    from roost.kernel import open_kernel  # after the answer: it loads most of the kernel

    async with open_kernel(config) as kernel:
        server.kernel = kernel
        await serve_connection(server, receive_rest, send, session=session)
