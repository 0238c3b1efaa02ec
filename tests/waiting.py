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
