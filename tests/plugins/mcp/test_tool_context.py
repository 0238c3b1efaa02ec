"""A tools/call's event forwarding (``_client_channel.run``, ``_EventRouter.watch``) against a
real event tap: the subscription follows exactly the calls in flight, and a call's own
exception reaches the server as it was raised."""

from __future__ import annotations

import json
import random
from types import SimpleNamespace

import httpx
import pytest
import trio
import trio.testing
from mcp_server_fixtures import INITIALIZE
from roost.kernel import Event, EventTap, TraceContext
from roost.plugins.http import open_daemon
from roost.plugins.mcp import LOG_EVENT
from roost.plugins.mcp._tool_context import SPAN_START, _client_channel, _EventRouter


class Watcher:
    """Stands in for a call's channel: records the events the router hands it."""

    def __init__(self, trace: TraceContext, heartbeat: bool) -> None:
        self.trace_id = trace.trace_id
        self.heartbeat = heartbeat
        self.seen: list[str] = []

    async def _handle(self, event: Event) -> None:
        self.seen.append(event.payload["data"])


@pytest.mark.parametrize("seed", range(12))
async def test_event_router_subscribes_to_exactly_the_traces_and_kinds_of_calls_in_flight(
    seed,
):
    # Calls start and end (returning, raising, cancelled) in a random order, several on one
    # trace: after every step each trace in flight has its events forwarded to each of its
    # calls, no other trace's events are taken, and span starts are wanted exactly while an
    # agent run (heartbeat) is in flight.
    rng = random.Random(seed)
    tap = EventTap()
    router = _EventRouter()
    traces = [TraceContext.new("a") for _ in range(3)]
    live: dict[int, tuple[Watcher, trio.Event, trio.CancelScope, list[str]]] = {}
    ended: list[Watcher] = []
    stamp = 0

    async def one_call(w: Watcher, release: trio.Event, how: list[str], task_status) -> None:
        with trio.CancelScope() as scope:
            task_status.started(scope)

            async def fn() -> str:
                await release.wait()
                if how == ["raise"]:
                    raise ValueError("the call failed")
                return "done"

            try:
                await router.watch(w, fn)
            except ValueError:
                pass

    async def check() -> None:
        nonlocal stamp
        await trio.testing.wait_all_tasks_blocked()
        in_flight = [w for w, *_ in live.values()]
        assert set(router.watchers) == {w.trace_id for w in in_flight}
        assert tap.wants(SPAN_START) == any(w.heartbeat for w in in_flight)
        before = {id(w): len(w.seen) for w in in_flight + ended}
        taken = router._taken
        for trace in traces:
            stamp += 1
            tap.publish(Event(LOG_EVENT, "t", payload={"data": str(stamp)}, trace=trace))
        await trio.testing.wait_all_tasks_blocked()
        assert router._taken - taken == len(router.watchers)  # no trace of an ended call
        for w in in_flight:
            assert len(w.seen) == before[id(w)] + 1, "a call in flight missed its event"
        for w in ended:
            assert len(w.seen) == before[id(w)], "an ended call still gets events"

    async with trio.open_nursery() as nursery:
        await nursery.start(router.run, SimpleNamespace(tap=tap))
        for _ in range(60):
            if live and (len(live) >= 6 or rng.random() < 0.45):
                key = rng.choice(list(live))
                w, release, scope, how = live.pop(key)
                ending = rng.choice(["return", "raise", "cancel"])
                if ending == "cancel":
                    scope.cancel()
                else:
                    how.append(ending)
                    release.set()
                ended.append(w)
            else:
                w = Watcher(rng.choice(traces), heartbeat=rng.random() < 0.4)
                release, how = trio.Event(), []
                scope = await nursery.start(one_call, w, release, how)
                live[id(w)] = (w, release, scope, how)
            await check()
        for w, release, _scope, _how in live.values():
            release.set()
            ended.append(w)
        live.clear()
        await check()
        assert router.watchers == {} and router._following == 0
        nursery.cancel_scope.cancel()


def _channel(tap: EventTap) -> _client_channel:
    """A handshake call with a log level: its events need a router of its own."""

    async def notify(message) -> None:
        pass

    call = SimpleNamespace(
        notify=notify,
        log_level="info",
        meta=SimpleNamespace(progress_token="p1"),
        session=SimpleNamespace(event_router=None),
        stateless=False,
    )
    span = TraceContext.new("a")
    return _client_channel(call, SimpleNamespace(tap=tap), span, span)


async def test_a_calls_exception_keeps_its_cause_through_the_calls_own_router():
    # Regression: the own router's nursery unwrapped fn's exception with ``raise … from
    # None``, which erased the exception's __cause__ (what the server logs for an internal
    # error lost the chain that explains it).
    tap = EventTap()
    root = OSError("the disk is full")

    async def fn():
        raise RuntimeError("the tool failed") from root

    with pytest.raises(RuntimeError) as caught:
        await _channel(tap).run(fn)
    assert caught.value.__cause__ is root
    assert tap.subscriber_count == 0


async def test_an_exception_group_a_call_raises_reaches_the_server_as_itself():
    # Regression: unwrapping the router's nursery also unwrapped the call's own group of
    # one, so the server answered for the exception inside it instead.
    tap = EventTap()
    group = ExceptionGroup("the tool's own tasks", [KeyError("k")])

    async def fn():
        raise group

    with pytest.raises(ExceptionGroup) as caught:
        await _channel(tap).run(fn)
    assert caught.value is group
    assert tap.subscriber_count == 0


async def test_a_call_cancelled_through_its_own_router_is_cancelled_and_leaves_no_tap():
    tap = EventTap()
    started = trio.Event()

    async def fn():
        started.set()
        await trio.sleep_forever()

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_channel(tap).run, fn)
            await started.wait()
            assert tap.subscriber_count == 1
            nursery.cancel_scope.cancel()
    assert tap.subscriber_count == 0


async def test_an_agents_progress_names_the_agent_it_asks_not_none(kernel):
    # Regression: an in-host ask's EXEC:TOOL_CALL carries a JSON-RPC tools/call and its
    # reply a JSON-RPC response, neither with a "tool" field, so a client following an
    # agent's run read "alpha: calling None" and "alpha: None None" as its progress.
    accept = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    async with open_daemon(kernel) as url, httpx.AsyncClient(timeout=10) as client:
        with trio.fail_after(20):
            opened = await client.post(url + "/agents/alpha/mcp", json=INITIALIZE, headers=accept)
            headers = {**accept, "Mcp-Session-Id": opened.headers["Mcp-Session-Id"]}
            headers["MCP-Protocol-Version"] = opened.json()["result"]["protocolVersion"]
            initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
            await client.post(url + "/agents/alpha/mcp", json=initialized, headers=headers)
            params = {
                "name": "message",
                "arguments": {"message": "ask beta hi"},
                "_meta": {"progressToken": "p"},
            }
            call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": params}
            answer = await client.post(url + "/agents/alpha/mcp", json=call, headers=headers)
    messages = [
        json.loads(line[5:])
        for line in answer.text.splitlines()
        if line.startswith("data:") and "notifications/progress" in line
    ]
    said = [m["params"]["message"] for m in messages]
    assert "alpha: calling agent_beta" in said and "alpha: agent_beta ok" in said, said
    assert not any("None" in text for text in said), said
