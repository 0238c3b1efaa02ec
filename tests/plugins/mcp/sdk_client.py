"""Drive roost's MCP server with the official ``mcp`` SDK client (run in a subprocess).

Usage: python sdk_client.py (URL | stdio:<roost-exe>:<config>) MODE [PRIVATE_TOOL [make]]
MODE is ``legacy`` (initialize handshake) or ``2026-07-28`` (stateless). Prints one JSON
object describing what the SDK saw; exits non-zero on an unexpected failure.
"""

from __future__ import annotations

import asyncio
import json
import sys


async def main(target: str, mode: str, private_tool: str = "read", make: str = "") -> dict:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters
    from mcp.shared.exceptions import MCPError

    if target.startswith("stdio:"):
        _, exe, config = target.split(":", 2)
        server = StdioServerParameters(
            command=exe, args=["mcp", "--no-daemon"], env={"ROOST_CONFIG": config}
        )
    else:
        server = target
    out: dict = {}
    progress: list = []
    async with Client(server, mode=mode, read_timeout_seconds=30) as client:
        out["protocol_version"] = client.protocol_version
        out["server_name"] = client.server_info.name if client.server_info else None
        tools = await client.list_tools()
        out["tools"] = sorted(t.name for t in tools.tools)
        answer = await client.call_tool("agent_alpha", {"message": "hello from the SDK"})
        out["answer"] = [c.text for c in answer.content if getattr(c, "type", "") == "text"]
        out["answer_is_error"] = bool(answer.is_error)
        try:
            private = await client.call_tool(private_tool, {"path": "x"})
            out["private"] = {
                "is_error": bool(private.is_error),
                "text": [getattr(c, "text", "") for c in private.content],
            }
        except MCPError as exc:
            out["private"] = {"error_code": exc.error.code, "message": exc.error.message}
        resources = await client.list_resources()
        out["resources"] = sorted(str(r.uri) for r in resources.resources)
        card = await client.read_resource("roost://agents/alpha/card")
        out["card"] = json.loads(card.contents[0].text)
        prompts = await client.list_prompts()
        out["prompts"] = sorted(p.name for p in prompts.prompts)

        async def on_progress(value, total, message):
            progress.append(value)

        if make:  # the agent hands over artifacts: how do they reach an MCP client?
            made = await client.call_tool("agent_alpha", {"message": "make a report"})
            out["made"] = {
                "blocks": [
                    c.model_dump(mode="json", exclude_none=True, by_alias=True)
                    for c in made.content
                ],
                "structured": made.structured_content,
            }
        if "steps" in out["tools"]:
            stepped = await client.call_tool("steps", {}, progress_callback=on_progress)
            out["steps"] = [c.text for c in stepped.content]
            out["progress"] = progress
    return out


if __name__ == "__main__":
    result = asyncio.run(main(*sys.argv[1:5]))
    print(json.dumps(result))
