"""roost as an A2A client of other agents: an HTTP-level refusal (any status, any body)
fails the call at once naming the status and, for 401/403, what to configure; 429/503
are retried after ``Retry-After``; an external agent that is down at boot is looked up
again until it appears, and its state is visible (API and ``roost agents``). Real peers on
127.0.0.1: a stub server process (tests/fixtures/peer_stub.py) and a real roost daemon."""

from __future__ import annotations

import io
import socket
import sys
import time
from pathlib import Path

import httpx
import pytest
import trio
from a2a_helpers import make_config, serve, write_agent
from roost.kernel import EventKind, ToolCall, default_config, open_kernel
from roost.plugins.a2a import A2AClient, A2AError, _external
from roost.plugins.a2a import _models as m
from waiting import wait_until

sys.path.insert(0, str(Path(__file__).parents[2] / "fixtures"))
from peer_stub import running_stub  # noqa: E402

REFUSALS = [
    (500, "html", "HTTP 500 Internal Server Error: 500 Stub Error the stub broke"),
    (403, "rest", "HTTP 403 Forbidden: stub refuses with 403"),
    (404, "empty", "HTTP 404 Not Found"),
    (401, "jsonrpc", "HTTP 401 Unauthorized: stub refuses with 401"),
    (502, "rest", "HTTP 502 Bad Gateway: stub refuses with 502"),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def caller_config(tmp_path, externals, **extra):
    agents = tmp_path / "caller-agents"
    write_agent(agents, "caller", [], tools=["a2a_*"], default_reply="{message}")
    return default_config(
        home=str(tmp_path / "caller-home"),
        agents={"dirs": [str(agents)], "bundled": False},
        a2a={"external_agents": externals},
        **extra,
    )


@pytest.mark.parametrize("status, body, expected", REFUSALS)
async def test_an_http_error_fails_an_a2a_call_at_once_naming_the_status(status, body, expected):
    async with running_stub(fail_status=status, fail_body=body) as url:
        async with A2AClient(allow_loopback=True, timeout=60) as client:
            info = await client.discover(url)
            with trio.fail_after(5), pytest.raises(A2AError) as sent:
                await client.send(info, "hi")
            with trio.fail_after(5), pytest.raises(A2AError) as streamed:
                async for _event in client.stream(info, "hi"):
                    pass
    for error in (sent.value, streamed.value):
        assert expected in error.message and "<h1>" not in error.message
        assert error.peer_status == status


async def test_an_a2a_call_answered_429_with_retry_after_is_retried_and_succeeds():
    async with running_stub(
        fail_status=429, fail_body="rest", fail_count=2, retry_after="1"
    ) as url:
        async with A2AClient(allow_loopback=True, timeout=60) as client:
            info = await client.discover(url)
            start = time.monotonic()
            with trio.fail_after(15):
                reply = await client.send(info, "patience")
            took = time.monotonic() - start
    assert isinstance(reply, m.Message) and reply.text() == "stub got: patience"
    assert 2.0 <= took < 10  # two refusals, each waited out for its Retry-After: 1


async def test_a_retry_after_past_the_deadline_is_not_waited_for():
    async with running_stub(fail_status=503, fail_body="html", retry_after="120") as url:
        async with A2AClient(allow_loopback=True, timeout=60) as client:
            info = await client.discover(url)
            with trio.fail_after(5), pytest.raises(A2AError) as info_error:
                await client.send(info, "hi")
    assert "HTTP 503 Service Unavailable" in info_error.value.message


async def test_an_external_agent_that_starts_late_gets_its_tool(tmp_path, monkeypatch):
    # A faster first retry than 1 s; the old code stopped after three attempts (~1.4 s here).
    monkeypatch.setattr(_external, "DISCOVERY_BACKOFF_S", 0.2)
    monkeypatch.setattr(_external, "DISCOVERY_BACKOFF_MAX_S", 0.5, raising=False)
    from roost.plugins.cli._commands import agents_command
    from roost.plugins.http import open_daemon

    port = free_port()
    config = caller_config(
        tmp_path, [{"name": "late", "url": f"http://127.0.0.1:{port}"}], http={"port": 0}
    )
    async with open_kernel(config) as kernel, open_daemon(kernel, graceful_timeout=1) as api:
        async with httpx.AsyncClient(base_url=api, timeout=10) as http:

            async def failed(after_attempts=1):
                (late,) = (await http.get("/api/a2a/external_agents")).json()["external_agents"]
                return (
                    late
                    if late["status"] == "failed" and late["attempts"] >= after_attempts
                    else None
                )

            late = await wait_until(failed, "the first discovery failed")
            out = io.StringIO()
            await agents_command(config, as_json=False, out=out, err=io.StringIO())
            # The peer comes up only after a fourth attempt failed (more than the old code made).
            await wait_until(lambda: failed(4), "a fourth discovery attempt failed")
            async with kernel.tap.subscribe(kinds=[EventKind.KERNEL_TOOLS_CHANGED]) as events:
                async with running_stub(port):
                    with trio.fail_after(15):
                        async for event in events:
                            if "a2a_late" in event.payload.get("added", ()):
                                break
                    reply = await kernel.call_tool(
                        "caller", ToolCall("a2a_late", {"message": "found you"})
                    )
                    (found,) = (await http.get("/api/a2a/external_agents")).json()[
                        "external_agents"
                    ]
    assert "cannot reach" in late["error"] and late["next_retry_at"] is not None
    pending = [line for line in out.getvalue().splitlines() if line.startswith("pending:")]
    assert (
        len(pending) == 1
        and "A2A agent late" in pending[0]
        and "is failed: cannot reach" in pending[0]
    )
    assert reply.as_text() == "stub got: found you"
    assert found["status"] == "connected" and found["tool"] == "a2a_late" and found["attempts"] >= 4


async def test_an_external_agent_that_wants_a_key_we_lack_fails_at_once_and_headers_fix_it(
    tmp_path,
):
    key = "peer-test-key-123"
    async with serve(make_config(tmp_path, http={"api_key": key})) as (_b, b_url):
        externals = [
            {"name": "nokey", "url": f"{b_url}/a2a/agents/echo"},
            {
                "name": "withkey",
                "url": f"{b_url}/a2a/agents/echo",
                "headers": {"Authorization": f"Bearer {key}"},
            },
        ]
        async with open_kernel(caller_config(tmp_path, externals)) as kernel:
            await wait_until(
                lambda: "a2a_nokey" in kernel.registry and "a2a_withkey" in kernel.registry,
                "both tools",
                timeout=15,
            )
            with trio.fail_after(2):
                refused = await kernel.call_tool("caller", ToolCall("a2a_nokey", {"message": "hi"}))
            allowed = await kernel.call_tool("caller", ToolCall("a2a_withkey", {"message": "hi"}))
    assert refused.is_error
    assert "HTTP 401 Unauthorized" in refused.as_text() and "Authorization" in refused.as_text()
    assert "headers = { Authorization" in refused.as_text() and "'nokey'" in refused.as_text()
    assert allowed.as_text() == "echo: hi"
