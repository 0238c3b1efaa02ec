"""A ``tools/call`` gets the events of its own work only (issue 15, item 15).

Regression: the MCP server forwarded progress and tool log messages to a ``tools/call``'s
client by trace id alone. roost continues a caller's ``traceparent``, so whoever learned
another principal's trace id (a hostile MCP server or A2A peer that alice's agent calls
receives it) could call ``tools/call`` with that trace id, a ``progressToken`` and a log
level, and read alice's run's progress, log messages and step heartbeats for as long as
its own call ran. Now a call follows its own span's descendants (``TRACE:SPAN_START``)
and forwards only their events — on a stream connection, over Streamable HTTP at ``/mcp``
and ``/agents/<name>/mcp``, for a tool call and for an agent's run. Real kernel, real
daemon on 127.0.0.1.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
import trio
from roost.kernel import (
    Tool,
    ToolResult,
    ToolSpec,
    default_config,
    hookimpl,
    open_kernel,
    parse_manifest,
)
from roost.plugins.http import open_daemon
from roost.plugins.mcp import (
    ClientRequestFailed,
    McpServer,
    report_log,
    report_progress,
    request_client,
)
from roost.plugins.mcp.transports.memory import memory_pair, serve_memory
from waiting import wait_until

INIT = {
    "protocolVersion": "2025-11-25",
    "capabilities": {"elicitation": {}},
    "clientInfo": {"name": "t", "version": "1"},
}
SECRET_STEP = "alice's secret step"
SECRET_LOG = "alice's secret log"
ELICIT = {
    "message": "alice's secret question: who are you?",
    "requestedSchema": {"type": "object", "properties": {"answer": {"type": "string"}}},
}


class Gate:
    """``victim``: alice's tool, which reports progress and logs once ``go`` is set;
    ``hold``: the eavesdropper's tool, which runs until ``release`` is set; ``chatty``:
    logs one line (run two agent hops below a caller)."""

    def __init__(self) -> None:
        self.started, self.go = trio.Event(), trio.Event()
        self.held, self.release = trio.Event(), trio.Event()
        self.trace: Any = None

    @hookimpl
    def roost_tools(self, config):
        async def victim(call, ctx):
            self.trace = ctx.trace
            self.started.set()
            with trio.fail_after(20):
                await self.go.wait()
            report_progress(ctx, 1, 1, SECRET_STEP)
            report_log(ctx, "info", SECRET_LOG)
            return ToolResult.text("alice is done")

        async def hold(call, ctx):
            self.held.set()
            with trio.fail_after(20):
                await self.release.wait()
            return ToolResult.text("held")

        async def chatty(call, ctx):
            report_log(ctx, "info", "nested log")
            return ToolResult.text("chatted")

        async def ask(call, ctx):  # asks the client of the call it runs in who it is
            try:
                answer = await request_client(ctx, "elicitation/create", ELICIT, timeout_s=10)
            except ClientRequestFailed:
                return ToolResult.text("no client")
            return ToolResult.text(f"answered by {answer['content']['answer']}")

        async def victim_asks(call, ctx):  # alice's tool, asking her client (if any)
            self.trace = ctx.trace
            self.started.set()
            with trio.fail_after(20):
                await self.go.wait()
            return await ask(call, ctx)

        return [
            Tool(ToolSpec("victim", "Alice's work", owner="gate"), victim),
            Tool(ToolSpec("hold", "Runs until released", owner="gate"), hold),
            Tool(ToolSpec("chatty", "Logs a line", owner="gate"), chatty),
            Tool(ToolSpec("ask", "Asks the client", owner="gate"), ask),
            Tool(ToolSpec("victim_asks", "Alice's asking work", owner="gate"), victim_asks),
        ]


def _agent(name: str, rules: list[dict[str, Any]], tools: list[str], expose: list[str]) -> Any:
    return parse_manifest(
        {
            "name": name,
            "description": f"test agent {name}",
            "model": {"provider": "scripted", "script": {"rules": rules}},
            "capabilities": {"tools": tools},
            "mcp": {"expose_tools": expose},
        }
    )


AGENTS = [
    _agent(
        "alpha",
        [
            {"match": "^hold", "steps": [{"tool": "hold", "arguments": {}}], "reply": "held"},
            {"match": "^ask", "steps": [{"tool": "ask", "arguments": {}}], "reply": "{result}"},
            {
                "match": "^relay",
                "steps": [{"tool": "agent_beta", "arguments": {"message": "chat"}}],
                "reply": "relayed",
            },
        ],
        ["hold", "agent_beta", "ask"],
        ["victim", "hold", "ask"],
    ),
    _agent(
        "beta",
        [{"match": "^chat", "steps": [{"tool": "chatty", "arguments": {}}], "reply": "chatted"}],
        ["chatty"],
        [],
    ),
]

# What the eavesdropper calls: a tool (a tool call's watcher) or an agent (a run's).
ATTACKS = [
    pytest.param({"name": "hold", "arguments": {}}, True, id="tool"),
    pytest.param({"name": "agent_alpha", "arguments": {"message": "hold"}}, True, id="agent"),
    pytest.param({"name": "agent_alpha", "arguments": {"message": "hold"}}, False, id="agent-logs"),
]


class Client:
    """A handshake-era MCP client over the in-memory transport (a stream connection)."""

    def __init__(self, end: Any, name: str) -> None:
        self.end = end
        self.name = name
        self.next_id = 0
        self.notes: list[dict[str, Any]] = []
        self.replies: dict[int, dict[str, Any]] = {}

    async def request(self, method: str, params: dict[str, Any] | None = None) -> dict:
        self.next_id += 1
        request_id = self.next_id
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        await self.end.send(message)
        with trio.fail_after(20):
            while request_id not in self.replies:
                got = await self.end.receive()
                if "method" in got:
                    self.notes.append(got)
                    if "id" in got:  # a request of the server's: answered with our name
                        answer = {"action": "accept", "content": {"answer": self.name}}
                        await self.end.send({"jsonrpc": "2.0", "id": got["id"], "result": answer})
                else:
                    self.replies[got["id"]] = got
        return self.replies.pop(request_id)

    async def open(self) -> Client:
        await self.request("initialize", INIT)
        await self.end.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        await self.request("logging/setLevel", {"level": "debug"})
        return self


async def connect(nursery: trio.Nursery, server: McpServer, name: str = "") -> Client:
    client_end, server_end = memory_pair()
    nursery.start_soon(serve_memory, server, server_end)
    return await Client(client_end, name).open()


def sse_messages(text: str) -> list[dict[str, Any]]:
    """The JSON-RPC messages of a ``text/event-stream`` body."""
    out = []
    for block in text.split("\n\n"):
        data = "".join(line[5:].strip() for line in block.splitlines() if line.startswith("data:"))
        if data:
            out.append(json.loads(data))
    return out


def seen(notes: list[dict[str, Any]]) -> str:
    """The notifications' text, for asserting what reached a client."""
    return json.dumps(
        [n for n in notes if n.get("method") in ("notifications/progress", "notifications/message")]
    )


@pytest.fixture
def gate() -> Gate:
    return Gate()


@pytest.fixture
async def kernel(tmp_path, gate):
    config = default_config(home=tmp_path / "home", agents={"bundled": False})
    async with open_kernel(config, agents=AGENTS, plugins=[gate]) as kernel:
        yield kernel


def stolen_meta(gate: Gate, token: bool) -> dict[str, Any]:
    """alice's trace context as the eavesdropper learned it (with a progress token)."""
    trace = gate.trace
    meta: dict[str, Any] = {"traceparent": f"00-{trace.trace_id}-{trace.span_id}-01"}
    if token:
        meta["progressToken"] = "eve"
    return meta


def call_in_background(nursery: trio.Nursery, client: Client, params: dict) -> list:
    """Start ``client``'s ``tools/call`` of ``params``; the list returned gets its reply."""
    done: list = []

    async def call() -> None:
        done.append(await client.request("tools/call", params))

    nursery.start_soon(call)
    return done


def alice_calls_victim(nursery: trio.Nursery, alice: Client) -> list:
    """alice calls ``victim`` with a progress token, in the background (see call_in_background)."""
    params = {"name": "victim", "arguments": {}, "_meta": {"progressToken": "alice"}}
    return call_in_background(nursery, alice, params)


async def overlap(gate: Gate, owner_done: list, eavesdropper_done: list) -> None:
    """Once the eavesdropper's call holds, let the owner's work report and answer while it
    runs; then release the eavesdropper's call and wait for its answer."""
    with trio.fail_after(10):
        await gate.held.wait()
    gate.go.set()  # the owner's work reports while the eavesdropper's call runs on its trace id
    await wait_until(lambda: owner_done, "the owner's call answered")
    gate.release.set()
    await wait_until(lambda: eavesdropper_done, "the eavesdropper's call answered")


@pytest.mark.parametrize(("attack", "token"), ATTACKS)
async def test_a_call_on_a_stolen_trace_id_does_not_receive_the_owners_progress_or_logs(
    kernel, gate, attack, token
):
    server = McpServer(kernel)
    async with trio.open_nursery() as nursery:
        alice = await connect(nursery, server)
        eve = await connect(nursery, server)
        alice_done = alice_calls_victim(nursery, alice)
        with trio.fail_after(10):
            await gate.started.wait()
        params = {**attack, "_meta": stolen_meta(gate, token)}
        eve_done = call_in_background(nursery, eve, params)
        await overlap(gate, alice_done, eve_done)
        nursery.cancel_scope.cancel()
    assert SECRET_STEP in seen(alice.notes) and SECRET_LOG in seen(alice.notes)
    assert "error" not in eve_done[0], eve_done
    leaked = seen(eve.notes)
    assert SECRET_STEP not in leaked and SECRET_LOG not in leaked and "victim" not in leaked
    if attack["name"] == "agent_alpha" and token:  # eve's own run's steps still reach her
        assert "calling hold" in leaked


@pytest.mark.parametrize("path", ["/mcp", "/agents/alpha/mcp"])
@pytest.mark.parametrize(("attack", "token"), ATTACKS)
async def test_streamable_http_on_a_stolen_trace_id_does_not_receive_the_owners_events(
    kernel, gate, path, attack, token
):
    if path != "/mcp" and attack["name"] == "agent_alpha":
        attack = {"name": "message", "arguments": {"message": "hold"}}
    server = McpServer(kernel)
    async with open_daemon(kernel) as url, httpx.AsyncClient(timeout=20) as http:
        async with trio.open_nursery() as nursery:
            alice = await connect(nursery, server)
            alice_done = alice_calls_victim(nursery, alice)
            with trio.fail_after(10):
                await gate.started.wait()
            meta = stolen_meta(gate, token)
            answer: list[httpx.Response] = []

            async def eavesdrop() -> None:
                headers = {
                    "Accept": "application/json, text/event-stream",
                    "Content-Type": "application/json",
                    "traceparent": meta["traceparent"],
                }
                response = await http.post(
                    url + path,
                    json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INIT},
                    headers=headers,
                )
                headers["Mcp-Session-Id"] = response.headers["Mcp-Session-Id"]
                headers["MCP-Protocol-Version"] = INIT["protocolVersion"]
                await http.post(
                    url + path,
                    json={
                        "jsonrpc": "2.0",
                        "id": 2,
                        "method": "logging/setLevel",
                        "params": {"level": "debug"},
                    },
                    headers=headers,
                )
                call = {
                    "jsonrpc": "2.0",
                    "id": 3,
                    "method": "tools/call",
                    "params": {**attack, "_meta": meta},
                }
                answer.append(await http.post(url + path, json=call, headers=headers))

            nursery.start_soon(eavesdrop)
            await overlap(gate, alice_done, answer)
            nursery.cancel_scope.cancel()
    assert SECRET_STEP in seen(alice.notes) and SECRET_LOG in seen(alice.notes)
    response = answer[0]
    assert response.status_code == 200, response.text
    messages = sse_messages(response.text)
    assert messages[-1]["id"] == 3 and "result" in messages[-1], messages
    leaked = seen(messages)
    assert SECRET_STEP not in leaked and SECRET_LOG not in leaked and "victim" not in leaked


@pytest.mark.parametrize("meta", [{}, {"progressToken": "mine"}], ids=["logs", "progress"])
async def test_a_call_still_receives_the_logs_of_work_two_agent_hops_below_it(kernel, meta):
    # alpha's run asks beta (an agent tool: an in-memory MCP hop), whose tool logs: the
    # log's span descends from the call's through the SPAN_START of each span between
    # (the server's, alpha's run, its agent_beta call, beta's run, its chatty call).
    async with trio.open_nursery() as nursery:
        client = await connect(nursery, McpServer(kernel))
        params = {"name": "agent_alpha", "arguments": {"message": "relay"}, "_meta": meta}
        reply = await client.request("tools/call", params)
        nursery.cancel_scope.cancel()
    assert reply["result"]["content"][0]["text"] == "relayed"
    logs = [n["params"]["data"] for n in client.notes if n["method"] == "notifications/message"]
    assert logs == ["nested log"]


async def test_a_tool_on_a_stolen_trace_id_asks_its_own_client_not_the_owners(kernel, gate):
    # Regression: a tool's requests to "its" client (elicitation, sampling, roots) went to
    # the first tools/call registered on the trace id: eve's tool asked alice's client.
    server = McpServer(kernel)
    async with trio.open_nursery() as nursery:
        alice = await connect(nursery, server, "alice")
        eve = await connect(nursery, server, "eve")
        alice_done = alice_calls_victim(nursery, alice)
        with trio.fail_after(10):
            await gate.started.wait()
        params = {"name": "ask", "arguments": {}, "_meta": stolen_meta(gate, False)}
        eve_reply = await eve.request("tools/call", params)
        gate.go.set()
        await wait_until(lambda: alice_done, "alice's call answered")
        nursery.cancel_scope.cancel()
    assert eve_reply["result"]["content"][0]["text"] == "answered by eve"
    assert not [n for n in alice.notes if n["method"] == "elicitation/create"]


async def test_the_owners_tool_never_asks_a_client_that_called_on_its_trace_id(kernel, gate):
    # Regression: alice's work with no MCP client of its own (run in-process, over REST or
    # A2A) sent its requests to whoever had a tools/call on its trace id: eve read alice's
    # question and her answer went back into alice's tool.
    from roost.kernel import ToolCall, TraceContext

    server = McpServer(kernel)
    result: list = []
    async with trio.open_nursery() as nursery:
        eve = await connect(nursery, server, "eve")

        async def alice() -> None:
            call = ToolCall("victim_asks", {}, caller="alpha", trace=TraceContext.new("alpha"))
            result.append(await kernel.call_tool("alpha", call, check_capability=False))

        nursery.start_soon(alice)
        with trio.fail_after(10):
            await gate.started.wait()
        params = {"name": "hold", "arguments": {}, "_meta": stolen_meta(gate, False)}
        eve_done = call_in_background(nursery, eve, params)
        await overlap(gate, result, eve_done)
        nursery.cancel_scope.cancel()
    assert result[0].as_text() == "no client"
    assert "secret question" not in json.dumps(eve.notes)


async def test_the_tools_of_a_calls_own_agent_run_still_ask_its_client(kernel):
    async with trio.open_nursery() as nursery:
        client = await connect(nursery, McpServer(kernel), "me")
        params = {"name": "agent_alpha", "arguments": {"message": "ask"}}
        reply = await client.request("tools/call", params)
        nursery.cancel_scope.cancel()
    assert reply["result"]["content"][0]["text"] == "answered by me"
