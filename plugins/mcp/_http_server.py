"""MCP Streamable HTTP on the daemon: ``/mcp`` (every agent) and ``/agents/<name>/mcp``.

Both eras on the same endpoints, told apart per request. **Handshake era**: ``initialize``
opens a session (``Mcp-Session-Id``: 400 without, 404 unknown, ended or another
principal's); POST answers JSON or SSE, GET opens the notification stream, DELETE ends it;
a dropped SSE stream resumes with ``Last-Event-ID``. **Stateless** (2026-07-28): ``_meta``
names the version; ``MCP-Protocol-Version``, ``Mcp-Method`` and ``Mcp-Name`` must match the
body (400 ``HeaderMismatch``); closing the response stream cancels the request.

Sessions are bounded per caller (``http.mcp_sessions_per_caller``) and in all, and expire
after ``http.mcp_session_idle_s`` (``McpHttpHub``). A ``tools/call`` continues the deeper of
the trace contexts of its ``_meta`` and headers. Origin checks, auth and rate limits are the
daemon's; a body over ``p.MAX_MESSAGE_BYTES`` is answered 413 with a JSON-RPC error.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import secrets
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Hashable, Iterable, Mapping
from functools import partial
from typing import Any

import attrs
import trio
from roost.kernel import (
    AgentNotFound,
    InvalidInput,
    InvalidTraceContext,
    KernelAPI,
    TraceContext,
    parse_int,
)
from roost.kernel import jsonrpc as rpc
from roost.plugins.http import PlainRequest, PlainResponse

from . import _protocol as p
from ._server import McpServer, ServerSession

log = logging.getLogger("roost.mcp.http")

MAX_SESSIONS = 1000
REPLAY_EVENTS = 256
# A session's finished streams kept for resumption (the newest): a client that lost one
# reconnects at once; holding every one a long session streamed would hold its answers.
FINISHED_STREAMS_KEPT = 16
KEEPALIVE_S = 15.0
MAX_IN_FLIGHT_PER_SESSION = 64
SSE_RETRY_MS = 1000


# ---- SSE event logs ------------------------------------------------------------------------


class EventLog:
    """One SSE stream's events, numbered, the last ``keep`` of them kept for resumption."""

    def __init__(self, stream_id: str, keep: int = REPLAY_EVENTS) -> None:
        self.stream_id = stream_id
        self.events: deque[tuple[int, str]] = deque(maxlen=keep)
        self.next_seq = 1
        self.closed = False
        self._changed = trio.Event()

    def append(self, message: Any) -> None:
        if self.closed:
            return
        data = json.dumps(message, ensure_ascii=False, separators=(",", ":"), default=str)
        self.events.append((self.next_seq, data))
        self.next_seq += 1
        self._wake()

    def close(self) -> None:
        self.closed = True
        self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def first(self) -> None:
        """Wait until the stream has an event or is closed."""
        while not self.events and not self.closed:
            await self._changed.wait()

    async def follow(
        self, after: int = 0, *, keepalive_s: float = KEEPALIVE_S
    ) -> AsyncIterator[tuple[int, str] | None]:
        """Yield ``(seq, data)`` after ``after`` until closed; ``None`` while idle (keep-alive)."""
        while True:
            fresh = [(seq, data) for seq, data in self.events if seq > after]
            if fresh:
                for seq, data in fresh:
                    after = seq
                    yield seq, data
                # More may have come (and the stream closed, with no wake-up left to wait
                # for) while the consumer sent these: look again before waiting.
                continue
            if self.closed:
                return
            changed = self._changed
            with trio.move_on_after(keepalive_s) as idle:
                await changed.wait()
            if idle.cancelled_caught:
                yield None


# ---- sessions and the hub ------------------------------------------------------------------


@attrs.define(eq=False)
class HttpSession:
    """A handshake-era session at one endpoint."""

    server: McpServer
    state: ServerSession
    endpoint: str | None
    owner: str | None = None  # the principal that opened it; only it may use it
    caller: Hashable = None  # whose bound it counts against (principal, or address without keys)
    streams: dict[str, EventLog] = attrs.field(factory=dict)
    standalone: EventLog | None = None
    last_seen: float = 0.0
    active: int = 0  # requests being served on it (from lookup to answer)
    scope: trio.CancelScope = attrs.field(factory=trio.CancelScope)
    hub: Any = None  # the McpHttpHub holding it, which keeps sessions by last use

    def touch(self) -> None:
        """Used now: the most recently used session of its hub (and of its caller's)."""
        self.last_seen = trio.current_time()
        sid = self.state.id
        if self.hub.sessions.get(sid) is self:
            self.hub.sessions.move_to_end(sid)
            self.hub.by_caller[self.caller].move_to_end(sid)

    @property
    def busy(self) -> bool:
        """A request in flight or a GET stream open: not idle, never closed to make room."""
        return bool(self.active or self.state.in_flight) or (
            self.standalone is not None and not self.standalone.closed
        )

    def new_stream(self) -> EventLog:
        """A stream for one request's answer, kept for resumption (``FINISHED_STREAMS_KEPT``)."""
        finished = [sid for sid, s in self.streams.items() if s.closed]  # oldest first
        for sid in finished[: max(0, len(finished) - FINISHED_STREAMS_KEPT + 1)]:
            del self.streams[sid]
        stream = EventLog(secrets.token_hex(8))
        self.streams[stream.stream_id] = stream
        return stream


class McpHttpHub:
    """The MCP HTTP state of one kernel: servers per endpoint, sessions, and a nursery
    (while the service runs) in which work outlives a dropped connection, to be resumed."""

    def __init__(self, kernel: KernelAPI) -> None:
        self.kernel = kernel
        self.servers: dict[str | None, McpServer] = {}
        # Sessions by last use, least recent first (all, and each caller's): making room and
        # expiring look at the oldest only, not at every session.
        self.sessions: OrderedDict[str, HttpSession] = OrderedDict()
        self.by_caller: dict[Hashable, OrderedDict[str, HttpSession]] = {}
        self.nursery: trio.Nursery | None = None
        self.idle_s = float(kernel.config.http.mcp_session_idle_s)
        self.per_caller = int(kernel.config.http.mcp_sessions_per_caller)
        self.max_sessions = MAX_SESSIONS
        self._next_expiry = -math.inf

    def server_for(self, agent: str | None) -> McpServer:
        server = self.servers.get(agent)
        if server is None:
            server = self.servers[agent] = McpServer(self.kernel, agent=agent)
        return server

    def open_session(
        self,
        server: McpServer,
        endpoint: str | None,
        *,
        owner: str | None = None,
        caller: Hashable = None,
    ) -> HttpSession:
        """A new session of ``owner``, counted against ``caller``'s bound. Past the caller's
        bound its own oldest idle session is closed, past ``max_sessions`` anyone's; only
        when every session in the way is busy is the new one refused."""
        self._expire()
        mine = self.by_caller.get(caller) or {}
        if len(mine) >= self.per_caller and not self._close_oldest_idle(mine.values()):
            raise _busy(
                429,
                f"this caller has {len(mine)} MCP sessions, all busy (at most "
                f"{self.per_caller}: http.mcp_sessions_per_caller); end unused ones with DELETE",
            )
        if len(self.sessions) >= self.max_sessions and not self._close_oldest_idle(
            self.sessions.values()
        ):
            raise _busy(
                503, f"too many MCP sessions ({self.max_sessions}), all busy; retry shortly"
            )
        state = ServerSession(principal=owner)
        session = HttpSession(
            server, state, endpoint, owner, caller, last_seen=trio.current_time(), hub=self
        )
        self.sessions[session.state.id] = session
        self.by_caller.setdefault(caller, OrderedDict())[session.state.id] = session
        if self.nursery is not None:
            self.nursery.start_soon(self._watch, session)
        return session

    async def _watch(self, session: HttpSession) -> None:
        async def push(message: Any) -> None:
            if session.standalone is not None:
                session.standalone.append(message)

        with session.scope:
            await session.server.watch_changes(session.state, push)

    def close_session(self, session_id: str) -> bool:
        session = self.sessions.pop(session_id, None)
        if session is None:
            return False
        mine = self.by_caller.get(session.caller)
        if mine is not None:
            mine.pop(session_id, None)
            if not mine:
                del self.by_caller[session.caller]
        session.state.closed = True
        session.state.cancel_all()
        session.scope.cancel()
        for stream in session.streams.values():
            stream.close()
        if session.standalone is not None:
            session.standalone.close()
        return True

    def _close_oldest_idle(self, sessions: Iterable[HttpSession]) -> bool:
        """Close the first (least recently used) idle session of ``sessions``; False if none."""
        oldest = next((s for s in sessions if not s.busy), None)
        if oldest is None:
            return False
        log.info(
            "MCP session %s closed to make room (idle %.0f s)",
            oldest.state.id[:8],
            trio.current_time() - oldest.last_seen,
        )
        return self.close_session(oldest.state.id)

    def _expire(self) -> None:
        """Close the sessions idle for ``idle_s`` (looked for at most every ``idle_s / 10``,
        and a second at most: busy old sessions, a GET stream say, are passed over)."""
        now = trio.current_time()
        if now < self._next_expiry:
            return
        self._next_expiry = now + min(1.0, self.idle_s / 10)
        expired = []
        for sid, session in self.sessions.items():  # least recently used first
            if now - session.last_seen <= self.idle_s:
                break
            if not session.busy:
                expired.append(sid)
        for sid in expired:
            self.close_session(sid)

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        try:
            async with trio.open_nursery() as nursery:
                self.nursery = nursery
                task_status.started()
                await trio.sleep_forever()
        finally:
            self.nursery = None
            for sid in list(self.sessions):
                self.close_session(sid)


_HUB = "roost.plugins.mcp.http_hub"  # its key in kernel.extensions


def hub_for(kernel: KernelAPI) -> McpHttpHub:
    """The hub of ``kernel`` (created on first use)."""
    hub = kernel.extensions.get(_HUB)
    if hub is None:
        hub = kernel.extensions[_HUB] = McpHttpHub(kernel)
    return hub


async def run_hub(kernel: KernelAPI, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
    """The ``mcp-http`` service: owns the nursery of the kernel's MCP HTTP sessions."""
    await hub_for(kernel).run(task_status=task_status)


# ---- request handling ---------------------------------------------------------------------


@attrs.define
class _HttpError(Exception):
    """The answer to give instead of serving the request."""

    status: int
    body: Any = None
    headers: Mapping[str, str] = attrs.field(factory=dict)


def _json_response(
    status: int, body: Any, headers: Mapping[str, str] | None = None
) -> PlainResponse:
    if hasattr(body, "to_dict"):
        body = body.to_dict()
    if body is None:
        return PlainResponse(status, b"", "", headers or {})
    return PlainResponse.json(body, status, headers=headers or {})


def _refuse(
    status: int, message: str, request_id: Any = None, code: int = rpc.INVALID_REQUEST
) -> _HttpError:
    """HTTP ``status`` with a JSON-RPC error (``code``) saying why."""
    return _HttpError(status, rpc.error_response(request_id, code, message))


def _busy(status: int, message: str) -> _HttpError:
    """No room for another session now: 429/503 asking to retry in a second."""
    return _HttpError(
        status, rpc.error_response(None, rpc.SERVER_ERROR, message), {"Retry-After": "1"}
    )


_TOO_LARGE = (
    "message too large: MCP messages over HTTP are limited to "
    f"{p.MAX_MESSAGE_BYTES} bytes (10 MB); send smaller arguments or pass large data by "
    "reference (e.g. a resource URI)"
)


def _accepts(header: str | None, mime: str) -> bool:
    if not header:
        return True
    kinds = [part.split(";")[0].strip().lower() for part in header.split(",")]
    return mime in kinds or "*/*" in kinds or f"{mime.split('/')[0]}/*" in kinds


def _stateless_status(reply: Mapping[str, Any]) -> int:
    """200, or the 400 or 404 the 2026-07-28 transport maps a stateless error's code to."""
    error = reply.get("error")
    if not isinstance(error, Mapping):
        return 200
    code = error.get("code")
    if code in (
        p.UNSUPPORTED_PROTOCOL_VERSION,
        p.HEADER_MISMATCH,
        p.MISSING_REQUIRED_CLIENT_CAPABILITY,
        rpc.INVALID_REQUEST,
    ):
        return 400
    if code == rpc.INVALID_PARAMS:
        message = str(error.get("message", ""))
        if p.META_PROTOCOL_VERSION in message or p.META_CLIENT_CAPABILITIES in message:
            return 400
    if code == rpc.METHOD_NOT_FOUND:
        return 404
    return 200


def _server(kernel: KernelAPI, name: str | None) -> McpServer:
    try:
        return hub_for(kernel).server_for(name)
    except AgentNotFound as exc:
        raise _HttpError(404, _daemon_error(404, "agent_not_found", str(exc))) from None


async def _handle(
    kernel: KernelAPI, request: PlainRequest, name: str | None = None
) -> PlainResponse:
    try:
        if request.method == "POST":
            return await _post(kernel, request, name)
        if request.method == "GET":
            return await _get(kernel, request, name)
        if request.method == "DELETE":
            return await _delete(kernel, request, name)
        raise _HttpError(405, None, {"Allow": "GET, POST, DELETE"})
    except _HttpError as exc:
        return _json_response(exc.status, exc.body, exc.headers)


# ---- POST -------------------------------------------------------------------------------
async def _post(kernel: KernelAPI, request: PlainRequest, name: str | None) -> PlainResponse:
    server = _server(kernel, name)
    ctype = (request.headers.get("Content-Type") or "").split(";")[0].strip().lower()
    if ctype != "application/json":
        raise _refuse(415, f"Content-Type must be application/json, got {ctype or 'none'}")
    accept = request.headers.get("Accept")
    if not (_accepts(accept, "application/json") or _accepts(accept, "text/event-stream")):
        raise _refuse(406, "Accept must list application/json and text/event-stream")
    try:
        message = json.loads(request.body.decode("utf-8"))
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        deep = isinstance(exc, RecursionError)
        why = "the JSON is nested too deeply" if deep else f"the body is not JSON ({exc})"
        raise _refuse(400, f"parse error: {why}", code=rpc.PARSE_ERROR) from None
    if isinstance(message, list):
        raise _refuse(
            400, "batches (JSON arrays) are not accepted; send one JSON-RPC message per POST"
        )
    try:
        parsed = rpc.parse_message(message)
    except rpc.JsonRpcError as exc:
        raise _HttpError(400, exc.to_response()) from None
    if isinstance(parsed, rpc.Request) and parsed.method == p.TOOLS_CALL:
        # The deeper of the headers' trace context (as /api reads them) and _meta's.
        try:
            p.carry_trace(TraceContext.from_headers(request.headers), message)
        except InvalidTraceContext as exc:  # a malformed depth header: 400 naming it
            raise _HttpError(400, p.field_error(exc).to_response(parsed.id)) from None
    header_version = request.headers.get(p.HEADER_PROTOCOL_VERSION)
    # Stateless when the body says so, or when a session-less request names a 2026 version.
    stateless = isinstance(parsed, (rpc.Request, rpc.Notification)) and (
        p.request_era(parsed.params) == p.ERA_STATELESS
        or (p.is_stateless_version(header_version) and not request.headers.get(p.HEADER_SESSION_ID))
    )
    if stateless:
        return await _post_stateless(kernel, request, server, parsed, message)
    return await _post_session(kernel, request, server, name, parsed, message)


async def _post_stateless(
    kernel: KernelAPI, request: PlainRequest, server: McpServer, parsed: Any, message: Any
) -> PlainResponse:
    request_id = getattr(parsed, "id", None)  # only requests and notifications come here
    if isinstance(parsed, rpc.Request):
        try:  # the body's own _meta first: a missing field is -32602, not a header mismatch
            p.check_stateless_meta(p.read_request_meta(parsed.params))
        except rpc.JsonRpcError as exc:
            if exc.code != p.UNSUPPORTED_PROTOCOL_VERSION:
                raise _HttpError(400, exc.to_response(request_id)) from None
    params = parsed.params if isinstance(parsed.params, Mapping) else {}
    meta = params.get("_meta")
    body_version = meta.get(p.META_PROTOCOL_VERSION) if isinstance(meta, Mapping) else None

    def check(header: str, body_value: Any, field: str, decode: Any = str, what: str = "") -> None:
        """400 ``HeaderMismatch`` unless ``header`` is sent and (decoded) agrees with the body's
        ``field``."""
        sent = request.headers.get(header)
        if sent is None:
            problem = f"the {header} header is required{what}"
        elif body_value is None:
            problem = f"{header} header value {sent!r} but the body has no {field}; send both"
        elif (value := decode(sent)) is None or value != body_value:
            problem = f"{header} header value {sent!r} does not match {field} {body_value!r}"
        else:
            return
        error = rpc.JsonRpcError(p.HEADER_MISMATCH, f"Header mismatch: {problem}")
        raise _HttpError(400, error.to_response(request_id))

    check(p.HEADER_PROTOCOL_VERSION, body_version, f"params._meta[{p.META_PROTOCOL_VERSION!r}]")
    if not p.is_stateless_version(body_version):
        raise _HttpError(400, p.unsupported_version_error(body_version).to_response(request_id))
    if isinstance(parsed, rpc.Request):
        check(p.HEADER_METHOD, parsed.method, "method")
        key = p.NAMED_METHODS.get(parsed.method)
        if key is not None:
            name, method = params.get(key), parsed.method
            check(p.HEADER_NAME, name, f"params.{key}", p.decode_header_value, f" for {method}")
    session = ServerSession(principal=_caller(request)[0])  # one request's
    if isinstance(parsed, rpc.Notification):
        await server.handle(session, message)
        return _json_response(202, None)
    wants_stream = parsed.method in (p.TOOLS_CALL, p.SUBSCRIPTIONS_LISTEN) and _accepts(
        request.headers.get("Accept"), "text/event-stream"
    )
    hub = hub_for(kernel)
    if wants_stream and hub.nursery is not None:
        stream = EventLog(secrets.token_hex(8))
        scope = trio.CancelScope()
        hub.nursery.start_soon(_run_into, server, session, message, stream, scope, None)
        try:
            answered, _ = await request.unless_gone(stream.first)
        except BaseException:
            scope.cancel()
            raise
        if not answered:
            scope.cancel()  # the client left before anything happened
            return _json_response(202, None)
        if stream.closed and len(stream.events) == 1:
            # Answered before any notification: plain JSON, with the status an error needs.
            reply = json.loads(stream.events[0][1])
            return _json_response(_stateless_status(reply), reply)
        return _sse(stream, 0, cancel_on_close=scope, with_ids=False)
    answered, reply = await request.unless_gone(partial(server.handle, session, message))
    if not answered or reply is None:
        return _json_response(202, None)
    return _json_response(_stateless_status(reply), reply)


async def _post_session(
    kernel: KernelAPI,
    request: PlainRequest,
    server: McpServer,
    name: str | None,
    parsed: Any,
    message: Any,
) -> PlainResponse:
    hub = hub_for(kernel)
    request_id = getattr(parsed, "id", None)
    if isinstance(parsed, rpc.Request) and parsed.method == p.INITIALIZE:
        owner, caller = _caller(request)
        if request.headers.get(p.HEADER_SESSION_ID):
            session = hub.sessions.get(request.headers[p.HEADER_SESSION_ID])
            if session is None or session.owner != owner:
                raise _refuse(
                    404,
                    "unknown or ended MCP session; initialize without Mcp-Session-Id",
                    request_id,
                )
        session = hub.open_session(server, name, owner=owner, caller=caller)
        session.active += 1
        try:
            reply = await server.handle(session.state, message)
        finally:
            session.active -= 1
        if reply is None or "error" in reply:
            hub.close_session(session.state.id)
            return _json_response(200 if reply else 202, reply)
        return _json_response(200, reply, {p.HEADER_SESSION_ID: session.state.id})
    session = _session(kernel, request, name, request_id)
    session.active += 1  # not idle (never closed to make room) until answered
    try:
        header_version = request.headers.get(p.HEADER_PROTOCOL_VERSION)
        if header_version is not None:
            if header_version not in p.SUPPORTED_VERSIONS:
                raise _HttpError(
                    400, p.unsupported_version_error(header_version).to_response(request_id)
                )
            if header_version != session.state.protocol_version:
                raise _refuse(
                    400,
                    f"{p.HEADER_PROTOCOL_VERSION} header says {header_version!r} but this "
                    f"session negotiated {session.state.protocol_version!r}",
                    request_id,
                )
        session.touch()
        if not isinstance(parsed, rpc.Request):
            await server.handle(session.state, message)
            return _json_response(202, None)
        if len(session.state.in_flight) >= MAX_IN_FLIGHT_PER_SESSION:
            raise _refuse(
                429,
                f"too many requests in flight on this session (max {MAX_IN_FLIGHT_PER_SESSION})",
                request_id,
                code=rpc.SERVER_ERROR,
            )
        wants_stream = parsed.method == p.TOOLS_CALL and _accepts(
            request.headers.get("Accept"), "text/event-stream"
        )
        if wants_stream and hub.nursery is not None:
            stream = session.new_stream()
            session.active += 1  # until the request is answered (_run_into)
            scope = trio.CancelScope()
            hub.nursery.start_soon(
                _run_into, server, session.state, message, stream, scope, session
            )
            prime = (session.state.protocol_version or "") >= "2025-11-25"  # negotiated: a date
            return _sse(stream, 0, prime=prime)
        reply = await server.handle(session.state, message)
        return _json_response(200, reply) if reply is not None else _json_response(202, None)
    finally:
        session.active -= 1
        session.touch()


def _session(
    kernel: KernelAPI, request: PlainRequest, name: str | None, request_id: Any = None
) -> HttpSession:
    session_id = request.headers.get(p.HEADER_SESSION_ID)
    if not session_id:
        raise _refuse(
            400,
            f"{p.HEADER_SESSION_ID} header required: send initialize first (or, "
            f"at {p.LATEST_VERSION}, put the protocol version in params._meta)",
            request_id,
        )
    session = hub_for(kernel).sessions.get(session_id)
    # Another principal's session is unknown, exactly like one that never existed.
    if session is None or session.endpoint != name or session.owner != _caller(request)[0]:
        raise _refuse(404, "unknown or ended MCP session; initialize a new one", request_id)
    return session


# ---- GET and DELETE ----------------------------------------------------------------------
async def _get(kernel: KernelAPI, request: PlainRequest, name: str | None) -> PlainResponse:
    _server(kernel, name)
    if not request.headers.get(p.HEADER_SESSION_ID):
        why = "GET needs an MCP session (Mcp-Session-Id); at 2026-07-28 use subscriptions/listen"
        error = _daemon_error(405, "method_not_allowed", why)
        raise _HttpError(405, error, {"Allow": "POST, DELETE"})
    if not _accepts(request.headers.get("Accept"), "text/event-stream"):
        raise _refuse(406, "GET opens an SSE stream: Accept must list text/event-stream")
    session = _session(kernel, request, name)
    session.touch()
    last = request.headers.get(p.HEADER_LAST_EVENT_ID)
    if last:
        stream_id, _, seq = last.rpartition(".")
        stream = session.streams.get(stream_id)
        if session.standalone is not None and session.standalone.stream_id == stream_id:
            stream = session.standalone
        with contextlib.suppress(InvalidInput):  # an event number parse_int refuses
            if stream is not None:
                return _sse(stream, parse_int(seq, p.HEADER_LAST_EVENT_ID, 0, 10**18))
        why = f"{p.HEADER_LAST_EVENT_ID} {last[:80]!r} names no stream this session can resume"
        raise _refuse(404, why)
    if session.standalone is not None and not session.standalone.closed:
        raise _refuse(409, "this session already has an open GET stream; close it first")
    session.standalone = EventLog(secrets.token_hex(8))
    return _sse(session.standalone, 0, standalone_of=session)


async def _delete(kernel: KernelAPI, request: PlainRequest, name: str | None) -> PlainResponse:
    session = _session(kernel, request, name)
    hub_for(kernel).close_session(session.state.id)
    return _json_response(204, None)


# ---- SSE ---------------------------------------------------------------------------------
def _sse(
    stream: EventLog,
    after: int,
    *,
    prime: bool = False,
    cancel_on_close: trio.CancelScope | None = None,
    standalone_of: HttpSession | None = None,
    with_ids: bool = True,
) -> PlainResponse:
    async def body() -> AsyncIterator[bytes]:
        try:
            if prime:
                yield f"id: {stream.stream_id}.0\nretry: {SSE_RETRY_MS}\ndata: \n\n".encode()
            async for item in stream.follow(after):
                if item is None:
                    yield b": keepalive\n\n"
                    continue
                seq, data = item
                head = f"id: {stream.stream_id}.{seq}\n" if with_ids else ""
                # A lone surrogate in the JSON (UTF-8 cannot carry it) goes as its escape.
                yield f"{head}event: message\ndata: {data}\n\n".encode("utf-8", "backslashreplace")
        finally:
            if cancel_on_close is not None:
                cancel_on_close.cancel()  # stateless: a closed stream cancels the request
            if standalone_of is not None and standalone_of.standalone is stream:
                stream.close()
                standalone_of.standalone = None

    headers = (("Cache-Control", "no-cache"), ("X-Accel-Buffering", "no"))
    return PlainResponse(200, body(), "text/event-stream", headers)


def _caller(request: Any) -> tuple[str | None, Hashable]:
    """``(principal name, bound key)`` of a request: with API keys configured a caller is
    its principal; without, everyone is ``local`` and callers are told apart by address."""
    from roost.plugins.http import principal_of

    principal = principal_of(request)
    name = principal.name if principal is not None else None
    if principal is not None and principal.keyed:
        return name, ("principal", name)
    return name, ("addr", request.remote_addr)


async def _run_into(
    server: McpServer,
    session: ServerSession,
    message: Any,
    stream: EventLog,
    scope: trio.CancelScope,
    http_session: HttpSession | None,
) -> None:
    """Run one request into ``stream``; then ``http_session`` (which counted it) is idle again."""

    async def notify(note: Any) -> None:
        stream.append(note)

    try:
        with scope:
            reply = await server.handle(session, message, notify=notify)
            if reply is not None:
                stream.append(reply)
    finally:
        stream.close()
        if http_session is not None:
            http_session.active -= 1
            http_session.touch()


def _daemon_error(status: int, code: str, message: str) -> dict[str, Any]:
    """An HTTP-level error as a JSON-RPC error (``id`` null) naming roost's code and status."""
    from roost.plugins.http import jsonrpc_error_code

    data = {"code": code, "httpStatus": status}
    return rpc.error_response(None, jsonrpc_error_code(status, code), message, data).to_dict()


def render_error(status: int, code: str, message: str) -> tuple[bytes, str]:
    """``RouteDescriptor.render_error`` of the MCP endpoints: the daemon's own errors (401,
    403 Origin, 404, 405, 413, 429, 500) as ``_daemon_error``."""
    if code == "body_too_large":
        message = _TOO_LARGE
    body = json.dumps(
        _daemon_error(status, code, message), ensure_ascii=False, separators=(",", ":")
    )
    return body.encode(), "application/json"


def mcp_routes(kernel: KernelAPI) -> list[Any]:
    """The daemon routes: ``/mcp`` and ``/agents/<name>/mcp`` (POST, GET, DELETE)."""
    from roost.kernel import RouteDescriptor

    return [
        RouteDescriptor(
            path,
            partial(_handle, kernel),
            methods=("POST", "GET", "DELETE"),
            max_body_bytes=p.MAX_MESSAGE_BYTES,
            render_error=render_error,
        )
        for path in ("/mcp", "/agents/<name>/mcp")
    ]
