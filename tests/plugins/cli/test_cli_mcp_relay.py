"""``roost mcp`` relaying to a daemon writes nothing but JSON-RPC to stdout, and answers
every request even when the daemon refuses it or answers out of protocol."""

from __future__ import annotations

import json
import re
import sys
import textwrap
import time
from functools import partial
from pathlib import Path

import pytest
import trio
import trio.testing
from roost.kernel import default_config, open_kernel
from roost.plugins.http import open_daemon
from roost.plugins.mcp._stdio_server import DaemonBridge, stdio_loop

ROOST = Path(sys.executable).parent / "roost"

# The official SDK's stdio client starts ``roost mcp`` and initializes (bounded by anyio,
# so a hang is reported as one instead of stalling).
SDK_CLIENT = textwrap.dedent(
    """
    import json, sys, anyio
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    async def main():
        server = StdioServerParameters(
            command=sys.argv[1], args=["mcp"], env=json.loads(sys.argv[2])
        )
        try:
            with anyio.fail_after(20):
                async with stdio_client(server) as (read, write):
                    async with ClientSession(read, write) as session:
                        await session.initialize()
                        print(json.dumps({"initialized": True}))
        except TimeoutError:
            print(json.dumps({"hang": True}))
        except Exception as exc:
            while isinstance(exc, BaseExceptionGroup):
                exc = exc.exceptions[0]
            print(json.dumps({"error": type(exc).__name__, "message": str(exc)}))

    anyio.run(main)
    """
)


@pytest.mark.parametrize("key", [None, "not-the-key"], ids=["no-key", "wrong-key"])
async def test_sdk_client_gets_jsonrpc_error_naming_the_key_from_roost_mcp_relaying_to_keyed_daemon(
    tmp_path, key
):
    if not ROOST.exists():
        pytest.skip("the roost console script is not installed (make install)")
    home = tmp_path / "home"
    config = default_config(
        home=home, agents={"bundled": False}, http={"api_key": "the-daemon-key"}
    )
    env = {"ROOST_HOME": str(home), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    if key is not None:
        env["ROOST_API_KEY"] = key
    async with open_kernel(config) as kernel, open_daemon(kernel, graceful_timeout=1):
        started = time.monotonic()
        with trio.fail_after(40):
            done = await trio.run_process(
                [sys.executable, "-c", SDK_CLIENT, str(ROOST), json.dumps(env)],
                capture_stdout=True,
                capture_stderr=True,
                cwd=str(tmp_path),
                check=False,
            )
        elapsed = time.monotonic() - started
    result = json.loads(done.stdout.decode().strip().splitlines()[-1])
    assert "hang" not in result, "the SDK client hung on what roost mcp wrote"
    assert result.get("error"), result
    assert "ROOST_API_KEY" in result["message"] and "requires an API key" in result["message"], (
        result
    )
    assert elapsed < 15, f"the error took {elapsed:.1f} s"
    # said on stderr too, where the IDE's MCP log shows it
    assert b"set ROOST_API_KEY" in done.stderr


# ---- a daemon that answers out of protocol -------------------------------------------------

CANNED = {
    # roost's REST error shape: JSON, but not JSON-RPC
    "rest/error": (200, "application/json", b'{"error": {"code": "x", "message": "not json-rpc"}}'),
    "http/500": (500, "text/html", b"<html>internal error</html>"),
    # an SSE stream with a stray event and no answer
    "sse/no-answer": (200, "text/event-stream", b'data: {"not": "rpc"}\n\n'),
    "accepted": (202, "application/json", b""),
    # an HTTP-level refusal in JSON-RPC shape whose id is null
    "rpc/null-id": (
        401,
        "application/json",
        b'{"jsonrpc": "2.0", "id": null, "error": {"code": -32001, "message": "unauthorized"}}',
    ),
}


async def read_request(stream: trio.SocketStream) -> dict:
    """The JSON-RPC message of one HTTP request read from ``stream`` (by Content-Length)."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += await stream.receive_some(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))
    while len(body) < length:
        body += await stream.receive_some(65536)
    return json.loads(body)


async def canned_daemon(stream: trio.SocketStream) -> None:
    message = await read_request(stream)
    if message["method"] == "ok":
        status, ctype, payload = (
            200,
            "application/json",
            json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": {}}).encode(),
        )
    else:
        status, ctype, payload = CANNED[message["method"]]
    head = (
        f"HTTP/1.1 {status} X\r\nContent-Type: {ctype}\r\n"
        f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n"
    )
    await stream.send_all(head.encode() + payload)
    await stream.aclose()


async def test_bridge_answers_every_request_in_jsonrpc_whatever_the_daemon_sends():
    methods = ["ok", *CANNED]
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, canned_daemon, 0, host="127.0.0.1"))
        port = listeners[0].socket.getsockname()[1]
        bridge = DaemonBridge(f"http://127.0.0.1:{port}", None)
        client_stream, server_stream = trio.testing.memory_stream_pair()
        nursery.start_soon(stdio_loop, server_stream, server_stream, bridge.serve)
        requests = [{"jsonrpc": "2.0", "id": i, "method": m} for i, m in enumerate(methods, 1)]
        await client_stream.send_all(b"".join(json.dumps(r).encode() + b"\n" for r in requests))
        lines, buffer = [], b""
        with trio.fail_after(15):
            while {m.get("id") for m in lines} != set(range(1, len(methods) + 1)):
                buffer += await client_stream.receive_some(65536)
                while b"\n" in buffer:
                    raw, _, buffer = buffer.partition(b"\n")
                    lines.append(json.loads(raw))
        nursery.cancel_scope.cancel()
    by_id = {}
    for message in lines:
        assert message.get("jsonrpc") == "2.0" and ("result" in message) != ("error" in message), (
            message
        )
        assert message["id"] not in by_id, f"answered twice: {message}"
        by_id[message["id"]] = message
    by_method = {m: by_id[i] for i, m in enumerate(methods, 1)}
    assert by_method["ok"]["result"] == {}
    for method in CANNED:
        assert isinstance(by_method[method]["error"]["code"], int), by_method[method]
    assert "HTTP 500" in by_method["http/500"]["error"]["message"]
    assert "ended without an answer" in by_method["sse/no-answer"]["error"]["message"]
    assert "ROOST_API_KEY" in by_method["rpc/null-id"]["error"]["message"]


async def test_a_too_deep_or_array_daemon_event_is_relayed_not_a_crash_of_roost_mcp():
    # What broke: json.loads of an SSE event nested past the recursion limit raised
    # RecursionError out of the bridge, ending roost mcp; an event holding an array of
    # messages was dropped whole (its answer too). The event is skipped, the array split.
    answer = '{"jsonrpc": "2.0", "id": {id}, "result": {}}'
    progress = '{"jsonrpc": "2.0", "method": "notifications/progress", "params": {}}'
    replies = {
        "deep": ("[" * 100_000 + "]" * 100_000, answer),
        "array": (f"[{progress}, {answer}]",),
    }

    async def daemon(stream: trio.SocketStream) -> None:
        message = await read_request(stream)
        events = "".join(f"data: {e}\n\n" for e in replies[message["method"]])
        payload = events.replace("{id}", str(message["id"])).encode()
        head = (
            "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n"
        )
        await stream.send_all(head.encode() + payload)
        await stream.aclose()

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, daemon, 0, host="127.0.0.1"))
        port = listeners[0].socket.getsockname()[1]
        bridge = DaemonBridge(f"http://127.0.0.1:{port}", None)
        client_stream, server_stream = trio.testing.memory_stream_pair()
        nursery.start_soon(stdio_loop, server_stream, server_stream, bridge.serve)
        lines, buffer = [], b""
        for request_id, method in enumerate(["deep", "array", "deep"], 1):
            request = {"jsonrpc": "2.0", "id": request_id, "method": method}
            await client_stream.send_all(json.dumps(request).encode() + b"\n")
            with trio.fail_after(15):
                while not any(m.get("id") == request_id for m in lines):
                    buffer += await client_stream.receive_some(65536)
                    while b"\n" in buffer:
                        raw, _, buffer = buffer.partition(b"\n")
                        lines.append(json.loads(raw))
        nursery.cancel_scope.cancel()
    assert lines == [
        {"jsonrpc": "2.0", "id": 1, "result": {}},
        json.loads(progress),
        {"jsonrpc": "2.0", "id": 2, "result": {}},
        {"jsonrpc": "2.0", "id": 3, "result": {}},
    ]
