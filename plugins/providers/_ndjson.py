"""A sans-I/O decoder for newline-delimited JSON streams (Ollama's streaming format)."""

from __future__ import annotations

import json
from typing import Any


class NdjsonError(ValueError):
    """A line of the stream is not JSON."""


class NdjsonDecoder:
    """Feed text chunks; get back the JSON values of the lines they complete.

    ``pending`` is True when a partial line is buffered (a stream cut there lost it).
    """

    def __init__(self, *, max_line_chars: int = 16 * 1024 * 1024) -> None:
        self._buffer = ""
        self._max = max_line_chars

    @property
    def pending(self) -> bool:
        return bool(self._buffer.strip())

    def feed(self, chunk: str) -> list[Any]:
        self._buffer += chunk
        *lines, self._buffer = self._buffer.split("\n")
        if len(self._buffer) > self._max:
            raise NdjsonError(f"an NDJSON line is longer than {self._max} characters")
        out = []
        for line in lines:
            line = line.strip()
            if not line:
                continue
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise NdjsonError(f"a line of the stream is not JSON ({exc.msg}): {line[:200]!r}") from None
        return out
