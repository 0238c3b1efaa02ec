"""An actor past its restart budget is reported stopped, with the reason, and comes back
by itself after its cool-down (issue 15, item 9).

Regression: four crashes in a minute stopped an agent for good while /api/agents still
said "ready"; nothing could bring it back short of restarting the daemon.
"""

from __future__ import annotations

import json

import httpx
import pytest
import trio
from robustness_helpers import MCP_META, V1, a2a_send, make_config, mcp_call, mcp_headers, serve
from roost.kernel import ActorCrashed, ActorStopped, EventKind, RestartPolicy, open_actor_system


async def test_an_actor_past_its_restart_budget_restarts_after_its_cool_down(autojump_clock):
    async def handler(ctx, event):
        if event.payload == "crash":
            raise RuntimeError("boom")
        return f"ok {ctx.restarts}"

    policy = RestartPolicy(max_restarts=1, window_s=60, cooldown_s=30)
    async with open_actor_system(shutdown_timeout_s=1) as system:
        async with system.tap.subscribe(kinds=(EventKind.ACTOR_RESTARTED,)) as events:
            system.spawn("a", lambda: handler, restart=policy)
            for _ in range(2):
                with pytest.raises(ActorCrashed):
                    await system.ask("a", "X", "crash")
            cause = system.stop_cause("a")
            assert (
                "restart budget of 1" in cause and "restarts by itself" in cause and "boom" in cause
            )
            with pytest.raises(ActorStopped, match="restarts by itself"):
                await system.ask("a", "X", "hi")
            started = trio.current_time()
            with trio.fail_after(60):
                while True:  # the in-budget restart, then the one after the cool-down
                    event = await events.receive()
                    if event.payload.get("after") == "cool-down":
                        break
        assert trio.current_time() - started >= 29
        assert system.stop_cause("a") is None
        assert (await system.ask("a", "X", "hi")).payload == "ok 2"
        # A full budget again: one crash is restarted, not a stop.
        with pytest.raises(ActorCrashed):
            await system.ask("a", "X", "crash")
        assert (await system.ask("a", "X", "hi")).payload == "ok 3"


async def test_a_stop_during_the_cool_down_keeps_it_stopped_and_shutdown_does_not_wait():
    async def handler(ctx, event):
        raise RuntimeError("always")

    policy = RestartPolicy(max_restarts=0, window_s=60, cooldown_s=3600)
    with trio.fail_after(5):  # a shutdown that waited for the hour-long cool-down would trip this
        async with open_actor_system(shutdown_timeout_s=1) as system:
            system.spawn("a", lambda: handler, restart=policy)
            system.spawn("b", lambda: handler, restart=policy)
            for name in ("a", "b"):
                with pytest.raises(ActorCrashed):
                    await system.ask(name, "X", None)
            await system.stop("a")
            assert system.stop_cause("a") == "stopped on request"
            assert "restarts by itself" in system.stop_cause("b")


async def test_an_agent_past_its_restart_budget_is_reported_stopped_everywhere_and_comes_back(
    tmp_path,
):
    async with serve(make_config(tmp_path, restart_cooldown_s=1.0)) as (kernel, url):
        async with (
            httpx.AsyncClient(base_url=url, timeout=30) as http,
            kernel.tap.subscribe(kinds=(EventKind.ACTOR_RESTARTED,)) as events,
        ):
            for _ in range(4):  # a bug in the agent (here its provider), four times in a minute
                crashed = await http.post(
                    "/api/agents/fragile/message", json={"message": "crash now"}
                )
                assert (
                    crashed.status_code == 500
                    and crashed.json()["error"]["code"] == "actor_crashed"
                )
            agents = {a["name"]: a for a in (await http.get("/api/agents")).json()["agents"]}
            rest = await http.post("/api/agents/fragile/message", json={"message": "hello"})
            a2a = await http.post(
                "/a2a/agents/fragile/jsonrpc", json=a2a_send({"text": "hello"}), headers=V1
            )
            a2a_rest = await http.post(
                "/a2a/agents/fragile/rest/message:send",
                json=a2a_send({"text": "hello"})["params"],
                headers=V1,
            )
            mcp = await http.post(
                "/mcp",
                json=mcp_call("agent_fragile", {"message": "hello"}),
                headers=mcp_headers("agent_fragile"),
            )
            card = await http.post(
                "/mcp",
                json={
                    "jsonrpc": "2.0",
                    "id": 2,
                    "method": "resources/read",
                    "params": {"uri": "roost://agents/fragile/card", "_meta": MCP_META},
                },
                headers={
                    **mcp_headers("x"),
                    "Mcp-Method": "resources/read",
                    "Mcp-Name": "roost://agents/fragile/card",
                },
            )
            tasks = (await http.get("/a2a/agents/fragile/rest/tasks", headers=V1)).json()["tasks"]
            with trio.fail_after(30):
                while (await events.receive()).payload.get("after") != "cool-down":
                    pass
            back = await http.post("/api/agents/fragile/message", json={"message": "hello"})
            after = {
                a["name"]: a["status"] for a in (await http.get("/api/agents")).json()["agents"]
            }

    assert agents["echo"]["status"] == "ready"
    assert agents["fragile"]["status"] == "stopped"
    reason = agents["fragile"]["error"]
    assert (
        "restart budget of 3" in reason and "restarts by itself" in reason and "blew up" in reason
    )
    assert rest.status_code == 503 and "restarts by itself" in rest.json()["error"]["message"]
    error = a2a.json()["error"]
    assert error["code"] == -32603 and "agent 'fragile' is stopped" in error["message"]
    assert a2a_rest.status_code == 503 and a2a_rest.json()["error"]["status"] == "UNAVAILABLE"
    assert tasks == []  # refused before any task was made
    assert "is stopped" in mcp.json()["error"]["message"]
    card_json = json.loads(card.json()["result"]["contents"][0]["text"])
    assert card_json["status"] == "stopped" and "restarts by itself" in card_json["error"]
    assert back.status_code == 200 and back.json()["reply"] == "ok: hello"
    assert after == {"echo": "ready", "fragile": "ready"}
