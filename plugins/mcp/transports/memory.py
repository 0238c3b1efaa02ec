"""An in-memory MCP transport: a connected pair of bounded channels of decoded JSON-RPC
messages, for tests and in-process clients of ``McpServer`` (``serve_memory``)."""

from __future__ import annotations

from typing import Any

import attrs
import trio
from roost.kernel import number_setting

DEFAULT_BUFFER = 64


@attrs.frozen(eq=False)
class MemoryTransport:
    """One end of a pair: ``send`` (waits while the peer's inbox is full), ``receive``;
    ``aclose()`` ends the peer's ``receive`` with ``trio.EndOfChannel``."""

    outbox: trio.MemorySendChannel[Any]
    inbox: trio.MemoryReceiveChannel[Any]

    async def send(self, message: Any) -> None:
        await self.outbox.send(message)

    async def receive(self) -> Any:
        return await self.inbox.receive()

    async def aclose(self) -> None:
        await self.outbox.aclose()
        await self.inbox.aclose()


def memory_pair(buffer: int = DEFAULT_BUFFER) -> tuple[MemoryTransport, MemoryTransport]:
    """A connected ``(client_end, server_end)`` pair with ``buffer`` slots each way."""
    if number_setting(buffer, 1, integer=True, closed=True) is None:
        raise ValueError(f"buffer: expected a positive integer, got {buffer!r}")
    to_server_send, to_server_recv = trio.open_memory_channel[Any](buffer)
    to_client_send, to_client_recv = trio.open_memory_channel[Any](buffer)
    return MemoryTransport(to_server_send, to_client_recv), MemoryTransport(
        to_client_send, to_server_recv
    )


async def serve_memory(server: Any, end: MemoryTransport, **kwargs: Any) -> None:
    """Serve ``server`` (an ``McpServer``) on ``end`` until the client end closes."""
    from .._connection import serve_connection

    await serve_connection(server, end.receive, end.send, **kwargs)
