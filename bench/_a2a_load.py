"""A lean HTTP/1.1 keep-alive load generator for ``bench/a2a.py``.

httpx costs a few milliseconds of client CPU per request on Trio, which on a 2-core box
caps any server at a few hundred requests/s and squeezes every ratio towards 1. This
client writes one pre-encoded POST per request on a persistent connection and reads the
response by ``Content-Length`` (or chunked), so the servers, not the client, set the pace.
Both servers are driven by the very same code.

The response framing is sans-I/O (``ResponseReader``); ``Connection`` drives it on Trio
(for many clients at once) and ``BlockingConnection`` on a plain blocking socket (one
sequential client: no event loop between the reply arriving and the next request, so a
round trip is the server's time plus one send and one receive).
"""

from __future__ import annotations

import json
import socket
import struct
from typing import Any
from urllib.parse import urlsplit

import attrs
import trio

MAX_HEADER_BYTES = 64 * 1024
MAX_BODY_BYTES = 16 * 1024 * 1024
BLOCKING_TIMEOUT_S = 30.0


class LoadError(Exception):
    """The server answered something this client cannot use (status, framing, size)."""


@attrs.frozen
class Response:
    """One complete HTTP response: status, headers (names lowercased), body, and whether
    the server will close the connection after it."""

    status: int
    headers: dict[str, str]
    body: bytes
    closing: bool

    def json(self) -> Any:
        return json.loads(self.body)

    def sse_data(self) -> list[Any]:
        """The decoded ``data`` of each event of a complete ``text/event-stream`` body
        (events without data, such as keep-alive comments, are left out)."""
        out = []
        for block in self.body.replace(b"\r\n", b"\n").split(b"\n\n"):
            lines = [
                line[5:].removeprefix(b" ")
                for line in block.split(b"\n")
                if line.startswith(b"data:")
            ]
            data = b"\n".join(lines).strip()
            if data:
                out.append(json.loads(data))
        return out


class ResponseReader:
    """Sans-I/O: feed it received bytes; ``next_response()`` returns each complete response
    (None while more bytes are needed), ``next_reply()`` the decoded JSON body of a 200."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._head: tuple[int, dict[str, str]] | None = None

    def feed(self, data: bytes) -> None:
        if not data:
            raise LoadError("the server closed the connection mid-response")
        self._buffer += data

    def next_response(self) -> Response | None:
        if self._head is None:
            end = self._buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(self._buffer) > MAX_HEADER_BYTES:
                    raise LoadError("response headers too large")
                return None
            self._head = _parse_head(bytes(self._buffer[:end]))
            del self._buffer[: end + 4]
        status, headers = self._head
        if headers.get("transfer-encoding", "").lower() == "chunked":
            payload = self._take_chunked()
        else:
            length = int(headers.get("content-length", "-1"))
            if not 0 <= length <= MAX_BODY_BYTES:
                raise LoadError(f"response without a usable Content-Length (status {status})")
            payload = None
            if len(self._buffer) >= length:
                payload = bytes(self._buffer[:length])
                del self._buffer[:length]
        if payload is None:
            return None
        self._head = None
        return Response(status, headers, payload, headers.get("connection", "").lower() == "close")

    def next_reply(self) -> tuple[dict, bool] | None:
        response = self.next_response()
        if response is None:
            return None
        if response.status != 200:
            raise LoadError(f"HTTP {response.status}: {response.body[:300]!r}")
        return response.json(), response.closing

    def _take_chunked(self) -> bytes | None:
        """The whole chunked body once it has arrived (taken from the buffer), else None."""
        out = bytearray()
        pos = 0
        buf = self._buffer
        while True:
            end = buf.find(b"\r\n", pos)
            if end < 0:
                return None
            size = int(bytes(buf[pos:end]).split(b";")[0], 16)
            start = end + 2
            if size == 0:
                if buf.find(b"\r\n", start) < 0:  # no trailers expected: just the last CRLF
                    return None
                del buf[: buf.find(b"\r\n", start) + 2]
                return bytes(out)
            if len(buf) < start + size + 2:
                return None
            out += buf[start : start + size]
            if len(out) > MAX_BODY_BYTES:
                raise LoadError("chunked response too large")
            pos = start + size + 2


def _parse_head(raw: bytes) -> tuple[int, dict[str, str]]:
    lines = raw.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return status, headers


class _Request:
    """The pre-encoded part of every POST to one URL."""

    def __init__(self, url: str, headers: dict[str, str]) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname or not parts.port:
            raise ValueError(f"url: expected http://host:port/path, got {url!r}")
        self.host, self.port, self.path = parts.hostname, parts.port, parts.path or "/"
        extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        self._head = (
            f"POST {self.path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
            f"Content-Type: application/json\r\n{extra}"
        ).encode()

    def encode(self, body: dict, headers: dict[str, str] | None = None) -> bytes:
        data = json.dumps(body, separators=(",", ":")).encode()
        extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items()).encode() if headers else b""
        return b"%s%sContent-Length: %d\r\n\r\n%s" % (self._head, extra, len(data), data)


class Connection:
    """One keep-alive HTTP/1.1 connection on Trio that POSTs JSON and returns the parsed reply."""

    def __init__(self, url: str, headers: dict[str, str]) -> None:
        self._request = _Request(url, headers)
        self._stream: trio.SocketStream | None = None
        self._reader = ResponseReader()

    async def aclose(self) -> None:
        if self._stream is not None:
            await self._stream.aclose()
            self._stream = None

    async def post_json(self, body: dict) -> dict:
        """POST ``body``; the decoded JSON reply (LoadError unless the status is 200)."""
        response = await self.post(body)
        if response.status != 200:
            raise LoadError(f"HTTP {response.status}: {response.body[:300]!r}")
        return response.json()

    async def post(self, body: dict, headers: dict[str, str] | None = None) -> Response:
        """POST ``body`` (with ``headers`` beside the connection's own); the whole response.
        A failure leaves the connection closed (the next call opens a new one)."""
        try:
            if self._stream is None:
                self._stream = await trio.open_tcp_stream(self._request.host, self._request.port)
            await self._stream.send_all(self._request.encode(body, headers))
            while (response := self._reader.next_response()) is None:
                self._reader.feed(await self._stream.receive_some(65536))
        except BaseException:
            with trio.CancelScope(shield=True):
                await self.aclose()
            self._reader = ResponseReader()
            raise
        if response.closing:
            await self.aclose()
        return response


class BlockingConnection:
    """``Connection`` on a blocking socket: for one client sending one request at a time,
    outside any event loop (every call blocks the calling thread)."""

    def __init__(self, url: str, headers: dict[str, str]) -> None:
        self._request = _Request(url, headers)
        self._sock: socket.socket | None = None
        self._reader = ResponseReader()

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def post_json(self, body: dict) -> dict:
        """POST ``body``; the decoded JSON reply (LoadError unless the status is 200)."""
        if self._sock is None:
            sock = socket.create_connection(
                (self._request.host, self._request.port), timeout=BLOCKING_TIMEOUT_S
            )
            # Plain blocking calls bounded by the kernel (a Python timeout adds a poll per call).
            sock.settimeout(None)
            limit = struct.pack("ll", int(BLOCKING_TIMEOUT_S), 0)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, limit)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, limit)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._sock = sock
        self._sock.sendall(self._request.encode(body))
        while (reply := self._reader.next_reply()) is None:
            self._reader.feed(self._sock.recv(65536))
        payload, closing = reply
        if closing:
            self.close()
        return payload
