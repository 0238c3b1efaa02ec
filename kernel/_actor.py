"""Actors: one Trio task (or a small pool) per actor, one bounded mailbox, supervision.

``tell`` is fire-and-forget with back-pressure; ``ask`` is request/reply with a deadline.
A handler raising a ``RoostError`` has answered (bad input, storage failed): that ask fails
with it, no restart. Any other exception is a crash: the ask fails with ``ActorCrashed``
(``__cause__``: the exception), ``ACTOR:CRASHED`` is published and the actor restarts with
a fresh handler until its ``RestartPolicy`` budget runs out; then it stops (queued asks
fail with ``ActorStopped``) and after the cool-down starts afresh (``ACTOR:RESTARTED``).

Every task lives in the system's nursery; leaving ``open_actor_system`` closes the
mailboxes, lets in-flight handlers finish within ``shutdown_timeout_s``, then cancels.
"""

from __future__ import annotations

import contextvars
import difflib
import itertools
import logging
import math
import operator
import time
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import attrs
import trio

from ._deadlines import DeadlineTimer
from ._errors import (
    ActorCrashed,
    ActorError,
    ActorStopped,
    AgentNotFound,
    AskTimeout,
    MailboxFull,
    RoostError,
    _shown,
    number_setting,
)
from ._events import Event, EventKind, EventTap, new_event_id
from ._frozen import frozen_builder
from ._trace import TraceContext

log = logging.getLogger("roost.actor")

DEFAULT_ASK_TIMEOUT_S = 30.0
DEFAULT_TELL_TIMEOUT_S = 30.0
DEFAULT_MAILBOX_SIZE = 64
MAX_MAILBOX_SIZE = 1_000_000
MAX_CONCURRENCY = 1024
# Stopped actors remembered (the oldest forgotten): a late ask says why, not "unknown agent".
_TOMBSTONES = 1024

# The actor whose worker task is running: lets stop() notice an actor stopping itself.
_current_actor: contextvars.ContextVar[_Actor | None] = contextvars.ContextVar(
    "roost_current_actor", default=None
)

# The direct ask whose handler runs in this task (``direct_ask_of``); while it is set, its
# actor is the current one (one context variable set per ask, not two).
_direct_ask: contextvars.ContextVar[DirectAsk | None] = contextvars.ContextVar(
    "roost_direct_ask", default=None
)

# Event(kind, source, target, payload, trace, id, reply_to, ts), every field given.
_event = frozen_builder(Event)

# The reply kind for well-known request kinds; anything else is answered with ACTOR:REPLY.
REPLY_KINDS: dict[str, str] = {
    EventKind.AGENT_MESSAGE: EventKind.AGENT_REPLY,
    EventKind.EXEC_TOOL_CALL: EventKind.EXEC_TOOL_RESULT,
}


def reply_kind(kind: str) -> str:
    """The kind of the reply to a request of ``kind``."""
    return REPLY_KINDS.get(kind, EventKind.ACTOR_REPLY)


def _check_count(field: str, value: Any, low: int, high: int) -> None:
    if number_setting(value, low, high, integer=True, closed=True) is None:
        wrong_type = isinstance(value, bool) or not isinstance(value, int)
        raise (TypeError if wrong_type else ValueError)(
            f"{field}: expected an integer from {low} to {high}, got {_shown(value)}"
        )


def _check_seconds(field: str, value: Any, why: str = "") -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{field}: expected a number of seconds, got {type(value).__name__}{why}")
    if (seconds := number_setting(value)) is None:
        shown = f"{_shown(value)}{why}"
        raise ValueError(f"{field}: must be a positive, finite number of seconds, got {shown}")
    return seconds


def _validate_max_restarts(_inst: Any, attribute: attrs.Attribute, value: Any) -> None:
    _check_count(f"RestartPolicy.{attribute.name}", value, 0, 1_000_000)


def _validate_window(_inst: Any, attribute: attrs.Attribute, value: Any) -> None:
    _check_seconds(f"RestartPolicy.{attribute.name}", value)


@attrs.frozen
class RestartPolicy:
    """Restart a crashed actor at most ``max_restarts`` times within ``window_s`` seconds
    (0: the first crash stops it). One crash more stops it; ``cooldown_s`` later it starts
    afresh (a fresh handler, an empty mailbox, a full budget), unless stopped on request or
    the system is shutting down meanwhile."""

    max_restarts: int = attrs.field(default=3, validator=_validate_max_restarts)
    window_s: float = attrs.field(default=60.0, validator=_validate_window)
    cooldown_s: float = attrs.field(default=60.0, validator=_validate_window)


@attrs.frozen(eq=False)
class ActorContext:
    """What a handler knows about the actor it runs in. A new one per (re)start."""

    name: str
    system: ActorSystem = attrs.field(repr=False)
    restarts: int = 0

    @property
    def ref(self) -> ActorRef:
        """A reference to this actor."""
        return ActorRef(self.name, self.system)

    async def tell(
        self, target: str, kind: str, payload: Any = None, *, trace: TraceContext | None = None
    ) -> None:
        """Send an event from this actor to ``target`` without waiting for a reply."""
        await self.system.tell(Event(kind, self.name, target, payload, trace))

    async def ask(
        self,
        target: str,
        kind: str,
        payload: Any = None,
        *,
        trace: TraceContext | None = None,
        timeout: float = DEFAULT_ASK_TIMEOUT_S,
    ) -> Event:
        """Ask ``target`` on behalf of this actor; see ``ActorSystem.ask``."""
        return await self.system.ask(
            target, kind, payload, source=self.name, trace=trace, timeout=timeout
        )


ActorHandler = Callable[[ActorContext, Event], Awaitable[Any]]
"""``await handler(ctx, event)``: its value answers an ask, an ``Event`` as it is (e.g.
``event.reply(kind, payload)``), else as the payload of a ``reply_kind(event.kind)`` reply."""


@attrs.frozen(eq=False)
class ActorRef:
    """A handle on a named actor in a system (the actor may have stopped since)."""

    name: str
    system: ActorSystem = attrs.field(repr=False)

    async def tell(
        self,
        kind: str,
        payload: Any = None,
        *,
        source: str = "kernel",
        trace: TraceContext | None = None,
        timeout: float | None = None,
    ) -> None:
        """``ActorSystem.tell`` addressed to this actor."""
        await self.system.tell(Event(kind, source, self.name, payload, trace), timeout=timeout)

    def try_tell(
        self,
        kind: str,
        payload: Any = None,
        *,
        source: str = "kernel",
        trace: TraceContext | None = None,
    ) -> bool:
        """``ActorSystem.try_tell`` addressed to this actor."""
        return self.system.try_tell(Event(kind, source, self.name, payload, trace))

    async def ask(
        self,
        kind: str,
        payload: Any = None,
        *,
        source: str = "kernel",
        trace: TraceContext | None = None,
        timeout: float = DEFAULT_ASK_TIMEOUT_S,
    ) -> Event:
        """``ActorSystem.ask`` addressed to this actor."""
        return await self.system.ask(
            self.name, kind, payload, source=source, trace=trace, timeout=timeout
        )

    async def stop(self) -> None:
        """``ActorSystem.stop`` for this actor."""
        await self.system.stop(self.name)

    @property
    def alive(self) -> bool:
        """True while the actor accepts events."""
        return self.name in self.system


@attrs.define(eq=False)
class DirectAsk:
    """An ask whose handler runs in the asker's task (``spawn(direct_asks=True)``) in the ask's
    cancel scope (its deadline, the actor's stop), which a handler may use as its own (a scope
    costs as much as a small handler): ``cancel(answer)`` stops it and the ask answers
    ``answer()``, unless a deadline, the stop or an enclosing cancellation cut it short too;
    then the ask fails or is cancelled as it would have anyway."""

    actor: _Actor
    event: Event | None
    scope: trio.CancelScope
    # The ask's own deadline: the system's timer cancels ``scope`` when it passes (the
    # scope's Trio deadline is the actor's stop, if any).
    deadline: float
    answer: Callable[[], Any] | None = None
    done: bool = False

    def cancel(self, answer: Callable[[], Any]) -> None:
        """Stop the handler; the ask answers ``answer()`` (the first ``cancel`` wins)."""
        if self.answer is None:
            self.answer = answer
        self.scope.cancel()


def direct_ask_of(event: Event) -> DirectAsk | None:
    """The direct ask a handler called with ``event`` is serving in this task, if any."""
    ask = _direct_ask.get()
    return ask if ask is not None and ask.event is event else None


def _running_actor() -> _Actor | None:
    """The actor whose handler runs in this task: a direct ask's, else the worker's."""
    ask = _direct_ask.get()
    return ask.actor if ask is not None else _current_actor.get()


# How long an ending actor waits for cancelled handlers in askers' tasks (bounds a shielding one).
_INLINE_EXIT_S = 5.0


# What the deadline timer of direct asks (``ActorSystem._ask_timer``) does with an ask: it
# has ended; its deadline has passed; the timer has stopped, so its scope keeps it.
_ask_ended = operator.attrgetter("done")


def _expire_ask(ask: DirectAsk) -> None:
    ask.scope.cancel()


def _hand_back_deadline(ask: DirectAsk, deadline: float) -> None:
    ask.scope.deadline = min(ask.scope.deadline, deadline)


@attrs.define(eq=False)
class _ReplySlot:
    """A one-shot place for the answer to one ask. The first outcome wins."""

    ready: trio.Event = attrs.Factory(trio.Event)
    done: bool = False
    reply: Event | None = None
    error: BaseException | None = None

    def succeed(self, reply: Event) -> None:
        if not self.done:
            self.done = True
            self.reply = reply
            self.ready.set()

    def fail(self, error: BaseException) -> None:
        if not self.done:
            self.done = True
            self.error = error
            self.ready.set()

    def abandon(self) -> None:
        """The asker gave up (deadline or cancellation): later outcomes are dropped."""
        self.done = True


# A mailbox entry: the event, and the reply slot when it was asked (None when told).
_Letter = tuple[Event, "_ReplySlot | None"]


@attrs.define(eq=False)
class _Actor:
    name: str
    factory: Callable[[], ActorHandler]
    handler: ActorHandler
    context: ActorContext
    size: int
    concurrency: int
    policy: RestartPolicy
    direct: bool = False
    scope: trio.CancelScope = attrs.Factory(trio.CancelScope)
    done: trio.Event = attrs.Factory(trio.Event)
    restarts: int = 0
    crash_times: deque[float] | None = None  # created on the first crash
    stop_cause: str | None = None
    revive_at: float | None = None  # set when its restart budget ran out: cool-down end
    # Letters posted and not yet started or dropped (in the mailbox, or taken by a worker
    # that has not begun): a direct run must not overtake them.
    pending: int = 0
    inline: set[DirectAsk] = attrs.Factory(set)
    waiting: set[trio.CancelScope] = attrs.Factory(set)  # direct asks waiting for a slot
    inline_idle: trio.Event | None = None
    # Workers start as letters need them, up to ``concurrency``; ``idle``: those waiting for one.
    workers: trio.Nursery | None = None
    worker_count: int = 1
    idle: int = 0
    send: trio.MemorySendChannel[_Letter] = attrs.field(init=False)
    receive: trio.MemoryReceiveChannel[_Letter] = attrs.field(init=False)
    # Handlers running at once, by workers or in askers' tasks (``inline``): ≤ ``concurrency``.
    slots: trio.Semaphore = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.send, self.receive = trio.open_memory_channel[_Letter](self.size)
        self.slots = trio.Semaphore(self.concurrency)


def _ask_timeout(source: str, actor: _Actor, event: Event, timeout: float) -> AskTimeout:
    return AskTimeout(
        f"{source!r} asked {actor.name!r} ({event.kind}, event {event.id}) and got no reply "
        f"within {timeout:g}s; the actor is busy or stuck: raise the timeout or check its handler"
    )


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class ActorSystem:
    """Named actors in one nursery (``open_actor_system()``); ``tap`` sees every event told,
    asked or replied and ``ACTOR:CRASHED`` / ``RESTARTED`` / ``STOPPED``."""

    def __init__(
        self,
        nursery: trio.Nursery,
        tap: EventTap,
        *,
        shutdown_timeout_s: float,
        tell_timeout_s: float,
    ) -> None:
        self.tap = tap
        self.shutdown_timeout_s = shutdown_timeout_s
        self.tell_timeout_s = tell_timeout_s
        self._nursery = nursery
        # The run's clock: its current_time() is trio.current_time() with two calls less.
        self._clock = trio.lowlevel.current_clock()
        self._actors: dict[str, _Actor] = {}
        self._stopped: OrderedDict[str, str] = OrderedDict()
        # Actors past their restart budget, waiting out their cool-down: setting the event ends
        # the wait without a restart (a stop on request, a shutdown, a new spawn).
        self._cooling: dict[str, trio.Event] = {}
        self._closing: str | None = None
        # Direct asks' deadlines, kept by one timer task rather than a cancel scope each; once
        # it stops (shutdown, its nursery cancelled), asks get them back on their scopes.
        self._ask_timer: DeadlineTimer[DirectAsk] = DeadlineTimer(
            nursery,
            _ask_ended,
            _expire_ask,
            hand_back=_hand_back_deadline,
            name="actors:ask-deadlines",
        )
        self._ask_numbers = itertools.count()
        self._asks_live = 0

    # ---- lifecycle ----------------------------------------------------------------
    def spawn(
        self,
        name: str,
        handler_factory: Callable[[], ActorHandler],
        *,
        mailbox_size: int = DEFAULT_MAILBOX_SIZE,
        concurrency: int = 1,
        restart: RestartPolicy | None = None,
        direct_asks: bool = False,
    ) -> ActorRef:
        """Start actor ``name`` with a handler from ``handler_factory()`` (called again on
        every restart), handling up to ``concurrency`` events at once (the handler must then
        be re-entrant).
        ``direct_asks``: an ask with nothing queued ahead runs the handler in the asker's
        task (see ``ask``), cancelled when the asker gives up; its deadline holds only as
        promptly as the handler reacts (a worker thread finishes its call first)."""
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"name: expected a non-empty string, got {name!r}")
        if not callable(handler_factory):
            raise TypeError(
                f"handler_factory: expected a callable returning an async handler, "
                f"got {type(handler_factory).__name__}"
            )
        _check_count("mailbox_size", mailbox_size, 1, MAX_MAILBOX_SIZE)
        _check_count("concurrency", concurrency, 1, MAX_CONCURRENCY)
        if restart is None:
            restart = RestartPolicy()
        elif not isinstance(restart, RestartPolicy):
            raise TypeError(f"restart: expected a RestartPolicy, got {type(restart).__name__}")
        if self._closing is not None:
            raise ActorStopped(
                f"cannot spawn {name!r}: the actor system is shutting down ({self._closing})"
            )
        if name in self._actors:
            raise ActorError(
                f"an actor named {name!r} already exists; stop it first or choose another name"
            )
        handler = self._make_handler(name, handler_factory)
        context = ActorContext(name, self, 0)
        actor = _Actor(
            name, handler_factory, handler, context, mailbox_size, concurrency, restart, direct_asks
        )
        self._actors[name] = actor
        self._stopped.pop(name, None)
        cooling = self._cooling.pop(name, None)
        if cooling is not None:  # the new actor replaces the one cooling down
            cooling.set()
        self._nursery.start_soon(self._supervise, actor, name=f"actor:{name}")
        return ActorRef(name, self)

    @staticmethod
    def _make_handler(name: str, factory: Callable[[], ActorHandler]) -> ActorHandler:
        try:
            handler = factory()
        except Exception as exc:
            raise ActorError(f"handler_factory of actor {name!r} raised {_describe(exc)}") from exc
        if not callable(handler):
            raise ActorError(
                f"handler_factory of actor {name!r} returned {type(handler).__name__}; "
                "it must return an async callable (ctx, event) -> reply"
            )
        return handler

    async def stop(self, name: str, *, timeout: float | None = None) -> None:
        """Stop ``name``: queued asks fail with ActorStopped, in-flight handlers get
        ``timeout`` (default ``shutdown_timeout_s``) to finish, then are cancelled."""
        grace = self.shutdown_timeout_s if timeout is None else _check_seconds("timeout", timeout)
        actor = self._actors.get(name)
        if actor is None:
            cooling = self._cooling.pop(name, None)
            if cooling is not None:  # past its budget, waiting to restart: it stays stopped
                cooling.set()
                self._stopped[name] = "stopped on request"
            if name in self._stopped:
                return
            raise AgentNotFound(name, self._known_hint(name))
        self._close(actor, "stopped on request")
        actor.scope.deadline = min(actor.scope.deadline, trio.current_time() + grace)
        self._cancel_inline(actor, actor.scope.deadline)
        if _running_actor() is actor:
            return  # a handler stopping its own actor: the actor ends once it returns
        # The extra second only bounds a handler that shields itself from cancellation.
        with trio.move_on_after(grace + 1.0):
            await actor.done.wait()
        if not actor.done.is_set():
            log.warning("actor %r did not stop within %.1fs of being cancelled", name, grace)

    def stop_cause(self, name: str) -> str | None:
        """Why ``name`` does not accept events (stopped, or past its restart budget and
        cooling down, with when it restarts), or None while it runs or if it never existed."""
        actor = self._actors.get(name)
        if actor is not None:
            return actor.stop_cause
        return self._stopped.get(name)

    def names(self) -> list[str]:
        """Names of the actors that accept events, sorted."""
        return sorted(n for n, a in self._actors.items() if a.stop_cause is None)

    def __contains__(self, name: object) -> bool:
        actor = self._actors.get(name)  # type: ignore[arg-type]
        return actor is not None and actor.stop_cause is None

    def __len__(self) -> int:
        return len(self.names())

    def _known_hint(self, name: str) -> list[str]:
        names = self.names()
        if len(names) <= 20:
            return names
        return difflib.get_close_matches(name, names, n=5) or names[:20]

    def ref(self, name: str) -> ActorRef:
        """A reference to the running actor ``name``; AgentNotFound if there is none."""
        self._lookup(name)
        return ActorRef(name, self)

    # ---- messaging ------------------------------------------------------------------
    def _lookup(self, target: Any) -> _Actor:
        actor = self._actors.get(target) if isinstance(target, str) else None
        if actor is None:
            if not isinstance(target, str):
                raise ActorError(
                    f"event.target: expected the name of an actor, got {target!r}; "
                    f"known actors: {', '.join(self._known_hint('')) or '(none)'}"
                )
            cause = self._stopped.get(target)
            if cause is not None:
                raise ActorStopped(f"actor {target!r} is stopped: {cause}")
            raise AgentNotFound(target, self._known_hint(target))
        if actor.stop_cause is not None:
            raise ActorStopped(f"actor {target!r} is stopped: {actor.stop_cause}")
        return actor

    async def tell(self, event: Event, *, timeout: float | None = None) -> None:
        """Deliver ``event`` to ``event.target``, not waiting for it to be handled; a full
        mailbox is waited on up to ``timeout`` (default ``tell_timeout_s``), then MailboxFull."""
        limit = self.tell_timeout_s if timeout is None else _check_seconds("timeout", timeout)
        actor = self._lookup(event.target)
        self.tap.publish(event)
        try:
            actor.send.send_nowait((event, None))
            actor.pending += 1
        except trio.WouldBlock:
            with trio.move_on_after(limit):
                await self._send(actor, event, None)
                return
            raise MailboxFull(
                f"actor {actor.name!r} kept its mailbox full ({actor.size} events) for "
                f"{limit:g}s, so {event.kind} was not delivered; the actor is overloaded or "
                "stuck: slow the sender, raise mailbox_size or concurrency"
            ) from None
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            raise self._stopped_error(actor, event) from None
        else:
            await trio.lowlevel.checkpoint()

    def try_tell(self, event: Event) -> bool:
        """Deliver ``event`` if its target's mailbox has room; False if it is full (raises
        AgentNotFound / ActorStopped like ``tell``: retrying would not help)."""
        actor = self._lookup(event.target)
        try:
            actor.send.send_nowait((event, None))
            actor.pending += 1
        except trio.WouldBlock:
            return False
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            raise self._stopped_error(actor, event) from None
        self.tap.publish(event)
        return True

    async def ask(
        self,
        target: str,
        kind: str,
        payload: Any = None,
        *,
        source: str = "kernel",
        trace: TraceContext | None = None,
        timeout: float = DEFAULT_ASK_TIMEOUT_S,
    ) -> Event:
        """Send ``kind``/``payload`` to ``target``; its reply event (``reply_to``: the request's
        id) within ``timeout`` seconds. With ``direct_asks`` and nothing queued, the handler runs
        in this task once a slot is free (first come, first served), else a worker takes it from
        the mailbox: the same limits and errors. Raises AgentNotFound, AskTimeout, ActorCrashed
        (``__cause__``: the handler's exception) or ActorStopped."""
        return await self._ask(target, kind, payload, source, trace, timeout, True)

    def ask_payload(
        self,
        target: str,
        kind: str,
        payload: Any = None,
        *,
        source: str = "kernel",
        trace: TraceContext | None = None,
        timeout: float = DEFAULT_ASK_TIMEOUT_S,
    ) -> Awaitable[Any]:
        """``(await ask(...)).payload``: the same ask, limits and errors; an answer given in
        the asker's task skips building the reply event while nobody subscribes to events."""
        return self._ask(target, kind, payload, source, trace, timeout, False)

    def _ask(
        self,
        target: str,
        kind: str,
        payload: Any,
        source: str,
        trace: TraceContext | None,
        timeout: float,
        as_event: bool,
    ) -> Awaitable[Any]:
        """An ask's checks and event, then the awaitable completing it (one coroutine less)."""
        timeout = _check_seconds("timeout", timeout, "; every ask needs a deadline")
        actor = self._lookup(target)
        event = _event(kind, source, target, payload, trace, new_event_id(), None, time.time())
        self.tap.publish(event)
        # Nothing queued ahead: the handler runs in this task (no mailbox trip, no task switch).
        if actor.direct and not actor.pending:
            return self._ask_directly(actor, event, source, timeout, as_event)
        return self._ask_by_mail(actor, event, source, timeout, as_event)

    async def _ask_by_mail(
        self, actor: _Actor, event: Event, source: str, timeout: float, as_event: bool
    ) -> Any:
        """``ask`` through ``actor``'s mailbox, answered by one of its workers."""
        slot = _ReplySlot()
        with trio.move_on_after(timeout):
            try:
                try:
                    actor.send.send_nowait((event, slot))
                    actor.pending += 1
                except trio.WouldBlock:
                    await self._send(actor, event, slot)
                await slot.ready.wait()
            finally:
                if not slot.done:
                    slot.abandon()
        if slot.reply is not None:
            return slot.reply if as_event else slot.reply.payload
        if slot.error is not None:
            raise slot.error
        raise _ask_timeout(source, actor, event, timeout)

    async def _ask_directly(
        self, actor: _Actor, event: Event, source: str, timeout: float, as_event: bool
    ) -> Any:
        """``ask`` with the handler run in this task once one of ``actor.slots`` is free."""
        ask_deadline = self._clock.current_time() + timeout
        # The scope's own deadline is only a stopping actor's; the timer keeps the ask's.
        stop_deadline = actor.scope.deadline
        scope = (
            trio.CancelScope()
            if stop_deadline == math.inf
            else trio.CancelScope(deadline=stop_deadline)
        )
        direct = DirectAsk(actor, event, scope, ask_deadline)
        holding = False
        ask_token = None
        try:
            self._asks_live += 1
            self._ask_timer.push(ask_deadline, next(self._ask_numbers), direct, self._asks_live)
            with scope:
                try:
                    actor.slots.acquire_nowait()
                except trio.WouldBlock:
                    actor.waiting.add(scope)
                    try:
                        await actor.slots.acquire()
                    finally:
                        actor.waiting.discard(scope)
                holding = True
                actor.inline.add(direct)
                if actor.stop_cause is not None:  # stopped while this ask waited for a slot
                    raise self._stopped_error(actor, event)
                ask_token = _direct_ask.set(direct)
                try:
                    result = await actor.handler(actor.context, event)
                except RoostError:
                    raise  # the handler's answer: the request failed, the actor did not
                except Exception as exc:
                    raise self._crashed(actor, event, exc) from exc
        finally:
            direct.done = True
            direct.event = None  # its heap entry may outlive the ask a while
            self._asks_live -= 1
            if not self._asks_live:
                self._ask_timer.entries.clear()  # all ended: nothing left for the timer to watch
            if ask_token is not None:
                _direct_ask.reset(ask_token)
            if holding:
                actor.inline.discard(direct)
                actor.slots.release()
                if not actor.inline and actor.inline_idle is not None:
                    actor.inline_idle.set()
        # A handler that finished only after the deadline (cancellation reaches it at its next
        # checkpoint; a worker thread first finishes its call) is still a timeout.
        now = self._clock.current_time()
        if scope.cancelled_caught or now >= ask_deadline:
            limit = min(ask_deadline, scope.deadline)
            if scope.cancelled_caught and direct.answer is not None and now < limit:
                # Stopped by DirectAsk.cancel and by nothing else (no deadline had passed).
                result = direct.answer()
            else:
                if actor.stop_cause is not None and not holding:
                    raise self._stopped_error(actor, event)
                if actor.stop_cause is not None and limit < ask_deadline:  # the stop cut it short
                    raise self._cancelled_error(actor, event)
                raise _ask_timeout(source, actor, event, timeout)
        # Nobody would see the reply event: skip building it.
        if not as_event and not self.tap.wants(REPLY_KINDS.get(event.kind, EventKind.ACTOR_REPLY)):
            return result.payload if isinstance(result, Event) else result
        reply = self._reply(actor, event, result)
        self.tap.publish(reply)
        return reply if as_event else reply.payload

    @staticmethod
    def _reply(actor: _Actor, event: Event, result: Any) -> Event:
        if isinstance(result, Event):
            return (
                result if result.reply_to == event.id else attrs.evolve(result, reply_to=event.id)
            )
        return Event(
            REPLY_KINDS.get(event.kind, EventKind.ACTOR_REPLY),
            actor.name,
            event.source,
            result,
            event.trace,
            reply_to=event.id,
        )

    @staticmethod
    def _cancel_inline(actor: _Actor, deadline: float = -math.inf) -> None:
        for ask in actor.inline:
            ask.scope.deadline = min(ask.scope.deadline, ask.deadline, deadline)

    async def _send(self, actor: _Actor, event: Event, slot: _ReplySlot | None) -> None:
        try:
            actor.pending += 1  # counted before the send: a receiver may take it first
            try:
                await actor.send.send((event, slot))
            except BaseException:
                actor.pending -= 1  # not sent (Trio sends nothing when send raises)
                raise
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            error = self._stopped_error(actor, event)
            if slot is None:
                raise error from None
            slot.fail(error)

    @staticmethod
    def _cancelled_error(actor: _Actor, event: Event) -> ActorStopped:
        return ActorStopped(
            f"actor {actor.name!r} was cancelled while handling {event.kind} "
            f"(event {event.id}): {actor.stop_cause or 'cancelled'}"
        )

    @staticmethod
    def _stopped_error(actor: _Actor, event: Event) -> ActorStopped:
        return ActorStopped(
            f"actor {actor.name!r} stopped before it could take {event.kind} "
            f"(event {event.id}): {actor.stop_cause or 'stopped'}"
        )

    # ---- the actor task ---------------------------------------------------------------
    async def _supervise(self, actor: _Actor) -> None:
        """The actor's task: run it; once its budget ran out, after the cool-down, a fresh one."""
        while True:
            await self._run(actor)
            if actor.revive_at is None or self._closing is not None:
                return
            name = actor.name
            cooling = self._cooling[name] = trio.Event()
            with trio.move_on_at(actor.revive_at):
                await cooling.wait()
            if self._cooling.get(name) is cooling:
                del self._cooling[name]
            if cooling.is_set() or self._closing is not None or name in self._actors:
                return  # stopped on request, shutting down, or replaced by a new spawn
            try:
                handler = self._make_handler(name, actor.factory)
            except ActorError as exc:
                log.error("actor %r could not restart after its cool-down: %s", name, exc)
                self._stopped[name] = f"could not restart after its cool-down: {exc}"
                return
            restarts = actor.restarts + 1
            actor = _Actor(
                name,
                actor.factory,
                handler,
                ActorContext(name, self, restarts),
                actor.size,
                actor.concurrency,
                actor.policy,
                actor.direct,
                restarts=restarts,
            )
            self._actors[name] = actor
            self._stopped.pop(name, None)
            log.warning("actor %r restarted after its cool-down", name)
            self._restarted(name, restarts, "cool-down")

    async def _run(self, actor: _Actor) -> None:
        _current_actor.set(actor)
        _direct_ask.set(None)  # this task's context was copied from its spawner's
        cancelled = False
        try:
            with actor.scope:
                if actor.concurrency == 1:
                    await self._serve(actor)
                else:
                    async with trio.open_nursery() as workers:
                        actor.workers = workers
                        await self._serve(actor)
        except BaseException:
            cancelled = True
            raise
        finally:
            self._close(actor, actor.stop_cause or "its task ended")
            if actor.inline:
                # They end with the actor: at once if cancelled, else in its stop's grace.
                if cancelled or actor.scope.cancel_called:
                    self._cancel_inline(actor)
                now = trio.current_time()
                latest = max(min(ask.scope.deadline, ask.deadline) for ask in actor.inline)
                actor.inline_idle = trio.Event()
                with trio.CancelScope(shield=True):
                    with trio.move_on_at(
                        max(min(latest, now + self.shutdown_timeout_s), now) + _INLINE_EXIT_S
                    ):
                        await actor.inline_idle.wait()
            if self._actors.get(actor.name) is actor:
                del self._actors[actor.name]
            self._stopped[actor.name] = actor.stop_cause or "stopped"
            while len(self._stopped) > _TOMBSTONES:
                self._stopped.popitem(last=False)
            actor.done.set()
            self.tap.publish(
                Event(
                    EventKind.ACTOR_STOPPED,
                    actor.name,
                    payload={"actor": actor.name, "cause": actor.stop_cause},
                )
            )

    async def _serve(self, actor: _Actor) -> None:
        receive = actor.receive
        while True:
            actor.idle += 1
            try:
                event, slot = await receive.receive()
            except (trio.EndOfChannel, trio.ClosedResourceError):
                return
            finally:
                actor.idle -= 1
            if (
                not actor.idle
                and actor.worker_count < actor.concurrency
                and actor.workers is not None
            ):
                # Every worker is busy now: one more takes the next letter.
                actor.workers.start_soon(
                    self._serve, actor, name=f"actor:{actor.name}#{actor.worker_count}"
                )
                actor.worker_count += 1
            if slot is not None and slot.done:
                actor.pending -= 1
                continue  # the asker gave up before we got to it: nobody wants the result
            try:
                actor.slots.acquire_nowait()
            except trio.WouldBlock:  # handlers run directly in askers' tasks fill the slots
                # Waiting for a slot, the letter is still "queued": a stop fails it at once.
                with trio.CancelScope() as waiting:
                    actor.waiting.add(waiting)
                    try:
                        await actor.slots.acquire()
                    except BaseException:
                        actor.pending -= 1
                        if slot is not None:
                            slot.fail(self._stopped_error(actor, event))
                        raise
                    finally:
                        actor.waiting.discard(waiting)
                if waiting.cancelled_caught:
                    continue  # _close cancelled the wait (pending and the slot are settled)
                if actor.stop_cause is not None or (slot is not None and slot.done):
                    actor.pending -= 1
                    actor.slots.release()
                    if slot is not None:
                        slot.fail(self._stopped_error(actor, event))
                    continue
            actor.pending -= 1
            try:
                handler = actor.handler
                try:
                    result = await handler(actor.context, event)
                except RoostError as exc:  # the handler's answer: the request failed, not the actor
                    if slot is not None:
                        slot.fail(exc)
                    else:
                        log.warning(
                            "actor %r could not handle %s (event %s): %s",
                            actor.name,
                            event.kind,
                            event.id,
                            exc,
                        )
                    continue
                except Exception as exc:
                    error = self._crashed(actor, event, exc)
                    if slot is not None:
                        slot.fail(error)
                    continue
                except BaseException:
                    if slot is not None:
                        slot.fail(self._cancelled_error(actor, event))
                    raise
            finally:
                actor.slots.release()
            if slot is not None and not slot.done:
                reply = self._reply(actor, event, result)
                self.tap.publish(reply)
                slot.succeed(reply)

    def _crashed(self, actor: _Actor, event: Event, exc: Exception) -> ActorCrashed:
        """Report the crash and apply the restart policy; returns the error for the asker."""
        text = _describe(exc)
        log.error(
            "actor %r crashed handling %s (event %s): %s",
            actor.name,
            event.kind,
            event.id,
            text,
            exc_info=exc,
        )
        self.tap.publish(
            Event(
                EventKind.ACTOR_CRASHED,
                actor.name,
                payload={
                    "actor": actor.name,
                    "event_id": event.id,
                    "event_kind": event.kind,
                    "error": text,
                },
                trace=event.trace,
            )
        )
        error = ActorCrashed(
            f"actor {actor.name!r} crashed handling {event.kind} (event {event.id}): {text}"
        )
        error.__cause__ = exc
        error.__suppress_context__ = True
        if actor.stop_cause is not None:
            return error  # already stopping: no restart
        policy = actor.policy
        now = trio.current_time()
        if actor.crash_times is None:
            actor.crash_times = deque()
        times = actor.crash_times
        times.append(now)
        while times and times[0] <= now - policy.window_s:
            times.popleft()
        if len(times) > policy.max_restarts:
            actor.revive_at = now + policy.cooldown_s
            at = time.strftime("%H:%M:%S", time.gmtime(time.time() + policy.cooldown_s))
            cause = (
                f"crashed {len(times)} time{'s' if len(times) > 1 else ''} within "
                f"{policy.window_s:g}s, more than its "
                f"restart budget of {policy.max_restarts}; it restarts by itself at {at} UTC "
                f"({policy.cooldown_s:g}s after it stopped); last error: {text}"
            )
        else:
            try:
                actor.handler = self._make_handler(actor.name, actor.factory)
            except ActorError as factory_error:
                log.error("actor %r could not restart: %s", actor.name, factory_error)
                cause = f"could not restart after {text}: {factory_error}"
            else:
                actor.restarts += 1
                actor.context = ActorContext(actor.name, self, actor.restarts)
                self._restarted(actor.name, actor.restarts, text)
                return error
        self._close(actor, cause)
        actor.scope.cancel()
        self._cancel_inline(actor)
        return error

    def _restarted(self, name: str, restarts: int, after: str) -> None:
        payload = {"actor": name, "restarts": restarts, "after": after}
        self.tap.publish(Event(EventKind.ACTOR_RESTARTED, name, payload=payload))

    def _close(self, actor: _Actor, cause: str) -> None:
        """Refuse new events and fail the queued asks with ActorStopped (synchronous)."""
        if actor.stop_cause is not None:
            return
        actor.stop_cause = cause
        actor.send.close()  # blocked senders get ClosedResourceError; workers end at EOF
        for scope in actor.waiting:  # direct asks not yet started fail like queued ones
            scope.cancel()
        while True:
            try:
                event, slot = actor.receive.receive_nowait()
            except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                break
            actor.pending -= 1
            if slot is not None:
                slot.fail(
                    ActorStopped(
                        f"actor {actor.name!r} stopped before handling {event.kind} "
                        f"(event {event.id}): {cause}"
                    )
                )

    def _shutdown(self, cause: str, grace: float) -> None:
        self._closing = cause
        self._ask_timer.stop()
        for cooling in self._cooling.values():
            cooling.set()
        deadline = trio.current_time() + grace
        for actor in list(self._actors.values()):
            self._close(actor, cause)
            self._cancel_inline(actor, deadline)
        self._nursery.cancel_scope.deadline = deadline


@asynccontextmanager
async def open_actor_system(
    *,
    shutdown_timeout_s: float = 10.0,
    tap: EventTap | None = None,
    tell_timeout_s: float = DEFAULT_TELL_TIMEOUT_S,
) -> AsyncIterator[ActorSystem]:
    """``async with open_actor_system() as system:``, home of every actor task. On leaving,
    queued asks fail with ActorStopped; in-flight handlers get ``shutdown_timeout_s`` to finish
    before they are cancelled (at once if the body raised or was cancelled)."""
    shutdown_timeout_s = _check_seconds("shutdown_timeout_s", shutdown_timeout_s)
    tell_timeout_s = _check_seconds("tell_timeout_s", tell_timeout_s)
    if tap is not None and not isinstance(tap, EventTap):
        raise TypeError(f"tap: expected an EventTap, got {type(tap).__name__}")
    body_error: Exception | None = None
    async with trio.open_nursery() as nursery:
        system = ActorSystem(
            nursery,
            tap if tap is not None else EventTap(),
            shutdown_timeout_s=shutdown_timeout_s,
            tell_timeout_s=tell_timeout_s,
        )
        try:
            yield system
        except Exception as exc:
            # Kept out of the nursery: re-raised below as itself, not in an ExceptionGroup.
            body_error = exc
            system._shutdown(f"the actor system shut down after {_describe(exc)}", 0.0)
        except BaseException:
            system._shutdown("the actor system was cancelled", 0.0)
            raise
        else:
            system._shutdown("the actor system shut down", shutdown_timeout_s)
    if body_error is not None:
        raise body_error
