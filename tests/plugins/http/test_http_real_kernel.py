"""The daemon in front of the real kernel (scripted agents; no network besides 127.0.0.1)."""

import json

import httpx
import pytest
import trio
from roost.kernel import default_config, open_kernel
from trio_websocket import open_websocket_url


def scripted_agent(directory, name, rules):
    path = directory / name / "agent.json"
    path.parent.mkdir(parents=True)
    path.write_text(
        json.dumps(
            {
                "name": name,
                "description": f"{name} (scripted)",
                "version": "0.1.0",
                "model": {"provider": "scripted", "name": "rules", "script": {"rules": rules}},
                "capabilities": {"tools": ["write", "artifact"]},
            }
        )
    )


MAKE_STEPS = [
    {"tool": "write", "arguments": {"path": "out.bin", "content": "AB"}},
    {"tool": "artifact", "arguments": {"name": "blob", "path": "out.bin"}},
    {"tool": "artifact", "arguments": {"name": "facts", "data": {"ok": True}}},
]


@pytest.fixture
def config(tmp_path):
    agents = tmp_path / "agents"
    scripted_agent(
        agents,
        "pinger",
        [
            {"match": "^make", "steps": MAKE_STEPS, "reply": "made"},
            {"match": ".", "reply": "pong: {message}"},
        ],
    )
    return default_config(
        home=str(tmp_path / "home"),
        agents={"dirs": [str(agents)], "bundled": False},
        http={"port": 0},
    )


async def test_message_events_and_breaker_through_the_real_kernel(config):
    from roost.plugins.http import open_daemon

    async with open_kernel(config) as kernel, open_daemon(kernel, graceful_timeout=1) as url:
        async with httpx.AsyncClient(base_url=url, timeout=10) as client:
            health = await client.get("/health")
            agents = await client.get("/api/agents")
            async with open_websocket_url(
                url.replace("http", "ws") + "/api/events?kinds=AGENT:REPLY"
            ) as ws:
                reply = await client.post("/api/agents/pinger/message", json={"message": "hi"})
                with trio.fail_after(5):
                    event = json.loads(await ws.get_message())
            deep = await client.post(
                "/api/agents/pinger/message",
                json={"message": "hi"},
                headers={"X-Roost-Trace-Depth": "5", "X-Roost-Trace-Path": "a,b,c,d,e"},
            )
            unknown = await client.post("/api/agents/ghost/message", json={"message": "hi"})
    assert health.json()["agents"] == 1
    assert [a["name"] for a in agents.json()["agents"]] == ["pinger"]
    assert reply.status_code == 200
    assert reply.json()["reply"] == "pong: hi"
    assert event["kind"] == "AGENT:REPLY"
    assert event["trace"]["trace_id"] == reply.json()["trace_id"]
    assert deep.status_code == 508
    assert deep.json()["error"]["code"] == "recursion_limit"
    assert unknown.status_code == 404
    assert "pinger" in unknown.json()["error"]["message"]


async def test_agents_endpoint_reports_token_usage_per_agent(config):
    from roost.plugins.http import open_daemon

    async with open_kernel(config) as kernel, open_daemon(kernel, graceful_timeout=1) as url:
        async with httpx.AsyncClient(base_url=url, timeout=10) as client:
            before = (await client.get("/api/agents/pinger")).json()["usage"]
            await client.post("/api/agents/pinger/message", json={"message": "one two three"})
            after = (await client.get("/api/agents")).json()["agents"][0]["usage"]
    assert before == {"input_tokens": 0, "output_tokens": 0, "requests": 0}
    assert after["requests"] == 1 and after["input_tokens"] > 0 and after["output_tokens"] > 0


async def test_a_message_reply_carries_the_agents_artifacts(config):
    from roost.plugins.http import open_daemon

    async with open_kernel(config) as kernel, open_daemon(kernel, graceful_timeout=1) as url:
        async with httpx.AsyncClient(base_url=url, timeout=10) as client:
            async with open_websocket_url(
                url.replace("http", "ws") + "/api/events?kinds=AGENT:REPLY"
            ) as ws:
                made = await client.post("/api/agents/pinger/message", json={"message": "make it"})
                with trio.fail_after(5):
                    event = json.loads(await ws.get_message())
            plain = await client.post("/api/agents/pinger/message", json={"message": "hi"})
    body = made.json()
    assert made.status_code == 200 and body["reply"] == "made"
    blob, facts = body["artifacts"]
    assert blob["name"] == "blob" and blob["parts"] == [
        {"raw": "QUI=", "filename": "out.bin", "mediaType": "application/octet-stream"}
    ]
    assert facts["parts"] == [{"data": {"ok": True}}]
    assert "artifacts" not in plain.json()
    # The event stream describes the files; it does not carry them.
    (part,) = event["payload"]["outputs"][0]["parts"]
    assert part["raw"] == "<2 bytes>"


async def _first_get_agent_seconds(tmp_path, count: int) -> float:
    """CPU seconds of the first ``GET /api/agents/a0`` on a daemon with ``count`` agents that
    may each call ``read`` (so each has a tool list to work out)."""
    import time

    from roost.kernel import parse_manifest
    from roost.plugins.http import open_daemon

    manifests = [
        parse_manifest({"name": f"a{i}", "description": "x", "capabilities": {"tools": ["read"]}})
        for i in range(count)
    ]
    config = default_config(home=str(tmp_path / f"home{count}"), agents={"bundled": False})
    async with open_kernel(config, agents=manifests) as kernel:
        async with (
            open_daemon(kernel, graceful_timeout=1) as url,
            httpx.AsyncClient(base_url=url) as client,
        ):
            start = time.process_time()  # the daemon runs here: others' load does not count
            reply = await client.get("/api/agents/a0", timeout=120)
            seconds = time.process_time() - start
    assert reply.status_code == 200 and reply.json()["tools"] == ["read"]
    return seconds


async def test_get_one_agent_does_not_describe_every_agent(tmp_path):
    """``GET /api/agents/{name}`` worked out every agent's tool list (each against every
    tool) and kept one: 46 s with 10,000 agents. Twice the agents must not take four
    times as long."""
    await _first_get_agent_seconds(tmp_path, 10)  # warm up
    small = min([await _first_get_agent_seconds(tmp_path / f"s{i}", 600) for i in range(2)])
    large = min([await _first_get_agent_seconds(tmp_path / f"l{i}", 1200) for i in range(2)])
    assert large / small < 2.8, f"2x the agents took {large / small:.1f}x as long"


async def _first_call_seconds(tmp_path, count: int, method: str, path: str, body=None) -> float:
    """CPU seconds of the first ``method path`` on a daemon with ``count`` agents that each
    expose ``read`` (so each has an exposed tool list to work out)."""
    import time

    from roost.kernel import parse_manifest
    from roost.plugins.http import open_daemon

    manifests = [
        parse_manifest({"name": f"a{i}", "description": "x", "mcp": {"expose_tools": ["read"]}})
        for i in range(count)
    ]
    config = default_config(home=str(tmp_path / f"home{count}"), agents={"bundled": False})
    headers = {"Accept": "application/json, text/event-stream"}
    async with open_kernel(config, agents=manifests) as kernel:
        async with (
            open_daemon(kernel, graceful_timeout=1) as url,
            httpx.AsyncClient(base_url=url, headers=headers) as client,
        ):
            if path == "/mcp":  # a session first
                init = {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "t", "version": "1"},
                }
                reply = await client.post(
                    "/mcp", json={"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": init}
                )
                headers = {
                    "Mcp-Session-Id": reply.headers["mcp-session-id"],
                    "MCP-Protocol-Version": "2025-06-18",
                }
                await client.post(
                    "/mcp",
                    json={"jsonrpc": "2.0", "method": "notifications/initialized"},
                    headers=headers,
                )
            start = time.process_time()  # the daemon runs here: others' load does not count
            reply = await client.request(method, path, json=body, headers=headers, timeout=120)
            seconds = time.process_time() - start
    assert reply.status_code == 200, reply.text
    return seconds


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/a2a/agents", None),
        ("POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
    ],
    ids=["a2a-agents", "mcp-tools-list"],
)
async def test_listing_every_agent_is_linear(tmp_path, method, path, body):
    """Each agent's exposed tools were picked out of the whole registry, which holds an
    ``agent_<name>`` tool per agent: ``GET /a2a/agents`` and the host's ``tools/list``
    took 19 s each with 10,000 agents. Twice the agents must not take four times as long."""
    await _first_call_seconds(tmp_path / "w", 10, method, path, body)  # warm up
    small = min(
        [await _first_call_seconds(tmp_path / f"s{i}", 600, method, path, body) for i in range(2)]
    )
    large = min(
        [await _first_call_seconds(tmp_path / f"l{i}", 1200, method, path, body) for i in range(2)]
    )
    assert large / small < 2.8, f"2x the agents took {large / small:.1f}x as long"
