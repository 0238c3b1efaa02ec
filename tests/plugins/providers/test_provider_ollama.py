"""Ollama /api/chat against a fake server, beside the official ollama client."""

from __future__ import annotations

import ollama
import pytest
import trio
from fake_vendor import Reply, ndjson
from provider_kernel import run_agent
from roost.kernel import CompletionRequest, Message, ToolCall, ToolSpec
from roost.plugins.providers._http import (
    ProviderResponseError,
    ProviderUnavailable,
    StreamInterrupted,
)
from roost.plugins.providers.ollama import create_ollama

FAST = {"max_retries": 0, "retry_backoff_s": 0.0}
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
WEATHER = ToolSpec("get_weather", "Current weather for a city", SCHEMA)

# ---- fixtures modelled on Ollama's API reference (docs/api.md, /api/chat) -------------------


def final(content="", calls=(), reason="stop"):
    message = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [{"function": {"name": n, "arguments": a}} for n, a in calls]
    return {
        "model": "llama3.2",
        "created_at": "2023-12-12T14:13:43.416799Z",
        "message": message,
        "done": True,
        "done_reason": reason,
        "total_duration": 5191566416,
        "load_duration": 2154458,
        "prompt_eval_count": 26,
        "prompt_eval_duration": 383809000,
        "eval_count": 298,
        "eval_duration": 4799921000,
    }


def part(content):
    return {
        "model": "llama3.2",
        "created_at": "2023-08-04T08:52:19.385406455-07:00",
        "message": {"role": "assistant", "content": content},
        "done": False,
    }


FIXTURES = [
    Reply(json=final("Hello! How are you today?")),
    Reply(json=final(calls=[("get_weather", {"city": "Toronto"})])),
    Reply(chunks=ndjson(part("The"), part(" sky"), final()), content_type="application/x-ndjson"),
    Reply(
        chunks=ndjson(
            part(""),
            {
                **part(""),
                "message": {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [
                        {"function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}
                    ],
                },
            },
            final(),
        ),
        content_type="application/x-ndjson",
    ),
]


def conversation():
    call = ToolCall("get_weather", {"city": "Paris"}, id="c1")
    return CompletionRequest(
        agent="a",
        system="You are terse.",
        messages=(
            Message("user", "Weather?"),
            Message("assistant", "", tool_calls=(call,)),
            Message("tool", "18C", tool_call_id="c1", name="get_weather"),
        ),
        tools=(WEATHER,),
        parameters={"temperature": 0.2, "num_ctx": 8192},
    )


SDK_MESSAGES = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Weather?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}],
    },
    {"role": "tool", "content": "18C", "tool_name": "get_weather"},
]
SDK_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city",
            "parameters": SCHEMA,
        },
    }
]


def provider(vendor, **settings):
    return create_ollama({"name": "llama3.2"}, {"base_url": vendor.url, **FAST, **settings}, env={})


async def collect(p, request):
    deltas = [d async for d in p.stream(request)]
    return "".join(d.text for d in deltas), deltas[-1].completion


@pytest.mark.parametrize("stream", [False, True])
async def test_roost_sends_what_the_official_client_sends(vendor, stream):
    reply = FIXTURES[2] if stream else FIXTURES[0]
    vendor.queue(reply, reply)
    client = ollama.Client(host=vendor.url, timeout=10)

    def run_sdk():
        r = client.chat(
            model="llama3.2",
            messages=SDK_MESSAGES,
            tools=SDK_TOOLS,
            options={"temperature": 0.2, "num_ctx": 8192},
            stream=stream,
        )
        return list(r) if stream else r

    await trio.to_thread.run_sync(run_sdk)
    if stream:
        await collect(provider(vendor), conversation())
    else:
        await provider(vendor).complete(conversation())
    theirs, ours = vendor.requests
    assert ours.path == theirs.path == "/api/chat"
    assert ours.json["messages"] == theirs.json["messages"], (
        ours.json["messages"],
        theirs.json["messages"],
    )
    assert ours.json == theirs.json


async def test_the_official_client_and_roost_read_every_fixture_alike(vendor):
    client = ollama.Client(host=vendor.url, timeout=10)
    request = CompletionRequest("a", "", (Message("user", "hi"),))
    for fixture in FIXTURES:
        vendor.queue(fixture, fixture)
        streaming = fixture.chunks is not None
        chunks = await trio.to_thread.run_sync(
            lambda s=streaming: (
                list(
                    client.chat(
                        model="llama3.2", messages=[{"role": "user", "content": "hi"}], stream=True
                    )
                )
                if s
                else [client.chat(model="llama3.2", messages=[{"role": "user", "content": "hi"}])]
            )
        )
        if streaming:
            _, completion = await collect(provider(vendor), request)
        else:
            completion = await provider(vendor).complete(request)
        assert completion.text == "".join(c.message.content or "" for c in chunks)
        sdk_calls = [
            (t.function.name, dict(t.function.arguments))
            for c in chunks
            for t in c.message.tool_calls or ()
        ]
        assert [(c.name, dict(c.arguments)) for c in completion.tool_calls] == sdk_calls
        assert completion.usage.output_tokens == chunks[-1].eval_count


def test_max_tokens_becomes_num_predict_and_keep_alive_stays_on_top():
    from roost.plugins.providers.ollama import build_body

    body = build_body(
        CompletionRequest(
            "a", "", (Message("user", "x"),), parameters={"max_tokens": 50, "keep_alive": "5m"}
        ),
        "m",
        stream=False,
    )
    assert (
        body["options"] == {"num_predict": 50}
        and body["keep_alive"] == "5m"
        and body["stream"] is False
        and "tools" not in body
    )


async def test_an_error_line_in_the_stream(vendor):
    vendor.queue(
        Reply(chunks=ndjson(part("a"), {"error": "model runner has unexpectedly stopped"}))
    )
    with pytest.raises(ProviderResponseError, match="model runner has unexpectedly stopped"):
        await collect(provider(vendor), conversation())


async def test_a_line_that_is_not_json(vendor):
    vendor.queue(Reply(chunks=[b'{"model": "llama3.2", "message": \n']))
    with pytest.raises(ProviderResponseError, match="malformed stream .* not JSON"):
        await collect(provider(vendor), conversation())


async def test_a_line_that_is_not_json_quoting_the_key_at_the_cut_shows_no_part_of_it(vendor):
    # Regression: the line was quoted cut to 200 characters before the key was redacted, so
    # a hosted server echoing the key across the cut left its head in the error.
    key = "ok-echo-0123456789abcdef"
    line = "<pre>Bearer " + "h" * (190 - 1 - 12) + key + "</pre>\n"  # repr adds one "'"
    vendor.queue(Reply(chunks=[line.encode()], content_type="application/x-ndjson"))
    p = create_ollama(
        {"name": "llama3.2"},
        {"base_url": vendor.url, "api_key_env": "OLLAMA_API_KEY", **FAST},
        env={"OLLAMA_API_KEY": key},
    )
    with pytest.raises(ProviderResponseError, match="not JSON") as info:
        await collect(p, conversation())
    assert "<pre>Bearer hhh" in str(info.value) and key[:8] not in str(info.value), str(info.value)[
        -80:
    ]


async def test_a_stream_cut_in_the_middle(vendor):
    vendor.queue(Reply(chunks=ndjson(part("a"))[:1] + [b'{"model": "llama3.2", "mess'], cut=True))
    with pytest.raises(StreamInterrupted):
        await collect(provider(vendor), conversation())


async def test_a_stream_without_done_is_cut(vendor):
    vendor.queue(Reply(chunks=ndjson(part("a"), part("b"))))
    with pytest.raises(StreamInterrupted, match="done=true"):
        await collect(provider(vendor), conversation())


async def test_connection_refused_says_so(closed_port):
    p = create_ollama(
        {"name": "llama3.2"}, {"base_url": f"http://127.0.0.1:{closed_port}", **FAST}, env={}
    )
    with pytest.raises(ProviderUnavailable, match="connection refused; is the server running"):
        await p.complete(conversation())


@pytest.mark.parametrize("stream", [False, True])
async def test_a_tool_loop_through_the_kernel_reads_then_calls_mcp_then_answers(
    vendor, tmp_path, stream
):
    bodies = [
        final(calls=[("read", {"path": "notes.txt"})]),
        final(calls=[("mcp_x_lookup", {"key": "colour"})]),
        final("The code is 4242 and the colour is blue."),
    ]
    vendor.queue(*[Reply(chunks=ndjson(b)) if stream else Reply(json=b) for b in bodies])
    reply, tools, usage = await run_agent(
        tmp_path, "ollama", {"base_url": vendor.url, **FAST}, "what is in notes.txt?", stream=stream
    )
    assert (
        reply.text == "The code is 4242 and the colour is blue."
        and reply.turns == 3
        and tools.calls == [{"key": "colour"}]
    )
    first, second, third = (r.json for r in vendor.requests)
    assert (
        first["messages"][0] == {"role": "system", "content": "You are terse."}
        and first["stream"] is stream
    )
    assert (
        second["messages"][-1]["role"] == "tool"
        and second["messages"][-1]["tool_name"] == "read"
        and "4242" in second["messages"][-1]["content"]
    )
    assert third["messages"][-1] == {
        "role": "tool",
        "content": "lookup(colour) = blue",
        "tool_name": "mcp_x_lookup",
    }
    assert usage == {"input_tokens": 78, "output_tokens": 894, "requests": 1}
