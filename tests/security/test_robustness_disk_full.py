"""Nothing is acknowledged before it is stored, and a full disk fails requests, not agents
(issue 15, item 13).

Regression: with the data directory full, an A2A SendMessage returned a task id that was
never stored (the task list was empty afterwards), and four store failures stopped the
agent for good, still stopped after space was freed. The disk fills for real here:
``PRAGMA max_page_count`` at the database's current size makes SQLite answer the next
write that needs a page with SQLITE_FULL, "database or disk is full", exactly as a full
disk does; raising it again is freeing space.
"""

from __future__ import annotations

import httpx
import trio
from robustness_helpers import V1, a2a_send, make_config, mcp_call, mcp_headers, serve
from roost.plugins.a2a._server import service_for

BIG = "many words " * 2000  # ~22 KB: needs new pages in every table it goes to
FULL = "database or disk is full"


async def _disk(store, *, full: bool) -> None:
    """Fill (no page more than it has now) or free the database behind ``store``."""

    def limit(conn):  # on the database's thread, the one that uses its connection
        (pages,) = conn.execute("PRAGMA page_count").fetchone()
        conn.execute(f"PRAGMA max_page_count = {pages if full else 1 << 30}")

    await store.read("fill or free the disk", limit)


def _storage_error(response: httpx.Response) -> str:
    """The message of a storage-failure answer, asserting its protocol's shape."""
    body = response.json()
    if "jsonrpc" in body:
        assert body["error"]["code"] == -32603, body
        message = body["error"]["message"]
    else:
        assert response.status_code == 503, (response.status_code, body)
        message = body["error"]["message"]
    assert message.startswith("storage failed") and FULL in message, message
    return message


async def test_a2a_never_acknowledges_a_task_it_could_not_store(tmp_path):
    async with (
        serve(make_config(tmp_path)) as (kernel, url),
        httpx.AsyncClient(base_url=url, timeout=30) as http,
    ):
        tasks = service_for(kernel).tasks.store
        warm = await http.post(
            "/a2a/agents/echo/jsonrpc", json=a2a_send({"text": "warm up"}), headers=V1
        )
        acknowledged = {warm.json()["result"]["task"]["id"]}
        await _disk(tasks, full=True)
        sends = [
            a2a_send({"text": BIG}),  # blocking: its row is written when it settles
            a2a_send({"text": BIG}, params_extra={"configuration": {"returnImmediately": True}}),
            {**a2a_send({"text": BIG}), "method": "SendStreamingMessage"},
        ]
        for body in sends * 2:
            response = await http.post("/a2a/agents/echo/jsonrpc", json=body, headers=V1)
            result = response.json().get("result")
            if result is not None:  # an answer names a task: it must be stored
                acknowledged.add((result.get("task") or result)["id"])
            _storage_error(response)
        rest = await http.post(
            "/a2a/agents/echo/rest/message:send", json=a2a_send({"text": BIG})["params"], headers=V1
        )
        _storage_error(rest)
        assert rest.json()["error"]["status"] == "UNAVAILABLE"
        status_while_full = kernel.agent_status("echo")
        await _disk(tasks, full=False)
        # Space is back: the same agent works without a restart, and is stored.
        after = await http.post(
            "/a2a/agents/echo/jsonrpc", json=a2a_send({"text": BIG}), headers=V1
        )
        kept = after.json()["result"]["task"]
        acknowledged.add(kept["id"])
        listed = (await http.get("/a2a/agents/echo/rest/tasks", headers=V1)).json()["tasks"]

    assert status_while_full == ("ready", None)
    assert kept["status"]["state"] == "TASK_STATE_COMPLETED"
    assert {t["id"] for t in listed} == acknowledged  # nothing acknowledged is missing


async def test_a_full_disk_fails_each_request_but_never_stops_the_agent(tmp_path):
    async with (
        serve(make_config(tmp_path)) as (kernel, url),
        httpx.AsyncClient(base_url=url, timeout=30) as http,
    ):
        first = await http.post("/api/agents/echo/message", json={"message": "hi"})
        session = first.json()["session_id"]
        await _disk(kernel.store, full=True)
        for i in range(6):  # more than the restart budget (3 in a minute)
            body = {"message": BIG} if i % 2 else {"message": BIG, "session_id": session}
            _storage_error(await http.post("/api/agents/echo/message", json=body))
        _storage_error(
            await http.post(
                "/mcp",
                json=mcp_call("agent_echo", {"message": BIG}),
                headers=mcp_headers("agent_echo"),
            )
        )
        # A2A: the agent's session could not be stored, so the blocking send fails too.
        _storage_error(
            await http.post("/a2a/agents/echo/jsonrpc", json=a2a_send({"text": BIG}), headers=V1)
        )
        agents = {a["name"]: a["status"] for a in (await http.get("/api/agents")).json()["agents"]}
        await _disk(kernel.store, full=False)
        with trio.fail_after(10):
            again = await http.post(
                "/api/agents/echo/message", json={"message": "after", "session_id": session}
            )
        history = [m.content for m in await kernel.store.history(session)]

    assert agents == {"echo": "ready", "fragile": "ready"}
    assert again.status_code == 200 and again.json()["reply"] == "echo: after"
    # The session holds what was answered and stored, and nothing of the failed sends.
    assert history == ["hi", "echo: hi", "after", "echo: after"]
