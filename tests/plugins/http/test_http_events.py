"""The /api/events websocket."""

import json

import pytest
import trio
from http_fakes import serving
from roost.kernel import Event
from roost.plugins.http import InvalidRequest, create_app, parse_kinds
from trio_websocket import ConnectionRejected, open_websocket_url


def ws_url(client, query=""):
    return client.roost_url.replace("http://", "ws://") + "/api/events" + query


async def next_event(ws) -> dict:
    with trio.fail_after(5):
        return json.loads(await ws.get_message())


async def test_streams_the_events_of_a_message(make_kernel):
    kernel = make_kernel()
    async with serving(kernel) as client:
        async with open_websocket_url(ws_url(client)) as ws:
            response = await client.post("/api/agents/echo/message", json={"message": "hi"})
            first, second = await next_event(ws), await next_event(ws)
    assert first["kind"] == "AGENT:MESSAGE"
    assert first["payload"] == {"message": "hi"}
    assert second["kind"] == "AGENT:REPLY"
    assert second["trace"]["trace_id"] == response.json()["trace_id"]
    assert kernel.tap.subscriber_count == 0  # the subscription ended with the socket


async def test_kinds_filter_by_exact_kind_and_namespace(make_kernel):
    kernel = make_kernel()
    async with serving(kernel) as client:
        async with open_websocket_url(ws_url(client, "?kinds=AGENT:REPLY,EXEC:")) as ws:
            for kind in [
                "AGENT:MESSAGE",
                "EXEC:TOOL_CALL",
                "KERNEL:STARTED",
                "AGENT:REPLY",
                "EXEC:TOOL_RESULT",
            ]:
                kernel.tap.publish(Event(kind, "test"))
            kinds = [(await next_event(ws))["kind"] for _ in range(3)]
    assert kinds == ["EXEC:TOOL_CALL", "AGENT:REPLY", "EXEC:TOOL_RESULT"]


@pytest.mark.parametrize(
    "query", ["?kinds=nonsense", "?kinds=AGENT:REPLY,<script>:", "?kinds=" + ",".join(["A:B"] * 40)]
)
async def test_bad_kinds_are_refused_before_the_handshake(make_kernel, query):
    async with serving(make_kernel()) as client:
        with pytest.raises(ConnectionRejected) as refused:
            async with open_websocket_url(ws_url(client, query)):
                pass
    assert refused.value.status_code == 400
    error = json.loads(refused.value.body)["error"]
    assert error["field"] == "kinds"


def test_parse_kinds():
    assert parse_kinds(None) is None
    assert parse_kinds(" ") is None
    assert parse_kinds("EXEC:, AGENT:REPLY ,") == ("EXEC:", "AGENT:REPLY")
    with pytest.raises(InvalidRequest, match="NAMESPACE:NAME"):
        parse_kinds("EXEC")


async def test_a_slow_client_loses_events_instead_of_slowing_the_kernel(make_kernel):
    kernel = make_kernel()
    app = create_app(kernel, event_buffer=8)
    async with serving(kernel, app=app) as client:
        async with open_websocket_url(ws_url(client)) as ws:
            # Publishing never blocks: 5000 events go out while this client reads none.
            for i in range(5000):
                kernel.tap.publish(Event("TEST:BURST", "test", payload={"i": i}))
            received = [await next_event(ws) for _ in range(8)]
            kernel.tap.publish(Event("TEST:AFTER", "test"))
            while received[-1]["kind"] != "TEST:AFTER":
                received.append(await next_event(ws))
    burst = [e["payload"]["i"] for e in received if e["kind"] == "TEST:BURST"]
    # The buffer holds 8; one more may already be in the forwarding task's hands.
    assert burst == list(range(len(burst))) and len(burst) in (8, 9)
    assert [e["kind"] for e in received[len(burst) :]] == ["TAP:DROPPED", "TEST:AFTER"]
    assert received[len(burst)]["payload"] == {"dropped": 5000 - len(burst)}


async def test_client_messages_are_ignored_and_do_not_stall_the_stream(make_kernel):
    kernel = make_kernel()
    async with serving(kernel) as client:
        async with open_websocket_url(ws_url(client)) as ws:
            for _ in range(50):
                await ws.send_message("chatter")
            kernel.tap.publish(Event("TEST:PING", "test"))
            assert (await next_event(ws))["kind"] == "TEST:PING"


def test_event_buffer_must_be_positive(make_kernel):
    with pytest.raises(ValueError, match="event_buffer"):
        create_app(make_kernel(), event_buffer=0)


async def test_an_event_holding_a_lone_surrogate_keeps_the_stream_open(tmp_path):
    # A model wrote a tool call named "rea\ud800" (the six characters \ud800 in its JSON):
    # the tool span's name, and the events naming the call, hold a lone surrogate, which
    # UTF-8 cannot carry. It closed every /api/events stream (the dashboard, roost watch).
    from roost.kernel import RoostError, default_config, open_kernel, parse_manifest
    from roost.plugins.http import open_daemon

    script = {"rules": [{"match": ".", "steps": [{"tool": "rea\ud800", "arguments": {}}]}]}
    evil = parse_manifest(
        {
            "name": "evil",
            "description": "calls a tool whose name no tool has",
            "model": {"provider": "scripted", "script": script},
            "capabilities": {"tools": ["read"]},
        }
    )
    config = default_config(home=str(tmp_path / "home"), http={"port": 0})
    async with open_kernel(config, agents=[evil]) as kernel:
        async with open_daemon(kernel, graceful_timeout=1) as url:
            ws = url.replace("http://", "ws://") + "/api/events?kinds=TRACE:,EXEC:,TEST:"
            async with open_websocket_url(ws) as socket:
                try:
                    await kernel.send("evil", "go")
                except RoostError:
                    pass  # whether such a run can be stored is not this test's business
                kernel.publish(Event("TEST:AFTER", "test"))
                seen = []
                with trio.fail_after(10):
                    while not seen or seen[-1]["kind"] != "TEST:AFTER":
                        seen.append(json.loads(await socket.get_message()))
    names = [e["payload"]["name"] for e in seen if e["kind"] == "TRACE:SPAN_START"]
    assert "rea\ud800" in names  # as it was, escaped in the JSON text
