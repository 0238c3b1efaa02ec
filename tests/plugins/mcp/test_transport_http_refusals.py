"""What the HTTP client transports make of a server's refusals, against a real scripted HTTP
server on 127.0.0.1: a 404 to a request carrying our session id ends the connection
(whether it answers a request, a notification, the GET stream or a resumption) and a 404 to
``initialize`` does not; a refused request is answered at once with the status, the
credentials hint and ``Retry-After``; a refused notification raises naming all three."""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import partial

import pytest
import trio
from roost.plugins.mcp.transports._base import TransportClosed, TransportError
from roost.plugins.mcp.transports.http import open_http_transport
from roost.plugins.mcp.transports.sse import open_sse_transport

SESSION = "session-1"
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
LIST = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
REFUSAL = json.dumps({"error": {"code": "nope", "message": "go away"}}).encode()

# (method, path, headers, JSON body or None) -> (status, headers, body)
Script = Callable[[str, str, dict[str, str], object], tuple[int, dict[str, str], bytes]]


def _initialized(headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    result = {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "serverInfo": {"name": "scripted", "version": "1"},
    }
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "result": result}).encode()
    return 200, {"Content-Type": "application/json", **(headers or {})}, body


async def _serve(script: Script, seen: list, stream: trio.SocketStream) -> None:
    try:
        with trio.fail_after(10):
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = await stream.receive_some(65536)
                if not chunk:
                    return
                data += chunk
            head, _, body = data.partition(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, target, _ = lines[0].split(" ", 2)
            headers = {
                k.strip().lower(): v.strip()
                for k, _, v in (line.partition(":") for line in lines[1:])
            }
            while len(body) < int(headers.get("content-length", "0")):
                body += await stream.receive_some(65536)
            message = json.loads(body) if body else None
            seen.append((method, headers, message))
            status, extra, out = script(method, target, headers, message)
            if status == 200 and target == "/sse" and method == "GET":
                await stream.send_all(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n"
                    b"event: endpoint\ndata: /messages\n\n"
                )
                await trio.sleep_forever()
            head_lines = [
                f"HTTP/1.1 {status} X",
                f"Content-Length: {len(out)}",
                "Connection: close",
            ]
            head_lines += [f"{k}: {v}" for k, v in {"Content-Type": "text/plain", **extra}.items()]
            await stream.send_all(("\r\n".join(head_lines) + "\r\n\r\n").encode() + out)
    except (trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError):
        pass
    finally:
        await stream.aclose()


async def _start(nursery: trio.Nursery, script: Script) -> tuple[str, list]:
    seen: list = []
    listeners = await nursery.start(partial(trio.serve_tcp, partial(_serve, script, seen), 0))
    port = listeners[0].socket.getsockname()[1]
    return f"http://127.0.0.1:{port}", seen


async def _receive(transport) -> dict:
    with trio.fail_after(5):
        return await transport.incoming.receive()


async def _assert_closed_as_session_ended(transport) -> None:
    with trio.fail_after(5), pytest.raises(trio.EndOfChannel):
        while True:
            await transport.incoming.receive()
    assert transport.closed_reason == "the server ended the session (HTTP 404)"
    with pytest.raises(TransportClosed, match="ended the session"):
        await transport.send(LIST)


@pytest.mark.parametrize("refused", ["request", "notification", "get stream", "resume"])
async def test_a_404_to_our_session_ends_the_connection_whatever_it_answers(refused):
    def script(method, path, headers, message):
        if message is not None and message.get("method") == "initialize":
            return _initialized({"Mcp-Session-Id": SESSION})
        assert headers.get("mcp-session-id") == SESSION
        if method == "GET" and "last-event-id" in headers:
            return 404, {}, b""
        if method == "GET":
            return (404, {}, b"") if refused == "get stream" else (405, {}, b"")
        if method == "DELETE":
            return 200, {}, b""
        if refused == "resume" and method == "POST" and message.get("method") == "tools/list":
            # A stream that breaks before its answer: resumed with a GET, answered 404.
            return 200, {"Content-Type": "text/event-stream"}, b"id: e1\ndata: \n\n"
        if message.get("method") == INITIALIZED["method"]:
            return (404, {}, b"") if refused == "notification" else (202, {}, b"")
        return 404, {}, b""

    async with trio.open_nursery() as nursery:
        url, _seen = await _start(nursery, script)
        async with open_http_transport(url + "/mcp", allow_loopback=True) as transport:
            await transport.send(INITIALIZE)
            assert (await _receive(transport))["result"]["serverInfo"]["name"] == "scripted"
            assert transport.session_id == SESSION
            transport.set_protocol_version("2025-11-25")
            if refused == "notification":
                with pytest.raises(TransportClosed, match="the session ended"):
                    await transport.send(INITIALIZED)
            else:
                await transport.send(INITIALIZED)
                if refused == "get stream":
                    await transport.start_listening()
                else:
                    await transport.send(LIST)
            await _assert_closed_as_session_ended(transport)
        nursery.cancel_scope.cancel()


async def test_a_404_to_initialize_is_a_refusal_not_the_end_of_a_session():
    # Even with a session id on it: initialize carried none of ours to end.
    def script(method, path, headers, message):
        return 404, {"Mcp-Session-Id": SESSION}, REFUSAL

    async with trio.open_nursery() as nursery:
        url, _seen = await _start(nursery, script)
        async with open_http_transport(url + "/mcp", allow_loopback=True) as transport:
            await transport.send(INITIALIZE)
            answer = await _receive(transport)
            assert answer["id"] == 1
            assert answer["error"]["message"] == "HTTP 404 Not Found: go away"
            assert answer["error"]["data"] == {"httpStatus": 404}
            assert transport.closed_reason is None
        nursery.cancel_scope.cancel()


HINT = (
    "this server wants credentials: set them in transport.headers of the [[mcp_servers]] "
    "entry 'peer', e.g. Authorization = \"Bearer <key>\""
)
KEY_HINT = (
    "the server refused the Authorization header in transport.headers of the "
    "[[mcp_servers]] entry 'peer'; check the key"
)


@pytest.mark.parametrize("kind", ["http", "sse"])
@pytest.mark.parametrize(
    "status, headers, message, data",
    [
        (
            401,
            {},
            f"HTTP 401 Unauthorized: go away ({HINT})",
            {"httpStatus": 401, "retryAfter": 7.0},
        ),
        (
            403,
            {"Authorization": "Bearer k"},
            f"HTTP 403 Forbidden: go away ({KEY_HINT})",
            {"httpStatus": 403, "retryAfter": 7.0},
        ),
        (429, {}, "HTTP 429 Too Many Requests: go away", {"httpStatus": 429, "retryAfter": 7.0}),
    ],
)
async def test_a_refused_request_is_answered_and_a_refused_notification_raises(
    kind, status, headers, message, data
):
    def script(method, path, request_headers, body):
        if method == "GET":
            return 200, {}, b""  # the legacy SSE stream (see _serve)
        return status, {"Content-Type": "application/json", "Retry-After": "7"}, REFUSAL

    opener = open_http_transport if kind == "http" else open_sse_transport
    path = "/mcp" if kind == "http" else "/sse"
    async with trio.open_nursery() as nursery:
        url, _seen = await _start(nursery, script)
        async with opener(url + path, name="peer", headers=headers, allow_loopback=True) as t:
            await t.send(LIST)
            answer = await _receive(t)
            assert answer == {
                "jsonrpc": "2.0",
                "id": 2,
                "error": {"code": -32000, "message": message, "data": data},
            }
            with pytest.raises(TransportError) as info:
                await t.send(INITIALIZED)
            assert str(info.value) == (
                f"MCP server 'peer' refused notifications/initialized with {message}"
            )
            assert t.closed_reason is None
        nursery.cancel_scope.cancel()
