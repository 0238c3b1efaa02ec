"""The offline scripted provider: rules, steps, templates and questions."""

from __future__ import annotations

from roost.kernel import CompletionRequest, Message, ToolResult, run_loop
from roost.plugins.providers.scripted import ScriptedProvider, roost_providers

SCRIPT = {
    "rules": [
        {
            "match": "(?i)review",
            "steps": [
                {"tool": "read", "arguments": {"path": "{message}"}},
                {
                    "parallel": [
                        {"tool": "a", "arguments": {"q": "1"}},
                        {"tool": "b", "arguments": {"q": "2"}},
                    ]
                },
            ],
            "reply": "first={result[0]} last={result} all={results}",
        },
        {"match": "(?i)which", "ask": "Which file?", "reply": "you chose {answer} for {message}"},
    ],
    "default_reply": "echo: {message} from {agent}",
}


def req(*messages):
    return CompletionRequest(agent="bot", system="", messages=tuple(messages))


async def tool(call):
    return ToolResult.text(f"{call.name}({','.join(str(v) for v in call.arguments.values())})")


async def test_default_reply_uses_the_template():
    result = await run_loop(ScriptedProvider(SCRIPT), req(Message("user", "hello")), tool)
    assert result.text == "echo: hello from bot"


async def test_steps_run_in_order_and_parallel_steps_together():
    result = await run_loop(ScriptedProvider(SCRIPT), req(Message("user", "review x.md")), tool)
    assert result.turns == 3
    calls = [c.name for m in result.messages for c in m.tool_calls]
    assert calls == ["read", "a", "b"]
    assert result.text == "first=read(review x.md) last=b(2) all=read(review x.md)\na(1)\nb(2)"


async def test_ask_returns_input_required_and_the_answer_continues_the_rule():
    provider = ScriptedProvider(SCRIPT)
    first = await run_loop(provider, req(Message("user", "which one?")), tool)
    assert first.stop_reason == "input_required" and first.text == "Which file?"
    history = (Message("user", "which one?"), *first.messages, Message("user", "notes.txt"))
    second = await run_loop(provider, req(*history), tool)
    assert second.text == "you chose notes.txt for which one?"


async def test_streaming_yields_the_words_then_the_completion():
    provider = ScriptedProvider(SCRIPT)
    deltas = [d async for d in provider.stream(req(Message("user", "hi there")))]
    assert "".join(d.text for d in deltas) == "echo: hi there from bot"
    assert deltas[-1].completion is not None


def test_registers_as_a_provider_plugin():
    (desc,) = roost_providers()
    assert desc.name == "scripted"
    assert isinstance(desc.factory({"script": SCRIPT}), ScriptedProvider)


async def test_a_result_index_not_in_ascii_digits_stays_text():
    # Regression: the index pattern \d took "١" (result 1), and int() of 5,000 digits raised.
    script = {"default_reply": "{result[١]}|{result[9999999999]}|{result[" + "9" * 5000 + "]}"}
    result = await run_loop(ScriptedProvider(script), req(Message("user", "hi")), tool)
    assert result.text == "{result[١]}|{result[9999999999]}|{result[" + "9" * 5000 + "]}"
