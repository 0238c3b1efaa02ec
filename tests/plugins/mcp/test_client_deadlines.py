"""Request deadlines of roost's MCP client: one timer per client instead of a cancel scope
per request, with the same outcomes (McpTimeout, notifications/cancelled at the server)."""

from __future__ import annotations

import math

import pytest
import trio
from roost.plugins.mcp._client import ClientOptions, McpTimeout, open_mcp_client


class FakeServer:
    """A client transport whose server answers ``initialize`` and ``echo`` at once, never
    answers ``hang``, and answers ``later`` only when told to (``release``)."""

    kind = "fake"

    def __init__(self) -> None:
        self._to_client, self.incoming = trio.open_memory_channel[dict](64)
        self.closed_reason = None
        self.received: list[dict] = []
        self.held: dict[str, dict] = {}

    async def send(self, message):
        self.received.append(message)
        method, request_id = message.get("method"), message.get("id")
        if method == "initialize":
            result = {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "serverInfo": {"name": "fake", "version": "1"},
            }
            self._to_client.send_nowait({"jsonrpc": "2.0", "id": request_id, "result": result})
        elif method == "tools/call":
            name = message["params"]["name"]
            if name == "echo":
                self._to_client.send_nowait(
                    {
                        "jsonrpc": "2.0",
                        "id": request_id,
                        "result": {"content": [], "n": message["params"]["arguments"]["n"]},
                    }
                )
            elif name == "later":
                self.held[message["params"]["arguments"]["key"]] = message

    def release(self, key):
        message = self.held.pop(key)
        self._to_client.send_nowait(
            {"jsonrpc": "2.0", "id": message["id"], "result": {"content": [], "key": key}}
        )

    def cancels(self):
        return [m["params"] for m in self.received if m.get("method") == "notifications/cancelled"]

    def set_protocol_version(self, version, *, modern=False):
        pass

    def cancel_request(self, request_id):
        return False


async def test_each_request_times_out_at_its_own_deadline_also_a_later_shorter_one(autojump_clock):
    server = FakeServer()
    async with open_mcp_client(server, ClientOptions(timeout_secs=100)) as client:
        ended: dict[str, float] = {}

        async def call(name, timeout):
            start = trio.current_time()
            with pytest.raises(McpTimeout, match=f"within {timeout:g} s"):
                await client.call_tool("hang", {"who": name}, timeout=timeout)
            ended[name] = trio.current_time() - start

        async with trio.open_nursery() as nursery:
            nursery.start_soon(call, "long", 50)
            await trio.sleep(1)
            nursery.start_soon(call, "short", 5)  # earlier than the timer's deadline: it moves
        assert ended == {"long": pytest.approx(50), "short": pytest.approx(5)}
        reasons = [c["reason"] for c in server.cancels()]
        assert reasons == ["timeout", "timeout"]
        # The connection is still usable, and answered calls never time out.
        assert (await client.call_tool("echo", {"n": 1}))["n"] == 1


async def test_an_answer_before_the_deadline_wins_and_sends_no_cancel(autojump_clock):
    server = FakeServer()
    async with open_mcp_client(server, ClientOptions(timeout_secs=10)) as client:
        async with trio.open_nursery() as nursery:

            async def answer_soon():
                await trio.sleep(9)
                server.release("a")

            nursery.start_soon(answer_soon)
            result = await client.call_tool("later", {"key": "a"})
        assert result["key"] == "a"
        await trio.sleep(30)  # past the deadline: nothing fires for the answered call
        assert server.cancels() == []


async def test_the_deadline_heap_stays_bounded_by_the_calls_in_flight():
    server = FakeServer()
    async with open_mcp_client(server, ClientOptions(timeout_secs=3600)) as client:
        for n in range(2000):
            await client.call_tool("echo", {"n": n})
        # Entries of answered calls are dropped in bulk once they outnumber live ones.
        assert len(client._timer.entries) <= 2 * len(client._pending) + client._timer.slack


async def test_a_bad_timeout_is_refused_before_anything_is_sent():
    server = FakeServer()
    async with open_mcp_client(server) as client:
        sent = len(server.received)
        for bad in (-1, math.nan):
            with pytest.raises(ValueError, match="timeout"):
                await client.call_tool("echo", {"n": 1}, timeout=bad)
        assert len(server.received) == sent
        assert (await client.call_tool("echo", {"n": 2}, timeout=math.inf))["n"] == 2


async def test_the_deadline_heap_keeps_no_answers_alive_and_is_emptied_when_the_connection_ends():
    # Regression (review): heap entries of answered requests held their whole answers
    # (up to 10 MB each) until they reached the top or the heap was compacted.
    server = FakeServer()
    async with open_mcp_client(server, ClientOptions(timeout_secs=100)) as client:
        for n in range(20):
            assert (await client.call_tool("echo", {"n": n}))["n"] == n
        assert len(client._timer.entries) >= 20  # (initialize too)
        assert all(p.message is None and p.error is None for _, _, p in client._timer.entries)
        client._connection_lost("test")
        assert client._timer.entries == []
