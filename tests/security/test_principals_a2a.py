"""Callers own their A2A tasks (issue 15, item 15).

Regression: with one shared key (or none) any caller could list every A2A task, read,
cancel and follow it, and continue its conversation by naming its contextId. Now each
named API key is a principal; a task belongs to the principal that made it, and another
principal gets "not found" for it (never "forbidden": nothing says it exists), on every
binding (JSON-RPC, HTTP+JSON, the 0.1 routes), and a contextId it names is a conversation
of its own. Driven with the official a2a-sdk client against a real daemon.
"""

from __future__ import annotations

from contextlib import asynccontextmanager

import httpx
import pytest
import trio
from a2a.client import ClientConfig, ClientFactory
from a2a.client.card_resolver import A2ACardResolver
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    SubscribeToTaskRequest,
    a2a_pb2,
)
from a2a.utils.errors import TaskNotFoundError
from principals_helpers import V1, bearer, make_config, serve, set_key_env

BINDINGS = [pytest.param("JSONRPC", id="jsonrpc"), pytest.param("HTTP+JSON", id="rest")]


async def sdk_client(url: str, http: httpx.AsyncClient, binding: str, *, streaming: bool = False):
    """The official client for the ``recall`` agent, speaking 1.0 over ``binding``."""
    card = await A2ACardResolver(http, f"{url}/a2a/agents/recall").get_agent_card()
    keep = [
        i
        for i in card.supported_interfaces
        if i.protocol_binding == binding and i.protocol_version == "1.0"
    ]
    del card.supported_interfaces[:]
    card.supported_interfaces.extend(keep)
    config = ClientConfig(
        streaming=streaming, supported_protocol_bindings=[binding], httpx_client=http
    )
    return ClientFactory(config).create(card)


@asynccontextmanager
async def alice_and_bob(tmp_path, monkeypatch, binding: str):
    """A daemon with named keys; yields (alice's, bob's and bob's streaming official client
    over ``binding``), each closed after."""
    set_key_env(monkeypatch)
    async with (
        serve(make_config(tmp_path)) as (_, url),
        httpx.AsyncClient(timeout=20, headers=bearer("alice")) as alice_http,
        httpx.AsyncClient(timeout=20, headers=bearer("bob")) as bob_http,
    ):
        alice = await sdk_client(url, alice_http, binding)
        bob = await sdk_client(url, bob_http, binding)
        bob_streaming = await sdk_client(url, bob_http, binding, streaming=True)
        try:
            yield alice, bob, bob_streaming
        finally:
            for client in (alice, bob, bob_streaming):
                await client.close()


def user_message(text: str, **kw) -> Message:
    return Message(message_id=f"m-{text[:12]}", role=Role.ROLE_USER, parts=[Part(text=text)], **kw)


async def send(client, text: str, **kw):
    events = [
        e async for e in client.send_message(SendMessageRequest(message=user_message(text, **kw)))
    ]
    return events[0].task


def answer(task) -> str:
    if task.artifacts:
        return task.artifacts[0].parts[0].text
    return task.status.message.parts[0].text


@pytest.mark.parametrize("binding", BINDINGS)
async def test_another_principal_cannot_list_get_cancel_or_follow_a_task(
    tmp_path, monkeypatch, binding
):
    async with alice_and_bob(tmp_path, monkeypatch, binding) as (alice, bob, bob_streaming):
        with trio.fail_after(30):
            task = await send(alice, "ask me something", context_id="ctx-alice")
            assert (
                task.status.state == a2a_pb2.TASK_STATE_INPUT_REQUIRED
            )  # open: it could be cancelled, followed
            assert list((await alice.list_tasks(ListTasksRequest())).tasks) != []

            listed = await bob.list_tasks(ListTasksRequest())
            assert list(listed.tasks) == [] and listed.total_size == 0
            in_context = await bob.list_tasks(ListTasksRequest(context_id="ctx-alice"))
            assert list(in_context.tasks) == []
            with pytest.raises(TaskNotFoundError):
                await bob.get_task(GetTaskRequest(id=task.id))
            with pytest.raises(TaskNotFoundError):
                await bob.cancel_task(CancelTaskRequest(id=task.id))
            with pytest.raises(TaskNotFoundError):
                async for _ in bob_streaming.subscribe(SubscribeToTaskRequest(id=task.id)):
                    pass
            with pytest.raises(TaskNotFoundError):  # continuing it by its id
                await send(bob, "my answer", task_id=task.id, context_id="ctx-alice")

            # Nothing bob did touched it: alice still has it, open, with her history only.
            got = await alice.get_task(GetTaskRequest(id=task.id))
            assert got.status.state == a2a_pb2.TASK_STATE_INPUT_REQUIRED
            assert [m.parts[0].text for m in got.history if m.role == Role.ROLE_USER] == [
                "ask me something"
            ]
            cancelled = await alice.cancel_task(CancelTaskRequest(id=task.id))
            assert cancelled.status.state == a2a_pb2.TASK_STATE_CANCELED


async def test_push_configs_and_the_old_routes_say_not_found_to_another_principal(
    tmp_path, monkeypatch
):
    set_key_env(monkeypatch)
    async with (
        serve(make_config(tmp_path)) as (kernel, url),
        httpx.AsyncClient(base_url=url, timeout=20) as http,
    ):
        with trio.fail_after(30):
            sent = await http.post(
                "/a2a/rest/message:send",
                json={
                    "message": {
                        "role": "ROLE_USER",
                        "messageId": "m1",
                        "parts": [{"text": "ask away"}],
                    }
                },
                headers={**V1, **bearer("alice")},
            )
            task_id = sent.json()["task"]["id"]
            mine = await http.get(f"/a2a/rest/tasks/{task_id}", headers={**V1, **bearer("alice")})
            assert mine.status_code == 200
            unknown = await http.get(
                "/a2a/rest/tasks/no-such-task", headers={**V1, **bearer("bob")}
            )
            for method, path, body in [
                ("GET", f"/a2a/rest/tasks/{task_id}", None),
                ("GET", f"/a2a/rest/tasks/{task_id}/pushNotificationConfigs", None),
                (
                    "POST",
                    f"/a2a/rest/tasks/{task_id}/pushNotificationConfigs",
                    {"url": "https://example.com/hook"},
                ),
                ("GET", f"/a2a/rest/tasks/{task_id}/pushNotificationConfigs/c1", None),
                ("DELETE", f"/a2a/rest/tasks/{task_id}/pushNotificationConfigs/c1", None),
                ("POST", f"/a2a/rest/tasks/{task_id}:cancel", None),
            ]:
                theirs = await http.request(
                    method, path, json=body, headers={**V1, **bearer("bob")}
                )
                # exactly what a task that never existed gets: 404 TASK_NOT_FOUND, not 403
                assert theirs.status_code == 404 == unknown.status_code, (method, path, theirs.text)
                assert "Task not found" in theirs.text or "TASK_NOT_FOUND" in theirs.text, (
                    theirs.text
                )
            rpc = await http.post(
                "/a2a/jsonrpc",
                json={"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": task_id}},
                headers={**V1, **bearer("bob")},
            )
            assert rpc.json()["error"]["code"] == -32001
            # The 0.1 shape's routes.
            legacy_get = await http.get(f"/a2a/tasks/{task_id}", headers=bearer("bob"))
            legacy_cancel = await http.post(f"/a2a/tasks/{task_id}/cancel", headers=bearer("bob"))
            assert legacy_get.status_code == 404 and legacy_cancel.status_code == 404
            assert (
                await http.get(f"/a2a/tasks/{task_id}", headers=bearer("alice"))
            ).status_code == 200
            still = await http.get(f"/a2a/rest/tasks/{task_id}", headers={**V1, **bearer("alice")})
            assert still.json()["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_context_id_of_another_principal_is_a_fresh_conversation(
    tmp_path, monkeypatch, binding
):
    async with alice_and_bob(tmp_path, monkeypatch, binding) as (alice, bob, _):
        with trio.fail_after(30):
            first = await send(alice, "my secret is 42", context_id="shared-ctx")
            assert answer(first) == "heard: my secret is 42"
            theirs = await send(bob, "what was said?", context_id="shared-ctx")
            assert answer(theirs) == "heard: what was said?"  # not alice's history
            again = await send(alice, "and again", context_id="shared-ctx")
            assert (
                answer(again) == "heard: my secret is 42 | and again"
            )  # nor did bob's land in hers


async def test_one_key_is_one_principal_as_before(tmp_path, monkeypatch):
    """Compatibility (passes on main by design): with only ``ROOST_API_KEY``, every client
    holding it is the principal ``default`` and sees all tasks and sessions, as before."""
    monkeypatch.setenv("ROOST_API_KEY", "the-one-key")
    async with (
        serve(make_config(tmp_path, keys=False)) as (kernel, url),
        httpx.AsyncClient(
            base_url=url, timeout=20, headers={"Authorization": "Bearer the-one-key"}
        ) as http,
        httpx.AsyncClient(
            base_url=url, timeout=20, headers={"Authorization": "Bearer the-one-key"}
        ) as other,
    ):
        with trio.fail_after(30):
            message = {
                "message": {
                    "role": "ROLE_USER",
                    "messageId": "m1",
                    "parts": [{"text": "hello"}],
                    "contextId": "c1",
                }
            }
            task_id = (await http.post("/a2a/rest/message:send", json=message, headers=V1)).json()[
                "task"
            ]["id"]
            listed = (await other.get("/a2a/rest/tasks", headers=V1)).json()
            assert [t["id"] for t in listed["tasks"]] == [task_id]
            reply = await other.post(
                "/api/agents/recall/message", json={"message": "more", "session_id": "c1"}
            )
            assert reply.json()["reply"] == "heard: hello | more"
