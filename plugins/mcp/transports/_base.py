"""What every client transport offers the MCP client session: decoded messages arrive on
``incoming`` (closed when the connection ends, the reason in ``closed_reason``); ``send``
(``TransportClosed`` once gone); ``set_protocol_version``; ``cancel_request`` (True when
aborting the exchange is itself the cancellation: closing its HTTP stream).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import trio
from roost.kernel import RoostError

INCOMING_BUFFER = 256

WRITE_BATCH_BYTES = 1 << 20  # messages queued behind a busy pipe go out together, up to this
WRITE_STALL_S = 30.0  # a taken round the peer has not drained within this: the pipe is given up


def take_batch(outbox: list[bytes], limit: int = WRITE_BATCH_BYTES) -> bytes:
    """Remove and join the oldest messages of ``outbox``: one at least, ``limit`` bytes at most."""
    size, count = len(outbox[0]), 1
    while count < len(outbox) and size + len(outbox[count]) <= limit:
        size += len(outbox[count])
        count += 1
    batch = outbox[0] if count == 1 else b"".join(outbox[:count])
    del outbox[:count]
    return batch


class _Round:
    """Messages that go out in one write (a few past ``WRITE_BATCH_BYTES``), and their event."""

    __slots__ = ("messages", "wake", "done", "error")

    def __init__(self) -> None:
        self.messages: list[bytes] = []
        self.wake = trio.Event()
        self.done = False
        self.error: BaseException | None = None

    def finish(self, error: BaseException | None) -> None:
        self.done, self.error = True, error
        self.wake.set()

    def hand_over(self) -> None:
        """Wake the senders, not written: the writer left (one of them writes next)."""
        wake, self.wake = self.wake, trio.Event()
        wake.set()


class BatchedWriter:
    """Sends framed messages on a Trio stream; those that queue up while one ``send_all``
    runs go out together in the next. A sender cancelled before its message was taken
    sends nothing; a taken message is written whole (a cut would glue a partial line onto
    the next) within ``WRITE_STALL_S``; a failed write raises in each sender it held."""

    def __init__(self, stream: trio.abc.SendStream) -> None:
        self.stream = stream
        self._writing = False  # a sender is writing (rounds, until none is left)
        self._round = _Round()  # the messages the next write takes
        self.error: BaseException | None = None  # the write that failed, if one did

    async def send(self, data: bytes) -> None:
        await trio.lowlevel.checkpoint_if_cancelled()
        mine = self._round
        mine.messages.append(data)
        while self._writing:
            try:
                await mine.wake.wait()
            except BaseException:
                if mine is self._round:  # never taken: never sent
                    for i, item in enumerate(mine.messages):
                        if item is data:
                            del mine.messages[i]
                            break
                raise
            if mine.done:
                if mine.error is not None:
                    raise mine.error  # ours went out in a write that failed
                return
        await self._write_rounds()

    async def _write_rounds(self) -> None:
        """Be the writer: write the queued rounds (ours first) until none is left."""
        self._writing = True
        try:
            while self._round.messages:
                taken, self._round = self._round, _Round()
                try:
                    with trio.CancelScope(
                        shield=True, deadline=trio.current_time() + WRITE_STALL_S
                    ) as stall:
                        while taken.messages:
                            await self.stream.send_all(take_batch(taken.messages))
                    if stall.cancelled_caught:
                        raise trio.BrokenResourceError(
                            f"the peer read nothing for {WRITE_STALL_S:g}s; giving up the pipe"
                        )
                except Exception as exc:  # broken, stalled or closed: later senders learn it too
                    self.error = exc
                    taken.finish(exc)
                    raise
                finally:
                    if not taken.done:  # written whole
                        taken.finish(None)
        finally:
            self._writing = False
            if self._round.messages:  # left early (failed or cancelled): one of them writes
                self._round.hand_over()


@contextmanager
def single_errors() -> Iterator[None]:
    """Re-raise an exception group of one as that exception: a caller's ``except`` around
    our context managers should not have to know they own nurseries."""
    try:
        yield
    except BaseExceptionGroup as group:
        while isinstance(group, BaseExceptionGroup) and len(group.exceptions) == 1:
            group = group.exceptions[0]
        raise group from group.__cause__  # the group is no context; the error's cause stays


class ClientTransport:
    """Defaults of a client transport with no protocol version and no request streams."""

    closed_reason: str | None = None

    def set_protocol_version(self, version: str | None, *, modern: bool = False) -> None:
        pass

    def cancel_request(self, request_id: Any) -> bool:
        return False


class TransportClosed(RoostError, code="mcp_transport_closed"):
    """The connection to the MCP server is gone (the process exited, the stream broke)."""


class TransportError(RoostError, code="mcp_transport_error"):
    """The transport could not be opened or refused a message."""
