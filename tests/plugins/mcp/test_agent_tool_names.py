"""One name per agent on every surface: ``agent_<name>`` (lowercase, ``-`` → ``_``) in-host,
on the MCP host surface (``/mcp`` and ``roost mcp``), and a misspelt agent tool names the
right spelling.

What broke: the agent ``code-reviewer`` was ``agent_code_reviewer`` in-host but
``roost_agent_code-reviewer`` over MCP, and the in-host spelling over MCP was "unknown tool".
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import trio
from mcp_server_fixtures import INIT_PARAMS, INITIALIZE, make_agent
from roost.kernel import ToolCall, default_config, open_kernel, parse_manifest
from roost.plugins.mcp import McpServer
from roost.plugins.mcp import _protocol as p
from roost.plugins.mcp.transports.memory import memory_pair, serve_memory

ROOST = Path(sys.executable).parent / "roost"


def agents():
    return [
        make_agent("code-reviewer", default_reply="reviewed: {message}"),
        make_agent(
            "lead",
            tools=["agent_code_reviewer"],
            rules=[
                {
                    "match": "^review (.*)",
                    "steps": [
                        {"tool": "agent_code_reviewer", "arguments": {"message": "{message}"}}
                    ],
                    "reply": "{result}",
                }
            ],
        ),
    ]


@pytest.fixture
async def kernel(tmp_path):
    async with open_kernel(
        default_config(home=tmp_path / "home", agents={"bundled": False}), agents=agents()
    ) as k:
        yield k


async def ask(end, request_id, method, params=None):
    message = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        message["params"] = params
    await end.send(message)
    with trio.fail_after(10):
        while True:
            reply = await end.receive()
            if reply.get("id") == request_id and "method" not in reply:
                return reply


async def test_an_agent_has_the_same_tool_name_in_host_and_over_mcp(kernel):
    in_host = [s.name for s in kernel.list_tools("lead")]
    assert "agent_code_reviewer" in in_host
    assert (await kernel.send("lead", "review x", timeout=10)).text == "reviewed: review x"
    async with trio.open_nursery() as nursery:
        client, server_end = memory_pair()
        nursery.start_soon(serve_memory, McpServer(kernel), server_end)
        await ask(client, 1, "initialize", INIT_PARAMS)
        listed = [t["name"] for t in (await ask(client, 2, "tools/list"))["result"]["tools"]]
        assert sorted(n for n in listed if n.startswith("agent_")) == [
            "agent_code_reviewer",
            "agent_lead",
        ]
        called = await ask(
            client, 3, "tools/call", {"name": "agent_code_reviewer", "arguments": {"message": "hi"}}
        )
        assert called["result"]["content"][0]["text"] == "reviewed: hi"
        initialized = await ask(
            client,
            4,
            "server/discover",
            p.with_meta({}, p.stateless_meta({"name": "t", "version": "1"})),
        )
        assert "agent_{name}" in initialized["result"]["instructions"]
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize(
    "wrong",
    [
        "roost_agent_code-reviewer",
        "roost_agent_code_reviewer",
        "agent_code-reviewer",
        "Agent_Code_Reviewer",
        "code-reviewer",
    ],
)
async def test_a_misspelt_agent_tool_over_mcp_names_the_right_spelling(kernel, wrong):
    async with trio.open_nursery() as nursery:
        client, server_end = memory_pair()
        nursery.start_soon(serve_memory, McpServer(kernel), server_end)
        await ask(client, 1, "initialize", INIT_PARAMS)
        reply = await ask(client, 2, "tools/call", {"name": wrong, "arguments": {"message": "hi"}})
        assert reply["error"]["code"] == -32602
        assert (
            f"unknown tool: {wrong}; did you mean agent_code_reviewer?" in reply["error"]["message"]
        )
        nursery.cancel_scope.cancel()


async def test_a_misspelt_agent_tool_in_host_names_the_right_spelling(kernel):
    result = await kernel.call_tool(
        "lead", ToolCall("roost_agent_code-reviewer", {"message": "hi"})
    )
    assert result.is_error and "did you mean agent_code_reviewer?" in result.as_text()


async def test_an_unavailable_agent_over_mcp_says_why(tmp_path, monkeypatch):
    # What broke: it was "unknown tool" (the agent is configured; it cannot answer).
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    keyless = parse_manifest(
        {
            "name": "gpt-helper",
            "description": "d",
            "model": {"provider": "openai", "name": "gpt-4o-mini"},
        }
    )
    config = default_config(home=tmp_path / "home", agents={"bundled": False})
    async with open_kernel(config, agents=[keyless]) as kernel, trio.open_nursery() as nursery:
        client, server_end = memory_pair()
        nursery.start_soon(serve_memory, McpServer(kernel), server_end)
        await ask(client, 1, "initialize", INIT_PARAMS)
        reply = await ask(
            client, 2, "tools/call", {"name": "agent_gpt_helper", "arguments": {"message": "hi"}}
        )
        assert reply["error"]["data"]["code"] == "agent_unavailable"
        assert (
            "agent 'gpt-helper' is unavailable: provider 'openai' needs "
            "an API key: set OPENAI_API_KEY" in reply["error"]["message"]
        )
        nursery.cancel_scope.cancel()


async def test_roost_mcp_over_stdio_names_agents_the_same_way(tmp_path):
    if not ROOST.exists():
        pytest.skip("the roost console script is not installed (make install)")
    manifest = tmp_path / "agents" / "code-reviewer" / "agent.json"
    manifest.parent.mkdir(parents=True)
    manifest.write_text(
        json.dumps(
            {
                "name": "code-reviewer",
                "description": "reviews",
                "model": {"provider": "scripted", "script": {"default_reply": "ok: {message}"}},
            }
        )
    )
    config = tmp_path / "roost.toml"
    config.write_text(
        f'home = "{tmp_path / "home"}"\n[agents]\ndirs = ["{tmp_path / "agents"}"]\n'
        "bundled = false\n"
    )
    lines = [
        INITIALIZE,
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "tools/call",
            "params": {"name": "agent_code_reviewer", "arguments": {"message": "hi"}},
        },
    ]
    stdin = "".join(json.dumps(line) + "\n" for line in lines).encode()
    with trio.fail_after(60):
        done = await trio.run_process(
            [str(ROOST), "mcp", "--no-daemon", "--config", str(config)],
            stdin=stdin,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    replies = {r.get("id"): r for r in map(json.loads, done.stdout.decode().splitlines())}
    assert [t["name"] for t in replies[2]["result"]["tools"]] == ["agent_code_reviewer"]
    assert replies[3]["result"]["content"][0]["text"] == "ok: hi"
