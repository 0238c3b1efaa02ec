"""Child process for the idle-actor bench: ``python -m bench._idle {roost|bare} COUNT``.

Prints JSON: RSS before and after starting COUNT idle actors (or bare tasks, each parked
on its own channel), and the time until all of them were started and parked.
"""

from __future__ import annotations

import gc
import json
import sys
import time

import trio
import trio.testing
from roost.kernel import open_actor_system

from . import rss_kb


async def _idle_handler(ctx, event):
    return event.payload


def _handler_factory():
    return _idle_handler


async def _roost(count: int) -> dict:
    async with open_actor_system() as system:
        await trio.testing.wait_all_tasks_blocked()
        gc.collect()
        before = rss_kb()
        start = time.perf_counter()
        for i in range(count):
            system.spawn(f"idle-{i}", _handler_factory, mailbox_size=64)
        await trio.testing.wait_all_tasks_blocked()
        spawn_s = time.perf_counter() - start
        gc.collect()
        after = rss_kb()
        # They are alive, not just allocated.
        for i in range(0, count, max(1, count // 10)):
            await system.ask(f"idle-{i}", "BENCH:PING", i, timeout=10)
        stop_start = time.perf_counter()
    return {
        "rss_before_kb": before,
        "rss_after_kb": after,
        "spawn_s": spawn_s,
        "shutdown_s": time.perf_counter() - stop_start,
    }


async def _bare(count: int) -> dict:
    async def park(receive: trio.MemoryReceiveChannel) -> None:
        async for _ in receive:
            pass

    channels = []
    async with trio.open_nursery() as nursery:
        await trio.testing.wait_all_tasks_blocked()
        gc.collect()
        before = rss_kb()
        start = time.perf_counter()
        for _ in range(count):
            send, receive = trio.open_memory_channel(64)
            channels.append(send)
            nursery.start_soon(park, receive)
        await trio.testing.wait_all_tasks_blocked()
        spawn_s = time.perf_counter() - start
        gc.collect()
        after = rss_kb()
        for send in channels:
            send.close()
    return {"rss_before_kb": before, "rss_after_kb": after, "spawn_s": spawn_s}


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("roost", "bare") or not argv[1].isdigit():
        print("usage: python -m bench._idle {roost|bare} COUNT", file=sys.stderr)
        return 2
    runner = _roost if argv[0] == "roost" else _bare
    print(json.dumps(trio.run(runner, int(argv[1]))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
