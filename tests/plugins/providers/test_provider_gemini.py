"""Gemini generateContent / streamGenerateContent against a fake server, beside google-genai."""

from __future__ import annotations

import re

import pytest
import trio
from fake_vendor import Reply, sse
from google import genai
from google.genai import types
from provider_kernel import run_agent
from roost.kernel import CompletionRequest, Message, ToolCall, ToolSpec
from roost.plugins.providers._http import (
    ProviderAuthError,
    ProviderConfigError,
    ProviderResponseError,
    StreamInterrupted,
)
from roost.plugins.providers.gemini import LOCAL_ID_PREFIX, create_gemini

KEY = "gk-test-0123456789"
ENV = {"GEMINI_API_KEY": KEY}
FAST = {"max_retries": 0, "retry_backoff_s": 0.0}
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
WEATHER = ToolSpec("get_weather", "Current weather for a city", SCHEMA)

# ---- fixtures modelled on the GenerateContentResponse reference -----------------------------


def response(*parts, finish="STOP", usage=True):
    out = {
        "candidates": [
            {"content": {"parts": list(parts), "role": "model"}, "finishReason": finish, "index": 0}
        ]
        if finish
        else [{"content": {"parts": list(parts), "role": "model"}, "index": 0}],
        "modelVersion": "gemini-2.5-flash",
        "responseId": "Zw5haM2bGdLz7M8PqrXV2A4",
    }
    if usage:
        out["usageMetadata"] = {
            "promptTokenCount": 21,
            "candidatesTokenCount": 9,
            "totalTokenCount": 30,
            "thoughtsTokenCount": 4,
        }
    return out


def fcall(name, args, cid=None, signature=None):
    part = {"functionCall": {"name": name, "args": args, **({"id": cid} if cid else {})}}
    if signature:
        part["thoughtSignature"] = signature
    return part


FIXTURES = [
    Reply(json=response({"text": "Hello there, how can I help?"})),
    Reply(
        json=response(
            {"text": "thinking…", "thought": True},
            fcall("get_weather", {"city": "Paris"}, "fc_1", "c2lnbmF0dXJl"),
        )
    ),
    Reply(
        chunks=sse(response({"text": "Hel"}, finish=None, usage=False), response({"text": "lo"})),
        content_type="text/event-stream",
    ),
    Reply(
        chunks=sse(
            response({"text": "Let me look. "}, finish=None, usage=False),
            response(fcall("get_weather", {"city": "Oslo"})),
        )
    ),
]


def conversation():
    call = ToolCall("get_weather", {"city": "Paris"}, id="fc1")
    return CompletionRequest(
        agent="a",
        system="You are terse.",
        messages=(
            Message("user", "Weather?"),
            Message("assistant", "Checking.", tool_calls=(call,)),
            Message("tool", "18C", tool_call_id="fc1", name="get_weather"),
        ),
        tools=(WEATHER,),
        model="gemini-2.5-flash",
        parameters={"temperature": 0.2, "max_tokens": 100},
    )


SDK_CONTENTS = [
    {"role": "user", "parts": [{"text": "Weather?"}]},
    {
        "role": "model",
        "parts": [
            {"text": "Checking."},
            {"function_call": {"name": "get_weather", "args": {"city": "Paris"}, "id": "fc1"}},
        ],
    },
    {
        "role": "user",
        "parts": [
            {
                "function_response": {
                    "name": "get_weather",
                    "response": {"result": "18C"},
                    "id": "fc1",
                }
            }
        ],
    },
]


def sdk_config():
    return types.GenerateContentConfig(
        system_instruction="You are terse.",
        temperature=0.2,
        max_output_tokens=100,
        tools=[
            types.Tool(
                function_declarations=[
                    types.FunctionDeclaration(
                        name="get_weather",
                        description="Current weather for a city",
                        parameters_json_schema=SCHEMA,
                    )
                ]
            )
        ],
    )


def camel(value):
    """Protobuf JSON accepts snake_case and lowerCamelCase field names alike; compare as camel."""
    if isinstance(value, dict):
        return {
            re.sub(r"_([a-z])", lambda m: m.group(1).upper(), k): (
                v if k in ("args", "response", "properties") else camel(v)
            )
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [camel(v) for v in value]
    return value


def provider(vendor, **settings):
    return create_gemini(
        {"name": "gemini-2.5-flash"}, {"base_url": vendor.url, **FAST, **settings}, env=ENV
    )


def sdk(vendor):
    return genai.Client(
        api_key=KEY,
        http_options=types.HttpOptions(base_url=vendor.url, api_version="v1beta", timeout=10_000),
    )


async def collect(p, request):
    deltas = [d async for d in p.stream(request)]
    return "".join(d.text for d in deltas), deltas[-1].completion


def test_missing_key_says_which_variable_to_set():
    with pytest.raises(ProviderConfigError, match="set GEMINI_API_KEY or choose another provider"):
        create_gemini({"name": "gemini-2.5-flash"}, {}, env={})


async def test_roost_sends_what_the_official_sdk_sends(vendor):
    vendor.queue(Reply(json=response({"text": "ok"})), Reply(json=response({"text": "ok"})))
    client = sdk(vendor)
    await trio.to_thread.run_sync(
        lambda: client.models.generate_content(
            model="gemini-2.5-flash", contents=SDK_CONTENTS, config=sdk_config()
        )
    )
    await provider(vendor).complete(conversation())
    theirs, ours = vendor.requests
    assert ours.path == theirs.path == "/v1beta/models/gemini-2.5-flash:generateContent"
    assert camel(ours.json) == camel(theirs.json)
    assert ours.headers["x-goog-api-key"] == theirs.headers["x-goog-api-key"] == KEY


async def test_roost_streams_what_the_official_sdk_streams(vendor):
    vendor.queue(
        *[Reply(chunks=FIXTURES[2].chunks, content_type="text/event-stream") for _ in range(2)]
    )
    client = sdk(vendor)
    await trio.to_thread.run_sync(
        lambda: list(
            client.models.generate_content_stream(
                model="gemini-2.5-flash", contents=SDK_CONTENTS, config=sdk_config()
            )
        )
    )
    await collect(provider(vendor), conversation())
    theirs, ours = vendor.requests
    assert ours.path == theirs.path == "/v1beta/models/gemini-2.5-flash:streamGenerateContent"
    assert ours.query == theirs.query == {"alt": ["sse"]}
    assert camel(ours.json) == camel(theirs.json)


async def test_the_official_sdk_and_roost_read_every_fixture_alike(vendor):
    client = sdk(vendor)
    request = CompletionRequest("a", "", (Message("user", "hi"),))
    for fixture in FIXTURES:
        vendor.queue(fixture, fixture)
        if fixture.chunks is None:
            r = await trio.to_thread.run_sync(
                lambda: client.models.generate_content(model="m", contents="hi")
            )
            chunks = [r]
            completion = await provider(vendor).complete(request)
        else:
            chunks = await trio.to_thread.run_sync(
                lambda: list(client.models.generate_content_stream(model="m", contents="hi"))
            )
            _, completion = await collect(provider(vendor), request)
        parts = [p for c in chunks for p in c.candidates[0].content.parts]
        assert completion.text == "".join(p.text for p in parts if p.text and not p.thought)
        sdk_calls = [(p.function_call.name, p.function_call.args) for p in parts if p.function_call]
        assert [(c.name, dict(c.arguments)) for c in completion.tool_calls] == sdk_calls


async def test_thought_signatures_and_call_ids_go_back_with_the_calls(vendor):
    vendor.queue(Reply(json=FIXTURES[1].json), Reply(json=response({"text": "done"})))
    p = provider(vendor)
    first = await p.complete(CompletionRequest("a", "", (Message("user", "go"),), tools=(WEATHER,)))
    (call,) = first.tool_calls
    assert call.id == "fc_1" and first.text == "" and first.stop_reason == "tool_use"
    history = (
        Message("user", "go"),
        Message("assistant", "", tool_calls=(call,)),
        Message("tool", "18C", tool_call_id="fc_1", name="get_weather"),
    )
    await p.complete(CompletionRequest("a", "", history, tools=(WEATHER,)))
    model_turn, result_turn = vendor.requests[1].json["contents"][1:]
    assert model_turn["parts"] == [
        {
            "functionCall": {"name": "get_weather", "args": {"city": "Paris"}, "id": "fc_1"},
            "thoughtSignature": "c2lnbmF0dXJl",
        }
    ]
    assert result_turn["parts"] == [
        {"functionResponse": {"name": "get_weather", "response": {"result": "18C"}, "id": "fc_1"}}
    ]


async def test_calls_without_an_id_get_a_local_one_that_is_not_sent(vendor):
    vendor.queue(Reply(json=response(fcall("get_weather", {"city": "Oslo"}))))
    (call,) = (await provider(vendor).complete(conversation())).tool_calls
    assert call.id.startswith(LOCAL_ID_PREFIX)
    contents = provider(vendor).wire.contents(
        (
            Message("assistant", "", tool_calls=(call,)),
            Message("tool", "x", tool_call_id=call.id, name="get_weather"),
        )
    )
    assert (
        "id" not in contents[0]["parts"][0]["functionCall"]
        and "id" not in contents[1]["parts"][0]["functionResponse"]
    )


async def test_a_blocked_prompt_is_a_clear_error(vendor):
    vendor.queue(
        Reply(
            json={
                "promptFeedback": {"blockReason": "SAFETY"},
                "usageMetadata": {"promptTokenCount": 3},
            }
        )
    )
    with pytest.raises(ProviderResponseError, match="gemini blocked the prompt: SAFETY"):
        await provider(vendor).complete(conversation())


async def test_401_names_the_env_var(vendor):
    vendor.queue(
        Reply(
            403,
            [
                {
                    "error": {
                        "code": 403,
                        "message": "API key not valid. Please pass a valid API key.",
                        "status": "PERMISSION_DENIED",
                    }
                }
            ],
        )
    )
    with pytest.raises(ProviderAuthError, match="check GEMINI_API_KEY .*API key not valid"):
        await provider(vendor).complete(conversation())


async def test_a_stream_cut_in_the_middle(vendor):
    vendor.queue(
        Reply(chunks=[b'data: {"candidates": [{"content": {"parts": [{"text": "Hel'], cut=True)
    )
    with pytest.raises(StreamInterrupted):
        await collect(provider(vendor), conversation())


@pytest.mark.parametrize("stream", [False, True])
async def test_a_tool_loop_through_the_kernel_reads_then_calls_mcp_then_answers(
    vendor, tmp_path, monkeypatch, stream
):
    monkeypatch.setenv("GEMINI_API_KEY", KEY)
    bodies = [
        response(fcall("read", {"path": "notes.txt"})),
        response(fcall("mcp_x_lookup", {"key": "colour"}, "fc_m")),
        response({"text": "The code is 4242 and the colour is blue."}),
    ]
    vendor.queue(*[Reply(chunks=sse(b)) if stream else Reply(json=b) for b in bodies])
    reply, tools, usage = await run_agent(
        tmp_path, "gemini", {"base_url": vendor.url, **FAST}, "what is in notes.txt?", stream=stream
    )
    assert (
        reply.text == "The code is 4242 and the colour is blue."
        and reply.turns == 3
        and tools.calls == [{"key": "colour"}]
    )
    first, second, third = (r.json for r in vendor.requests)
    assert first["systemInstruction"]["parts"] == [{"text": "You are terse."}]
    names = {d["name"] for d in first["tools"][0]["functionDeclarations"]}
    assert {"read", "mcp_x_lookup"} <= names
    (read_result,) = second["contents"][-1]["parts"]
    assert (
        read_result["functionResponse"]["name"] == "read"
        and "4242" in read_result["functionResponse"]["response"]["result"]
    )
    assert third["contents"][-1]["parts"] == [
        {
            "functionResponse": {
                "name": "mcp_x_lookup",
                "response": {"result": "lookup(colour) = blue"},
                "id": "fc_m",
            }
        }
    ]
    assert usage["input_tokens"] == 63 and usage["output_tokens"] == 39
