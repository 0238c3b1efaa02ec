"""The agentic loop, driven by a fake provider and fake tools."""

from __future__ import annotations

import trio
from roost.kernel import (
    Completion,
    CompletionRequest,
    LoopDetected,
    Message,
    StreamDelta,
    ToolCall,
    ToolResult,
    run_loop,
)


class ListProvider:
    """Answers with a fixed list of completions, one per turn, and records requests."""

    name = "list"

    def __init__(self, completions):
        self.completions = list(completions)
        self.requests = []

    async def complete(self, request):
        self.requests.append(request)
        return self.completions.pop(0)

    async def stream(self, request):
        completion = await self.complete(request)
        for word in completion.text.split(" "):
            yield StreamDelta(text=word + " ")
        yield StreamDelta(completion=completion)


def request(text="hi"):
    return CompletionRequest(agent="a", system="sys", messages=(Message("user", text),))


async def echo_tool(call):
    return ToolResult.text(f"{call.name}:{call.arguments.get('x')}")


async def test_plain_answer_ends_the_loop_in_one_turn():
    provider = ListProvider([Completion(text="hello")])
    result = await run_loop(provider, request(), echo_tool)
    assert (result.text, result.turns, result.stop_reason) == ("hello", 1, "end_turn")
    assert [m.role for m in result.messages] == ["assistant"]


async def test_tool_results_are_fed_back_to_the_provider():
    provider = ListProvider(
        [
            Completion(tool_calls=(ToolCall("t", {"x": 1}, id="c1"),), stop_reason="tool_use"),
            Completion(text="done"),
        ]
    )
    result = await run_loop(provider, request(), echo_tool)
    assert result.text == "done" and result.turns == 2
    second = provider.requests[1].messages
    assert [m.role for m in second] == ["user", "assistant", "tool"]
    assert second[2].tool_call_id == "c1" and second[2].content == "t:1"


async def test_independent_calls_run_concurrently_within_the_bound(autojump_clock):
    running = 0
    peak = 0

    async def slow(call):
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await trio.sleep(0.01)
        running -= 1
        return ToolResult.text(str(call.arguments["x"]))

    calls = tuple(ToolCall("t", {"x": i}, id=f"c{i}") for i in range(6))
    provider = ListProvider([Completion(tool_calls=calls), Completion(text="ok")])
    result = await run_loop(provider, request(), slow, max_concurrent_tools=3)
    assert peak == 3
    # results keep the order of the calls, whatever order they finished in
    assert [m.content for m in result.messages if m.role == "tool"] == [str(i) for i in range(6)]


async def test_max_turns_stops_a_model_that_calls_tools_forever():
    forever = [Completion(tool_calls=(ToolCall("t", {"x": i}),)) for i in range(10)]
    result = await run_loop(ListProvider(forever), request(), echo_tool, max_turns=3)
    assert result.stop_reason == "max_turns" and result.is_error
    assert "max_turns" in result.text


async def test_loop_detected_ends_the_loop_with_the_reason():
    async def guard(call):
        raise LoopDetected("the same call repeated 4 times")

    provider = ListProvider([Completion(tool_calls=(ToolCall("t", {}),)), Completion(text="never")])
    result = await run_loop(provider, request(), guard)
    assert result.stop_reason == "loop_detected"
    assert "repeated 4 times" in result.text


async def test_streaming_reports_tokens_and_returns_the_completion():
    tokens = []
    provider = ListProvider([Completion(text="one two three")])
    result = await run_loop(provider, request(), echo_tool, stream=True, on_token=tokens.append)
    assert "".join(tokens).split() == ["one", "two", "three"]
    assert result.text == "one two three"


def test_message_record_round_trip_keeps_calls_and_taint():
    msg = Message("assistant", "x", tool_calls=(ToolCall("read", {"path": "a"}, id="c9"),))
    rec = msg.to_record()
    back = Message.from_record(rec["role"], rec["content"], rec["data"])
    assert back.tool_calls[0].name == "read" and back.tool_calls[0].id == "c9"
    tool = Message("tool", "data", tool_call_id="c9", name="read", taint=frozenset({"untrusted"}))
    rec = tool.to_record()
    assert Message.from_record(rec["role"], rec["content"], rec["data"]).taint == {"untrusted"}
