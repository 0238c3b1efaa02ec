"""roost's MCP server on stdio with one echo tool, for ``bench/mcp.py``.

Usage: ``python _mcp_roost_server.py HOME``. Boots a kernel (SQLite store in HOME) with one
scripted agent that exposes an ``echo`` tool, then serves the host MCP surface on
stdin/stdout with roost's stdio server (the same code as ``roost mcp``) until stdin closes.
"""

from __future__ import annotations

import os
import sys

import trio
from roost.kernel import Tool, ToolResult, ToolSpec, hookimpl

ECHO_SCHEMA = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}


class EchoTools:
    """A plugin with one tool, ``echo``, that returns its ``text`` argument."""

    @hookimpl
    def roost_tools(self, config):
        async def echo(call, ctx):
            return ToolResult.text(call.arguments["text"])

        return [Tool(ToolSpec("echo", "Echo text back", ECHO_SCHEMA, owner="bench"), echo)]


def echo_agent():
    from roost.kernel import parse_manifest

    return parse_manifest(
        {
            "name": "echoer",
            "description": "Serves the echo tool",
            "model": {
                "provider": "scripted",
                "script": {"rules": [], "default_reply": "{message}"},
            },
            "mcp": {"expose_tools": ["echo"]},
        }
    )


async def main(home: str) -> None:
    from roost.kernel import default_config, open_kernel
    from roost.plugins.mcp._stdio_server import isolate_stdout, serve_kernel_stdio

    protocol_fd = isolate_stdout()
    config = default_config(home=home, agents={"bundled": False})
    async with open_kernel(config, agents=[echo_agent()], plugins=[EchoTools()]) as kernel:
        receive = trio.lowlevel.FdStream(os.dup(0))
        send = trio.lowlevel.FdStream(protocol_fd)
        async with receive, send:
            await serve_kernel_stdio(kernel, receive, send)


if __name__ == "__main__":
    trio.run(main, sys.argv[1])
