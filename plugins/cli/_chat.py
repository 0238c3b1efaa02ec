"""``roost chat AGENT``: an interactive terminal chat with streamed output.

Through the running daemon when there is one (the reply's tokens stream in on ``/api/events``), else
an in-process kernel. Empty line, ``/quit`` or end of input leaves; ``/new`` starts a new session.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, nullcontext
from typing import Any, TextIO

import trio

from ._client import DaemonClient
from ._commands import CliError, KernelOpener, _connect, drain, say

LineReader = Callable[[], Awaitable[str | None]]
PROMPT = "you › "
# After the daemon's HTTP reply, how long its event stream may lag behind with the last tokens.
STREAM_GRACE_S = 2.0


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

    async with _connect(config, err, open_kernel, agent) as client:
        if isinstance(client, DaemonClient):
            agents = {a.get("name"): a for a in await client.agents()}
            if agent not in agents:
                raise AgentNotFound(agent, list(agents))
            if agents[agent].get("status") == "unavailable":
                raise CliError(f"agent {agent} is unavailable: {agents[agent].get('error')}")
            say(err, f"chatting with {agent} via the daemon at {client.info.url}")
            async with client.events([EventKind.AGENT_TOKEN, EventKind.AGENT_REPLY]) as ws:
                turn = _daemon_turn(client, ws, agent)
                return await _converse(agent, session_id, turn, out, err, read_line)
        kernel = client.kernel

        async def turn(
            text: str, session: str, printed: list[str], out: TextIO
        ) -> tuple[str, bool, str]:
            async with kernel.tap.subscribe(kinds=(EventKind.AGENT_TOKEN,)) as tokens:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(_print_tokens, tokens, session, out, printed)
                    reply = await kernel.send(agent, text, session_id=session, stream=True)
                    nursery.cancel_scope.cancel()
                # Tokens are published before the reply: the rest are in the buffer now.
                for event in drain(tokens):
                    _print_token(event.payload, session, out, printed)
            return reply.text, reply.is_error, str(reply.stop_reason)

        return await _converse(agent, session_id, turn, out, err, read_line)


Turn = Callable[[str, str, list[str], TextIO], Awaitable[tuple[str, bool, str]]]


async def _converse(
    agent: str,
    session_id: str | None,
    turn: Turn,
    out: TextIO,
    err: TextIO,
    read_line: LineReader | None,
) -> int:
    """The prompt loop: read a line, run ``turn`` (which prints tokens as they come)."""
    session = session_id or uuid.uuid4().hex
    say(err, f"chatting with {agent} (session {session}); /new for a new session, /quit to leave")
    async with _stdin_lines() if read_line is None else nullcontext(read_line) as next_line:
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
            text, is_error, reason = await turn(line.strip(), session, printed, out)
            if "".join(printed).strip() != text.strip():
                # the provider did not stream, or a slow terminal lost tokens: show it whole
                out.write(("\n" if printed else "") + text)
            out.write("\n")
            out.flush()
            if is_error:
                say(err, f"(the agent reported an error: {reason})")


def _daemon_turn(client: Any, ws: Any, agent: str) -> Turn:
    """One turn through the daemon: post the message, print its tokens from the event stream."""

    async def turn(
        text: str, session: str, printed: list[str], out: TextIO
    ) -> tuple[str, bool, str]:
        replied = trio.Event()

        async def follow() -> None:
            from trio_websocket import ConnectionClosed

            while True:
                try:
                    event = json.loads(await ws.get_message())
                except ValueError:
                    continue
                except ConnectionClosed:  # the reply still comes over HTTP, and is shown whole
                    return
                payload = event.get("payload") if isinstance(event, dict) else None
                if not isinstance(payload, dict) or event.get("source") != agent:
                    continue
                if event.get("kind") == "AGENT:TOKEN":
                    _print_token(payload, session, out, printed)
                elif event.get("kind") == "AGENT:REPLY" and payload.get("session_id") == session:
                    replied.set()
                    return

        async with trio.open_nursery() as nursery:
            nursery.start_soon(follow)
            reply = await client.send(agent, text, session_id=session)
            # The run's events left the daemon before its HTTP reply; let the stream catch up.
            with trio.move_on_after(STREAM_GRACE_S):
                await replied.wait()
            nursery.cancel_scope.cancel()
        is_error = bool(reply.get("is_error"))
        return str(reply.get("reply", "")), is_error, "error" if is_error else "end_turn"

    return turn


async def _print_tokens(tokens: Any, session: str, out: TextIO, printed: list[str]) -> None:
    async for event in tokens:
        _print_token(event.payload, session, out, printed)


def _print_token(payload: Any, session: str, out: TextIO, printed: list[str]) -> None:
    if isinstance(payload, dict) and payload.get("session_id") == session:
        text = str(payload.get("text", ""))
        printed.append(text)
        out.write(text)
        out.flush()


@asynccontextmanager
async def _stdin_lines() -> AsyncIterator[LineReader]:
    """Lines from standard input, read without blocking the event loop."""
    buffer = b""
    async with trio.lowlevel.FdStream(os.dup(sys.stdin.fileno())) as stream:

        async def next_line() -> str | None:
            nonlocal buffer
            while b"\n" not in buffer:
                chunk = await stream.receive_some(4096)
                if not chunk:
                    line, buffer = buffer, b""
                    return line.decode("utf-8", "replace") if line else None
                buffer += chunk
            line, _, buffer = buffer.partition(b"\n")
            return line.decode("utf-8", "replace")

        yield next_line
