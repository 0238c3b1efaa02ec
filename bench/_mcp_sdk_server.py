"""The official ``mcp`` SDK's server (``MCPServer``, formerly FastMCP) with one echo tool,
on stdio, for ``bench/mcp.py``. Usage: ``python _mcp_sdk_server.py``."""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer

server = MCPServer("sdk-echo")


@server.tool()
def echo(text: str) -> str:
    """Echo text back."""
    return text


if __name__ == "__main__":
    server.run(transport="stdio")
