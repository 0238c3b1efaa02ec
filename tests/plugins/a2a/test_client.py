"""roost's A2A client: against the official a2a-sdk server (subprocess, asyncio), against
roost's own server (1.0, 0.3 and 0.1 shapes), and against mocked peers (cards, SSRF, UA)."""

from __future__ import annotations

import json

import httpx
import pytest
import trio
from a2a_helpers import sdk_server
from roost.plugins.a2a import A2AClient, A2AError
from roost.plugins.a2a import _models as m
from roost.plugins.a2a._client import USER_AGENT, parse_card, task_text
from waiting import wait_until


@pytest.fixture
async def sdk_url():
    async with sdk_server() as url:
        yield url


async def test_roost_client_against_the_a2a_sdk_server(sdk_url):
    async with A2AClient(allow_loopback=True) as client:
        info = await client.discover(sdk_url)
        assert info.protocol == "1.0" and info.name == "SDK Echo"
        task = await client.send(info, "hello sdk")
        assert task.status.state == m.COMPLETED and task_text(task) == "echo: hello sdk"
        got = await client.get(info, task.id)
        assert got.id == task.id and got.status.state == m.COMPLETED
        events = [e async for e in client.stream(info, "streamed")]
        assert isinstance(events[0], m.Task)
        assert events[-1].status.state == m.COMPLETED
        assert any(
            isinstance(e, m.ArtifactUpdate) and e.artifact.parts[0].text == "echo: streamed"
            for e in events
        )
        slow = await client.send(info, "slow: cancel me", return_immediately=True)
        seen = []
        async with trio.open_nursery() as nursery:

            async def follow():
                async for event in client.subscribe(info, slow.id):
                    seen.append(event)

            nursery.start_soon(follow)
            await wait_until(lambda: seen, "the subscription's first event")
            canceled = await client.cancel(info, slow.id)
        assert canceled.status.state == m.CANCELED
        assert seen[-1].status.state == m.CANCELED
        with pytest.raises(A2AError) as err:
            await client.get(info, "nope")
        assert err.value.code == -32001
        asked = await client.send(info, "ask: something")
        assert asked.status.state == m.INPUT_REQUIRED
        waited = await client.wait(info, asked.id, timeout=5)
        assert waited.status.state == m.INPUT_REQUIRED


@pytest.mark.parametrize("protocol", ["1.0", "0.3", "0.1"])
async def test_roost_client_against_roost_in_each_protocol(daemon, protocol):
    kernel, url = daemon
    async with A2AClient(allow_loopback=True) as client:
        info = await client.discover(url + "/a2a/agents/asker")
        if protocol != "1.0":
            import attrs

            endpoint = url + ("/a2a/agents/asker/jsonrpc")
            info = attrs.evolve(info, protocol=protocol, jsonrpc_url=endpoint)
        first = await client.send(info, "a question")
        assert first.status.state == m.INPUT_REQUIRED
        assert first.status.message.text() == "Which file?"
        second = await client.send(info, "b.md", task_id=first.id, context_id=first.context_id)
        assert second.id == first.id and second.status.state == m.COMPLETED
        assert task_text(second) == "You chose b.md for a question"
        events = [e async for e in client.stream(info, "plain")]
        assert (
            events[-1].status.state == m.COMPLETED
            if protocol != "0.1"
            else events[-1].status.state == m.COMPLETED
        )


async def test_discover_reads_1_0_0_3_and_0_1_cards_and_falls_back_to_the_legacy_path():
    cards = {
        "http://a.test/.well-known/agent-card.json": {
            "name": "new",
            "supportedInterfaces": [
                {"url": "http://a.test/rpc", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
            ],
            "capabilities": {"streaming": True},
        },
        "http://b.test/.well-known/agent-card.json": {
            "name": "mid",
            "url": "http://b.test/rpc",
            "protocolVersion": "0.3.0",
            "capabilities": {},
        },
        "http://c.test/.well-known/agent.json": {
            "name": "old",
            "url": "http://c.test/a2a",
            "capabilities": {"streaming": False},
        },
    }
    seen_agents = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen_agents.append(request.headers["user-agent"])
        # Sent to the checked address; the name stays in Host.
        card = cards.get(str(request.url.copy_with(host=request.headers["host"])))
        return httpx.Response(200, json=card) if card else httpx.Response(404)

    async def resolver(host, port):
        return ["93.184.216.34"]

    async with A2AClient(transport=httpx.MockTransport(handler), resolver=resolver) as client:
        a = await client.discover("http://a.test")
        b = await client.discover("http://b.test/")
        c = await client.discover("http://c.test")
        with pytest.raises(A2AError, match="no agent card"):
            await client.discover("http://d.test")
    assert (a.protocol, a.jsonrpc_url, a.streaming) == ("1.0", "http://a.test/rpc", True)
    assert (b.protocol, b.jsonrpc_url) == ("0.3", "http://b.test/rpc")
    assert (c.protocol, c.jsonrpc_url) == ("0.1", "http://c.test/a2a")
    assert (
        set(seen_agents) == {USER_AGENT}
        and USER_AGENT.startswith("roost/")
        and USER_AGENT.endswith(" A2A")
    )


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest",
        "http://127.0.0.1:9/x",
        "file:///etc/passwd",
        "http://10.0.0.1/",
    ],
)
async def test_the_client_refuses_ssrf_targets(url):
    async with A2AClient() as client:
        with pytest.raises(A2AError, match="refusing"):
            await client.discover(url)


async def test_the_client_sends_trace_context_in_metadata_and_headers():
    from roost.kernel import TraceContext

    captured = {}

    def handler(request: httpx.Request) -> httpx.Response:
        captured["headers"] = dict(request.headers)
        captured["body"] = json.loads(request.content)
        task = {"id": "t", "contextId": "c", "status": {"state": "TASK_STATE_COMPLETED"}}
        return httpx.Response(
            200, json={"jsonrpc": "2.0", "id": captured["body"]["id"], "result": {"task": task}}
        )

    async def resolver(host, port):
        return ["93.184.216.34"]

    info = parse_card(
        {
            "name": "x",
            "supportedInterfaces": [
                {"url": "http://x.test/rpc", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
            ],
        },
        "http://x.test/",
    )
    trace = TraceContext.new("caller").child("middle")
    async with A2AClient(transport=httpx.MockTransport(handler), resolver=resolver) as client:
        task = await client.send(info, "hi", trace=trace)
    assert task.id == "t"
    assert captured["headers"]["a2a-version"] == "1.0"
    assert captured["headers"]["traceparent"] == trace.traceparent
    meta = captured["body"]["params"]["message"]["metadata"]
    assert TraceContext.from_meta(meta).path == ("caller", "middle")


async def test_bad_cards_are_reported_not_crashed():
    for card in (
        [],
        {"name": ""},
        {"name": "x"},
        {"name": "x", "supportedInterfaces": [{"protocolBinding": "GRPC", "url": "x"}]},
    ):
        with pytest.raises(A2AError):
            parse_card(card, "http://x.test/")


async def test_the_client_connects_to_the_address_it_checked_not_a_rebound_one():
    """The client checked a peer's URL (DNS: a public address), then httpx looked the name
    up again to connect: a DNS-rebinding name could answer that second lookup with a
    private address. Every request now goes to an address the check approved."""
    answers = iter([["93.184.216.34"], ["127.0.0.1"]])
    sent_to = []

    async def rebinding(host, port):
        return next(answers, ["127.0.0.1"])

    def handler(request: httpx.Request) -> httpx.Response:
        sent_to.append((request.url.host, request.headers["host"]))
        card = {"name": "a", "url": "http://rebind.test/rpc", "protocolVersion": "0.3.0"}
        return httpx.Response(200, json=card)

    async with A2AClient(transport=httpx.MockTransport(handler), resolver=rebinding) as client:
        await client.discover("http://rebind.test/.well-known/agent.json")
    assert sent_to == [("93.184.216.34", "rebind.test")]


@pytest.mark.parametrize("url", ["http://[::1/x", "http://[fe80::1%zz]:/"])
async def test_discovering_a_url_urlsplit_cannot_read_is_refused_not_a_valueerror(url):
    # urlsplit raised "Invalid IPv6 URL" before any check: roost a2a send said
    # "unexpected ValueError" instead of naming the URL.
    async with A2AClient() as client:
        with pytest.raises(A2AError, match="refusing"):
            await client.discover(url)
