"""The shared pieces: SSE events (httpx-sse, bounded), the context guard, Retry-After."""

from __future__ import annotations

import logging
import time

import httpx
import pytest
import trio
from fake_vendor import Reply
from httpx_sse import ServerSentEvent as SseEvent
from roost.kernel import CompletionRequest, Message, RedactingFormatter
from roost.plugins.http.client import sse_events
from roost.plugins.providers._base import (
    MARKER_PREFIX,
    ProviderResponseError,
    fit_context,
    request_tokens,
    sse_json,
)
from roost.plugins.providers._http import ProviderSettings, ProviderUnavailable, backoff_s
from roost.plugins.providers.anthropic import create_anthropic
from roost.plugins.providers.gemini import create_gemini
from roost.plugins.providers.openai import create_openai


def sse_response(chunks: list[bytes]) -> httpx.Response:
    async def body():
        for chunk in chunks:
            yield chunk

    return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body())


async def events_of(chunks: list[bytes], max_bytes: int = 1 << 24) -> list[tuple]:
    return [
        (e.event, e.data, e.id, e.retry)
        async for e in sse_events(sse_response(chunks), max_bytes=max_bytes)
    ]


async def test_sse_events_split_anywhere_across_chunks():
    # CRLF, CR and LF line ends (a CR LF pair may be cut), comments, multi-line data, a
    # missing space after the colon, id and retry; U+2028 inside JSON is not a line end.
    text = (
        'event: a\r\ndata: {"x":\r\ndata: 1}\r\n\r\n: comment\n\n'
        "id: 7\rretry: 50\rdata:no-space\u2028\r\r"
    )
    raw = text.encode()
    expected = [("a", '{"x":\n1}', "", None), ("message", "no-space\u2028", "7", 50)]
    for cut in range(len(raw) + 1):
        assert await events_of([raw[:cut], raw[cut:]]) == expected, cut


async def test_sse_events_cost_is_linear_in_the_event_size():
    # Regression: the providers' decoder re-scanned and re-copied its buffer on every chunk,
    # so one 256 KiB event fed in 4 KiB chunks cost 264 ms of event loop, growing with the
    # square of its size. Eight times the bytes must cost about eight times the CPU.
    async def cost(size: int) -> float:
        raw = b"data: " + b"x" * size + b"\n\n"
        chunks = [raw[i : i + 4096] for i in range(0, len(raw), 4096)]
        best = float("inf")
        for _ in range(3):
            start = time.process_time()
            (event,) = await events_of(chunks)
            best = min(best, time.process_time() - start)
            assert len(event[1]) == size
        return best

    small, large = await cost(256 * 1024), await cost(2 * 1024 * 1024)
    assert large < 20 * max(small, 1e-4), (small, large)  # linear: ~8x; quadratic: ~64x


async def test_an_sse_event_over_the_limit_is_refused():
    chunks = [b"data: " + b"x" * 100 + b"\n"] * 20  # never a blank line: one endless event
    with pytest.raises(ValueError, match="over the limit of 1000 bytes"):
        await events_of(chunks, max_bytes=1000)
    assert (
        len(await events_of([b"data: 1\n\n"] * 200, max_bytes=1000)) == 200
    )  # the limit is per event


def request_with_tool_outputs(*sizes):
    messages = [Message("user", "start")]
    for i, size in enumerate(sizes):
        messages.append(Message("tool", f"out{i}:" + "x" * size, tool_call_id=f"c{i}"))
    messages.append(Message("user", "and the summary?"))
    return CompletionRequest("a", "system", tuple(messages))


def test_context_guard_leaves_a_small_conversation_alone():
    request = request_with_tool_outputs(100, 100)
    assert fit_context(request, context_window=10_000) is request


def shortened(messages):
    """How many messages carry the shortening marker."""
    return sum(MARKER_PREFIX in m.content for m in messages)


def test_context_guard_shortens_the_oldest_tool_output_first():
    request = request_with_tool_outputs(20_000, 20_000, 2_000)
    fitted = fit_context(request, context_window=8_000)
    old, middle, new = (m.content for m in fitted.messages if m.role == "tool")
    assert old.startswith("out0:") and MARKER_PREFIX in old and len(old) < 1000
    assert MARKER_PREFIX not in new and new == request.messages[3].content
    assert request_tokens(fitted) <= 8_000 * 0.9
    assert [m.content for m in fitted.messages if m.role == "user"] == ["start", "and the summary?"]
    assert shortened(fitted.messages) == 1 and MARKER_PREFIX not in middle  # only as much as needed


def test_context_guard_does_its_best_when_nothing_can_fit():
    request = request_with_tool_outputs(50_000)
    fitted = fit_context(attrs_evolve(request, system="s" * 100_000), context_window=1_000)
    assert shortened(fitted.messages) == 1  # shortened, not crashed; the vendor will say too long


def attrs_evolve(request, **kw):
    import attrs

    return attrs.evolve(request, **kw)


async def test_each_provider_applies_the_context_guard_before_sending(vendor):
    vendor.queue(
        Reply(
            json={
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "ok"},
                        "finish_reason": "stop",
                    }
                ]
            }
        )
    )
    p = create_openai(
        {"name": "m", "parameters": {"context_window": 4_000, "max_tokens": 100}},
        {"base_url": vendor.url},
        env={},
    )
    await p.complete(request_with_tool_outputs(30_000, 100))
    sent = vendor.requests[0].json["messages"]
    assert MARKER_PREFIX in sent[2]["content"] and sent[3]["content"] == "out1:" + "x" * 100


def test_backoff_honours_the_server_but_never_waits_past_the_cap():
    s = ProviderSettings("x", "http://h", None, max_retry_wait_s=5.0, retry_backoff_s=1.0)
    assert backoff_s(s, 1, 3.0) == 3.0 and backoff_s(s, 1, 3600.0) == 5.0
    assert 0.5 <= backoff_s(s, 1, None) <= 1.0 and backoff_s(s, 10, None) <= 5.0


def test_settings_repr_never_shows_the_key():
    s = ProviderSettings("x", "http://h", "K", api_key="sk-secret-123")
    assert (
        "sk-secret-123" not in repr(s) and s.redact("bad key sk-secret-123") == "bad key [redacted]"
    )


def test_a_stream_event_holding_an_integer_past_4300_digits_is_a_provider_error():
    # Regression: a plain ValueError (int() reads at most 4300 digits) escaped sse_json,
    # which caught only JSONDecodeError: a crash instead of a clear provider error.
    event = SseEvent(data='{"created": ' + "1" * 5000 + "}")
    with pytest.raises(ProviderResponseError, match="openai: a stream event is not JSON"):
        sse_json(event, ProviderSettings("openai", "http://127.0.0.1", None))


def test_a_stream_event_nested_past_the_json_decoders_depth_is_a_provider_error():
    # Regression: RecursionError escaped sse_json (it caught only ValueError): a crash of the
    # agent's turn instead of a clear provider error.
    event = SseEvent(data="[" * 5000 + "]" * 5000)
    with pytest.raises(ProviderResponseError, match="openai: a stream event is not JSON"):
        sse_json(event, ProviderSettings("openai", "http://127.0.0.1", None))


# ---- vendor text quoted in an error: credentials redacted, then cut ----------------------

KEY = "sk-echo-0123456789abcdef"
NO_WAIT = {"retry_backoff_s": 0.0}
FAST = {"max_retries": 0, **NO_WAIT}


def key_at_the_cut(before: str, after: str = "</pre>", at: int = 190) -> str:
    """A vendor's text echoing ``KEY`` so that it starts at ``at`` of what an error quotes
    (``before`` is what the error puts ahead of the vendor's text): a 200-character cut
    made before redacting goes through it."""
    head = "<pre>Bearer "
    return head + "h" * (at - len(before) - len(head)) + KEY + after


def logged(caplog) -> str:
    return "\n".join(RedactingFormatter().format(r) for r in caplog.records)


SSE_VENDORS = {
    "openai": (create_openai, "OPENAI_API_KEY", "/v1"),
    "anthropic": (create_anthropic, "ANTHROPIC_API_KEY", ""),
    "gemini": (create_gemini, "GEMINI_API_KEY", ""),
}


@pytest.mark.parametrize("name", SSE_VENDORS)
async def test_a_stream_event_that_is_not_json_quoting_the_key_at_the_cut_shows_no_part_of_it(
    vendor, caplog, name
):
    # Regression: sse_json quoted the event's first 200 characters, cut before the key was
    # redacted, so an event echoing the key across the cut left its head in the error.
    create, key_env, path = SSE_VENDORS[name]
    data = key_at_the_cut("'")  # quoted with repr
    vendor.queue(Reply(chunks=[f"data: {data}\n\n".encode()], content_type="text/event-stream"))
    p = create({"name": "m"}, {"base_url": vendor.url + path, **FAST}, env={key_env: KEY})
    with caplog.at_level(logging.DEBUG):
        with pytest.raises(ProviderResponseError, match="a stream event is not JSON") as info:
            async for _ in p.stream(CompletionRequest("a", "", (Message("user", "hi"),))):
                pass
    assert "<pre>Bearer hhh" in str(info.value), str(info.value)
    for text in (str(info.value), logged(caplog)):
        assert KEY[:8] not in text, text[-80:]


async def test_a_broken_status_line_quoting_the_key_at_the_cut_shows_no_part_of_it(nursery, caplog):
    # Regression: the reason a connection failed (h11 quotes the status line it could not
    # read) was cut to 200 characters before the key was redacted: its head went to the
    # retry warning in the log and to the caller's error.
    prefix = "illegal status line: bytearray(b'"
    line = "HTTP/1.1 abc " + key_at_the_cut(prefix + "HTTP/1.1 abc ")

    async def answer(stream):
        await stream.receive_some(65536)
        await stream.send_all(line.encode() + b"\r\n\r\n")
        await stream.aclose()

    listeners = await nursery.start(
        lambda task_status: trio.serve_tcp(answer, 0, host="127.0.0.1", task_status=task_status)
    )
    port = listeners[0].socket.getsockname()[1]
    settings = {"base_url": f"http://127.0.0.1:{port}/v1", "max_retries": 1, **NO_WAIT}
    p = create_openai({"name": "m"}, settings, env={"OPENAI_API_KEY": KEY})
    with caplog.at_level(logging.DEBUG):
        with pytest.raises(ProviderUnavailable, match="closed the connection") as info:
            await p.complete(CompletionRequest("a", "", (Message("user", "hi"),)))
    assert "retry 1/1" in logged(caplog) and "illegal status line" in str(info.value)
    for text in (str(info.value), logged(caplog)):
        assert KEY[:8] not in text, text[-80:]


async def test_a_vendor_error_quoting_a_base_url_credential_at_the_cut_shows_no_part_of_it(
    vendor,
):
    # Regression: an error the vendor reports in an answer was cut to 1000 characters with a
    # margin of the API key's length only; a longer credential in base_url (a gateway's
    # ?api_key=) across the cut left its head in the error.
    credential = "gw-" + "0123456789abcdef" * 4
    reported = "openai reported an error: "
    message = "x" * (990 - len(reported)) + credential
    vendor.queue(Reply(json={"error": {"message": message}}))
    url = vendor.url + f"/v1?api_key={credential}"
    p = create_openai({"name": "m"}, {"base_url": url, **FAST}, env={})
    with pytest.raises(ProviderResponseError, match="openai reported an error: xxx") as info:
        await p.complete(CompletionRequest("a", "", (Message("user", "hi"),)))
    assert credential[:8] not in str(info.value), str(info.value)[-80:]


def test_a_key_echoed_over_and_over_leaves_no_head_at_the_cut():
    # Redacting a slice a margin longer than the cut is not enough when the text repeats the
    # key: each "[redacted]" is shorter than the key, so the key the slice cut can end up
    # before the cut; the excerpt reads on until the redacted text is long enough.
    key = "sk-long-" + "0123456789abcdef" * 2
    settings = ProviderSettings("x", "http://h", "K", api_key=key)
    text = (key + " ") * 40
    for given in (text, text.encode()):
        shown = settings.excerpt(given)
        assert shown.startswith("[redacted] [redacted]") and shown.endswith("…"), shown
        assert len(shown) == 200 and key[:8] not in shown, shown
