"""2026-07-28: a broken response stream loses the in-flight request, and the client MUST
re-issue it as a new request with a new request ID (spec changelog, major change 9).

Regression: the Streamable HTTP client reported the request as failed instead.
The server here is a few lines of raw HTTP on 127.0.0.1 that drops streams on purpose.
"""

from __future__ import annotations

import functools
import json

import pytest
import trio
from roost.plugins.mcp import _protocol as p
from roost.plugins.mcp.transports.http import open_http_transport

RESULT = {"resultType": "complete", "content": [{"type": "text", "text": "done"}]}


class DroppingServer:
    """Answers POSTed JSON-RPC requests on an SSE stream; the first ``drops`` of them get a
    progress event and then a connection closed mid-body."""

    def __init__(self, drops: int) -> None:
        self.drops = drops
        self.received: list[dict] = []
        self.port = 0

    async def handle(self, stream: trio.SocketStream) -> None:
        async with stream:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = await stream.receive_some(65536)
                if not chunk:
                    return
                data += chunk
            head, _, body = data.partition(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            length = next(
                int(h.split(":", 1)[1])
                for h in lines[1:]
                if h.lower().startswith("content-length:")
            )
            while len(body) < length:
                body += await stream.receive_some(65536)
            message = json.loads(body)
            self.received.append(message)
            progress = {
                "jsonrpc": "2.0",
                "method": "notifications/progress",
                "params": {"progressToken": "t", "progress": 1},
            }
            if len(self.received) <= self.drops:
                event = f"event: message\ndata: {json.dumps(progress)}\n\n".encode()
                await stream.send_all(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                    b"Transfer-Encoding: chunked\r\n\r\n"
                    + f"{len(event):x}\r\n".encode()
                    + event
                    + b"\r\n"
                )
                return  # close without the final chunk: the response stream breaks
            answer = {"jsonrpc": "2.0", "id": message["id"], "result": RESULT}
            event = f"event: message\ndata: {json.dumps(answer)}\n\n".encode()
            await stream.send_all(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                + f"Content-Length: {len(event)}\r\nConnection: close\r\n\r\n".encode()
                + event
            )


async def start(nursery, drops: int) -> tuple[DroppingServer, str]:
    server = DroppingServer(drops)
    listeners = await nursery.start(
        functools.partial(trio.serve_tcp, server.handle, 0, host="127.0.0.1")
    )
    server.port = listeners[0].socket.getsockname()[1]
    return server, f"http://127.0.0.1:{server.port}/mcp"


def call(request_id: int) -> dict:
    params = p.with_meta(
        {"name": "work", "arguments": {}}, p.stateless_meta({"name": "t", "version": "1"})
    )
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


async def receive_answer(transport, request_id) -> tuple[dict, list[dict]]:
    notes = []
    with trio.fail_after(10):
        async for message in transport.incoming:
            if "method" in message:
                notes.append(message)
                continue
            assert message["id"] == request_id
            return message, notes
    raise AssertionError("the transport closed without an answer")


async def test_broken_stream_is_reissued_once_with_a_new_id(nursery):
    server, url = await start(nursery, drops=1)
    async with open_http_transport(url, allow_loopback=True, timeout_secs=10) as transport:
        transport.set_protocol_version(p.LATEST_VERSION, modern=True)
        await transport.send(call(7))
        answer, notes = await receive_answer(transport, 7)
    assert answer == {"jsonrpc": "2.0", "id": 7, "result": RESULT}  # the caller's own id
    first, second = server.received
    assert first["id"] == 7 and second["id"] != 7
    assert {k: v for k, v in second.items() if k != "id"} == {
        k: v for k, v in first.items() if k != "id"
    }
    assert [n["method"] for n in notes] == ["notifications/progress"]


async def test_reissue_is_bounded_and_then_the_request_fails_clearly(nursery):
    server, url = await start(nursery, drops=5)
    async with open_http_transport(url, allow_loopback=True, timeout_secs=10) as transport:
        transport.set_protocol_version(p.LATEST_VERSION, modern=True)
        await transport.send(call(8))
        answer, _ = await receive_answer(transport, 8)
    assert len(server.received) == 2
    assert answer["error"]["code"] == -32000
    assert "the response stream broke" in answer["error"]["message"]


@pytest.mark.parametrize("version", [p.LATEST_HANDSHAKE_VERSION])
async def test_handshake_era_does_not_reissue(nursery, version):
    # Before 2026-07-28 a stream is resumed with Last-Event-ID (none here), never re-sent:
    # re-sending could run a tools/call twice.
    server, url = await start(nursery, drops=5)
    async with open_http_transport(url, allow_loopback=True, timeout_secs=10) as transport:
        transport.set_protocol_version(version)
        message = {
            "jsonrpc": "2.0",
            "id": 9,
            "method": "tools/call",
            "params": {"name": "work", "arguments": {}},
        }
        await transport.send(message)
        answer, _ = await receive_answer(transport, 9)
    assert len(server.received) == 1
    assert "error" in answer


class ResumingServer:
    """Handshake era: a POSTed request's SSE stream carries an event id and a ``retry``,
    then breaks; a GET with ``Last-Event-ID`` gets the rest of it (the answer)."""

    def __init__(self, replay: list | None = None) -> None:
        self.resumed_from: list[str] = []
        self.replay = replay  # the resumed event's data: the answer, unless given

    async def handle(self, stream: trio.SocketStream) -> None:
        async with stream:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = await stream.receive_some(65536)
                if not chunk:
                    return
                data += chunk
            head, _, body = data.partition(b"\r\n\r\n")
            request_line, *header_lines = head.decode("latin-1").split("\r\n")
            headers = {
                k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in header_lines)
            }
            if request_line.startswith("GET"):
                self.resumed_from.append(headers.get("last-event-id", ""))
                answer = self.replay or {"jsonrpc": "2.0", "id": 11, "result": RESULT}
                event = f"id: e2\nevent: message\ndata: {json.dumps(answer)}\n\n".encode()
                await stream.send_all(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                    + f"Content-Length: {len(event)}\r\nConnection: close\r\n\r\n".encode()
                    + event
                )
                return
            while len(body) < int(headers["content-length"]):
                body += await stream.receive_some(65536)
            progress = {
                "jsonrpc": "2.0",
                "method": "notifications/progress",
                "params": {"progressToken": "t", "progress": 1},
            }
            event = (
                f"id: e1\r\nretry: 20\r\nevent: message\r\ndata: {json.dumps(progress)}\r\n\r\n"
            ).encode()
            await stream.send_all(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n"
                + f"{len(event):x}\r\n".encode()
                + event
                + b"\r\n"
            )  # and close without the final chunk: the stream breaks after event e1


async def test_handshake_era_resumes_a_broken_stream_from_its_last_event_id(nursery):
    server = ResumingServer()
    listeners = await nursery.start(
        functools.partial(trio.serve_tcp, server.handle, 0, host="127.0.0.1")
    )
    url = f"http://127.0.0.1:{listeners[0].socket.getsockname()[1]}/mcp"
    async with open_http_transport(url, allow_loopback=True, timeout_secs=10) as transport:
        transport.set_protocol_version(p.LATEST_HANDSHAKE_VERSION)
        await transport.send(
            {
                "jsonrpc": "2.0",
                "id": 11,
                "method": "tools/call",
                "params": {"name": "work", "arguments": {}},
            }
        )
        answer, notes = await receive_answer(transport, 11)
    assert answer == {"jsonrpc": "2.0", "id": 11, "result": RESULT}
    assert server.resumed_from == ["e1"]  # the id of the last event the broken stream gave
    assert [n["method"] for n in notes] == ["notifications/progress"]


async def test_a_resumed_event_reaches_the_client_whole_not_cut_at_the_answer(nursery):
    # What broke: the resumed stream pushed an event's messages only up to the answer,
    # so a message after it in the same event (a JSON-RPC batch) was lost.
    after = {"jsonrpc": "2.0", "method": "notifications/message", "params": {"data": "x"}}
    server = ResumingServer(replay=[{"jsonrpc": "2.0", "id": 11, "result": RESULT}, after])
    listeners = await nursery.start(
        functools.partial(trio.serve_tcp, server.handle, 0, host="127.0.0.1")
    )
    url = f"http://127.0.0.1:{listeners[0].socket.getsockname()[1]}/mcp"
    async with open_http_transport(url, allow_loopback=True, timeout_secs=10) as transport:
        transport.set_protocol_version(p.LATEST_HANDSHAKE_VERSION)
        request = {"jsonrpc": "2.0", "id": 11, "method": "tools/call", "params": {"name": "w"}}
        await transport.send(request)
        answer, _ = await receive_answer(transport, 11)
        with trio.fail_after(10):
            following = await transport.incoming.receive()
    assert answer == {"jsonrpc": "2.0", "id": 11, "result": RESULT}
    assert following == after
    assert server.resumed_from == ["e1"]
