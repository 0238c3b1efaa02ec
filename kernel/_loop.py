"""The agentic loop: infer → run tool calls → feed results back → repeat.

Provider-agnostic: anything implementing ``Provider`` (``complete`` and ``stream``) drives
it. Independent tool calls of one turn run concurrently under a bound.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, Protocol, runtime_checkable

import attrs
import trio

from ._errors import LoopDetected, RoostError
from ._frozen import frozen_builder
from ._tools import ToolCall, ToolResult, ToolSpec


@attrs.frozen
class Message:
    """One conversation entry in a provider-neutral shape."""

    role: str  # "user" | "assistant" | "tool"
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    is_error: bool = False
    taint: frozenset[str] = frozenset()

    def to_record(self) -> dict[str, Any]:
        """The dict the store keeps (``role``, ``content``, ``data``)."""
        data: dict[str, Any] = {}
        if self.tool_calls:
            data["tool_calls"] = [
                {"id": c.id, "name": c.name, "arguments": dict(c.arguments)}
                for c in self.tool_calls
            ]
        if self.tool_call_id:
            data["tool_call_id"] = self.tool_call_id
        if self.name:
            data["name"] = self.name
        if self.is_error:
            data["is_error"] = True
        if self.taint:
            data["taint"] = sorted(self.taint)
        return {"role": self.role, "content": self.content, "data": data}

    @classmethod
    def from_record(cls, role: str, content: str, data: Mapping[str, Any] | None) -> Message:
        data = data or {}
        calls = tuple(
            ToolCall(name=c["name"], arguments=c.get("arguments") or {}, id=c["id"])
            for c in data.get("tool_calls", ())
            if isinstance(c, Mapping) and "name" in c and "id" in c
        )
        return cls(
            role=role,
            content=content,
            tool_calls=calls,
            tool_call_id=data.get("tool_call_id"),
            name=data.get("name"),
            is_error=bool(data.get("is_error", False)),
            taint=frozenset(data.get("taint", ())),
        )


@attrs.frozen
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens, self.output_tokens + other.output_tokens
        )


_NO_USAGE = Usage()


@attrs.frozen
class CompletionRequest:
    """What the loop asks a provider for: the whole conversation so far."""

    agent: str
    system: str
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    model: str = ""
    parameters: Mapping[str, Any] = attrs.field(factory=dict)


@attrs.frozen
class Completion:
    """A provider's answer: text and/or tool calls; ``stop_reason``: ``end_turn``, ``tool_use``,
    ``max_tokens`` or ``input_required`` (the agent asks the user a question and waits)."""

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    stop_reason: str = "end_turn"
    usage: Usage = Usage()


@attrs.frozen
class StreamDelta:
    """A piece of a streamed completion; the last delta carries the whole ``completion``."""

    text: str = ""
    completion: Completion | None = None


@runtime_checkable
class Provider(Protocol):
    """A model. ``stream`` yields text deltas and ends with one carrying the completion."""

    name: str

    async def complete(self, request: CompletionRequest) -> Completion: ...

    def stream(self, request: CompletionRequest) -> AsyncIterator[StreamDelta]: ...


@attrs.frozen
class LoopResult:
    text: str
    messages: tuple[Message, ...]  # the new messages this run added (assistant + tool)
    turns: int
    stop_reason: str  # end_turn | input_required | max_turns | loop_detected | error
    usage: Usage = Usage()
    is_error: bool = False


ExecuteTool = Callable[[ToolCall], Awaitable[ToolResult]]

# Constructors with every field given, for the loop's (and agent runtime's) hot path.
# message_of: role, content, tool_calls, tool_call_id, name, is_error, taint
message_of = frozen_builder(Message)
request_of = frozen_builder(CompletionRequest)  # agent, system, messages, tools, model, parameters
_loop_result = frozen_builder(LoopResult)  # text, messages, turns, stop_reason, usage, is_error
NO_TAINT: frozenset[str] = frozenset()


async def run_loop(
    provider: Provider,
    request: CompletionRequest,
    execute: ExecuteTool,
    *,
    max_turns: int = 10,
    max_concurrent_tools: int = 4,
    on_token: Callable[[str], None] | None = None,
    stream: bool = False,
) -> LoopResult:
    """Run the loop until a plain answer, a question for the user, or ``max_turns``. ``execute``
    runs a tool call (failures: ``is_error`` results; ``LoopDetected`` ends the loop, saying so).
    A provider's ``RoostError`` ends it: ``stop_reason`` "error", no new messages, usage so far."""
    history = list(request.messages)
    added: list[Message] = []
    usage = _NO_USAGE
    limiter: trio.CapacityLimiter | None = None  # made when the model first calls tools

    for turn in range(1, max_turns + 1):
        req = request if turn == 1 else attrs.evolve(request, messages=tuple(history))
        try:
            if stream:
                completion = await _streamed(provider, req, on_token)
            else:
                completion = await provider.complete(req)
        except RoostError as exc:
            # The run ends with its earlier calls' usage (billed all the same), not its partial
            # messages: a history cut after a tool call is a conversation no model accepts.
            return LoopResult(f"error: {exc}", (), turn - 1, "error", usage, is_error=True)
        if completion.tool_calls:
            completion = attrs.evolve(
                completion, tool_calls=tuple(_storable_call(c) for c in completion.tool_calls)
            )
        usage = completion.usage if turn == 1 else usage + completion.usage
        assistant = message_of(
            "assistant", completion.text, completion.tool_calls, None, None, False, NO_TAINT
        )
        history.append(assistant)
        added.append(assistant)
        if not completion.tool_calls:
            return _loop_result(
                completion.text, tuple(added), turn, completion.stop_reason, usage, False
            )

        if limiter is None:
            limiter = trio.CapacityLimiter(max(1, max_concurrent_tools))
        try:
            results = await _run_calls(completion.tool_calls, execute, limiter)
        except LoopDetected as exc:
            text = f"Stopped: {exc}"
            added.append(Message("assistant", text, is_error=True))
            return LoopResult(text, tuple(added), turn, "loop_detected", usage, is_error=True)
        for call, result in zip(completion.tool_calls, results, strict=True):
            msg = Message(
                "tool",
                result.as_text(),
                tool_call_id=call.id,
                name=call.name,
                is_error=result.is_error,
                taint=result.taint,
            )
            history.append(msg)
            added.append(msg)

    text = (
        f"Stopped after {max_turns} turns without a final answer "
        "(raise limits.max_turns in agent.json if the task needs more)."
    )
    added.append(Message("assistant", text, is_error=True))
    return LoopResult(text, tuple(added), max_turns, "max_turns", usage, is_error=True)


def _storable_call(call: ToolCall) -> ToolCall:
    """``call`` as it can be stored and sent on: arguments JSON cannot hold (NaN, Infinity —
    Python's decoder accepts them from a model) make the call fail as its result instead."""
    if call.arguments_error is not None:
        return call
    try:
        json.dumps(call.arguments, allow_nan=False)
    except (TypeError, ValueError) as exc:
        return attrs.evolve(
            call,
            arguments={},
            arguments_error=(
                f"the arguments are not valid JSON ({exc}); NaN and Infinity are not JSON numbers"
            ),
        )
    return call


async def _streamed(
    provider: Provider, request: CompletionRequest, on_token: Callable[[str], None] | None
) -> Completion:
    """The completion ``provider.stream`` ends with, each text delta given to ``on_token``."""
    final: Completion | None = None
    async for delta in provider.stream(request):
        if delta.text and on_token is not None:
            on_token(delta.text)
        if delta.completion is not None:
            final = delta.completion
    if final is None:
        raise RoostError(f"provider {provider.name!r} ended its stream without a completion")
    return final


async def _run_calls(
    calls: tuple[ToolCall, ...], execute: ExecuteTool, limiter: trio.CapacityLimiter
) -> list[ToolResult]:
    if len(calls) == 1:
        return [await execute(calls[0])]
    results: list[ToolResult | None] = [None] * len(calls)
    loop_error: list[LoopDetected] = []

    async def one(i: int, call: ToolCall) -> None:
        async with limiter:
            try:
                results[i] = await execute(call)
            except LoopDetected as exc:
                loop_error.append(exc)
                results[i] = ToolResult.error(str(exc))

    async with trio.open_nursery() as nursery:
        for i, call in enumerate(calls):
            nursery.start_soon(one, i, call)
    if loop_error:
        raise loop_error[0]
    return [r if r is not None else ToolResult.error("tool produced no result") for r in results]
