"""roost as an MCP client of another server over HTTP never waits out a timeout because
of an HTTP-level error: a refusal with any body fails the call at once naming the status
(and, for 401/403, what to configure), 429/503 are retried after ``Retry-After``, and a
server that starts late is still found. Real peers on 127.0.0.1: a stub server process
(tests/fixtures/peer_stub.py) and real ``roost run`` daemons."""

from __future__ import annotations

import socket
import sys
import time
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio
from roost.kernel import EventKind, ToolCall, default_config, open_kernel, parse_manifest
from roost.plugins.mcp import _manager
from roost.plugins.mcp._client import ClientOptions, McpProtocolError, open_mcp_client
from roost.plugins.mcp._client_plugin import manager_for
from roost.plugins.mcp.transports.http import open_http_transport
from roost.plugins.mcp.transports.sse import open_sse_transport
from test_cross_process import ROOST, start_daemon, stop, write_agent
from waiting import wait_until

sys.path.insert(0, str(Path(__file__).parents[2] / "fixtures"))
from peer_stub import running_stub  # noqa: E402

TIMEOUT = 60.0  # the server's configured timeout: no test may come near it


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def caller_agent(tools=("mcp_*", "a2a_*")):
    return parse_manifest(
        {
            "name": "caller",
            "description": "calls peers",
            "model": {
                "provider": "scripted",
                "script": {"rules": [], "default_reply": "{message}"},
            },
            "capabilities": {"tools": list(tools)},
        }
    )


def server_entry(name: str, url: str, **transport) -> dict:
    return {
        "name": name,
        "timeout_secs": TIMEOUT,
        "allow_local": True,
        "transport": {"type": "http", "url": url, **transport},
    }


@asynccontextmanager
async def stub_client(**stub):
    """A 2025-11-25 MCP client over Streamable HTTP of a ``running_stub(**stub)``."""
    async with running_stub(**stub) as url:
        async with open_http_transport(
            url + "/mcp", allow_loopback=True, timeout_secs=TIMEOUT
        ) as transport:
            options = ClientOptions(protocol="2025-11-25", timeout_secs=TIMEOUT)
            async with open_mcp_client(transport, options) as client:
                yield client


# ---- a refusal fails the call at once ------------------------------------------------------


REFUSALS = [
    (500, "html", "HTTP 500 Internal Server Error: 500 Stub Error the stub broke"),
    (403, "rest", "HTTP 403 Forbidden: stub refuses with 403"),
    (404, "empty", "HTTP 404 Not Found"),
    (401, "jsonrpc", "HTTP 401 Unauthorized: stub refuses with 401"),
    (502, "rest", "HTTP 502 Bad Gateway: stub refuses with 502"),
]


@pytest.mark.parametrize("status, body, expected", REFUSALS)
async def test_an_http_error_on_a_call_fails_it_at_once_naming_the_status(status, body, expected):
    # The handshake (initialize, notifications/initialized) passes; the call is refused.
    async with stub_client(fail_status=status, fail_body=body, fail_from=3) as client:
        with trio.fail_after(5), pytest.raises(McpProtocolError) as info:
            await client.call_tool("echo", {"text": "hi"})
    message = str(info.value)
    assert expected in message and "<h1>" not in message
    assert info.value.data["httpStatus"] == status
    assert ("transport.headers" in message) == (status in (401, 403))


@pytest.mark.parametrize("status, body, expected", REFUSALS[:3])
async def test_an_http_error_on_a_legacy_sse_call_fails_it_at_once_naming_the_status(
    status, body, expected
):
    async with running_stub(fail_status=status, fail_body=body, fail_from=3) as url:
        async with open_sse_transport(
            url + "/sse", allow_loopback=True, timeout_secs=TIMEOUT
        ) as transport:
            options = ClientOptions(protocol="2024-11-05", timeout_secs=TIMEOUT)
            async with open_mcp_client(transport, options) as client:
                with trio.fail_after(5), pytest.raises(McpProtocolError) as info:
                    await client.call_tool("echo", {"text": "hi"})
    assert expected in str(info.value) and info.value.data["httpStatus"] == status


@pytest.mark.parametrize("body", ["rest", "html"])
async def test_a_refused_initialize_fails_the_connection_at_once(body):
    async with running_stub(fail_status=503, fail_body=body, retry_after="120") as url:
        start = time.monotonic()
        with trio.fail_after(5), pytest.raises(McpProtocolError) as info:
            async with open_http_transport(
                url + "/mcp", allow_loopback=True, timeout_secs=TIMEOUT
            ) as transport:
                async with open_mcp_client(transport, ClientOptions(timeout_secs=TIMEOUT)):
                    pass
    # Retry-After: 120 would end past the 60 s deadline: not waited for.
    assert "HTTP 503 Service Unavailable" in str(info.value) and time.monotonic() - start < 5


# ---- 429 / 503 are retried after Retry-After -----------------------------------------------


@pytest.mark.parametrize("body", ["rest", "jsonrpc"])
async def test_a_call_answered_429_with_retry_after_is_retried_and_succeeds(body):
    async with stub_client(
        fail_status=429, fail_body=body, fail_from=3, fail_count=2, retry_after="1"
    ) as client:
        start = time.monotonic()
        with trio.fail_after(15):
            result = await client.call_tool("echo", {"text": "again"})
        took = time.monotonic() - start
    assert result["content"][0]["text"] == "echo:again"
    assert 2.0 <= took < 10  # two refusals, each waited out for its Retry-After: 1


async def test_a_retry_after_past_the_calls_deadline_fails_at_once():
    async with stub_client(
        fail_status=429, fail_body="rest", fail_from=3, retry_after="30"
    ) as client:
        with trio.fail_after(5), pytest.raises(McpProtocolError) as info:
            await client.call_tool("echo", {"text": "x"}, timeout=10)
    assert "HTTP 429 Too Many Requests: stub refuses with 429" in str(info.value)


# ---- a server that starts late is found --------------------------------------------------


async def test_an_mcp_http_server_that_starts_late_is_found(tmp_path, monkeypatch):
    # A fast schedule stands in for 1 s → 60 s: the old code gave up after 8 quick failures.
    monkeypatch.setattr(_manager, "BACKOFF_BASE_S", 0.05)
    monkeypatch.setattr(_manager, "BACKOFF_MAX_S", 0.05)
    port = free_port()
    config = default_config(
        home=tmp_path / "home",
        agents={"bundled": False},
        mcp_servers=[server_entry("late", f"http://127.0.0.1:{port}/mcp")],
    )
    async with open_kernel(config, agents=[caller_agent()]) as kernel:
        manager = manager_for(kernel)
        state = manager.states["late"]
        await wait_until(lambda: state.restarts >= 12, "12 failed connection attempts", timeout=20)
        entry = manager.status()["configured"][0]
        assert entry["status"] in ("failed", "connecting") and "cannot reach" in entry["error"]
        async with kernel.tap.subscribe(kinds=[EventKind.KERNEL_TOOLS_CHANGED]) as events:
            async with running_stub(port):
                with trio.fail_after(20):
                    async for event in events:
                        if "mcp_late_echo" in event.payload.get("added", ()):
                            break
                result = await kernel.call_tool(
                    "caller", ToolCall("mcp_late_echo", {"text": "found"})
                )
                assert manager.status()["configured"][0]["status"] == "connected"
    assert result.as_text() == "echo:found"


# ---- two roost daemons ------------------------------------------------------------------


def run_daemon_b(tmp_path_factory, folder: str, http_settings: str = ""):
    """A real ``roost run`` with one agent b1 and ``http_settings`` (lines of its [http]
    table); yields its URL, stopped after."""
    if not Path(ROOST).exists():
        pytest.skip("the roost console script is not installed (run make install)")
    root = tmp_path_factory.mktemp(folder)
    write_agent(root / "agents", "b1", default_reply="b1 got: {message}")
    proc, url = start_daemon(root, free_port(), http_settings)
    yield url
    stop(proc)


@pytest.fixture(scope="module")
def daemon_b(tmp_path_factory):
    """B with rate limits as configured by default."""
    yield from run_daemon_b(tmp_path_factory, "b")


@pytest.fixture(scope="module")
def throttled_daemon_b(tmp_path_factory):
    """B throttling this host too (20/s, burst 40): a 120-call fan-out meets 429s."""
    limits = "rate_limit_loopback = true\nrate_limit_per_s = 20\nrate_limit_burst = 40\n"
    yield from run_daemon_b(tmp_path_factory, "throttled", limits)


@pytest.fixture(scope="module")
def keyed_daemon_b(tmp_path_factory):
    """B requiring an API key."""
    yield from run_daemon_b(tmp_path_factory, "keyed", 'api_key = "peer-test-key-123"\n')


@pytest.mark.parametrize("b", ["daemon_b", "throttled_daemon_b"])
async def test_a_sixty_call_fan_out_to_another_daemon_over_mcp_and_a2a_waits_out_no_timeout(
    tmp_path, request, b
):
    daemon_b = request.getfixturevalue(b)
    config = default_config(
        home=tmp_path / "home",
        agents={"bundled": False},
        mcp_servers=[server_entry("b", f"{daemon_b}/agents/b1/mcp")],
        a2a={"external_agents": [{"name": "b1", "url": f"{daemon_b}/a2a/agents/b1"}]},
    )
    durations: list[float] = []
    results = []
    async with open_kernel(config, agents=[caller_agent()]) as kernel:
        await wait_until(
            lambda: "mcp_b_message" in kernel.registry and "a2a_b1" in kernel.registry,
            "both tools",
            timeout=30,
        )

        async def call(tool: str, i: int) -> None:
            start = time.monotonic()
            results.append(await kernel.call_tool("caller", ToolCall(tool, {"message": f"m{i}"})))
            durations.append(time.monotonic() - start)

        with trio.fail_after(45):  # well under the 60 s a stuck call would wait
            async with trio.open_nursery() as nursery:
                for i in range(60):
                    nursery.start_soon(call, "mcp_b_message", i)
                    nursery.start_soon(call, "a2a_b1", i)
    errors = [r.as_text() for r in results if r.is_error]
    assert not errors, errors[:3]
    assert len(results) == 120 and max(durations) < 30
    assert sum("b1 got: m" in r.as_text() for r in results) == 120


async def test_a_daemon_that_requires_a_key_we_lack_is_refused_at_once_and_says_so(
    tmp_path, keyed_daemon_b
):
    url = f"{keyed_daemon_b}/agents/b1/mcp"
    # The session: refused at once, naming the status, the server's words and the fix.
    with trio.fail_after(2), pytest.raises(McpProtocolError) as info:
        async with open_http_transport(url, allow_loopback=True, timeout_secs=TIMEOUT) as transport:
            async with open_mcp_client(transport, ClientOptions(timeout_secs=TIMEOUT)):
                pass
    assert "HTTP 401 Unauthorized" in str(info.value) and "Authorization" in str(info.value)
    assert "transport.headers" in str(info.value)
    # The manager says failed, with that reason — and connects once the key is configured.
    servers = [
        server_entry("nokey", url),
        server_entry("withkey", url, headers={"Authorization": "Bearer peer-test-key-123"}),
    ]
    config = default_config(home=tmp_path / "home", agents={"bundled": False}, mcp_servers=servers)
    async with open_kernel(config, agents=[caller_agent()]) as kernel:
        manager = manager_for(kernel)
        await wait_until(
            lambda: (
                manager.states["nokey"].status == "failed"
                and "mcp_withkey_message" in kernel.registry
            ),
            "nokey failed and withkey connected",
        )
        status = {s["name"]: s for s in manager.status()["configured"]}
        reply = await kernel.call_tool(
            "caller", ToolCall("mcp_withkey_message", {"message": "with the key"})
        )
    assert (
        "HTTP 401 Unauthorized" in status["nokey"]["error"]
        and "transport.headers" in status["nokey"]["error"]
    )
    assert status["nokey"]["next_retry_at"] > time.time() - 5
    assert status["withkey"]["status"] == "connected"
    assert "b1 got: with the key" in reply.as_text()
