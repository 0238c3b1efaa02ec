"""Streamable HTTP client transport (2025-03-26 … 2025-11-25 and 2026-07-28), over httpx.

Each message is a POST answered with JSON or an SSE stream. Handshake era: the session id
and version go on later requests, a GET stream carries server-initiated messages, a broken
stream resumes with ``Last-Event-ID``, DELETE ends the session, a 404 for it means it ended.
2026-07-28: per-POST ``Mcp-Method``/``Mcp-Name`` headers, closing a response stream cancels
its request, and a broken one is re-issued once under a new id. A request without an answer
(an HTTP error, or none) is answered at once with a JSON-RPC error (``http_error_message``).
Reads are capped; the URL is checked against SSRF rules once and pinned (``open_http_peer``).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any

import attrs
import httpx
import trio
from roost.kernel import HTTP_TOKEN, public_url
from roost.plugins.http.client import (
    ResponseTooLarge,
    read_body,
    read_error_body,
    sse_events,
)

from .._protocol import (
    HEADER_LAST_EVENT_ID,
    HEADER_PROTOCOL_VERSION,
    HEADER_SESSION_ID,
    MAX_MESSAGE_BYTES,
    encode_header_value,
    request_headers,
)
from ._base import TransportClosed
from .sse import (
    HttpPeer,
    encode_body,
    http_error_message,
    json_messages,
    open_http_peer,
)

log = logging.getLogger("roost.mcp.http")

GET_STREAM_RETRIES = 5
DELETE_TIMEOUT_S = 3.0
MAX_RETRY_WAIT_S = 30.0
_SAFE_INT = 2**53 - 1
_PRIMITIVES = ("string", "integer", "boolean")


def x_mcp_header_problem(schema: Any) -> str | None:
    """Why a tool's ``x-mcp-header`` annotations are invalid (SEP-2243), or None: values
    are HTTP tokens, unique ignoring case, on string/integer/boolean properties reachable
    from the root through ``properties`` keys only."""
    seen: set[str] = set()
    # A stack, not recursion: a server's schema may nest as deep as json.loads admits.
    stack: list[tuple[Any, bool, str]] = [(schema, True, "")]
    while stack:
        node, reachable, where = stack.pop()
        if isinstance(node, list):
            stack.extend((item, False, where) for item in reversed(node))
            continue
        if not isinstance(node, Mapping):
            continue
        if "x-mcp-header" in node:
            value = node["x-mcp-header"]
            if not reachable or where == "":
                return (
                    f"x-mcp-header at {where or 'the root'} is not on a property "
                    "reachable through properties"
                )
            if not isinstance(value, str) or not value or not HTTP_TOKEN.fullmatch(value):
                return f"x-mcp-header {value!r} at {where} is not a valid HTTP header name token"
            if node.get("type") not in _PRIMITIVES:
                return (
                    f"x-mcp-header {value!r} at {where} is on a {node.get('type')!r} "
                    "property (only string, integer, boolean)"
                )
            if value.lower() in seen:
                return f"x-mcp-header {value!r} is used twice"
            seen.add(value.lower())
        children: list[tuple[Any, bool, str]] = []
        for key, child in node.items():
            if key == "properties" and isinstance(child, Mapping) and (reachable or where == ""):
                children.extend((sub, True, f"{where}/{name}") for name, sub in child.items())
            elif key != "x-mcp-header" and isinstance(child, (Mapping, list)):
                children.append((child, False, f"{where}/{key}"))
        stack.extend(reversed(children))  # depth first, in document order
    return None


def mcp_param_headers(schema: Any, arguments: Any) -> dict[str, str]:
    """The ``Mcp-Param-{Name}`` headers a tools/call must carry (values encoded)."""
    out: dict[str, str] = {}

    def walk(node: Any, value: Any) -> None:
        if not isinstance(node, Mapping) or not isinstance(value, Mapping):
            return
        for name, sub in (node.get("properties") or {}).items():
            if not isinstance(sub, Mapping) or name not in value:
                continue
            item = value[name]
            header = sub.get("x-mcp-header")
            if isinstance(header, str) and item is not None:
                text: str | None = None
                if isinstance(item, bool):
                    text = "true" if item else "false"
                elif isinstance(item, int) and abs(item) <= _SAFE_INT:
                    text = str(item)
                elif isinstance(item, str):
                    text = item
                if text is not None:
                    out[f"Mcp-Param-{header}"] = encode_header_value(text)
            walk(sub, item)

    walk(schema, arguments)
    return out


def _retry_wait_s(retry_ms: int) -> float:
    """A server's SSE ``retry`` (milliseconds) as seconds to wait, within 0..MAX_RETRY_WAIT_S."""
    return min(max(retry_ms, 0) / 1000, MAX_RETRY_WAIT_S)


@attrs.frozen
class _Outcome:
    answered: bool
    broken: bool = False  # the request went out and its response stream was lost
    failure: str | None = None


class HttpTransport(HttpPeer):
    """A Streamable HTTP connection to one MCP endpoint; see ``open_http_transport``."""

    kind = "http"

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.session_id: str | None = None
        self.protocol_version: str | None = None
        self.modern = False
        self._streams: dict[Any, trio.CancelScope] = {}
        self._listening = False
        self._tool_schemas: dict[str, Any] = {}
        self._reissued = 0

    def accept_tools(self, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Keep the tools' schemas (for ``Mcp-Param-*``); drop those with invalid ones."""
        kept = []
        for tool in tools:
            schema = tool.get("inputSchema")
            problem = x_mcp_header_problem(schema)
            if problem:
                log.warning(
                    "MCP server %s: tool %r rejected: %s", self.name, tool.get("name"), problem
                )
                continue
            self._tool_schemas[str(tool.get("name"))] = schema
            kept.append(tool)
        return kept

    def _headers(self, message: Mapping[str, Any] | None = None) -> dict[str, str]:
        out = dict(self.headers)
        out["Accept"] = "application/json, text/event-stream"
        if self.protocol_version:
            out[HEADER_PROTOCOL_VERSION] = self.protocol_version
        if self.session_id and not self.modern:
            out[HEADER_SESSION_ID] = self.session_id
        if self.modern and message is not None:
            out.update(request_headers(message))
            params = message.get("params")
            if message.get("method") == "tools/call" and isinstance(params, Mapping):
                name = params.get("name")
                if isinstance(name, str) and name in self._tool_schemas:
                    schema = self._tool_schemas[name]
                    out.update(mcp_param_headers(schema, params.get("arguments")))
        return out

    def set_protocol_version(self, version: str | None, *, modern: bool = False) -> None:
        self.protocol_version = version
        self.modern = modern

    async def start_listening(self) -> None:
        """Open the handshake era's GET stream (once), awaiting its answer: it precedes requests."""
        if not self.modern and not self._listening and self.closed_reason is None:
            self._listening = True
            with trio.move_on_after(self.http.timeout.connect or 10.0):
                await self._nursery.start(self._listen)

    def cancel_request(self, request_id: Any) -> bool:
        scope = self._streams.get(request_id)
        if scope is None:
            return False
        scope.cancel()
        return True

    async def send(self, message: Mapping[str, Any]) -> None:
        if self.closed_reason is not None:
            raise TransportClosed(f"MCP server {self.name!r} is gone: {self.closed_reason}")
        body = encode_body(message)
        if "method" in message and "id" in message:
            scope = trio.CancelScope()
            self._streams[message["id"]] = scope
            self._nursery.start_soon(self._exchange, message, body, scope)
            return
        # a notification's answer is 202, no body
        response, error_body = await self._post(
            self.url, body, self._headers(message), "POST failed"
        )
        status = response.status_code
        if await self._session_ended(status):
            raise TransportClosed(f"MCP server {self.name!r}: the session ended")
        if status >= 400:
            raise self._refused(message, status, error_body)

    async def _session_ended(self, status: int, method: Any = None) -> bool:
        """Whether HTTP ``status`` (to ``method``) says our session ended: then we are closed."""
        if status != 404 or not self.session_id or self.modern or method == "initialize":
            return False
        if self.closed_reason is None:
            self.closed_reason = "the server ended the session (HTTP 404)"
            await self._send_channel.aclose()
        return True

    async def _exchange(
        self, message: Mapping[str, Any], body: bytes, scope: trio.CancelScope
    ) -> None:
        """POST one request, forward its answer; at 2026-07-28 a broken stream re-issues it once."""
        request_id = message["id"]
        outcome = _Outcome(answered=False)
        try:
            with scope:
                outcome = await self._attempt(message, body, request_id)
                if outcome.broken and self.modern and self.closed_reason is None:
                    self._reissued += 1
                    retry = {**message, "id": f"roost-reissue-{self._reissued}"}
                    log.info(
                        "MCP server %s: the response stream of request %r "
                        "broke (%s); re-issuing it as %r",
                        self.name,
                        request_id,
                        outcome.failure,
                        retry["id"],
                    )
                    outcome = await self._attempt(retry, encode_body(retry), request_id)
        finally:
            self._streams.pop(request_id, None)
        if not outcome.answered and not scope.cancel_called:
            failure = outcome.failure or "the response stream ended without an answer"
            await self._answer_error(request_id, 0, failure.encode())

    async def _attempt(self, message: Mapping[str, Any], body: bytes, request_id: Any) -> _Outcome:
        """One POST of ``message`` (its id may be a re-issue's); answers go under ``request_id``."""
        wire_id = message["id"]
        headers = {**self._headers(message), "Content-Type": "application/json"}
        answered = False
        started = False
        try:
            async with self.http.stream(
                "POST", self.url, content=body, headers=headers
            ) as response:
                started = True
                if message.get("method") == "initialize":
                    self.session_id = response.headers.get(HEADER_SESSION_ID) or self.session_id
                status = response.status_code
                if await self._session_ended(status, message.get("method")):
                    return _Outcome(answered=True)
                if status >= 400:
                    await self._push(
                        self._refusal(request_id, response, await read_error_body(response))
                    )
                    return _Outcome(answered=True)
                ctype = response.headers.get("content-type", "").split(";")[0].strip().lower()
                if ctype == "application/json":
                    try:
                        data = await read_body(response, MAX_MESSAGE_BYTES, what="the JSON answer")
                    except ResponseTooLarge as exc:
                        return await self._answer_error(request_id, status, str(exc).encode())
                    text = data.decode("utf-8", "replace")
                    answered = await self._forward(text, wire_id, request_id)
                    if not answered:
                        return _Outcome(
                            answered=False,
                            failure="the JSON response held no answer to the request",
                        )
                elif ctype == "text/event-stream":
                    answered, failure = await self._read_sse(response, wire_id, request_id)
                    if not answered:
                        return _Outcome(answered=False, broken=True, failure=failure)
                elif status == 202:
                    return _Outcome(answered=True)  # nothing to wait for
                else:
                    unexpected = f"unexpected content type {ctype!r}".encode()
                    return await self._answer_error(request_id, status, unexpected)
        except httpx.HTTPError as exc:
            if answered:
                return _Outcome(answered=True)
            # Lost after the request went out: the response stream broke.
            broken = started or isinstance(
                exc, (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)
            )
            doing = "the HTTP request to" if broken else "cannot reach"
            shown = public_url(self.url)
            failure = f"{doing} {shown} failed: {type(exc).__name__}: {exc}"
            return _Outcome(answered=False, broken=broken, failure=failure)
        except ValueError as exc:
            return await self._answer_error(request_id, 0, f"bad SSE stream: {exc}".encode())
        return _Outcome(answered=True)

    async def _answer_error(self, request_id: Any, status: int, body: bytes) -> _Outcome:
        """Answer ``request_id`` with ``http_error_message``."""
        await self._push(http_error_message(request_id, status, body))
        return _Outcome(answered=True)

    async def _forward(self, data: str, wire_id: Any, request_id: Any) -> bool:
        """Push ``data``'s messages (a re-issue's answer under the caller's id); True if one is."""
        answered = False
        for item in json_messages(data):
            if "method" not in item and "id" in item and item["id"] == wire_id:
                answered = True
                if wire_id != request_id:
                    item = {**item, "id": request_id}
            await self._push(item)
        return answered

    async def _read_sse(
        self, response: httpx.Response, wire_id: Any, request_id: Any
    ) -> tuple[bool, str | None]:
        """Forward the stream's messages; ``(answered, why not)``; resume a broken one."""
        answered = False
        failure: str | None = "the response stream ended without an answer"
        last_event_id, retry_ms = "", None
        try:
            async for event in sse_events(response, max_bytes=MAX_MESSAGE_BYTES):
                last_event_id, retry_ms = (
                    event.id,
                    event.retry if event.retry is not None else retry_ms,
                )
                if event.event != "message":
                    continue
                answered = await self._forward(event.data, wire_id, request_id) or answered
        except httpx.HTTPError as exc:
            failure = f"the response stream broke: {type(exc).__name__}: {exc}"
        if not answered and not self.modern and last_event_id:
            if retry_ms is not None:
                await trio.sleep(_retry_wait_s(retry_ms))
            answered = await self._resume(last_event_id, request_id)
        return answered, (None if answered else failure)

    def _get(self, last_event_id: str | None) -> Any:
        headers = {**self._headers(), "Accept": "text/event-stream"}
        if last_event_id:
            headers[HEADER_LAST_EVENT_ID] = last_event_id
        return self.http.stream("GET", self.url, headers=headers)

    async def _resume(self, last_event_id: str, request_id: Any) -> bool:
        """GET with ``Last-Event-ID`` to get the rest of a broken stream."""
        for _attempt in range(GET_STREAM_RETRIES):
            try:
                async with self._get(last_event_id) as response:
                    if await self._session_ended(response.status_code):
                        return True  # every request in flight fails with the connection
                    if response.status_code != 200:
                        return False
                    async with contextlib.aclosing(
                        sse_events(response, max_bytes=MAX_MESSAGE_BYTES)
                    ) as events:
                        async for event in events:
                            last_event_id = event.id or last_event_id
                            if await self._forward(event.data, request_id, request_id):
                                return True
            except httpx.HTTPError:
                await trio.sleep(0.2)
        return False

    async def _listen(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """The handshake era's GET stream for server-initiated messages."""
        started = False

        def ready() -> None:
            nonlocal started
            if not started:
                started = True
                task_status.started()

        last_event_id: str | None = None
        retry_ms: int | None = None
        failures = 0
        try:
            while self.closed_reason is None and failures < GET_STREAM_RETRIES:
                if retry_ms is not None and (failures or last_event_id):
                    await trio.sleep(_retry_wait_s(retry_ms))
                try:
                    async with self._get(last_event_id) as response:
                        ready()
                        if response.status_code == 405:
                            return  # the server offers no GET stream
                        if await self._session_ended(response.status_code):
                            return
                        if response.status_code != 200:
                            failures += 1
                            await trio.sleep(0.5 * failures)
                            continue
                        failures = 0
                        async for event in sse_events(response, max_bytes=MAX_MESSAGE_BYTES):
                            last_event_id = event.id or last_event_id
                            if event.retry is not None:
                                retry_ms = event.retry
                            if event.event == "message":
                                for item in json_messages(event.data):
                                    await self._push(item)
                except (httpx.HTTPError, ValueError) as exc:
                    ready()
                    log.info("MCP server %s: GET stream broke (%s); reconnecting", self.name, exc)
                    failures += 1
                    await trio.sleep(0.5 * failures)
        finally:
            ready()

    async def _finish(self) -> None:
        """End the session (DELETE)."""
        if self.session_id and not self.modern:
            with trio.move_on_after(DELETE_TIMEOUT_S), contextlib.suppress(httpx.HTTPError):
                async with self.http.stream("DELETE", self.url, headers=self._headers()):
                    pass  # the answer's body says nothing we need


def open_http_transport(url: str, **options: Any) -> AbstractAsyncContextManager[HttpTransport]:
    """Yield a Streamable HTTP transport to ``url``; leaving ends the session (DELETE).
    Options are those of ``open_http_peer``."""
    return open_http_peer(HttpTransport, url, **options)
