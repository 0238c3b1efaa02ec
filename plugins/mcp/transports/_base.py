"""What every client transport offers the MCP client session.

A transport moves whole JSON-RPC messages (decoded JSON objects). Incoming messages
arrive on ``incoming`` (a bounded channel closed when the connection ends, with the
reason in ``closed_reason``); ``send`` hands one message to the peer.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Protocol

import trio
from roost.kernel._errors import RoostError

MAX_MESSAGE_BYTES = 10 * 1024 * 1024
INCOMING_BUFFER = 256


COALESCE_WINDOW_S = 100e-6


def coalesce_now(last_write: list[float]) -> bool:
    """Whether a writer should yield once before writing so that others join its write:
    the previous write was moments ago, or other tasks are ready to run. A lone request
    (the latency case) never waits."""
    return (time.perf_counter() - last_write[0] < COALESCE_WINDOW_S) or bool(
        trio.lowlevel.current_statistics().tasks_runnable
    )


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
