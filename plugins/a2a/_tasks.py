"""Task lifecycle over the kernel.

A task's work is one ``kernel.send`` (session id = the context id), run in the service's
nursery or, for a blocking send, in the request's task; ``CancelTask`` cancels its scope.
Every change is stored before it is announced, nothing is acknowledged before its row is
committed (else -32603 "storage failed ...", HTTP 503). A live task keeps a bounded log of
its events: a subscriber gets the task as it stands, then follows the log (one that falls
behind gets a fresh snapshot).

A task belongs to its ``owner`` principal: another's task is "not found" (-32001), so
nothing leaks; a context id naming the owner's conversation with another agent is -32602.
Each caller holds at most ``open_per_caller`` unfinished tasks (one more: -32000, HTTP 429),
and a task waiting for input expires (stored failed) after ``input_required_ttl_s`` idle.
"""

from __future__ import annotations

import base64
import collections
import json
import logging
import math
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import attrs
import trio
from roost.kernel import (
    NO_SPAN,
    KernelAPI,
    Output,
    RecursionLimitExceeded,
    RoostError,
    SessionConflict,
    SpanKind,
    StoreError,
    TraceContext,
    number_setting,
)

from . import _inbox
from . import _models as m
from ._store import (
    PushRow,
    TaskRow,
    TaskStorageFailed,
    TaskStore,
    TaskStoreError,
    TaskStoreFull,
    TooManyPushConfigs,
)

log = logging.getLogger("roost.a2a")

EVENT_LOG_MAX = 256
CANCEL_WAIT_S = 10.0
FIRST_ROW_AFTER_S = 0.1  # a blocking send's task is stored once its run takes this long
STOPPED_WRITE_S = 5.0  # how long a stopped task's run may take to store it as failed
EXPIRE_RETRY_S = 60.0  # an expiry that failed is tried again this long after (at most the TTL)
STOPPED_REASON = (
    "this task was stopped before it finished (the roost daemon is stopping, "
    "or its request was cancelled); send the message again"
)
_ANSWER_TYPES = ("text/plain", "application/json")  # what every agent can answer in


@attrs.define(eq=False)
class LiveTask:
    """A task held in memory while it may still change."""

    task: m.Task
    agent: str
    dialect: str
    owner: str = "local"  # the principal that made it
    seq: int = 0
    log: collections.deque = attrs.field(factory=lambda: collections.deque(maxlen=EVENT_LOG_MAX))
    changed: trio.Event | None = None  # made by a follower about to wait, set by append
    scope: trio.CancelScope | None = None
    running: bool = False
    done: trio.Event = attrs.field(factory=trio.Event)
    cancel_requested: bool = False
    push: list[m.PushConfig] | None = None
    fresh_context: bool = False  # its context id was made up here: no history to load yet
    accepted_modes: tuple[str, ...] = ()  # the last send's acceptedOutputModes
    stored: bool = True  # False: a new task whose first row is not written yet (see send)
    reserved: bool = False  # holds room in the store for that first row (TaskStore.reserve)
    first_row: trio.Event | None = None  # set while one writer writes that first row
    # Storage failed during its last run (its outcome, or the agent's session, was not
    # stored): a blocking send answers with this error instead of the task.
    store_error: Exception | None = None
    unstored: bool = False  # its outcome could not be stored: it ended failed in memory only
    changing: bool = False  # a send or a cancel is storing its next state: it does not expire

    def append(self, event: m.Event) -> None:
        self.seq += 1
        self.log.append((self.seq, event))
        if self.changed is not None:
            self.changed.set()
            self.changed = None

    def events_after(self, cursor: int) -> list[m.Event] | None:
        """Events with seq > cursor; None if the bounded log no longer holds them all."""
        if cursor >= self.seq:
            return []
        if not self.log or self.log[0][0] > cursor + 1:
            return None
        return [e for s, e in self.log if s > cursor]

    @property
    def settled(self) -> bool:
        return self.task.status.state in m.SETTLED_STATES


def _page_token(row: TaskRow) -> str:
    raw = json.dumps([row.updated_at, row.id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def parse_page_token(token: str) -> tuple[float, str]:
    """Decode a ListTasks ``pageToken``; -32602 naming the field if it is not ours."""
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        ts, tid = json.loads(raw)
        ts = number_setting(ts, -math.inf)
        if ts is None or not isinstance(tid, str):
            raise ValueError
        return ts, tid
    except (ValueError, TypeError, OverflowError):
        raise m.invalid(
            "pageToken", "is not a token this server issued; pass nextPageToken from the last page"
        ) from None


@attrs.frozen
class SendOptions:
    """SendMessage configuration."""

    return_immediately: bool = False
    history_length: int | None = None
    accepted_output_modes: tuple[str, ...] = ()
    push: m.PushConfig | None = None


DEFAULT_PAGE_SIZE = 50


@attrs.frozen
class ListQuery:
    """ListTasks parameters."""

    context_id: str | None = None
    state: str | None = None
    page_size: int = DEFAULT_PAGE_SIZE
    page_token: str | None = None
    history_length: int | None = None
    updated_after: float | None = None
    include_artifacts: bool = False


class _Schedule:
    """Keys due at Trio times, each added later than the others (so the first is the
    soonest); while any are, one task in ``nursery`` hands each to ``act`` at its time."""

    def __init__(self, nursery: trio.Nursery, act: Any) -> None:
        self.due: dict[str, tuple[float, Any]] = {}  # key → (when, the value for act)
        self.running = False
        self._nursery, self._act = nursery, act

    def add(self, key: str, when: float, value: Any = None) -> None:
        self.due.pop(key, None)  # re-added last
        self.due[key] = (when, value)
        if not self.running:
            self.running = True
            self._nursery.start_soon(self._run)

    async def _run(self) -> None:
        try:
            while self.due:
                key, (when, value) = next(iter(self.due.items()))
                if when > trio.current_time():
                    await trio.sleep_until(when)
                    continue
                del self.due[key]
                await self._act(key, value)
        finally:
            self.running = False


class TaskManager:
    """Runs A2A tasks on a kernel and keeps them in a ``TaskStore``."""

    def __init__(
        self,
        kernel: KernelAPI,
        store: TaskStore,
        nursery: trio.Nursery,
        *,
        push: Any = None,
        open_per_caller: int,
        input_required_ttl_s: float = 3600.0,
    ) -> None:
        self.kernel = kernel
        self.store = store
        self.nursery = nursery
        self.push = push
        self.run_timeout_s = float(kernel.config.kernel.ask_timeout_s)
        self.open_per_caller = open_per_caller
        self.input_required_ttl_s = input_required_ttl_s
        self.live: dict[str, LiveTask] = {}
        # Each principal's unfinished tasks (ids), stored or about to be: the caller's bound.
        self._open: dict[str, set[str]] = {}
        # Expiries of tasks waiting for input, and retries of failed ones (a schedule of
        # their own keeps each in time order); blocking sends' deferred first rows (see send).
        self._waiting = _Schedule(nursery, self._expire_due)
        self._retrying = _Schedule(nursery, self._expire_due)
        self._deferred = _Schedule(nursery, self._write_deferred_row)

    async def recover(self) -> list[str]:
        """Mark tasks that were in flight when the daemon died as failed (with a reason)."""

        reason = "the roost daemon stopped while this task was running; send the message again"

        def fail(data: dict) -> dict:
            try:
                task = m.task_from_json(data["task"])
            except (m.A2AError, KeyError, TypeError):  # unreadable row: keep what we can
                return {**data, "error": reason}
            return {**data, "task": task.moved_to(m.FAILED, reason).to_json(m.V1)}

        changed = await self.store.fail_unfinished(fail, (m.SUBMITTED, m.WORKING), m.FAILED)
        if changed:
            log.warning(
                "A2A: %d task(s) in flight at the last shutdown were marked failed", len(changed)
            )
        # Tasks still waiting for input count against their owners' bound, and expire
        # ``input_required_ttl_s`` after their last change, daemon restarts or not.
        now, wall = trio.current_time(), time.time()
        for task_id, owner, state, updated_at in await self.store.unfinished():
            self._open.setdefault(owner, set()).add(task_id)
            if state in m.INTERRUPTED_STATES:
                idle = min(max(0.0, wall - updated_at), self.input_required_ttl_s)
                self._waiting.add(task_id, now + self.input_required_ttl_s - idle)
        return changed

    async def find(
        self, task_id: str, *, agent: str | None = None, owner: str
    ) -> tuple[m.Task, str, str]:
        """``owner``'s task ``task_id`` → (task, agent, dialect); -32001 if unknown, another
        agent's or another principal's (the same answer, so nothing leaks)."""
        live = self.live.get(task_id)
        if live is not None:
            task, served_by, dialect, made_by = live.task, live.agent, live.dialect, live.owner
        else:
            row = await self.store.get(task_id) if isinstance(task_id, str) and task_id else None
            if row is None:
                raise self._not_found(task_id)
            task = m.task_from_json(row.data["task"])
            served_by, dialect, made_by = row.agent, row.data.get("dialect", m.V1), row.owner
        if made_by != owner or (agent is not None and served_by != agent):
            raise self._not_found(task_id)
        return task, served_by, dialect

    @staticmethod
    def _not_found(task_id: Any) -> m.A2AError:
        return m.A2AError(
            m.TASK_NOT_FOUND,
            f"Task not found: {str(task_id)[:200]!r} (it never existed, or was evicted)",
        )

    async def _load_live(self, task_id: str, agent: str | None, owner: str) -> LiveTask:
        task, served_by, dialect = await self.find(task_id, agent=agent, owner=owner)
        return self._hold(task_id, task, served_by, dialect, owner)

    def _hold(self, task_id: str, task: m.Task, agent: str, dialect: str, owner: str) -> LiveTask:
        """The ``LiveTask`` of a stored task just read: the one another request loaded
        meanwhile, else a new idle one, kept in memory unless the task is finished."""
        live = self.live.get(task_id)
        if live is None:
            live = LiveTask(task, agent, dialect, owner)
            live.done.set()
            if not task.terminal:
                self.live[task_id] = live
        return live

    async def list(
        self, q: ListQuery, *, agent: str | None, owner: str
    ) -> tuple[list[m.Task], str, int]:
        """``owner``'s tasks (never another principal's) matching ``q``, newest first."""
        rows, total = await self.store.list(
            owner=owner,
            context_id=q.context_id,
            state=q.state,
            agent=agent,
            updated_after=q.updated_after,
            limit=q.page_size + 1,
            before=parse_page_token(q.page_token) if q.page_token else None,
            with_artifacts=q.include_artifacts,
        )
        more = len(rows) > q.page_size
        rows = rows[: q.page_size]
        tasks = [
            self.live[r.id].task if r.id in self.live else m.task_from_json(r.data["task"])
            for r in rows
        ]
        return tasks, (_page_token(rows[-1]) if more and rows else ""), total

    async def send(
        self,
        agent: str,
        message: m.Message,
        options: SendOptions,
        *,
        trace: TraceContext | None,
        dialect: str,
        task_id: str | None = None,
        owner: str,
        wait: bool = False,
    ) -> LiveTask:
        """Start (or continue) ``owner``'s task with ``message`` in the background; returns
        once it is stored and started. ``task_id``: the 0.1 shape's client-chosen id.
        ``wait`` (a blocking send): run it in the caller's task until it settles; cancelling
        the caller (the daemon stopping) cancels the run and stores the task failed.

        Nobody but the caller knows a new task's id before it settles, so its first row
        waits until it settles, its run has taken ``FIRST_ROW_AFTER_S`` (then it is listed,
        and recovered after a crash); room for the row is reserved up front, so a full store
        still refuses at once. Without that room (or with a client-chosen id) the row is
        written now without its own fsync (the settled state's commit covers it); with a
        webhook, durably at once, and the push config in the same transaction as the task's
        row (so a refused or failed config leaves no task behind, and the reverse)."""
        status, reason = self.kernel.agent_status(agent)
        if status == "stopped":
            raise m.unavailable(f"agent {agent!r} is stopped: {reason}")
        if options.accepted_output_modes and not any(
            _mode_accepts(mode, media)
            for mode in options.accepted_output_modes
            for media in _ANSWER_TYPES
        ):
            raise m.A2AError(
                m.CONTENT_TYPE_NOT_SUPPORTED,
                f"configuration.acceptedOutputModes {list(options.accepted_output_modes)[:5]} "
                "excludes everything this agent produces (text/plain, application/json); "
                "accept text/plain",
            )
        if options.push is not None:
            if self.push is None:
                raise m.push_not_supported()
            await self.push.check_url(
                options.push.url, field="configuration.taskPushNotificationConfig.url"
            )
        existing = message.task_id or task_id
        live: LiveTask | None = None
        if existing:
            try:
                live = await self._load_live(existing, agent, owner)
            except m.A2AError:  # unless the message names it, 0.1: a new task with the client's id
                if message.task_id:
                    raise
        if live is not None:
            await self._continue(live, message, options.push)
        else:
            # A context id naming owner's conversation with another agent: its run could only fail.
            if message.context_id:
                found = await self.kernel.store.session_agent(message.context_id, owner=owner)
                if found is not None and found != agent:
                    conflict = SessionConflict(message.context_id, agent, found)
                    raise m.invalid("message.contextId", str(conflict))
            lazy = wait and options.push is None
            defer = lazy and task_id is None and self.store.reserve()
            live = await self._create(
                agent,
                message,
                dialect,
                task_id,
                owner,
                durable=not lazy,
                defer=defer,
                push=options.push,
            )
        live.accepted_modes = options.accepted_output_modes
        live.running, live.done = True, trio.Event()
        if not wait:
            self.nursery.start_soon(self._run, live, message, trace)
            return live
        await self._run(live, message, trace)
        if live.store_error is not None:
            raise storage_failed(live.store_error)
        return live

    async def _create(
        self,
        agent: str,
        message: m.Message,
        dialect: str,
        task_id: str | None,
        owner: str,
        *,
        durable: bool = True,
        defer: bool = False,
        push: m.PushConfig | None = None,
    ) -> LiveTask:
        """A new task, stored now (with ``push``, its push config, in the same write), or,
        with ``defer`` (room reserved, no ``push``), by ``_store`` later; counted against
        ``owner``'s bound of unfinished tasks (refused past it). Cancelled
        while its row is written: withdrawn if still queued, else stored failed (nobody will
        run it), then Cancelled."""
        tid = task_id or m.new_id()
        fresh_context = not message.context_id
        ctx = message.context_id or m.new_id()
        message = attrs.evolve(message, task_id=tid, context_id=ctx)
        task = m.Task(tid, ctx, m.TaskStatus(m.SUBMITTED, None, m.now_iso()), (), (message,))
        mine = self._open.setdefault(owner, set())
        if len(mine) >= self.open_per_caller:
            if defer:
                self.store.release()
            raise m.A2AError(
                m.TOO_MANY_OPEN_TASKS,
                f"you have {len(mine)} unfinished tasks, the most one caller may hold "
                f"(a2a.max_open_tasks_per_caller = {self.open_per_caller}); answer or cancel "
                "the ones waiting for input (they expire after a2a.input_required_ttl_s "
                f"= {self.input_required_ttl_s:g} s), or wait for some to finish",
            )
        mine.add(tid)
        live = LiveTask(task, agent, dialect, owner, fresh_context=fresh_context, stored=False)
        if defer:
            live.reserved = True
            self.live[tid] = live
            self._deferred.add(tid, trio.current_time() + FIRST_ROW_AFTER_S, live)
            return live
        try:
            await self._store(live, task, durable=durable, shield=False, push=push)
        except BaseException as exc:
            self._unclaim(owner, tid)
            if not isinstance(exc, TaskStoreError):
                raise
            if "UNIQUE" in str(exc):
                raise m.invalid("id", f"task id {tid!r} is already in use") from None
            if isinstance(exc, TaskStoreFull):  # a passing condition, not a storage failure
                raise m.unavailable(str(exc)) from None
            raise storage_failed(exc) from None
        try:
            await trio.lowlevel.checkpoint_if_cancelled()
        except trio.Cancelled:  # while its row's batch ran: the row is committed (see _store)
            await self._store_stopped(live)
            self._unclaim(owner, tid)
            raise
        self.live[tid] = live
        return live

    async def _continue(
        self, live: LiveTask, message: m.Message, push: m.PushConfig | None = None
    ) -> None:
        """Store ``message`` as ``live``'s next turn (and ``push`` with it, in one write)."""
        task = live.task
        if task.terminal:
            raise m.A2AError(
                m.UNSUPPORTED_OPERATION,
                f"task {task.id} is {m.state_to_json(task.status.state, m.V03)} and takes no "
                "more messages; start a new task (omit taskId) in the same contextId to go on",
            )
        if live.running or task.status.state not in m.INTERRUPTED_STATES:
            raise m.A2AError(
                m.UNSUPPORTED_OPERATION,
                f"task {task.id} is still working; wait until it asks for input "
                "(or cancel it) before sending to it",
            )
        if message.context_id and message.context_id != task.context_id:
            raise m.invalid(
                "message.contextId",
                f"task {task.id} belongs to context {task.context_id!r}, "
                f"not {message.context_id!r}",
            )
        message = attrs.evolve(message, task_id=task.id, context_id=task.context_id)
        live.cancel_requested = False
        live.store_error = None
        live.unstored = False
        new = attrs.evolve(
            task,
            history=task.history + (message,),
            status=m.TaskStatus(m.SUBMITTED, None, m.now_iso()),
        )
        live.changing = True
        try:
            events: list[m.Event] = [m.StatusUpdate(task.id, task.context_id, new.status)]
            await self._commit(live, new, events, push=push)
        except TooManyPushConfigs as exc:
            raise m.invalid("configuration.taskPushNotificationConfig", str(exc)) from None
        except TaskStoreError as exc:
            raise storage_failed(exc) from None
        finally:
            live.changing = False

    async def _commit(
        self,
        live: LiveTask,
        task: m.Task,
        events: list[m.Event],
        *,
        push: m.PushConfig | None = None,
    ) -> None:
        """Store ``task`` (and ``push`` with it), then announce ``events`` (to subscribers
        and webhooks). ``working`` is not written: readers see it through ``live``, and after
        a crash a stored ``submitted`` is recovered exactly like it."""
        if task.status.state != m.WORKING:
            await self._store(live, task, push=push)
        live.task = task
        self._track(live)
        for event in events:
            live.append(event)
            if self.push is not None:
                await self.push.notify(live, event)

    async def _store(
        self,
        live: LiveTask,
        task: m.Task,
        *,
        durable: bool = True,
        shield: bool = True,
        push: m.PushConfig | None = None,
    ) -> None:
        """Write ``task`` (``live``'s next state) as its row: an update, or its first row
        (deferred, see ``send``); ``push``: a push config of the task, in the same write.
        Shielded: a state change is never lost to a cancellation (and a first row whose write
        was abandoned half-way could be committed without ``live`` knowing); only
        ``_create``'s first row, which nobody else knows yet, is not: cancelled while queued
        it is withdrawn, once its batch runs it is answered and ``_create`` sees the
        cancellation."""
        data = {"task": task.to_json(m.V1), "agent": live.agent, "dialect": live.dialect}
        row = None if push is None else _push_row(attrs.evolve(push, task_id=task.id))
        while live.first_row is not None:  # another writer is writing the first row: after it
            with trio.CancelScope(shield=True):
                await live.first_row.wait()  # bounded: set when that (shielded) write ends
        if live.stored:
            evicted = await self.store.update(
                task.id,
                state=task.status.state,
                terminal=task.terminal,
                data=data,
                shield=shield,
                push=row,
            )
        else:
            live.first_row = trio.Event()
            try:
                evicted = await self.store.insert(
                    id=task.id,
                    context_id=task.context_id,
                    agent=live.agent,
                    state=task.status.state,
                    terminal=task.terminal,
                    data=data,
                    owner=live.owner,
                    durable=durable,
                    reserved=live.reserved,
                    shield=shield,
                    push=row,
                )
                live.stored, live.reserved = True, False
                self._deferred.due.pop(task.id, None)
            finally:
                live.first_row.set()
                live.first_row = None
        if push is not None:
            live.push = None  # its webhooks are read again at the next event
        if evicted:  # they leave memory, and their files the workspaces (in the background)
            for gone in evicted:
                self.live.pop(gone, None)
            home = Path(self.kernel.config.home)
            workspaces = [manifest.workspace_dir(home) for manifest in self.kernel.agents.values()]
            self.nursery.start_soon(self._remove_files, workspaces, list(evicted))

    async def _ensure_row(self, live: LiveTask) -> None:
        """Make sure ``live``'s row exists: wait for its first row being written, or write
        the task as it stands (never over a newer state another writer is storing)."""
        if live.first_row is not None:
            with trio.CancelScope(shield=True):
                await live.first_row.wait()  # bounded: set when that (shielded) write ends
        elif not live.stored and live.running:  # (a run that ended unstored failed to write)
            await self._store(live, live.task)

    async def _status(
        self,
        live: LiveTask,
        state: str,
        text: str | None = None,
        *,
        artifacts: tuple[m.Artifact, ...] = (),
    ) -> None:
        task = live.task
        artifacts = _within_task_bound(task, artifacts)
        new = task.moved_to(state, text, artifacts)
        events: list[m.Event] = [
            m.ArtifactUpdate(task.id, task.context_id, artifact, append=False, last_chunk=True)
            for artifact in artifacts
        ]
        events.append(m.StatusUpdate(task.id, task.context_id, new.status))
        await self._commit(live, new, events)

    async def _run(self, live: LiveTask, message: m.Message, trace: TraceContext | None) -> None:
        """Run ``live`` with ``message`` as the server's span: a child of the caller's span
        (``trace``; none: a new trace), and the agent's run its child."""
        kernel = self.kernel
        if trace is not None:
            server = trace.nested()
        else:
            server = TraceContext.root(max_depth=kernel.max_depth_for(live.agent))
        span = NO_SPAN
        if kernel.tracing:
            span = kernel.start_span(
                SpanKind.A2A_SERVER,
                f"A2A {live.agent}",
                server,
                source="a2a",
                agent=live.agent,
                task_id=live.task.id,
                context_id=live.task.context_id,
                principal=live.owner,
            )
        try:
            await self._run_task(live, message, server)
        finally:
            if span.recording:
                status = live.task.status
                state = m.state_to_json(status.state, m.V03)
                failed = status.state in (m.FAILED, m.REJECTED, m.CANCELED) or not live.settled
                span.set(state=state)
                reason = status.message.text()[:500] if status.message is not None else None
                span.end((reason or f"task {state}") if failed else None)

    async def _run_task(self, live: LiveTask, message: m.Message, trace: TraceContext) -> None:
        task = live.task
        state, reason = m.FAILED, "the agent did not answer"
        artifacts: tuple[m.Artifact, ...] = ()
        try:
            with trio.CancelScope() as scope:
                live.scope = scope
                if live.cancel_requested:
                    scope.cancel()
                await self._status(live, m.WORKING)
                text = await self._agent_text(live, message)
                try:
                    fresh, live.fresh_context = live.fresh_context, False
                    reply = await self.kernel.send(
                        live.agent,
                        text,
                        session_id=task.context_id,
                        trace=trace,
                        timeout=self.run_timeout_s,
                        new_session=fresh,
                        principal=live.owner,
                    )
                except RecursionLimitExceeded as exc:
                    reason = str(exc)
                except StoreError as exc:  # the agent's session could not be stored
                    live.store_error = exc
                    reason = str(exc)
                except RoostError as exc:
                    reason = f"{exc.code}: {exc}"
                except Exception as exc:  # the agent must never take the A2A service down
                    log.exception("A2A task %s failed", task.id)
                    reason = f"internal error: {type(exc).__name__}"
                else:
                    # What the agent handed over (the artifact tool) is kept when it answers, asks
                    # or fails; a cancelled run's (like its answer) is not.
                    handed = tuple(_artifact(o) for o in reply.outputs)
                    answer: tuple[m.Artifact, ...] = ()
                    if reply.stop_reason == "cancelled":
                        state, reason, handed = m.CANCELED, None, ()
                    elif reply.stop_reason == "input_required":
                        state, reason = m.INPUT_REQUIRED, reply.text
                    elif reply.is_error:
                        state, reason = m.FAILED, reply.text
                    else:
                        state, reason = m.COMPLETED, None
                        answer = (
                            m.Artifact(m.new_id(), (m.Part(text=reply.text),), name="response"),
                        )
                    # What the client said it cannot take is left out (the answer stays: the
                    # send was refused up front unless the client accepts text or JSON).
                    artifacts = _accepted((*answer, *handed), live.accepted_modes, keep=answer)
            if scope.cancelled_caught or live.cancel_requested:
                state, reason, artifacts = m.CANCELED, None, ()
            await self._status(live, state, reason, artifacts=artifacts)
        except Exception as exc:
            log.error(
                "A2A task %s: could not store its outcome: %s",
                task.id,
                exc,
                exc_info=not isinstance(exc, TaskStorageFailed),
            )
            # It ends failed in memory and its followers are told, so nobody waits for it; a
            # blocking send fails with exc. A stored one is failed again at the next start.
            live.store_error = exc
            live.unstored = True
            text = f"{storage_failed(exc).message}; this task's outcome was not kept"
            live.task = failed = live.task.moved_to(m.FAILED, text)
            self._track(live)
            live.append(m.StatusUpdate(task.id, task.context_id, failed.status))
        except BaseException:
            # Cancelled from outside: its request was cancelled (send(wait=True)) or the service
            # is stopping. Left "working", the task would never change again: store it failed.
            if not live.settled:
                await self._store_stopped(live)
            raise
        finally:
            if not live.stored:  # its first row could not be written (logged above)
                self._deferred.due.pop(task.id, None)
                if live.reserved:
                    live.reserved = False
                    self.store.release()
            live.scope = None
            live.running = False
            live.done.set()
            # A stored task that ended failed only in memory (its outcome could not be
            # stored) stays here, so readers see how it ended rather than its stale row.
            if live.task.terminal and (not live.unstored or not live.stored):
                self.live.pop(task.id, None)

    async def _store_stopped(self, live: LiveTask) -> None:
        """Store ``live`` failed (``STOPPED_REASON``): its request or the service was
        cancelled before it settled. Shielded, for at most ``STOPPED_WRITE_S``; failures logged."""
        with trio.CancelScope(shield=True, deadline=trio.current_time() + STOPPED_WRITE_S):
            try:
                await self._status(live, m.FAILED, STOPPED_REASON)
            except Exception:
                log.exception("A2A task %s: could not record that it was stopped", live.task.id)

    # ---- bounds: open tasks per caller, waiting for input -------------------------------------
    def _unclaim(self, owner: str, task_id: str) -> None:
        mine = self._open.get(owner)
        if mine is not None:
            mine.discard(task_id)
            if not mine:
                del self._open[owner]

    def _track(self, live: LiveTask) -> None:
        """After ``live`` changed: a finished task no longer counts against its owner, one
        waiting for input expires ``input_required_ttl_s`` from now, any other does not."""
        task_id = live.task.id
        if live.task.status.state in m.INTERRUPTED_STATES:
            self._waiting.add(task_id, trio.current_time() + self.input_required_ttl_s)
        else:
            self._waiting.due.pop(task_id, None)
            if live.task.terminal:
                self._unclaim(live.owner, task_id)

    async def _expire_due(self, task_id: str, seq: int | None) -> None:
        """Expire ``task_id``; a retry (``seq``: the task's then) not if it changed since."""
        live = self.live.get(task_id)
        if seq is not None and live is not None and live.seq != seq:
            return  # its change was tracked (_track): waiting for input again, it is due anew
        try:
            await self._expire(task_id)
        except Exception:
            retry = min(self.input_required_ttl_s, EXPIRE_RETRY_S)
            log.exception("A2A task %s: could not expire it; trying again in %g s", task_id, retry)
            if task_id not in self._waiting.due:
                live = self.live.get(task_id)
                when = trio.current_time() + retry
                self._retrying.add(task_id, when, live.seq if live is not None else 0)

    async def _expire(self, task_id: str) -> None:
        """Fail the task ``task_id`` if it still waits for input: stored, then announced."""
        live = self.live.get(task_id)
        if live is None:
            row = await self.store.get(task_id)
            if row is None or row.terminal:
                return
            try:
                task = m.task_from_json(row.data["task"])
            except (m.A2AError, KeyError, TypeError) as exc:  # trying again would not help
                log.error(
                    "A2A task %s: its stored row is unreadable (%s); it cannot expire", task_id, exc
                )
                return
            live = self._hold(task_id, task, row.agent, row.data.get("dialect", m.V1), row.owner)
        if live.running or live.task.status.state not in m.INTERRUPTED_STATES:
            return
        if live.changing:  # a send or cancel is storing its next state; if that fails, later
            self._waiting.add(task_id, trio.current_time() + self.input_required_ttl_s)
            return
        live.running, live.done = True, trio.Event()  # a send or cancel meanwhile waits for this
        try:
            await self._status(
                live,
                m.FAILED,
                "this task waited for input longer than a2a.input_required_ttl_s "
                f"({self.input_required_ttl_s:g} s) and expired; send your answer as "
                "a new message (in the same contextId to keep the conversation)",
            )
        finally:
            live.running = False
            live.done.set()
        if live.task.terminal:
            self.live.pop(task_id, None)

    @staticmethod
    async def _remove_files(workspaces: list[Path], task_ids: list[str]) -> None:
        try:
            await trio.to_thread.run_sync(_inbox.remove_task_folders, workspaces, task_ids)
        except Exception:
            log.exception("A2A: could not remove the files of %d evicted task(s)", len(task_ids))

    async def _agent_text(self, live: LiveTask, message: m.Message) -> str:
        """The message as the agent reads it: a file with bytes is saved in its workspace
        (``_inbox``) and named there, for its tools to open; anything else is inline."""
        if not any(p.raw is not None for p in message.parts):
            return message.text()
        try:
            workspace = self.kernel.workspace_for(self.kernel.agents[live.agent])
            saved = await trio.to_thread.run_sync(
                _inbox.save_files, workspace, live.task.id, message.parts
            )
        except (OSError, KeyError) as exc:
            log.warning(
                "A2A task %s: could not save its files in the workspace: %s", live.task.id, exc
            )
            problem = f"(not saved: {getattr(exc, 'strerror', None) or exc})"
            saved = [problem if p.raw is not None else None for p in message.parts]
        pieces = []
        for part, where in zip(message.parts, saved, strict=True):
            if where is None:
                pieces.append(part.as_text())
            elif where.startswith("("):  # why it was not saved
                pieces.append(f"[{part.file_label()} {where}]")
            else:
                pieces.append(f"[{part.file_label()} saved in your workspace as {where}]")
        return "\n".join(pieces)

    async def _write_deferred_row(self, task_id: str, live: LiveTask) -> None:
        try:
            await self._ensure_row(live)
        except Exception:  # the run's own write at its end tries again
            log.exception("A2A task %s: could not store it while it runs", task_id)

    def follow(self, live: LiveTask) -> AsyncIterator[m.Event]:
        """The task as it stands at this call, then every later event until it settles."""
        return self._follow(live, live.task, live.seq)

    async def _follow(
        self, live: LiveTask, snapshot: m.Task, cursor: int
    ) -> AsyncIterator[m.Event]:
        yield snapshot
        with trio.move_on_after(self.run_timeout_s + 30):
            while True:
                pending = live.events_after(cursor)
                if pending is None:  # fell behind the bounded log: resynchronise
                    cursor = live.seq
                    yield live.task
                    continue
                for event in pending:
                    cursor += 1
                    yield event
                    if isinstance(event, m.StatusUpdate) and event.final:
                        return
                if cursor >= live.seq:
                    if not live.running and live.settled:
                        return
                    if live.changed is None:
                        live.changed = trio.Event()
                    await live.changed.wait()

    async def subscribe(self, task_id: str, *, agent: str | None, owner: str) -> LiveTask:
        live = await self._load_live(task_id, agent, owner)
        if live.task.terminal:
            raise m.A2AError(
                m.UNSUPPORTED_OPERATION,
                f"Task {task_id} is in terminal state: {live.task.status.state}; "
                "use GetTask to read it",
            )
        return live

    async def cancel(self, task_id: str, *, agent: str | None, owner: str) -> m.Task:
        live = await self._load_live(task_id, agent, owner)
        if live.task.terminal:
            raise m.A2AError(
                m.TASK_NOT_CANCELABLE,
                f"Task cannot be canceled: {task_id} is already "
                f"{m.state_to_json(live.task.status.state, m.V03)}",
            )
        live.cancel_requested = True
        if live.running:
            if live.scope is not None:
                live.scope.cancel()
            with trio.move_on_after(CANCEL_WAIT_S):
                await live.done.wait()
        else:
            live.changing = True
            try:
                await self._status(live, m.CANCELED)
            finally:
                live.changing = False
            self.live.pop(task_id, None)
        return live.task

    async def _push_for(self, task_id: str, agent: str | None, owner: str) -> Any:
        """The push dispatcher, once ``owner``'s task ``task_id`` is found (else -32001)."""
        if self.push is None:
            raise m.push_not_supported()
        await self.find(task_id, agent=agent, owner=owner)
        return self.push

    async def set_push(
        self, config: m.PushConfig, *, agent: str | None, owner: str
    ) -> m.PushConfig:
        push = await self._push_for(config.task_id, agent, owner)
        await push.check_url(config.url, field="url")
        live = self.live.get(config.task_id)
        if live is not None:  # the config's row refers to the task's
            await self._ensure_row(live)
        try:
            await self.store.put_push_config(config.task_id, *_push_row(config))
        except TooManyPushConfigs as exc:
            raise m.invalid("taskId", str(exc)) from None
        except TaskStoreError as exc:
            raise storage_failed(exc) from None
        live = self.live.get(config.task_id)
        if live is not None:
            live.push = None  # reload on next event
        return config

    async def push_configs(
        self, task_id: str, *, agent: str | None, owner: str
    ) -> list[m.PushConfig]:
        return await (await self._push_for(task_id, agent, owner)).configs(task_id)

    async def delete_push(
        self, task_id: str, config_id: str, *, agent: str | None, owner: str
    ) -> None:
        await self._push_for(task_id, agent, owner)
        await self.store.delete_push_config(task_id, config_id)  # idempotent (spec 3.1.10)
        live = self.live.get(task_id)
        if live is not None:
            live.push = None


def _push_row(config: m.PushConfig) -> PushRow:
    """``config`` as the push-config store keeps it: the 1.0 JSON with its credentials
    (under ``authentication``, and again at the top, as every version has written it)."""
    data = config.to_json(m.V1, credentials=True) | {"credentials": config.credentials}
    return config.id, data


def storage_failed(exc: BaseException) -> m.A2AError:
    """-32603 (HTTP 503): storage failed (``exc`` says where and why); nothing was kept."""
    text = str(exc)
    return m.unavailable(text if text.startswith("storage failed") else f"storage failed: {text}")


def iso_to_epoch(value: str, field: str) -> float:
    """ISO 8601 timestamp → seconds since the epoch (-32602 naming ``field`` if malformed)."""
    import datetime as dt

    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except (ValueError, AttributeError):
        raise m.invalid(
            field, f"must be an ISO 8601 timestamp such as 2026-01-02T03:04:05.000Z, got {value!r}"
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    return parsed.timestamp()


def _media_type(part: m.Part) -> str:
    if part.media_type:
        return part.media_type.split(";")[0].strip().lower()
    if part.text is not None:
        return "text/plain"
    return "application/json" if part.has_data else "application/octet-stream"


def _mode_accepts(mode: str, media: str) -> bool:
    mode = mode.split(";")[0].strip().lower()
    if mode in ("*/*", "*", media):
        return True
    if mode == "text":  # the 0.1 shape's mode names
        return media.startswith("text/")
    if mode in ("data", "json"):
        return media == "application/json"
    if mode == "file":
        return not media.startswith("text/") and media != "application/json"
    return mode.endswith("/*") and media.startswith(mode[:-1])


def _accepted(
    artifacts: tuple[m.Artifact, ...], modes: tuple[str, ...], *, keep: tuple[m.Artifact, ...]
) -> tuple[m.Artifact, ...]:
    """``artifacts`` without the parts none of ``modes`` (acceptedOutputModes) accepts;
    an artifact left with no parts is dropped; the ones in ``keep`` (the answer) stay whole."""
    if not modes:
        return artifacts
    out = []
    for artifact in artifacts:
        if any(artifact is k for k in keep):
            out.append(artifact)
            continue
        parts = tuple(
            p for p in artifact.parts if any(_mode_accepts(mode, _media_type(p)) for mode in modes)
        )
        if parts:
            out.append(
                artifact
                if len(parts) == len(artifact.parts)
                else attrs.evolve(artifact, parts=parts)
            )
    return tuple(out)


MAX_TASK_FILE_BYTES = 16 * 1024 * 1024
"""Files one task may keep over all its turns (each turn hands over at most 6 MiB)."""


def _file_bytes(artifacts: tuple[m.Artifact, ...]) -> int:
    return sum(len(p.raw) for a in artifacts for p in a.parts if p.raw is not None)


def _within_task_bound(task: m.Task, new: tuple[m.Artifact, ...]) -> tuple[m.Artifact, ...]:
    """``new`` artifacts, with files past ``MAX_TASK_FILE_BYTES`` for the task replaced by a
    note saying so (a task asked for input again and again must not grow without bound)."""
    if not new:
        return new
    room = MAX_TASK_FILE_BYTES - _file_bytes(task.artifacts)
    if _file_bytes(new) <= room:
        return new
    out = []
    for artifact in new:
        parts = []
        for part in artifact.parts:
            if part.raw is not None and len(part.raw) > room:
                name = f" {part.filename}" if part.filename else ""
                limit = MAX_TASK_FILE_BYTES // (1024 * 1024)
                note = f"[file{name} left out: this task's files may total at most {limit} MiB]"
                parts.append(m.Part(text=note))
                continue
            room -= len(part.raw or b"")
            parts.append(part)
        out.append(attrs.evolve(artifact, parts=tuple(parts)))
    return tuple(out)


def _artifact(output: Output) -> m.Artifact:
    """An agent's output (the ``artifact`` tool) as an A2A artifact."""
    parts = tuple(m.Part.from_output(p) for p in output.parts)
    return m.Artifact(output.id, parts, name=output.name, description=output.description)
