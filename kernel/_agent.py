"""An agent as an actor: its mailbox receives messages and MCP tool calls.

``AGENT:MESSAGE`` runs the agentic loop for a user message (a session, stored).
``EXEC:TOOL_CALL`` carries a JSON-RPC ``tools/call`` as MCP sends it (the caller's trace on
the event, as headers carry it between processes), answered by the JSON-RPC response: the
in-memory MCP transport.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import attrs
import trio

from ._actor import DirectAsk, direct_ask_of
from ._errors import RoostError
from ._events import Event, EventKind
from ._frozen import frozen_builder
from ._ids import uuid7_hex
from ._loop import (
    NO_TAINT,
    CompletionRequest,
    LoopResult,
    Message,
    Provider,
    message_of,
    request_of,
    run_loop,
)
from ._outputs import Output, Outputs, outputs_to_json, outputs_to_mcp
from ._policy import LoopGuard, TaintTracker
from ._spans import SpanKind, start_span
from ._tools import ToolCall, ToolResult
from ._trace import TraceContext

if TYPE_CHECKING:  # pragma: no cover
    from ._kernel import Kernel

log = logging.getLogger("roost.agent")

ROUTER_PROMPT = (
    "Classify the user's request. Answer with exactly one word: 'simple' if a small, fast "
    "model can answer it well without tools, otherwise 'complex'."
)


@attrs.frozen
class AgentReply:
    """What an agent answered to one message."""

    agent: str
    text: str
    session_id: str
    trace_id: str
    is_error: bool = False
    turns: int = 0
    stop_reason: str = "end_turn"
    outputs: tuple[Output, ...] = ()
    """Artifacts the agent handed over beside ``text`` (the ``artifact`` tool)."""

    def to_dict(self) -> dict[str, Any]:
        out = attrs.asdict(self, filter=lambda a, _: a.name != "outputs")
        out["outputs"] = outputs_to_json(self.outputs)
        return out

    def to_mcp(self, **structured: Any) -> dict[str, Any]:
        """The MCP ``CallToolResult``: the text, then each output's content blocks;
        ``structuredContent``: agent, text, ``structured``, stop reason and the outputs as
        ``artifacts`` (A2A parts; a file's bytes are only in its block, named by index)."""
        content: list[dict[str, Any]] = [{"type": "text", "text": self.text}]
        body: dict[str, Any] = {
            "agent": self.agent,
            "text": self.text,
            **structured,
            "stop_reason": self.stop_reason,
        }
        if self.outputs:
            blocks, body["artifacts"] = outputs_to_mcp(self.outputs, len(content))
            content += blocks
        return {"content": content, "isError": bool(self.is_error), "structuredContent": body}


# AgentReply(agent, text, session_id, trace_id, is_error, turns, stop_reason, outputs).
_agent_reply = frozen_builder(AgentReply)


def _as_is(reply: AgentReply) -> AgentReply:
    return reply


class Conversation:
    """Per-run guards: the taint tracker and the loop guard of one conversation."""

    def __init__(self, kernel: Kernel, session_id: str | None) -> None:
        self.session_id = session_id  # the audit records' session
        self._repeats = kernel.config.kernel.loop_guard_repeats

    # Made on first use: a run that calls no tool (most agent-to-agent answers) needs none.
    @functools.cached_property
    def outputs(self) -> Outputs:
        return Outputs()

    def handed_over(self) -> tuple[Output, ...]:
        """The run's outputs so far (``Outputs.snapshot``)."""
        return self.outputs.snapshot() if "outputs" in vars(self) else ()

    @functools.cached_property
    def taint(self) -> TaintTracker:
        return TaintTracker()

    @functools.cached_property
    def loop_guard(self) -> LoopGuard:
        return LoopGuard(max_repeats=self._repeats)


@attrs.define(eq=False)
class _SessionLock:
    lock: trio.Lock = attrs.Factory(trio.Lock)
    users: int = 0


@attrs.define
class _FirstExchange:
    """A new session's first run: whether its user message is stored (or being stored)."""

    user_stored: bool = False


class AgentRuntime:
    """The actor handler of one agent."""

    def __init__(
        self,
        kernel: Kernel,
        name: str,
        provider: Provider,
        *,
        tiers: tuple[Provider, Provider] | None = None,
    ) -> None:
        self.kernel = kernel
        self.name = name
        self.provider = provider
        # (fast, complex): the fast model classifies each message and routes it.
        self.tiers = tiers
        self._runs: dict[str, Callable[[], Any]] = {}  # run id -> what stops that run
        self._session_locks: dict[tuple[str, str], _SessionLock] = {}  # by (owner, session id)

    def cancel(self, run_id: str) -> bool:
        """Stop the run ``run_id`` (a message being worked on); False if it is not running."""
        stop = self._runs.get(run_id)
        if stop is None:
            return False
        stop()
        return True

    @property
    def running(self) -> list[str]:
        return list(self._runs)

    @property
    def manifest(self) -> Any:
        return self.kernel.agents[self.name]

    async def __call__(self, ctx: Any, event: Event) -> Any:
        if event.kind == EventKind.AGENT_MESSAGE:
            payload = event.payload if isinstance(event.payload, dict) else {}
            return await self.handle_message(
                str(payload.get("message", "")),
                session_id=payload.get("session_id"),
                trace=event.trace,
                stream=bool(payload.get("stream", False)),
                run_id=payload.get("run_id"),
                new_session=bool(payload.get("new_session", False)),
                direct_ask=direct_ask_of(event),
                owner=payload.get("owner"),
            )
        if event.kind == EventKind.EXEC_TOOL_CALL:
            return await self.kernel.surface(self.name).handle(
                event.payload, direct_ask=direct_ask_of(event), carried=event.trace
            )
        raise RoostError(f"agent {self.name!r} does not handle events of kind {event.kind!r}")

    async def handle_message(
        self,
        text: str,
        *,
        session_id: str | None,
        trace: TraceContext | None,
        stream: bool = False,
        run_id: str | None = None,
        persist: bool = True,
        new_session: bool = False,
        direct_ask: DirectAsk | None = None,
        answer_as: Callable[[AgentReply], Any] | None = None,
        owner: str | None = None,
    ) -> AgentReply:
        """Run the loop on ``text``; ``trace`` already names this agent as its last hop.

        ``run_id``: ``cancel(run_id)`` stops the run (``stop_reason`` "cancelled"; its user
        message is still stored). ``new_session`` (``session_id`` made up by the caller):
        the session and its first exchange are written in one transaction when the run ends,
        fails or is cancelled (if the process dies during that run, the session was never
        stored). ``persist=False`` (a one-shot ask from another agent, which nobody can
        continue): the history stays in memory; the caller's audit record holds the call, the
        run's tool calls are audited and token usage recorded as always.
        ``direct_ask``: the run is that ask's handler in the asker's task, stopped through
        the ask's cancel scope; a cancelled run's reply reaches the asker as
        ``answer_as(reply)``. ``owner``: the principal whose session it is (``Kernel.send``)."""
        run_id = run_id or uuid7_hex()
        if persist:
            new_session = new_session or session_id is None
            # Time-ordered ids: the store's indexes grow at their end.
            session_id = session_id or uuid7_hex()
        else:
            session_id = None
        if session_id is None:  # what _run does for an in-memory run, one call less
            if trace is None:
                trace = TraceContext.new(self.name, max_depth=self.kernel.max_depth_for(self.name))
            run = self._exchange(
                message_of("user", text, (), None, None, False, NO_TAINT), None, trace, stream, None
            )
        else:
            owner = owner or self.kernel.host_principal
            run = self._run(
                text,
                session_id=session_id,
                trace=trace,
                stream=stream,
                new_session=new_session,
                owner=owner,
            )
        if direct_ask is not None:
            # Stopped through the ask, which then answers the cancelled reply.
            reply_as = answer_as or _as_is
            self._runs[run_id] = lambda: direct_ask.cancel(
                lambda: reply_as(self._failed("cancelled", "cancelled", session_id, trace))
            )
            try:
                return await run
            finally:
                self._runs.pop(run_id, None)
        with trio.CancelScope() as scope:
            self._runs[run_id] = scope.cancel
            try:
                return await run
            finally:
                self._runs.pop(run_id, None)
        # Only reached when cancel(run_id) stopped the run.
        return self._failed("cancelled", "cancelled", session_id, trace)

    def _failed(
        self, stop_reason: str, text: str, session_id: str | None, trace: Any, outputs: Any = ()
    ) -> AgentReply:
        """The reply of a run that was cancelled or whose provider failed."""
        trace_id = trace.trace_id if trace else ""
        return AgentReply(
            self.name, text, session_id or "", trace_id, True, 0, stop_reason, outputs
        )

    @asynccontextmanager
    async def _session_lock(self, session_id: tuple[str, str]) -> AsyncIterator[None]:
        entry = self._session_locks.get(session_id)
        if entry is None:
            entry = self._session_locks[session_id] = _SessionLock()
        entry.users += 1
        try:
            async with entry.lock:
                yield
        finally:
            entry.users -= 1
            if entry.users == 0:
                del self._session_locks[session_id]

    async def _run(
        self,
        text: str,
        *,
        session_id: str,
        trace: TraceContext | None,
        stream: bool,
        new_session: bool = False,
        owner: str = "local",
    ) -> AgentReply:
        """One exchange of a stored session, one at a time per session (its history in order);
        a new session's first is written in one transaction when the run ends, and its user
        message is stored whatever happens (an error, a cancellation, that write failing)."""
        async with self._session_lock((owner, session_id)):
            trace = trace or TraceContext.new(
                self.name, max_depth=self.kernel.max_depth_for(self.name)
            )
            user = Message("user", text)
            if not new_session:
                return await self._exchange(user, session_id, trace, stream, None, owner)
            first = _FirstExchange()
            try:
                return await self._exchange(user, session_id, trace, stream, first, owner)
            except BaseException:
                if not first.user_stored:
                    await self._store_user_message(first, session_id, user, owner)
                raise

    async def _exchange(
        self,
        user: Message,
        session_id: str | None,
        trace: TraceContext,
        stream: bool,
        first: _FirstExchange | None,
        owner: str = "local",
    ) -> AgentReply:
        """``_run``'s work as the run's span; ``first``: a new session's first exchange."""
        name = self.name
        span = start_span(self.kernel.tap, SpanKind.AGENT, name, trace, source=name, agent=name)
        if session_id is not None:
            span.set(session_id=session_id)
        try:
            reply = await self._converse(user, session_id, trace, stream, first, owner, span)
        except BaseException as exc:
            span.end(_failure(exc))
            raise
        span.set(stop_reason=reply.stop_reason, turns=reply.turns)
        span.end(reply.text[:500] if reply.is_error else None)
        return reply

    async def _converse(
        self,
        user: Message,
        session_id: str | None,
        trace: TraceContext,
        stream: bool,
        first: _FirstExchange | None,
        owner: str,
        span: Any,
    ) -> AgentReply:
        """``_exchange``'s work; ``span``: the run's."""
        kernel = self.kernel
        manifest = kernel.agents[self.name]  # self.manifest
        history = []
        # Made on a first tool call or tainted history: most agent-to-agent runs need none.
        conversation: Conversation | None = None
        if session_id is not None and first is None:
            stored = await kernel.store.start_exchange(
                session_id, self.name, user.to_record(), owner=owner
            )
            history = [Message.from_record(m.role, m.content, m.data) for m in stored]
            for old in history:
                if old.role == "tool" and old.taint:
                    if conversation is None:
                        conversation = Conversation(kernel, session_id)
                    conversation.taint.observe(ToolResult.text(old.content, taint=old.taint))
        request = request_of(  # agent, system, messages, tools, model, parameters
            self.name,
            manifest.system_prompt or "",
            tuple(history) + (user,),
            kernel.allowed_specs(manifest),
            manifest.model.name,
            dict(manifest.model.parameters or {}),
        )

        async def execute(call: ToolCall) -> ToolResult:
            nonlocal conversation
            if conversation is None:
                conversation = Conversation(kernel, session_id)
            call = attrs.evolve(call, caller=self.name, trace=trace)
            return await kernel.call_tool(self.name, call, conversation=conversation)

        # Also when someone watches the tokens (roost watch, the API's event stream, roost chat).
        stream = stream or kernel.tap.wants(EventKind.AGENT_TOKEN)
        on_token = None
        if stream:

            def on_token(piece: str) -> None:
                kernel.publish(
                    Event(
                        EventKind.AGENT_TOKEN,
                        self.name,
                        payload={"text": piece, "session_id": session_id},
                        trace=trace,
                    )
                )

        limits = manifest.limits
        model = manifest.model
        try:
            provider = self.provider
            tiers = self.tiers
            if span.recording:  # each model call a span of its own
                provider = _TracedProvider(provider, kernel.tap, trace, self.name)
                if tiers is not None:
                    tiers = tuple(_TracedProvider(p, kernel.tap, trace, self.name) for p in tiers)
            if tiers is not None:
                provider, model = await self._route(user.content, tiers, session_id)
                # The tier's own model and parameters, for its own provider.
                request = attrs.evolve(
                    request, model=model.name or "", parameters=dict(model.parameters or {})
                )
            result: LoopResult = await run_loop(
                provider,
                request,
                execute,
                max_turns=limits.max_turns,
                max_concurrent_tools=limits.max_concurrent_tools,
                on_token=on_token,
                stream=stream,
            )
        except RoostError as exc:
            # The provider failed: the reply says so (and the user message is stored).
            if first is not None:
                assert session_id is not None
                await self._store_user_message(first, session_id, user, owner)
            outputs = conversation.handed_over() if conversation is not None else ()
            return self._failed("error", f"error: {exc}", session_id, trace, outputs)
        if span.recording:
            span.set(
                provider=provider.name,
                model=model.name or "",
                input_tokens=result.usage.input_tokens,
                output_tokens=result.usage.output_tokens,
            )
        usage = _usage(provider, model, result.usage)
        if session_id is not None and first is not None:
            await self._finish_first_exchange(
                first, session_id, user, result.messages, usage, owner
            )
        elif session_id is not None:
            await kernel.store.finish_exchange(
                session_id,
                self.name,
                [m.to_record() for m in result.messages],
                usage=usage,
                owner=owner,
            )
        elif usage is not None:  # a one-shot run: its usage is written behind
            await self._log_usage(None, usage)
        return _agent_reply(
            self.name,
            result.text,
            session_id or "",
            trace.trace_id,
            result.is_error,
            result.turns,
            result.stop_reason,
            conversation.handed_over() if conversation is not None else (),
        )

    async def _finish_first_exchange(
        self,
        first: _FirstExchange,
        session_id: str,
        user: Message,
        messages: Sequence[Message],
        usage: Any,
        owner: str,
    ) -> None:
        """Write a new session's first exchange; if that fails, store the user message alone.
        Shielded, with no timer: a write withdrawn from the committer's queue (by a cancel or
        a deadline) would lose the only copy of the message, and one that already ran would be
        reported failed though stored. Still bounded: the queue is bounded and a batch waits
        for a lock at most ``BUSY_TIMEOUT_MS``."""
        first.user_stored = True  # from here on, this write (or its fallback) stores it
        records = [m.to_record() for m in (user, *messages)]
        try:
            await self.kernel.store.finish_exchange(
                session_id, self.name, records, usage=usage, shield=True, owner=owner
            )
        except RoostError:
            await self._store_user_message(first, session_id, user, owner)
            raise

    async def _store_user_message(
        self, first: _FirstExchange, session_id: str, user: Message, owner: str
    ) -> None:
        """Store the message of a new session's first run that did not finish. Shielded, so
        a cancelled run still records it (bounded as ``_finish_first_exchange`` explains)."""
        first.user_stored = True
        with trio.CancelScope(shield=True):
            try:
                await self.kernel.store.append_messages(
                    session_id, self.name, [user.to_record()], owner=owner
                )
            except RoostError as exc:
                log.warning(
                    "agent %s: could not store the message of session %s: %s",
                    self.name,
                    session_id,
                    exc,
                )

    async def _log_usage(self, session_id: str | None, usage: tuple[str, str, int, int]) -> None:
        """Record ``usage`` (provider, model, input, output tokens) written behind."""
        try:
            await self.kernel.store.record_usage(self.name, session_id, *usage, wait=False)
        except RoostError as exc:  # accounting lost, not the answer
            log.error("agent %s: could not record the token usage of a run: %s", self.name, exc)

    async def _route(
        self, text: str, tiers: tuple[Provider, Provider], session_id: str | None
    ) -> tuple[Provider, Any]:
        """The provider and model config for this message among ``tiers`` (fast, complex): the
        fast model classifies it (one cheap call, no tools, its tokens recorded) and keeps the
        simple ones; the rest go to the complex model."""
        fast, complex_ = tiers
        models = self.manifest.model
        fast_model = models.for_tier("fast")
        verdict = await fast.complete(
            CompletionRequest(
                agent=self.name,
                system=ROUTER_PROMPT,
                messages=(Message("user", text),),
                tools=(),
                model=fast_model.name or "",
                parameters=dict(fast_model.parameters or {}),
            )
        )
        usage = _usage(fast, fast_model, verdict.usage)
        if usage is not None:
            await self._log_usage(session_id, usage)
        simple = verdict.text.strip().lower().startswith("simple")
        self.kernel.publish(
            Event(
                EventKind.AGENT_ROUTED,
                self.name,
                payload={"tier": "fast" if simple else "complex", "verdict": verdict.text[:80]},
            )
        )
        return (fast, fast_model) if simple else (complex_, models.for_tier("complex"))


def _usage(provider: Provider, model: Any, usage: Any) -> tuple[str, str, int, int] | None:
    """What the store records of a model call's ``usage`` (None when it used no tokens)."""
    if not (usage.input_tokens or usage.output_tokens):
        return None
    return provider.name, model.name or "", usage.input_tokens, usage.output_tokens


def _failure(exc: BaseException) -> str:
    """What a span that ended by ``exc`` says went wrong."""
    if isinstance(exc, trio.Cancelled):
        return "cancelled"
    if isinstance(exc, RoostError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


class _TracedProvider:
    """``provider`` with each call a ``model`` span in ``trace``: provider, model, tokens, stop."""

    def __init__(self, provider: Provider, tap: Any, trace: TraceContext, agent: str) -> None:
        self.inner = provider
        self.name = provider.name
        self._tap = tap
        self._trace = trace
        self._agent = agent

    def _span(self, request: CompletionRequest, streamed: bool) -> Any:
        name = f"{self.name} {request.model}".strip()
        return start_span(
            self._tap,
            SpanKind.MODEL,
            name,
            self._trace.nested(),
            source=self._agent,
            agent=self._agent,
            provider=self.name,
            model=request.model,
            streamed=streamed,
        )

    @staticmethod
    def _ended(span: Any, completion: Any) -> None:
        span.set(
            input_tokens=completion.usage.input_tokens,
            output_tokens=completion.usage.output_tokens,
            stop_reason=completion.stop_reason,
            tool_calls=len(completion.tool_calls),
        )
        span.end()

    async def complete(self, request: CompletionRequest) -> Any:
        span = self._span(request, False)
        try:
            completion = await self.inner.complete(request)
        except BaseException as exc:
            span.end(_failure(exc))
            raise
        self._ended(span, completion)
        return completion

    async def stream(self, request: CompletionRequest) -> AsyncIterator[Any]:
        span = self._span(request, True)
        completion = None
        try:
            async for delta in self.inner.stream(request):
                if delta.completion is not None:
                    completion = delta.completion
                yield delta
        except BaseException as exc:
            span.end(_failure(exc))
            raise
        finally:
            if completion is not None:
                self._ended(span, completion)
            span.end("the stream ended without a completion")
