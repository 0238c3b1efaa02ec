"""Drive a real kernel whose agent thinks with a real provider against a fake vendor."""

from __future__ import annotations

from roost.kernel import (
    Tool,
    ToolResult,
    ToolSpec,
    default_config,
    hookimpl,
    open_kernel,
    parse_manifest,
)

NOTES = "the launch code is 4242\n"


class FakeMcpTools:
    """Registers ``mcp_x_lookup``: what an MCP server's tool looks like in the registry."""

    def __init__(self) -> None:
        self.calls: list[dict] = []

    @hookimpl
    def roost_tools(self, config):
        async def lookup(call, ctx):
            self.calls.append(dict(call.arguments))
            return ToolResult.text(f"lookup({call.arguments.get('key')}) = blue")

        schema = {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]}
        spec = ToolSpec(
            "mcp_x_lookup", "look a key up", schema, owner="mcp:x", original_name="lookup"
        )
        return [Tool(spec, lookup)]


def manifest(provider: str, model: str = "test-model", *, max_turns: int = 10, parameters=None):
    return parse_manifest(
        {
            "name": "worker",
            "description": "an agent driven by a real provider",
            "system_prompt": "You are terse.",
            "model": {"provider": provider, "name": model, "parameters": parameters or {}},
            "capabilities": {"tools": ["read", "mcp_x_*"]},
            "limits": {"max_turns": max_turns},
        }
    )


async def run_agent(
    tmp_path, provider: str, settings: dict, message: str, *, stream: bool = False, **manifest_kw
):
    """Boot a kernel with one agent on ``provider`` and send it ``message``; (reply, tools)."""
    home = tmp_path / "home"
    workspace = home / "workspaces" / "worker"
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / "notes.txt").write_text(NOTES)
    config = default_config(home=home, agents={"bundled": False}, providers={provider: settings})
    tools = FakeMcpTools()
    async with open_kernel(
        config, agents=[manifest(provider, **manifest_kw)], plugins=[tools]
    ) as kernel:
        assert "worker" not in kernel.agent_errors, kernel.agent_errors
        reply = await kernel.send("worker", message, stream=stream, timeout=20)
        usage = await _usage(kernel)
    return reply, tools, usage


async def _usage(kernel):
    return (await kernel.store.usage_by_agent()).get("worker")
