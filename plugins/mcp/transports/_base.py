"""What every client transport offers the MCP client session.

A transport moves whole JSON-RPC messages (decoded JSON objects). Incoming messages
arrive on ``incoming`` (a bounded channel closed when the connection ends, with the
reason in ``closed_reason``); ``send`` hands one message to the peer.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Protocol

import trio
from roost.kernel._errors import RoostError

MAX_MESSAGE_BYTES = 10 * 1024 * 1024
INCOMING_BUFFER = 256


async def write_now(stream: Any, data: bytes) -> None:
    """``stream.send_all(data)``, but written at once when the pipe has room: Trio's
    ``FdStream.send_all`` yields to every other ready task before it writes, which puts
    whatever they do (say, a database commit) in front of a reply that is ready."""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):  # not a pipe (e.g. a memory stream in tests)
        await stream.send_all(data)
        return
    await trio.lowlevel.checkpoint_if_cancelled()
    try:
        sent = os.write(fd, data)
    except BlockingIOError:
        sent = 0
    except OSError:
        sent = 0  # let send_all raise the matching Trio error (closed, broken)
    if sent < len(data):
        await stream.send_all(data[sent:])


WRITE_BATCH_BYTES = 1 << 20  # messages queued behind a busy pipe go out together, up to this


def take_batch(outbox: list[bytes], limit: int = WRITE_BATCH_BYTES) -> bytes:
    """Remove and join the oldest messages of ``outbox``, at most ``limit`` bytes of them
    (always at least one)."""
    size, count = len(outbox[0]), 1
    while count < len(outbox) and size + len(outbox[count]) <= limit:
        size += len(outbox[count])
        count += 1
    batch = outbox[0] if count == 1 else b"".join(outbox[:count])
    del outbox[:count]
    return batch


class BatchedWriter:
    """Writes framed messages to a pipe; messages that queue up while one is being written
    (or, with ``others_in_flight``, that ready tasks add during one scheduler tick) go out
    together in one write: each write wakes the peer. The queue is bounded by the senders
    waiting on the lock. A sender cancelled before its message was taken sends nothing. A
    failed write raises in the sender that wrote, and in every sender whose message it held.
    """

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self._lock = trio.Lock()
        self._outbox: list[bytes] = []
        self.error: BaseException | None = None  # the write that failed, if one did

    async def send(self, data: bytes, *, others_in_flight: bool = False) -> None:
        self._outbox.append(data)
        try:
            try:  # no scheduler round trip when nobody is writing
                self._lock.acquire_nowait()
            except trio.WouldBlock:
                await self._lock.acquire()
        except BaseException:
            for i, item in enumerate(self._outbox):  # never taken: never sent
                if item is data:
                    del self._outbox[i]
                    break
            raise
        try:
            if others_in_flight and self._outbox:
                # Let the tasks that are ready add theirs to this write; a lone message
                # goes out at once.
                await trio.lowlevel.cancel_shielded_checkpoint()
            if not self._outbox and self.error is not None:
                raise self.error  # ours went out in a write that failed
            # Ours is written by now if the outbox is empty (an earlier holder took it).
            while self._outbox:
                try:
                    await write_now(self.stream, take_batch(self._outbox))
                except Exception as exc:  # broken or closed pipe: later senders learn it too
                    self.error = exc
                    raise
        finally:
            self._lock.release()


class PipeReader:
    """Reads a pipe (``trio.lowlevel.FdStream``) with one scheduler round trip less per
    message than ``receive_some``, which first yields to every other ready task even when
    the reply it waits for is already there.

    Fair all the same: a read that follows a read which did not have to wait yields first,
    so a peer that floods the pipe cannot keep the event loop to itself. In request/reply
    traffic every read waits for its data, so no extra yield is paid.
    """

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        try:
            self._fd: int | None = stream.fileno()
        except (AttributeError, OSError, ValueError):  # not a pipe (e.g. a memory stream)
            self._fd = None
        self._waited = True

    async def receive_some(self, max_bytes: int) -> bytes:
        if self._fd is None:
            return await self.stream.receive_some(max_bytes)
        if self._waited:
            await trio.lowlevel.checkpoint_if_cancelled()
        else:  # data came back to back: let the other tasks run before reading more
            await trio.lowlevel.checkpoint()
        self._waited = False
        while True:
            try:
                return os.read(self._fd, max_bytes)
            except BlockingIOError:  # nothing yet: wait (a checkpoint), then read
                self._waited = True
                await trio.lowlevel.wait_readable(self._fd)
            except OSError:  # closed or broken: let receive_some raise the matching Trio error
                return await self.stream.receive_some(max_bytes)


@contextmanager
def single_errors() -> Iterator[None]:
    """Re-raise an exception group holding one exception as that exception.

    Our context managers own nurseries; a caller's ``except McpTimeout`` around the block
    should not have to know that.
    """
    try:
        yield
    except BaseExceptionGroup as group:
        while isinstance(group, BaseExceptionGroup) and len(group.exceptions) == 1:
            group = group.exceptions[0]
        raise group from None


class TransportClosed(RoostError):
    """The connection to the MCP server is gone (the process exited, the stream broke)."""

    code = "mcp_transport_closed"


class TransportError(RoostError):
    """The transport could not be opened or refused a message."""

    code = "mcp_transport_error"


class ClientTransport(Protocol):
    """The interface of stdio, Streamable HTTP and HTTP+SSE client transports."""

    kind: str
    incoming: Any  # trio.MemoryReceiveChannel[dict]
    closed_reason: str | None

    async def send(self, message: Mapping[str, Any]) -> None:
        """Deliver one JSON-RPC message; raises TransportClosed when the peer is gone."""

    def set_protocol_version(self, version: str | None, *, modern: bool = False) -> None:
        """Tell the transport the negotiated version (HTTP sends it as a header)."""

    def cancel_request(self, request_id: Any) -> bool:
        """Abort the transport-level exchange of a request (HTTP: close its stream).

        Returns True when closing the stream is itself the cancellation signal."""


__all__ = ["INCOMING_BUFFER", "MAX_MESSAGE_BYTES", "ClientTransport", "TransportClosed", "TransportError", "single_errors"]
