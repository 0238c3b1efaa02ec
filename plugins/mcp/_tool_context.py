"""A ``tools/call``'s reach to its MCP client: from inside the tool, progress and log
messages, requests to the client, its capabilities and the stateless era's input round
trips; around the call, forwarding its own events.

Its own work is what runs below its server span, not its whole trace (a caller may continue
any trace id it learned). An agent's run follows ``TRACE:SPAN_START`` on its trace to keep
the spans descending from its own; an event is forwarded when its span or parent is one."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import TYPE_CHECKING, Any

import trio
from roost.kernel import (
    Event,
    EventKind,
    KernelAPI,
    RoostError,
    TraceContext,
    agent_tool_name,
)
from roost.kernel import jsonrpc as rpc

from . import _protocol as p

if TYPE_CHECKING:  # pragma: no cover
    from ._server import _Call

log = logging.getLogger("roost.mcp.server")

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


class ClientRequestFailed(RoostError, code="mcp_client_request_failed"):
    """The MCP client could not or would not answer a server-to-client request."""


_CAPABILITY_FOR = {
    p.SAMPLING_CREATE_MESSAGE: "sampling",
    p.ELICITATION_CREATE: "elicitation",
    p.ROOTS_LIST: "roots",
}


class _client_channel:
    """While a request runs (a tools/call: registered under its trace), what reaches its
    client; ``run`` forwards the progress and log messages of its own work (``spans``)."""

    MAX_SPANS = 4096  # the spans an agent's run follows at most (work past them: not reported)

    _KINDS = (
        EventKind.AGENT_TOKEN,
        EventKind.EXEC_TOOL_CALL,
        EventKind.EXEC_TOOL_RESULT,
        PROGRESS_EVENT,
        LOG_EVENT,
    )

    def __init__(
        self,
        call: _Call,
        kernel: KernelAPI | None = None,
        span: TraceContext | None = None,
        run: TraceContext | None = None,
        heartbeat: bool = False,
    ) -> None:
        # ``span``: a tools/call's server span; ``run``: the agent's run below it (a tool
        # call: the server span again). An agent's run: report each step, and follow the
        # spans below; else a tool's: report the tool's own events, those of ``span``'s child.
        self.call, self.kernel, self.heartbeat = call, kernel, heartbeat
        self.trace_id = span.trace_id if span is not None else ""
        self.spans = {span.span_id, run.span_id} if span is not None and run is not None else set()
        self.token = call.meta.progress_token
        self._count = 0
        self._reported: float | None = None
        self._last_sent = -1.0
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

    def _kinds(self) -> tuple[str, ...]:
        """The event kinds this call needs to see (none: nothing to forward)."""
        if self.call.notify is None:
            return ()
        kinds: tuple[str, ...] = (LOG_EVENT,) if self.call.log_level is not None else ()
        if self.token is not None:
            # Only an agent run reports its steps; a tool call only its own progress, so
            # it need not wake for every other call's tool events.
            kinds += self._KINDS[:-1] if self.heartbeat else (PROGRESS_EVENT,)
        return kinds

    async def run(self, fn: Callable[[], Awaitable[Any]]) -> Any:
        """``await fn()`` while forwarding; its exceptions propagate unwrapped."""
        kinds = self._kinds()
        if not kinds:
            return await fn()
        router = self.call.session.event_router
        if router is not None and router.active and router.kinds.issuperset(kinds):
            return await router.watch(self, fn)
        # No connection's router (HTTP), or one blind to these kinds: its own, taking span
        # starts from the start for an agent's run (no retune when the run starts and ends).
        router = _EventRouter(kinds + (SPAN_START,) if self.heartbeat else kinds)
        error: Exception | None = None
        async with trio.open_nursery() as nursery:
            await nursery.start(router.run, self.kernel)
            try:
                return await router.watch(self, fn)
            except Exception as exc:
                # Raised below as itself: not in the nursery's group, and not unwrapped
                # from a group of its own (as single_errors would).
                error = exc
            finally:
                nursery.cancel_scope.cancel()
        assert error is not None
        raise error

    async def _handle(self, event: Event) -> None:
        notify = self.call.notify
        assert notify is not None
        trace = event.trace
        if trace is None or trace.trace_id != self.trace_id:
            return
        spans = self.spans
        if event.kind == SPAN_START:  # an agent's run follows the spans below its own
            if self.heartbeat and trace.parent_span_id in spans and len(spans) < self.MAX_SPANS:
                spans.add(trace.span_id)
            return
        if not _of_call(trace, spans):
            return  # the same trace, but not this call's work
        payload = event.payload if isinstance(event.payload, Mapping) else {}
        if event.kind == LOG_EVENT:
            level = payload.get("level", "info")
            if p.log_level_allows(self.call.log_level, level):
                params = {"level": level, "data": payload.get("data")}
                if payload.get("logger"):
                    params["logger"] = payload["logger"]
                await notify(rpc.Notification(p.NOTIFY_MESSAGE, params).to_dict())
            return
        if self.token is None:
            return
        if event.kind == PROGRESS_EVENT and not self.heartbeat:
            value = payload.get("progress")
            if (
                isinstance(value, (int, float))
                and not isinstance(value, bool)
                and (self._reported is None or value > self._reported)
            ):
                self._reported = value  # progress must increase; a repeat or a step back is dropped
                params = p.progress_params(
                    self.token, value, payload.get("total"), payload.get("message")
                )
                await notify(rpc.Notification(p.NOTIFY_PROGRESS, params).to_dict())
            return
        if not self.heartbeat:
            return
        self._count += 1  # an agent at work: every step it takes is progress
        now = trio.current_time()
        if event.kind == EventKind.AGENT_TOKEN and now - self._last_sent < 0.05:
            return  # coalesce streamed tokens
        self._last_sent = now
        if event.kind == EventKind.EXEC_TOOL_CALL:
            # An ask of another agent carries a JSON-RPC tools/call, with no "tool" field.
            tool = payload.get("tool") or agent_tool_name(event.target or "?")
            message = f"{event.source}: calling {tool}"
        elif event.kind == EventKind.EXEC_TOOL_RESULT:
            if "tool" in payload:
                message = f"{event.target}: {payload['tool']} {payload.get('outcome')}"
            else:  # the asked agent's JSON-RPC answer
                result = payload.get("result")
                failed = "error" in payload or (
                    isinstance(result, Mapping) and result.get("isError")
                )
                outcome = "error" if failed else "ok"
                message = f"{event.target}: {agent_tool_name(event.source)} {outcome}"
        elif event.kind == PROGRESS_EVENT:
            message = str(payload.get("message") or f"{event.source}: working")
        else:
            message = f"{event.source} is answering"
        params = p.progress_params(self.token, self._count, None, message)
        await notify(rpc.Notification(p.NOTIFY_PROGRESS, params).to_dict())


def _channel_of(ctx: Any) -> _client_channel | None:
    """The channel of the ``tools/call`` whose work the tool context ``ctx`` is part of."""
    trace = getattr(ctx, "trace", None)
    channels = _channels.get(trace.trace_id, ()) if trace is not None else ()
    return next((c for c in channels if _of_call(trace, c.spans)), None)


def _of_call(trace: TraceContext, spans: Collection[str]) -> bool:
    """Whether the work on ``trace`` is a call's own: its span or its parent in ``spans``."""
    return trace.span_id in spans or trace.parent_span_id in spans


def require_client_capability(ctx: Any, capability: str) -> None:
    """From inside a tool: fail unless the calling MCP client declared ``capability``
    (e.g. ``"elicitation"``); the client then gets -32021 naming it, not a result."""
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
    """From inside a tool: get input from the client; ``requests`` maps a key to ``{"method":
    "elicitation/create" | "sampling/createMessage" | "roots/list", "params": {...}}``.
    Handshake era: the results by key, asked now. 2026-07-28: the retry's ``inputResponses``
    if it has every key; else None (return at once): the call answers
    ``InputRequiredResult`` with ``state`` as the signed ``requestState``."""
    channel = _channel_of(ctx)
    if channel is None:
        raise ClientRequestFailed("no MCP client is waiting on this tool call")
    return await channel.gather(requests, state=state, timeout_s=timeout_s)


async def request_client(
    ctx: Any, method: str, params: Mapping[str, Any] | None = None, *, timeout_s: float = 60.0
) -> Any:
    """From inside a tool: send ``method`` (e.g. ``sampling/createMessage``) to the calling
    MCP client and return its result. Handshake era only; ClientRequestFailed when there is
    no such client, it lacks the capability, answers an error or times out."""
    channel = _channel_of(ctx)
    if channel is None:
        raise ClientRequestFailed(f"{method}: no MCP client session is waiting on this tool call")
    return await channel.request(method, params, timeout_s=timeout_s)


# ---- forwarding a call's events to its client ----------------------------------------------

SPAN_START = EventKind.TRACE_SPAN_START


class _EventRouter:
    """One tap subscription (``kinds``, on its calls' traces only) whose events go to the
    channel of the call on their trace: a stream connection keeps one, not one per call."""

    FLUSH_TIMEOUT_S = 5.0

    def __init__(self, kinds: tuple[str, ...] = (PROGRESS_EVENT, LOG_EVENT)) -> None:
        self.kinds = frozenset(kinds)
        self.watchers: dict[str, list[_client_channel]] = {}
        self._following = 0  # watchers of agent runs, which take TRACE:SPAN_START too
        self._tap: Any = None
        self._events: trio.MemoryReceiveChannel[Event] | None = None
        self._taken = 0
        self._handled = 0
        self._waiting = False
        self._moved = trio.Event()

    @property
    def active(self) -> bool:
        return self._events is not None

    async def run(self, kernel: KernelAPI, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        self._tap = kernel.tap
        async with kernel.tap.subscribe(buffer=256, kinds=tuple(self.kinds), traces=()) as events:
            self._events = events
            task_status.started()
            try:
                while True:
                    self._waiting = True
                    try:
                        event = await events.receive()
                    except trio.EndOfChannel:
                        break
                    finally:
                        self._waiting = False
                    while True:  # and what else is queued, before waking those who wait
                        self._taken += 1
                        try:
                            if event.trace is not None:
                                for watcher in list(self.watchers.get(event.trace.trace_id, ())):
                                    await watcher._handle(event)
                        except Exception:  # one bad notification must not end the connection
                            log.exception("forwarding %s to the MCP client failed", event.kind)
                        finally:
                            self._handled += 1
                        try:
                            event = events.receive_nowait()
                        except (trio.WouldBlock, trio.EndOfChannel):
                            break
                    self._moved.set()
                    self._moved = trio.Event()
            finally:
                self._events = None
                self._moved.set()

    async def watch(self, watcher: _client_channel, fn: Callable[[], Awaitable[Any]]) -> Any:
        """``await fn()``, ``watcher`` taking its trace's events; return once the run's are sent."""
        mine = self.watchers.setdefault(watcher.trace_id, [])
        mine.append(watcher)
        follow = watcher.heartbeat and SPAN_START not in self.kinds
        self._following += follow
        # The subscription changes only when a trace comes or goes, or span starts are
        # first or no longer wanted: calls sharing a trace do not retune it.
        if len(mine) == 1 or (follow and self._following == 1):
            self._retune()
        try:
            published = self._tap.published
            result = await fn()
            if self._tap.published != published:  # else the run published nothing to wait for
                await self._flush()
        finally:
            mine.remove(watcher)
            if not mine:
                del self.watchers[watcher.trace_id]
            self._following -= follow
            if not mine or (follow and not self._following):
                self._retune()
        return result

    def _retune(self) -> None:
        """Take the watched traces' ``kinds`` from now (span starts too while a run is followed)."""
        if self._events is not None:
            kinds = self.kinds | {SPAN_START} if self._following else self.kinds
            self._tap.retune(self._events, tuple(kinds), traces=tuple(self.watchers))

    async def _flush(self) -> None:
        events = self._events
        if events is None:
            return
        # Publishing hands events to the channel at once: everything the run published is
        # handled, being handled, in the buffer, or handed to the router while it waited
        # (then it is still marked waiting though no longer queued as a receiver).
        stats = events.statistics()
        in_transit = 1 if self._waiting and stats.tasks_waiting_receive == 0 else 0
        target = self._taken + stats.current_buffer_used + in_transit
        if self._handled >= target:
            return
        with trio.move_on_after(self.FLUSH_TIMEOUT_S):
            while self._handled < target and self._events is not None:
                await self._moved.wait()
