"""Actor system speed and footprint, each next to the bare Trio equivalent.

- ask round trips/s vs a bare memory-channel ping-pong (two tasks, two channels);
- a 5-actor relay chain (A→B→C→D→E and back, by nested asks) vs a 5-hop bare relay;
- 10,000 idle actors: RSS per actor and spawn time vs bare tasks with a channel pair each
  (measured in fresh subprocesses so earlier benches do not skew RSS).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import trio
from roost.kernel import open_actor_system

from . import Row, Target

CHAIN = ("a", "b", "c", "d", "e")


async def _bare_ping_pong(n: int) -> float:
    to_echo, echo_in = trio.open_memory_channel[int](64)
    to_main, main_in = trio.open_memory_channel[int](64)

    async def echo() -> None:
        async with to_main:
            async for item in echo_in:
                await to_main.send(item)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(echo)
        start = time.perf_counter()
        for i in range(n):
            await to_echo.send(i)
            await main_in.receive()
        elapsed = time.perf_counter() - start
        await to_echo.aclose()
    return n / elapsed


async def _ask_round_trips(n: int) -> float:
    async def echo(ctx, event):
        return event.payload

    async with open_actor_system() as system:
        system.spawn("echo", lambda: echo)
        await system.ask("echo", "BENCH:PING", -1)  # warm up
        start = time.perf_counter()
        for i in range(n):
            await system.ask("echo", "BENCH:PING", i)
        return n / (time.perf_counter() - start)


async def _bare_relay(n: int) -> float:
    """Hop i receives on its inbox, forwards to hop i+1, waits for its answer, returns it."""
    hops = len(CHAIN)
    inboxes = [trio.open_memory_channel[int](64) for _ in range(hops)]
    answers = [trio.open_memory_channel[int](64) for _ in range(hops)]

    async def hop(i: int) -> None:
        async for item in inboxes[i][1]:
            if i + 1 < hops:
                await inboxes[i + 1][0].send(item)
                item = await answers[i + 1][1].receive()
            await answers[i][0].send(item)

    async with trio.open_nursery() as nursery:
        for i in range(hops):
            nursery.start_soon(hop, i)
        start = time.perf_counter()
        for i in range(n):
            await inboxes[0][0].send(i)
            await answers[0][1].receive()
        elapsed = time.perf_counter() - start
        nursery.cancel_scope.cancel()
    return n / elapsed


async def _actor_relay(n: int) -> float:
    def make(next_hop: str | None):
        async def relay(ctx, event):
            if next_hop is None:
                return event.payload
            return (await ctx.ask(next_hop, "BENCH:RELAY", event.payload)).payload

        return relay

    async with open_actor_system() as system:
        for i, name in enumerate(CHAIN):
            next_hop = CHAIN[i + 1] if i + 1 < len(CHAIN) else None
            system.spawn(name, lambda next_hop=next_hop: make(next_hop))
        await system.ask(CHAIN[0], "BENCH:RELAY", -1)
        start = time.perf_counter()
        for i in range(n):
            await system.ask(CHAIN[0], "BENCH:RELAY", i)
        return n / (time.perf_counter() - start)


def _best(fn, n: int, repeats: int) -> float:
    return max(trio.run(fn, n) for _ in range(repeats))


def _idle(kind: str, count: int) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "bench._idle", kind, str(count)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(out.stdout)


def run(quick: bool) -> list[Row]:
    n = 3_000 if quick else 20_000
    repeats = 1 if quick else 3
    # Alternate baseline and roost so that machine noise hits both alike.
    ping_pong = ask = bare_relay = relay = 0.0
    for _ in range(repeats):
        ping_pong = max(ping_pong, _best(_bare_ping_pong, n, 1))
        ask = max(ask, _best(_ask_round_trips, n, 1))
        bare_relay = max(bare_relay, _best(_bare_relay, n // 5, 1))
        relay = max(relay, _best(_actor_relay, n // 5, 1))

    count = 10_000
    bare = _idle("bare", count)
    actors = _idle("roost", count)
    per_actor = (actors["rss_after_kb"] - actors["rss_before_kb"]) / count
    per_bare = (bare["rss_after_kb"] - bare["rss_before_kb"]) / count
    return [
        Row(
            "ask round trips",
            ask,
            "/s",
            ping_pong,
            "bare channel ping-pong",
            Target("ratio", ">=", 0.5),
        ),
        Row("5-actor relay round trips", relay, "/s", bare_relay, "5-hop bare channel relay"),
        Row(
            f"{count:,} idle actors: RSS each",
            per_actor,
            "KB",
            per_bare,
            "bare task + channel",
            Target("value", "<=", 20),
        ),
        Row(
            f"{count:,} idle actors: spawn",
            actors["spawn_s"],
            "s",
            bare["spawn_s"],
            "bare tasks",
            Target("value", "<=", 2),
        ),
    ]
