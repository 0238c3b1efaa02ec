"""Every bad-input case of issue 4, each with the spec's error code, over real HTTP."""

from __future__ import annotations

import json

import httpx
import pytest

V1 = {"A2A-Version": "1.0"}


def msg(text="hi", **extra):
    return {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": text}], **extra}


async def rpc(client, method, params, *, headers=V1, path="/a2a/agents/echo/jsonrpc", rid=1):
    r = await client.post(
        path,
        json={"jsonrpc": "2.0", "id": rid, "method": method, "params": params},
        headers=headers,
    )
    assert r.status_code == 200, r.text
    return r.json()


@pytest.fixture
async def http(daemon):
    kernel, url = daemon
    async with httpx.AsyncClient(base_url=url, timeout=10) as client:
        yield client


async def completed_task(http):
    body = await rpc(http, "SendMessage", {"message": msg()})
    return body["result"]["task"]["id"]


def reason(body):
    return body["error"]["data"][0]["reason"]


async def test_task_not_found_is_32001(http):
    body = await rpc(http, "GetTask", {"id": "does-not-exist"})
    assert body["error"]["code"] == -32001
    assert reason(body) == "TASK_NOT_FOUND"
    assert body["id"] == 1


async def test_cancel_of_a_finished_task_is_32002(http):
    tid = await completed_task(http)
    body = await rpc(http, "CancelTask", {"id": tid})
    assert body["error"]["code"] == -32002
    assert reason(body) == "TASK_NOT_CANCELABLE"


async def test_push_config_when_disabled_is_32003(http):
    tid = await completed_task(http)
    body = await rpc(
        http, "CreateTaskPushNotificationConfig", {"taskId": tid, "url": "http://127.0.0.1:9/hook"}
    )
    assert body["error"]["code"] == -32003
    assert "push_notifications" in body["error"]["message"]


async def test_subscribe_to_a_finished_task_is_32004(http):
    tid = await completed_task(http)
    r = await http.post(
        "/a2a/agents/echo/jsonrpc",
        json={"jsonrpc": "2.0", "id": 2, "method": "SubscribeToTask", "params": {"id": tid}},
        headers={**V1, "Accept": "text/event-stream"},
    )
    body = r.json()
    assert body["error"]["code"] == -32004
    assert "terminal" in body["error"]["message"]


async def test_extended_card_without_api_key_is_32004(http):
    body = await rpc(http, "GetExtendedAgentCard", {})
    assert body["error"]["code"] == -32004


async def test_unacceptable_output_modes_are_32005(http):
    body = await rpc(
        http,
        "SendMessage",
        {"message": msg(), "configuration": {"acceptedOutputModes": ["image/png"]}},
    )
    assert body["error"]["code"] == -32005
    assert "acceptedOutputModes" in body["error"]["message"]


@pytest.mark.parametrize("version", ["2.0", "0.1", "banana", "1"])
async def test_unsupported_version_is_32009(http, version):
    body = await rpc(http, "GetTask", {"id": "x"}, headers={"A2A-Version": version})
    assert body["error"]["code"] == -32009
    assert reason(body) == "VERSION_NOT_SUPPORTED"


async def test_v1_method_without_version_header_is_32009(http):
    body = await rpc(http, "SendMessage", {"message": msg()}, headers={})
    assert body["error"]["code"] == -32009


async def test_v03_method_with_v1_header_is_32009_not_32603(http):
    body = await rpc(
        http,
        "message/send",
        {
            "message": {
                "kind": "message",
                "messageId": "m",
                "role": "user",
                "parts": [{"kind": "text", "text": "x"}],
            }
        },
    )
    assert body["error"]["code"] == -32009


async def test_version_query_parameter_is_honoured(http):
    r = await http.post(
        "/a2a/agents/echo/jsonrpc?A2A-Version=1.0",
        json={"jsonrpc": "2.0", "id": 8, "method": "GetTask", "params": {"id": "x"}},
    )
    assert r.json()["error"]["code"] == -32001  # reached the 1.0 handler


async def test_patch_version_is_accepted(http):
    body = await rpc(http, "GetTask", {"id": "x"}, headers={"A2A-Version": "1.0.1"})
    assert body["error"]["code"] == -32001


async def test_batch_is_32600(http):
    r = await http.post(
        "/a2a/agents/echo/jsonrpc",
        content=json.dumps(
            [{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}}]
        ),
        headers=V1,
    )
    body = r.json()
    assert body["error"]["code"] == -32600 and body["id"] is None


@pytest.mark.parametrize(
    "payload",
    [
        {"id": 1, "method": "GetTask"},
        {"jsonrpc": "1.0", "id": 1, "method": "GetTask"},
        {"jsonrpc": "2.0", "id": {"x": 1}, "method": "GetTask"},
        {"jsonrpc": "2.0", "id": 1, "method": 5},
    ],
    ids=["no-jsonrpc", "wrong-jsonrpc", "object-id", "numeric-method"],
)
async def test_invalid_request_is_32600(http, payload):
    r = await http.post("/a2a/agents/echo/jsonrpc", json=payload, headers=V1)
    assert r.json()["error"]["code"] == -32600


async def test_unknown_method_is_32601(http):
    body = await rpc(http, "FooBar", {})
    assert body["error"] == {"code": -32601, "message": "Method not found: 'FooBar'"}


async def test_missing_role_is_32602_naming_the_field(http):
    body = await rpc(
        http, "SendMessage", {"message": {"messageId": "m-17", "parts": [{"text": "no role"}]}}
    )
    assert body["error"]["code"] == -32602
    assert body["error"]["data"][0]["metadata"]["errors"] == [
        {"field": "message.role", "message": "Field is required."}
    ]
    assert body["error"]["data"][1]["fieldViolations"][0]["field"] == "message.role"


@pytest.mark.parametrize("role", [["ROLE_USER"], {"r": 1}, 7])
async def test_a_role_that_is_not_a_string_is_32602_not_a_crash(http, role):
    # Regression: a list or object role raised an unhashable TypeError (HTTP 500).
    body = await rpc(http, "SendMessage", {"message": msg() | {"role": role}})
    assert body["error"]["code"] == -32602
    assert body["error"]["data"][0]["metadata"]["errors"][0]["field"] == "message.role"
    r = await http.post(
        "/a2a/agents/echo/rest/v1/message:send",
        json={"message": {"messageId": "m", "role": role, "content": [{"text": "x"}]}},
    )
    assert r.status_code == 400 and "role" in r.text


async def test_no_parts_is_32602_naming_the_field(http):
    body = await rpc(http, "SendMessage", {"message": msg() | {"parts": []}})
    assert body["error"]["code"] == -32602
    assert body["error"]["data"][0]["metadata"]["errors"][0]["field"] == "message.parts"


@pytest.mark.parametrize(
    "part,field",
    [
        ({}, "message.parts[0]"),
        ({"text": 5}, "message.parts[0].text"),
        ({"text": "a", "url": "http://x"}, "message.parts[0]"),
        ({"raw": "%%%not base64"}, "message.parts[0].raw"),
        (
            {"raw": "%%%"},
            "message.parts[0].raw",
        ),  # was taken as empty bytes by the URL-safe fallback
        ({"raw": "ab!c"}, "message.parts[0].raw"),
        ({"kind": "video"}, "message.parts[0].kind"),
        ("just a string", "message.parts[0]"),
    ],
    ids=[
        "empty",
        "text-not-string",
        "two-payloads",
        "bad-base64",
        "stray-characters-only",
        "stray-character",
        "unknown-kind",
        "not-an-object",
    ],
)
async def test_bad_part_is_32602_naming_the_field(http, part, field):
    body = await rpc(http, "SendMessage", {"message": msg() | {"parts": [part]}})
    assert body["error"]["code"] == -32602
    fields = [e["field"] for e in body["error"]["data"][0]["metadata"]["errors"]]
    assert field in fields, body


async def test_message_not_an_object_lists_every_missing_field(http):
    body = await rpc(http, "SendMessage", {"message": "not-an-object"})
    fields = [e["field"] for e in body["error"]["data"][0]["metadata"]["errors"]]
    assert fields == ["message.messageId", "message.role", "message.parts"]


@pytest.mark.parametrize(
    "method,params,field",
    [
        ("GetTask", {}, "id"),
        ("GetTask", {"id": 7}, "id"),
        ("GetTask", {"id": "x", "historyLength": -1}, "historyLength"),
        ("ListTasks", {"pageSize": 0}, "pageSize"),
        ("ListTasks", {"pageToken": "garbage!"}, "pageToken"),
        ("ListTasks", {"status": "sleeping"}, "status"),
        ("ListTasks", {"statusTimestampAfter": "yesterday"}, "statusTimestampAfter"),
        (
            "SendMessage",
            {"message": msg(), "configuration": {"returnImmediately": "yes"}},
            "configuration.returnImmediately",
        ),
        ("SendMessage", {"message": msg(role="ROLE_AGENT")}, "message.role"),
    ],
)
async def test_bad_params_are_32602_naming_the_field(http, method, params, field):
    body = await rpc(http, method, params)
    assert body["error"]["code"] == -32602, body
    assert field in body["error"]["message"]


HOSTILE_NUMBERS = ["١٢", "²", "+1", " 1", "1_000", "-1", "1e3", "9" * 5000, "", 1.5, True]


@pytest.mark.parametrize("value", HOSTILE_NUMBERS)
async def test_a_number_that_is_not_ascii_digits_in_range_is_refused_naming_its_field(http, value):
    tid = await completed_task(http)
    body = await rpc(http, "GetTask", {"id": tid, "historyLength": value})
    assert body["error"]["code"] == -32602, body
    assert body["error"]["message"].startswith("historyLength: expected an integer from 0 to")
    assert len(body["error"]["message"]) < 200  # 5,000 digits are not echoed
    if isinstance(value, str):  # a REST query parameter is text: the same check, as a 400
        r = await http.get("/a2a/agents/echo/rest/tasks", params={"pageSize": value}, headers=V1)
        assert r.status_code == 400 and r.json()["error"]["status"] == "INVALID_ARGUMENT", r.text
        message = r.json()["error"]["message"]
        assert "pageSize: expected an integer from 1 to 100 in ASCII digits, got" in message
        assert len(message) < 200


async def test_a_number_in_ascii_digits_is_read_with_leading_zeros(http):
    tid = await completed_task(http)
    body = await rpc(http, "GetTask", {"id": tid, "historyLength": "0001"})
    assert len(body["result"]["history"]) == 1, body
    r = await http.get(
        "/a2a/agents/echo/rest/tasks", params={"pageSize": "0" * 5000 + "1"}, headers=V1
    )
    assert r.status_code == 200 and r.json()["pageSize"] == 1, r.text


@pytest.mark.parametrize("version", ["١.٠", "+1.0", "1_0.0", "1e0.0", "9" * 5000 + ".0", "1. 0"])
async def test_a_version_not_in_ascii_digits_is_32009(http, version):
    # As a query parameter: a header is ASCII (latin-1) only.
    async def get_task(version: str) -> dict:
        request = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}}
        r = await http.post(
            "/a2a/agents/echo/jsonrpc", params={"A2A-Version": version}, json=request
        )
        return r.json()

    assert (await get_task("01.00"))["error"]["code"] == -32001  # read: no such task
    body = await get_task(version)
    assert body["error"]["code"] == -32009 and reason(body) == "VERSION_NOT_SUPPORTED", body


async def test_params_not_an_object_is_32602(http):
    body = await rpc(http, "GetTask", ["x"])
    assert body["error"]["code"] == -32602


async def test_parse_error_is_32700(http):
    r = await http.post("/a2a/agents/echo/jsonrpc", content=b'{"jsonrpc":"2.0",', headers=V1)
    body = r.json()
    assert body["error"]["code"] == -32700 and body["id"] is None


async def test_oversize_body_is_refused_with_413(http):
    big = "x" * (1_048_576 + 10)
    r = await http.post(
        "/a2a/agents/echo/jsonrpc",
        json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": msg(big)}},
        headers=V1,
    )
    assert r.status_code == 413
    assert "max_body_bytes" in r.json()["error"]["message"]


async def test_message_to_a_finished_task_is_32004(http):
    tid = await completed_task(http)
    body = await rpc(http, "SendMessage", {"message": msg(taskId=tid)})
    assert body["error"]["code"] == -32004


async def test_message_to_an_unknown_task_is_32001(http):
    body = await rpc(http, "SendMessage", {"message": msg(taskId="nope")})
    assert body["error"]["code"] == -32001


async def test_unknown_agent_endpoint_is_404(http):
    r = await http.post(
        "/a2a/agents/ghost/jsonrpc",
        json={"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}},
        headers=V1,
    )
    assert r.status_code == 404 and "echo" in r.json()["error"]["message"]


async def test_agent_with_a2a_disabled_is_not_reachable(http):
    r = await http.get("/a2a/agents/hidden/.well-known/agent-card.json")
    assert r.status_code == 404


async def test_task_of_another_agent_is_not_found_at_this_agents_endpoint(http):
    tid = await completed_task(http)
    body = await rpc(http, "GetTask", {"id": tid}, path="/a2a/agents/asker/jsonrpc")
    assert body["error"]["code"] == -32001


async def test_rest_errors_use_http_status_and_google_rpc_status(http):
    r = await http.get("/a2a/agents/echo/rest/tasks/nope", headers=V1)
    assert r.status_code == 404
    assert r.json()["error"]["status"] == "NOT_FOUND"
    assert r.json()["error"]["details"][0]["reason"] == "TASK_NOT_FOUND"
    r = await http.post("/a2a/agents/echo/rest/message:send", json={"message": msg()})
    assert r.status_code == 400
    assert r.json()["error"]["details"][0]["reason"] == "VERSION_NOT_SUPPORTED"
    r = await http.post(
        "/a2a/agents/echo/rest/message:send", json={"message": {"messageId": "m"}}, headers=V1
    )
    assert r.status_code == 400 and r.json()["error"]["status"] == "INVALID_ARGUMENT"
    r = await http.post("/a2a/agents/echo/rest/nothing:here", json={}, headers=V1)
    assert r.status_code == 404


async def test_bad_input_never_breaks_the_server(http):
    for junk in (b"\xff\xfe", b"null", b"[]", b"{}", b'"str"', b"1e999", b"{" * 5000):
        r = await http.post("/a2a/agents/echo/jsonrpc", content=junk, headers=V1)
        assert r.status_code == 200 and "error" in r.json()
    body = await rpc(http, "SendMessage", {"message": msg("still alive")})
    assert body["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
