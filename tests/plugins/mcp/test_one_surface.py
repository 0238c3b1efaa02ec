"""One agent surface: the in-memory path (the kernel routes a JSON-RPC ``tools/call`` to the
agent's actor as ``EXEC:TOOL_CALL``), Streamable HTTP at ``/agents/<name>/mcp`` on a real
socket and the stdio server's framing answer the same requests with the same JSON-RPC
responses.

What broke: ``kernel/_mcp_local.py`` was a second surface beside the MCP plugin's server.
In memory, an empty message and extra arguments were accepted, a non-string message was a
-32602 protocol error (the network answered a tool error), the unknown-tool error had
other words and no data, a malformed ``_meta`` depth named another field, and a lone
surrogate went through."""

from __future__ import annotations

import json

import httpx
import pytest
import trio
import trio.testing
from roost.kernel import EventKind, TraceContext
from roost.plugins.http import open_daemon
from roost.plugins.mcp._stdio_server import serve_kernel_stdio

INIT = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}

# A context five hops deep: alpha would be the sixth, past the default limit of 5.
DEEP = TraceContext("ab" * 16, "cd" * 8, 5, ("a", "b", "c", "d", "e"), 5).to_meta()


def call(name, arguments=None, **extra):
    params = {"name": name, **extra}
    if arguments is not None:
        params["arguments"] = arguments
    return ("tools/call", params)


REQUESTS = {
    "list": ("tools/list", {}),
    "ask": call("message", {"message": "hi"}),
    "exposed tool": call("echo", {"text": "hi"}),
    "empty message": call("message", {"message": ""}),
    "extra argument": call("message", {"message": "hi", "urgent": True}),
    "message not a string": call("message", {"message": 5}),
    "no arguments": call("message"),
    "arguments not an object": call("message", ["hi"]),
    "name not a string": call(7, {}),
    "unknown tool": call("nope", {}),
    "misspelt message tool": call("mesage", {"message": "hi"}),
    "private tool": call("secret", {}),
    "unexposed tool": call("write", {"path": "x", "content": "y"}),
    "exposed tool, bad arguments": call("echo", {"text": 5}),
    "depth trip via _meta": call("message", {"message": "hi"}, _meta=DEEP),
    "depth trip, exposed tool": call("echo", {"text": "hi"}, _meta=DEEP),
    "bad _meta depth": call("message", {"message": "hi"}, _meta={"io.roost/trace-depth": "lots"}),
    "lone surrogate": call("message", {"message": "bad \ud800 text"}),
    "unknown method": ("resources/nothing", {}),
}


def requests():
    for i, (label, (method, params)) in enumerate(REQUESTS.items(), start=1):
        yield label, {"jsonrpc": "2.0", "id": i, "method": method, "params": params}


def normalised(response):
    """The response with what differs by nature masked: the session id an answer is kept
    under (none for an agent's one-shot ask, a new one per network call)."""
    structured = response.get("result", {}).get("structuredContent")
    if isinstance(structured, dict) and "session_id" in structured:
        structured["session_id"] = "<session>"
    return response


async def in_memory(kernel, request):
    answer = await kernel.actors.ask_payload(
        "alpha", EventKind.EXEC_TOOL_CALL, request, source="beta", timeout=10
    )
    return json.loads(json.dumps(answer))  # as a peer would read it


async def over_http(kernel):
    out = {}
    async with open_daemon(kernel) as url, httpx.AsyncClient(timeout=10) as client:
        endpoint = url + "/agents/alpha/mcp"
        r = await client.post(endpoint, json=INIT, headers=ACCEPT)
        assert r.status_code == 200, r.text
        headers = {
            **ACCEPT,
            "Accept": "application/json",
            "Mcp-Session-Id": r.headers["Mcp-Session-Id"],
            "Mcp-Protocol-Version": "2025-11-25",
        }
        await client.post(
            endpoint,
            json={"jsonrpc": "2.0", "method": "notifications/initialized"},
            headers=headers,
        )
        for label, request in requests():
            r = await client.post(endpoint, content=json.dumps(request).encode(), headers=headers)
            out[label] = r.json()
    return out


async def over_stdio(kernel):
    out = {}
    client, server = trio.testing.memory_stream_pair()
    buffer = b""

    async def read():
        nonlocal buffer
        while b"\n" not in buffer:
            chunk = await client.receive_some(65536)
            assert chunk, "the server closed its output"
            buffer += chunk
        raw, _, buffer = buffer.partition(b"\n")
        return json.loads(raw)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: serve_kernel_stdio(kernel, server, server, agent="alpha"))
        for message in (INIT, {"jsonrpc": "2.0", "method": "notifications/initialized"}):
            await client.send_all(json.dumps(message).encode() + b"\n")
        assert (await read())["id"] == 0
        for label, request in requests():
            await client.send_all(json.dumps(request).encode() + b"\n")
            out[label] = await read()
        await client.send_eof()
        nursery.cancel_scope.cancel()
    return out


@pytest.mark.parametrize("transport", [over_http, over_stdio], ids=["http", "stdio"])
async def test_every_transport_answers_the_agent_surface_like_the_in_memory_path(kernel, transport):
    with trio.fail_after(60):
        remote = await transport(kernel)
        local = {label: await in_memory(kernel, request) for label, request in requests()}
    for label in REQUESTS:
        assert normalised(remote[label]) == normalised(local[label]), label
    # And the answers are the ones the surface promises.
    ok = local["ask"]["result"]
    assert ok["content"] == [{"type": "text", "text": "alpha:hi"}] and not ok["isError"]
    assert local["exposed tool"]["result"]["content"][0]["text"] == "echo:hi:alpha"
    for label in (
        "empty message",
        "extra argument",
        "message not a string",
        "no arguments",
        "exposed tool, bad arguments",
    ):
        result = local[label]["result"]
        assert result["isError"] and "invalid arguments for tool" in result["content"][0]["text"], (
            label
        )
    assert "should be non-empty" in local["empty message"]["result"]["content"][0]["text"]
    assert "'urgent' was unexpected" in local["extra argument"]["result"]["content"][0]["text"]
    for label, name in (
        ("unknown tool", "nope"),
        ("private tool", "secret"),
        ("unexposed tool", "write"),
    ):
        # Private and unexposed tools are indistinguishable from absent ones.
        assert local[label]["error"] == {
            "code": -32602,
            "message": f"unknown tool: {name}; see tools/list",
            "data": {"tool": name},
        }, label
    assert "did you mean message?" in local["misspelt message tool"]["error"]["message"]
    for label in ("depth trip via _meta", "depth trip, exposed tool"):
        tripped = local[label]["result"]
        assert tripped["isError"] and tripped["_meta"]["io.roost/error"]["path"] == [
            "a",
            "b",
            "c",
            "d",
            "e",
            "alpha",
        ]
    assert local["bad _meta depth"]["error"]["data"] == {
        "field": 'params._meta["io.roost/trace-depth"]'
    }
    assert local["lone surrogate"]["error"]["data"] == {"field": "params.arguments.message"}
    assert local["name not a string"]["error"]["code"] == -32602
    assert local["arguments not an object"]["error"]["code"] == -32602
    assert local["unknown method"]["error"]["code"] == -32601


async def test_the_in_memory_asks_event_trace_trips_as_http_trace_headers_do(kernel):
    # An in-host ask carries its trace on the event, not in _meta; over HTTP the headers carry
    # it. The same context five hops deep must be refused alike, naming the same path.
    deep = TraceContext("ab" * 16, "cd" * 8, 5, ("a", "b", "c", "d", "e"), 5)
    request = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": REQUESTS["ask"][1]}
    with trio.fail_after(60):
        local = await kernel.actors.ask_payload(
            "alpha", EventKind.EXEC_TOOL_CALL, request, source="beta", trace=deep, timeout=10
        )
        async with open_daemon(kernel) as url, httpx.AsyncClient(timeout=10) as client:
            endpoint = url + "/agents/alpha/mcp"
            r = await client.post(endpoint, json=INIT, headers=ACCEPT)
            headers = {
                **ACCEPT,
                **deep.to_headers(),
                "Accept": "application/json",
                "Mcp-Session-Id": r.headers["Mcp-Session-Id"],
                "Mcp-Protocol-Version": "2025-11-25",
            }
            r = await client.post(endpoint, json=request, headers=headers)
    assert r.json() == json.loads(json.dumps(local))
    refused = local["result"]["_meta"]["io.roost/error"]
    assert refused["path"] == ["a", "b", "c", "d", "e", "alpha"] and refused["depth"] == 6
