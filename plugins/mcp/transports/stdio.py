"""stdio client transport: run an MCP server as a child process, NDJSON on its pipes.

Its environment is only ``PATH``, ``HOME`` and the listed names; it runs in its own process
group under a supervisor (``_pdeathsig.py``) that reaps everything it started when roost
dies or it exits. stderr goes to the log; stdout lines that are not JSON objects are
skipped. Shutdown: close stdin → wait → SIGTERM → wait → SIGKILL → reap (bounded waits).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Any

import trio
from roost.kernel import (
    REDACTED_FOR_LOG,
    child_open_file_limit,
    jsonrpc,
    redact_for_log,
    redact_from_logs,
)

from .._framing import NDJSON, Frame, NotJson, Oversize, StdioFramer
from .._protocol import MAX_MESSAGE_BYTES
from ._base import (
    INCOMING_BUFFER,
    BatchedWriter,
    ClientTransport,
    TransportClosed,
    TransportError,
    single_errors,
)

log = logging.getLogger("roost.mcp.stdio")

BASE_ENV = ("PATH", "HOME")
STDIN_CLOSE_GRACE_S = 2.0
TERM_GRACE_S = 2.0
KILL_GRACE_S = 5.0
_READ_CHUNK = 65536
_STDERR_LINE_MAX = 4000


def child_environment(
    names: Sequence[str], source: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment for a server: PATH, HOME and ``names`` that are set, nothing else."""
    source = os.environ if source is None else source
    return {name: source[name] for name in (*BASE_ENV, *names) if name in source}


def command_problem(command: Any) -> str | None:
    """Why ``command`` may not run (empty, or ``..``: path traversal), or None."""
    if not isinstance(command, str) or not command.strip():
        return 'missing; name the server program, e.g. command = "npx"'
    if ".." in command:
        return f"{command!r} contains '..'; use an absolute path or a program on PATH"
    return None


def check_command(command: str) -> None:
    problem = command_problem(command)
    if problem:
        raise TransportError(f"transport.command: {problem}")


class StdioTransport(ClientTransport):
    """A running server process; see ``open_stdio_transport``."""

    kind = "stdio"

    def __init__(self, name: str, process: trio.Process, incoming: Any) -> None:
        self.name = name
        self.process = process
        self.incoming = incoming
        self.closed_reason: str | None = None
        # Set by the client session: each message goes to this synchronous function, not to
        # ``incoming`` (a task hop less a reply); ``incoming`` still ends with the server.
        self.deliver: Any = None
        self._writer = BatchedWriter(process.stdin)
        self.skipped_lines = 0
        self.oversized_lines = 0

    @property
    def pid(self) -> int:
        return self.process.pid

    async def send(self, message: Mapping[str, Any]) -> None:
        data = jsonrpc.dumps(message, allow_nan=True).encode("utf-8") + b"\n"
        if len(data) > MAX_MESSAGE_BYTES:
            raise TransportError(
                f"message is {len(data)} bytes, over the 10 MB limit of the stdio transport"
            )
        if self.closed_reason is not None or self.process.stdin is None:
            raise TransportClosed(
                f"MCP server {self.name!r} is gone: {self.closed_reason or 'stdin closed'}"
            )
        try:
            await self._writer.send(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            reason = f"MCP server {self.name!r} stopped reading its input ({exc})"
            raise TransportClosed(reason) from None


async def _receive(stream: Any) -> bytes:
    """The next bytes ``stream`` has; none once it ended or broke."""
    try:
        return await stream.receive_some(_READ_CHUNK)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        return b""


async def _pump_stdout(transport: StdioTransport, send: Any) -> None:
    framer = StdioFramer(mode=NDJSON)
    stream = transport.process.stdout
    assert stream is not None
    while chunk := await _receive(stream):
        for event in framer.feed(chunk):
            if isinstance(event, Oversize):
                transport.oversized_lines += 1
                log.error(
                    "MCP server %s sent a message of %d bytes, over the limit "
                    "of %d; it was dropped",
                    transport.name,
                    event.size,
                    event.limit,
                )
                continue
            if not isinstance(event, Frame) or not isinstance(event.message, dict):
                transport.skipped_lines += 1
                what = (
                    f"{event.error}: {event.line}"
                    if isinstance(event, NotJson)
                    else f"a JSON {jsonrpc.json_type(event.message)}"
                )
                log.warning(
                    "MCP server %s wrote a line on stdout that is not a JSON object (skipped): %s",
                    transport.name,
                    what,
                )
                continue
            message = event.message
            if transport.deliver is not None:
                try:
                    transport.deliver(message)
                except Exception:  # one bad message must not end the connection
                    log.exception("MCP server %s: handling a message failed", transport.name)
                continue
            try:  # no scheduler round trip while the reader keeps up
                send.send_nowait(message)
            except trio.WouldBlock:
                await send.send(message)


async def _pump_stderr(transport: StdioTransport) -> None:
    stream = transport.process.stderr
    assert stream is not None
    server_log = logging.getLogger(f"roost.mcp.server.{transport.name}")
    lines = jsonrpc.LineFramer(max_bytes=_STDERR_LINE_MAX * 4)
    while chunk := await _receive(stream):
        for line in lines.feed(chunk):
            if isinstance(line, bytes):  # redacted here, before the cut, and only here
                text = redact_for_log(line, _STDERR_LINE_MAX)
                server_log.info("%s", text, extra=REDACTED_FOR_LOG)


def _signal_group(process: trio.Process, sig: int) -> None:
    try:
        os.killpg(process.pid, sig)
    except (ProcessLookupError, PermissionError):
        with suppress(ProcessLookupError):
            process.send_signal(sig)


async def _shutdown(transport: StdioTransport) -> None:
    """stdin close → wait → SIGTERM → wait → SIGKILL → reap; every step bounded."""
    process = transport.process
    with trio.CancelScope(shield=True):
        if process.stdin is not None:
            with suppress(trio.BrokenResourceError, OSError):
                await process.stdin.aclose()
        with trio.move_on_after(STDIN_CLOSE_GRACE_S):
            await process.wait()
        if process.returncode is None:
            _signal_group(process, signal.SIGTERM)
            with trio.move_on_after(TERM_GRACE_S):
                await process.wait()
        _signal_group(process, signal.SIGKILL)  # also whatever lingers in its group
        if process.returncode is None:
            with trio.move_on_after(KILL_GRACE_S):
                await process.wait()
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                await stream.aclose()


_SUPERVISOR = str(Path(__file__).with_name("_pdeathsig.py"))


def wrapped_command(command: str, args: Sequence[str]) -> list[str]:
    """The argv that runs ``command`` under the supervisor (stdlib only: ``-I -S``); the
    server gets the operator's open-file limit back if roost raised its own."""
    nofile = child_open_file_limit()
    limit = ["--nofile", str(nofile)] if nofile is not None else []
    return [sys.executable, "-I", "-S", _SUPERVISOR, str(os.getpid()), *limit, "--", command, *args]


@asynccontextmanager
async def open_stdio_transport(
    command: str,
    args: Sequence[str] = (),
    *,
    name: str = "server",
    cwd: str | None = None,
    env: Sequence[str] = (),
    extra_env: Mapping[str, str] | None = None,
    secrets: Sequence[str] = (),
) -> AsyncIterator[StdioTransport]:
    """Start ``command args`` and yield its transport; leaving stops and reaps it. ``env``
    names the variables of roost's environment the server may see; ``extra_env`` sets values;
    ``secrets`` are kept out of roost's log (``redact_from_logs``), where its stderr goes."""
    check_command(command)
    redact_from_logs(secrets)
    child_env = child_environment(env)
    if extra_env:
        child_env.update(extra_env)
    try:
        process = await trio.lowlevel.open_process(
            wrapped_command(command, args),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=child_env,
            cwd=cwd,
            start_new_session=True,
        )
    except OSError as exc:
        raise TransportError(f"could not start MCP server {name!r} ({command}): {exc}") from None
    send, receive = trio.open_memory_channel[dict](INCOMING_BUFFER)
    transport = StdioTransport(name, process, receive)
    try:
        with single_errors():
            async with trio.open_nursery() as nursery:

                async def watch() -> None:
                    async with send:
                        await _pump_stdout(transport, send)
                        with trio.move_on_after(1.0):
                            await process.wait()
                        code = process.returncode
                        if transport.closed_reason is None:
                            transport.closed_reason = (
                                f"the process exited with code {code}"
                                if code is not None
                                else "the process closed its standard output"
                            )

                nursery.start_soon(watch)
                nursery.start_soon(_pump_stderr, transport)
                try:
                    yield transport
                finally:
                    if transport.closed_reason is None:
                        transport.closed_reason = "the connection was closed"
                    await _shutdown(transport)
                    nursery.cancel_scope.cancel()
    finally:
        if process.returncode is None:
            with trio.CancelScope(shield=True):
                _signal_group(process, signal.SIGKILL)
                with trio.move_on_after(KILL_GRACE_S):
                    await process.wait()
