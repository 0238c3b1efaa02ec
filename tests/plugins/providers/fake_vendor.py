"""A tiny real HTTP/1.1 server on 127.0.0.1 that plays a model vendor from queued replies.

It records every request (method, path, query, headers, JSON body) so tests can compare
what roost sends with what an official SDK sends, and it can stream (chunked), cut a
stream in the middle, or answer garbage.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import parse_qs, urlsplit

import attrs
import trio


@attrs.define
class Reply:
    status: int = 200
    json: Any = None
    body: bytes | None = None
    chunks: list[bytes] | None = None  # streamed with chunked transfer encoding
    headers: dict[str, str] = attrs.Factory(dict)
    content_type: str = "application/json"
    cut: bool = False  # close after the chunks without the terminating chunk
    hold: bool = False  # after the chunks, keep the stream open until the client hangs up


@attrs.define
class Captured:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body) if self.body else None


def sse(*events: Any, named: bool = False, done: bool = False) -> list[bytes]:
    """SSE chunks: each event ``data: <json>`` (``named``: ``event: <type>`` first)."""
    out = []
    for ev in events:
        head = f"event: {ev['type']}\n" if named else ""
        out.append(f"{head}data: {json.dumps(ev)}\n\n".encode())
    if done:
        out.append(b"data: [DONE]\n\n")
    return out


def ndjson(*objects: Any) -> list[bytes]:
    return [(json.dumps(o) + "\n").encode() for o in objects]


class FakeVendor:
    """Serve queued ``Reply`` objects (or callables of the request) in order."""

    def __init__(self) -> None:
        self.replies: deque[Reply | Callable[[Captured], Reply]] = deque()
        self.requests: list[Captured] = []
        self.port = 0
        self.client_hung_up = trio.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def queue(self, *replies: Reply | Callable[[Captured], Reply]) -> None:
        self.replies.extend(replies)

    async def start(self, nursery: trio.Nursery) -> FakeVendor:
        listeners = await nursery.start(
            lambda task_status: trio.serve_tcp(
                self.handle, 0, host="127.0.0.1", task_status=task_status
            )
        )
        self.port = listeners[0].socket.getsockname()[1]
        return self

    async def handle(self, stream: trio.SocketStream) -> None:
        try:
            with trio.fail_after(10):
                request = await _read_request(stream)
            if request is None:
                return
            self.requests.append(request)
            reply = (
                self.replies.popleft()
                if self.replies
                else Reply(500, {"error": {"message": "no reply queued"}})
            )
            if callable(reply):
                reply = reply(request)
            await _write_reply(stream, reply)
            if reply.hold:
                with trio.fail_after(10):
                    while await stream.receive_some(65536):
                        pass
                self.client_hung_up.set()
        except (trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError):
            pass
        finally:
            await stream.aclose()


async def _read_request(stream: trio.SocketStream) -> Captured | None:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = await stream.receive_some(65536)
        if not chunk:
            return None
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    method, target, _ = lines[0].split(" ", 2)
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    body = rest
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body = await _read_chunked(stream, rest)
    else:
        length = int(headers.get("content-length", "0"))
        while len(body) < length:
            chunk = await stream.receive_some(65536)
            if not chunk:
                break
            body += chunk
    parts = urlsplit(target)
    return Captured(method, parts.path, parse_qs(parts.query), headers, body)


async def _read_chunked(stream: trio.SocketStream, data: bytes) -> bytes:
    body = b""
    while True:
        while b"\r\n" not in data:
            data += await stream.receive_some(65536)
        size_line, _, data = data.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        while len(data) < size + 2:
            data += await stream.receive_some(65536)
        if size == 0:
            return body
        body += data[:size]
        data = data[size + 2 :]


async def _write_reply(stream: trio.SocketStream, reply: Reply) -> None:
    reason = {
        200: "OK",
        401: "Unauthorized",
        429: "Too Many Requests",
        500: "Internal Server Error",
    }.get(reply.status, "Status")
    headers = {"content-type": reply.content_type, "connection": "close", **reply.headers}
    if reply.chunks is not None:
        headers["transfer-encoding"] = "chunked"
        await stream.send_all(_head(reply.status, reason, headers))
        for chunk in reply.chunks:
            await stream.send_all(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            await trio.sleep(0)
        if not (reply.cut or reply.hold):
            await stream.send_all(b"0\r\n\r\n")
        return
    body = reply.body if reply.body is not None else json.dumps(reply.json).encode()
    headers["content-length"] = str(len(body))
    await stream.send_all(_head(reply.status, reason, headers) + body)


def _head(status: int, reason: str, headers: dict[str, str]) -> bytes:
    lines = [f"HTTP/1.1 {status} {reason}"] + [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def without(d: dict[str, Any], keys: Iterable[str]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if k not in set(keys)}
