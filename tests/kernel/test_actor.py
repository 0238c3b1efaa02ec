"""The actor system: tell/ask, supervision, back-pressure, shutdown, bad input."""

from __future__ import annotations

import functools
import logging
import math

import pytest
import trio
import trio.testing
from roost.kernel import (
    ActorContext,
    ActorCrashed,
    ActorError,
    ActorStopped,
    AgentNotFound,
    AskTimeout,
    Event,
    EventKind,
    EventTap,
    MailboxFull,
    RestartPolicy,
    TraceContext,
    open_actor_system,
    reply_kind,
)
from roost.kernel._actor import MAX_CONCURRENCY, MAX_MAILBOX_SIZE, direct_ask_of
from roost.kernel._deadlines import HEAP_SLACK
from waiting import wait_until


def echo_factory():
    async def echo(ctx: ActorContext, event: Event):
        return event.payload

    return echo


class Recorder:
    """A handler factory whose handlers record what they see, with a gate to hold them."""

    def __init__(self) -> None:
        self.seen: list[object] = []
        self.started = 0
        self.gate = trio.Event()
        self.handling = trio.Event()

    def factory(self):
        self.started += 1
        generation = self.started

        async def handle(ctx: ActorContext, event: Event):
            self.seen.append(event.payload)
            if event.payload == "block":
                self.handling.set()
                await self.gate.wait()
            if event.payload == "boom":
                raise ValueError(f"boom in generation {generation}")
            return {"generation": generation, "payload": event.payload}

        return handle


# ---- ask / tell -------------------------------------------------------------------------


async def test_ask_returns_a_reply_event_correlated_to_the_request():
    async with open_actor_system() as system:
        system.spawn("echo", echo_factory)
        tap_events: list[Event] = []
        async with system.tap.subscribe() as events:
            reply = await system.ask("echo", "TEST:PING", {"n": 1}, source="tester")
            while True:
                try:
                    tap_events.append(events.receive_nowait())
                except trio.WouldBlock:
                    break
    request = tap_events[0]
    assert request.kind == "TEST:PING" and request.target == "echo"
    assert request.source == "tester"
    assert reply.payload == {"n": 1}
    assert reply.kind == EventKind.ACTOR_REPLY
    assert reply.reply_to == request.id
    assert reply.source == "echo" and reply.target == "tester"
    assert tap_events[1] is reply


async def test_well_known_kinds_get_their_reply_kinds():
    async with open_actor_system() as system:
        system.spawn("echo", echo_factory)
        msg = await system.ask("echo", EventKind.AGENT_MESSAGE, "hi")
        call = await system.ask("echo", EventKind.EXEC_TOOL_CALL, "x")
    assert msg.kind == EventKind.AGENT_REPLY == reply_kind(EventKind.AGENT_MESSAGE)
    assert call.kind == EventKind.EXEC_TOOL_RESULT


async def test_handler_may_return_its_own_reply_event():
    async def factory_handler(ctx, event):
        return Event("CUSTOM:ANSWER", ctx.name, "somebody", payload=42)

    async with open_actor_system() as system:
        system.spawn("custom", lambda: factory_handler)
        reply = await system.ask("custom", "CUSTOM:QUESTION", None)
    assert reply.kind == "CUSTOM:ANSWER" and reply.payload == 42
    assert reply.reply_to is not None  # forced to the request's id


async def test_reply_carries_the_request_trace():
    trace = TraceContext.new("a")
    async with open_actor_system() as system:
        system.spawn("echo", echo_factory)
        reply = await system.ask("echo", "X", 1, trace=trace)
    assert reply.trace == trace


async def test_tell_delivers_in_order_and_is_published():
    seen: list[int] = []
    done = trio.Event()

    async def handle(ctx, event):
        seen.append(event.payload)
        if len(seen) == 50:
            done.set()

    async with open_actor_system() as system:
        ref = system.spawn("sink", lambda: handle, mailbox_size=8)
        async with system.tap.subscribe(kinds=("TEST:",)) as events:
            for i in range(50):
                await system.tell(Event("TEST:N", "src", "sink", i))
            with trio.fail_after(5):
                await done.wait()
            published = [events.receive_nowait().payload for _ in range(50)]
        assert ref.try_tell("TEST:N", 50) is True
    assert seen[:50] == list(range(50))
    assert published == list(range(50))


async def test_ask_unknown_target_names_the_known_actors():
    async with open_actor_system() as system:
        system.spawn("alpha", echo_factory)
        with pytest.raises(AgentNotFound, match="'nobody'.*alpha"):
            await system.ask("nobody", "X", None)
        with pytest.raises(AgentNotFound):
            await system.tell(Event("X", "src", "nobody"))
        with pytest.raises(AgentNotFound):
            system.try_tell(Event("X", "src", "nobody"))


async def test_tell_without_target_names_the_field():
    async with open_actor_system() as system:
        with pytest.raises(ActorError, match="event.target"):
            await system.tell(Event("X", "src", None))
        with pytest.raises(ActorError, match="event.target"):
            await system.ask(["a", "list"], "X", None)  # type: ignore[arg-type]


async def test_tell_rejects_a_bad_timeout_even_when_there_is_room():
    async with open_actor_system() as system:
        system.spawn("echo", echo_factory)
        with pytest.raises(ValueError, match="timeout"):
            await system.tell(Event("X", "src", "echo"), timeout=-1)


# 10**5000: the message printed the value, and str() of an int past 4,300 digits raises.
@pytest.mark.parametrize(
    "timeout",
    [None, 0, -1, math.nan, math.inf, "5", True, 10**400, pytest.param(10**5000, id="10**5000")],
)
async def test_ask_refuses_a_missing_or_bad_deadline(timeout):
    async with open_actor_system() as system:
        system.spawn("echo", echo_factory)
        with pytest.raises((TypeError, ValueError), match="timeout"):
            await system.ask("echo", "X", None, timeout=timeout)


async def test_ask_accepts_an_integer_timeout():
    async with open_actor_system() as system:
        system.spawn("echo", echo_factory)
        assert (await system.ask("echo", "X", 7, timeout=5)).payload == 7


async def test_ask_times_out_with_a_clear_error(autojump_clock):
    rec = Recorder()
    async with open_actor_system(shutdown_timeout_s=1) as system:
        system.spawn("slow", rec.factory)
        with pytest.raises(AskTimeout, match=r"'slow'.*within 2s"):
            await system.ask("slow", "X", "block", timeout=2)
        rec.gate.set()


async def test_abandoned_ask_is_not_handled(autojump_clock):
    rec = Recorder()
    async with open_actor_system() as system:
        system.spawn("busy", rec.factory)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(system.ask, "busy", "X", "block")
            await rec.handling.wait()
            with pytest.raises(AskTimeout):
                await system.ask("busy", "X", "given-up", timeout=1)
            rec.gate.set()
        reply = await system.ask("busy", "X", "after")
    assert reply.payload["payload"] == "after"
    assert "given-up" not in rec.seen


async def test_many_concurrent_asks_each_get_their_own_reply(autojump_clock):
    async def handle(ctx, event):
        await trio.sleep(0.001 * (event.payload % 3))
        return event.payload * 2

    results: dict[int, int] = {}
    async with open_actor_system() as system:
        system.spawn("double", lambda: handle, concurrency=4, mailbox_size=16)

        async def one(i):
            results[i] = (await system.ask("double", "X", i)).payload

        async with trio.open_nursery() as nursery:
            for i in range(200):
                nursery.start_soon(one, i)
    assert results == {i: i * 2 for i in range(200)}


async def test_context_ask_uses_the_actor_as_source():
    async def front(ctx, event):
        inner = await ctx.ask("echo", "X", event.payload)
        return {"via": ctx.name, "inner_source": inner.target, "value": inner.payload}

    async with open_actor_system() as system:
        system.spawn("echo", echo_factory)
        system.spawn("front", lambda: front)
        reply = await system.ask("front", "X", 5)
    assert reply.payload == {"via": "front", "inner_source": "front", "value": 5}


async def test_context_tell_and_ref():
    got = trio.Event()
    seen = []

    async def sink(ctx, event):
        seen.append((event.source, event.payload))
        got.set()

    async def relay(ctx, event):
        await ctx.tell("sink", "X", event.payload)
        return ctx.ref.name

    async with open_actor_system() as system:
        system.spawn("sink", lambda: sink)
        ref = system.spawn("relay", lambda: relay)
        assert (await ref.ask("X", "hello")).payload == "relay"
        with trio.fail_after(5):
            await got.wait()
        await ref.tell("X", "direct")
    assert seen[0] == ("relay", "hello")


# ---- concurrency ----------------------------------------------------------------------


async def test_concurrency_lets_a_chain_come_back_without_deadlock():
    async def a(ctx, event):
        if event.payload == "start":
            return (await ctx.ask("b", "X", "from-a")).payload
        return "a-inner"

    async def b(ctx, event):
        return "b:" + (await ctx.ask("a", "X", "inner")).payload

    async with open_actor_system() as system:
        system.spawn("a", lambda: a, concurrency=2)
        system.spawn("b", lambda: b)
        reply = await system.ask("a", "X", "start", timeout=5)
    assert reply.payload == "b:a-inner"


async def test_without_concurrency_the_same_chain_times_out(autojump_clock):
    async def a(ctx, event):
        if event.payload == "start":
            return (await ctx.ask("b", "X", "from-a", timeout=30)).payload
        return "a-inner"

    async def b(ctx, event):
        return (await ctx.ask("a", "X", "inner", timeout=10)).payload

    async with open_actor_system(shutdown_timeout_s=1) as system:
        system.spawn("a", lambda: a, concurrency=1)
        system.spawn("b", lambda: b)
        with pytest.raises(AskTimeout, match="'b' asked 'a'"):
            await system.ask("a", "X", "start", timeout=60)
    # a's ask to b failed because b's own ask to a timed out. A RoostError raised by a
    # handler is its answer (the request failed), not a crash: it reaches the asker as is.


class Crowd:
    """A handler counting how many of its calls are inside at once (``peak``): ``full`` is
    set once ``size`` are, and each call leaves when ``release`` is set (5 s at most; by
    default ``release`` is ``full``)."""

    def __init__(self, size: int, release: trio.Event | None = None):
        self.size, self.inside, self.peak = size, 0, 0
        self.full = trio.Event()
        self.release = self.full if release is None else release

    async def __call__(self, ctx, event):
        self.inside += 1
        self.peak = max(self.peak, self.inside)
        if self.peak == self.size:
            self.full.set()
        with trio.fail_after(5):
            await self.release.wait()
        self.inside -= 1


async def test_concurrency_handles_events_at_the_same_time():
    handle = Crowd(3)
    async with open_actor_system() as system:
        system.spawn("pool", lambda: handle, concurrency=3)
        async with trio.open_nursery() as nursery:
            for i in range(3):
                nursery.start_soon(system.ask, "pool", "X", i)
    assert handle.peak == 3


def _tasks_named(prefix: str) -> list[str]:
    found = []
    pending = [trio.lowlevel.current_root_task()]
    while pending:
        task = pending.pop()
        if task.name.startswith(prefix):
            found.append(task.name)
        for nursery in task.child_nurseries:
            pending.extend(nursery.child_tasks)
    return found


async def test_an_idle_actor_starts_no_worker_pool_up_front():
    """Each agent's actor (concurrency 8) started 8 worker tasks at once: with 10,000
    agents, 90,000 idle tasks. Workers start when letters need them, up to the limit."""
    release = trio.Event()
    handle = Crowd(8, release)
    async with open_actor_system() as system:
        system.spawn("pool", lambda: handle, concurrency=8)
        await trio.testing.wait_all_tasks_blocked()
        assert len(_tasks_named("actor:pool")) == 1
        async with trio.open_nursery() as nursery:
            for i in range(8):
                nursery.start_soon(system.tell, Event("X", "src", "pool", i))
            with trio.fail_after(5):
                await handle.full.wait()
            assert len(_tasks_named("actor:pool")) == 8
            release.set()
    assert handle.peak == 8


# ---- back-pressure ----------------------------------------------------------------------


async def test_full_mailbox_blocks_tell_then_raises_mailbox_full(autojump_clock):
    rec = Recorder()
    async with open_actor_system(tell_timeout_s=3) as system:
        ref = system.spawn("narrow", rec.factory, mailbox_size=1)
        await system.tell(Event("X", "src", "narrow", "block"))
        await rec.handling.wait()
        await system.tell(Event("X", "src", "narrow", "queued"))  # fills the mailbox
        assert ref.try_tell("X", "extra") is False
        start = trio.current_time()
        with pytest.raises(MailboxFull, match="'narrow'.*mailbox_size"):
            await system.tell(Event("X", "src", "narrow", "late"))
        assert trio.current_time() - start == pytest.approx(3)
        with pytest.raises(MailboxFull):
            await system.tell(Event("X", "src", "narrow", "later"), timeout=0.5)
        rec.gate.set()


async def test_blocked_tell_proceeds_when_the_mailbox_drains(autojump_clock):
    rec = Recorder()
    async with open_actor_system() as system:
        system.spawn("narrow", rec.factory, mailbox_size=1)
        await system.tell(Event("X", "src", "narrow", "block"))
        await rec.handling.wait()
        await system.tell(Event("X", "src", "narrow", "one"))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(system.tell, Event("X", "src", "narrow", "two"))
            await trio.sleep(1)
            rec.gate.set()
        await system.ask("narrow", "X", "sync")
    assert rec.seen == ["block", "one", "two", "sync"]


# ---- supervision ------------------------------------------------------------------------


async def test_crash_fails_the_ask_with_the_cause_and_restarts(caplog):
    rec = Recorder()
    async with open_actor_system() as system:
        system.spawn("worker", rec.factory)
        async with system.tap.subscribe(kinds=("ACTOR:",)) as events:
            with pytest.raises(ActorCrashed, match="'worker' crashed") as info:
                await system.ask("worker", "X", "boom")
            crashed = events.receive_nowait()
            restarted = events.receive_nowait()
            after = await system.ask("worker", "X", "fine")
    assert isinstance(info.value.__cause__, ValueError)
    assert "boom in generation 1" in str(info.value)
    assert crashed.kind == EventKind.ACTOR_CRASHED
    assert "ValueError: boom in generation 1" in crashed.payload["error"]
    assert restarted.kind == EventKind.ACTOR_RESTARTED and restarted.payload["restarts"] == 1
    assert after.payload == {"generation": 2, "payload": "fine"}  # a fresh handler
    assert any("crashed" in r.getMessage() and r.exc_info for r in caplog.records)


async def test_crash_on_tell_restarts_too():
    rec = Recorder()
    async with open_actor_system() as system:
        system.spawn("worker", rec.factory)
        async with system.tap.subscribe(kinds=(EventKind.ACTOR_RESTARTED,)) as events:
            await system.tell(Event("X", "src", "worker", "boom"))
            with trio.fail_after(5):
                restarted = await events.receive()
    assert restarted.payload["actor"] == "worker"


async def test_context_counts_restarts():
    counts = []

    def factory():
        async def handle(ctx, event):
            counts.append(ctx.restarts)
            if event.payload == "boom":
                raise RuntimeError("x")

        return handle

    async with open_actor_system() as system:
        system.spawn("w", factory)
        for payload in ["ok", "boom", "ok", "boom", "ok"]:
            try:
                await system.ask("w", "X", payload)
            except ActorCrashed:
                pass
    assert counts == [0, 0, 1, 1, 2]


async def ask_noting(outcomes: dict, system, name: str, payload) -> None:
    """Ask actor ``name`` ``payload``; ``outcomes[payload]``: the reply's payload, or the
    exception the ask raised."""
    try:
        outcomes[payload] = (await system.ask(name, "X", payload)).payload
    except Exception as exc:
        outcomes[payload] = exc


async def test_restart_budget_exhausted_stops_actor_and_fails_queued_asks():
    gate = trio.Event()
    handling = trio.Event()

    def factory():
        async def handle(ctx, event):
            if event.payload == "crash-later":
                handling.set()
                await gate.wait()
                raise KeyError("second")
            if event.payload == "crash":
                raise KeyError("first")
            return event.payload

        return handle

    outcomes: dict[str, object] = {}

    async with open_actor_system() as system:
        system.spawn("fragile", factory, restart=RestartPolicy(max_restarts=1, window_s=60))
        with pytest.raises(ActorCrashed):
            await system.ask("fragile", "X", "crash")

        ask = functools.partial(ask_noting, outcomes, system, "fragile")

        async with system.tap.subscribe(kinds=("ACTOR:",)) as events:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(ask, "crash-later")
                await handling.wait()
                nursery.start_soon(ask, "q1")
                nursery.start_soon(ask, "q2")
                await trio.testing.wait_all_tasks_blocked()
                gate.set()
            kinds = []
            with trio.fail_after(5):
                while EventKind.ACTOR_STOPPED not in kinds:
                    kinds.append((await events.receive()).kind)
        assert kinds == [EventKind.ACTOR_CRASHED, EventKind.ACTOR_STOPPED]
        assert "fragile" not in system
        with pytest.raises(ActorStopped, match="restart budget"):
            await system.ask("fragile", "X", "late")

    assert isinstance(outcomes["crash-later"], ActorCrashed)
    assert isinstance(outcomes["crash-later"].__cause__, KeyError)
    for queued in ("q1", "q2"):
        error = outcomes[queued]
        assert isinstance(error, ActorStopped), error
        assert "restart budget of 1" in str(error) and "KeyError" in str(error)


async def test_crashes_spread_beyond_the_window_keep_restarting(autojump_clock):
    rec = Recorder()
    async with open_actor_system() as system:
        system.spawn("w", rec.factory, restart=RestartPolicy(max_restarts=1, window_s=10))
        for _ in range(4):
            with pytest.raises(ActorCrashed):
                await system.ask("w", "X", "boom")
            await trio.sleep(11)
        assert "w" in system
        assert (await system.ask("w", "X", "ok")).payload["generation"] == 5


async def test_zero_restarts_stops_on_first_crash():
    rec = Recorder()
    async with open_actor_system() as system:
        system.spawn("w", rec.factory, restart=RestartPolicy(max_restarts=0))
        with pytest.raises(ActorCrashed):
            await system.ask("w", "X", "boom")
        await trio.testing.wait_all_tasks_blocked()
        assert "w" not in system
        with pytest.raises(ActorStopped, match="restart budget of 0"):
            await system.ask("w", "X", "ok")


async def test_factory_failing_on_restart_stops_the_actor():
    calls = 0

    def factory():
        nonlocal calls
        calls += 1
        if calls > 1:
            raise OSError("no more handlers")

        async def handle(ctx, event):
            raise RuntimeError("crash")

        return handle

    async with open_actor_system() as system:
        system.spawn("w", factory)
        with pytest.raises(ActorCrashed):
            await system.ask("w", "X", None)
        await trio.testing.wait_all_tasks_blocked()
        with pytest.raises(ActorStopped, match="could not restart.*no more handlers"):
            await system.ask("w", "X", None)


async def test_cancellation_is_not_a_crash(autojump_clock):
    rec = Recorder()
    async with open_actor_system() as system:
        system.spawn("w", rec.factory)
        async with system.tap.subscribe(kinds=("ACTOR:",)) as events:
            async with trio.open_nursery() as nursery:

                async def ask_blocked():
                    with pytest.raises(ActorStopped, match="cancelled while handling"):
                        await system.ask("w", "X", "block")

                nursery.start_soon(ask_blocked)
                await rec.handling.wait()
                await system.stop("w", timeout=1)
            kinds = [events.receive_nowait().kind]
    assert kinds == [EventKind.ACTOR_STOPPED]


# ---- stop and shutdown ------------------------------------------------------------------


async def test_stop_lets_in_flight_finish_and_fails_queued_asks():
    rec = Recorder()
    outcomes: dict[str, object] = {}
    async with open_actor_system() as system:
        system.spawn("w", rec.factory)

        ask = functools.partial(ask_noting, outcomes, system, "w")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(ask, "block")
            await rec.handling.wait()
            nursery.start_soon(ask, "queued")
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(system.stop, "w")
            await trio.testing.wait_all_tasks_blocked()
            assert "w" not in system
            rec.gate.set()
        with pytest.raises(ActorStopped, match="stopped on request"):
            await system.ask("w", "X", "late")
        await system.stop("w")  # stopping twice is fine
        with pytest.raises(AgentNotFound):
            await system.stop("never-existed")
        system.spawn("w", echo_factory)  # the name is free again
        assert (await system.ask("w", "X", 1)).payload == 1
    assert outcomes["block"] == {"generation": 1, "payload": "block"}
    assert isinstance(outcomes["queued"], ActorStopped)
    assert "stopped on request" in str(outcomes["queued"])


async def test_graceful_shutdown_finishes_in_flight_and_fails_queued(autojump_clock):
    rec = Recorder()
    outcomes: dict[str, object] = {}

    async with trio.open_nursery() as outside:
        async with open_actor_system() as system:
            system.spawn("w", rec.factory)
            outside.start_soon(ask_noting, outcomes, system, "w", "block")
            await rec.handling.wait()
            outside.start_soon(ask_noting, outcomes, system, "w", "queued")
            await trio.testing.wait_all_tasks_blocked()
            outside.start_soon(_release_later, rec.gate)
        # Leaving the block waited for the in-flight handler.
    assert outcomes["block"] == {"generation": 1, "payload": "block"}
    assert isinstance(outcomes["queued"], ActorStopped)
    with pytest.raises(ActorStopped, match="shutting down"):
        system.spawn("late", echo_factory)


async def _release_later(gate: trio.Event) -> None:
    await trio.sleep(0.01)
    gate.set()


async def test_shutdown_cancels_stuck_handlers_after_the_deadline(autojump_clock):
    rec = Recorder()
    outcome: list[object] = []

    async def ask(system):
        try:
            await system.ask("w", "X", "block", timeout=1000)
        except Exception as exc:
            outcome.append(exc)

    async with trio.open_nursery() as outside:
        async with open_actor_system(shutdown_timeout_s=5) as system:
            system.spawn("w", rec.factory)
            outside.start_soon(ask, system)
            await rec.handling.wait()
            start = trio.current_time()
        assert trio.current_time() - start == pytest.approx(5)
    assert isinstance(outcome[0], ActorStopped)


async def test_body_error_propagates_unwrapped_and_cancels_actors(autojump_clock):
    rec = Recorder()
    with pytest.raises(KeyError, match="body"):
        async with open_actor_system(shutdown_timeout_s=100) as system:
            system.spawn("w", rec.factory)
            system.try_tell(Event("X", "src", "w", "block"))
            await rec.handling.wait()
            start = trio.current_time()
            raise KeyError("body")
    assert trio.current_time() == start  # cancelled at once, no grace period


async def test_handler_ask_during_shutdown_gets_actor_stopped():
    errors = []
    handling = trio.Event()
    proceed = trio.Event()

    async def a(ctx, event):
        handling.set()
        await proceed.wait()
        try:
            await ctx.ask("b", "X", None)
        except ActorStopped as exc:
            errors.append(exc)

    async with trio.open_nursery() as outside:
        async with open_actor_system() as system:
            system.spawn("a", lambda: a)
            system.spawn("b", echo_factory)
            system.try_tell(Event("X", "src", "a", None))
            await handling.wait()
            outside.start_soon(_release_later, proceed)
    assert errors and "'b' is stopped" in str(errors[0])


# ---- bad input --------------------------------------------------------------------------


async def test_spawn_rejects_bad_arguments_naming_the_field():
    async with open_actor_system() as system:
        with pytest.raises(ValueError, match="name"):
            system.spawn("", echo_factory)
        with pytest.raises(ValueError, match="name"):
            system.spawn(None, echo_factory)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="handler_factory"):
            system.spawn("x", "not callable")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="mailbox_size"):
            system.spawn("x", echo_factory, mailbox_size=0)
        with pytest.raises(TypeError, match="mailbox_size"):
            system.spawn("x", echo_factory, mailbox_size=math.inf)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="mailbox_size"):
            system.spawn("x", echo_factory, mailbox_size=True)
        with pytest.raises(ValueError, match="concurrency"):
            system.spawn("x", echo_factory, concurrency=0)
        with pytest.raises(TypeError, match="restart"):
            system.spawn("x", echo_factory, restart={"max_restarts": 1})  # type: ignore[arg-type]
        with pytest.raises(ActorError, match="handler_factory of actor 'x' returned int"):
            system.spawn("x", lambda: 3)
        with pytest.raises(ActorError, match="raised ZeroDivisionError") as info:
            system.spawn("x", lambda: 1 / 0)
        assert isinstance(info.value.__cause__, ZeroDivisionError)
        assert "x" not in system
        system.spawn("x", echo_factory)
        with pytest.raises(ActorError, match="already exists"):
            system.spawn("x", echo_factory)


_HUGE = 10**5000  # no repr: str() of an int past 4,300 digits raises


@pytest.mark.parametrize(
    ("value", "error", "shown"),
    [
        (True, TypeError, "True"),
        (1.0, TypeError, "1.0"),
        ("1", TypeError, "'1'"),
        (_HUGE, ValueError, "an integer of over 1,000 digits"),
        (-1, ValueError, "-1"),
    ],
    ids=["bool", "float", "text", "huge", "negative"],
)
async def test_a_hostile_count_is_refused_naming_the_field_and_range(value, error, shown):
    # Regression: an int past 4,300 digits raised Python's own "Exceeds the limit" ValueError
    # while the message was built, naming neither the field nor the range.
    async with open_actor_system() as system:
        for field, high in (("mailbox_size", MAX_MAILBOX_SIZE), ("concurrency", MAX_CONCURRENCY)):
            with pytest.raises(error) as info:
                system.spawn("x", echo_factory, **{field: value})
            assert str(info.value) == f"{field}: expected an integer from 1 to {high}, got {shown}"
    with pytest.raises(error) as info:
        RestartPolicy(max_restarts=value)
    expected = f"RestartPolicy.max_restarts: expected an integer from 0 to 1000000, got {shown}"
    assert str(info.value) == expected


def test_restart_policy_validates_its_fields():
    with pytest.raises(ValueError, match="RestartPolicy.max_restarts"):
        RestartPolicy(max_restarts=-1)
    with pytest.raises(TypeError, match="RestartPolicy.max_restarts"):
        RestartPolicy(max_restarts="3")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="RestartPolicy.window_s"):
        RestartPolicy(window_s=0)
    assert RestartPolicy(max_restarts=0, window_s=1).max_restarts == 0


async def test_open_actor_system_validates_its_options():
    with pytest.raises(ValueError, match="shutdown_timeout_s"):
        async with open_actor_system(shutdown_timeout_s=-1):
            pass  # pragma: no cover
    with pytest.raises(TypeError, match="tap"):
        async with open_actor_system(tap="not a tap"):  # type: ignore[arg-type]
            pass  # pragma: no cover
    with pytest.raises(TypeError, match="tell_timeout_s"):
        async with open_actor_system(tell_timeout_s=None):  # type: ignore[arg-type]
            pass  # pragma: no cover


async def test_stop_rejects_a_bad_timeout():
    async with open_actor_system() as system:
        system.spawn("w", echo_factory)
        with pytest.raises(ValueError, match="timeout"):
            await system.stop("w", timeout=-1)


async def test_bad_payload_crashes_only_that_request_not_the_actor():
    async def strict(ctx, event):
        return event.payload["needed"]

    async with open_actor_system() as system:
        system.spawn("strict", lambda: strict)
        with pytest.raises(ActorCrashed) as info:
            await system.ask("strict", "X", "not a dict")
        assert isinstance(info.value.__cause__, TypeError)
        assert (await system.ask("strict", "X", {"needed": 1})).payload == 1


async def test_a_shared_tap_sees_lifecycle_events():
    tap = EventTap()
    async with tap.subscribe() as events:
        async with open_actor_system(tap=tap) as system:
            system.spawn("w", echo_factory)
        stopped = events.receive_nowait()
    assert stopped.kind == EventKind.ACTOR_STOPPED
    assert stopped.payload == {"actor": "w", "cause": "the actor system shut down"}


async def test_many_actors_spawn_and_answer():
    async with open_actor_system() as system:
        for i in range(1000):
            system.spawn(f"a{i}", echo_factory, mailbox_size=1)
        assert len(system) == 1000
        for i in range(0, 1000, 97):
            assert (await system.ask(f"a{i}", "X", i)).payload == i


async def test_crash_logging_names_actor_and_event(caplog):
    caplog.set_level(logging.ERROR, logger="roost.actor")

    async def bad(ctx, event):
        raise LookupError("nope")

    async with open_actor_system() as system:
        system.spawn("bad", lambda: bad)
        with pytest.raises(ActorCrashed):
            await system.ask("bad", "TEST:KIND", None)
    record = next(r for r in caplog.records if r.name == "roost.actor")
    assert "'bad'" in record.getMessage() and "TEST:KIND" in record.getMessage()
    assert record.exc_info[0] is LookupError


async def test_a_handler_may_stop_its_own_actor_without_waiting_for_itself(autojump_clock):
    async def quitter(ctx, event):
        await ctx.system.stop(ctx.name)
        return "bye"

    async with open_actor_system(shutdown_timeout_s=30) as system:
        system.spawn("quitter", lambda: quitter)
        start = trio.current_time()
        reply = await system.ask("quitter", "X", None)
        assert trio.current_time() == start  # no grace period spent waiting on itself
        await trio.testing.wait_all_tasks_blocked()
        assert "quitter" not in system
    assert reply.payload == "bye"


async def test_unknown_target_hint_stays_short_with_many_actors():
    async with open_actor_system() as system:
        for i in range(500):
            system.spawn(f"agent-{i}", echo_factory, mailbox_size=1)
        with pytest.raises(AgentNotFound) as info:
            await system.ask("agent-4999", "X", None)
    message = str(info.value)
    assert len(message) < 300 and "agent-499" in message


# ---- asks run directly in the asker's task ------------------------------------------------


async def test_an_ask_with_nothing_queued_runs_in_the_askers_task():
    ran_in = []

    def factory():
        async def handle(ctx, event):
            ran_in.append(trio.lowlevel.current_task())
            return "ok"

        return handle

    async with open_actor_system() as system:
        system.spawn("a", factory, direct_asks=True)
        reply = await system.ask("a", "X")
        assert reply.payload == "ok" and ran_in == [trio.lowlevel.current_task()]
        await system.tell(Event("X", "src", "a"))  # a told event still goes through a worker
        with trio.fail_after(5):
            while len(ran_in) < 2:
                await trio.sleep(0)
        assert ran_in[1] is not trio.lowlevel.current_task()


async def test_direct_asks_keep_the_concurrency_limit_and_first_come_first_served(autojump_clock):
    running, peak, order = 0, 0, []

    def factory():
        async def handle(ctx, event):
            nonlocal running, peak
            running += 1
            peak = max(peak, running)
            order.append(event.payload)
            await trio.sleep(0.01)
            running -= 1
            return event.payload

        return handle

    async with open_actor_system() as system:
        system.spawn("narrow", factory, concurrency=2, direct_asks=True)
        system.spawn("single", factory, concurrency=1, direct_asks=True)
        for name in ("narrow", "single"):
            async with trio.open_nursery() as nursery:
                for i in range(10):
                    nursery.start_soon(system.ask, name, "X", i)
                    await trio.sleep(0)  # each ask arrives after the one before
            if name == "narrow":
                assert peak == 2
                order.clear()
    # One slot: strictly in order of arrival (with two, two handlers start in one tick).
    assert order == list(range(10))


async def test_stop_fails_direct_asks_waiting_for_a_slot_and_lets_the_running_one_finish():
    rec = Recorder()
    outcomes: dict[str, object] = {}
    async with open_actor_system() as system:
        system.spawn("w", rec.factory, direct_asks=True)

        ask = functools.partial(ask_noting, outcomes, system, "w")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(ask, "block")
            await rec.handling.wait()
            nursery.start_soon(ask, "waiting")  # nothing queued: it waits for the slot itself
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(system.stop, "w")
            await trio.testing.wait_all_tasks_blocked()
            rec.gate.set()
    assert outcomes["block"] == {"generation": 1, "payload": "block"}
    assert isinstance(outcomes["waiting"], ActorStopped) and "stopped on request" in str(
        outcomes["waiting"]
    )
    assert rec.seen == ["block"]


async def test_a_crash_in_a_direct_ask_is_reported_and_the_actor_restarts():
    rec = Recorder()
    async with open_actor_system() as system:
        system.spawn("w", rec.factory, direct_asks=True)
        with pytest.raises(ActorCrashed, match="boom in generation 1") as info:
            await system.ask("w", "X", "boom")
        assert isinstance(info.value.__cause__, ValueError)
        assert (await system.ask("w", "X", "next")).payload == {"generation": 2, "payload": "next"}


async def test_a_direct_handler_finishing_after_the_deadline_is_still_a_timeout():
    # Regression: a handler in a worker thread (cancellation reaches it only when the
    # thread returns) made a direct ask succeed long after its deadline.
    import time

    def factory():
        async def handle(ctx, event):
            await trio.to_thread.run_sync(time.sleep, 0.5)
            return "late"

        return handle

    async with open_actor_system() as system:
        system.spawn("slow", factory, direct_asks=True)
        with pytest.raises(AskTimeout):
            await system.ask("slow", "X", timeout=0.1)


async def test_stop_waits_for_a_direct_handler_that_shields_its_cleanup(autojump_clock):
    # Regression: a cancelled actor's wait for its direct handlers was skipped (-inf
    # deadline arithmetic): stop() returned and the name could be reused while it ran.
    finished = []

    def factory():
        async def handle(ctx, event):
            try:
                await trio.sleep_forever()
            finally:
                with trio.CancelScope(shield=True):
                    await trio.sleep(0.3)
                finished.append(trio.current_time())

        return handle

    async with open_actor_system() as system:
        system.spawn("w", factory, direct_asks=True)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_ask_quietly, system, "w")
            await trio.testing.wait_all_tasks_blocked()
            await system.stop("w", timeout=0.05)
            stopped = trio.current_time()
        assert finished and finished[0] <= stopped


async def _ask_quietly(system, name):
    try:
        await system.ask(name, "X", timeout=30)
    except ActorStopped:
        pass


async def test_stop_fails_a_queued_ask_at_once_even_when_a_worker_holds_it_waiting_for_a_slot():
    # Regression: with the slots held by direct asks, an idle worker took the queued letter
    # and waited for a slot; stop() failed it only after the grace.
    rec = Recorder()
    outcome: list[object] = []
    async with open_actor_system() as system:
        system.spawn("w", rec.factory, direct_asks=True)
        async with trio.open_nursery() as nursery:

            async def ask(payload):
                try:
                    outcome.append((await system.ask("w", "X", payload, timeout=30)).payload)
                except Exception as exc:
                    outcome.append(exc)

            nursery.start_soon(ask, "block")  # runs directly and holds the only slot
            await rec.handling.wait()
            await system.tell(Event("X", "src", "w", "told"))  # queued: a worker takes it and waits
            nursery.start_soon(ask, "queued")  # queued behind the told event
            await trio.testing.wait_all_tasks_blocked()
            start = trio.current_time()
            nursery.start_soon(lambda: system.stop("w", timeout=3.0))
            await trio.testing.wait_all_tasks_blocked()
            assert isinstance(outcome[-1], ActorStopped) and trio.current_time() - start < 0.5
            rec.gate.set()
    assert "told" not in rec.seen and "queued" not in rec.seen


async def test_an_asks_own_deadline_is_a_timeout_even_while_its_actor_stops_gracefully(
    autojump_clock,
):
    # Regression: any cancellation while the actor was stopping was reported as ActorStopped.
    rec = Recorder()
    async with open_actor_system() as system:
        system.spawn("w", rec.factory, direct_asks=True)
        async with trio.open_nursery() as nursery:
            errors = []

            async def ask():
                try:
                    await system.ask("w", "X", "block", timeout=1)
                except Exception as exc:
                    errors.append(exc)

            nursery.start_soon(ask)
            await rec.handling.wait()
            nursery.start_soon(lambda: system.stop("w", timeout=10.0))
        assert isinstance(errors[0], AskTimeout)


async def test_by_default_a_handler_outlives_an_asker_that_gave_up(autojump_clock):
    done = trio.Event()

    def factory():
        async def handle(ctx, event):
            await trio.sleep(0.2)
            done.set()
            return "finished"

        return handle

    async with open_actor_system() as system:
        system.spawn("w", factory)  # no direct_asks: the handler runs in a worker
        with pytest.raises(AskTimeout):
            await system.ask("w", "X", timeout=0.05)
        with trio.fail_after(5):
            await done.wait()


def test_a_told_letter_in_the_mailbox_is_never_overtaken_by_a_direct_ask():
    # Regression: a letter moved into the mailbox from a blocked sender was counted only when
    # the sender resumed; an ask in that window ran directly, ahead of it.
    async def main():
        order = []
        gates = {"L1": trio.Event(), "L2": trio.Event()}

        def factory():
            async def handle(ctx, event):
                order.append(event.payload)
                if event.payload == "L3":
                    await ctx.ask("a", "X", "X", timeout=5)
                elif event.payload in gates:
                    await gates[event.payload].wait()
                return event.payload

            return handle

        async with open_actor_system() as system:
            system.spawn("a", factory, mailbox_size=1, concurrency=2, direct_asks=True)
            async with trio.open_nursery() as nursery:
                for payload in ("L1", "L2", "L3"):
                    await system.tell(Event("X", "src", "a", payload))
                    await trio.testing.wait_all_tasks_blocked()
                nursery.start_soon(system.tell, Event("X", "src", "a", "L4"))
                await trio.testing.wait_all_tasks_blocked()
                gates["L1"].set()
                await trio.testing.wait_all_tasks_blocked()
                gates["L2"].set()
            await wait_until(lambda: "X" in order and "L4" in order, "X and L4 handled")
        return order

    for _ in range(30):
        order = trio.run(main)
        assert order.index("L4") < order.index("X"), order


async def test_ask_payload_answers_like_ask_and_watchers_still_see_the_reply_event():
    def factory():
        async def handle(ctx, event):
            return f"pong:{event.payload}"

        return handle

    async with open_actor_system() as system:
        system.spawn("direct", factory, direct_asks=True)
        system.spawn("mailbox", factory)  # answered by a worker, not in the asker's task
        for name in ("direct", "mailbox"):
            assert (
                await system.ask_payload(name, "X", "a")
                == (await system.ask(name, "X", "a")).payload
                == "pong:a"
            )
        async with system.tap.subscribe(kinds=(EventKind.ACTOR_REPLY,)) as events:
            assert await system.ask_payload("direct", "X", "b") == "pong:b"
            with trio.fail_after(5):
                reply = await events.receive()
        assert (
            reply.kind == EventKind.ACTOR_REPLY
            and reply.payload == "pong:b"
            and reply.source == "direct"
        )
        with pytest.raises(AgentNotFound):
            await system.ask_payload("nobody", "X")


# ---- a direct handler stopping itself through the ask's scope (DirectAsk) -------------------


def stoppable_factory(asks: list):
    """Handlers that hand their DirectAsk to the test, then wait until cancelled (a shielded
    pause first when the payload says so: the cancel then lands while it cannot act)."""

    def factory():
        async def handle(ctx, event):
            asks.append(direct_ask_of(event))
            if event.payload:
                with trio.CancelScope(shield=True):
                    await trio.sleep(event.payload)
            await trio.sleep_forever()

        return handle

    return factory


async def test_a_direct_handler_cancelled_through_its_ask_answers_what_it_was_given(autojump_clock):
    asks: list = []
    async with open_actor_system(
        shutdown_timeout_s=0.1
    ) as system:  # the worker's handler never ends
        system.spawn("w", stoppable_factory(asks), direct_asks=True)
        system.spawn("mailbox", stoppable_factory(asks))  # run by a worker: no DirectAsk

        async def cancel_soon(answer):
            await wait_until(lambda: asks, "the handler started")
            asks.pop().cancel(lambda: answer)
            asks.clear()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(cancel_soon, "stopped")
            reply = await system.ask("w", "X", timeout=10)
        assert (
            reply.payload == "stopped"
            and reply.source == "w"
            and reply.kind == EventKind.ACTOR_REPLY
        )
        async with trio.open_nursery() as nursery:
            nursery.start_soon(cancel_soon, "again")
            assert await system.ask_payload("w", "X", timeout=10) == "again"

        with trio.move_on_after(0.2):
            await system.ask("mailbox", "X", timeout=10)
        assert asks == [None]


async def test_a_direct_handler_cancelled_as_its_deadline_passes_is_still_a_timeout(autojump_clock):
    # The handler reacts only after the ask's deadline (a shielded pause): the ask times
    # out, as it would have without the cancel; the answer is not used.
    asks: list = []
    async with open_actor_system() as system:
        system.spawn("w", stoppable_factory(asks), direct_asks=True)
        async with trio.open_nursery() as nursery:

            async def cancel_at_once():
                with trio.fail_after(5):
                    while not asks:
                        await trio.sleep(0)
                asks[0].cancel(lambda: "too late")

            nursery.start_soon(cancel_at_once)
            with pytest.raises(AskTimeout):
                await system.ask("w", "X", 0.3, timeout=0.1)


async def test_a_direct_handler_cancelled_with_its_asker_lets_the_cancellation_through(
    autojump_clock,
):
    asks: list = []
    async with open_actor_system() as system:
        system.spawn("w", stoppable_factory(asks), direct_asks=True)
        answered = []
        with trio.CancelScope() as outer:
            async with trio.open_nursery() as nursery:

                async def cancel_both():
                    with trio.fail_after(5):
                        while not asks:
                            await trio.sleep(0)
                    asks[0].cancel(lambda: "answer")
                    outer.cancel()

                nursery.start_soon(cancel_both)
                answered.append(await system.ask("w", "X", 0.1, timeout=10))
        assert outer.cancelled_caught and answered == []
        assert system.ref("w").alive


# ---- the deadlines of direct asks (one timer for all, not a deadline per cancel scope) -------


def sleeper_factory():
    async def handle(ctx, event):
        await trio.sleep(event.payload)
        return event.payload

    return handle


async def test_direct_asks_time_out_at_their_own_deadlines_whatever_the_order(autojump_clock):
    # The timer sleeps until the earliest deadline: a shorter one asked later must lower it.
    async with open_actor_system() as system:
        system.spawn("w", sleeper_factory, concurrency=4, direct_asks=True)
        ended: dict[str, object] = {}

        async def ask(name, timeout):
            start = trio.current_time()
            try:
                await system.ask("w", "X", 100, timeout=timeout)
            except AskTimeout:
                ended[name] = trio.current_time() - start

        async with trio.open_nursery() as nursery:
            nursery.start_soon(ask, "long", 50.0)
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(ask, "short", 2.0)
            nursery.start_soon(ask, "middle", 10.0)
        assert ended == pytest.approx({"long": 50.0, "short": 2.0, "middle": 10.0}, abs=0.01)
        # an answer within the deadline is still an answer, with the timer running
        assert await system.ask_payload("w", "X", 1, timeout=5.0) == 1


async def test_the_deadline_heap_of_direct_asks_stays_bounded():
    async with open_actor_system() as system:
        system.spawn("w", sleeper_factory, concurrency=2, direct_asks=True)
        async with trio.open_nursery() as nursery:
            # one ask stays in flight: the entries of the others cannot all be dropped at once
            nursery.start_soon(functools.partial(system.ask, "w", "X", 60, timeout=120.0))
            await trio.testing.wait_all_tasks_blocked()
            for _ in range(2000):
                assert await system.ask_payload("w", "X", 0, timeout=30.0) == 0
                # entries of ended asks are dropped once they outnumber twice the live ones
                assert len(system._ask_timer.entries) <= 2 * 2 + HEAP_SLACK
            assert system._asks_live == 1
            nursery.cancel_scope.cancel()
        assert system._asks_live == 0


async def test_an_ended_direct_ask_lets_go_of_its_event():
    # Its heap entry may outlive it until the timer's next round: not the request it carried.
    async with open_actor_system() as system:
        system.spawn("e", sleeper_factory, concurrency=2, direct_asks=True)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(functools.partial(system.ask, "e", "X", 60, timeout=120.0))
            await trio.testing.wait_all_tasks_blocked()
            await system.ask("e", "X", 0, timeout=30.0)
            ended = [ask for _, _, ask in system._ask_timer.entries if ask.done]
            assert len(ended) == 1 and ended[0].event is None
            nursery.cancel_scope.cancel()
        assert system._ask_timer.entries == []  # once none is live, none is kept


async def test_direct_asks_in_flight_at_shutdown_still_time_out_at_their_own_deadline(
    autojump_clock,
):
    # Shutting down stops the timer; the asks it watched get their deadlines back in their
    # scopes (the shutdown's grace period is longer here).
    outcome = []

    async def ask(system):
        start = trio.current_time()
        try:
            await system.ask("w", "X", 100, timeout=0.3)
        except AskTimeout:
            outcome.append(trio.current_time() - start)

    with trio.fail_after(10):
        async with trio.open_nursery() as outer:
            async with open_actor_system(shutdown_timeout_s=20) as system:
                system.spawn("w", sleeper_factory, direct_asks=True)
                outer.start_soon(ask, system)
                await trio.testing.wait_all_tasks_blocked()
    assert len(outcome) == 1 and outcome[0] < 5


async def test_a_direct_handler_cancelled_by_its_actors_stop_is_not_a_timeout(autojump_clock):
    async with open_actor_system() as system:
        system.spawn("w", sleeper_factory, direct_asks=True)
        async with trio.open_nursery() as nursery:
            errors = []

            async def ask():
                try:
                    await system.ask("w", "X", 100, timeout=30.0)
                except ActorStopped as exc:
                    errors.append(exc)

            nursery.start_soon(ask)
            await trio.testing.wait_all_tasks_blocked()
            await system.stop("w", timeout=0.05)
        assert len(errors) == 1 and "cancelled while handling" in str(errors[0])


async def test_an_actor_spawned_by_a_direct_handler_can_stop_itself_at_once(autojump_clock):
    # Regression guard: a task spawned from a direct handler copies its context, the direct
    # ask included; the new actor's worker must not take itself for the asker's actor (its
    # own stop would then wait for itself).
    async def quitter(ctx, event):
        await ctx.system.stop(ctx.name)
        return "bye"

    async with open_actor_system(shutdown_timeout_s=30) as system:

        def spawner_factory():
            async def spawn_quitter(ctx, event):
                ctx.system.spawn("quitter", lambda: quitter)
                return "spawned"

            return spawn_quitter

        system.spawn("spawner", spawner_factory, direct_asks=True)
        assert await system.ask_payload("spawner", "X") == "spawned"
        start = trio.current_time()
        assert await system.ask_payload("quitter", "X", timeout=60) == "bye"
        assert trio.current_time() == start


async def test_direct_asks_keep_their_deadlines_after_the_systems_nursery_is_cancelled(
    autojump_clock,
):
    # Regression (review): the shared deadline timer died with the nursery, and an ask made
    # afterwards (shielded, to a still-running actor) waited for its handler, not its timeout.
    def factory():
        async def handle(ctx, event):
            if event.kind == "BUSY":
                with trio.CancelScope(shield=True):
                    await trio.sleep(1000)
                return "busy done"
            await trio.sleep(event.payload)
            return event.payload

        return handle

    waited = []
    with trio.CancelScope() as outer:
        async with open_actor_system(shutdown_timeout_s=1) as system:
            system.spawn("w", factory, concurrency=2, direct_asks=True)
            await system.ref("w").tell("BUSY", None)
            await trio.testing.wait_all_tasks_blocked()
            await system.ask("w", "X", 0, timeout=5)  # starts the deadline timer
            outer.cancel()
            with trio.CancelScope(shield=True):
                start = trio.current_time()
                with pytest.raises(AskTimeout):
                    await system.ask("w", "X", 100, timeout=1.0)
                waited.append(trio.current_time() - start)
    assert waited == [pytest.approx(1.0, abs=0.01)]
