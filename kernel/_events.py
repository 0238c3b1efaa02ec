"""The event envelope and the tap through which every event can be observed."""

from __future__ import annotations

import itertools
import math
import os
import secrets
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from typing import Any

import attrs
import trio

from ._errors import _positive_int
from ._trace import TraceContext


class EventKind:
    """Namespaced event kinds (plain strings, so plugins may add their own)."""

    AGENT_MESSAGE = "AGENT:MESSAGE"
    AGENT_REPLY = "AGENT:REPLY"
    AGENT_TOKEN = "AGENT:TOKEN"
    AGENT_ROUTED = "AGENT:ROUTED"
    EXEC_TOOL_CALL = "EXEC:TOOL_CALL"
    EXEC_TOOL_RESULT = "EXEC:TOOL_RESULT"
    KERNEL_STARTED = "KERNEL:STARTED"
    KERNEL_STOPPING = "KERNEL:STOPPING"
    KERNEL_BREAKER = "KERNEL:BREAKER"
    KERNEL_PLUGIN_ERROR = "KERNEL:PLUGIN_ERROR"
    KERNEL_TOOLS_CHANGED = "KERNEL:TOOLS_CHANGED"
    KERNEL_SERVICE_ERROR = "KERNEL:SERVICE_ERROR"
    ACTOR_CRASHED = "ACTOR:CRASHED"
    ACTOR_RESTARTED = "ACTOR:RESTARTED"
    ACTOR_STOPPED = "ACTOR:STOPPED"
    ACTOR_REPLY = "ACTOR:REPLY"
    TAP_DROPPED = "TAP:DROPPED"
    TRACE_SPAN_START = "TRACE:SPAN_START"
    TRACE_SPAN_END = "TRACE:SPAN_END"


# Event ids: 32 hex characters like a uuid4's, but cheap (uuid4 dominated the ask round trip):
# a per-process random prefix (new in a forked child) and a counter. The counter starts at
# 2**63, so hex() gives its 16 digits without a format spec to parse.
_COUNTER_START = 1 << 63
_id_prefix = secrets.token_hex(8)
_id_counter = itertools.count(_COUNTER_START)


def _reseed_ids() -> None:
    global _id_prefix, _id_counter
    _id_prefix = secrets.token_hex(8)
    _id_counter = itertools.count(_COUNTER_START)


os.register_at_fork(after_in_child=_reseed_ids)


def new_event_id() -> str:
    """A new event id (what ``Event`` gets by default)."""
    return _id_prefix + hex(next(_id_counter))[2:]


@attrs.frozen
class Event:
    """An immutable envelope. ``reply_to`` names the event this one answers."""

    kind: str
    source: str
    target: str | None = None
    payload: Any = attrs.field(factory=dict)
    trace: TraceContext | None = None
    id: str = attrs.field(factory=new_event_id)
    reply_to: str | None = None
    ts: float = attrs.field(factory=time.time)

    def reply(self, kind: str, payload: Any, *, source: str | None = None) -> Event:
        """An event answering this one, addressed back to its source."""
        return Event(
            kind=kind,
            source=source or (self.target or "kernel"),
            target=self.source,
            payload=payload,
            trace=self.trace,
            reply_to=self.id,
        )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready view (the API's event stream sends this)."""
        trace = None
        if self.trace is not None:
            trace = {
                "trace_id": self.trace.trace_id,
                "span_id": self.trace.span_id,
                "parent_span_id": self.trace.parent_span_id,
                "depth": self.trace.depth,
                "path": list(self.trace.path),
            }
        return {
            "id": self.id,
            "kind": self.kind,
            "source": self.source,
            "target": self.target,
            "payload": _jsonable(self.payload),
            "trace": trace,
            "reply_to": self.reply_to,
            "ts": self.ts,
        }


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (str, int, bool)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None  # NaN/Infinity are not JSON
    if isinstance(value, dict):
        out = {str(k): _jsonable(v) for k, v in value.items()}
        # An event describes, it carries no files: MCP image/audio/resource bytes, their size.
        if isinstance(out.get("blob"), str):
            out["blob"] = f"<{len(out['blob'])} base64 characters>"
        if out.get("type") in ("image", "audio") and isinstance(out.get("data"), str):
            out["data"] = f"<{len(out['data'])} base64 characters>"
        return out
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(v) for v in value]
    if attrs.has(type(value)):
        return _jsonable(attrs.asdict(value, recurse=False))
    if isinstance(value, BaseException):
        return {"error": type(value).__name__, "message": str(value)}
    if isinstance(value, (bytes, bytearray, memoryview)):
        return f"<{len(value)} bytes>"
    return repr(value)


# Kinds whose ``wants`` answer is remembered at most (the kernel asks of a few dozen).
_MAX_WANTED = 1024


class EventTap:
    """Fan-out of every published event to bounded subscriber channels. A subscriber too slow
    loses events (never slowing the kernel), counted in a ``TAP:DROPPED`` once it catches up.
    Indexed by kind (and trace): an event costs only as much as the subscribers wanting it."""

    def __init__(self) -> None:
        self._subscribers: dict[int, _Subscriber] = {}
        self._everything: dict[int, _Subscriber] = {}  # no kinds: every event
        self._exact: dict[str, dict[int, _Subscriber]] = {}
        self._prefixed: dict[str, dict[int, _Subscriber]] = {}  # "EXEC:" -> its subscribers
        self._traced: dict[str, dict[int, _Subscriber]] = {}  # trace id -> those of it alone
        self._traced_kinds: Counter[tuple[str, ...] | None] = Counter()  # what they take
        self._keys: dict[trio.MemoryReceiveChannel[Event], int] = {}  # see retune
        self._wanted: dict[str, bool] = {}  # wants(), until the kinds taken change
        self._next = 0
        self.published = 0

    def publish(self, event: Event) -> None:
        """Deliver without blocking (safe to call from any task)."""
        self.published += 1
        if not self._subscribers:
            return
        targets = self._targets(event.kind)
        if targets:
            for sub in list(targets.values()):
                sub.offer(event)
        if self._traced and event.trace is not None:
            traced = self._traced.get(event.trace.trace_id)
            if traced:
                for sub in list(traced.values()):
                    if _takes(sub.kinds, event.kind):
                        sub.offer(event)

    def _targets(self, kind: str) -> dict[int, _Subscriber]:
        """The subscribers taking ``kind``, each once."""
        found = self._everything
        exact = self._exact.get(kind)
        if exact:
            found = {**found, **exact} if found else exact
        for prefix, subs in self._prefixed.items():
            if kind.startswith(prefix):
                found = {**found, **subs} if found else subs
        return found

    @property
    def subscriber_count(self) -> int:
        return len(self._subscribers)

    def wants(self, kind: str) -> bool:
        """Whether any subscriber would receive events of ``kind``, so producing them is worth
        it (the kernel streams tokens only while someone watches)."""
        # Asked on hot paths (spans, tokens, tool events): no dict is built here.
        if not self._subscribers:
            return False
        wanted = self._wanted.get(kind)
        if wanted is None:
            if len(self._wanted) >= _MAX_WANTED:  # a plugin asking of ever new kinds
                self._wanted.clear()
            wanted = self._wanted[kind] = bool(
                self._everything
                or kind in self._exact
                or any(kind.startswith(prefix) for prefix in self._prefixed)
                or any(_takes(kinds, kind) for kinds in self._traced_kinds)
            )
        return wanted

    def _add(self, key: int, sub: _Subscriber) -> None:
        self._wanted.clear()
        self._subscribers[key] = sub
        if sub.traces is not None:
            self._traced_kinds[sub.kinds] += 1
            self._trace(key, sub, sub.traces)
            return
        if not sub.kinds:
            self._everything[key] = sub
            return
        for kind in sub.kinds:
            index = self._prefixed if kind.endswith(":") else self._exact
            index.setdefault(kind, {})[key] = sub

    def _remove(self, key: int) -> _Subscriber | None:
        sub = self._subscribers.pop(key, None)
        if sub is None:
            return None
        self._wanted.clear()
        if sub.traces is not None:
            self._traced_kinds[sub.kinds] -= 1
            if not self._traced_kinds[sub.kinds]:
                del self._traced_kinds[sub.kinds]
            self._untrace(key, sub.traces)
            return sub
        self._everything.pop(key, None)
        for kind in sub.kinds or ():
            index = self._prefixed if kind.endswith(":") else self._exact
            subs = index.get(kind)
            if subs is not None:
                subs.pop(key, None)
                if not subs:
                    del index[kind]
        return sub

    def _trace(self, key: int, sub: _Subscriber, trace_ids: Iterable[str]) -> None:
        for trace_id in trace_ids:
            self._traced.setdefault(trace_id, {})[key] = sub

    def _untrace(self, key: int, trace_ids: Iterable[str]) -> None:
        for trace_id in trace_ids:
            subs = self._traced[trace_id]
            del subs[key]
            if not subs:
                del self._traced[trace_id]

    @asynccontextmanager
    async def subscribe(
        self,
        *,
        buffer: int = 1000,
        kinds: tuple[str, ...] | None = None,
        traces: Iterable[str] | None = None,
    ) -> AsyncIterator[trio.MemoryReceiveChannel[Event]]:
        """``async with tap.subscribe() as events: async for ev in events: ...``; ``kinds``:
        exact kinds or namespace prefixes (``"EXEC:"``; a string is one kind); ``traces``:
        only those trace ids (None: any); ``buffer`` (≥ 1): how far a slow reader may lag."""
        _positive_int(buffer, "buffer", ValueError)
        kinds = _given(kinds, tuple)
        send, receive = trio.open_memory_channel[Event](buffer)
        key = self._next
        self._next += 1
        self._add(key, _Subscriber(send, kinds, _given(traces, frozenset)))
        self._keys[receive] = key
        try:
            async with receive:
                yield receive
        finally:
            del self._keys[receive]
            sub = self._remove(key)
            if sub is not None:
                sub.send.close()

    def retune(
        self,
        events: trio.MemoryReceiveChannel[Event],
        kinds: tuple[str, ...] | None,
        traces: Iterable[str] | None = None,
    ) -> None:
        """Give the open subscription on ``events`` the events of ``kinds`` and ``traces``
        from now on (as ``subscribe`` reads them); what it had stays queued."""
        key = self._keys.get(events)
        if key is None:
            raise ValueError("events: not the channel of an open subscription to this tap")
        kinds = _given(kinds, tuple)
        new = _given(traces, frozenset)
        sub = self._subscribers[key]
        if kinds == sub.kinds and sub.traces is not None and new is not None:
            # Only its traces change (a call starts or ends): move just those.
            self._untrace(key, sub.traces - new)
            self._trace(key, sub, new - sub.traces)
            sub.traces = new
            return
        self._remove(key)
        sub.kinds = kinds
        sub.traces = new
        self._add(key, sub)


def _given(values: str | Iterable[str] | None, kind: type) -> Any:
    """``values`` as a ``kind`` (tuple, frozenset), a single string as one value; None: all."""
    if values is None:
        return None
    return kind((values,) if isinstance(values, str) else values)


def _takes(kinds: tuple[str, ...] | None, kind: str) -> bool:
    """Whether a subscription to ``kinds`` takes an event of ``kind``."""
    return not kinds or any(kind == k or (k.endswith(":") and kind.startswith(k)) for k in kinds)


@attrs.define(eq=False)
class _Subscriber:
    """One subscription: its channel, the kinds it takes (None: all; a kind ending in
    ``:`` is a namespace) and the trace ids (None: all). The tap offers it only those."""

    send: trio.MemorySendChannel[Event]
    kinds: tuple[str, ...] | None
    traces: frozenset[str] | None = None
    dropped: int = 0

    def offer(self, event: Event) -> None:
        try:
            if self.dropped:
                self.send.send_nowait(
                    Event(EventKind.TAP_DROPPED, "kernel", payload={"dropped": self.dropped})
                )
                self.dropped = 0
            self.send.send_nowait(event)
        except trio.WouldBlock:
            self.dropped += 1
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            pass
