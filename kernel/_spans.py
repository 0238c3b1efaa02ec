"""Spans: the units of work of a trace, each observable when it starts and when it ends.

An agent's run, each tool call and model call in it, a ``tools/call`` served over MCP and
a message served over A2A each have a ``TraceContext`` of their own (span id, parent's).
``Kernel.start_span`` publishes ``TRACE:SPAN_START`` at once and ``TRACE:SPAN_END`` with
the whole record at ``end()``. A tool call's span is its callee's parent (the
``traceparent`` sent on), so a tree that crosses processes joins up by ids alone. While
nobody subscribes to ``TRACE:`` events a span is ``NO_SPAN``: the ids are made all the same,
the events are not.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from ._events import Event, EventKind, EventTap
from ._trace import TraceContext


class SpanKind:
    """What a span stands for (``kind`` in its record)."""

    AGENT = "agent"
    TOOL = "tool"
    MODEL = "model"
    MCP_SERVER = "mcp.server"
    A2A_SERVER = "a2a.server"


# A refusal's error code → the mark it leaves on the span where it happened.
_MARKS = {"recursion_limit": "breaker", "taint_violation": "taint", "loop_detected": "loop_guard"}

# Records hold outside text (a made-up tool name, a caller's path, a peer's error) and are kept
# and exported: each text is cut to MAX_TEXT characters, a breaker's path to first and last hops.
MAX_TEXT = 500
_MAX_MARK_HOPS = 16
_MAX_HOP = 128


def _clip(text: str) -> str:
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT] + "…"


def _clipped(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` with every text cut to ``MAX_TEXT`` characters (in place)."""
    for key, value in values.items():
        if value.__class__ is str and len(value) > MAX_TEXT:
            values[key] = _clip(value)
    return values


def _short_path(path: tuple[str, ...]) -> list[str]:
    half = _MAX_MARK_HOPS // 2
    if len(path) > _MAX_MARK_HOPS:
        path = path[:half] + ("…",) + path[-half:]
    return [hop[:_MAX_HOP] for hop in path]


class Span:
    """One unit of work while it runs; ``end()`` publishes its record (once)."""

    __slots__ = (
        "_t0",
        "_tap",
        "attributes",
        "ended",
        "kind",
        "marks",
        "name",
        "source",
        "start",
        "trace",
    )

    recording = True

    def __init__(
        self,
        tap: EventTap,
        kind: str,
        name: str,
        trace: TraceContext,
        source: str,
        attributes: dict[str, Any],
    ) -> None:
        self._tap = tap
        self.kind = kind
        self.name = _clip(name)
        self.trace = trace
        self.source = source
        self.attributes = _clipped(attributes)
        self.marks: list[dict[str, Any]] = []
        self.ended = False
        self.start = time.time()
        self._t0 = time.perf_counter()
        # The start's record holds a copy: a subscriber may read it after the span changed.
        record = self._record(None, None, "running", None, dict(attributes), [])
        tap.publish(Event(EventKind.TRACE_SPAN_START, source, None, record, trace, ts=self.start))

    def set(self, attributes: Mapping[str, Any] | None = None, /, **more: Any) -> None:
        """Add attributes (JSON values) to the span's record."""
        if attributes:
            self.attributes.update(attributes)
        if more:
            self.attributes.update(more)
        _clipped(self.attributes)

    def mark(self, kind: str, message: str, **fields: Any) -> None:
        """Note in the span: ``breaker`` (a hop refused: ``depth``, ``max_depth``, ``path``),
        ``taint`` (untrusted data kept from a tool) or ``loop_guard`` (a call loop stopped)."""
        self.marks.append({"kind": kind, "ts": time.time(), "message": _clip(message), **fields})

    def mark_refusal(self, exc: BaseException) -> None:
        """``mark`` for the refusal ``exc`` (by its error code), if it is one."""
        kind = _MARKS.get(getattr(exc, "code", ""))
        if kind == "breaker":
            hop: Any = exc  # a RecursionLimitExceeded
            path = _short_path(hop.path)
            self.mark(kind, str(exc), depth=hop.depth, max_depth=hop.max_depth, path=path)
        elif kind is not None:
            self.mark(kind, str(exc))

    def end(self, error: str | None = None) -> None:
        """End the span, failed with ``error`` if given; publishes ``TRACE:SPAN_END``."""
        if self.ended:
            return
        self.ended = True
        if error is not None:
            error = _clip(error)
        duration = time.perf_counter() - self._t0
        end = self.start + duration
        status = "ok" if error is None else "error"
        record = self._record(end, duration, status, error, self.attributes, self.marks)
        self._tap.publish(
            Event(EventKind.TRACE_SPAN_END, self.source, None, record, self.trace, ts=end)
        )

    def _record(
        self,
        end: float | None,
        duration: float | None,
        status: str,
        error: str | None,
        attributes: Any,
        marks: Any,
    ) -> dict[str, Any]:
        trace = self.trace
        return {
            "trace_id": trace.trace_id,
            "span_id": trace.span_id,
            "parent_span_id": trace.parent_span_id,
            "kind": self.kind,
            "name": self.name,
            "start": self.start,
            "end": end,
            "duration_ms": None if duration is None else round(duration * 1000, 3),
            "status": status,
            "error": error,
            "attributes": attributes,
            "marks": marks,
        }


class _NoSpan:
    """The span of work nobody traces: every method does nothing."""

    __slots__ = ()

    recording = False
    ended = True
    attributes: Mapping[str, Any] = {}

    def set(self, attributes: Mapping[str, Any] | None = None, /, **more: Any) -> None:
        pass

    def mark(self, kind: str, message: str, **fields: Any) -> None:
        pass

    def mark_refusal(self, exc: BaseException) -> None:
        pass

    def end(self, error: str | None = None) -> None:
        pass


NO_SPAN: Any = _NoSpan()
"""The span ``start_span`` returns while nobody subscribes to ``TRACE:`` events."""


def tracing(tap: EventTap) -> bool:
    """Whether anyone would receive span events (so spans are worth recording)."""
    return tap.wants(EventKind.TRACE_SPAN_END) or tap.wants(EventKind.TRACE_SPAN_START)


def start_span(
    tap: EventTap,
    kind: str,
    name: str,
    trace: TraceContext,
    *,
    source: str = "kernel",
    **attributes: Any,
) -> Any:
    """Open the span ``trace`` names: a ``Span``, or ``NO_SPAN`` while nobody follows spans."""
    if not tap.subscriber_count or not tracing(tap):
        return NO_SPAN
    return Span(tap, kind, name, trace, source, attributes)
