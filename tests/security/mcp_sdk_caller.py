"""The official ``mcp`` SDK client (``mcp.client.streamable_http``) as one more caller.

Usage: python mcp_sdk_caller.py URL TOOL LOCAL_ADDRESS [BEARER_KEY]
Connects from LOCAL_ADDRESS (e.g. 127.0.0.2: loopback is all of 127/8 on Linux, so this is
another remote address to the daemon), runs the initialize handshake, lists the tools and
calls TOOL with a message; prints one JSON object; exits non-zero if the SDK failed.
"""

from __future__ import annotations

import asyncio
import json
import sys


async def main(url: str, tool: str, local_address: str, key: str = "") -> dict:
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    headers = {"Authorization": f"Bearer {key}"} if key else {}
    http = httpx2.AsyncClient(
        transport=httpx2.AsyncHTTPTransport(local_address=local_address),
        headers=headers,
        timeout=30,
    )
    async with (
        http,
        Client(
            streamable_http_client(url, http_client=http), mode="legacy", read_timeout_seconds=30
        ) as client,
    ):
        tools = await client.list_tools()
        answer = await client.call_tool(tool, {"message": "hello from another caller"})
        return {
            "tools": sorted(t.name for t in tools.tools),
            "answer": [c.text for c in answer.content if getattr(c, "type", "") == "text"],
            "is_error": bool(answer.is_error),
        }


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(*sys.argv[1:5]))))
