"""roost as an MCP client: ``ClientProtocol`` (sans-I/O: both eras' params and answers)
and ``McpClient`` running it over any transport, each request with a deadline; one that
times out or is cancelled is cancelled at the server.

``protocol``: a version pins the era; ``auto`` on HTTP sends ``server/discover`` first and
stays modern only on a modern ``DiscoverResult`` or error, else uses ``initialize``. On
stdio a legacy server may wedge on an unexpected first message, so the manager probes a
throw-away process (``probe_era``); without a probe ``auto`` opens with ``initialize``.
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from typing import Any

import attrs
import trio
from roost.kernel import (
    DeadlineTimer,
    RoostError,
    is_mapping,
    jsonrpc,
    number_setting,
    redacted_head,
)
from roost.plugins.http.client import http_retry_wait, remaining_s

from . import _protocol as proto
from .transports._base import (
    TransportClosed,
    TransportError,
    single_errors,
)

log = logging.getLogger("roost.mcp.client")

# Versions oldest first (the protocol module lists them newest first).
HANDSHAKE_VERSIONS = tuple(reversed(proto.HANDSHAKE_VERSIONS))
MODERN_VERSIONS = tuple(reversed(proto.STATELESS_VERSIONS))
LATEST_MODERN_VERSION = MODERN_VERSIONS[-1]
PROTOCOL_CHOICES = ("auto", *HANDSHAKE_VERSIONS, *MODERN_VERSIONS)

INPUT_REQUIRED_METHODS = frozenset({"tools/call", "resources/read", "prompts/get"})
# HTTP answers to the era probe that say nothing about the era (0: no HTTP answer at all).
REFUSALS = frozenset({0, 401, 403, 407, 429})
CANCEL_SEND_TIMEOUT_S = 2.0
HANDLER_TIMEOUT_S = 120.0


class McpError(RoostError, code="mcp_error"):
    """A call to an MCP server failed (base class)."""


class McpTimeout(McpError, code="mcp_timeout"):
    """The server did not answer within ``timeout_secs`` (the request was cancelled)."""


class McpConnectionClosed(McpError, code="mcp_connection_closed"):
    """The connection ended while the request was in flight."""


class McpProtocolError(McpError, code="mcp_protocol_error"):
    """The server answered with a JSON-RPC error, or broke the protocol."""

    def __init__(self, message: str, *, rpc_code: int | None = None, data: Any = None) -> None:
        super().__init__(message)
        self.rpc_code = rpc_code
        self.data = data

    def to_dict(self) -> dict:
        out = super().to_dict()
        if self.rpc_code is not None:
            out["rpc_code"] = self.rpc_code
        if self.data is not None:
            out["data"] = self.data
        return out


# ---- handlers the embedding application provides ---------------------------------------


@attrs.frozen
class ServerRequestContext:
    """Who a server-to-client request is on behalf of: ``caller`` is exact at 2026-07-28; in
    the handshake era it is the agent with the most recent call in flight."""

    server: str
    caller: str | None
    method: str


SamplingHandler = Callable[[Mapping[str, Any], ServerRequestContext], Awaitable[Mapping[str, Any]]]
ElicitationHandler = Callable[
    [Mapping[str, Any], ServerRequestContext], Awaitable[Mapping[str, Any]]
]
RootsProvider = Callable[[ServerRequestContext], Sequence[Mapping[str, Any]]]
NotificationHandler = Callable[[str, Mapping[str, Any]], None]
ProgressHandler = Callable[[Mapping[str, Any]], None]


@attrs.frozen
class ClientOptions:
    """How a client session behaves. ``protocol`` is ``auto`` or a protocol version."""

    server_name: str = "server"
    protocol: str = "auto"
    timeout_secs: float = 30.0
    client_name: str = "roost"
    client_version: str = "0.1.0"
    sampling: SamplingHandler | None = attrs.field(default=None, eq=False, repr=False)
    elicitation: ElicitationHandler | None = attrs.field(default=None, eq=False, repr=False)
    roots: RootsProvider | None = attrs.field(default=None, eq=False, repr=False)
    on_notification: NotificationHandler | None = attrs.field(default=None, eq=False, repr=False)
    log_level: str | None = "info"
    max_input_rounds: int = 8
    max_pending: int = 256
    max_list_pages: int = 1000
    # The credentials this server is given: taken out of its serverInfo before it is cut.
    secrets: tuple[str, ...] = attrs.field(default=(), converter=tuple, repr=False)

    def __attrs_post_init__(self) -> None:
        if self.protocol not in PROTOCOL_CHOICES:
            raise ValueError(
                f"protocol: expected one of {', '.join(PROTOCOL_CHOICES)}, got {self.protocol!r}"
            )
        if number_setting(self.timeout_secs) is None:  # a finite number > 0, never a bool
            raise ValueError(f"timeout_secs: expected a positive number, got {self.timeout_secs!r}")
        if self.log_level is not None and self.log_level not in proto.LOG_LEVELS:
            levels = ", ".join(proto.LOG_LEVELS)
            raise ValueError(f"log_level: expected one of {levels}, got {self.log_level!r}")


# ---- sans-I/O core -----------------------------------------------------------------------


def pick_modern_version(supported: Any) -> str | None:
    """The newest modern version both sides support, from a server's list."""
    if not isinstance(supported, (list, tuple)):
        return None
    return next((v for v in proto.STATELESS_VERSIONS if v in supported), None)


# MCP 2025-11-25 ``Implementation``: the texts kept of a server's ``serverInfo``, each cut to
# this; a URL (``websiteUrl``, an icon's ``src``) is kept whole or, longer, not at all.
_INFO_TEXTS = {"name": 256, "title": 256, "version": 128, "description": 2048}
_MAX_URL = 2048
_MAX_ICONS = 8


def implementation(info: Any, secrets: Sequence[str] = ()) -> dict[str, Any]:
    """What roost keeps of a server's ``serverInfo``: the fields of MCP's ``Implementation``
    bounded (texts cut, at most 8 ``icons`` of ``src``, ``mimeType``, ``sizes``, ``theme``,
    no URL over 2,048 characters), each of the right type; anything else dropped. A text
    is cut after ``secrets`` are taken out of it (a cut through one would leave its head)."""
    if not is_mapping(info):
        return {}

    def cut(text: str, n: int) -> str:
        return redacted_head(text, secrets, n)

    out: dict[str, Any] = {
        k: cut(v, n) for k, n in _INFO_TEXTS.items() if isinstance(v := info.get(k), str)
    }
    if isinstance(url := info.get("websiteUrl"), str) and len(url) <= _MAX_URL:
        out["websiteUrl"] = url
    icons = info.get("icons")
    kept = (
        [one for i in icons[:_MAX_ICONS] if (one := _icon(i, cut))]
        if isinstance(icons, list)
        else []
    )
    if kept:
        out["icons"] = kept
    return out


def _icon(icon: Any, cut: Callable[[str, int], str]) -> dict[str, Any] | None:
    """An MCP ``Icon``'s fields, bounded; None without a ``src`` roost keeps."""
    if not is_mapping(icon) or not isinstance(src := icon.get("src"), str) or len(src) > _MAX_URL:
        return None
    out: dict[str, Any] = {"src": src}
    if isinstance(mime := icon.get("mimeType"), str):
        out["mimeType"] = cut(mime, 128)
    if isinstance(sizes := icon.get("sizes"), list):
        out["sizes"] = [cut(s, 32) for s in sizes[:8] if isinstance(s, str)]
    if icon.get("theme") in ("dark", "light"):
        out["theme"] = icon["theme"]
    return out


class ClientProtocol:
    """The state of one client session, without I/O: builds params, accepts answers."""

    def __init__(self, options: ClientOptions) -> None:
        self.options = options
        self.era: str | None = None  # "handshake" | "modern"
        self.protocol_version: str | None = None
        self.server_info: Mapping[str, Any] = {}
        self.server_capabilities: Mapping[str, Any] = {}

    def client_info(self) -> dict[str, Any]:
        return {"name": self.options.client_name, "version": self.options.client_version}

    def capabilities(self) -> dict[str, Any]:
        caps: dict[str, Any] = {}
        if self.options.roots is not None:
            caps["roots"] = {"listChanged": False}
        if self.options.sampling is not None:
            caps["sampling"] = {}
        if self.options.elicitation is not None:
            caps["elicitation"] = {"form": {}}
        return caps

    # handshake era
    def initialize_params(self) -> dict[str, Any]:
        wanted = self.options.protocol
        version = wanted if wanted in HANDSHAKE_VERSIONS else proto.LATEST_HANDSHAKE_VERSION
        info = self.client_info()
        return {"protocolVersion": version, "capabilities": self.capabilities(), "clientInfo": info}

    def accept_initialize(self, result: Any) -> None:
        if not isinstance(result, Mapping):
            raise McpProtocolError("initialize: the server's result is not an object")
        version = result.get("protocolVersion")
        if version not in HANDSHAKE_VERSIONS:
            raise McpProtocolError(
                f"initialize: the server chose protocol version {version!r}, which roost does not "
                f"support (supported: {', '.join(HANDSHAKE_VERSIONS)}); upgrade roost or the server"
            )
        pinned = self.options.protocol
        if pinned in HANDSHAKE_VERSIONS and version != pinned:
            raise McpProtocolError(
                f"initialize: protocol = {pinned!r} is configured but the server speaks "
                f'{version!r}; set protocol = "auto" or the server\'s version'
            )
        self._adopt("handshake", version, result, result.get("serverInfo"))

    def _adopt(self, era: str, version: str, result: Mapping[str, Any], info: Any) -> None:
        """Take the era, version, capabilities and ``info`` a server gave."""
        caps = result.get("capabilities")
        self.era = era
        self.protocol_version = version
        self.server_capabilities = dict(caps) if isinstance(caps, Mapping) else {}
        self.server_info = implementation(info, self.options.secrets)

    # modern era
    def modern_meta(self, version: str) -> dict[str, Any]:
        return proto.stateless_meta(
            self.client_info(),
            self.capabilities(),
            version=version,
            log_level=self.options.log_level,
        )

    def accept_discover(self, result: Any) -> str:
        """Take a ``DiscoverResult``; returns the chosen version or raises McpProtocolError."""
        if not isinstance(result, Mapping):
            raise McpProtocolError("server/discover: the result is not an object")
        version = pick_modern_version(result.get("supportedVersions"))
        if version is None:
            raise McpProtocolError(
                "server/discover: the server supports none of roost's modern versions "
                f"(it offers {result.get('supportedVersions')!r}; "
                f"roost has {', '.join(MODERN_VERSIONS)})"
            )
        info = result.get("serverInfo")
        meta = result.get("_meta")
        if not isinstance(info, Mapping) and isinstance(meta, Mapping):
            info = meta.get(proto.META_SERVER_INFO)
        self._adopt("modern", version, result, info)
        return version

    def decorate(self, params: Mapping[str, Any] | None) -> dict[str, Any]:
        """Params ready to send: in the modern era, ``_meta`` gains the per-request fields."""
        if self.era == "modern" and self.protocol_version:
            return proto.with_meta(params, self.modern_meta(self.protocol_version))
        return dict(params or {})

    def note_server_info(self, result: Any) -> None:
        """Modern results may identify the server in ``_meta``; remember it."""
        if is_mapping(result):
            meta = result.get("_meta")
            info = meta.get(proto.META_SERVER_INFO) if is_mapping(meta) else None
            if is_mapping(info):
                self.server_info = implementation(info, self.options.secrets)

    @staticmethod
    def retry_params(
        params: Mapping[str, Any], result: Mapping[str, Any], responses: Mapping[str, Any]
    ) -> dict[str, Any]:
        """The params of the retry after an ``input_required`` result."""
        out = {k: v for k, v in params.items() if k not in ("inputResponses", "requestState")}
        if responses:
            out["inputResponses"] = dict(responses)
        state = result.get("requestState")
        if isinstance(state, str):
            out["requestState"] = state
        return out


def _offered_version(exc: McpProtocolError) -> str | None:
    """The version to retry with after an unsupported-version error, if the server lists one."""
    if exc.rpc_code != proto.UNSUPPORTED_PROTOCOL_VERSION or not is_mapping(exc.data):
        return None
    return pick_modern_version(exc.data.get("supported"))


# ---- the Trio session --------------------------------------------------------------------


class _Pending:
    __slots__ = ("id", "done", "message", "error", "caller", "method")

    def __init__(self, request_id: Any, method: str, caller: str | None) -> None:
        self.id = request_id
        self.done = trio.Event()
        self.message: jsonrpc.Response | jsonrpc.ErrorResponse | None = None
        self.error: BaseException | None = None
        self.caller = caller
        self.method = method


class McpClient(ClientProtocol):
    """One connection to one MCP server: the protocol core and its I/O (``open_mcp_client``)."""

    def __init__(self, transport: Any, options: ClientOptions, nursery: trio.Nursery) -> None:
        super().__init__(options)
        self.transport = transport
        self._nursery = nursery
        self._correlator = jsonrpc.Correlator(max_pending=options.max_pending)
        self._pending: dict[Any, _Pending] = {}
        self._progress: dict[str, ProgressHandler] = {}
        self._server_requests: dict[Any, trio.CancelScope] = {}
        self._tokens = itertools.count(1)
        self._callers: list[str] = []
        # Deadlines: one timer task, not a cancel scope a request (which costs more than the
        # rest of a call); a request that left ``_pending`` has ended, one past it is woken.
        pending_get = self._pending.get
        self._timer: DeadlineTimer[_Pending] = DeadlineTimer(
            nursery,
            lambda pending: pending_get(pending.id) is not pending,
            lambda pending: pending.done.set(),  # past its deadline: woken without an answer
            name="mcp-client:request-deadlines",
        )
        self.closed = trio.Event()
        self.closed_reason: str | None = None

    @property
    def name(self) -> str:
        return self.options.server_name

    async def _read(self) -> None:
        try:
            with suppress(trio.ClosedResourceError, trio.BrokenResourceError):
                async for raw in self.transport.incoming:
                    self._dispatch(raw)
        finally:
            reason = getattr(self.transport, "closed_reason", None) or "the connection closed"
            self._connection_lost(reason)

    def _connection_lost(self, reason: str) -> None:
        if self.closed.is_set():
            return
        self.closed_reason = reason
        self._correlator.forget_all()
        for pending in list(self._pending.values()):
            if not pending.done.is_set():
                pending.error = McpConnectionClosed(
                    f"MCP server {self.name!r}: {reason} while {pending.method} was in flight"
                )
                pending.done.set()
        self._pending.clear()
        self._timer.entries.clear()
        for scope in self._server_requests.values():
            scope.cancel()
        self.closed.set()

    def _dispatch(self, raw: Any) -> None:
        try:
            message = jsonrpc.parse_message(raw)
        except jsonrpc.JsonRpcError as exc:
            if not self._fail_invalid_answer(raw, exc):
                log.warning(
                    "MCP server %s sent an invalid message (ignored): %s", self.name, exc.message
                )
            return
        if isinstance(message, (jsonrpc.Response, jsonrpc.ErrorResponse)):
            try:
                self._correlator.feed(message)
            except jsonrpc.UnknownResponseId as exc:
                log.info("MCP server %s: %s", self.name, exc.message)
                return
            pending = self._pending.pop(message.id, None)
            if pending is not None:
                pending.message = message
                pending.done.set()
        elif isinstance(message, jsonrpc.Request):
            self._nursery.start_soon(self._answer_server_request, message)
        else:
            self._on_notification(message)

    def _fail_invalid_answer(self, raw: Any, exc: jsonrpc.JsonRpcError) -> bool:
        """Fail the request ``raw`` answers invalidly, at once; False if it answers none."""
        request_id = raw.get("id") if isinstance(raw, Mapping) and "method" not in raw else None
        if not isinstance(request_id, (str, int)) or isinstance(request_id, bool):
            return False
        pending = self._pending.pop(request_id, None)
        if pending is None:
            return False
        self._correlator.forget(request_id)
        pending.error = McpProtocolError(
            f"MCP server {self.name!r} answered {pending.method} with "
            f"an invalid response: {exc.message}"
        )
        pending.done.set()
        return True

    def _on_notification(self, note: jsonrpc.Notification) -> None:
        params = note.params if isinstance(note.params, Mapping) else {}
        if note.method == "notifications/progress":
            handler = self._progress.get(str(params.get("progressToken")))
            if handler is not None:
                try:
                    handler(params)
                except Exception:
                    log.exception("progress handler failed")
        elif note.method == "notifications/cancelled":
            scope = self._server_requests.get(params.get("requestId"))
            if scope is not None:
                scope.cancel()
        if self.options.on_notification is not None:
            try:
                self.options.on_notification(note.method, params)
            except Exception:
                log.exception("notification handler failed for %s", note.method)

    async def _answer_server_request(self, request: jsonrpc.Request) -> None:
        params = request.params if isinstance(request.params, Mapping) else {}
        caller = self._callers[-1] if self._callers else None
        reply: jsonrpc.Response | jsonrpc.ErrorResponse
        with trio.CancelScope() as scope:
            self._server_requests[request.id] = scope
            try:
                with trio.fail_after(HANDLER_TIMEOUT_S):
                    result = await self.answer_input_request(request.method, params, caller)
                reply = jsonrpc.Response(request.id, result)
            except jsonrpc.JsonRpcError as exc:
                reply = jsonrpc.ErrorResponse(request.id, exc.to_error())
            except trio.TooSlowError:
                reply = jsonrpc.error_response(
                    request.id,
                    jsonrpc.INTERNAL_ERROR,
                    f"{request.method}: no answer within {HANDLER_TIMEOUT_S:g} s",
                )
            except Exception as exc:
                log.exception("answering %s from %s failed", request.method, self.name)
                reply = jsonrpc.error_response(
                    request.id,
                    jsonrpc.INTERNAL_ERROR,
                    f"{request.method} failed: {type(exc).__name__}: {exc}",
                )
        self._server_requests.pop(request.id, None)
        if scope.cancelled_caught:
            return  # the server cancelled it: no response is sent
        try:
            await self.transport.send(reply.to_dict())
        except (TransportClosed, TransportError) as exc:
            log.info("could not answer %s from %s: %s", request.method, self.name, exc)

    async def answer_input_request(
        self, method: str, params: Mapping[str, Any], caller: str | None
    ) -> Any:
        """Answer a server-to-client or input request; JsonRpcError if not enabled."""
        context = ServerRequestContext(self.name, caller, method)
        if method == "ping":
            return {}
        if method == "roots/list":
            if self.options.roots is None:
                raise jsonrpc.JsonRpcError(
                    jsonrpc.METHOD_NOT_FOUND, "roots are not offered to this server"
                )
            return {"roots": [dict(r) for r in self.options.roots(context)]}
        if method == "sampling/createMessage":
            if self.options.sampling is None:
                raise jsonrpc.JsonRpcError(
                    jsonrpc.METHOD_NOT_FOUND,
                    f"sampling is disabled for MCP server {self.name!r} "
                    "(set sampling = true in its [[mcp_servers]] entry)",
                )
            return dict(await self.options.sampling(params, context))
        if method == "elicitation/create":
            if self.options.elicitation is None:
                raise jsonrpc.JsonRpcError(
                    jsonrpc.METHOD_NOT_FOUND, "elicitation is not enabled for this server"
                )
            return dict(await self.options.elicitation(params, context))
        raise jsonrpc.JsonRpcError(
            jsonrpc.METHOD_NOT_FOUND, f"method {method!r} not found on this client"
        )

    async def notify(self, method: str, params: Mapping[str, Any] | None = None) -> None:
        """Send a notification (no answer)."""
        message = jsonrpc.Notification(method, dict(params) if params is not None else None)
        await self.transport.send(message.to_dict())

    async def _exchange(
        self,
        method: str,
        params: Mapping[str, Any] | None,
        *,
        timeout: float | None = None,
        on_progress: ProgressHandler | None = None,
        caller: str | None = None,
    ) -> Any:
        """One request and its answer; HTTP 429/503 is retried after Retry-After in the deadline."""
        timeout = self.options.timeout_secs if timeout is None else timeout
        if not timeout >= 0:  # as trio.move_on_after would refuse it (NaN included)
            raise ValueError(f"timeout: expected a non-negative number of seconds, got {timeout!r}")
        deadline = trio.current_time() + timeout
        retries = 0
        while True:
            try:
                return await self._exchange_once(
                    method, params, timeout=timeout, on_progress=on_progress, caller=caller
                )
            except McpProtocolError as exc:
                data = exc.data if isinstance(exc.data, Mapping) else {}
                status = data.get("httpStatus")
                if status is None:
                    raise
                # http_retry_wait checks the server's number itself (NaN, -5, true: unsaid)
                wait = http_retry_wait(
                    status, data.get("retryAfter"), retries, remaining_s(deadline)
                )
                if wait is None:
                    if retries:
                        raise McpProtocolError(
                            f"{exc} (after {retries} retries)", rpc_code=exc.rpc_code, data=exc.data
                        ) from None
                    raise
                retries += 1
                log.info(
                    "MCP server %s answered %s with HTTP %s; retry %d in %.1f s",
                    self.name,
                    method,
                    status,
                    retries,
                    wait,
                )
                await trio.sleep(wait)
                timeout = max(0.0, deadline - trio.current_time())

    async def _exchange_once(
        self,
        method: str,
        params: Mapping[str, Any] | None,
        *,
        timeout: float,
        on_progress: ProgressHandler | None,
        caller: str | None,
    ) -> Any:
        if self.closed.is_set():
            raise McpConnectionClosed(
                f"MCP server {self.name!r} is disconnected: {self.closed_reason}"
            )
        params = dict(params) if params is not None else None
        token = None
        if on_progress is not None:
            token = f"roost-{next(self._tokens)}"
            params = proto.with_meta(params, {proto.META_PROGRESS_TOKEN: token})
            self._progress[token] = on_progress
        try:
            request = self._correlator.new_request(method, params)
        except jsonrpc.TooManyPending as exc:
            raise McpError(f"MCP server {self.name!r}: {exc.message}") from None
        pending = _Pending(request.id, method, caller)
        self._pending[request.id] = pending
        if caller:
            self._callers.append(caller)
        answered = False
        reason = "timeout"
        try:
            await self.transport.send(request.to_dict())
            if not (pending.done.is_set() or math.isinf(timeout)):
                # The heap stays within twice ``max_pending`` entries (plus its slack).
                self._timer.push(
                    trio.current_time() + timeout, request.id, pending, len(self._pending)
                )
            await pending.done.wait()
            # Set without an answer: the deadline passed (the timer woke it).
            answered = pending.message is not None or pending.error is not None
        except (TransportClosed, TransportError) as exc:
            answered = True
            pending.error = McpConnectionClosed(f"MCP server {self.name!r}: {exc}")
        except BaseException:
            reason = "cancelled"
            raise
        finally:
            if caller:
                self._callers.remove(caller)
            if token is not None:
                self._progress.pop(token, None)
            if not answered:
                self._pending.pop(request.id, None)
                self._correlator.forget(request.id)
                if not self.closed.is_set():
                    await self._cancel_at_server(request.id, method, reason)
        if not answered:
            if math.isinf(timeout):
                raise McpConnectionClosed(
                    f"MCP server {self.name!r}: {method} ended without an answer"
                )
            raise McpTimeout(
                f"MCP server {self.name!r} did not answer {method} within {timeout:g} s "
                "(the request was cancelled; raise timeout_secs for this server if it needs longer)"
            )
        error, message = pending.error, pending.message
        # The deadline heap may hold ``pending`` a while yet: not the answer (up to 10 MB).
        pending.error = pending.message = None
        if error is not None:
            raise error
        if isinstance(message, jsonrpc.ErrorResponse):
            raise McpProtocolError(
                f"MCP server {self.name!r} answered {method} with error "
                f"{message.error.code}: {message.error.message}",
                rpc_code=message.error.code,
                data=message.error.data,
            )
        assert message is not None
        return message.result

    async def _cancel_at_server(self, request_id: Any, method: str, reason: str) -> None:
        if method == "initialize":
            return
        with trio.CancelScope(shield=True):
            closed_stream = False
            try:
                closed_stream = bool(self.transport.cancel_request(request_id))
            except Exception:
                log.exception("closing the stream of request %r failed", request_id)
            if closed_stream and self.era == "modern":
                return  # on Streamable HTTP, closing the stream is the cancellation
            with trio.move_on_after(CANCEL_SEND_TIMEOUT_S):
                try:
                    await self.notify(
                        "notifications/cancelled", {"requestId": request_id, "reason": reason}
                    )
                except (TransportClosed, TransportError):
                    pass

    async def request(
        self,
        method: str,
        params: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
        on_progress: ProgressHandler | None = None,
        caller: str | None = None,
    ) -> Any:
        """Send ``method`` and return its result. At 2026-07-28 ``_meta`` is added, an
        unsupported version is retried with one the server lists, and ``input_required``
        results are answered and retried (up to ``max_input_rounds`` times)."""
        rounds = 0
        version_retried = False
        current = dict(params or {})
        while True:
            try:
                result = await self._exchange(
                    method,
                    self.decorate(current),
                    timeout=timeout,
                    on_progress=on_progress,
                    caller=caller,
                )
            except McpProtocolError as exc:
                modern = self.era == "modern" and not version_retried
                version = _offered_version(exc) if modern else None
                if version is None:
                    raise
                version_retried = True  # retry once, even with the same version
                self.protocol_version = version
                self.transport.set_protocol_version(version, modern=True)
                continue
            self.note_server_info(result)
            if proto.result_type(result) != "input_required":
                return result
            if method not in INPUT_REQUIRED_METHODS:
                raise McpProtocolError(
                    f"MCP server {self.name!r} answered {method} with input_required, "
                    "which the protocol does not allow for it"
                )
            rounds += 1
            if rounds > self.options.max_input_rounds:
                raise McpProtocolError(
                    f"MCP server {self.name!r} still asked for input after "
                    f"{self.options.max_input_rounds} rounds of {method}"
                )
            responses = await self._answer_input_requests(result.get("inputRequests"), caller)
            current = self.retry_params(current, result, responses)

    async def _answer_input_requests(self, requests: Any, caller: str | None) -> dict[str, Any]:
        if requests is None:
            return {}
        if not isinstance(requests, Mapping):
            raise McpProtocolError(f"MCP server {self.name!r}: inputRequests is not an object")
        out: dict[str, Any] = {}
        for key, item in requests.items():
            if not isinstance(item, Mapping) or not isinstance(item.get("method"), str):
                raise McpProtocolError(
                    f"MCP server {self.name!r}: inputRequests.{key} has no method"
                )
            item_params = item.get("params") if isinstance(item.get("params"), Mapping) else {}
            try:
                with trio.fail_after(HANDLER_TIMEOUT_S):
                    out[str(key)] = await self.answer_input_request(
                        item["method"], item_params, caller
                    )
            except jsonrpc.JsonRpcError as exc:
                raise McpProtocolError(
                    f"MCP server {self.name!r} needs {item['method']} to finish "
                    f"this call, but: {exc.message}",
                    rpc_code=exc.code,
                ) from None
        return out

    async def _handshake(self) -> None:
        result = await self._exchange("initialize", self.initialize_params())
        self.accept_initialize(result)
        self.transport.set_protocol_version(self.protocol_version, modern=False)
        await self.notify("notifications/initialized")
        listen = getattr(self.transport, "start_listening", None)
        if listen is not None:
            await listen()
        if self.options.log_level and "logging" in self.server_capabilities:
            try:
                await self._exchange("logging/setLevel", {"level": self.options.log_level})
            except McpError as exc:
                log.info("MCP server %s refused logging/setLevel: %s", self.name, exc)

    async def discover(self, *, timeout: float | None = None) -> Mapping[str, Any]:
        """Send ``server/discover`` and adopt the modern era; raises McpProtocolError."""
        wanted = self.options.protocol
        version = wanted if wanted in MODERN_VERSIONS else LATEST_MODERN_VERSION
        self.transport.set_protocol_version(version, modern=True)
        params = {"_meta": self.modern_meta(version)}
        try:
            result = await self._exchange("server/discover", params, timeout=timeout)
        except McpProtocolError as exc:
            retry = _offered_version(exc)  # retry once with what the server lists
            if retry is None:
                raise
            self.transport.set_protocol_version(retry, modern=True)
            params = {"_meta": self.modern_meta(retry)}
            result = await self._exchange("server/discover", params, timeout=timeout)
        chosen = self.accept_discover(result)
        self.transport.set_protocol_version(chosen, modern=True)
        return result

    async def start(self, *, era: str | None = None) -> None:
        """Select the era (``era``: a ``probe_era`` finding for ``auto``) and set up."""
        wanted = self.options.protocol
        if wanted in MODERN_VERSIONS or (wanted == "auto" and era == "modern"):
            await self.discover()
            return
        if wanted == "auto" and era is None and getattr(self.transport, "kind", "") == "http":
            try:
                await self.discover()
                return
            except McpProtocolError as exc:
                status = exc.data.get("httpStatus") if is_mapping(exc.data) else None
                # A modern server refusing us, or an unreachable or refusing one: falling back
                # to initialize would be wrong, or fare no better.
                if exc.rpc_code in proto.MODERN_ERROR_CODES or status in REFUSALS:
                    raise
                log.info(
                    "MCP server %s is not a 2026-07-28 server (%s); using initialize",
                    self.name,
                    exc,
                )
            self.era = None
            self.transport.set_protocol_version(None, modern=False)
        await self._handshake()

    async def listen(self) -> Any:
        """2026-07-28 ``subscriptions/listen``: list-change notifications reach
        ``on_notification`` until the server ends it (or the caller is cancelled)."""
        params = self.decorate({"notifications": dict.fromkeys(proto.LIST_CHANGES.values(), True)})
        return await self._exchange("subscriptions/listen", params, timeout=math.inf)

    async def ping(self, *, timeout: float | None = None) -> None:
        """Check the server answers (handshake era; 2026-07-28 has no ping: discover instead)."""
        await self.request("server/discover" if self.era == "modern" else "ping", timeout=timeout)

    async def _list_all(
        self, method: str, key: str, *, timeout: float | None
    ) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        cursor: str | None = None
        seen: set[str] = set()
        for _ in range(self.options.max_list_pages):
            params = {"cursor": cursor} if cursor is not None else None
            result = await self.request(method, params, timeout=timeout)
            if not isinstance(result, Mapping):
                raise McpProtocolError(
                    f"MCP server {self.name!r}: {method} result is not an object"
                )
            page = result.get(key)
            if not isinstance(page, list):
                raise McpProtocolError(
                    f"MCP server {self.name!r}: {method} result has no {key} array"
                )
            items.extend(dict(i) for i in page if isinstance(i, Mapping))
            cursor = result.get("nextCursor")
            if not isinstance(cursor, str) or not cursor:
                return items
            if cursor in seen:
                raise McpProtocolError(
                    f"MCP server {self.name!r}: {method} repeated the cursor {cursor!r}"
                )
            seen.add(cursor)
        raise McpProtocolError(
            f"MCP server {self.name!r}: {method} returned more than "
            f"{self.options.max_list_pages} pages"
        )

    async def list_tools(self, *, timeout: float | None = None) -> list[dict[str, Any]]:
        """Every tool, across pages (HTTP drops tools with invalid ``x-mcp-header``)."""
        tools = await self._list_all("tools/list", "tools", timeout=timeout)
        accept = getattr(self.transport, "accept_tools", None)
        return accept(tools) if accept is not None else tools

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        meta: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        on_progress: ProgressHandler | None = None,
        caller: str | None = None,
    ) -> dict[str, Any]:
        """``tools/call``; returns the raw ``CallToolResult``. ``meta`` goes in ``_meta``."""
        params: dict[str, Any] = {"name": name, "arguments": dict(arguments or {})}
        if meta:
            params["_meta"] = dict(meta)
        result = await self.request(
            "tools/call", params, timeout=timeout, on_progress=on_progress, caller=caller
        )
        if not is_mapping(result):
            raise McpProtocolError(f"MCP server {self.name!r}: tools/call result is not an object")
        return dict(result)

    async def list_resources(self, *, timeout: float | None = None) -> list[dict[str, Any]]:
        return await self._list_all("resources/list", "resources", timeout=timeout)

    async def list_resource_templates(
        self, *, timeout: float | None = None
    ) -> list[dict[str, Any]]:
        return await self._list_all(
            "resources/templates/list", "resourceTemplates", timeout=timeout
        )

    async def read_resource(
        self, uri: str, *, timeout: float | None = None, caller: str | None = None
    ) -> dict[str, Any]:
        result = await self.request("resources/read", {"uri": uri}, timeout=timeout, caller=caller)
        return dict(result) if isinstance(result, Mapping) else {}

    async def list_prompts(self, *, timeout: float | None = None) -> list[dict[str, Any]]:
        return await self._list_all("prompts/list", "prompts", timeout=timeout)

    async def get_prompt(
        self,
        name: str,
        arguments: Mapping[str, str] | None = None,
        *,
        timeout: float | None = None,
        caller: str | None = None,
    ) -> dict[str, Any]:
        params: dict[str, Any] = {"name": name}
        if arguments:
            params["arguments"] = {str(k): str(v) for k, v in arguments.items()}
        result = await self.request("prompts/get", params, timeout=timeout, caller=caller)
        return dict(result) if isinstance(result, Mapping) else {}


@asynccontextmanager
async def open_mcp_client(
    transport: Any, options: ClientOptions | None = None, *, era: str | None = None
) -> AsyncIterator[McpClient]:
    """Set a session up over the open ``transport`` (McpError if it cannot be) and yield
    the client; leaving stops the reader. A stdio transport hands replies straight over."""
    with single_errors():
        async with trio.open_nursery() as nursery:
            client = McpClient(transport, options or ClientOptions(), nursery)
            nursery.start_soon(client._read)
            delivers = hasattr(transport, "deliver")
            if delivers:
                transport.deliver = client._dispatch
            try:
                await client.start(era=era)
                yield client
            finally:
                if delivers and transport.deliver == client._dispatch:
                    transport.deliver = None  # the transport may outlive this client
                nursery.cancel_scope.cancel()


async def probe_era(transport: Any, *, timeout: float = 5.0, server_name: str = "server") -> str:
    """Ask a throw-away connection ``server/discover``: "modern" (a ``DiscoverResult``
    with a modern version, or a modern error) or "legacy" (anything else)."""
    options = ClientOptions(
        server_name=server_name, protocol=LATEST_MODERN_VERSION, timeout_secs=timeout
    )
    try:
        async with open_mcp_client(transport, options):
            return "modern"
    except McpProtocolError as exc:
        return "modern" if exc.rpc_code in proto.MODERN_ERROR_CODES else "legacy"
    except (McpError, TransportClosed, TransportError):
        return "legacy"
