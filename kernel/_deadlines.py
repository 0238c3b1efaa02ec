"""One timer task for the deadlines of many calls in flight, instead of a cancel scope each
(a deadline costs a Trio cancel scope much, a heap push little): the actor system's direct
asks and the MCP client's requests use it.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import attrs
import trio

_T = TypeVar("_T")

# Entries of ended items the heap may hold beyond twice the live ones.
HEAP_SLACK = 64


@attrs.define(eq=False)
class DeadlineTimer(Generic[_T]):
    """Calls ``expire(item)`` once ``item``'s deadline has passed, unless ``ended(item)``.
    ``entries``: a heap of ``(deadline, tiebreak, item)`` (one list for good: holders may
    ``clear()`` it when none is live) watched by one task in ``nursery`` from the first
    ``push``; ended items stay until they top it or it is rebuilt (past ``2 * live + slack``).
    Once stopped (``stop()``, cancelled), live and later items get ``hand_back(item, deadline)``."""

    _nursery: trio.Nursery
    _ended: Callable[[_T], Any]
    _expire: Callable[[_T], Any]
    _hand_back: Callable[[_T, float], Any] | None = attrs.field(default=None, kw_only=True)
    _name: str | None = attrs.field(default=None, kw_only=True)
    slack: int = attrs.field(default=HEAP_SLACK, kw_only=True)
    entries: list[tuple[float, Any, _T]] = attrs.field(factory=list, init=False)
    stopped: bool = attrs.field(default=False, init=False)
    # The timer's cancel scope (None until the first push) and its deadline (a property is slower).
    _scope: trio.CancelScope | None = attrs.field(default=None, init=False)
    _at: float = attrs.field(default=math.inf, init=False)

    def push(self, deadline: float, tiebreak: Any, item: _T, live: int) -> None:
        """Watch ``item`` until ``deadline``; ``tiebreak`` orders equal deadlines (unique among
        all entries, ended ones too, e.g. a counter: items are never compared); ``live``: items
        in flight, this one included (the bound of the heap)."""
        if self.stopped:
            if self._hand_back is not None:
                self._hand_back(item, deadline)
            return
        heap = self.entries
        if len(heap) >= 2 * live + self.slack:
            ended = self._ended
            heap[:] = [entry for entry in heap if not ended(entry[2])]
            heapq.heapify(heap)
        heapq.heappush(heap, (deadline, tiebreak, item))
        if self._scope is None:
            scope = trio.CancelScope(deadline=deadline)
            self._nursery.start_soon(self._run, name=self._name)
            self._scope, self._at = scope, deadline
        elif deadline < self._at:
            self._scope.deadline = self._at = deadline

    def stop(self) -> None:
        """End the timer; the live items get their deadlines back (``hand_back``)."""
        self.stopped = True
        if self._scope is not None:
            self._scope.cancel()
        hand_back, ended = self._hand_back, self._ended
        if hand_back is not None:
            for deadline, _, item in self.entries:
                if not ended(item):
                    hand_back(item, deadline)
        self.entries.clear()

    async def _run(self) -> None:
        """The timer: sleeps until the earliest deadline, expires past items, drops ended ones."""
        heap, ended, expire = self.entries, self._ended, self._expire
        try:
            while not self.stopped:
                assert self._scope is not None
                with self._scope:
                    await trio.sleep_forever()
                now = trio.current_time()
                while heap:
                    deadline, _, item = heap[0]
                    if ended(item):
                        heapq.heappop(heap)
                    elif deadline <= now:
                        heapq.heappop(heap)
                        expire(item)
                    else:
                        break
                # A scope is entered once; the next round needs a new one.
                self._at = heap[0][0] if heap else math.inf
                self._scope = trio.CancelScope(deadline=self._at)
        finally:
            if not self.stopped:  # cancelled from outside while items may still be in flight
                self.stop()
