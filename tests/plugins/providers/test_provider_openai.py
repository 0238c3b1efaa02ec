"""OpenAI Chat Completions (and OpenRouter) against a fake server, cross-checked with the SDK."""

from __future__ import annotations

import json
import logging

import openai
import pytest
import trio
from fake_vendor import Reply, sse
from httpx_sse import ServerSentEvent as SseEvent
from provider_kernel import NOTES, run_agent
from roost.kernel import CompletionRequest, Message, RedactingFormatter, ToolCall, ToolSpec
from roost.plugins.providers._http import (
    ProviderAuthError,
    ProviderConfigError,
    ProviderError,
    ProviderRateLimited,
    ProviderResponseError,
    ProviderSettings,
    ProviderUnavailable,
    StreamInterrupted,
)
from roost.plugins.providers.openai import (
    ChatStreamAssembler,
    build_body,
    create_openai,
    create_openrouter,
    parse_completion,
    roost_providers,
)

KEY = "sk-test-0123456789abcdef"
ENV = {"OPENAI_API_KEY": KEY, "OPENROUTER_API_KEY": KEY}
SETTINGS = ProviderSettings("openai", "http://127.0.0.1/v1", "OPENAI_API_KEY", KEY)
MODEL = {"provider": "openai", "name": "gpt-4o-mini", "parameters": {"temperature": 0.2}}
FAST = {"max_retries": 0, "retry_backoff_s": 0.0}

WEATHER = ToolSpec(
    "get_weather",
    "Current weather for a city",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)

# ---- fixtures modelled on the Chat Completions API reference ------------------------------


def text_completion(text="Hello! How can I assist you today?", finish="stop"):
    return {
        "id": "chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT",
        "object": "chat.completion",
        "created": 1741569952,
        "model": "gpt-4o-mini-2024-07-18",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": text,
                    "refusal": None,
                    "annotations": [],
                },
                "logprobs": None,
                "finish_reason": finish,
            }
        ],
        "usage": {
            "prompt_tokens": 19,
            "completion_tokens": 10,
            "total_tokens": 29,
            "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": 0,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
        },
        "service_tier": "default",
        "system_fingerprint": "fp_06737a9306",
    }


def tool_completion(*calls):
    return {
        "id": "chatcmpl-abc123",
        "object": "chat.completion",
        "created": 1699896916,
        "model": "gpt-4o-mini",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": cid,
                            "type": "function",
                            "function": {"name": name, "arguments": args},
                        }
                        for cid, name, args in calls
                    ],
                },
                "logprobs": None,
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 82, "completion_tokens": 17, "total_tokens": 99},
    }


def chunk(delta, finish=None, usage=None, choices=True):
    return {
        "id": "chatcmpl-123",
        "object": "chat.completion.chunk",
        "created": 1694268190,
        "model": "gpt-4o-mini",
        "system_fingerprint": "fp_44709d6fcb",
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]
        if choices
        else [],
        **({"usage": usage} if usage else {}),
    }


def text_stream(*pieces):
    return sse(
        chunk({"role": "assistant", "content": "", "refusal": None}),
        *[chunk({"content": p}) for p in pieces],
        chunk({}, finish="stop"),
        chunk(
            {},
            usage={"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12},
            choices=False,
        ),
        done=True,
    )


def tool_stream():
    return sse(
        chunk(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "call_DdmO9pD3xa9XTPNJ32zg2hcA",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": ""},
                    }
                ],
            }
        ),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"ci'}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": 'ty": "Paris"}'}}]}),
        chunk(
            {
                "tool_calls": [
                    {
                        "index": 1,
                        "id": "call_2",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
                    }
                ]
            }
        ),
        chunk({}, finish="tool_calls"),
        done=True,
    )


FIXTURES = [
    Reply(json=text_completion()),
    Reply(json=tool_completion(("call_abc123", "get_weather", '{\n"city": "Boston"\n}'))),
    Reply(chunks=text_stream("Hel", "lo"), content_type="text/event-stream"),
    Reply(chunks=tool_stream(), content_type="text/event-stream"),
]


def conversation():
    """A conversation with every kind of message: user, assistant tool call, tool result."""
    call = ToolCall("get_weather", {"city": "Paris"}, id="call_1")
    return CompletionRequest(
        agent="a",
        system="You are terse.",
        messages=(
            Message("user", "Weather in Paris?"),
            Message("assistant", "", tool_calls=(call,)),
            Message("tool", "18C and sunny", tool_call_id="call_1", name="get_weather"),
            Message("assistant", "It is 18C."),
            Message("user", "And now?"),
        ),
        tools=(WEATHER,),
        model="gpt-4o-mini",
        parameters={"temperature": 0.2},
    )


def sdk_messages():
    """The same conversation written as the SDK's documentation writes it."""
    return [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "18C and sunny"},
        {"role": "assistant", "content": "It is 18C."},
        {"role": "user", "content": "And now?"},
    ]


SDK_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]


def provider(vendor, **settings):
    return create_openai(MODEL, {"base_url": vendor.url + "/v1", **FAST, **settings}, env=ENV)


def sdk(vendor):
    return openai.OpenAI(api_key=KEY, base_url=vendor.url + "/v1", max_retries=0, timeout=10)


async def collect(p, request):
    deltas = [d async for d in p.stream(request)]
    return "".join(d.text for d in deltas), deltas[-1].completion


# ---- sans-I/O -----------------------------------------------------------------------------


def test_body_has_no_tools_key_when_the_agent_may_call_none():
    request = CompletionRequest("a", "", (Message("user", "classify: spam?"),), model="m")
    body = build_body(request, "m", stream=False)
    assert "tools" not in body and body["messages"] == [
        {"role": "user", "content": "classify: spam?"}
    ]


def test_context_window_is_roosts_own_parameter_and_is_not_sent():
    request = CompletionRequest(
        "a", "", (Message("user", "x"),), parameters={"context_window": 9000, "top_p": 0.5}
    )
    body = build_body(request, "m", stream=False)
    assert "context_window" not in body and body["top_p"] == 0.5


def test_parse_tool_calls_decodes_their_json_arguments():
    completion = parse_completion(
        tool_completion(("call_abc123", "get_weather", '{"city": "Boston"}')), SETTINGS
    )
    assert completion.stop_reason == "tool_use"
    assert completion.tool_calls == (ToolCall("get_weather", {"city": "Boston"}, id="call_abc123"),)
    assert (completion.usage.input_tokens, completion.usage.output_tokens) == (82, 17)


def test_tool_arguments_that_are_not_json_become_a_call_that_fails_with_a_clear_error():
    (call,) = parse_completion(
        tool_completion(("c1", "get_weather", '{"city": Boston}')), SETTINGS
    ).tool_calls
    assert call.id == "c1" and call.arguments == {}
    assert "tool 'get_weather' with arguments that are not valid JSON" in call.arguments_error


def test_stream_assembler_joins_tool_call_fragments():
    assembler = ChatStreamAssembler(SETTINGS)
    for raw in tool_stream():
        assembler.feed(SseEvent(data=raw.decode().removeprefix("data: ").strip()))
    completion = assembler.finish()
    assert [(c.id, dict(c.arguments)) for c in completion.tool_calls] == [
        ("call_DdmO9pD3xa9XTPNJ32zg2hcA", {"city": "Paris"}),
        ("call_2", {"city": "Oslo"}),
    ]


def test_a_stream_without_finish_is_reported_as_cut():
    assembler = ChatStreamAssembler(SETTINGS)
    assembler.feed(SseEvent(data=json.dumps(chunk({"content": "Hel"}))))
    with pytest.raises(StreamInterrupted, match="ended before the model finished"):
        assembler.finish()


# ---- configuration ------------------------------------------------------------------------


def test_missing_key_says_which_variable_to_set():
    with pytest.raises(ProviderConfigError, match="set OPENAI_API_KEY or choose another provider"):
        create_openai(MODEL, {}, env={})


def test_custom_base_url_runs_without_a_key():
    p = create_openai(MODEL, {"base_url": "http://127.0.0.1:8000/v1"}, env={})
    assert p.http._auth == {}


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"api_key": "sk-x"}, r"providers.openai.api_key: keys are read only from the environment"),
        (
            {"timeout": 3},
            r"providers.openai: unknown key 'timeout' — did you mean 'timeout_s'\? "
            r"valid keys in \[providers.openai\]: base_url",
        ),
        ({"base_url": "ftp://x"}, r"base_url: expected an http:// or https:// URL, got 'ftp://x'"),
        ({"max_retries": "3"}, r"max_retries: expected an integer from 0 to 10, got '3'"),
        ({"max_retries": 99}, r"max_retries: expected an integer from 0 to 10, got 99"),
        ({"max_retries": 2.0}, r"max_retries: expected an integer from 0 to 10, got 2.0"),
        ({"max_retries": True}, r"max_retries: expected an integer from 0 to 10, got a boolean"),
        ({"timeout_s": float("nan")}, r"timeout_s: expected a number from 0.001 to 3600, got nan"),
        ({"timeout_s": 10**400}, r"timeout_s: expected a number from 0.001 to 3600, got 1000"),
        ({"timeout_s": 0}, r"timeout_s: expected a number from 0.001 to 3600, got 0"),
        ({"retry_backoff_s": -1}, r"retry_backoff_s: expected a number from 0 to 60, got -1"),
        ({"headers": {"X": 1}}, r"headers: expected a table of header names"),
    ],
)
def test_bad_settings_name_the_field_and_the_fix(settings, message):
    with pytest.raises(ProviderConfigError, match=message):
        create_openai(MODEL, settings, env=ENV)


def test_missing_model_name_is_a_clear_error():
    with pytest.raises(
        ProviderConfigError, match=r"model.name: provider 'openai' needs a model name"
    ):
        create_openai({"provider": "openai"}, {}, env=ENV)


def test_registers_openai_and_openrouter():
    assert [d.name for d in roost_providers()] == ["openai", "openrouter"]


# ---- against the fake server, beside the official SDK -------------------------------------


async def test_roost_sends_what_the_official_sdk_sends(vendor):
    vendor.queue(Reply(json=text_completion()), Reply(json=text_completion()))
    client = sdk(vendor)
    await trio.to_thread.run_sync(
        lambda: client.chat.completions.create(
            model="gpt-4o-mini", messages=sdk_messages(), tools=SDK_TOOLS, temperature=0.2
        )
    )
    await provider(vendor).complete(conversation())
    theirs, ours = vendor.requests
    assert (
        (ours.method, ours.path) == (theirs.method, theirs.path) == ("POST", "/v1/chat/completions")
    )
    assert ours.json == theirs.json
    assert ours.headers["authorization"] == theirs.headers["authorization"] == f"Bearer {KEY}"
    assert ours.headers["content-type"] == theirs.headers["content-type"]


async def test_roost_streams_what_the_official_sdk_streams(vendor):
    vendor.queue(
        *[Reply(chunks=text_stream("a"), content_type="text/event-stream") for _ in range(2)]
    )
    client = sdk(vendor)

    def run_sdk():
        stream = client.chat.completions.create(
            model="gpt-4o-mini",
            messages=sdk_messages(),
            tools=SDK_TOOLS,
            temperature=0.2,
            stream=True,
            stream_options={"include_usage": True},
        )
        return [c for c in stream]

    await trio.to_thread.run_sync(run_sdk)
    await collect(provider(vendor), conversation())
    theirs, ours = vendor.requests
    assert ours.json == theirs.json
    assert ours.headers["accept"] != "" and ours.path == theirs.path


async def test_the_official_sdk_and_roost_read_every_fixture_alike(vendor):
    client = sdk(vendor)
    for fixture in FIXTURES:
        vendor.queue(fixture, fixture)
        streaming = fixture.chunks is not None

        def run_sdk(streaming=streaming):
            if not streaming:
                r = client.chat.completions.create(
                    model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}]
                )
                msg = r.choices[0].message
                calls = [
                    (c.id, c.function.name, json.loads(c.function.arguments))
                    for c in msg.tool_calls or ()
                ]
                return msg.content or "", calls
            text, calls = "", {}
            for c in client.chat.completions.create(
                model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}], stream=True
            ):
                for choice in c.choices:
                    text += choice.delta.content or ""
                    for frag in choice.delta.tool_calls or ():
                        entry = calls.setdefault(frag.index, ["", "", ""])
                        entry[0] += frag.id or ""
                        entry[1] += frag.function.name or ""
                        entry[2] += frag.function.arguments or ""
            return text, [(i, n, json.loads(a)) for i, n, a in calls.values()]

        sdk_text, sdk_calls = await trio.to_thread.run_sync(run_sdk)
        request = CompletionRequest("a", "", (Message("user", "hi"),), model="gpt-4o-mini")
        p = provider(vendor)
        if streaming:
            text, completion = await collect(p, request)
            assert text == completion.text
        else:
            completion = await p.complete(request)
        assert completion.text == sdk_text
        assert [(c.id, c.name, dict(c.arguments)) for c in completion.tool_calls] == sdk_calls


async def test_openrouter_sends_its_attribution_headers(vendor):
    vendor.queue(Reply(json=text_completion()))
    p = create_openrouter(
        {"name": "openai/gpt-4o-mini"}, {"base_url": vendor.url + "/api/v1", **FAST}, env=ENV
    )
    await p.complete(CompletionRequest("a", "", (Message("user", "hi"),)))
    (req,) = vendor.requests
    assert req.path == "/api/v1/chat/completions"
    assert req.headers["http-referer"].startswith("https://") and req.headers["x-title"] == "roost"
    assert (
        req.headers["authorization"] == f"Bearer {KEY}"
        and req.json["model"] == "openai/gpt-4o-mini"
    )


# ---- errors ---------------------------------------------------------------------------------


async def test_401_names_the_env_var_and_never_the_key(vendor):
    vendor.queue(
        Reply(
            401,
            {
                "error": {
                    "message": f"Incorrect API key provided: {KEY}",
                    "type": "invalid_request_error",
                    "code": "invalid_api_key",
                }
            },
        )
    )
    with pytest.raises(ProviderAuthError) as info:
        await provider(vendor).complete(conversation())
    assert "check OPENAI_API_KEY" in str(info.value) and KEY not in str(info.value)


async def test_malformed_json_from_the_vendor(vendor):
    vendor.queue(Reply(body=b'{"id": "chatcmpl-1", "choices": [', content_type="application/json"))
    with pytest.raises(ProviderResponseError, match="malformed JSON"):
        await provider(vendor).complete(conversation())


async def test_a_response_without_choices_is_a_clear_error(vendor):
    vendor.queue(Reply(json={"object": "chat.completion", "choices": []}))
    with pytest.raises(ProviderResponseError, match="the response has no choices"):
        await provider(vendor).complete(conversation())


async def test_connection_refused(closed_port):
    p = create_openai(MODEL, {"base_url": f"http://127.0.0.1:{closed_port}/v1", **FAST}, env=ENV)
    with pytest.raises(ProviderUnavailable, match="could not connect to .*connection refused"):
        await p.complete(conversation())


async def test_credentials_in_the_base_url_are_in_no_error_and_no_log_line(closed_port, caplog):
    # Regression: a gateway's base_url holding a password or an api_key parameter was not
    # among the provider's secrets: "could not connect to http://bob:<password>@..." went to
    # the retry warnings in roost's log (RedactingFormatter) and to the caller's error.
    url = f"http://bob:gw-pass-5678abcd@127.0.0.1:{closed_port}/v1?api_key=gw-key-9012efgh"
    p = create_openai(MODEL, {"base_url": url, "max_retries": 1, "retry_backoff_s": 0.0}, env=ENV)
    with caplog.at_level(logging.WARNING, logger="roost.providers"):
        with pytest.raises(ProviderUnavailable, match="could not connect") as info:
            await p.complete(conversation())
    logged = "\n".join(RedactingFormatter().format(r) for r in caplog.records)
    assert "retry 1/1" in logged
    for secret in ("gw-pass-5678abcd", "gw-key-9012efgh"):
        assert secret not in str(info.value) and secret not in logged, (info.value, logged)


async def test_a_stream_cut_in_the_middle(vendor):
    vendor.queue(
        Reply(chunks=text_stream("Hel", "lo")[:2], content_type="text/event-stream", cut=True)
    )
    with pytest.raises(StreamInterrupted):
        await collect(provider(vendor), conversation())


async def test_a_429_storm_ends_after_bounded_retries_with_a_clear_error(vendor):
    for _ in range(10):
        vendor.queue(
            Reply(429, {"error": {"message": "Rate limit reached"}}, headers={"retry-after": "0"})
        )
    with pytest.raises(ProviderRateLimited, match=r"kept answering HTTP 429 .* after 3 attempts"):
        await provider(vendor, max_retries=2).complete(conversation())
    assert len(vendor.requests) == 3


async def test_a_503_is_retried_then_succeeds(vendor):
    vendor.queue(
        Reply(503, {"error": {"message": "overloaded"}}, headers={"retry-after-ms": "1"}),
        Reply(json=text_completion("ok")),
    )
    completion = await provider(vendor, max_retries=1).complete(conversation())
    assert completion.text == "ok" and len(vendor.requests) == 2


async def test_a_400_is_not_retried_and_shows_the_vendor_message(vendor):
    vendor.queue(
        Reply(
            400,
            {"error": {"message": "Invalid 'messages[1].role'", "type": "invalid_request_error"}},
        )
    )
    with pytest.raises(ProviderResponseError, match=r"HTTP 400: Invalid 'messages\[1\].role'"):
        await provider(vendor, max_retries=3).complete(conversation())
    assert len(vendor.requests) == 1


async def test_an_error_event_inside_the_stream(vendor):
    vendor.queue(
        Reply(
            chunks=sse({"error": {"message": "server overloaded mid-stream"}}),
            content_type="text/event-stream",
        )
    )
    with pytest.raises(ProviderResponseError, match="server overloaded mid-stream"):
        await collect(provider(vendor), conversation())


async def test_cancelling_the_caller_aborts_the_http_stream(vendor):
    vendor.queue(
        Reply(chunks=text_stream("first")[:2], content_type="text/event-stream", hold=True)
    )
    seen = []
    with trio.CancelScope() as scope:
        async for delta in provider(vendor).stream(conversation()):
            seen.append(delta.text)
            scope.cancel()
    assert seen == ["first"] and scope.cancelled_caught
    with trio.fail_after(5):
        await vendor.client_hung_up.wait()


# ---- through the real kernel ----------------------------------------------------------------


def loop_replies():
    return [
        Reply(json=tool_completion(("call_r", "read", '{"path": "notes.txt"}'))),
        Reply(json=tool_completion(("call_m", "mcp_x_lookup", '{"key": "colour"}'))),
        Reply(json=text_completion("The code is 4242 and the colour is blue.")),
    ]


@pytest.mark.parametrize("stream", [False, True])
async def test_a_tool_loop_through_the_kernel_reads_then_calls_mcp_then_answers(
    vendor, tmp_path, monkeypatch, stream
):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    if stream:
        vendor.queue(
            Reply(
                chunks=sse(
                    chunk(
                        {
                            "tool_calls": [
                                {
                                    "index": 0,
                                    "id": "call_r",
                                    "type": "function",
                                    "function": {
                                        "name": "read",
                                        "arguments": '{"path": "notes.txt"}',
                                    },
                                }
                            ]
                        }
                    ),
                    chunk({}, "tool_calls"),
                    done=True,
                )
            ),
            Reply(
                chunks=sse(
                    chunk(
                        {
                            "tool_calls": [
                                {
                                    "index": 0,
                                    "id": "call_m",
                                    "type": "function",
                                    "function": {
                                        "name": "mcp_x_lookup",
                                        "arguments": '{"key": "colour"}',
                                    },
                                }
                            ]
                        }
                    ),
                    chunk({}, "tool_calls"),
                    done=True,
                )
            ),
            Reply(chunks=text_stream("The code is 4242 ", "and the colour is blue.")),
        )
    else:
        vendor.queue(*loop_replies())
    reply, tools, usage = await run_agent(
        tmp_path,
        "openai",
        {"base_url": vendor.url + "/v1", **FAST},
        "what is in notes.txt?",
        stream=stream,
    )
    assert reply.text == "The code is 4242 and the colour is blue." and not reply.is_error
    assert reply.turns == 3 and tools.calls == [{"key": "colour"}]
    first, second, third = (r.json for r in vendor.requests)
    assert first["messages"][0] == {"role": "system", "content": "You are terse."}
    assert {t["function"]["name"] for t in first["tools"]} >= {"read", "mcp_x_lookup"}
    read_result = second["messages"][-1]
    assert (
        read_result["role"] == "tool"
        and read_result["tool_call_id"] == "call_r"
        and "4242" in read_result["content"]
    )
    assert NOTES.strip() in read_result["content"]
    assert third["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "call_m",
        "content": "lookup(colour) = blue",
    }
    assert usage and usage["input_tokens"] > 0 and usage["output_tokens"] > 0


async def test_a_call_to_an_unknown_tool_goes_back_to_the_model_as_an_error(
    vendor, tmp_path, monkeypatch
):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    vendor.queue(
        Reply(json=tool_completion(("call_x", "delete_everything", "{}"))),
        Reply(json=text_completion("Sorry.")),
    )
    reply, _, _ = await run_agent(
        tmp_path, "openai", {"base_url": vendor.url + "/v1", **FAST}, "go"
    )
    assert reply.text == "Sorry."
    result = vendor.requests[1].json["messages"][-1]
    assert result["tool_call_id"] == "call_x" and "delete_everything" in result["content"]


# A prompt-injected model can write any of these: each goes back to the model, never crashing
# the agent's turn. Regressions: json.loads raises a plain ValueError (not a JSONDecodeError)
# for an integer of more digits than int() reads, and RecursionError past its depth; both
# escaped the provider.
@pytest.mark.parametrize(
    "arguments, told",
    [
        ("{path: notes.txt", ("not valid JSON", "inputSchema")),
        ('{"path": "notes.txt", "offset": ' + "1" * 5000 + "}", ("not valid JSON", "4300 digits")),
        (
            '{"path": "notes.txt", "offset": ' + "[" * 5000 + "]" * 5000 + "}",
            ("nested too deeply",),
        ),
    ],
    ids=["invalid", "integer-past-4300-digits", "nested-past-the-decoders-depth"],
)
async def test_invalid_tool_arguments_go_back_to_the_model_so_it_can_retry(
    vendor, tmp_path, monkeypatch, arguments, told
):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    vendor.queue(
        Reply(json=tool_completion(("call_x", "read", arguments))),
        Reply(json=text_completion("Fixed it.")),
    )
    reply, _, _ = await run_agent(
        tmp_path, "openai", {"base_url": vendor.url + "/v1", **FAST}, "go"
    )
    assert reply.text == "Fixed it." and not reply.is_error
    result = vendor.requests[1].json["messages"][-1]
    assert result["tool_call_id"] == "call_x"
    assert all(words in result["content"] for words in told), result["content"]


async def test_a_model_that_calls_tools_forever_is_stopped_by_max_turns(
    vendor, tmp_path, monkeypatch
):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    vendor.queue(
        *[
            Reply(
                json=tool_completion(
                    (f"c{i}", "read", json.dumps({"path": "notes.txt", "offset": i + 1}))
                )
            )
            for i in range(20)
        ]
    )
    reply, _, _ = await run_agent(
        tmp_path, "openai", {"base_url": vendor.url + "/v1", **FAST}, "go", max_turns=3
    )
    assert reply.stop_reason == "max_turns" and reply.is_error and len(vendor.requests) == 3


async def test_a_model_repeating_the_same_call_is_stopped_by_the_loop_guard(
    vendor, tmp_path, monkeypatch
):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    vendor.queue(
        *[
            Reply(json=tool_completion((f"c{i}", "read", '{"path": "notes.txt"}')))
            for i in range(20)
        ]
    )
    reply, _, _ = await run_agent(
        tmp_path, "openai", {"base_url": vendor.url + "/v1", **FAST}, "go", max_turns=15
    )
    assert reply.stop_reason == "loop_detected" and reply.is_error and len(vendor.requests) < 15


async def test_a_missing_key_makes_only_that_agent_unavailable(tmp_path, monkeypatch):
    from roost.kernel import default_config, open_kernel, parse_manifest

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    agents = [
        parse_manifest(
            {"name": "smart", "description": "d", "model": {"provider": "openai", "name": "gpt-4o"}}
        ),
        parse_manifest({"name": "offline", "description": "d", "model": {"provider": "scripted"}}),
    ]
    async with open_kernel(
        default_config(home=tmp_path, agents={"bundled": False}), agents=agents
    ) as kernel:
        assert "set OPENAI_API_KEY or choose another provider" in kernel.agent_errors["smart"]
        reply = await kernel.send("offline", "still here", timeout=10)
        assert reply.text == "still here"


async def test_a_key_echoed_where_the_error_text_is_cut_shows_no_part_of_it(vendor):
    # Regression: the error text was cut to 400 characters before the key was redacted, so
    # a key echoed across the cut left its head in the error (a prefix is half a secret).
    # Since vendor errors go through http_error_text, a JSON error without a message shows
    # its whole body, so an echoed key in any field can sit at the cut.
    for body in (
        f"Unauthorized {'x' * 375} {KEY} trailing words".encode(),  # the key at 389..413
        json.dumps({"error": {"type": "auth", "echo": "x" * 343 + KEY}}).encode(),
    ):
        vendor.queue(Reply(401, body=body, content_type="text/plain"))
        with pytest.raises(ProviderAuthError) as info:
            await provider(vendor).complete(conversation())
        assert "the server said: Unauthorized" in str(info.value) or "auth" in str(info.value)
        assert KEY[:8] not in str(info.value), str(info.value)[-60:]


async def test_a_key_echoed_with_json_escaped_slashes_is_redacted(vendor):
    # A JSON error without a message is shown as its body, where a vendor may have written
    # the key's "/" as "\/" (legal JSON): redacting the plain key alone missed that spelling.
    key = "sk-with/slash-0123456789"
    vendor.queue(
        Reply(401, body=b'{"error": {"type": "auth", "key": "sk-with\\/slash-0123456789"}}')
    )
    env = {"OPENAI_API_KEY": key}
    p = create_openai(MODEL, {"base_url": vendor.url + "/v1", **FAST}, env=env)
    with pytest.raises(ProviderAuthError) as info:
        await p.complete(conversation())
    text = str(info.value)
    assert "auth" in text and "slash-0123456789" not in text, text


async def test_an_error_the_vendor_reports_in_an_answer_is_redacted_and_bounded(vendor):
    # Regression (already on d10c746): an error inside a 200 answer or a stream event went
    # into ProviderResponseError verbatim: an echoed key shown, and up to 16 MiB of text.
    said = {"error": {"message": f"bad key {KEY} " + "x" * 100_000}}
    vendor.queue(Reply(json=said), Reply(chunks=sse(said), content_type="text/event-stream"))
    with pytest.raises(ProviderResponseError) as answered:
        await provider(vendor).complete(conversation())
    with pytest.raises(ProviderResponseError) as streamed:
        await collect(provider(vendor), conversation())
    for info in (answered, streamed):
        text = str(info.value)
        assert "openai reported an error: bad key [redacted] xxx" in text, text[:200]
        assert KEY not in text and len(text) <= 1000, len(text)


async def test_a_non_json_answer_quoting_the_key_at_the_cut_shows_no_part_of_it(vendor):
    # Regression (already on d10c746): a malformed answer is quoted up to 200 bytes, cut
    # before the key was redacted, so a server echoing the request (a debug page behind a
    # wrong base_url) left the key's head in the error.
    vendor.queue(Reply(body=b"<pre>" + b"h" * 180 + f" Bearer {KEY}</pre>".encode()))
    with pytest.raises(ProviderResponseError, match="malformed JSON") as info:
        await provider(vendor).complete(conversation())
    assert KEY[:6] not in str(info.value), str(info.value)[-80:]


def key_at_the_cut(before: str, at: int = 190) -> str:
    """A vendor's text echoing ``KEY`` from character ``at`` of what an error quotes
    (``before``: what the error puts ahead of it), so a cut at 200 goes through the key."""
    head = "<pre>Bearer "
    return head + "h" * (at - len(before) - len(head)) + KEY + "</pre>"


async def test_an_answer_without_choices_quoting_the_key_at_the_cut_shows_no_part_of_it(vendor):
    # Regression: the answer was quoted as its JSON cut to 200 characters before the key was
    # redacted, so a vendor echoing the key across the cut left its head in the error.
    start = json.dumps({"object": "chat.completion", "choices": [], "echo": ""})[:-2]
    data = {"object": "chat.completion", "choices": [], "echo": key_at_the_cut(start)}
    vendor.queue(Reply(json=data))
    with pytest.raises(ProviderResponseError, match="the response has no choices") as info:
        await provider(vendor).complete(conversation())
    assert "<pre>Bearer hhh" in str(info.value) and KEY[:8] not in str(info.value), str(info.value)[
        -80:
    ]


async def test_tool_arguments_that_are_not_json_quoting_the_key_at_the_cut_show_no_part_of_it(
    vendor, tmp_path, monkeypatch, caplog
):
    # Regression: the model's arguments were quoted cut to 200 characters, never redacted:
    # the key's head went back to the model, into the stored conversation and the spans.
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    vendor.queue(
        Reply(json=tool_completion(("call_x", "read", key_at_the_cut("'")))),
        Reply(json=text_completion("Fixed it.")),
    )
    with caplog.at_level(logging.DEBUG):
        reply, _, _ = await run_agent(
            tmp_path, "openai", {"base_url": vendor.url + "/v1", **FAST}, "go"
        )
    assert reply.text == "Fixed it."
    result = vendor.requests[1].json["messages"][-1]["content"]
    assert "not valid JSON" in result and "<pre>Bearer hhh" in result, result
    logged = "\n".join(RedactingFormatter().format(r) for r in caplog.records)
    for text in (result, logged):
        assert KEY[:8] not in text, text


async def test_a_credential_header_echoed_in_an_error_is_redacted(vendor):
    # Regression: only the API key was redacted; a proxy credential configured in
    # [providers.<name>].headers and echoed back in an error was shown whole.
    proxy = "proxy-cred-0123456789"
    vendor.queue(Reply(407, body=json.dumps({"error": {"message": f"bad {proxy}"}}).encode()))
    settings = {"base_url": vendor.url + "/v1", "headers": {"Proxy-Authorization": proxy}}
    p = create_openai(MODEL, {**settings, **FAST}, env={"OPENAI_API_KEY": KEY})
    with pytest.raises(ProviderError) as info:
        await p.complete(conversation())
    text = str(info.value)
    assert "bad [redacted]" in text and proxy not in text, text
