"""While a ``tools/call`` runs: forward the events of its own work to its MCP client —
progress (when the request has a progress token) and tool log messages (when the client
set a log level).

Its own work is what runs below its server span, not its trace: a caller may continue any
trace id it has learned (``traceparent``), so the trace id alone would hand it another
principal's events. A tool call's events are its tool's, whose span is the server span's
child. An agent's run reaches further (its tool calls, the agents it asks, their tools),
so its watcher also follows ``TRACE:SPAN_START`` on its trace — a span is announced before
any event of its own, in the same channel — keeping the spans that descend from its own,
and forwards an event only when the event's span or its parent is one of them."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

import trio
from roost.kernel import Event, EventKind, KernelAPI, TraceContext
from roost.kernel import jsonrpc as rpc

from . import _protocol as p
from ._tool_context import LOG_EVENT, PROGRESS_EVENT, _of_call

if TYPE_CHECKING:  # pragma: no cover
    from ._server import _Call

log = logging.getLogger("roost.mcp.server")


SPAN_START = EventKind.TRACE_SPAN_START


class _RunWatcher:
    """While a tools/call runs: forward progress (if the request has a progressToken) and
    tool log messages (if the client set a log level) of the work below its span."""

    # The spans an agent's run follows at most: work past them is not reported to the
    # caller (it is never someone else's).
    MAX_SPANS = 4096

    _KINDS = (
        EventKind.AGENT_TOKEN,
        EventKind.EXEC_TOOL_CALL,
        EventKind.EXEC_TOOL_RESULT,
        PROGRESS_EVENT,
        LOG_EVENT,
    )

    def __init__(
        self, kernel: KernelAPI, call: _Call, span: TraceContext, run: TraceContext, heartbeat: bool
    ) -> None:
        # ``span``: the call's server span; ``run``: the agent's run below it (a tool call:
        # the server span again). An agent's run: report each step, and follow the spans
        # below; else a tool's: report the tool's own events, those of ``span``'s child.
        self.heartbeat = heartbeat
        self.kernel = kernel
        self.call = call
        self.trace_id = span.trace_id
        self.spans = {span.span_id, run.span_id}
        self.token = call.meta.progress_token
        self._count = 0
        self._reported: float | None = None
        self._last_sent = -1.0

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
        # No connection's router (HTTP), or one that does not see these kinds: its own
        # (which, like any router, takes span starts while it watches an agent's run).
        router = _EventRouter(kinds)
        error: Exception | None = None
        async with trio.open_nursery() as nursery:
            await nursery.start(router.run, self.kernel)
            try:
                result = await router.watch(self, fn)
            except Exception as exc:  # raised below as itself, not in the nursery's group
                error = exc
            nursery.cancel_scope.cancel()
        if error is not None:
            raise error
        return result

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
            message = f"{event.source}: calling {payload.get('tool')}"
        elif event.kind == EventKind.EXEC_TOOL_RESULT:
            message = f"{event.target}: {payload.get('tool')} {payload.get('outcome')}"
        elif event.kind == PROGRESS_EVENT:
            message = str(payload.get("message") or f"{event.source}: working")
        else:
            message = f"{event.source} is answering"
        params = p.progress_params(self.token, self._count, None, message)
        await notify(rpc.Notification(p.NOTIFY_PROGRESS, params).to_dict())


class _EventRouter:
    """One tap subscription (for ``kinds``, on the traces of the calls it watches) whose
    events go to the watcher of the call on their trace. A stream connection keeps one for
    tool progress and log events, rather than a subscription and a forwarding task per
    call, which with many calls in flight cost more than the calls; and a router is given
    only its calls' traces, so a thousand calls in flight do not each wake for every
    other call's spans."""

    FLUSH_TIMEOUT_S = 5.0

    def __init__(self, kinds: tuple[str, ...] = (PROGRESS_EVENT, LOG_EVENT)) -> None:
        self.kinds = frozenset(kinds)
        self.watchers: dict[str, list[_RunWatcher]] = {}
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

    async def watch(self, watcher: _RunWatcher, fn: Callable[[], Awaitable[Any]]) -> Any:
        """``await fn()`` with ``watcher`` receiving its trace's events; before returning,
        wait until the events published during the run have been forwarded."""
        self.watchers.setdefault(watcher.trace_id, []).append(watcher)
        follow = watcher.heartbeat and SPAN_START not in self.kinds
        if follow:
            self._following += 1
        self._retune()
        try:
            published = self._tap.published
            result = await fn()
            if self._tap.published != published:  # else the run published nothing to wait for
                await self._flush()
        finally:
            mine = self.watchers.get(watcher.trace_id, [])
            if watcher in mine:
                mine.remove(watcher)
            if not mine:
                self.watchers.pop(watcher.trace_id, None)
            if follow:
                self._following -= 1
            self._retune()
        return result

    def _retune(self) -> None:
        """Take the events of the watched traces from now on (while the subscription is
        open): ``kinds``, and span starts too while an agent run's watcher follows them."""
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
