"""The MCP server core over the in-memory transport: both eras, tools, resources, prompts."""

from __future__ import annotations

from contextlib import asynccontextmanager

import pytest
import trio
import trio.testing
from mcp_server_fixtures import INIT_PARAMS
from roost.plugins.mcp import McpServer
from roost.plugins.mcp import _protocol as p
from roost.plugins.mcp.transports.memory import memory_pair, serve_memory

MODERN = p.stateless_meta({"name": "t", "version": "1"})


class Client:
    def __init__(self, end):
        self.end = end
        self.next_id = 0
        self.notes = []

    async def request(self, method, params=None, *, modern=False):
        self.next_id += 1
        msg = {"jsonrpc": "2.0", "id": self.next_id, "method": method}
        if modern:
            params = p.with_meta(params, MODERN)
        if params is not None:
            msg["params"] = params
        await self.end.send(msg)
        return await self.answer(self.next_id)

    async def answer(self, request_id):
        with trio.fail_after(10):
            while True:
                reply = await self.end.receive()
                if reply.get("id") == request_id and "method" not in reply:
                    return reply
                self.notes.append(reply)

    async def notify(self, method, params=None):
        msg = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = params
        await self.end.send(msg)


async def open_client(nursery, server):
    client_end, server_end = memory_pair()
    nursery.start_soon(serve_memory, server, server_end)
    return Client(client_end)


async def handshake(client):
    reply = await client.request("initialize", INIT_PARAMS)
    await client.notify("notifications/initialized")
    return reply


def five_hops_deep():
    """The trace of a call chain a → b → c → d → e: one hop more trips the breaker."""
    from roost.kernel import TraceContext

    deep = TraceContext.new("a")
    for hop in "bcde":
        deep = deep.child(hop)
    return deep


@asynccontextmanager
async def connected(kernel):
    """A Client of ``McpServer(kernel)`` on the in-memory transport, past the handshake;
    the server is stopped after."""
    async with trio.open_nursery() as nursery:
        client = await open_client(nursery, McpServer(kernel))
        await handshake(client)
        yield client
        nursery.cancel_scope.cancel()


async def test_initialize_negotiates_a_known_version_and_falls_back_to_latest(kernel):
    async with trio.open_nursery() as nursery:
        server = McpServer(kernel)
        for asked, got in [
            ("2025-06-18", "2025-06-18"),
            ("2024-11-05", "2024-11-05"),
            ("1999-01-01", p.LATEST_HANDSHAKE_VERSION),
        ]:
            client = await open_client(nursery, server)
            reply = await client.request("initialize", {**INIT_PARAMS, "protocolVersion": asked})
            assert reply["result"]["protocolVersion"] == got
            assert reply["result"]["capabilities"]["tools"] == {"listChanged": True}
            await client.end.aclose()


async def test_host_surface_lists_agents_and_exposed_tools_but_never_private_ones(kernel):
    async with connected(kernel) as client:
        tools = (await client.request("tools/list"))["result"]["tools"]
        names = [t["name"] for t in tools]
        assert names == sorted(names)
        assert {"agent_alpha", "agent_beta", "echo", "sleepy", "steps"} <= set(names)
        # "shared" is exposed by both agents, so each gets a prefixed name.
        assert {"alpha_shared", "beta_shared"} <= set(names) and "shared" not in names
        assert not any("secret" in n for n in names)
        for name in ("secret", "alpha_secret"):
            reply = await client.request("tools/call", {"name": name, "arguments": {}})
            assert reply["error"]["code"] == -32602 and "unknown tool" in reply["error"]["message"]
        reply = await client.request("tools/call", {"name": "beta_shared", "arguments": {}})
        assert reply["result"]["content"][0]["text"] == "shared from beta"


async def test_agent_surface_offers_message_and_that_agents_tools(kernel):
    async with trio.open_nursery() as nursery:
        client = await open_client(nursery, McpServer(kernel, agent="beta"))
        await handshake(client)
        names = [t["name"] for t in (await client.request("tools/list"))["result"]["tools"]]
        assert names == ["message", "shared"]
        reply = await client.request(
            "tools/call", {"name": "message", "arguments": {"message": "hi"}}
        )
        assert reply["result"]["content"][0]["text"] == "beta:hi"
        assert reply["result"]["structuredContent"]["stop_reason"] == "end_turn"
        nursery.cancel_scope.cancel()


async def test_message_tool_asks_the_agent_and_bad_arguments_are_tool_errors(kernel):
    async with connected(kernel) as client:
        reply = await client.request(
            "tools/call", {"name": "agent_alpha", "arguments": {"message": "ask beta hello"}}
        )
        assert reply["result"]["content"][0]["text"] == "beta said beta:ask beta hello"
        reply = await client.request(
            "tools/call", {"name": "agent_alpha", "arguments": {"message": 3}}
        )
        assert reply["result"]["isError"] is True
        assert "arguments.message" in reply["result"]["content"][0]["text"]
        reply = await client.request("tools/call", {"name": "echo", "arguments": {}})
        assert (
            reply["result"]["isError"] is True
        )  # schema violation: a tool error the model can fix


async def test_stateless_requests_need_no_initialize_and_carry_result_type(kernel):
    async with trio.open_nursery() as nursery:
        client = await open_client(nursery, McpServer(kernel))
        found = (await client.request("server/discover", {}, modern=True))["result"]
        assert (
            found["supportedVersions"][0] == "2026-07-28"
            and "2025-11-25" in found["supportedVersions"]
        )
        assert found["resultType"] == "complete"
        listed = (await client.request("tools/list", {}, modern=True))["result"]
        assert listed["resultType"] == "complete" and listed["cacheScope"] in ("public", "private")
        assert listed["_meta"][p.META_SERVER_INFO]["name"] == "roost"
        called = (
            await client.request(
                "tools/call", {"name": "echo", "arguments": {"text": "x"}}, modern=True
            )
        )["result"]
        assert called["content"][0]["text"] == "echo:x:alpha" and called["resultType"] == "complete"
        # ping and logging/setLevel are gone at 2026-07-28
        assert (await client.request("ping", {}, modern=True))["error"]["code"] == -32601
        nursery.cancel_scope.cancel()


async def test_unsupported_stateless_version_lists_supported_ones(kernel):
    async with trio.open_nursery() as nursery:
        client = await open_client(nursery, McpServer(kernel))
        params = {"_meta": {**MODERN, p.META_PROTOCOL_VERSION: "2099-01-01"}}
        reply = await client.request("tools/list", params)
        assert reply["error"]["code"] == -32022
        assert reply["error"]["data"]["supported"][0] == "2026-07-28"
        params = {"_meta": {p.META_PROTOCOL_VERSION: "2026-07-28"}}  # no clientCapabilities
        reply = await client.request("tools/list", params)
        assert (
            reply["error"]["code"] == -32602 and "clientCapabilities" in reply["error"]["message"]
        )
        nursery.cancel_scope.cancel()


async def test_requests_before_initialize_are_refused_except_ping(kernel):
    async with trio.open_nursery() as nursery:
        client = await open_client(nursery, McpServer(kernel))
        assert (await client.request("ping"))["result"] == {}
        reply = await client.request("tools/list")
        assert reply["error"]["code"] == -32602 and "initialize" in reply["error"]["message"]
        nursery.cancel_scope.cancel()


async def test_bad_messages_get_json_rpc_errors_and_the_connection_survives(kernel):
    async with connected(kernel) as client:
        await client.end.send(["not", "a", "message"])
        reply = await client.end.receive()
        assert reply["error"]["code"] == -32600 and "batch" in reply["error"]["message"]
        await client.end.send({"jsonrpc": "2.0", "id": 5})
        assert (await client.end.receive())["error"]["code"] == -32600
        await client.end.send("a string")
        assert (await client.end.receive())["error"]["code"] == -32600
        assert (await client.request("no/such/method"))["error"]["code"] == -32601
        assert (await client.request("tools/call", {"name": 7}))["error"]["code"] == -32602
        assert (await client.request("ping"))["result"] == {}


async def test_resources_and_prompts_describe_each_agent(kernel):
    async with connected(kernel) as client:
        uris = [r["uri"] for r in (await client.request("resources/list"))["result"]["resources"]]
        assert "roost://agents/alpha/card" in uris and "roost://agents/beta/manifest" in uris
        read = (await client.request("resources/read", {"uri": "roost://agents/alpha/manifest"}))[
            "result"
        ]
        assert '"private_tools"' in read["contents"][0]["text"]
        missing = await client.request("resources/read", {"uri": "roost://agents/nobody/card"})
        assert missing["error"]["code"] == -32002
        prompts = (await client.request("prompts/list"))["result"]["prompts"]
        assert [x["name"] for x in prompts] == ["alpha", "beta"]
        got = (await client.request("prompts/get", {"name": "beta"}))["result"]
        assert got["messages"][0]["content"]["text"] == "You are beta."


async def test_pagination_walks_every_tool_with_cursors(kernel):
    async with trio.open_nursery() as nursery:
        client = await open_client(nursery, McpServer(kernel, page_size=2))
        await handshake(client)
        seen, cursor = [], None
        for _ in range(20):
            params = {"cursor": cursor} if cursor else {}
            result = (await client.request("tools/list", params))["result"]
            seen += [t["name"] for t in result["tools"]]
            cursor = result.get("nextCursor")
            if not cursor:
                break
        assert seen == sorted(seen) and len(seen) == len(McpServer(kernel).tools())
        bad = await client.request("tools/list", {"cursor": "garbage!"})
        assert bad["error"]["code"] == -32602 and "cursor" in bad["error"]["message"]
        nursery.cancel_scope.cancel()


async def test_cancelled_notification_stops_the_tool_and_no_response_is_sent(kernel, tools_plugin):
    async with connected(kernel) as client:
        await client.end.send(
            {
                "jsonrpc": "2.0",
                "id": "slow",
                "method": "tools/call",
                "params": {"name": "sleepy", "arguments": {}},
            }
        )
        with trio.fail_after(5):
            await tools_plugin.sleepy_started.wait()
        await client.notify("notifications/cancelled", {"requestId": "slow", "reason": "user"})
        with trio.fail_after(5):
            await tools_plugin.sleepy_cancelled.wait()
        assert (await client.request("ping"))["result"] == {}
        assert not any(n.get("id") == "slow" for n in client.notes)


async def test_progress_and_log_notifications_reach_the_caller(kernel):
    async with connected(kernel) as client:
        await client.request("logging/setLevel", {"level": "info"})
        reply = await client.request(
            "tools/call", {"name": "steps", "arguments": {}, "_meta": {"progressToken": "tok"}}
        )
        assert reply["result"]["content"][0]["text"] == "3 steps done"
        progress = [
            n["params"] for n in client.notes if n.get("method") == "notifications/progress"
        ]
        assert [x["progress"] for x in progress] == [1, 2, 3]
        assert all(x["progressToken"] == "tok" and x["total"] == 3 for x in progress)
        logs = [
            n["params"]["data"] for n in client.notes if n.get("method") == "notifications/message"
        ]
        assert logs == ["did step 1", "did step 2", "did step 3"]


async def test_trace_depth_from_meta_trips_the_breaker_with_the_path(kernel):
    async with connected(kernel) as client:
        deep = five_hops_deep()
        params = deep.inject_meta({"name": "agent_alpha", "arguments": {"message": "hi"}})
        reply = await client.request("tools/call", params)
        # A tool execution error (isError), so that the calling model reads why it stopped.
        assert reply["result"]["isError"] is True
        assert "a → b → c → d → e → alpha" in reply["result"]["content"][0]["text"]
        assert reply["result"]["_meta"]["io.roost/error"]["path"] == [
            "a",
            "b",
            "c",
            "d",
            "e",
            "alpha",
        ]
        params = deep.inject_meta({"name": "echo", "arguments": {"text": "x"}})
        reply = await client.request("tools/call", params)
        assert reply["result"]["isError"] is True
        assert reply["result"]["_meta"]["io.roost/error"]["code"] == "recursion_limit"


async def test_tools_list_changed_is_pushed_when_tools_come_and_go(kernel):
    from roost.kernel import Tool, ToolResult, ToolSpec

    async def noop(call, ctx):
        return ToolResult.text("ok")

    async with connected(kernel) as client:
        await client.request("ping")
        kernel.add_tool(Tool(ToolSpec("newcomer", owner="mcptest"), noop))
        with trio.fail_after(5):
            note = await client.end.receive()
        assert note["method"] == "notifications/tools/list_changed"


async def test_breaker_error_is_not_masked_when_progress_is_requested(kernel):
    # Regression: with a progressToken the call ran inside a nursery, which wrapped the
    # RecursionLimitExceeded in an ExceptionGroup and turned it into an internal error.
    async with connected(kernel) as client:
        params = five_hops_deep().inject_meta(
            {"name": "agent_alpha", "arguments": {"message": "hi"}}
        )
        params["_meta"]["progressToken"] = "p"
        reply = await client.request("tools/call", params)
        assert reply["result"]["isError"] is True
        assert reply["result"]["_meta"]["io.roost/error"]["path"][-1] == "alpha"


async def test_agent_progress_reports_each_step_of_a_run(kernel):
    async with connected(kernel) as client:
        params = {
            "name": "agent_alpha",
            "arguments": {"message": "ask beta hi"},
            "_meta": {"progressToken": 9},
        }
        reply = await client.request("tools/call", params)
        assert reply["result"]["content"][0]["text"] == "beta said beta:ask beta hi"
        progress = [
            n["params"]["progress"]
            for n in client.notes
            if n.get("method") == "notifications/progress"
        ]
        assert progress and progress == sorted(set(progress))  # strictly increasing


async def test_stateless_message_tool_asks_back_with_an_input_required_result(config, tools_plugin):
    from mcp_server_fixtures import make_agent
    from roost.kernel import open_kernel

    asker = make_agent(
        "asker",
        rules=[{"match": "^book", "ask": "Which day?", "reply": "Booked for {answer}."}],
    )
    async with open_kernel(config, agents=[asker], plugins=[tools_plugin]) as kernel:
        async with trio.open_nursery() as nursery:
            client = await open_client(nursery, McpServer(kernel))
            first = (
                await client.request(
                    "tools/call",
                    {"name": "agent_asker", "arguments": {"message": "book a table"}},
                    modern=True,
                )
            )["result"]
            assert first["resultType"] == "input_required"
            request = first["inputRequests"]["answer"]
            assert (
                request["method"] == "elicitation/create"
                and "Which day?" in request["params"]["message"]
            )
            retry = {
                "name": "agent_asker",
                "arguments": {"message": "book a table"},
                "inputResponses": {"answer": {"action": "accept", "content": {"answer": "Friday"}}},
                "requestState": first["requestState"],
            }
            done = (await client.request("tools/call", retry, modern=True))["result"]
            assert (
                done["resultType"] == "complete"
                and done["content"][0]["text"] == "Booked for Friday."
            )
            state = first["requestState"]
            # Flip the last character (replacing it with a fixed one is a no-op when it
            # already is that character, which made this test fail now and then).
            tampered = {**retry, "requestState": state[:-1] + ("1" if state[-1] == "0" else "0")}
            bad = await client.request("tools/call", tampered, modern=True)
            assert bad["error"]["code"] == -32602 and "requestState" in bad["error"]["message"]
            nursery.cancel_scope.cancel()


async def test_tools_call_sees_tools_removed_and_added_while_serving(kernel):
    # The server caches its tool catalog; registry changes must reach tools/call.
    from roost.kernel import Tool

    steps = kernel.registry.get("steps")
    kernel.remove_tool("steps")
    async with connected(kernel) as client:
        echo = {"name": "echo", "arguments": {"text": "a"}}
        assert (await client.request("tools/call", echo))["result"]["content"][0][
            "text"
        ] == "echo:a:alpha"
        missing = await client.request("tools/call", {"name": "steps", "arguments": {}})
        assert (
            missing["error"]["code"] == -32602
            and "unknown tool: steps" in missing["error"]["message"]
        )
        kernel.add_tool(Tool(steps.spec, steps.handler))
        back = await client.request("tools/call", {"name": "steps", "arguments": {}})
        assert back["result"]["content"][0]["text"] == "3 steps done"
        kernel.remove_tool("echo")
        gone = await client.request("tools/call", echo)
        assert gone["error"]["code"] == -32602 and "unknown tool: echo" in gone["error"]["message"]


async def test_tool_logs_reach_a_handshake_client_without_a_progress_token(kernel):
    # Without setLevel the server logs at "info"; without a progressToken no progress.
    async with connected(kernel) as client:
        reply = await client.request("tools/call", {"name": "steps", "arguments": {}})
        assert reply["result"]["content"][0]["text"] == "3 steps done"
        logs = [
            n["params"]["data"] for n in client.notes if n.get("method") == "notifications/message"
        ]
        assert logs == ["did step 1", "did step 2", "did step 3"]
        assert not [n for n in client.notes if n.get("method") == "notifications/progress"]


async def test_notifications_of_many_concurrent_calls_precede_each_reply(kernel):
    # One event router per connection forwards tool logs/progress; every notification a
    # call caused must still reach the client before that call's reply — also when the
    # tool reports and returns without a checkpoint in between.
    from roost.kernel import Tool, ToolResult
    from roost.plugins.mcp import report_progress

    async def steps_at_once(call, ctx):
        for i in range(1, 4):
            report_progress(ctx, i, 3, f"step {i}")
        return ToolResult.text("3 steps done")

    spec = kernel.registry.get("steps").spec
    kernel.remove_tool("steps")
    kernel.add_tool(Tool(spec, steps_at_once))
    async with trio.open_nursery() as nursery:
        client_end, server_end = memory_pair(buffer=1024)
        nursery.start_soon(serve_memory, McpServer(kernel), server_end)
        await client_end.send(
            {"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": INIT_PARAMS}
        )
        await client_end.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        calls = 40
        for i in range(calls):
            params = {"name": "steps", "arguments": {}, "_meta": {"progressToken": f"t{i}"}}
            await client_end.send(
                {"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": params}
            )
        seen: dict[str, list[float]] = {}
        replies = 0
        with trio.fail_after(10):
            while replies < calls:
                message = await client_end.receive()
                if message.get("method") == "notifications/progress":
                    seen.setdefault(message["params"]["progressToken"], []).append(
                        message["params"]["progress"]
                    )
                elif isinstance(message.get("id"), int):
                    replies += 1
                    assert seen.get(f"t{message['id']}") == [1, 2, 3], message
        nursery.cancel_scope.cancel()


async def test_event_router_flush_waits_for_an_event_handed_over_but_not_yet_handled():
    # Regression: an event handed straight to the waiting router task is in neither the
    # buffer nor the handled count; a flush that missed it let the reply overtake it.
    from types import SimpleNamespace

    from roost.kernel import Event, EventTap, TraceContext
    from roost.plugins.mcp import LOG_EVENT
    from roost.plugins.mcp._tool_context import _EventRouter

    tap = EventTap()
    router = _EventRouter()
    trace = TraceContext.new("a")
    forwarded: list[str] = []

    class Watcher:
        trace_id = trace.trace_id

        async def _handle(self, event):
            await trio.sleep(0)
            forwarded.append(event.payload["data"])

    async with trio.open_nursery() as nursery:
        await nursery.start(router.run, SimpleNamespace(tap=tap))
        router.watchers[trace.trace_id] = [Watcher()]
        router._retune()  # as watch() does: the router takes its watchers' traces
        await trio.testing.wait_all_tasks_blocked()
        tap.publish(
            Event(LOG_EVENT, "a", payload={"level": "info", "data": "last words"}, trace=trace)
        )
        await router._flush()  # no checkpoint between publishing and flushing
        assert forwarded == ["last words"]
        nursery.cancel_scope.cancel()


# ---- the request tasks of a stream connection ------------------------------------------------


class ScriptedServer:
    """Stands in for McpServer in ``_RequestWorkers``: each message says what its request
    does — answer at once, wait until released, or be cancelled after its last checkpoint."""

    def __init__(self) -> None:
        self.release = trio.Event()
        self.started: list[object] = []

    async def handle(self, session, message, *, notify=None, scope=None):
        session.in_flight[message["id"]] = scope
        self.started.append(message["id"])
        try:
            if message.get("wait"):
                await self.release.wait()
            if message.get("cancel_itself"):
                session.cancel(message["id"])  # no checkpoint follows: it finishes all the same
            return {"id": message["id"], "result": "done"}
        finally:
            del session.in_flight[message["id"]]


@asynccontextmanager
async def request_workers(limit: int, *, send_checkpoints: bool = False):
    """``_RequestWorkers`` of at most ``limit`` tasks over a ScriptedServer and a new
    session, in a nursery of its own: yields (workers, server, session, sent, nursery),
    ``sent`` being what it sent (each send a checkpoint with ``send_checkpoints``); the
    workers are closed after."""
    from roost.plugins.mcp import ServerSession
    from roost.plugins.mcp._connection import _RequestWorkers

    server, session, sent = ScriptedServer(), ServerSession(), []

    async def send(message):
        if send_checkpoints:
            await trio.lowlevel.checkpoint()
        sent.append(message)

    async with trio.open_nursery() as nursery:
        workers = _RequestWorkers(server, session, send, nursery, limit=limit)
        yield workers, server, session, sent, nursery
        workers.close()


async def test_a_connection_serves_its_requests_one_after_another_in_one_task():
    async with request_workers(4) as (workers, server, session, sent, nursery):
        for i in range(5):
            await workers.submit({"id": i})
            await trio.testing.wait_all_tasks_blocked()
            assert workers.tasks == 1 and workers.busy == 0
    assert [m["id"] for m in sent] == [0, 1, 2, 3, 4]
    assert workers.tasks == 0


async def test_a_cancelled_request_ends_its_task_and_the_next_request_gets_a_new_one():
    async with request_workers(4) as (workers, server, session, sent, nursery):
        await workers.submit({"id": "slow", "wait": True})
        await trio.testing.wait_all_tasks_blocked()
        assert session.cancel("slow")
        await trio.testing.wait_all_tasks_blocked()
        assert workers.tasks == 0 and workers.busy == 0 and sent == []  # no response
        await workers.submit({"id": "next"})
        await trio.testing.wait_all_tasks_blocked()
        assert [m["id"] for m in sent] == ["next"] and workers.tasks == 1


async def test_a_request_cancelled_after_its_last_checkpoint_is_still_answered():
    # As with a cancel scope of its own per request: a cancel that finds no checkpoint
    # left does not stop the request, and its reply goes out (outside the spent scope).
    # Each send is a checkpoint: it must not be cancelled.
    async with request_workers(4, send_checkpoints=True) as (workers, server, session, sent, _):
        await workers.submit({"id": "self", "cancel_itself": True})
        await trio.testing.wait_all_tasks_blocked()
        assert [m["id"] for m in sent] == ["self"]
        assert workers.tasks == 0 and workers.busy == 0  # its scope is spent: the task ended
        await workers.submit({"id": "next"})
        await trio.testing.wait_all_tasks_blocked()
        assert [m["id"] for m in sent] == ["self", "next"]


async def test_requests_beyond_the_limit_wait_for_a_free_task():
    async with request_workers(2) as (workers, server, session, sent, nursery):
        await workers.submit({"id": 1, "wait": True})
        await workers.submit({"id": 2, "wait": True})
        submitted = trio.Event()

        async def third():
            await workers.submit({"id": 3})
            submitted.set()

        nursery.start_soon(third)
        await trio.testing.wait_all_tasks_blocked()
        assert not submitted.is_set() and workers.tasks == 2 and sorted(server.started) == [1, 2]
        server.release.set()
        await trio.testing.wait_all_tasks_blocked()
        assert submitted.is_set() and sorted(m["id"] for m in sent) == [1, 2, 3]
        assert workers.tasks == 2 and workers.busy == 0


async def test_a_cancel_makes_room_at_once_for_a_request_waiting_for_a_task():
    async with request_workers(1) as (workers, server, session, sent, nursery):
        await workers.submit({"id": "slow", "wait": True})
        submitted = trio.Event()

        async def next_one():
            await workers.submit({"id": "next"})
            submitted.set()

        nursery.start_soon(next_one)
        await trio.testing.wait_all_tasks_blocked()
        assert not submitted.is_set()
        session.cancel("slow")  # "slow" still waits for its release: only the cancel frees room
        await trio.testing.wait_all_tasks_blocked()
        assert submitted.is_set() and [m["id"] for m in sent] == ["next"]
        assert workers.tasks == 1 and workers.busy == 0


async def test_a_clients_answer_reaches_a_request_waiting_in_the_only_request_task(config):
    # Regression (review): the client's answer to our elicitation request queued for a free
    # request task; with every task waiting on such answers, it stalled until the timeout.
    from functools import partial

    from roost.kernel import Tool, ToolResult, ToolSpec, hookimpl, open_kernel, parse_manifest
    from roost.plugins.mcp import request_client

    class AskingTool:
        @hookimpl
        def roost_tools(self, config):
            async def ask(call, ctx):
                schema = {"type": "object", "properties": {"day": {"type": "string"}}}
                answer = await request_client(
                    ctx,
                    "elicitation/create",
                    {"message": "Which day?", "requestedSchema": schema},
                    timeout_s=30,
                )
                return ToolResult.text(f"{answer['action']}:{answer['content']['day']}")

            return [Tool(ToolSpec("ask_user", "Asks the user", owner="test"), ask)]

    script = {"rules": [], "default_reply": "{message}"}
    agent = parse_manifest(
        {
            "name": "asker",
            "description": "asks",
            "model": {"provider": "scripted", "script": script},
            "mcp": {"expose_tools": ["ask_user"]},
        }
    )
    async with open_kernel(config, agents=[agent], plugins=[AskingTool()]) as kernel:
        client_end, server_end = memory_pair()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                partial(serve_memory, McpServer(kernel), server_end, max_in_flight=1)
            )
            client = Client(client_end)
            await client.request("initialize", {**INIT_PARAMS, "capabilities": {"elicitation": {}}})
            await client.notify("notifications/initialized")
            await client_end.send(
                {
                    "jsonrpc": "2.0",
                    "id": "call",
                    "method": "tools/call",
                    "params": {"name": "ask_user", "arguments": {}},
                }
            )
            with trio.fail_after(10):
                while (asked := await client_end.receive()).get("method") != "elicitation/create":
                    pass
                await client_end.send(
                    {
                        "jsonrpc": "2.0",
                        "id": asked["id"],
                        "result": {"action": "accept", "content": {"day": "Friday"}},
                    }
                )
                while (reply := await client_end.receive()).get("id") != "call":
                    pass
            nursery.cancel_scope.cancel()
    assert reply["result"]["content"][0]["text"] == "accept:Friday"


def test_the_server_names_are_reexported_from_the_package():
    # What broke: the server was one 1,500-line module; split along its seams, its public
    # names are re-exported by roost.plugins.mcp, each from the module that defines it.
    import roost.plugins.mcp as mcp

    for name in mcp.__all__:
        value = getattr(mcp, name)
        if callable(value) and name in mcp._EXPORTS:
            assert value.__module__ == f"roost.plugins.mcp.{mcp._EXPORTS[name]}", name
    assert mcp.McpServer.__module__ == "roost.plugins.mcp._server"


@pytest.mark.parametrize("buffer", [0, -1, True, 1.0, "8", None, float("inf")])
def test_a_memory_pair_buffer_that_is_not_a_positive_int_names_the_argument(buffer):
    with pytest.raises(ValueError, match=r"^buffer: expected a positive integer, got "):
        memory_pair(buffer)


async def test_a_memory_pair_of_one_slot_each_way_carries_messages():
    client_end, server_end = memory_pair(1)
    await client_end.send({"n": 1})
    assert await server_end.receive() == {"n": 1}
