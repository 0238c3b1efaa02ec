"""The daemon's ASGI app: plugin routes answered by their plain handlers, the rest by Quart.

A plugin route's request passes the shared checks (``DaemonState.check``) and body cap
here and goes to its handler (``_plain``); everything else goes to the quart-trio app,
wrapped in ``DaemonApp.quart``. Hypercorn hands a body over through a small bounded queue: an
answer that leaves part of it unread says ``Connection: close`` and reads that queue until
the end, or the connection's reader would wait on it for good.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from functools import partial
from typing import Any

import trio
from roost.kernel import InvalidInput, RoostError, parse_int

from ._app import route_for
from ._common import (
    DaemonState,
    Refusal,
    caller_headers,
    canonical_path,
    common_headers,
    connection_base_url,
    internal_error,
    refusal,
    refusal_for,
    render_refusal,
    too_large,
)
from ._plain import Headers, PlainRequest, PlainResponse

log = logging.getLogger("roost.http")

BODY_TIMEOUT_S = 30.0
DRAIN_DEADLINE_S = 30.0
WEBSOCKET_DRAIN_IDLE_S = 0.1
FINAL_SEND_DEADLINE_S = 30.0
_NO_LENGTH = frozenset({204, 304})


class _Refused(Exception):
    def __init__(self, refusal: Refusal) -> None:
        self.refusal = refusal


class _Gone(Exception):  # the client disconnected
    pass


class DaemonApp:
    """The ASGI app hypercorn serves: ``app`` is the quart-trio app of ``create_app``."""

    def __init__(self, app: Any, state: DaemonState) -> None:
        self.app = app
        self.state = state
        # common_headers of a request without Origin, for an answer with no headers of its own
        self._plain_headers = [
            (name.lower().encode("latin-1"), value.encode("latin-1"))
            for name, value, _ in common_headers(state.settings, None)
        ]

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        kind = scope["type"]
        try:
            if kind == "http" or kind == "websocket":
                path = scope["path"]
                if path.endswith("/") and len(path) > 1:
                    raw = scope.get("raw_path")
                    scope = {**scope, "path": canonical_path(path)}
                    if isinstance(raw, bytes):
                        scope["raw_path"] = raw.rstrip(b"/") or b"/"
                if kind == "http":
                    found = route_for(self.app, self.state, scope["method"], scope["path"])
                    if found is not None:
                        route = self.state.routes.get(found[0])
                        if route is not None:
                            await self.serve_route(route, found[0], found[1], scope, receive, send)
                            return
            await self.quart(scope, receive, send)
        except* trio.BusyResourceError:
            # The client left while being answered: hypercorn shuts the socket down outside its
            # send lock, so the answer's send finds it busy. Nobody is left to answer.
            log.debug("%s %s: the client left before its answer was sent", kind, scope.get("path"))

    async def serve_route(
        self,
        route: tuple[Callable[..., Any], frozenset[str]],
        endpoint: str,
        args: dict[str, Any],
        scope: dict[str, Any],
        receive: Any,
        send: Any,
    ) -> None:
        """One request for a plugin route: checks, body, handler, answer."""
        state = self.state
        handler, methods = route
        headers = Headers.from_asgi(scope["headers"])
        method = scope["method"]
        path = scope["path"]
        client, server = scope.get("client"), scope.get("server")
        remote = str(client[0]) if client else None
        renderer = state.error_shapes.by_endpoint.get(endpoint)
        origin = headers.get("origin")
        # An OPTIONS request on a route that does not take OPTIONS is a CORS preflight.
        preflight = method == "OPTIONS" and "OPTIONS" not in methods
        declared = headers.get("content-length")  # hypercorn's h11 and h2 take ASCII digits only
        try:
            length = None if declared is None else parse_int(declared, "Content-Length", 0, 10**20)
        except InvalidInput:  # more digits than h11's 20 (h2 takes any): over every cap, a 413
            length = math.inf
        pending = bool(length) or "transfer-encoding" in headers
        local = str(server[0]) if server else None
        refusal, principal = state.check(
            endpoint, headers, remote, length, local_addr=local, is_preflight=preflight
        )
        limit = state.body_limits.get(endpoint, state.settings.max_body_bytes)
        body = b""
        try:
            if refusal is None and length is not None and length > limit:
                raise _Refused(too_large(state.settings, limit, path))
            if refusal is None and pending:
                body = await _read_body(receive, limit, state, path)
                pending = False
        except _Refused as exc:
            refusal = exc.refusal
        except _Gone:
            return
        if refusal is not None or preflight:
            if refusal is not None:
                answer = _refusal_response(refusal, renderer)
            else:  # a preflight: its body, if any, is read by now
                allow = set(methods) | {"OPTIONS"} | ({"HEAD"} if "GET" in methods else set())
                answer = PlainResponse(200, b"", "", (("Allow", ", ".join(sorted(allow))),))
            await self._answer(send, receive, answer, origin, pending)
            return
        rewritten = await caller_headers(state.kernel, method, headers.items(), client, server)
        request = PlainRequest(
            method,
            path,
            headers if rewritten is None else Headers(rewritten),
            body,
            query=scope.get("query_string", b""),
            remote_addr=remote,
            base_url=connection_base_url(state.public_url, server),
            principal=principal,
            receive=receive,
        )
        response = await _call(handler, request, args, renderer)
        await send(self._start(response, origin))
        if isinstance(response.body, (bytes, bytearray)):
            await send(
                {"type": "http.response.body", "body": bytes(response.body), "more_body": False}
            )
            return
        await request.unless_gone(partial(_stream, response.body, send))
        if not request.gone:
            await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _answer(
        self, send: Any, receive: Any, response: PlainResponse, origin: str | None, close: bool
    ) -> None:
        """Send a complete answer; ``close``: part of the body is unread (see the module)."""
        async with trio.open_nursery() as nursery:
            if close:
                nursery.start_soon(_drain, receive)
            await send(self._start(response, origin, close=close))
            body = bytes(response.body)  # type: ignore[arg-type]
            await send({"type": "http.response.body", "body": body, "more_body": False})

    def _start(
        self, response: PlainResponse, origin: str | None, *, close: bool = False
    ) -> dict[str, Any]:
        headers: list[tuple[bytes, bytes]] = []
        if response.content_type:
            headers.append((b"content-type", response.content_type.encode("latin-1")))
        extra = response.headers
        if extra or origin is not None:
            pairs = list(extra)
            present = {name.lower() for name, _ in pairs}
            for name, value, replace in common_headers(self.state.settings, origin):
                lower = name.lower()
                if replace and lower in present:
                    pairs = [(n, v) for n, v in pairs if n.lower() != lower]
                if replace or lower not in present:
                    pairs.append((name, value))
            headers += [(n.lower().encode("latin-1"), v.encode("latin-1")) for n, v in pairs]
        else:
            headers += self._plain_headers
        body = response.body
        if isinstance(body, (bytes, bytearray)) and response.status not in _NO_LENGTH:
            headers.append((b"content-length", b"%d" % len(body)))
        if close:
            headers.append((b"connection", b"close"))
        return {"type": "http.response.start", "status": response.status, "headers": headers}

    async def quart(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """The quart app, answering ``Connection: close`` before a body is read, reading what
        is still queued after it returns, and sending an answer's last message shielded."""
        kind = scope.get("type")
        if kind not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        finished = False
        body_pending = kind == "http" and _has_body(scope)

        async def tracking_receive() -> Any:
            nonlocal finished, body_pending
            message = await receive()
            kind_ = message.get("type")
            if kind_ == "http.request" and not message.get("more_body", False):
                body_pending = False
            elif kind_ in ("http.disconnect", "websocket.disconnect"):
                finished = True
                body_pending = False
            return message

        async def closing_send(message: Any) -> None:
            kind_ = message.get("type")
            if kind_ == "http.response.start" and body_pending:
                headers = list(message.get("headers") or ())
                headers.append((b"connection", b"close"))
                message = {**message, "headers": headers}
            elif kind_ == "http.response.body" and not message.get("more_body", False):
                # Hypercorn ends the request here, then arms keep-alive or closes; quart-trio's
                # cancel of its tasks lands mid-send: unshielded, connections stayed open for good.
                with trio.CancelScope(shield=True) as scope:
                    scope.deadline = trio.current_time() + FINAL_SEND_DEADLINE_S
                    await send(message)
                return
            await send(message)

        try:
            await self.app(scope, tracking_receive, closing_send)
        finally:
            # Not shielded: if we are being cancelled the connection is torn down anyway.
            if kind == "http":
                if body_pending and not finished:
                    await _drain(tracking_receive)
            else:
                # A websocket peer should stop after our close frame: swallow the rest, bounded.
                while not finished:
                    with trio.move_on_after(WEBSOCKET_DRAIN_IDLE_S) as idle:
                        await tracking_receive()
                    if idle.cancelled_caught:
                        break


async def _read_body(receive: Any, limit: int, state: DaemonState, path: str) -> bytes:
    """The whole request body; ``_Refused`` (413, 408) past ``limit`` or ``BODY_TIMEOUT_S``."""
    parts: list[bytes] = []
    size = 0
    with trio.move_on_after(BODY_TIMEOUT_S):
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise _Gone
            chunk = message.get("body", b"")
            if chunk:
                size += len(chunk)
                if size > limit:
                    raise _Refused(too_large(state.settings, limit, path))
                parts.append(chunk)
            if not message.get("more_body", False):
                body = parts[0] if len(parts) == 1 else b"".join(parts)
                return bytes(body)
    message = f"the request body did not arrive within {BODY_TIMEOUT_S:g} s"
    raise _Refused(refusal(408, "request_timeout", message))


async def _drain(receive: Any) -> None:
    """Read and drop what is left of a request body (bounded in time)."""
    with trio.move_on_after(DRAIN_DEADLINE_S):
        while True:
            message = await receive()
            if message["type"] == "http.disconnect" or not message.get("more_body", False):
                return


async def _call(
    handler: Callable[..., Any], request: PlainRequest, args: dict[str, Any], renderer: Any
) -> PlainResponse:
    """``handler``'s answer; an error it raises becomes the route's error answer."""
    try:
        response = await handler(request, **args)
        if isinstance(response, PlainResponse):
            return response
        raise TypeError(
            f"a route handler must return a PlainResponse, got {type(response).__name__}"
        )
    except RoostError as exc:
        return _refusal_response(refusal_for(exc, request.path), renderer)
    except Exception as exc:
        log.error("unexpected error serving %s", request.path, exc_info=exc)
        return _refusal_response(internal_error(), renderer)


async def _stream(chunks: Any, send: Any) -> None:
    """Send each piece of a streamed body as it comes (the stream ends on an error)."""
    try:
        async for chunk in chunks:
            if chunk:
                await send({"type": "http.response.body", "body": bytes(chunk), "more_body": True})
    except Exception:
        log.exception("a streamed answer failed; it ends here")
    finally:
        aclose = getattr(chunks, "aclose", None)
        if aclose is not None:
            await aclose()


def _refusal_response(refusal: Refusal, renderer: Any) -> PlainResponse:
    body, content_type = render_refusal(refusal, renderer)
    return PlainResponse(refusal.status, body, content_type, tuple(refusal.headers.items()))


def _has_body(scope: dict[str, Any]) -> bool:
    for name, value in scope.get("headers", ()):
        name = bytes(name).lower()
        if name == b"transfer-encoding":
            return True
        if name == b"content-length":
            return bytes(value).strip() not in (b"", b"0")
    return False
