"""Waiting in tests: for a condition under a deadline, never for a fixed time.

Wait on the event itself (a ``trio.Event``, a channel, the kernel's event tap, a process's
exit) when there is one; poll a condition with these helpers when there is none. Under
``autojump_clock`` the polling costs no real time.
"""

from __future__ import annotations

import inspect
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import trio

POLL_S = 0.01


Description = str | Callable[[], str]


def _failure(predicate: Callable[[], Any], what: Description, timeout: float) -> AssertionError:
    said = what() if callable(what) else what
    return AssertionError(f"never true: {said or predicate} (waited {timeout:g} s)")


async def wait_until(
    predicate: Callable[[], Any | Awaitable[Any]], what: Description = "", *, timeout: float = 10.0
) -> Any:
    """Checkpoint until ``predicate()`` (plain or async) is truthy and return its value;
    fail naming ``what`` (a text, or a function giving it then) after ``timeout`` seconds."""
    try:
        with trio.fail_after(timeout):
            while True:
                value = predicate()
                if inspect.isawaitable(value):
                    value = await value
                if value:
                    return value
                await trio.sleep(POLL_S)
    except trio.TooSlowError:
        raise _failure(predicate, what, timeout) from None


def wait_until_sync(
    predicate: Callable[[], Any], what: Description = "", *, timeout: float = 10.0
) -> Any:
    """``wait_until`` for code outside Trio (a thread, a plain test driving processes)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise _failure(predicate, what, timeout)
        time.sleep(POLL_S)


class ThreadGate:
    """Holds a SQLite database's thread inside one write (``work``) until ``release`` is set,
    so that the writes queued meanwhile are known to share its next batch (no timing)."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def work(self, conn: Any) -> Any:
        self.entered.set()
        assert self.release.wait(10), "gate never released"

    async def wait_entered(self) -> None:
        """Until the database's thread is inside ``work`` (bounded)."""
        assert await trio.to_thread.run_sync(self.entered.wait, 10), "gate never entered"

    async def hold(self, db: Any, nursery: trio.Nursery, operation: str = "gate") -> None:
        """Start ``work`` as a write of ``db`` in ``nursery``; return once it holds the thread."""
        nursery.start_soon(db.write, operation, self.work)
        await self.wait_entered()
