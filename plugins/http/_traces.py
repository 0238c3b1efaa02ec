"""The spans of recent traces, kept in memory for the dashboard (``GET /api/traces``):
the newest ``http.trace_history`` traces from the kernel's ``TRACE:`` events (an end record
replaces its start), bounded by ``MAX_SPANS`` per trace and ``MAX_KEPT_SPANS`` in all.
"""

from __future__ import annotations

import contextlib
import itertools
from collections import OrderedDict
from typing import Any

import trio
from roost.kernel import EventKind

MAX_SPANS = 2_000  # per trace; a runaway fan-out keeps its first spans
# In all: one caller can fill every trace it starts (a refused call is a span, and cheap).
MAX_KEPT_SPANS = 10_000
BATCH_WAIT_S = 0.05  # a busy kernel wakes the log at most this often
BUFFER = 10_000  # events that may wait meanwhile (more are dropped, and counted)


class TraceLog:
    """The newest ``max_traces`` traces' span records, by trace id (bounded)."""

    def __init__(self, max_traces: int) -> None:
        self.max_traces = max_traces
        self._traces: OrderedDict[str, dict[str, dict[str, Any]]] = OrderedDict()
        self._kept = 0  # span records in all
        self.dropped = 0

    def add(self, record: Any) -> None:
        """Keep one span record (a ``TRACE:SPAN_START`` or ``TRACE:SPAN_END`` payload)."""
        if not isinstance(record, dict):
            return
        trace_id, span_id = record.get("trace_id"), record.get("span_id")
        if not isinstance(trace_id, str) or not isinstance(span_id, str):
            return
        spans = self._traces.get(trace_id)
        if spans is None:
            spans = self._traces[trace_id] = {}
            while len(self._traces) > self.max_traces:
                self._kept -= len(self._traces.popitem(last=False)[1])
        if span_id in spans:
            spans[span_id] = record
        elif len(spans) < MAX_SPANS:
            spans[span_id] = record
            self._kept += 1
            while self._kept > MAX_KEPT_SPANS:  # another trace holds spans: MAX_SPANS is less
                oldest = next(t for t in self._traces if t != trace_id)
                self._kept -= len(self._traces.pop(oldest))

    def spans(self, trace_id: str) -> list[dict[str, Any]] | None:
        """The spans of ``trace_id`` in the order they began; None if not held."""
        spans = self._traces.get(trace_id)
        return None if spans is None else sorted(spans.values(), key=_start)

    def recent(self, limit: int) -> list[dict[str, Any]]:
        """The newest ``limit`` traces, newest first: ``{"trace_id", "spans"}`` each."""
        newest = itertools.islice(reversed(self._traces), limit)
        return [{"trace_id": trace_id, "spans": self.spans(trace_id)} for trace_id in newest]

    def __len__(self) -> int:
        return len(self._traces)


def _start(record: dict[str, Any]) -> float:
    start = record.get("start")
    return start if isinstance(start, (int, float)) else 0.0


async def follow(
    kernel: Any, log: TraceLog, closing: trio.Event, *, task_status: Any = trio.TASK_STATUS_IGNORED
) -> None:
    """Feed ``log`` span events (subscribed before ``started()``) until ``closing`` is set."""
    async with kernel.tap.subscribe(buffer=BUFFER, kinds=("TRACE:",)) as events:
        task_status.started()
        async with trio.open_nursery() as nursery:

            async def stop() -> None:
                await closing.wait()
                nursery.cancel_scope.cancel()

            nursery.start_soon(stop)
            async for event in events:
                _take(log, event)
                await trio.sleep(BATCH_WAIT_S)
                with contextlib.suppress(trio.WouldBlock):
                    while True:
                        _take(log, events.receive_nowait())
            nursery.cancel_scope.cancel()


def _take(log: TraceLog, event: Any) -> None:
    if event.kind == EventKind.TAP_DROPPED:
        log.dropped += event.payload.get("dropped", 0)
    else:
        log.add(event.payload)
