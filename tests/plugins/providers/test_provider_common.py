"""The shared pieces: SSE events (httpx-sse, bounded), the context guard, Retry-After."""

from __future__ import annotations

import email.utils
import time

import httpx
import pytest
from fake_vendor import Reply
from httpx_sse import ServerSentEvent as SseEvent
from roost.kernel import CompletionRequest, Message
from roost.plugins.http.client import retry_after_s, sse_events
from roost.plugins.providers._base import (
    MARKER_PREFIX,
    ProviderResponseError,
    fit_context,
    request_tokens,
    sse_json,
)
from roost.plugins.providers._http import ProviderSettings, backoff_s
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


def test_retry_after_in_seconds_milliseconds_and_http_dates():
    assert retry_after_s({"Retry-After": "7"}) == 7
    assert retry_after_s({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    date = email.utils.formatdate(1_000_030, usegmt=True)
    assert retry_after_s({"Retry-After": date}, now=1_000_000) == pytest.approx(30)
    assert retry_after_s({"Retry-After": "soon"}) is None and retry_after_s({}) is None


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
        sse_json(event, "openai")


def test_a_stream_event_nested_past_the_json_decoders_depth_is_a_provider_error():
    # Regression: RecursionError escaped sse_json (it caught only ValueError): a crash of the
    # agent's turn instead of a clear provider error.
    event = SseEvent(data="[" * 5000 + "]" * 5000)
    with pytest.raises(ProviderResponseError, match="openai: a stream event is not JSON"):
        sse_json(event, "openai")
