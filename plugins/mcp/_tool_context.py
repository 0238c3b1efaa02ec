"""From inside a tool: reach the MCP client whose ``tools/call`` runs it — progress and log
messages, requests to the client (sampling, elicitation, roots), the capabilities it
declared, and the stateless era's input round trips."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any

import trio
from roost.kernel import Event, RoostError, TraceContext
from roost.kernel import jsonrpc as rpc

from . import _protocol as p

if TYPE_CHECKING:  # pragma: no cover
    from ._server import _Call

PROGRESS_EVENT = "EXEC:PROGRESS"
"""Event kind a tool publishes to report progress (payload: progress, total, message)."""
LOG_EVENT = "EXEC:LOG"
"""Event kind a tool publishes to log to the MCP client (payload: level, data, logger)."""


def report_progress(
    ctx: Any, progress: float, total: float | None = None, message: str | None = None
) -> None:
    """From inside a tool: report progress to the MCP client that called it (if it asked)."""
    _publish(ctx, PROGRESS_EVENT, {"progress": progress, "total": total, "message": message})


def report_log(ctx: Any, level: str, data: Any, logger: str | None = None) -> None:
    """From inside a tool: send a log message to the MCP client (if it set a log level)."""
    _publish(ctx, LOG_EVENT, {"level": level, "data": data, "logger": logger})


def _publish(ctx: Any, kind: str, payload: dict[str, Any]) -> None:
    kernel = ctx.kernel
    if kernel is not None and ctx.trace is not None:
        kernel.publish(Event(kind, ctx.agent, payload=payload, trace=ctx.trace))


_channels: dict[str, list[_client_channel]] = {}  # by trace id; see _channel_of


class ClientRequestFailed(RoostError):
    """The MCP client could not or would not answer a server-to-client request."""

    code = "mcp_client_request_failed"


_CAPABILITY_FOR = {
    p.SAMPLING_CREATE_MESSAGE: "sampling",
    p.ELICITATION_CREATE: "elicitation",
    p.ROOTS_LIST: "roots",
}


class _client_channel:
    """While a request runs (a tools/call: registered under its trace), what reaches its
    client: requests, capability checks, the stateless era's input round trips. ``spans``:
    the call's own work (its watcher's spans, see ``_watch``); a tool reaches the channel
    only from within them, never from elsewhere on the same trace."""

    def __init__(self, trace_id: str, call: _Call, spans: set[str] | frozenset[str] = frozenset()):
        self.trace_id, self.call, self.spans = trace_id, call, spans
        self.missing: set[str] = set()
        self.responses_in: Mapping[str, Any] = {}
        self.state_in: str | None = None
        self.input_required: tuple[dict[str, Any], str | None] | None = None

    def __enter__(self) -> _client_channel:
        _channels.setdefault(self.trace_id, []).append(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        mine = _channels.get(self.trace_id, [])
        if self in mine:
            mine.remove(self)
        if not mine:
            _channels.pop(self.trace_id, None)

    def client_capabilities(self) -> Mapping[str, Any]:
        if self.call.stateless:
            return self.call.meta.client_capabilities or {}
        return self.call.session.client_capabilities or {}

    def require(self, capability: str | None) -> None:
        """Raise unless the client declared ``capability``; the call then answers -32021."""
        if capability is not None and capability not in self.client_capabilities():
            self.missing.add(capability)
            raise ClientRequestFailed(
                f"the MCP client did not declare the {capability!r} capability this tool needs"
            )

    async def request(
        self, method: str, params: Mapping[str, Any] | None, *, timeout_s: float = 60.0
    ) -> Any:
        """Send ``method`` to the client (handshake era) and return its result."""
        self.require(_CAPABILITY_FOR.get(method))
        call = self.call
        if call.notify is None:
            raise ClientRequestFailed(
                f"{method}: this transport cannot carry requests to the client"
            )
        if call.stateless:
            raise ClientRequestFailed(
                f"{method}: server-to-client requests do not exist at {call.meta.protocol_version}"
            )
        session = call.session
        session.next_outgoing_id += 1
        request_id = f"roost-{session.next_outgoing_id}"
        send, receive = trio.open_memory_channel[Any](1)
        session.outgoing[request_id] = send
        try:
            await call.notify(rpc.Request(method, params, request_id).to_dict())
            with trio.move_on_after(timeout_s) as scope:
                reply = await receive.receive()
            if scope.cancelled_caught:
                cancelled = {"requestId": request_id, "reason": "timed out"}
                await call.notify(rpc.Notification(p.NOTIFY_CANCELLED, cancelled).to_dict())
                raise ClientRequestFailed(
                    f"{method}: the MCP client did not answer within {timeout_s:g} s"
                )
        finally:
            session.outgoing.pop(request_id, None)
        if isinstance(reply, rpc.ErrorResponse):
            raise ClientRequestFailed(
                f"{method}: the MCP client answered error {reply.error.code}: {reply.error.message}"
            )
        return reply.result

    async def gather(
        self,
        requests: Mapping[str, Mapping[str, Any]],
        *,
        state: str | None = None,
        timeout_s: float = 60.0,
    ) -> dict[str, Any] | None:
        """``gather_input``'s work; None: the call answers ``input_required``."""
        if self.call.stateless:
            given = self.responses_in
            if all(key in given for key in requests):
                return {key: given[key] for key in requests}
            self.input_required = ({k: dict(v) for k, v in requests.items()}, state)
            return None
        return {
            key: await self.request(
                str(item.get("method")), item.get("params") or {}, timeout_s=timeout_s
            )
            for key, item in requests.items()
        }


def _channel_of(ctx: Any) -> _client_channel | None:
    """The channel of the ``tools/call`` whose work the tool context ``ctx`` is part of: on
    its trace, its span or its parent among the call's spans (the trace id alone is known
    to every peer the trace reached)."""
    trace = getattr(ctx, "trace", None)
    if trace is None:
        return None
    for channel in _channels.get(trace.trace_id, ()):
        if _of_call(trace, channel.spans):
            return channel
    return None


def _of_call(trace: TraceContext, spans: Collection[str]) -> bool:
    """Whether the work on ``trace`` is a call's own: its span or its parent among the
    call's ``spans`` (its watcher's, see ``_watch``)."""
    return trace.span_id in spans or trace.parent_span_id in spans


def require_client_capability(ctx: Any, capability: str) -> None:
    """From inside a tool: fail unless the calling MCP client declared ``capability``
    (e.g. ``"elicitation"``). The client then gets ``MissingRequiredClientCapability``
    (-32021) naming it, instead of a result."""
    channel = _channel_of(ctx)
    if channel is not None:
        channel.require(capability)


def client_capabilities(ctx: Any) -> Mapping[str, Any]:
    """From inside a tool: the capabilities the calling MCP client declared ({} if none)."""
    channel = _channel_of(ctx)
    return channel.client_capabilities() if channel is not None else {}


def request_state(ctx: Any) -> str | None:
    """From inside a tool, at 2026-07-28: the ``requestState`` the client echoed on this
    retry (already verified: roost signs the state it hands out), else None."""
    channel = _channel_of(ctx)
    return channel.state_in if channel is not None else None


async def gather_input(
    ctx: Any,
    requests: Mapping[str, Mapping[str, Any]],
    *,
    state: str | None = None,
    timeout_s: float = 60.0,
) -> dict[str, Any] | None:
    """From inside a tool: get input from the client. ``requests`` maps a key to
    ``{"method": "elicitation/create" | "sampling/createMessage" | "roots/list", "params": {...}}``.

    Handshake era: each request goes to the client now; returns the results by key.
    2026-07-28 (multi round-trip requests): returns the client's ``inputResponses`` when this
    retry carries all keys; otherwise the call is answered with an ``InputRequiredResult``
    (with ``state`` as the signed ``requestState``) and this returns None — the tool should
    then return at once (its result is discarded)."""
    channel = _channel_of(ctx)
    if channel is None:
        raise ClientRequestFailed("no MCP client is waiting on this tool call")
    return await channel.gather(requests, state=state, timeout_s=timeout_s)


async def request_client(
    ctx: Any, method: str, params: Mapping[str, Any] | None = None, *, timeout_s: float = 60.0
) -> Any:
    """From inside a tool: send ``method`` (e.g. ``sampling/createMessage``,
    ``elicitation/create``) to the MCP client whose ``tools/call`` is running this tool,
    and return its result. Handshake-era sessions only; raises ClientRequestFailed when
    there is no such client, it lacks the capability, answers an error or times out."""
    channel = _channel_of(ctx)
    if channel is None:
        raise ClientRequestFailed(f"{method}: no MCP client session is waiting on this tool call")
    return await channel.request(method, params, timeout_s=timeout_s)
