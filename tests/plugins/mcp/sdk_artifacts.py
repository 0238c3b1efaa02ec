"""The official ``mcp`` SDK client asks an agent that hands over an artifact, then reads
the artifact's URIs with ``resources/read`` (run in a subprocess: the SDK is asyncio).

Usage: python sdk_artifacts.py URL MODE TOOL MESSAGE
MODE is ``legacy`` (initialize handshake) or ``2026-07-28`` (stateless). Prints one JSON
object: the URIs the reply named (embedded resources and links in its text), what
``read_resource`` returned for each and for each artifact's own URI (without the file
name), and (legacy) what another session got for them.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys


async def read_all(client, uris: list[str]) -> dict:
    from mcp.shared.exceptions import MCPError

    out = {}
    for uri in uris:
        try:
            result = await client.read_resource(uri)
            out[uri] = [
                c.model_dump(mode="json", exclude_none=True, by_alias=True) for c in result.contents
            ]
        except MCPError as exc:
            out[uri] = {"error_code": exc.error.code, "message": exc.error.message}
    return out


async def main(url: str, mode: str, tool: str, message: str) -> dict:
    from mcp import Client

    out: dict = {}
    async with Client(url, mode=mode, read_timeout_seconds=30) as client:
        reply = await client.call_tool(tool, {"message": message})
        blocks = [
            c.model_dump(mode="json", exclude_none=True, by_alias=True) for c in reply.content
        ]
        embedded = [b["resource"] for b in blocks if b.get("type") == "resource"]
        text = "\n".join(b.get("text", "") for b in blocks if b.get("type") == "text")
        out["embedded"] = embedded
        out["linked"] = re.findall(r"roost://artifacts/[^\s\])]+", text)
        # The URIs named, and each artifact's own (without the file name).
        named = {r["uri"] for r in embedded} | set(out["linked"])
        uris = sorted(named | {u.rsplit("/", 1)[0] for u in named})
        out["read"] = await read_all(client, uris)
    if mode == "legacy":  # another session must not read them
        async with Client(url, mode=mode, read_timeout_seconds=30) as other:
            out["other_session"] = await read_all(other, uris)
    return out


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(*sys.argv[1:5]))))
