"""The client the MCP conformance suite drives (client mode): roost's own MCP client.

The suite runs ``python roost_client.py <server-url>`` with MCP_CONFORMANCE_SCENARIO set
(and MCP_CONFORMANCE_PROTOCOL_VERSION when a revision is chosen). Generic behaviour, like
an agent host: connect in the requested era, list the tools, call each with arguments
built from its input schema; elicitation is accepted with the schema's defaults,
sampling answered with a fixed text, roots are one workspace directory.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from typing import Any

import trio
from roost.plugins.mcp._client import ClientOptions, McpError, open_mcp_client
from roost.plugins.mcp.transports.http import open_http_transport


def sample_value(schema: Any) -> Any:
    if not isinstance(schema, dict):
        return "test"
    if "default" in schema:
        return schema["default"]
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if kind == "integer":
        return int(schema.get("minimum", 1))
    if kind == "number":
        return float(schema.get("minimum", 1))
    if kind == "boolean":
        return True
    if kind == "array":
        return []
    if kind == "object":
        return arguments_for(schema)
    return "test"


def arguments_for(schema: Any) -> dict[str, Any]:
    if not isinstance(schema, dict):
        return {}
    props = schema.get("properties") or {}
    required = schema.get("required") or []
    return {
        name: sample_value(props.get(name))
        for name in props
        if name in required or "default" in (props.get(name) or {})
    }


async def elicit(params, context):
    schema = params.get("requestedSchema") or {}
    content = {}
    for name, prop in (schema.get("properties") or {}).items():
        content[name] = sample_value(prop)
    return {"action": "accept", "content": content}


async def sample(params, context):
    return {
        "role": "assistant",
        "content": {"type": "text", "text": "This is a test response from roost"},
        "model": "roost-conformance",
        "stopReason": "endTurn",
    }


def roots(context):
    return [{"uri": "file:///tmp/roost-conformance", "name": "workspace"}]


async def main(url: str) -> int:
    version = os.environ.get("MCP_CONFORMANCE_PROTOCOL_VERSION") or "auto"
    options = ClientOptions(
        server_name="conformance",
        protocol=version if version != "draft" else "2026-07-28",
        timeout_secs=30,
        elicitation=elicit,
        sampling=sample,
        roots=roots,
    )
    async with open_http_transport(
        url, name="conformance", allow_loopback=True, allow_private=True
    ) as transport:
        async with open_mcp_client(transport, options) as client:
            tools = await client.list_tools()
            context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
            listed = {t["name"] for t in tools}
            if isinstance(context.get("toolCalls"), list):  # the scenario names the calls to make
                calls = [
                    (c["name"], c.get("arguments") or {})
                    for c in context["toolCalls"]
                    if c.get("name") in listed
                ]
            else:
                calls = [(t["name"], arguments_for(t.get("inputSchema"))) for t in tools]
            for name, arguments in calls:
                tool = {"name": name}
                try:
                    result = await client.call_tool(name, arguments)
                    print(
                        json.dumps({"tool": tool["name"], "isError": result.get("isError", False)})
                    )
                except McpError as exc:
                    print(json.dumps({"tool": tool["name"], "error": str(exc)}))
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    sys.exit(trio.run(main, sys.argv[-1]))
