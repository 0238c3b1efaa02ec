"""The 2024-11-05 HTTP+SSE client transport (deprecated, still common): GET an SSE stream,
wait for its ``endpoint`` event, POST every message there; answers arrive on the stream.
Also what both HTTP transports share: ``HttpPeer`` / ``open_http_peer`` (SSRF-checked,
pinned connections) and ``http_error_message`` (a refused request answered at once).
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, TypeVar
from urllib.parse import urljoin, urlsplit

import attrs
import httpx
import trio
from roost.kernel import AddressPins, Resolver, jsonrpc, public_url
from roost.plugins.http.client import (
    PinnedTransport,
    http_error_text,
    http_status_line,
    read_error_body,
    retry_after_s,
    sse_events,
)

from .._protocol import MAX_MESSAGE_BYTES
from ._base import (
    INCOMING_BUFFER,
    ClientTransport,
    TransportClosed,
    TransportError,
    single_errors,
)

log = logging.getLogger("roost.mcp.sse")

ALLOW_HINT = (
    "allow_local = true on this [[mcp_servers]] entry (or tools.allow_private_network = true)"
)


def json_messages(data: str) -> list[dict[str, Any]]:
    """The JSON-RPC objects in an event's data (an object, or an array of them)."""
    if not data:  # a priming event (an id and no data) opens a 2025-11-25 stream
        return []
    try:
        value = json.loads(data)
    except (ValueError, RecursionError):
        return []
    if isinstance(value, dict):
        return [value]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, dict)]
    return []


# ---- HTTP errors from a peer (the MCP HTTP transports) ---------------------------------


def http_error_message(
    request_id: Any,
    status: int,
    body: bytes,
    *,
    retry_after: float | None = None,
    hint: str | None = None,
) -> dict[str, Any]:
    """The JSON-RPC response for a request answered by HTTP ``status`` with ``body`` (or,
    status 0, not at all: ``body`` says why). A JSON-RPC error in the body keeps its code
    and data; ``data`` gains ``httpStatus`` (and ``retryAfter``)."""
    code: int = jsonrpc.SERVER_ERROR  # unless the body holds a JSON-RPC error
    data: Any = None
    try:
        value = json.loads(body) if body else None
    except (ValueError, RecursionError):
        value = None
    error = value.get("error") if isinstance(value, dict) else None
    if (
        isinstance(error, dict)
        and type(error.get("code")) is int
        and isinstance(error.get("message"), str)
    ):
        code, data = error["code"], error.get("data")
    message = status_report(status, body, hint)
    facts: dict[str, Any] = {"httpStatus": status}
    if retry_after is not None:
        facts["retryAfter"] = retry_after
    if data is None:
        data = facts
    elif isinstance(data, dict):
        data = {**data, **facts}
    return jsonrpc.error_response(request_id, code, message, data).to_dict()


def status_report(status: int, body: bytes, hint: str | None = None) -> str:
    """``HTTP 401 Unauthorized: <the server's words> (<hint>)``; status 0: the words alone."""
    text = http_error_text(body)
    if status:
        text = http_status_line(status) + (f": {text}" if text else "")
    return (text or "no answer from the server") + (f" ({hint})" if hint else "")


def encode_body(message: Mapping[str, Any]) -> bytes:
    """``message`` as compact UTF-8 JSON; over ``MAX_MESSAGE_BYTES`` it is refused."""
    body = jsonrpc.dumps(message, allow_nan=True).encode("utf-8")
    if len(body) > MAX_MESSAGE_BYTES:
        raise TransportError(f"message is {len(body)} bytes, over the 10 MB limit")
    return body


def refusal_hint(name: str, headers: Mapping[str, str], status: int) -> str | None:
    """What to configure when the server refuses our credentials (HTTP 401/403)."""
    if status not in (401, 403):
        return None
    where = f"transport.headers of the [[mcp_servers]] entry {name!r}"
    if any(k.lower() == "authorization" for k in headers):
        return f"the server refused the Authorization header in {where}; check the key"
    return (
        f'this server wants credentials: set them in {where}, e.g. Authorization = "Bearer <key>"'
    )


def same_origin(a: str, b: str) -> bool:
    pa, pb = urlsplit(a), urlsplit(b)

    def port(p: Any) -> int | None:
        return p.port or (443 if p.scheme == "https" else 80)

    return (pa.scheme, pa.hostname, port(pa)) == (pb.scheme, pb.hostname, port(pb))


@attrs.define(eq=False, repr=False)  # its headers and URL may hold credentials
class HttpPeer(ClientTransport):
    """What both HTTP transports keep: the server, its client, the incoming channel."""

    name: str
    url: str
    headers: dict[str, str] = attrs.field(converter=dict)
    http: httpx.AsyncClient
    _nursery: trio.Nursery
    _send_channel: Any
    incoming: Any
    closed_reason: str | None = None

    async def _post(
        self, url: str, body: bytes, headers: Mapping[str, str], failed: str
    ) -> tuple[httpx.Response, bytes]:
        """POST ``body`` whose answer is no message (202, or an error): the response and
        its error body; ``TransportClosed`` (``failed``) when there is no answer."""
        try:
            async with self.http.stream(
                "POST", url, content=body, headers={**headers, "Content-Type": "application/json"}
            ) as response:
                return response, await read_error_body(response)
        except httpx.HTTPError as exc:
            raise TransportClosed(f"MCP server {self.name!r}: {failed} ({exc})") from None

    def _refusal(self, request_id: Any, response: httpx.Response, body: bytes) -> dict[str, Any]:
        """The JSON-RPC answer to a request the server refused with an HTTP error."""
        status = response.status_code
        hint = refusal_hint(self.name, self.headers, status)
        retry_after = retry_after_s(response.headers)
        return http_error_message(request_id, status, body, retry_after=retry_after, hint=hint)

    def _refused(self, message: Mapping[str, Any], status: int, body: bytes) -> TransportError:
        """The error for a POST of ``message`` that the server refused with HTTP ``status``."""
        what = message.get("method", "a message")
        report = status_report(status, body, refusal_hint(self.name, self.headers, status))
        return TransportError(f"MCP server {self.name!r} refused {what} with {report}")

    async def _push(self, message: dict[str, Any]) -> None:
        try:
            await self._send_channel.send(message)
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            pass

    async def _start(self, timeout_secs: float) -> None:
        pass

    async def _finish(self) -> None:
        pass


P = TypeVar("P", bound=HttpPeer)


@asynccontextmanager
async def open_http_peer(
    kind: type[P],
    url: str,
    *,
    headers: Mapping[str, str] | None = None,
    name: str = "server",
    timeout_secs: float = 30.0,
    allow_private: bool = False,
    allow_loopback: bool = False,
    resolver: Resolver | None = None,
) -> AsyncIterator[P]:
    """Yield a transport of ``kind`` to ``url``, checked against SSRF rules once
    (``resolver`` replaces DNS in tests): every request connects to the checked address
    (no environment proxy: it would resolve the name itself). Reads are unbounded (streams
    stay open); the rest is bounded by ``timeout_secs``."""
    pins = AddressPins(
        allow_private=allow_private,
        allow_loopback=allow_loopback,
        resolver=resolver,
        allow_hint=ALLOW_HINT,
    )
    await pins.addresses(url)  # UrlRefused if it may not be used
    async with httpx.AsyncClient(
        timeout=httpx.Timeout(timeout_secs, read=None),
        follow_redirects=False,
        trust_env=False,
        transport=PinnedTransport(pins),
    ) as http:
        send_channel, receive_channel = trio.open_memory_channel[dict](INCOMING_BUFFER)
        with single_errors():
            async with trio.open_nursery() as nursery:
                transport = kind(
                    name, url, headers or {}, http, nursery, send_channel, receive_channel
                )
                await transport._start(timeout_secs)
                try:
                    yield transport
                finally:
                    if transport.closed_reason is None:
                        transport.closed_reason = "the connection was closed"
                    with trio.CancelScope(shield=True):
                        await transport._finish()
                    nursery.cancel_scope.cancel()
                    # Not ``await aclose()``: a checkpoint here, in the cancelled nursery,
                    # would raise Cancelled over whatever the block raised, and lose it.
                    send_channel.close()


class SseTransport(HttpPeer):
    """A connected HTTP+SSE session; see ``open_sse_transport``."""

    kind = "sse"
    endpoint: str | None = None

    async def send(self, message: Mapping[str, Any]) -> None:
        if self.closed_reason is not None or self.endpoint is None:
            raise TransportClosed(
                f"MCP server {self.name!r} is gone: {self.closed_reason or 'not connected'}"
            )
        # the answer is on the stream: this body is 202's text
        response, error_body = await self._post(
            self.endpoint,
            encode_body(message),
            self.headers,
            f"POST to {public_url(self.endpoint)} failed",  # it has the URL's user info
        )
        status = response.status_code
        if status < 400:
            return
        if "method" in message and "id" in message:
            try:
                await self._send_channel.send(self._refusal(message["id"], response, error_body))
                return
            except (trio.ClosedResourceError, trio.BrokenResourceError):
                pass  # the stream has ended: say so below
        raise self._refused(message, status, error_body)

    async def _start(self, timeout_secs: float) -> None:
        with trio.move_on_after(timeout_secs) as scope:
            await self._nursery.start(self._read_stream)
        if scope.cancelled_caught:
            raise TransportError(
                f"MCP server {self.name!r}: no endpoint event within {timeout_secs:g} s "
                f"from {public_url(self.url)}"
            )

    async def _read_stream(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        name, url, started = self.name, self.url, False
        async with self._send_channel:
            try:
                request_headers = {**self.headers, "Accept": "text/event-stream"}
                async with self.http.stream("GET", url, headers=request_headers) as response:
                    status = response.status_code
                    if status != 200:
                        hint = (
                            refusal_hint(name, self.headers, status)
                            or "is this an HTTP+SSE endpoint?"
                        )
                        report = status_report(status, await read_error_body(response), hint)
                        raise TransportError(
                            f"MCP server {name!r}: GET {public_url(url)} answered {report}"
                        )
                    ctype = response.headers.get("content-type", "")
                    if not ctype.startswith("text/event-stream"):
                        raise TransportError(
                            f"MCP server {name!r}: GET {public_url(url)} answered "
                            f"{ctype or 'no content type'}, not text/event-stream"
                        )
                    async for event in sse_events(response, max_bytes=MAX_MESSAGE_BYTES):
                        if event.event == "endpoint" and not started:
                            endpoint = urljoin(url, event.data.strip())
                            if not same_origin(endpoint, url):
                                raise TransportError(
                                    f"MCP server {name!r} named an endpoint on "
                                    f"another origin ({endpoint}); refused"
                                )
                            self.endpoint = endpoint
                            started = True
                            task_status.started()
                        elif event.event == "message" and started:
                            for message in json_messages(event.data):
                                await self._send_channel.send(message)
                self.closed_reason = "the server closed the SSE stream"
            except (httpx.HTTPError, ValueError) as exc:
                self.closed_reason = f"the SSE stream broke ({type(exc).__name__}: {exc})"
                if not started:
                    raise TransportError(f"MCP server {name!r}: {self.closed_reason}") from None
            if not started:
                raise TransportError(
                    f"MCP server {name!r}: the SSE stream ended before its endpoint event"
                )


def open_sse_transport(url: str, **options: Any) -> AbstractAsyncContextManager[SseTransport]:
    """Open the SSE stream at ``url``, wait (up to ``timeout_secs``) for the ``endpoint``
    event and yield the transport. The endpoint must have the stream's origin. Options are
    those of ``open_http_peer``."""
    return open_http_peer(SseTransport, url, **options)
