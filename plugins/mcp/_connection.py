"""Serving one MCP client over a message stream (stdio, memory): a reader, and request
tasks reused from one request to the next."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import trio
from roost.kernel import jsonrpc as rpc

from . import _protocol as p
from ._server import Notify, ServerSession
from ._tool_context import _EventRouter

if TYPE_CHECKING:  # pragma: no cover
    from ._server import McpServer

MAX_IN_FLIGHT = 64
DRAIN_TIMEOUT_S = 5.0


async def serve_connection(
    server: McpServer,
    receive: Callable[[], Awaitable[Any]],
    send: Notify,
    *,
    max_in_flight: int = MAX_IN_FLIGHT,
    session: ServerSession | None = None,
) -> None:
    """Serve one client until ``receive()`` (a decoded message, or an ``rpc.JsonRpcError``
    to answer) raises EndOfChannel; at most ``max_in_flight`` requests at once. At the end,
    requests in flight may answer for ``DRAIN_TIMEOUT_S``, then are cancelled."""
    session = session or ServerSession()
    raw_send = send

    async def send(message: dict[str, Any]) -> None:
        try:
            await raw_send(message)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the client went away: the reader sees the stream end

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(server.watch_changes, session, send)
            router = _EventRouter()
            await nursery.start(router.run, server.kernel)
            session.event_router = router
            workers = _RequestWorkers(server, session, send, nursery, max_in_flight)
            while True:
                try:
                    message = await receive()
                except (trio.EndOfChannel, trio.ClosedResourceError, trio.BrokenResourceError):
                    break
                if isinstance(message, rpc.JsonRpcError):
                    await send(message.to_response().to_dict())
                    continue
                if isinstance(message, dict) and (
                    ("method" in message and "id" not in message)  # a notification
                    or ("method" not in message and ("result" in message or "error" in message))
                ):
                    # Notifications and the client's answers to our requests are handled here,
                    # in read order: a cancel must find the request read before it, and an
                    # answer may be awaited by a request holding the last free request task.
                    await server.handle(session, message, notify=send)
                    continue
                if isinstance(message, dict) and message.get("method") == p.INITIALIZE:
                    # Answered before anything read after it (the reader does not yield
                    # between requests, and Trio does not promise to start tasks in order).
                    reply = await server.handle(session, message, notify=send)
                    if reply is not None:
                        await send(reply)
                    continue
                request_id = message.get("id") if isinstance(message, dict) else None
                if isinstance(request_id, (str, int)) and not isinstance(request_id, bool):
                    session.starting.setdefault(request_id, False)  # keep a cancel read
                await workers.submit(message)
            # The client closed its end: let requests in flight answer (briefly), then stop.
            workers.close()
            with trio.move_on_after(DRAIN_TIMEOUT_S):
                while workers.busy:
                    await trio.sleep(0.01)
            session.closed = True
            nursery.cancel_scope.cancel()
    finally:
        session.closed = True
        session.cancel_all()


class _RequestWorkers:
    """At most ``limit`` tasks serving a connection's requests, each one after another in one
    cancel scope (cheaper than a task and scope a request); a cancel spends it: the task ends."""

    def __init__(
        self,
        server: McpServer,
        session: ServerSession,
        send: Notify,
        nursery: trio.Nursery,
        limit: int,
    ) -> None:
        self._server = server
        self._session = session
        self._send = send
        self._nursery = nursery
        self._limit = limit
        self._hand_over, self._requests = trio.open_memory_channel[Any](0)
        self._room: trio.Event | None = None  # what submit waits on while every task is busy
        self.tasks = 0
        self.busy = 0  # requests handed over and not yet answered

    async def submit(self, message: Any) -> None:
        """Hand ``message`` to an idle task, or a new one, or wait until one is free."""
        self.busy += 1
        try:
            while True:
                try:
                    self._hand_over.send_nowait(message)  # succeeds only when a task is waiting
                    return
                except trio.WouldBlock:
                    pass
                if self.tasks < self._limit:
                    self.tasks += 1
                    self._nursery.start_soon(self._work, message)
                    return
                self._room = trio.Event()
                await self._room.wait()
        except BaseException:
            self.busy -= 1
            raise

    def close(self) -> None:
        """No more requests: idle tasks end; busy ones end after their request."""
        self._hand_over.close()

    def _done(self) -> None:
        """A request was answered (or cancelled): wake a ``submit`` waiting for room."""
        self.busy -= 1
        room = self._room
        if room is not None:
            self._room = None
            room.set()

    async def _work(self, message: Any) -> None:
        handling = True  # a request of this task is counted in ``busy``
        reply = None
        try:
            with trio.CancelScope() as scope:
                while True:
                    reply = await self._server.handle(
                        self._session, message, notify=self._send, scope=scope
                    )
                    if scope.cancel_called:
                        break  # cancelled after its last checkpoint: answered all the same, below
                    if reply is not None:
                        await self._send(reply)
                    reply = None
                    handling = False
                    self._done()  # this task waits for the next request before the reader runs
                    try:
                        message = await self._requests.receive()
                    except trio.EndOfChannel:
                        return
                    handling = True
            # A cancelled request (notifications/cancelled): no response unless it had
            # finished; either way this task's scope is spent, so it ends.
            if reply is not None:
                await self._send(reply)
        finally:
            self.tasks -= 1
            if handling:
                self._done()  # after the count: a waiting submit may start a new task
