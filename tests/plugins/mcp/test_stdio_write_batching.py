"""Replies and requests queued while the pipe is busy go out together in one write, each
intact; a sender cancelled before its turn sends nothing (client transport and
``roost mcp``'s stdio loop)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import trio
from roost.plugins.mcp._stdio_server import stdio_loop
from roost.plugins.mcp.transports._base import TransportClosed
from roost.plugins.mcp.transports.stdio import StdioTransport


class GatedStream(trio.abc.SendStream):
    """Records every ``send_all``; the first one waits until ``gate`` is set."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.gate = trio.Event()
        self.first_started = trio.Event()
        self.broken = False

    async def send_all(self, data) -> None:
        if not self.writes and not self.first_started.is_set():
            self.first_started.set()
            await self.gate.wait()
        if self.broken:
            raise trio.BrokenResourceError("the reader went away")
        self.writes.append(bytes(data))

    async def wait_send_all_might_not_block(self) -> None:
        pass

    async def aclose(self) -> None:
        pass

    def messages(self) -> list[dict]:
        return [json.loads(line) for chunk in self.writes for line in chunk.splitlines()]


class SilentReceive(trio.abc.ReceiveStream):
    async def receive_some(self, max_bytes=None) -> bytes:
        await trio.sleep_forever()

    async def aclose(self) -> None:
        pass


def transport_over(stream: GatedStream) -> StdioTransport:
    return StdioTransport("fake", SimpleNamespace(stdin=stream, pid=0), incoming=None)


async def test_client_sends_waiting_behind_a_busy_pipe_go_out_in_one_write():
    stream = GatedStream()
    transport = transport_over(stream)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(transport.send, {"id": 0})
        await stream.first_started.wait()
        for i in range(1, 10):
            nursery.start_soon(transport.send, {"id": i})
        await trio.testing.wait_all_tasks_blocked()
        stream.gate.set()
    assert sorted(m["id"] for m in stream.messages()) == list(range(10))
    assert len(stream.writes) == 2  # the first alone, then the nine that queued behind it


async def test_a_client_send_cancelled_before_its_turn_is_never_written():
    stream = GatedStream()
    transport = transport_over(stream)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(transport.send, {"id": "first"})
        await stream.first_started.wait()
        nursery.start_soon(transport.send, {"id": "kept"})
        scope = trio.CancelScope()

        async def doomed():
            with scope:
                await transport.send({"id": "cancelled"})

        nursery.start_soon(doomed)
        await trio.testing.wait_all_tasks_blocked()
        scope.cancel()
        await trio.testing.wait_all_tasks_blocked()
        stream.gate.set()
    assert [m["id"] for m in stream.messages()] == ["first", "kept"]


async def test_every_client_send_whose_batch_failed_reports_the_broken_pipe():
    stream = GatedStream()
    stream.broken = True
    transport = transport_over(stream)
    failures: list[str] = []

    async def send(i: int) -> None:
        try:
            await transport.send({"id": i})
        except TransportClosed as exc:
            failures.append(str(exc))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(send, 0)
        await stream.first_started.wait()
        for i in range(1, 4):
            nursery.start_soon(send, i)
        await trio.testing.wait_all_tasks_blocked()
        stream.gate.set()
    assert len(failures) == 4 and all("stopped reading its input" in f for f in failures)


@pytest.mark.parametrize("cancel_one", [False, True])
async def test_stdio_loop_batches_replies_and_drops_a_cancelled_one(cancel_one):
    stream = GatedStream()

    async def serve(receive, send):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(send, {"id": 0})
            await stream.first_started.wait()
            for i in range(1, 6):
                nursery.start_soon(send, {"id": i})
            await trio.testing.wait_all_tasks_blocked()
            if cancel_one:
                with trio.CancelScope() as scope:
                    scope.cancel()
                    await send({"id": "cancelled"})
            stream.gate.set()

    await stdio_loop(SilentReceive(), stream, serve)
    assert sorted(m["id"] for m in stream.messages()) == list(range(6))
    assert len(stream.writes) == 2


def test_take_batch_joins_the_oldest_messages_up_to_the_limit():
    from roost.plugins.mcp.transports._base import take_batch

    outbox = [b"a" * 6, b"b" * 3, b"c" * 2, b"d" * 20]
    assert take_batch(outbox, limit=10) == b"a" * 6 + b"b" * 3
    assert take_batch(outbox, limit=10) == b"c" * 2
    assert take_batch(outbox, limit=10) == b"d" * 20  # alone, though over the limit
    assert outbox == []


async def test_large_client_messages_queued_together_are_written_in_bounded_batches():
    stream = GatedStream()
    transport = transport_over(stream)
    big = "x" * 600_000
    async with trio.open_nursery() as nursery:
        nursery.start_soon(transport.send, {"id": 0})
        await stream.first_started.wait()
        for i in range(1, 4):
            nursery.start_soon(transport.send, {"id": i, "pad": big})
        await trio.testing.wait_all_tasks_blocked()
        stream.gate.set()
    assert sorted(m["id"] for m in stream.messages()) == [0, 1, 2, 3]
    assert len(stream.writes) == 4 and max(len(w) for w in stream.writes) < 2 * len(big)


async def test_messages_queued_behind_a_writer_that_is_cancelled_still_go_out():
    # The writer's own message was taken: it is written whole though the writer is
    # cancelled; those queued behind it follow, in order, in one write.
    stream = GatedStream()
    transport = transport_over(stream)
    scope = trio.CancelScope()

    async def first():
        with scope:
            await transport.send({"id": "first"})

    async with trio.open_nursery() as nursery:
        nursery.start_soon(first)
        await stream.first_started.wait()
        for i in range(1, 5):
            nursery.start_soon(transport.send, {"id": i})
            await trio.testing.wait_all_tasks_blocked()
        scope.cancel()
        await trio.testing.wait_all_tasks_blocked()
        stream.gate.set()
    assert [m["id"] for m in stream.messages()] == ["first", 1, 2, 3, 4]
    assert len(stream.writes) == 2


async def test_a_round_taken_by_a_writer_that_is_cancelled_mid_way_is_written_whole():
    # Regression (review): a round written in several batches (past WRITE_BATCH_BYTES) was
    # cut where the writer was cancelled; the messages after the cut were never written,
    # and their senders were told they had gone out.
    stream = GatedStream()
    hold, holding = trio.Event(), trio.Event()
    recorded = stream.send_all

    async def send_all(data):
        if len(stream.writes) == 1:  # the round's first batch
            holding.set()
            await hold.wait()
        await recorded(data)

    stream.send_all = send_all
    transport = transport_over(stream)
    scope = trio.CancelScope()
    big = "x" * 600_000

    async def first():
        with scope:
            await transport.send({"id": "first"})

    async with trio.open_nursery() as nursery:
        nursery.start_soon(first)
        await stream.first_started.wait()
        for name in ("b", "c", "d"):
            nursery.start_soon(transport.send, {"id": name, "pad": big})
            await trio.testing.wait_all_tasks_blocked()
        stream.gate.set()
        await holding.wait()  # "first" is written; the writer is in the next round's first batch
        scope.cancel()
        await trio.testing.wait_all_tasks_blocked()
        hold.set()
    assert [m["id"] for m in stream.messages()] == ["first", "b", "c", "d"]


async def test_a_peer_that_reads_nothing_gives_up_the_pipe_after_the_stall_bound(monkeypatch):
    # A taken round is written whole even if its writer is cancelled, but not forever: a
    # peer that drains nothing for WRITE_STALL_S makes the pipe count as broken.
    from roost.plugins.mcp.transports import _base

    monkeypatch.setattr(_base, "WRITE_STALL_S", 0.2)
    stream = GatedStream()  # its gate never opens: the peer reads nothing
    transport = transport_over(stream)
    with trio.fail_after(5), pytest.raises(TransportClosed, match="read nothing"):
        await transport.send({"id": 1})
