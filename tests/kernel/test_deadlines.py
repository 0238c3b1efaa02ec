"""DeadlineTimer: one timer task for the deadlines of many calls (actor asks, MCP requests)."""

from __future__ import annotations

import itertools
import math
import operator

import pytest
import trio
import trio.testing
from roost.kernel import DeadlineTimer
from roost.kernel._deadlines import HEAP_SLACK


class Item:
    def __init__(self, name: str) -> None:
        self.name = name
        self.ended = False

    def __repr__(self) -> str:
        return f"Item({self.name!r})"


class Recorder:
    """A timer over ``Item``s that notes when each was expired or handed back."""

    def __init__(self, nursery: trio.Nursery, *, hand_back: bool = True) -> None:
        self.expired: list[tuple[str, float]] = []
        self.handed_back: list[tuple[str, float]] = []
        self.numbers = itertools.count()
        self.timer: DeadlineTimer[Item] = DeadlineTimer(
            nursery,
            operator.attrgetter("ended"),
            self._expire,
            hand_back=self._hand_back if hand_back else None,
            name="test-deadlines",
        )

    def _expire(self, item: Item) -> None:
        self.expired.append((item.name, trio.current_time()))

    def _hand_back(self, item: Item, deadline: float) -> None:
        self.handed_back.append((item.name, deadline))

    def push(self, item: Item, after: float, live: int = 1) -> None:
        self.timer.push(trio.current_time() + after, next(self.numbers), item, live)


async def test_items_expire_at_their_deadlines_in_order(autojump_clock):
    async with trio.open_nursery() as nursery:
        rec = Recorder(nursery)
        start = trio.current_time()
        for name, after in [("c", 30.0), ("a", 10.0), ("b", 20.0), ("a2", 10.0)]:
            rec.push(Item(name), after)
        await trio.sleep(100)
        assert rec.expired == [
            ("a", start + 10),
            ("a2", start + 10),
            ("b", start + 20),
            ("c", start + 30),
        ]
        assert rec.timer.entries == []
        nursery.cancel_scope.cancel()


async def test_ended_items_are_not_expired_and_their_entries_are_dropped(autojump_clock):
    async with trio.open_nursery() as nursery:
        rec = Recorder(nursery)
        start = trio.current_time()
        early, late, kept = Item("early"), Item("late"), Item("kept")
        rec.push(early, 5.0)
        rec.push(kept, 10.0)
        rec.push(late, 15.0)
        early.ended = late.ended = True
        await trio.sleep(100)
        assert rec.expired == [("kept", start + 10)]
        assert rec.timer.entries == []  # the ended ones were popped when they reached the top
        nursery.cancel_scope.cancel()


async def test_an_earlier_deadline_pushed_later_rearms_the_timer(autojump_clock):
    async with trio.open_nursery() as nursery:
        rec = Recorder(nursery)
        start = trio.current_time()
        rec.push(Item("long"), 50.0)
        await trio.testing.wait_all_tasks_blocked()  # the timer sleeps until start + 50
        await trio.sleep(1)
        rec.push(Item("short"), 2.0)
        rec.push(Item("later"), 60.0)  # a later one leaves it where it is
        await trio.sleep(100)
        assert rec.expired == [("short", start + 3), ("long", start + 50), ("later", start + 61)]
        nursery.cancel_scope.cancel()


async def test_the_heap_is_rebuilt_without_ended_entries_once_they_outnumber_the_live_ones():
    async with trio.open_nursery() as nursery:
        rec = Recorder(nursery)
        live = [Item(f"live{i}") for i in range(3)]
        for item in live:
            rec.push(item, 3600.0, live=3)
        for n in range(2000):
            item = Item(f"ended{n}")
            rec.push(item, 3600.0, live=4)  # 3 live ones + this one
            item.ended = True
            assert len(rec.timer.entries) <= 2 * 4 + HEAP_SLACK
        assert {e[2].name for e in rec.timer.entries} >= {item.name for item in live}
        assert rec.expired == []
        nursery.cancel_scope.cancel()


async def test_the_slack_is_per_timer():
    async with trio.open_nursery() as nursery:
        timer: DeadlineTimer[Item] = DeadlineTimer(
            nursery, operator.attrgetter("ended"), print, slack=0
        )
        for n in range(100):
            item = Item(str(n))
            timer.push(trio.current_time() + 60, n, item, 1)
            item.ended = True
            assert len(timer.entries) <= 2
        nursery.cancel_scope.cancel()


async def test_stop_hands_the_live_deadlines_back_and_later_pushes_too(autojump_clock):
    async with trio.open_nursery() as nursery:
        rec = Recorder(nursery)
        start = trio.current_time()
        gone, live = Item("gone"), Item("live")
        rec.push(gone, 10.0)
        rec.push(live, 20.0)
        gone.ended = True
        entries = rec.timer.entries
        rec.timer.stop()
        assert rec.timer.stopped and rec.handed_back == [("live", start + 20)]
        assert rec.timer.entries is entries == []  # the same list, emptied
        rec.push(Item("after"), 5.0)
        assert rec.handed_back[-1] == ("after", start + 5) and rec.timer.entries == []
        rec.timer.stop()  # again: nothing more to hand back
        assert len(rec.handed_back) == 2
        await trio.sleep(100)
        assert rec.expired == []
    # the timer task ended with the stop; the nursery had nothing else to wait for


async def test_a_timer_cancelled_from_outside_hands_the_deadlines_back(autojump_clock):
    rec = None
    start = trio.current_time()
    with trio.CancelScope() as outer:
        async with trio.open_nursery() as nursery:
            rec = Recorder(nursery)
            rec.push(Item("a"), 10.0)
            await trio.testing.wait_all_tasks_blocked()
            outer.cancel()
    assert rec.timer.stopped and rec.handed_back == [("a", start + 10)]
    rec.push(Item("b"), 1.0)
    assert rec.handed_back[-1] == ("b", pytest.approx(start + 1))
    assert rec.expired == []


async def test_without_hand_back_a_stopped_timer_forgets_its_deadlines(autojump_clock):
    async with trio.open_nursery() as nursery:
        rec = Recorder(nursery, hand_back=False)
        rec.push(Item("a"), 10.0)
        rec.timer.stop()
        rec.push(Item("b"), 1.0)
        assert rec.timer.entries == [] and rec.handed_back == []
        await trio.sleep(100)
        assert rec.expired == []


async def test_the_timer_task_starts_at_the_first_push_only():
    async with trio.open_nursery() as nursery:
        rec = Recorder(nursery)
        await trio.testing.wait_all_tasks_blocked()
        assert nursery.child_tasks == set()
        rec.push(Item("a"), math.inf)
        rec.push(Item("b"), 60.0)
        assert [task.name for task in nursery.child_tasks] == ["test-deadlines"]
        nursery.cancel_scope.cancel()


async def test_timers_are_hashable_and_equal_only_to_themselves():
    # DeadlineTimer is an attrs class (e8320bb): attrs' default eq would make two idle
    # timers equal and every timer unhashable, for any caller keeping timers in a set.
    async with trio.open_nursery() as nursery:
        a = DeadlineTimer(nursery, operator.attrgetter("ended"), print)
        b = DeadlineTimer(nursery, operator.attrgetter("ended"), print)
        assert a != b and a == a and len({a, b, a}) == 2
