"""Sans-I/O stdio framing for MCP: newline-delimited JSON, or ``Content-Length`` headers
(older LSP-style peers, noticed from their first bytes and answered in kind). ``feed``
bytes, get ``Frame``, ``NotJson`` or ``Oversize`` (already drained) events; never raises.
"""

from __future__ import annotations

import json
from typing import Any

import attrs
from roost.kernel import InvalidInput, jsonrpc, parse_int

from ._protocol import MAX_MESSAGE_BYTES

Oversize = jsonrpc.Oversize

NDJSON = "ndjson"
CONTENT_LENGTH = "content-length"

_HEADER_PREFIX = b"content-length:"
_MAX_HEADER_BYTES = 8 * 1024


@attrs.frozen
class Frame:
    """One decoded JSON message and its size in bytes."""

    message: Any
    size: int


@attrs.frozen
class NotJson:
    """A line (or framed body) that is not valid JSON; ``line`` is cut to 200 characters."""

    line: str
    error: str


FrameEvent = Frame | NotJson | Oversize


def _preview(data: bytes) -> str:
    text = data[:200].decode("utf-8", "replace")
    return text + ("…" if len(data) > 200 else "")


def _decode(body: bytes) -> Frame | NotJson:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        return NotJson(_preview(body), f"not UTF-8 (byte {exc.start})")
    try:
        return Frame(jsonrpc.loads(text), len(body))
    except json.JSONDecodeError as exc:
        return NotJson(
            _preview(body), f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        )
    except RecursionError:
        return NotJson(_preview(body), "JSON nested too deeply")
    except ValueError as exc:  # e.g. an integer past Python's digit limit (not a JSONDecodeError)
        return NotJson(_preview(body), f"invalid JSON: {exc}")


class StdioFramer:
    """Incremental decoder and encoder for one stdio stream pair. ``mode`` is None until the
    peer's first bytes decide it (``ndjson`` unless ``Content-Length:``); set it to force one."""

    def __init__(self, *, max_bytes: int = MAX_MESSAGE_BYTES, mode: str | None = None) -> None:
        if mode not in (None, NDJSON, CONTENT_LENGTH):
            raise ValueError(f"mode: expected {NDJSON!r} or {CONTENT_LENGTH!r}, got {mode!r}")
        self._lines = jsonrpc.LineFramer(max_bytes)  # checks max_bytes
        self.max_bytes = max_bytes
        self.mode = mode
        self._buf = bytearray()  # Content-Length framing, and bytes before the mode is known
        self._drain_body = 0  # bytes of an oversize framed body still to skip
        self._body_len: int | None = None  # Content-Length of the body being read

    def feed(self, data: bytes) -> list[FrameEvent]:
        """Add bytes read from the peer; return the events they complete."""
        if self.mode == NDJSON:
            return [
                line if isinstance(line, Oversize) else _decode(line)
                for line in self._lines.feed(data)
            ]
        self._buf += data
        if self.mode is None:
            if not self._decide_mode():
                return []
            if self.mode == NDJSON:
                held = bytes(self._buf)
                self._buf.clear()
                return self.feed(held)
        events: list[FrameEvent] = []
        while self._step_headers(events):
            pass
        return events

    def _decide_mode(self) -> bool:
        stripped = bytes(self._buf).lstrip()
        if not stripped:
            if len(self._buf) > _MAX_HEADER_BYTES:
                self._buf.clear()
            return False
        probe = stripped[: len(_HEADER_PREFIX)].lower()
        if _HEADER_PREFIX.startswith(probe) and len(probe) < len(_HEADER_PREFIX):
            return False  # could still become "Content-Length:"; wait for more
        self.mode = CONTENT_LENGTH if probe == _HEADER_PREFIX else NDJSON
        return True

    def _step_headers(self, events: list[FrameEvent]) -> bool:
        if self._drain_body:
            take = min(self._drain_body, len(self._buf))
            del self._buf[:take]
            self._drain_body -= take
            return take > 0
        if self._body_len is None:
            end = self._buf.find(b"\r\n\r\n")
            sep = 4
            if end < 0:
                end = self._buf.find(b"\n\n")
                sep = 2
            if end < 0:
                if len(self._buf) > _MAX_HEADER_BYTES:
                    why = "header block too long or missing Content-Length"
                    events.append(NotJson(_preview(bytes(self._buf)), why))
                    self._buf.clear()
                return False
            header_block = bytes(self._buf[:end])
            del self._buf[: end + sep]
            declared = None
            for raw in header_block.split(b"\n"):
                name, _, value = raw.strip().partition(b":")
                if name.strip().lower() == b"content-length":
                    declared = value.strip().decode("latin-1")
            try:  # None (no header) is refused too
                length = parse_int(declared, "Content-Length", 0, 2**62)
            except InvalidInput:
                events.append(
                    NotJson(_preview(header_block), "missing or malformed Content-Length header")
                )
                return True
            if length > self.max_bytes:
                events.append(Oversize(length, self.max_bytes))
                self._drain_body = length
                return True
            self._body_len = length
        if len(self._buf) < self._body_len:
            return False
        body = bytes(self._buf[: self._body_len])
        del self._buf[: self._body_len]
        self._body_len = None
        events.append(_decode(body))
        return True

    def encode(self, payload: bytes) -> bytes:
        """Frame one encoded message in the peer's framing; ValueError for one over the limit
        or, in NDJSON, one containing a raw newline."""
        if len(payload) > self.max_bytes:
            raise ValueError(f"message is {len(payload)} bytes, over the limit of {self.max_bytes}")
        if self.mode == CONTENT_LENGTH:
            return b"Content-Length: %d\r\n\r\n" % len(payload) + payload
        if b"\n" in payload:
            raise ValueError(
                "an NDJSON message must not contain a raw newline; encode it compactly"
            )
        return payload + b"\n"

    @property
    def pending(self) -> bool:
        """True while part of a message is held (waiting for the rest of it)."""
        return bool(self._buf) or self._body_len is not None or self._lines.pending
