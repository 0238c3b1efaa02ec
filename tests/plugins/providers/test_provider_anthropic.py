"""Anthropic Messages API against a fake server, cross-checked with the official SDK."""

from __future__ import annotations

import anthropic
import pytest
import trio
from fake_vendor import Reply, sse
from provider_kernel import run_agent
from roost.kernel import CompletionRequest, Message, ToolCall, ToolSpec
from roost.plugins.providers._http import (
    ProviderAuthError,
    ProviderConfigError,
    ProviderResponseError,
    ProviderSettings,
    StreamInterrupted,
)
from roost.plugins.providers.anthropic import (
    build_body,
    create_anthropic,
    parse_message,
    to_anthropic_messages,
)

KEY = "sk-ant-test-0123456789"
ENV = {"ANTHROPIC_API_KEY": KEY}
SETTINGS = ProviderSettings("anthropic", "http://127.0.0.1", "ANTHROPIC_API_KEY", KEY)
FAST = {"max_retries": 0, "retry_backoff_s": 0.0}
WEATHER = ToolSpec(
    "get_weather",
    "Current weather for a city",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)

# ---- fixtures modelled on the Messages API reference ---------------------------------------


def message(*content, stop="end_turn"):
    return {
        "id": "msg_013Zva2CMHLNnXjNJJKqJ2EF",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5-20250929",
        "content": list(content),
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {
            "input_tokens": 2095,
            "output_tokens": 503,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
    }


def text(t):
    return {"type": "text", "text": t}


def tool_use(tid, name, args):
    return {"type": "tool_use", "id": tid, "name": name, "input": args}


def text_stream(*pieces):
    return sse(
        {
            "type": "message_start",
            "message": {
                **message(),
                "content": [],
                "stop_reason": None,
                "usage": {"input_tokens": 25, "output_tokens": 1},
            },
        },
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "ping"},
        *[
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": p}}
            for p in pieces
        ],
        {"type": "content_block_stop", "index": 0},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn", "stop_sequence": None},
            "usage": {"output_tokens": 15},
        },
        {"type": "message_stop"},
        named=True,
    )


def tool_stream(
    tid="toolu_01T1x1fJ34qAmk2tNTrN7Up6", name="get_weather", parts=('{"city": ', '"Paris"}')
):
    return sse(
        {
            "type": "message_start",
            "message": {
                **message(),
                "content": [],
                "stop_reason": None,
                "usage": {"input_tokens": 472, "output_tokens": 2},
            },
        },
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "text_delta", "text": "Checking."},
        },
        {"type": "content_block_stop", "index": 0},
        {
            "type": "content_block_start",
            "index": 1,
            "content_block": {"type": "tool_use", "id": tid, "name": name, "input": {}},
        },
        *[
            {
                "type": "content_block_delta",
                "index": 1,
                "delta": {"type": "input_json_delta", "partial_json": p},
            }
            for p in parts
        ],
        {"type": "content_block_stop", "index": 1},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use", "stop_sequence": None},
            "usage": {"output_tokens": 89},
        },
        {"type": "message_stop"},
        named=True,
    )


FIXTURES = [
    Reply(json=message(text("Hi! My name is Claude."))),
    Reply(
        json=message(
            text("Let me check."),
            tool_use("toolu_01A09q90qw90lq917835lq9", "get_weather", {"city": "Paris"}),
            stop="tool_use",
        )
    ),
    Reply(chunks=text_stream("Hello", "!"), content_type="text/event-stream"),
    Reply(chunks=tool_stream(), content_type="text/event-stream"),
]


def conversation():
    call = ToolCall("get_weather", {"city": "Paris"}, id="toolu_1")
    return CompletionRequest(
        agent="a",
        system="You are terse.",
        messages=(
            Message("user", "Weather in Paris?"),
            Message("assistant", "Checking.", tool_calls=(call,)),
            Message("tool", "18C and sunny", tool_call_id="toolu_1", name="get_weather"),
            Message("assistant", "It is 18C."),
            Message("user", "And now?"),
        ),
        tools=(WEATHER,),
        model="claude-test",
        parameters={"stop_sequences": ["END"], "max_tokens": 1024},
    )


SDK_MESSAGES = [
    {"role": "user", "content": "Weather in Paris?"},
    {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Checking."},
            {
                "type": "tool_use",
                "id": "toolu_1",
                "name": "get_weather",
                "input": {"city": "Paris"},
            },
        ],
    },
    {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "18C and sunny"}],
    },
    {"role": "assistant", "content": "It is 18C."},
    {"role": "user", "content": "And now?"},
]
SDK_TOOLS = [
    {
        "name": "get_weather",
        "description": "Current weather for a city",
        "input_schema": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    }
]


def provider(vendor, **settings):
    return create_anthropic(
        {"name": "claude-test"}, {"base_url": vendor.url, **FAST, **settings}, env=ENV
    )


def sdk(vendor):
    return anthropic.Anthropic(api_key=KEY, base_url=vendor.url, max_retries=0, timeout=10)


async def collect(p, request):
    deltas = [d async for d in p.stream(request)]
    return "".join(d.text for d in deltas), deltas[-1].completion


# ---- sans-I/O -------------------------------------------------------------------------------


def test_tool_results_and_a_following_user_message_share_one_user_turn():
    turns = to_anthropic_messages(
        (
            Message("user", "go"),
            Message(
                "assistant", "", tool_calls=(ToolCall("a", {}, id="t1"), ToolCall("b", {}, id="t2"))
            ),
            Message("tool", "ra", tool_call_id="t1"),
            Message("tool", "boom", tool_call_id="t2", is_error=True),
            Message("user", "and?"),
        )
    )
    assert [t["role"] for t in turns] == ["user", "assistant", "user"]
    assert turns[2]["content"] == [
        {"type": "tool_result", "tool_use_id": "t1", "content": "ra"},
        {"type": "tool_result", "tool_use_id": "t2", "content": "boom", "is_error": True},
        {"type": "text", "text": "and?"},
    ]


def test_empty_assistant_turns_are_not_sent():
    turns = to_anthropic_messages(
        (Message("user", "a"), Message("assistant", ""), Message("user", "b"))
    )
    assert turns == [
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}
    ]


def test_no_tools_key_without_tools_and_max_tokens_defaults():
    body = build_body(CompletionRequest("a", "", (Message("user", "x"),)), "m", stream=False)
    assert "tools" not in body and "system" not in body and body["max_tokens"] == 4096


def test_parse_message_with_text_and_tool_use():
    completion = parse_message(FIXTURES[1].json, SETTINGS)
    assert completion.text == "Let me check." and completion.stop_reason == "tool_use"
    assert completion.tool_calls == (
        ToolCall("get_weather", {"city": "Paris"}, id="toolu_01A09q90qw90lq917835lq9"),
    )


def test_an_error_object_is_reported():
    with pytest.raises(
        ProviderResponseError, match="anthropic reported overloaded_error: Overloaded"
    ):
        parse_message(
            {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
            SETTINGS,
        )


def test_missing_key_says_which_variable_to_set():
    with pytest.raises(
        ProviderConfigError, match="set ANTHROPIC_API_KEY or choose another provider"
    ):
        create_anthropic({"name": "claude-test"}, {}, env={})


# ---- against the fake server, beside the official SDK ---------------------------------------


async def test_roost_sends_what_the_official_sdk_sends(vendor):
    vendor.queue(Reply(json=message(text("ok"))), Reply(json=message(text("ok"))))
    client = sdk(vendor)
    await trio.to_thread.run_sync(
        lambda: client.messages.create(
            model="claude-test",
            max_tokens=1024,
            system="You are terse.",
            messages=SDK_MESSAGES,
            tools=SDK_TOOLS,
            stop_sequences=["END"],
        )
    )
    await provider(vendor).complete(conversation())
    theirs, ours = vendor.requests
    assert (ours.path, ours.json) == (theirs.path, theirs.json)
    assert ours.headers["content-type"] == theirs.headers["content-type"]
    # The SDK may authenticate with a bearer token; roost uses the documented x-api-key.
    assert KEY in (
        theirs.headers.get("x-api-key"),
        theirs.headers.get("authorization", "").removeprefix("Bearer "),
    )
    assert ours.headers["x-api-key"] == KEY and ours.headers["anthropic-version"] == "2023-06-01"


async def test_roost_streams_what_the_official_sdk_streams(vendor):
    vendor.queue(
        *[Reply(chunks=text_stream("a"), content_type="text/event-stream") for _ in range(2)]
    )
    client = sdk(vendor)

    def run_sdk():
        return list(
            client.messages.create(
                model="claude-test",
                max_tokens=1024,
                system="You are terse.",
                messages=SDK_MESSAGES,
                tools=SDK_TOOLS,
                stop_sequences=["END"],
                stream=True,
            )
        )

    await trio.to_thread.run_sync(run_sdk)
    await collect(provider(vendor), conversation())
    theirs, ours = vendor.requests
    assert (ours.path, ours.json) == (theirs.path, theirs.json)


async def test_the_official_sdk_and_roost_read_every_fixture_alike(vendor):
    client = sdk(vendor)
    request = CompletionRequest("a", "", (Message("user", "hi"),))
    for fixture in FIXTURES:
        vendor.queue(fixture, fixture)
        if fixture.chunks is None:
            msg = await trio.to_thread.run_sync(
                lambda: client.messages.create(
                    model="m", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
                )
            )
        else:

            def run_sdk():
                with client.messages.stream(
                    model="m", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
                ) as s:
                    return s.get_final_message()

            msg = await trio.to_thread.run_sync(run_sdk)
        sdk_text = "".join(b.text for b in msg.content if b.type == "text")
        sdk_calls = [(b.id, b.name, b.input) for b in msg.content if b.type == "tool_use"]
        if fixture.chunks is None:
            completion = await provider(vendor).complete(request)
        else:
            streamed, completion = await collect(provider(vendor), request)
            assert streamed == completion.text
        assert completion.text == sdk_text
        assert [(c.id, c.name, dict(c.arguments)) for c in completion.tool_calls] == sdk_calls
        assert completion.usage.output_tokens == msg.usage.output_tokens


# ---- errors -----------------------------------------------------------------------------------


async def test_401_names_the_env_var_and_never_the_key(vendor):
    vendor.queue(
        Reply(
            401,
            {
                "type": "error",
                "error": {"type": "authentication_error", "message": "invalid x-api-key"},
            },
        )
    )
    with pytest.raises(ProviderAuthError) as info:
        await provider(vendor).complete(conversation())
    assert "check ANTHROPIC_API_KEY" in str(info.value) and KEY not in str(info.value)


async def test_a_stream_cut_in_the_middle(vendor):
    vendor.queue(Reply(chunks=tool_stream()[:6], content_type="text/event-stream", cut=True))
    with pytest.raises(StreamInterrupted):
        await collect(provider(vendor), conversation())


async def test_a_stream_that_ends_cleanly_before_message_stop_is_cut(vendor):
    vendor.queue(Reply(chunks=text_stream("a")[:-2], content_type="text/event-stream"))
    with pytest.raises(StreamInterrupted, match="before message_stop"):
        await collect(provider(vendor), conversation())


async def test_an_error_event_inside_the_stream(vendor):
    chunks = text_stream("a")[:3] + sse(
        {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
        named=True,
    )
    vendor.queue(Reply(chunks=chunks, content_type="text/event-stream"))
    with pytest.raises(ProviderResponseError, match="overloaded_error"):
        await collect(provider(vendor), conversation())


async def test_streamed_tool_arguments_that_are_not_json(vendor):
    vendor.queue(
        Reply(chunks=tool_stream(parts=('{"city": ', "Paris}")), content_type="text/event-stream")
    )
    _, completion = await collect(provider(vendor), conversation())
    (call,) = completion.tool_calls
    assert call.arguments == {} and "not valid JSON" in call.arguments_error


async def test_a_streamed_tool_name_that_is_not_a_string_is_read_as_text(vendor):
    # As in a whole message's tool_use block: ToolCall.name is a str whatever the vendor sent.
    vendor.queue(Reply(chunks=tool_stream(name=5), content_type="text/event-stream"))
    _, completion = await collect(provider(vendor), conversation())
    (call,) = completion.tool_calls
    assert call.name == "5" and call.arguments == {"city": "Paris"}


async def test_malformed_json_from_the_vendor(vendor):
    vendor.queue(Reply(body=b"<html>502 Bad Gateway</html>", content_type="text/html"))
    with pytest.raises(ProviderResponseError, match="malformed JSON"):
        await provider(vendor).complete(conversation())


# ---- through the real kernel --------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
async def test_a_tool_loop_through_the_kernel_reads_then_calls_mcp_then_answers(
    vendor, tmp_path, monkeypatch, stream
):
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    if stream:
        vendor.queue(
            Reply(chunks=tool_stream("toolu_r", "read", ('{"path":', ' "notes.txt"}'))),
            Reply(chunks=tool_stream("toolu_m", "mcp_x_lookup", ('{"key": "colour"}',))),
            Reply(chunks=text_stream("The code is 4242 ", "and the colour is blue.")),
        )
    else:
        vendor.queue(
            Reply(
                json=message(tool_use("toolu_r", "read", {"path": "notes.txt"}), stop="tool_use")
            ),
            Reply(
                json=message(
                    tool_use("toolu_m", "mcp_x_lookup", {"key": "colour"}), stop="tool_use"
                )
            ),
            Reply(json=message(text("The code is 4242 and the colour is blue."))),
        )
    reply, tools, usage = await run_agent(
        tmp_path,
        "anthropic",
        {"base_url": vendor.url, **FAST},
        "what is in notes.txt?",
        stream=stream,
    )
    assert reply.text.endswith("The code is 4242 and the colour is blue.") and reply.turns == 3
    assert tools.calls == [{"key": "colour"}]
    first, second, third = (r.json for r in vendor.requests)
    assert first["system"] == "You are terse." and {t["name"] for t in first["tools"]} >= {
        "read",
        "mcp_x_lookup",
    }
    (result,) = [b for b in second["messages"][-1]["content"] if b["type"] == "tool_result"]
    assert result["tool_use_id"] == "toolu_r" and "4242" in result["content"]
    assert third["messages"][-1]["content"][-1] == {
        "type": "tool_result",
        "tool_use_id": "toolu_m",
        "content": "lookup(colour) = blue",
    }
    assert usage["input_tokens"] > 0 and usage["output_tokens"] > 0


async def test_a_model_that_calls_tools_forever_is_stopped_by_max_turns(
    vendor, tmp_path, monkeypatch
):
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    vendor.queue(
        *[
            Reply(
                json=message(
                    tool_use(f"t{i}", "read", {"path": "notes.txt", "offset": i + 1}),
                    stop="tool_use",
                )
            )
            for i in range(10)
        ]
    )
    reply, _, _ = await run_agent(
        tmp_path, "anthropic", {"base_url": vendor.url, **FAST}, "go", max_turns=2
    )
    assert reply.stop_reason == "max_turns" and len(vendor.requests) == 2


async def test_an_error_event_is_redacted_and_bounded(vendor):
    # Regression (already on d10c746): the error event's message was shown verbatim.
    event = {"type": "error", "error": {"type": "x", "message": f"{KEY} " + "y" * 50_000}}
    vendor.queue(Reply(chunks=sse(event, named=True), content_type="text/event-stream"))
    with pytest.raises(ProviderResponseError) as info:
        await collect(provider(vendor), conversation())
    text = str(info.value)
    assert "anthropic reported x: [redacted] yyy" in text and len(text) <= 1000, text[:200]
