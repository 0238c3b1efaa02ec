"""What every HTTP request of the daemon goes through, whichever handler answers it.

Plain functions, no Quart: the quart app's hooks and the plugin-route dispatch (``_asgi``)
both call them, so a request meets the same path matching, Origin, auth, rate limit, body
caps, headers and error shapes (a route's own ``render_error``) either way.
"""

from __future__ import annotations

import functools
import ipaddress
import json
import logging
import math
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any

import attrs
import trio
from roost.kernel import (
    ActorStopped,
    AgentNotFound,
    AskTimeout,
    InvalidInput,
    InvalidTraceContext,
    KernelAPI,
    LoopDetected,
    RecursionLimitExceeded,
    RoostError,
    SandboxError,
    SessionConflict,
    StoreError,
    TaintViolation,
    ToolArgumentsInvalid,
    ToolDenied,
    ToolNotFound,
    ToolTimeout,
    TraceContext,
    jsonrpc,
    outputs_to_json,
)

from ._auth import (
    LOCAL,
    Principal,
    bearer_token,
    host_allowed,
    host_name,
    ip_of,
    origin_allowed,
    token_fingerprint,
)
from ._daemonfile import base_url
from ._settings import HttpSettings
from ._traces import TraceLog

log = logging.getLogger("roost.http")


class InvalidRequest(RoostError):
    """The request is malformed; ``field`` names the part to fix (400)."""

    code = "invalid_request"

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(message)

    def to_dict(self) -> dict:
        return {**super().to_dict(), "field": self.field}


# Checked in order; the first matching class decides the status.
_STATUS_BY_ERROR: tuple[tuple[type[RoostError], int], ...] = (
    (InvalidRequest, 400),
    (AgentNotFound, 404),
    (ToolNotFound, 404),
    (ToolArgumentsInvalid, 400),
    (InvalidInput, 400),
    (SessionConflict, 409),  # a session id of another agent: the request's mistake
    (ToolDenied, 403),
    (SandboxError, 403),
    (TaintViolation, 403),
    (RecursionLimitExceeded, 508),
    (LoopDetected, 508),
    (AskTimeout, 504),
    (ToolTimeout, 504),
    (ActorStopped, 503),
    (StoreError, 503),  # storage failed (e.g. the disk is full): nothing was kept
)

# Errors the kernel may add without exporting the class.
_STATUS_BY_CODE = {"mailbox_full": 503, "agent_unavailable": 503}

CORS_HEADERS = {
    "Access-Control-Allow-Headers": (
        "Authorization, Content-Type, traceparent, X-Roost-Trace-Id, "
        "X-Roost-Trace-Depth, X-Roost-Trace-Path"
    ),
    "Access-Control-Allow-Methods": "GET, POST, OPTIONS",
    "Access-Control-Expose-Headers": "Retry-After, X-Roost-Trace-Id",
    "Vary": "Origin",
}


def canonical_path(path: str) -> str:
    """``path`` without trailing slashes (``/`` stays): each route answers both ways, with
    no redirect (a 307/308 on a POST breaks clients that join a base URL and ``/``)."""
    if path.endswith("/") and len(path) > 1:
        return path.rstrip("/") or "/"
    return path


@functools.lru_cache(maxsize=1024)
def _is_loopback(addr: str) -> bool:
    ip = ip_of(addr)
    return ip is not None and ip.is_loopback


def is_loopback(addr: str | None) -> bool:
    """True for a peer on this host (127.0.0.0/8, ::1, ::ffff:127.x); False when unknown."""
    return addr == "127.0.0.1" or (addr is not None and _is_loopback(addr))


def status_for(error: RoostError) -> int:
    """The HTTP status for a roost error (500 for anything not listed)."""
    for cls, status in _STATUS_BY_ERROR:
        if isinstance(error, cls):
            return status
    return _STATUS_BY_CODE.get(error.code, 500)


@attrs.frozen
class Refusal:
    """An error answer: ``{"error": error}`` with ``status`` and extra ``headers``."""

    status: int
    error: Mapping[str, Any]
    headers: Mapping[str, str] = attrs.field(factory=dict)

    def body(self) -> bytes:
        return json.dumps({"error": dict(self.error)}, ensure_ascii=False, default=str).encode()


def refusal(
    status: int, code: str, message: str, headers: Mapping[str, str] | None = None, **extra: Any
) -> Refusal:
    """``Refusal`` of ``{"code": code, "message": message, **extra}``."""
    return Refusal(status, {"code": code, "message": message, **extra}, headers or {})


def too_large(settings: HttpSettings, limit: int, path: str) -> Refusal:
    """413 naming the limit and where it is set."""
    where = "http.max_body_bytes in roost.toml"
    if limit != settings.max_body_bytes:
        where = f"the limit of {path}"
    message = f"request body is larger than the limit of {limit} bytes ({where})"
    return refusal(413, "body_too_large", message, limit_bytes=limit)


def admin_only(reason: str) -> Refusal:
    """403 for a principal that is not an admin; ``reason`` says why, the fix follows."""
    fix = "the key of http.api_key, or one with admin = true under [http.keys.<name>]"
    return refusal(403, "forbidden", f"{reason}: {fix}")


def internal_error() -> Refusal:
    return refusal(500, "internal_error", "internal error; the daemon log has the details")


def is_wildcard(host: str) -> bool:
    """True for an address that binds every interface (``0.0.0.0``, ``::``)."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_unspecified
    except ValueError:
        return False


def loopback_for(host: str) -> str:
    """``host``, or the loopback address of its family when it is a wildcard address."""
    if not is_wildcard(host):
        return host
    return "::1" if ":" in host else "127.0.0.1"


def daemon_public_url(public_url: str | None, bound_host: str, bound_port: int) -> str | None:
    """``http.public_url``, else the bound address; None for a wildcard bind (per connection)."""
    return public_url or (None if is_wildcard(bound_host) else base_url(bound_host, bound_port))


def connection_base_url(public_url: str | None, local: Any) -> str:
    """Base URL: ``public_url``, else ``local`` (the address reached); never the client-set Host."""
    if public_url:
        return public_url
    if local and len(local) >= 2:
        return base_url(str(local[0]), int(local[1]))
    return "http://127.0.0.1"


ErrorRenderer = Callable[[int, str, str], tuple[bytes, str]]

# JSON-RPC codes (JSON-RPC 2.0 section 5.1) for the daemon's own errors on a JSON-RPC route.
_INVALID_REQUEST_STATUSES = frozenset({400, 405, 406, 411, 413, 414, 415, 431})


def jsonrpc_error_code(status: int, code: str) -> int:
    """The JSON-RPC code of the daemon's own error on a JSON-RPC route: -32601 no such path, -32603
    unhandled, -32600 refused as sent (400, 405, 413...), else -32000 (401, 403, 429, 503...)."""
    if status == 404 and code == "not_found":
        return jsonrpc.METHOD_NOT_FOUND
    if code == "internal_error":
        return jsonrpc.INTERNAL_ERROR
    if status in _INVALID_REQUEST_STATUSES:
        return jsonrpc.INVALID_REQUEST
    return jsonrpc.SERVER_ERROR


def render_refusal(refusal: Refusal, renderer: ErrorRenderer | None) -> tuple[bytes, str]:
    """``(body, content type)`` by the route's ``render_error``, else (or if it fails) roost's
    ``{"error": {...}}`` JSON."""
    if renderer is not None:
        error = refusal.error
        try:
            body, content_type = renderer(
                refusal.status, str(error.get("code", "error")), str(error.get("message", ""))
            )
        except Exception:
            log.exception(
                "render_error failed for a %s answer; sent roost's error shape", refusal.status
            )
        else:
            if isinstance(body, (bytes, bytearray)) and isinstance(content_type, str):
                return bytes(body), content_type
            log.error(
                "render_error must return (bytes, str), got a %s; sent roost's error shape",
                type(body).__name__,
            )
    return refusal.body(), "application/json"


class ErrorShapes:
    """Which ``render_error`` shapes an error answer: the matched route's. For a path no route
    matches (404, 405), the route sharing the most leading path segments with it (a ``<var>``
    segment matches any one; at least one literal must match); among equals, one allowing the
    request's method, then the first registered."""

    def __init__(self) -> None:
        self.by_endpoint: dict[str, ErrorRenderer] = {}
        self._routes: list[tuple[tuple[str | None, ...], frozenset[str], ErrorRenderer | None]] = []

    def set_routes(self, routes: Iterable[tuple[str, Iterable[str], str]]) -> None:
        """Index ``(rule path, methods, endpoint)`` of every route, in registration order."""
        self._routes = []
        for path, methods, endpoint in routes:
            parts = canonical_path(path).strip("/").split("/")
            rule = tuple(None if "<" in part else part for part in parts)
            self._routes.append((rule, frozenset(methods), self.by_endpoint.get(endpoint)))

    def for_request(self, endpoint: str | None, method: str, path: str) -> ErrorRenderer | None:
        if endpoint is not None:
            return self.by_endpoint.get(endpoint)
        if not self.by_endpoint:
            return None
        segments = canonical_path(path).strip("/").split("/")
        best: ErrorRenderer | None = None
        best_rank = (0, False)
        for rule, methods, renderer in self._routes:
            matched = 0
            literal = False
            for want, got in zip(rule, segments, strict=False):
                if want is not None and want != got:
                    break
                matched += 1
                literal = literal or want is not None
            rank = (matched, method in methods)
            if literal and rank > best_rank:
                best, best_rank = renderer, rank
        return best


def refusal_for(exc: RoostError, path: str) -> Refusal:
    """The answer to a ``RoostError`` raised by a handler (logged when it is a 5xx)."""
    status = status_for(exc)
    if status >= 500:
        log.warning("request %s failed: %s", path, exc)
    return Refusal(status, exc.to_dict())


@attrs.define
class DaemonState:
    """What the handlers share, and the checks in front of every route (Host, Origin, auth,
    rate limit, declared size); ``closing`` is set when graceful shutdown begins."""

    kernel: KernelAPI
    settings: HttpSettings
    limiter: Any
    event_buffer: int
    version: str
    closing: trio.Event = attrs.field(factory=trio.Event)
    # Endpoints that skip auth; skip the rate limit; have their own body cap (and render the 413).
    public_endpoints: set[str] = attrs.field(factory=set)
    unlimited_endpoints: set[str] = attrs.field(factory=set)
    body_limits: dict[str, int] = attrs.field(factory=dict)
    # (method, path) -> (endpoint, view args) or None: the app's routing, cached (bounded).
    route_cache: dict[tuple[str, str], tuple[str, dict[str, Any]] | None] = attrs.field(
        factory=dict
    )
    # Plugin routes: endpoint -> (RouteDescriptor.handler, its methods).
    routes: dict[str, tuple[Callable[..., Any], frozenset[str]]] = attrs.field(factory=dict)
    error_shapes: ErrorShapes = attrs.field(factory=ErrorShapes)
    # The base URL links are built from, set once bound (see daemon_public_url).
    public_url: str | None = None
    # Recent traces' spans for the dashboard (holding none when http.trace_history is 0).
    traces: TraceLog = attrs.field(factory=lambda: TraceLog(0))
    clock: Callable[[], float] = trio.current_time
    trusted_hosts: frozenset[str] = attrs.field(init=False)

    @trusted_hosts.default
    def _trusted_hosts(self) -> frozenset[str]:
        return self.settings.trusted_hosts

    def check(
        self,
        endpoint: str | None,
        headers: Any,
        remote_addr: str | None,
        content_length: int | None,
        *,
        local_addr: str | None = None,
        is_websocket: bool = False,
        is_preflight: bool = False,
        query_token: Callable[[], str | None] | None = None,
    ) -> tuple[Refusal | None, Principal | None]:
        """``(refusal or None, principal)``: by key (a websocket may use ``query_token``), ``local``
        without keys, None on a public route without a valid key; ``local_addr``: the sockname."""
        settings = self.settings
        refused = self.check_host(headers.get("Host"), local_addr)
        if refused is not None:
            return refused, None
        origin = headers.get("Origin")
        if origin is not None and not origin_allowed(origin, settings.allowed_origins):
            message = (
                f"requests from origin {origin!r} are not allowed; add it to "
                "http.allowed_origins in roost.toml to let a browser page on it call roost"
            )
            return refusal(403, "origin_forbidden", message), None
        public = endpoint in self.public_endpoints or is_preflight
        # Local peers share an address (a mesh would throttle itself): exempt unless configured.
        limited = settings.rate_limit_loopback or not is_loopback(remote_addr)
        rate_key: Hashable = ("addr", str(remote_addr or "?"))
        principal: Principal | None = LOCAL
        if settings.keys:
            token = bearer_token(headers.get("Authorization"))
            if token is None and is_websocket and query_token is not None:
                token = query_token() or None
            principal = settings.principal_for(token)
        if settings.keys and not public:
            if principal is None:
                # failed attempts count too: no free guessing
                refused = self._limit(rate_key) if limited else None
                if refused is not None:
                    return refused, None
                message = (
                    f"bearer token {'missing' if token is None else 'wrong'}; send "
                    "'Authorization: Bearer <key>' with your key (http.api_key or the variable "
                    "named by http.api_key_env, or one of [http.keys])"
                )
                if is_websocket:
                    message += (
                        " (a browser page passes it as the websocket subprotocol "
                        "roost.bearer.<key in unpadded base64url>, beside roost)"
                    )
                challenge = {"WWW-Authenticate": 'Bearer realm="roost"'}
                return refusal(401, "unauthorized", message, challenge), None
            rate_key = ("token", token_fingerprint(token))  # type: ignore[arg-type]
        if limited and endpoint not in self.unlimited_endpoints:
            refused = self._limit(rate_key)
            if refused is not None:
                return refused, None
        # A route with its own cap reads its body and may render the 413 itself (MCP
        # answers with a JSON-RPC error); the body buffer refuses the excess either way.
        if not is_websocket and endpoint not in self.body_limits:
            if content_length is not None and content_length > settings.max_body_bytes:
                return too_large(settings, settings.max_body_bytes, ""), principal
        return None, principal

    def check_host(self, host: str | None, local_addr: str | None) -> Refusal | None:
        """The DNS-rebinding guard (``host_allowed``): None to serve ``host``, else 400 or 421."""
        if host_allowed(host, local_addr, self.trusted_hosts):
            return None
        shown = host[:100]  # type: ignore[index]
        if host_name(host) is not None:  # type: ignore[arg-type]
            return refusal(
                421,
                "host_not_allowed",
                f"this daemon does not serve requests for host {shown!r} (a guard against DNS "
                "rebinding); call it as localhost or 127.0.0.1, or add the name to "
                "http.allowed_hosts (or set http.public_url) in roost.toml",
            )
        return refusal(  # refused before any router parses it
            400,
            "bad_host",
            f"the Host header {shown!r} is not a host name (dot-separated labels of 1-63 "
            "letters, digits, '-' or '_', or an IP address, IPv6 in brackets, and an optional "
            "':port'); send the name or address you connect to, e.g. localhost or 127.0.0.1",
        )

    def _limit(self, key: Hashable) -> Refusal | None:
        allowed, retry_after = self.limiter.check(key, self.clock())
        if allowed:
            return None
        seconds = max(1, math.ceil(retry_after))
        message = (
            f"too many requests; retry after {seconds} s "
            "(limits: http.rate_limit_per_s and http.rate_limit_burst in roost.toml)"
        )
        return refusal(429, "rate_limited", message, {"Retry-After": str(seconds)})


def common_headers(settings: HttpSettings, origin: str | None) -> list[tuple[str, str, bool]]:
    """``(name, value, replace)`` for every response: set when absent (or always when
    ``replace``); CORS headers only for an allowed ``Origin``."""
    out = [("X-Content-Type-Options", "nosniff", False), ("Cache-Control", "no-store", False)]
    if origin is not None and origin_allowed(origin, settings.allowed_origins):
        out.append(("Access-Control-Allow-Origin", origin, True))
        out.extend((name, value, False) for name, value in CORS_HEADERS.items())
    return out


async def caller_headers(
    kernel: KernelAPI, method: str, items: Iterable[tuple[str, str]], peer: Any, local: Any
) -> list[tuple[str, str]] | None:
    """The headers with the trace headers of the run holding the connection (``peer`` → ``local``),
    or None to keep them (a malformed one is the entry's to refuse). A process an agent's ``bash``
    started may call without trace headers, or with a shallower context: for a POST the kernel
    finds the run holding its end of the connection (``caller_of``), so the call continues that
    run's chain and the depth breaker trips however the caller calls."""
    processes = kernel.process_traces
    if method != "POST" or not processes:
        return None
    found = await processes.caller_of(peer, local)
    if found is None:
        return None
    items = list(items)
    try:
        sent = TraceContext.from_headers(dict(items))
    except InvalidTraceContext:
        return None
    chosen = TraceContext.deepest(sent, found)
    if chosen is sent:
        return None
    names = TraceContext.header_names
    return [(n, v) for n, v in items if n.lower() not in names] + list(chosen.to_headers().items())


def tool_json(spec: Any) -> dict[str, Any]:
    """A ``ToolSpec`` as ``GET /api/tools`` lists it: its MCP shape, owner and full name."""
    return {**spec.to_mcp(), "owner": spec.owner, "qualified_name": spec.qualified_name}


def reply_json(reply: Any) -> dict[str, Any]:
    """An ``AgentReply`` as ``POST /api/agents/{name}/message`` answers it."""
    body = {
        "agent": reply.agent,
        "reply": reply.text,
        "session_id": reply.session_id,
        "trace_id": reply.trace_id,
        "is_error": reply.is_error,
        "turns": reply.turns,
    }
    if reply.outputs:
        body["artifacts"] = outputs_to_json(reply.outputs)
    return body
