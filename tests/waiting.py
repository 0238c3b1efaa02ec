"""Waiting in tests: for a condition under a deadline, never for a fixed time.

Wait on the event itself (a ``trio.Event``, a channel, the kernel's event tap, a process's
exit) when there is one; poll a condition with these helpers when there is none. Under
``autojump_clock`` the polling costs no real time.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any

import trio

POLL_S = 0.01


async def wait_until(
    predicate: Callable[[], Any | Awaitable[Any]], what: str = "", *, timeout: float = 10.0
) -> Any:
    """Checkpoint until ``predicate()`` (plain or async) is truthy and return its value;
    fail naming ``what`` after ``timeout`` seconds."""
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
        raise AssertionError(f"never true: {what or predicate} (waited {timeout:g} s)") from None


def wait_until_sync(predicate: Callable[[], Any], what: str = "", *, timeout: float = 10.0) -> Any:
    """``wait_until`` for code outside Trio (a thread, a plain test driving processes)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"never true: {what or predicate} (waited {timeout:g} s)")
        time.sleep(POLL_S)
