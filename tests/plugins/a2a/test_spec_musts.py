"""One check per MUST of the A2A specification (docs/specification.md) that a test can
reach over the wire, named by its section."""

from __future__ import annotations

import json

import httpx
import pytest
from a2a_helpers import SLEEP_STARTED, make_config, serve
from waiting import wait_until

V1 = {"A2A-Version": "1.0"}
EP = "/a2a/agents/echo/jsonrpc"


def msg(text="hi", **extra):
    return {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": text}], **extra}


async def rpc(http, method, params, path=EP, headers=V1):
    r = await http.post(
        path, json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params}, headers=headers
    )
    return r.json()


async def stream(http, method, params, path=EP):
    r = await http.post(
        path,
        json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params},
        headers={**V1, "Accept": "text/event-stream"},
    )
    return [
        json.loads(line[6:])["result"] for line in r.text.splitlines() if line.startswith("data: ")
    ]


@pytest.fixture
async def http(daemon):
    kernel, url = daemon
    async with httpx.AsyncClient(base_url=url, timeout=10) as client:
        yield client


async def test_3_1_1_send_message_returns_a_task_and_terminal_tasks_refuse_messages(http):
    task = (await rpc(http, "SendMessage", {"message": msg()}))["result"]["task"]
    again = await rpc(http, "SendMessage", {"message": msg(taskId=task["id"])})
    assert again["error"]["code"] == -32004  # UnsupportedOperationError


async def test_3_1_2_stream_begins_with_the_task_and_closes_at_a_terminal_state(http):
    events = await stream(http, "SendStreamingMessage", {"message": msg()})
    assert "task" in events[0]
    assert events[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert sum("task" in e for e in events) == 1


async def test_3_1_4_list_tasks_omits_artifacts_always_has_next_page_token_newest_first(http):
    ids = [
        (await rpc(http, "SendMessage", {"message": msg(f"t{i}")}))["result"]["task"]["id"]
        for i in range(3)
    ]
    page = (await rpc(http, "ListTasks", {}))["result"]
    assert page["nextPageToken"] == ""
    assert all("artifacts" not in t for t in page["tasks"])
    assert [t["id"] for t in page["tasks"]] == ids[::-1]
    with_artifacts = (await rpc(http, "ListTasks", {"includeArtifacts": True}))["result"]
    assert all("artifacts" in t for t in with_artifacts["tasks"])


async def test_3_1_5_cancel_returns_the_updated_task_and_refuses_finished_ones(http):
    path = "/a2a/agents/slow/jsonrpc"
    SLEEP_STARTED.clear()
    task = (
        await rpc(
            http,
            "SendMessage",
            {"message": msg(), "configuration": {"returnImmediately": True}},
            path,
        )
    )["result"]["task"]
    await wait_until(lambda: SLEEP_STARTED, "the slow agent's tool started", timeout=5)
    canceled = (await rpc(http, "CancelTask", {"id": task["id"]}, path))["result"]
    assert canceled["status"]["state"] == "TASK_STATE_CANCELED"
    assert (await rpc(http, "CancelTask", {"id": task["id"]}, path))["error"]["code"] == -32002


async def test_3_1_6_subscribe_first_event_is_the_task_and_terminal_tasks_are_refused(http):
    path = "/a2a/agents/asker/jsonrpc"
    task = (await rpc(http, "SendMessage", {"message": msg("a question")}, path))["result"]["task"]
    events = await stream(http, "SubscribeToTask", {"id": task["id"]}, path)
    assert (
        events[0]["task"]["id"] == task["id"]
    )  # interrupted task: the stream gives its state and ends
    done = (await rpc(http, "SendMessage", {"message": msg()}))["result"]["task"]
    r = await http.post(
        EP,
        json={"jsonrpc": "2.0", "id": 1, "method": "SubscribeToTask", "params": {"id": done["id"]}},
        headers=V1,
    )
    assert r.json()["error"]["code"] == -32004


async def test_3_1_7_to_3_1_10_push_config_persists_get_fails_when_missing_delete_is_idempotent(
    tmp_path,
):
    config = make_config(tmp_path, a2a={"push_notifications": True, "push_allow_private": True})
    async with serve(config) as (kernel, url), httpx.AsyncClient(base_url=url, timeout=10) as http:
        tid = (await rpc(http, "SendMessage", {"message": msg()}))["result"]["task"]["id"]
        created = (
            await rpc(
                http,
                "CreateTaskPushNotificationConfig",
                {"taskId": tid, "id": "c1", "url": "http://127.0.0.1:9/h"},
            )
        )["result"]
        got = (await rpc(http, "GetTaskPushNotificationConfig", {"taskId": tid, "id": "c1"}))[
            "result"
        ]
        listed = (await rpc(http, "ListTaskPushNotificationConfigs", {"taskId": tid}))["result"]
        first = await rpc(http, "DeleteTaskPushNotificationConfig", {"taskId": tid, "id": "c1"})
        second = await rpc(http, "DeleteTaskPushNotificationConfig", {"taskId": tid, "id": "c1"})
        missing = await rpc(http, "GetTaskPushNotificationConfig", {"taskId": tid, "id": "c1"})
        unknown_task = await rpc(http, "ListTaskPushNotificationConfigs", {"taskId": "nope"})
    assert created["id"] == "c1" and got["url"] == "http://127.0.0.1:9/h"
    assert [c["id"] for c in listed["configs"]] == ["c1"]
    assert first["result"] == {} and second["result"] == {}
    assert missing["error"]["code"] == -32001
    assert unknown_task["error"]["code"] == -32001


async def test_3_2_4_history_length_zero_omits_history(http):
    tid = (await rpc(http, "SendMessage", {"message": msg()}))["result"]["task"]["id"]
    assert "history" not in (await rpc(http, "GetTask", {"id": tid, "historyLength": 0}))["result"]


async def test_3_2_6_unsupported_a2a_version_is_version_not_supported(http):
    assert (await rpc(http, "GetTask", {"id": "x"}, headers={"A2A-Version": "9.9"}))["error"][
        "code"
    ] == -32009


async def test_3_3_2_validation_errors_name_the_parameter_and_not_found_does_not_leak(http):
    bad = await rpc(http, "SendMessage", {"message": {"messageId": "m", "role": "ROLE_USER"}})
    assert bad["error"]["code"] == -32602 and "message.parts" in bad["error"]["message"]
    tid = (await rpc(http, "SendMessage", {"message": msg()}))["result"]["task"]["id"]
    other = await rpc(http, "GetTask", {"id": tid}, path="/a2a/agents/asker/jsonrpc")
    nothing = await rpc(http, "GetTask", {"id": "never-existed"}, path="/a2a/agents/asker/jsonrpc")
    assert other["error"]["code"] == nothing["error"]["code"] == -32001  # same answer: no leak


async def test_3_3_2_authentication_errors_reject_missing_credentials(tmp_path):
    config = make_config(tmp_path, a2a={"api_key": "0123456789abcdef"})
    async with serve(config) as (kernel, url), httpx.AsyncClient(base_url=url, timeout=10) as http:
        r = await http.post(
            EP,
            json={"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}},
            headers=V1,
        )
    assert r.status_code == 401 and "Bearer" in r.headers["www-authenticate"]
