"""A lean HTTP/1.1 keep-alive load generator for ``bench/a2a.py``.

httpx costs a few milliseconds of client CPU per request on Trio, which on a 2-core box
caps any server at a few hundred requests/s and squeezes every ratio towards 1. This
client writes one pre-encoded POST per request on a persistent connection and reads the
response by ``Content-Length`` (or chunked), so the servers, not the client, set the pace.
Both servers are driven by the very same code.
"""

from __future__ import annotations

import json
from urllib.parse import urlsplit

import trio

MAX_HEADER_BYTES = 64 * 1024
MAX_BODY_BYTES = 16 * 1024 * 1024


class LoadError(Exception):
    """The server answered something this client cannot use (status, framing, size)."""


class Connection:
    """One keep-alive HTTP/1.1 connection that POSTs JSON and returns the parsed reply."""

    def __init__(self, url: str, headers: dict[str, str]) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname or not parts.port:
            raise ValueError(f"url: expected http://host:port/path, got {url!r}")
        self.host, self.port, self.path = parts.hostname, parts.port, parts.path or "/"
        extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        self._head = (
            f"POST {self.path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
            f"Content-Type: application/json\r\n{extra}Content-Length: "
        ).encode()
        self._stream: trio.SocketStream | None = None
        self._buffer = bytearray()

    async def aclose(self) -> None:
        if self._stream is not None:
            await self._stream.aclose()
            self._stream = None

    async def post_json(self, body: dict) -> dict:
        """POST ``body``; the decoded JSON reply (LoadError unless the status is 200)."""
        if self._stream is None:
            self._stream = await trio.open_tcp_stream(self.host, self.port)
        data = json.dumps(body, separators=(",", ":")).encode()
        await self._stream.send_all(self._head + str(len(data)).encode() + b"\r\n\r\n" + data)
        status, headers = await self._read_head()
        if headers.get("transfer-encoding", "").lower() == "chunked":
            payload = await self._read_chunked()
        else:
            length = int(headers.get("content-length", "-1"))
            if not 0 <= length <= MAX_BODY_BYTES:
                raise LoadError(f"response without a usable Content-Length (status {status})")
            payload = await self._read_exactly(length)
        if status != 200:
            raise LoadError(f"HTTP {status}: {payload[:300]!r}")
        if headers.get("connection", "").lower() == "close":
            await self.aclose()
        return json.loads(payload)

    async def _fill(self) -> None:
        assert self._stream is not None
        chunk = await self._stream.receive_some(65536)
        if not chunk:
            raise LoadError("the server closed the connection mid-response")
        self._buffer += chunk

    async def _read_head(self) -> tuple[int, dict[str, str]]:
        while (end := self._buffer.find(b"\r\n\r\n")) < 0:
            if len(self._buffer) > MAX_HEADER_BYTES:
                raise LoadError("response headers too large")
            await self._fill()
        head = bytes(self._buffer[:end]).decode("latin-1").split("\r\n")
        del self._buffer[: end + 4]
        status = int(head[0].split(" ", 2)[1])
        headers = {}
        for line in head[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        return status, headers

    async def _read_exactly(self, length: int) -> bytes:
        while len(self._buffer) < length:
            await self._fill()
        payload = bytes(self._buffer[:length])
        del self._buffer[:length]
        return payload

    async def _read_line(self) -> bytes:
        while (end := self._buffer.find(b"\r\n")) < 0:
            await self._fill()
        line = bytes(self._buffer[:end])
        del self._buffer[: end + 2]
        return line

    async def _read_chunked(self) -> bytes:
        out = bytearray()
        while True:
            size = int((await self._read_line()).split(b";")[0], 16)
            if size == 0:
                await self._read_line()  # no trailers expected
                return bytes(out)
            out += await self._read_exactly(size)
            await self._read_line()
            if len(out) > MAX_BODY_BYTES:
                raise LoadError("chunked response too large")
