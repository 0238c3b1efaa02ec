"""A sans-I/O decoder for Server-Sent Events (the WHATWG ``text/event-stream`` format)."""

from __future__ import annotations

import attrs


@attrs.frozen
class SseEvent:
    """One dispatched event: ``event`` defaults to ``"message"``; ``data`` lines joined by ``\\n``."""

    data: str
    event: str = "message"
    id: str | None = None


class SseDecoder:
    """Feed text chunks as they arrive; get back the events they complete.

    Handles ``\\n``, ``\\r\\n`` and ``\\r`` line ends split across chunks, comments
    (``:``-lines), multi-line ``data`` and a missing space after the colon.
    ``pending`` is True when a partly received event is buffered (a stream cut there lost it).
    """

    def __init__(self, *, max_buffer_chars: int = 16 * 1024 * 1024) -> None:
        self._buffer = ""
        self._data: list[str] = []
        self._event = ""
        self._id: str | None = None
        self._max = max_buffer_chars

    @property
    def pending(self) -> bool:
        return bool(self._buffer.strip() or self._data or self._event)

    def feed(self, chunk: str) -> list[SseEvent]:
        self._buffer += chunk
        if len(self._buffer) > self._max:
            raise ValueError(f"an SSE line is longer than {self._max} characters")
        events: list[SseEvent] = []
        while True:
            cut = _line_end(self._buffer)
            if cut is None:
                return events
            line, rest_start = cut
            self._buffer = self._buffer[rest_start:]
            event = self._line(line)
            if event is not None:
                events.append(event)

    def _line(self, line: str) -> SseEvent | None:
        if line == "":
            if not self._data and not self._event:
                return None
            event = SseEvent("\n".join(self._data), self._event or "message", self._id)
            self._data, self._event = [], ""
            return event
        if line.startswith(":"):
            return None
        field, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if field == "data":
            self._data.append(value)
        elif field == "event":
            self._event = value
        elif field == "id" and "\0" not in value:
            self._id = value
        return None


def _line_end(buffer: str) -> tuple[str, int] | None:
    """The first complete line and where the rest starts; a lone trailing ``\\r`` waits."""
    for i, ch in enumerate(buffer):
        if ch == "\n":
            return buffer[:i], i + 1
        if ch == "\r":
            if i + 1 == len(buffer):
                return None  # could be the first half of \r\n
            return buffer[:i], i + 2 if buffer[i + 1] == "\n" else i + 1
    return None
