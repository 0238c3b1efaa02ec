"""Helpers for roost's MCP server tests: tools, agents (imported by conftest and tests)."""

from __future__ import annotations

import trio
from roost.kernel import Tool, ToolResult, ToolSpec, hookimpl, parse_manifest
from roost.plugins.mcp import report_log, report_progress

ECHO_SCHEMA = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
# initialize's params from a 2025-11-25 client, and the request carrying them (id 1).
INIT_PARAMS = {
    "protocolVersion": "2025-11-25",
    "capabilities": {},
    "clientInfo": {"name": "t", "version": "1"},
}
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INIT_PARAMS}


class McpTestTools:
    """Tools for the MCP tests: exposed, private, slow, progress-reporting."""

    def __init__(self) -> None:
        self.sleepy_cancelled = trio.Event()
        self.sleepy_started = trio.Event()

    @hookimpl
    def roost_tools(self, config):
        async def echo(call, ctx):
            return ToolResult.text(f"echo:{call.arguments['text']}:{ctx.agent}")

        async def secret(call, ctx):
            return ToolResult.text("the launch codes")

        async def shared(call, ctx):
            return ToolResult.text(f"shared from {ctx.agent}")

        async def sleepy(call, ctx):
            self.sleepy_started.set()
            try:
                await trio.sleep_forever()
            except trio.Cancelled:
                self.sleepy_cancelled.set()
                raise

        async def steps(call, ctx):
            for i in range(1, 4):
                report_progress(ctx, i, 3, f"step {i}")
                report_log(ctx, "info", f"did step {i}")
                await trio.sleep(0)
            return ToolResult.text("3 steps done")

        return [
            Tool(ToolSpec("echo", "Echo text back", ECHO_SCHEMA, owner="mcptest"), echo),
            Tool(ToolSpec("secret", "Private", owner="mcptest"), secret),
            Tool(ToolSpec("shared", "Exposed by two agents", owner="mcptest"), shared),
            Tool(ToolSpec("sleepy", "Sleeps", owner="mcptest", timeout_s=3600), sleepy),
            Tool(ToolSpec("steps", "Reports progress", owner="mcptest"), steps),
        ]


def make_agent(
    name, *, expose=(), private=(), tools=(), rules=(), default_reply="{agent}:{message}", prompt=""
):
    data = {
        "name": name,
        "description": f"test agent {name}",
        "model": {
            "provider": "scripted",
            "script": {"rules": list(rules), "default_reply": default_reply},
        },
        "capabilities": {"tools": list(tools)},
        "mcp": {"expose_tools": list(expose), "private_tools": list(private)},
    }
    if prompt:
        data["system_prompt"] = prompt
    return parse_manifest(data)


def standard_agents():
    return [
        make_agent(
            "alpha",
            expose=["echo", "secret", "shared", "sleepy", "steps"],
            private=["secret"],
            tools=["agent_beta", "echo"],
            rules=[
                {
                    "match": "^ask beta (.*)",
                    "steps": [{"tool": "agent_beta", "arguments": {"message": "{message}"}}],
                    "reply": "beta said {result}",
                }
            ],
            prompt="You are alpha.",
        ),
        make_agent("beta", expose=["shared"], tools=["agent_alpha"], prompt="You are beta."),
    ]
