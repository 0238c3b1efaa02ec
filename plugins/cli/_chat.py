"""``roost chat AGENT``: an interactive terminal chat with streamed output.

Runs the agent in an in-process kernel (sharing the data directory, so the session is
stored like any other) and prints the reply as the model produces it, from the kernel's
``AGENT:TOKEN`` events. Empty line or ``/quit`` (or end of input) leaves; ``/new`` starts a
new session.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TextIO

import trio

from ._commands import CliError, KernelOpener, _opener, say

LineReader = Callable[[], Awaitable[str | None]]
PROMPT = "you › "


async def chat_command(
    config: Any,
    agent: str,
    *,
    session_id: str | None = None,
    out: TextIO,
    err: TextIO,
    read_line: LineReader | None = None,
    open_kernel: KernelOpener | None = None,
) -> int:
    """Chat with ``agent`` until end of input; returns an exit code."""
    from roost.kernel import AgentNotFound, EventKind

    say(err, "booting kernel…")
    async with _opener(open_kernel)(config) as kernel:
        if agent not in kernel.agents:
            raise AgentNotFound(agent, list(kernel.agents))
        if agent in kernel.agent_errors:
            raise CliError(f"agent {agent} is unavailable: {kernel.agent_errors[agent]}")
        session = session_id or uuid.uuid4().hex
        say(err, f"chatting with {agent} (session {session}); /new for a new session, /quit to leave")
        async with _stdin_lines() if read_line is None else _given(read_line) as next_line:
            while True:
                out.write(PROMPT)
                out.flush()
                line = await next_line()
                if line is None or line.strip() in ("", "/quit", "/exit"):
                    out.write("\n")
                    return 0
                if line.strip() == "/new":
                    session = uuid.uuid4().hex
                    say(err, f"new session {session}")
                    continue
                out.write(f"{agent} › ")
                out.flush()
                printed: list[str] = []
                async with kernel.tap.subscribe(kinds=(EventKind.AGENT_TOKEN,)) as tokens:
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(_print_tokens, tokens, session, out, printed)
                        reply = await kernel.send(agent, line.strip(), session_id=session, stream=True)
                        nursery.cancel_scope.cancel()
                    # Tokens are published before the reply: the rest are in the buffer now.
                    while True:
                        try:
                            _print_token(tokens.receive_nowait(), session, out, printed)
                        except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                            break
                if "".join(printed).strip() != reply.text.strip():
                    # the provider did not stream, or a slow terminal lost tokens: show it whole
                    out.write(("\n" if printed else "") + reply.text)
                out.write("\n")
                out.flush()
                if reply.is_error:
                    say(err, f"(the agent reported an error: {reply.stop_reason})")


async def _print_tokens(tokens: Any, session: str, out: TextIO, printed: list[str]) -> None:
    async for event in tokens:
        _print_token(event, session, out, printed)


def _print_token(event: Any, session: str, out: TextIO, printed: list[str]) -> None:
    payload = event.payload if isinstance(event.payload, dict) else {}
    if payload.get("session_id") == session:
        text = str(payload.get("text", ""))
        printed.append(text)
        out.write(text)
        out.flush()


class _given:
    """Use a test's line reader as the chat's input."""

    def __init__(self, read_line: LineReader) -> None:
        self._read = read_line

    async def __aenter__(self) -> LineReader:
        return self._read

    async def __aexit__(self, *exc: object) -> None:
        return None


class _stdin_lines:
    """Lines from standard input, read without blocking the event loop."""

    async def __aenter__(self) -> LineReader:
        self._stream = trio.lowlevel.FdStream(os.dup(sys.stdin.fileno()))
        self._buffer = b""
        return self._next

    async def __aexit__(self, *exc: object) -> None:
        await self._stream.aclose()

    async def _next(self) -> str | None:
        while b"\n" not in self._buffer:
            chunk = await self._stream.receive_some(4096)
            if not chunk:
                if not self._buffer:
                    return None
                line, self._buffer = self._buffer, b""
                return line.decode("utf-8", "replace")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode("utf-8", "replace")

