"""A lean sans-I/O HTTP/1.1 request parser and response writer (the daemon's fast lane).

Feed bytes with ``feed``; ``head()`` parses the request line and headers of the request at
the front of the buffer without consuming anything (so a connection can still be handed,
bytes and all, to another server); ``body(limit)`` then reads its body (``Content-Length``
or chunked) and ``finish()`` drops the request from the buffer, leaving any pipelined
request behind it. Every problem raises ``ParseError`` with the HTTP status to answer
(400, 413, 431, 501, 505) and a message naming what is wrong.

Head lines may end in CRLF or a bare LF (RFC 9112 2.2, as h11 does: the head ends at the
first ``\n\r?\n``); a bare CR anywhere is refused. A chunked body is decoded as it
arrives and its raw framing dropped, so the buffer never holds more than one partial
chunk-size or trailer line (plus pipelined bytes); ``buffered`` then re-frames what was
decoded. A connection that opens with the HTTP/2 preface gets a ``RequestHead`` with
method ``PRI`` and version ``2.0`` so the caller can hand it on.
"""

from __future__ import annotations

import re
import time
from email.utils import formatdate
from http import HTTPStatus
from urllib.parse import unquote

import attrs

MAX_HEAD_BYTES = 16 * 1024
MAX_HEADERS = 100
MAX_CHUNK_LINE = 256  # a chunk-size line without its CRLF: size and extensions
CHUNKED_OVERHEAD = 64 * 1024  # raw framing a chunked body may add to its decoded limit
MAX_LEADING_CRLF = 8
H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

_TOKEN_RE = rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
_TOKEN = re.compile(_TOKEN_RE)
_TARGET = re.compile(rb"[\x21-\x7e]+")
_BAD_VALUE = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
_HEAD_END = re.compile(rb"\n\r?\n")
_BAD_VALUE_IN_HEAD = re.compile(rb"[\x00-\x08\x0b-\x1f\x7f]")  # _BAD_VALUE less the line ends
_COMMON_METHODS = frozenset({b"GET", b"POST", b"PUT", b"PATCH", b"DELETE", b"HEAD", b"OPTIONS"})
# Lowercase header names known to be tokens (any case of a token is a token).
_COMMON_NAMES = frozenset(
    {
        b"host", b"content-type", b"content-length", b"connection", b"accept", b"accept-encoding",
        b"user-agent", b"authorization", b"a2a-version", b"origin", b"traceparent", b"transfer-encoding",
    }
)
_QUOTED_RE = rb'"(?:[\t \x21\x23-\x5b\x5d-\x7e\x80-\xff]|\\[\t \x21-\x7e\x80-\xff])*"'
# RFC 9112 7.1: chunk-size [ chunk-ext ], chunk-ext = *( BWS ";" BWS name [ BWS "=" BWS value ] )
_CHUNK_LINE = re.compile(
    rb"([0-9A-Fa-f]{1,16})((?:[ \t]*;[ \t]*%s(?:[ \t]*=[ \t]*(?:%s|%s))?)*)[ \t]*" % (_TOKEN_RE, _TOKEN_RE, _QUOTED_RE)
)
_REQUEST, _SIZE, _DATA, _DATA_END, _TRAILERS, _DONE = range(6)  # chunked decoding states
_REASONS = {s.value: s.phrase for s in HTTPStatus}


class ParseError(Exception):
    """The request cannot be served: answer ``status`` with ``message`` and close."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class Headers:
    """Request headers: ``get`` is case-insensitive (first value wins), ``items`` keeps all."""

    __slots__ = ("_first", "_items")

    def __init__(self, items: list[tuple[str, str]]) -> None:
        self._items = items
        first: dict[str, str] = {}
        for name, value in items:
            first.setdefault(name, value)
        self._first = first

    def get(self, name: str, default: str | None = None) -> str | None:
        return self._first.get(name.lower(), default)

    def __getitem__(self, name: str) -> str:
        return self._first[name.lower()]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._first

    def items(self) -> list[tuple[str, str]]:
        return list(self._items)

    def __iter__(self):
        return iter(self._first)

    def __len__(self) -> int:
        return len(self._first)

    def __repr__(self) -> str:
        return f"Headers({[n for n, _ in self._items]!r})"


@attrs.frozen
class RequestHead:
    """A parsed request line and header block. ``path`` is percent-decoded; names are lowercase."""

    method: str
    target: str
    path: str
    query: bytes
    http_version: str
    headers: Headers = attrs.field(eq=False)
    content_length: int | None
    chunked: bool
    keep_alive: bool
    upgrade: bool
    expect: bool
    size: int

    @property
    def has_body(self) -> bool:
        return self.chunked or bool(self.content_length)


class RequestParser:
    """Parse the requests of one connection, one at a time (pipelining included)."""

    def __init__(self, *, max_head_bytes: int = MAX_HEAD_BYTES, max_headers: int = MAX_HEADERS) -> None:
        self.max_head_bytes = max_head_bytes
        self.max_headers = max_headers
        self.buffer = bytearray()
        self._head: RequestHead | None = None
        self._end: int | None = None  # end of the current request once its body is read
        self._served = 0  # requests finished on this connection
        # chunked decoding: the head's raw bytes move out of the buffer, which then holds only
        # undecoded input; decoded data goes to one bytearray and the framing is dropped
        self._state = _REQUEST
        self._head_raw = b""
        self._body = bytearray()
        self._remaining = 0  # bytes of the current chunk still to come
        self._raw = 0  # raw bytes of the chunked body consumed so far
        self._trailer_bytes = 0

    def feed(self, data: bytes) -> None:
        self.buffer += data

    @property
    def buffered(self) -> bytes:
        """Everything not yet finished: the current request and whatever follows.

        Raw bytes, except that a chunked body being (or already) decoded is re-framed as one
        chunk of what was decoded so far (trailers read so far are dropped), followed by the
        input not yet decoded; the result means the same to any HTTP/1.1 server."""
        state = self._state
        if state == _REQUEST:
            return bytes(self.buffer)
        out = bytearray(self._head_raw)
        if self._body:
            out += b"%x\r\n" % len(self._body) + self._body
            if state != _DATA_END:  # in _DATA_END the chunk's CRLF is still in the buffer
                out += b"\r\n"
        if state == _DATA:
            out += b"%x\r\n" % self._remaining
        elif state == _TRAILERS:
            out += b"0\r\n"
        elif state == _DONE:
            out += b"0\r\n\r\n"
        out += self.buffer
        return bytes(out)

    def head(self) -> RequestHead | None:
        """The head of the request at the front of the buffer; None until it is complete."""
        if self._head is not None:
            return self._head
        buf = self.buffer
        if not self._served and buf[:1] == H2_PREFACE[:1]:
            n = min(len(buf), len(H2_PREFACE))
            if buf[:n] == H2_PREFACE[:n]:  # HTTP/2 with prior knowledge: not ours to parse
                if n < len(H2_PREFACE):
                    return None
                self._head = RequestHead(
                    "PRI", "*", "", b"", "2.0", Headers([]), None, False, True, False, False, len(H2_PREFACE)
                )
                return self._head
        skipped = 0
        while skipped < MAX_LEADING_CRLF:  # RFC 9112 2.2: ignore empty lines before a request
            if buf[:2] == b"\r\n":
                del buf[:2]
            elif buf[:1] == b"\n":
                del buf[:1]
            else:
                break
            skipped += 1
        # The head ends at the first empty line; lines end in LF with an optional CR before it
        # (RFC 9112 2.2), exactly where h11 ends it, so a handed-off request reads the same.
        end = _HEAD_END.search(buf, 0, self.max_head_bytes + 4)
        if end is None:
            if len(buf) > self.max_head_bytes:
                raise ParseError(431, f"request head is larger than {self.max_head_bytes} bytes")
            if buf[:1] and not _TOKEN.match(buf[:1]):
                raise ParseError(400, "this is not an HTTP/1.x request")
            return None
        self._head = self._parse_head(bytes(buf[: end.start()]), end.end())
        return self._head

    def _parse_head(self, raw: bytes, size: int) -> RequestHead:
        if b"\r" in raw:
            # Every CR must end a line (CRLF, or the head's last line, whose LF is in the
            # blank line after it); any other CR is a bare CR.
            if raw.count(b"\r") != raw.count(b"\r\n") + raw.endswith(b"\r"):
                raise ParseError(400, "request head has a bare CR; lines end with CRLF (or LF)")
            raw = raw.replace(b"\r\n", b"\n")
            if raw.endswith(b"\r"):
                raw = raw[:-1]
        lines = raw.split(b"\n")
        parts = lines[0].split(b" ")
        if len(parts) != 3:
            raise ParseError(400, "malformed request line; expected 'METHOD /path HTTP/1.1'")
        method_b, target_b, version_b = parts
        if method_b not in _COMMON_METHODS and not _TOKEN.fullmatch(method_b):
            raise ParseError(400, "malformed request line: the method is not a token")
        if not _TARGET.fullmatch(target_b):
            raise ParseError(400, "malformed request line: the target has spaces or control characters")
        if version_b == b"HTTP/1.1":
            version = "1.1"
        elif version_b == b"HTTP/1.0":
            version = "1.0"
        elif version_b.startswith(b"HTTP/") and len(version_b) == 8:
            raise ParseError(505, f"HTTP version {version_b[5:].decode('ascii', 'replace')} is not supported; use HTTP/1.1")
        else:
            raise ParseError(400, "malformed request line: bad HTTP version")
        if len(lines) - 1 > self.max_headers:
            raise ParseError(431, f"more than {self.max_headers} request headers")
        # One scan of the whole head instead of one per value; only a head that has a
        # control character somewhere checks each value to name the header.
        check_values = _BAD_VALUE_IN_HEAD.search(raw) is not None
        items: list[tuple[str, str]] = []
        lengths: set[bytes] = set()
        codings: list[bytes] = []
        connection: list[bytes] = []
        hosts = 0
        upgrade = expect = False
        for line in lines[1:]:
            name, sep, value = line.partition(b":")
            lname = name.lower()
            if not sep or (lname not in _COMMON_NAMES and not _TOKEN.fullmatch(name)):
                raise ParseError(400, f"malformed header line {line[:40]!r}; expected 'Name: value'")
            value = value.strip(b" \t")
            if check_values and _BAD_VALUE.search(value):
                raise ParseError(400, f"header {name.decode('ascii')!r} has control characters in its value")
            if lname == b"content-length":
                lengths.update(v.strip(b" \t") for v in value.split(b","))
            elif lname == b"transfer-encoding":
                codings.extend(v.strip(b" \t").lower() for v in value.split(b",") if v.strip())
            elif lname == b"connection":
                connection.extend(v.strip(b" \t").lower() for v in value.split(b","))
            elif lname == b"host":
                hosts += 1
            elif lname == b"upgrade":
                upgrade = True
            elif lname == b"expect":
                expect = True
            items.append((lname.decode("ascii"), value.decode("latin-1")))
        if version == "1.1" and hosts != 1:
            raise ParseError(400, "an HTTP/1.1 request needs exactly one Host header")
        if hosts > 1:
            raise ParseError(400, "more than one Host header")
        content_length: int | None = None
        chunked = False
        if codings:
            if lengths:
                raise ParseError(400, "a request may not have both Transfer-Encoding and Content-Length")
            if version == "1.0":
                raise ParseError(400, "Transfer-Encoding is not allowed in HTTP/1.0")
            if codings != [b"chunked"]:
                raise ParseError(501, "only 'Transfer-Encoding: chunked' is supported")
            chunked = True
        elif lengths:
            if len(lengths) != 1:
                raise ParseError(400, "conflicting Content-Length values")
            (length,) = lengths
            if not length.isdigit() or len(length) > 18:
                raise ParseError(400, "Content-Length must be a non-negative integer")
            content_length = int(length)
        target = target_b.decode("ascii")
        raw_path, _, query = target_b.partition(b"?")
        path = unquote(raw_path.decode("ascii")) if raw_path.startswith(b"/") else ""
        if version == "1.1":
            keep_alive = b"close" not in connection
        else:
            keep_alive = b"keep-alive" in connection and b"close" not in connection
        return RequestHead(
            method_b.decode("ascii"),
            target,
            path,
            query,
            version,
            Headers(items),
            content_length,
            chunked,
            keep_alive,
            upgrade or b"upgrade" in connection,
            expect,
            size,
        )

    def body(self, limit: int) -> bytes | None:
        """The body of the current request; None until it is all buffered.

        Raises ``ParseError(413)`` as soon as the body is known to exceed ``limit`` bytes (for
        a chunked body, also once its raw framing exceeds ``limit + CHUNKED_OVERHEAD``)."""
        head = self._head
        if head is None:
            raise RuntimeError("body() before head()")
        if not head.chunked:
            length = head.content_length or 0
            if length > limit:
                raise ParseError(413, f"request body is larger than the limit of {limit} bytes")
            end = head.size + length
            if len(self.buffer) < end:
                return None
            self._end = end
            return bytes(self.buffer[head.size : end])
        if self._state == _REQUEST:  # the head's bytes leave the buffer; only body input stays
            self._head_raw = bytes(self.buffer[: head.size])
            del self.buffer[: head.size]
            self._state = _SIZE
        return self._chunked(limit)

    def _chunked(self, limit: int) -> bytes | None:
        buf = self.buffer
        max_raw = limit + CHUNKED_OVERHEAD
        while True:
            state = self._state
            if state == _DONE:
                self._end = 0
                return bytes(self._body)
            if state == _DATA:
                n = min(self._remaining, len(buf))
                if not n:
                    return None
                self._body += buf[:n]
                self._consume(n, max_raw, limit)
                self._remaining -= n
                if not self._remaining:
                    self._state = _DATA_END
            elif state == _DATA_END:
                if buf[:2] != b"\r\n"[: len(buf)]:
                    raise ParseError(400, "chunk data is not followed by CRLF")
                if len(buf) < 2:
                    return None
                self._consume(2, max_raw, limit)
                self._state = _SIZE
            elif state == _SIZE:
                line = self._line(MAX_CHUNK_LINE, 400, "chunk-size line is too long", max_raw, limit)
                if line is None:
                    return None
                match = _CHUNK_LINE.fullmatch(line)
                if match is None:
                    raise ParseError(400, f"bad chunk size or chunk extension in {line[:40]!r}")
                size = int(match[1], 16)
                if not size:
                    self._state = _TRAILERS
                    self._trailer_bytes = 0
                    continue
                if len(self._body) + size > limit:
                    raise ParseError(413, f"request body is larger than the limit of {limit} bytes")
                self._remaining = size
                self._state = _DATA
            else:  # _TRAILERS: field lines up to an empty line; checked, then dropped
                room = max(0, self.max_head_bytes - self._trailer_bytes)
                line = self._line(room, 431, f"chunked trailers are larger than {self.max_head_bytes} bytes", max_raw, limit)
                if line is None:
                    return None
                if not line:
                    self._state = _DONE
                    continue
                self._trailer_bytes += len(line) + 2
                name, sep, value = line.partition(b":")
                if not sep or not _TOKEN.fullmatch(name) or _BAD_VALUE.search(value.strip(b" \t")):
                    raise ParseError(400, f"malformed trailer line {line[:40]!r}; expected 'Name: value'")

    def _line(self, max_len: int, status: int, too_long: str, max_raw: int, limit: int) -> bytes | None:
        """Consume and return the CRLF-terminated line at the front of the buffer (without
        the CRLF); None until it is complete. A bare CR or LF is refused."""
        buf = self.buffer
        eol = buf.find(b"\n", 0, max_len + 2)
        if eol < 0:
            cr = buf.find(b"\r", 0, max_len + 2)
            if 0 <= cr < len(buf) - 1:
                raise ParseError(400, "bare CR in a chunk-size or trailer line")
            if len(buf) >= max_len + 2:
                raise ParseError(status, too_long)
            return None
        if not eol or buf[eol - 1] != 0x0D:
            raise ParseError(400, "chunk-size and trailer lines must end with CRLF, not a bare LF")
        line = bytes(buf[: eol - 1])
        if b"\r" in line:
            raise ParseError(400, "bare CR in a chunk-size or trailer line")
        self._consume(eol + 1, max_raw, limit)
        return line

    def _consume(self, n: int, max_raw: int, limit: int) -> None:
        del self.buffer[:n]
        self._raw += n
        if self._raw > max_raw:
            raise ParseError(413, f"request body is larger than the limit of {limit} bytes (counting its chunk framing)")

    def finish(self) -> None:
        """Drop the current (fully read) request; the next one, if any, moves to the front."""
        if self._end is None:
            raise RuntimeError("finish() before the body was read")
        del self.buffer[: self._end]
        self._head = None
        self._end = None
        self._served += 1
        self._state = _REQUEST
        self._head_raw = b""
        self._body = bytearray()
        self._remaining = 0
        self._raw = 0
        self._trailer_bytes = 0


# ---- responses ---------------------------------------------------------------------------

_date_cache: tuple[int, bytes] = (0, b"")


def http_date() -> bytes:
    """The current time as an HTTP date (recomputed at most once a second)."""
    global _date_cache
    now = int(time.time())
    if _date_cache[0] != now:
        _date_cache = (now, formatdate(now, usegmt=True).encode("ascii"))
    return _date_cache[1]


def render_response(
    status: int,
    headers: list[tuple[str, str]] | tuple[tuple[str, str], ...],
    body: bytes,
    *,
    keep_alive: bool = True,
    http_version: str = "1.1",
    head_only: bool = False,
) -> bytes:
    """Serialise a complete response with ``Content-Length`` (and ``Connection`` as needed)."""
    out = [f"HTTP/1.1 {status} {_REASONS.get(status, '')}".encode("ascii")]
    for name, value in headers:
        if "\r" in name or "\n" in name or "\r" in value or "\n" in value:
            raise ValueError(f"header {name!r} contains a line break")
        out.append(f"{name.lower()}: {value}".encode("latin-1"))
    out.append(b"content-length: " + str(len(body)).encode("ascii"))
    out.append(b"date: " + http_date())
    if not keep_alive:
        out.append(b"connection: close")
    elif http_version == "1.0":
        out.append(b"connection: keep-alive")
    out.append(b"")
    out.append(b"" if head_only else body)
    return b"\r\n".join(out)


def reason_code(status: int) -> str:
    """The reason phrase of ``status`` as an error code: 431 → ``request_header_fields_too_large``."""
    return _REASONS.get(status, "error").lower().replace(" ", "_").replace("-", "_")


def error_response(error: ParseError) -> bytes:
    """The plain-JSON response to a request the parser refused (the connection then closes)."""
    import json

    code = reason_code(error.status)
    body = json.dumps({"error": {"code": code, "message": error.message}}).encode()
    return render_response(
        error.status,
        [("content-type", "application/json"), ("x-content-type-options", "nosniff"), ("cache-control", "no-store")],
        body,
        keep_alive=False,
    )
