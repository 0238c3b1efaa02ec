"""A2A: no caller can shut the others out, and a session of another agent is the request's
mistake (issue 15, items 12 and 15, and the hostile review after them).

Only finished tasks were evicted from the task store (``a2a.max_tasks``), and tasks waiting
for input never finish: one principal's input-required tasks filled the store and every
other caller's send failed with -32603 "storage failed: the task store holds N unfinished
tasks". Now each principal holds at most ``a2a.max_open_tasks_per_caller`` unfinished tasks
(one more is refused, -32000 / HTTP 429, naming the setting), and a task waiting for input
expires after ``a2a.input_required_ttl_s``. A ``contextId`` naming the caller's conversation
with another agent ended the task failed (``session_conflict``); now it is refused up front
with -32602 naming ``message.contextId`` (HTTP 400), before any task exists.

Real kernel, real daemon on 127.0.0.1, real SQLite, named API keys (``principals_helpers``:
``recall`` asks a question, leaving the task input-required, when a message starts with "ask").
"""

from __future__ import annotations

import json
import secrets
from typing import Any

import httpx
import pytest
import trio
from principals_helpers import V1, bearer, make_config, serve, set_key_env
from roost.kernel import default_config

INPUT_REQUIRED = "TASK_STATE_INPUT_REQUIRED"


def _config(tmp_path, **a2a: Any):
    """Agents ``recall`` and ``waiter``, principals alice, bob and ops, ``[a2a]`` ``a2a``."""
    make_config(tmp_path)  # writes the agents recall and waiter
    return default_config(
        home=str(tmp_path / "home"),
        agents={"dirs": [str(tmp_path / "agents")], "bundled": False},
        http={
            "port": 0,
            "rate_limit_per_s": 100000,
            "rate_limit_burst": 100000,
            "keys": {
                name: {"key_env": f"ROOST_TEST_KEY_{name.upper()}"}
                for name in ("alice", "bob", "ops")
            },
        },
        a2a={"default_agent": "recall", **a2a},
    )


def _message(text: str, **extra: Any) -> dict:
    return {
        "role": "ROLE_USER",
        "messageId": secrets.token_hex(8),
        "parts": [{"text": text}],
        **extra,
    }


async def _rpc(
    http: httpx.AsyncClient, who: str, method: str, params: dict, agent: str = "recall"
) -> dict:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    response = await http.post(
        f"/a2a/agents/{agent}/jsonrpc", json=body, headers={**V1, **bearer(who)}
    )
    assert response.status_code == 200, response.text
    return response.json()


async def _send(
    http: httpx.AsyncClient, who: str, text: str, agent: str = "recall", **extra: Any
) -> dict:
    return await _rpc(http, who, "SendMessage", {"message": _message(text, **extra)}, agent)


async def _listed(http: httpx.AsyncClient, who: str, agent: str) -> int:
    return (await _rpc(http, who, "ListTasks", {}, agent))["result"]["totalSize"]


# ---- the reviewer's finding --------------------------------------------------------------


async def test_one_principal_cannot_fill_the_a2a_task_store_for_everyone(tmp_path, monkeypatch):
    """Only finished tasks are evicted, so tasks left waiting for input are kept for ever:
    alice's ``a2a.max_tasks`` (here 10, by default 1,000 — a few seconds of requests, and
    loopback is not rate limited) input-required tasks make every send of bob's fail with
    "storage failed: the task store holds 10 unfinished tasks"."""
    set_key_env(monkeypatch)
    config = _config(tmp_path, max_tasks=10)
    with trio.fail_after(60):
        async with serve(config) as (_, url), httpx.AsyncClient(base_url=url, timeout=30) as http:

            async def send(who: str, text: str) -> dict:  # any HTTP status: the answer is the point
                params = {"message": _message(text)}
                body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params}
                response = await http.post(
                    "/a2a/agents/recall/jsonrpc", json=body, headers={**V1, **bearer(who)}
                )
                return response.json()

            for i in range(12):
                await send("alice", f"ask me something {i}")
            answer = await send("bob", "hello")
    assert "result" in answer, f"bob is locked out of A2A by alice's open tasks: {answer}"


# ---- a2a.max_open_tasks_per_caller ----------------------------------------------------------


async def test_a_principal_at_its_open_task_bound_is_refused_and_the_others_are_served(
    tmp_path, monkeypatch
):
    """Alice holds 3 input-required tasks (the bound): her 4th new task is refused on
    JSON-RPC (-32000) and HTTP+JSON (429 RESOURCE_EXHAUSTED), naming the setting, and no
    task is made for it; bob is served meanwhile; alice may still answer her own open
    tasks, and once one finishes she may open a new one."""
    set_key_env(monkeypatch)
    config = _config(tmp_path, max_tasks=100, max_open_tasks_per_caller=3)
    with trio.fail_after(60):
        async with serve(config) as (_, url), httpx.AsyncClient(base_url=url, timeout=30) as http:
            opened = [(await _send(http, "alice", f"ask {i}"))["result"]["task"] for i in range(3)]
            refused = await _send(http, "alice", "ask one more")
            rest = await http.post(
                "/a2a/agents/recall/rest/message:send",
                json={"message": _message("ask again")},
                headers={**V1, **bearer("alice")},
            )
            listed = await _listed(http, "alice", "recall")
            bob = [await _send(http, "bob", f"ask {i}") for i in range(3)]
            answered = await _send(
                http, "alice", "fine", taskId=opened[0]["id"], contextId=opened[0]["contextId"]
            )
            reopened = await _send(http, "alice", "ask after one finished")
    assert all(t["status"]["state"] == INPUT_REQUIRED for t in opened), opened
    error = refused["error"]
    assert error["code"] == -32000 and "a2a.max_open_tasks_per_caller = 3" in error["message"], (
        error
    )
    assert error["data"][0]["reason"] == "TOO_MANY_OPEN_TASKS", error
    assert rest.status_code == 429, rest.text
    assert (
        rest.json()["error"]["status"] == "RESOURCE_EXHAUSTED"
        and "max_open_tasks_per_caller" in rest.text
    )
    assert listed == 3  # nothing was made for the refused sends
    assert all(b["result"]["task"]["status"]["state"] == INPUT_REQUIRED for b in bob), bob
    assert answered["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", answered
    assert reopened["result"]["task"]["status"]["state"] == INPUT_REQUIRED, reopened


def test_the_open_task_bound_is_checked_at_start():
    from roost.kernel import ConfigError
    from roost.plugins.a2a._settings import A2ASettings

    assert A2ASettings.from_config({"max_tasks": 1000}).open_tasks_per_caller == 100
    assert A2ASettings.from_config({"max_tasks": 5}).open_tasks_per_caller == 1
    assert A2ASettings.from_config({}).input_required_ttl_s == 3600
    for bad, field in (
        ({"max_open_tasks_per_caller": 0}, "a2a.max_open_tasks_per_caller"),
        ({"max_tasks": 10, "max_open_tasks_per_caller": 11}, "a2a.max_open_tasks_per_caller"),
        ({"max_open_tasks_per_caller": True}, "a2a.max_open_tasks_per_caller"),
        ({"input_required_ttl_s": 0}, "a2a.input_required_ttl_s"),
        ({"input_required_ttl_s": float("nan")}, "a2a.input_required_ttl_s"),
        ({"input_required_ttl_s": "1h"}, "a2a.input_required_ttl_s"),
    ):
        try:
            A2ASettings.from_config(bad)
        except ConfigError as exc:
            assert str(exc).startswith(field), exc
        else:
            raise AssertionError(f"{bad} was accepted")


# ---- a2a.input_required_ttl_s -----------------------------------------------------------------


@pytest.fixture
async def webhook(nursery):
    """A real HTTP receiver on 127.0.0.1 (hypercorn): ``(url, wait_for)``; ``wait_for(state)``
    returns the first status update in ``state`` it received (the caller bounds the wait)."""
    from functools import partial

    from hypercorn.config import Config
    from hypercorn.trio import serve as hserve

    received: list[dict] = []
    arrived = {"event": trio.Event()}

    async def app(scope, receive, send):
        if scope["type"] == "lifespan":
            while True:
                event = await receive()
                await send({"type": event["type"] + ".complete"})
                if event["type"] == "lifespan.shutdown":
                    return
        body = b""
        while True:
            event = await receive()
            body += event.get("body", b"")
            if not event.get("more_body"):
                break
        received.append(json.loads(body))
        arrived["event"].set()
        arrived["event"] = trio.Event()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def wait_for(state: str) -> dict:
        while True:
            for body in received:
                update = body.get("statusUpdate")
                if update and update["status"]["state"] == state:
                    return update
            await arrived["event"].wait()

    config = Config()
    config.bind = ["127.0.0.1:0"]
    binds = await nursery.start(partial(hserve, app, config, mode="asgi"))
    yield binds[0] + "/hook", wait_for


def _push(url: str) -> dict:
    return {"configuration": {"taskPushNotificationConfig": {"url": url, "token": "t"}}}


async def test_a_task_left_waiting_for_input_expires_and_frees_its_callers_room(
    tmp_path, monkeypatch, webhook
):
    """With ``a2a.input_required_ttl_s`` = 1, alice's input-required task ends failed with
    the reason, announced (its webhook gets the change) and stored so; alice (bound: 1
    open task) may open a new one; and the expired task is evicted like a finished one."""
    hook, wait_for = webhook
    set_key_env(monkeypatch)
    config = _config(
        tmp_path,
        max_tasks=3,
        max_open_tasks_per_caller=1,
        input_required_ttl_s=1,
        push_notifications=True,
        push_allow_private=True,
    )
    with trio.fail_after(30):
        async with (
            serve(config) as (kernel, url),
            httpx.AsyncClient(base_url=url, timeout=30) as http,
        ):
            params = {"message": _message("ask me"), **_push(hook)}
            task = (await _rpc(http, "alice", "SendMessage", params))["result"]["task"]
            blocked = await _send(http, "alice", "ask me too")
            update = await wait_for("TASK_STATE_FAILED")
            stored = await _rpc(http, "alice", "GetTask", {"id": task["id"]})
            from roost.plugins.a2a._server import service_for

            row = await service_for(kernel).tasks.store.get(task["id"])
            again = await _send(http, "alice", "ask me again")
            for i in range(3):  # three finished tasks of bob's: the expired one is evicted first
                await _send(http, "bob", f"hello {i}")
            evicted = await _rpc(http, "alice", "GetTask", {"id": task["id"]})
    assert task["status"]["state"] == INPUT_REQUIRED
    assert blocked["error"]["code"] == -32000, blocked
    assert update["taskId"] == task["id"]
    reason = update["status"]["message"]["parts"][0]["text"]
    assert "a2a.input_required_ttl_s" in reason and "expired" in reason, reason
    assert stored["result"]["status"]["state"] == "TASK_STATE_FAILED", stored
    assert row.terminal and row.state == "TASK_STATE_FAILED"
    assert again["result"]["task"]["status"]["state"] == INPUT_REQUIRED, again
    assert evicted["error"]["code"] == -32001, evicted


async def test_a_task_waiting_for_input_across_a_restart_still_counts_and_expires(
    tmp_path, monkeypatch, webhook
):
    """After a restart, a task still waiting for input counts against its owner's bound and
    expires ``input_required_ttl_s`` after its last change."""
    hook, wait_for = webhook
    set_key_env(monkeypatch)
    push = {"push_notifications": True, "push_allow_private": True}
    with trio.fail_after(30):
        async with serve(_config(tmp_path, max_open_tasks_per_caller=1, **push)) as (_, url):
            async with httpx.AsyncClient(base_url=url, timeout=30) as http:
                params = {"message": _message("ask me"), **_push(hook)}
                task = (await _rpc(http, "alice", "SendMessage", params))["result"]["task"]
        async with serve(
            _config(tmp_path, max_open_tasks_per_caller=1, input_required_ttl_s=1, **push)
        ) as (_, url):
            async with httpx.AsyncClient(base_url=url, timeout=30) as http:
                blocked = await _send(http, "alice", "ask me too")
                update = await wait_for("TASK_STATE_FAILED")
                again = await _send(http, "alice", "ask me again")
    assert task["status"]["state"] == INPUT_REQUIRED
    assert blocked["error"]["code"] == -32000, blocked
    assert update["taskId"] == task["id"]
    assert again["result"]["task"]["status"]["state"] == INPUT_REQUIRED, again


# ---- a contextId of another agent's conversation --------------------------------------------


async def test_a_context_id_of_another_agents_session_is_refused_before_a_task_exists(
    tmp_path, monkeypatch
):
    """Alice's conversation with ``recall`` (made over REST, and one made over A2A) sent to
    ``waiter`` as ``contextId``: -32602 naming ``message.contextId`` on JSON-RPC, 400 on
    HTTP+JSON, no task made. Bob's own conversation of that id is his (served); a REST
    ``session_id`` of another agent is still 409."""
    set_key_env(monkeypatch)
    with trio.fail_after(60):
        async with (
            serve(_config(tmp_path)) as (_, url),
            httpx.AsyncClient(base_url=url, timeout=30) as http,
        ):
            made = await http.post(
                "/api/agents/recall/message", json={"message": "hi"}, headers=bearer("alice")
            )
            session = made.json()["session_id"]
            over_a2a = (await _send(http, "alice", "hi"))["result"]["task"]["contextId"]
            rpc = [
                await _send(http, "alice", "hi", agent="waiter", contextId=ctx)
                for ctx in (session, over_a2a)
            ]
            rest = await http.post(
                "/a2a/agents/waiter/rest/message:send",
                json={"message": _message("hi", contextId=session)},
                headers={**V1, **bearer("alice")},
            )
            listed = await _listed(http, "alice", "waiter")
            bobs = await _send(http, "bob", "hi", agent="waiter", contextId=session)
            conflict = await http.post(
                "/api/agents/waiter/message",
                json={"message": "hi", "session_id": session},
                headers=bearer("alice"),
            )
    for answer in rpc:
        error = answer["error"]
        assert error["code"] == -32602, answer
        assert (
            error["message"].startswith("message.contextId:")
            and "belongs to agent 'recall', not 'waiter'" in error["message"]
        )
    assert rest.status_code == 400, rest.text
    assert rest.json()["error"]["status"] == "INVALID_ARGUMENT" and "message.contextId" in rest.text
    assert listed == 0
    assert bobs["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", bobs
    assert conflict.status_code == 409 and conflict.json()["error"]["code"] == "session_conflict", (
        conflict.text
    )
