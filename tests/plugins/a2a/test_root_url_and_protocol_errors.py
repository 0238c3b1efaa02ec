"""Issue 14 (A2A as a client meets it): the root URL answers with the primary agent, the
seed's 0.1 client shape at ``/a2a/tasks/send``, and errors in each binding's own shape and
content type (-32005 for a non-JSON Content-Type, -32003 for push methods without push,
unknown agents per binding). Real daemon, real sockets."""

from __future__ import annotations

import httpx
import pytest

V1 = {"A2A-Version": "1.0"}
A2A_JSON = "application/a2a+json"


def msg(text="hi", **extra):
    return {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": text}], **extra}


def v01_params(text, task_id, session="s-1"):
    return {
        "id": task_id,
        "sessionId": session,
        "message": {"role": "user", "parts": [{"type": "text", "text": text}]},
    }


@pytest.fixture
async def http(daemon):
    kernel, url = daemon
    async with httpx.AsyncClient(base_url=url, timeout=20) as client:
        yield client


@pytest.fixture
async def bundled_http(bundled):
    async with httpx.AsyncClient(base_url=bundled, timeout=30) as client:
        yield client


def media(response) -> str:
    return response.headers["content-type"].split(";")[0].strip()


# ---- item 1: the primary agent ---------------------------------------------------------------


async def test_root_cards_and_0_1_routes_are_the_first_a2a_agents_without_default_agent(
    bundled_http,
):
    http = bundled_http
    card = (await http.get("/.well-known/agent-card.json")).json()
    legacy = (await http.get("/.well-known/agent.json")).json()
    assert card["name"] == legacy["name"] == "coordinator"
    assert card["skills"][0]["id"] == "delegate"
    # the root card's endpoints are the root endpoints, which route by metadata.agent
    urls = {i["protocolBinding"]: i["url"] for i in card["supportedInterfaces"]}
    assert urls["JSONRPC"].endswith("/a2a/jsonrpc") and urls["HTTP+JSON"].endswith("/a2a/rest")
    r = await http.post("/a2a/tasks/send", json=v01_params("hi", "t-root"))
    assert r.status_code == 200, r.text
    assert r.json()["artifacts"][0]["parts"][0]["text"].startswith("Done. The worker reports:")


async def test_root_endpoint_without_metadata_agent_reaches_the_primary_on_every_binding(
    bundled_http,
):
    http = bundled_http
    rpc = await http.post(
        "/a2a/jsonrpc",
        json={"jsonrpc": "2.0", "id": 7, "method": "SendMessage", "params": {"message": msg()}},
        headers=V1,
    )
    rest = await http.post("/a2a/rest/message:send", json={"message": msg()}, headers=V1)
    named = await http.post(
        "/a2a/rest/message:send",
        json={"message": msg("please review this", metadata={"agent": "reviewer"})},
        headers=V1,
    )
    assert rpc.json()["result"]["task"]["artifacts"][0]["parts"][0]["text"].startswith(
        "Done. The worker reports:"
    )
    assert rest.json()["task"]["artifacts"][0]["parts"][0]["text"].startswith(
        "Done. The worker reports:"
    )
    assert (
        named.json()["task"]["artifacts"][0]["parts"][0]["text"]
        == "Reviewer: approved. The draft is clear and complete."
    )


async def test_default_agent_names_the_primary_and_a_wrong_one_stops_the_daemon(tmp_path):
    """A ``default_agent`` that names no A2A agent (here: one with A2A off, and a typo) is a
    ConfigError once the agents are loaded, with a did-you-mean; the daemon never listens."""
    from a2a_helpers import make_config, serve
    from roost.kernel import ConfigError

    async with (
        serve(make_config(tmp_path, a2a={"default_agent": "asker"})) as (kernel, url),
        httpx.AsyncClient(base_url=url, timeout=10) as http,
    ):
        assert (await http.get("/.well-known/agent-card.json")).json()["name"] == "asker"
    for i, (name, phrase) in enumerate(
        [("hidden", "not reachable over A2A"), ("askr", "did you mean 'asker'?")]
    ):
        with pytest.raises(Exception) as raised:  # the ConfigError may come inside exception groups
            async with serve(
                make_config(tmp_path, a2a={"default_agent": name}, home=tmp_path / f"h{i}")
            ):
                raise AssertionError("the daemon served")
        error = raised.value
        while isinstance(error, BaseExceptionGroup):
            error = error.exceptions[0]
        assert (
            isinstance(error, ConfigError)
            and "a2a.default_agent" in str(error)
            and phrase in str(error)
        ), error


# ---- item 2: the seed's 0.1 client shape ---------------------------------------------------------


async def test_v01_tasks_send_takes_the_jsonrpc_envelope_and_answers_with_one(http):
    envelope = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tasks/send",
        "params": v01_params("wrapped", "t-env"),
    }
    r = await http.post("/a2a/tasks/send", json=envelope)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["jsonrpc"] == "2.0" and body["id"] == 1 and "error" not in body
    assert body["result"]["id"] == "t-env" and body["result"]["sessionId"] == "s-1"
    assert body["result"]["status"]["state"] == "completed"
    assert body["result"]["artifacts"][0]["parts"][0] == {"type": "text", "text": "echo: wrapped"}
    bare = await http.post("/a2a/tasks/send", json=v01_params("plain", "t-bare"))
    assert (
        bare.status_code == 200 and bare.json()["id"] == "t-bare" and "jsonrpc" not in bare.json()
    )
    assert bare.json()["artifacts"][0]["parts"][0]["text"] == "echo: plain"


async def test_v01_envelope_errors_are_jsonrpc_errors_with_the_same_id(http):
    no_message = await http.post(
        "/a2a/tasks/send",
        json={"jsonrpc": "2.0", "id": "abc", "method": "tasks/send", "params": {"id": "t"}},
    )
    other = await http.post(
        "/a2a/tasks/send",
        json={"jsonrpc": "2.0", "id": 9, "method": "tasks/get", "params": {"id": "t"}},
    )
    bad_version = await http.post(
        "/a2a/tasks/send", json={"jsonrpc": "1.0", "id": 3, "method": "tasks/send", "params": {}}
    )
    assert no_message.status_code == 200
    assert no_message.json()["id"] == "abc" and no_message.json()["error"]["code"] == -32602
    assert "message" in no_message.json()["error"]["message"]
    assert other.json()["id"] == 9 and other.json()["error"]["code"] == -32601
    assert "/a2a/jsonrpc" in other.json()["error"]["message"]
    assert bad_version.json()["error"]["code"] == -32600
    bare = await http.post(
        "/a2a/tasks/send", json={"id": "t"}
    )  # bare params keep the REST error shape
    assert bare.status_code == 400 and bare.json()["error"]["status"] == "INVALID_ARGUMENT"


# ---- item 4: errors in each binding's shape ------------------------------------------------------


@pytest.mark.parametrize(
    "content_type", ["text/plain", "application/x-www-form-urlencoded", "text/html; charset=utf-8"]
)
async def test_jsonrpc_with_a_non_json_content_type_is_32005_not_a_parse_error(http, content_type):
    body = b'{"jsonrpc": "2.0", "id": 4, "method": "GetTask", "params": {"id": "x"}}'
    r = await http.post(
        "/a2a/agents/echo/jsonrpc", content=body, headers={**V1, "Content-Type": content_type}
    )
    assert r.status_code == 200 and media(r) == "application/json"
    error = r.json()["error"]
    assert error["code"] == -32005 and r.json()["id"] == 4
    assert (
        error["data"][0]["reason"] == "CONTENT_TYPE_NOT_SUPPORTED"
        and "application/json" in error["message"]
    )
    rest = await http.post(
        "/a2a/agents/echo/rest/message:send",
        content=b'{"message": {}}',
        headers={**V1, "Content-Type": content_type},
    )
    assert (
        rest.status_code == 415
        and rest.json()["error"]["details"][0]["reason"] == "CONTENT_TYPE_NOT_SUPPORTED"
    )
    for json_type in (
        "application/json",
        "application/json; charset=utf-8",
        A2A_JSON,
        None,
    ):  # JSON (or unsaid) is read
        headers = {**V1, **({"Content-Type": json_type} if json_type else {})}
        r = await http.post("/a2a/agents/echo/jsonrpc", content=body, headers=headers)
        assert r.json()["error"]["code"] == -32001, json_type  # parsed: the task is unknown


PUSH_JSONRPC = [
    ("1.0", "CreateTaskPushNotificationConfig", {"taskId": "t", "url": "http://127.0.0.1:9/hook"}),
    ("1.0", "CreateTaskPushNotificationConfig", {}),
    ("1.0", "GetTaskPushNotificationConfig", {"taskId": "t"}),
    ("1.0", "ListTaskPushNotificationConfigs", {}),
    ("1.0", "DeleteTaskPushNotificationConfig", {"taskId": "t"}),
    ("0.3", "tasks/pushNotificationConfig/set", {"taskId": "t", "pushNotificationConfig": {}}),
    ("0.3", "tasks/pushNotificationConfig/get", {}),
    ("0.3", "tasks/pushNotificationConfig/list", {"id": "t"}),
    ("0.3", "tasks/pushNotificationConfig/delete", {"id": "t"}),
]


async def test_push_methods_without_push_are_32003_on_jsonrpc_whatever_the_params(http):
    """Push support is checked before the params: a client probing with any params learns
    that push is off (-32003), not what is wrong with its params (-32602)."""
    for version, method, params in PUSH_JSONRPC:
        headers = V1 if version == "1.0" else {}
        for path in ("/a2a/agents/echo/jsonrpc", "/a2a/jsonrpc"):
            r = await http.post(
                path,
                json={"jsonrpc": "2.0", "id": 5, "method": method, "params": params},
                headers=headers,
            )
            error = r.json()["error"]
            assert error["code"] == -32003, (path, method, params, error)
            assert "push_notifications" in error["message"]


PUSH_REST = [
    ("POST", "tasks/t/pushNotificationConfigs", {}),
    ("POST", "tasks/t/pushNotificationConfigs", {"url": "http://127.0.0.1:9/hook"}),
    ("GET", "tasks/t/pushNotificationConfigs", None),
    ("GET", "tasks/t/pushNotificationConfigs/c1", None),
    ("DELETE", "tasks/t/pushNotificationConfigs/c1", None),
    ("POST", "v1/tasks/t/pushNotificationConfigs", {}),
    (
        "POST",
        "v1/tasks/t/pushNotificationConfigs",
        {"config": {"pushNotificationConfig": {"url": "http://127.0.0.1:9/h"}}},
    ),
    ("GET", "v1/tasks/t/pushNotificationConfigs/c1", None),
]


async def test_push_methods_without_push_are_push_not_supported_on_http_json_whatever_the_body(
    http,
):
    for method, path, body in PUSH_REST:
        for base in ("/a2a/agents/echo/rest/", "/a2a/rest/"):
            r = await http.request(method, base + path, json=body, headers=V1)
            assert r.status_code == 400, (method, base + path, r.text)
            error = r.json()["error"]
            assert error["details"][0]["reason"] == "PUSH_NOTIFICATION_NOT_SUPPORTED", (
                method,
                base + path,
                error,
            )
            assert media(r) == ("application/json" if path.startswith("v1/") else A2A_JSON)


async def test_unknown_agent_is_answered_in_each_bindings_shape(http):
    r = await http.post(
        "/a2a/agents/ghost/jsonrpc",
        json={"jsonrpc": "2.0", "id": 11, "method": "GetTask", "params": {"id": "x"}},
        headers=V1,
    )
    assert r.status_code == 404 and media(r) == "application/json"
    body = r.json()
    assert body["jsonrpc"] == "2.0" and body["id"] == 11 and isinstance(body["error"]["code"], int)
    assert "ghost" in body["error"]["message"] and "echo" in body["error"]["message"]
    for path, content_type in (
        ("/a2a/agents/ghost/rest/tasks/x", A2A_JSON),
        ("/a2a/agents/ghost/rest/v1/tasks/x", "application/json"),
    ):
        r = await http.get(path, headers=V1)
        assert r.status_code == 404 and media(r) == content_type, path
        error = r.json()["error"]
        assert (
            error["code"] == 404 and error["status"] == "NOT_FOUND" and "ghost" in error["message"]
        )
        assert error["details"][0]["@type"] == "type.googleapis.com/google.rpc.ErrorInfo"
    card = await http.get("/a2a/agents/hidden/.well-known/agent-card.json")
    assert card.status_code == 404 and card.json()["error"]["status"] == "NOT_FOUND"


async def test_each_binding_answers_with_its_content_type(http):
    rpc_ok = await http.post(
        "/a2a/agents/echo/jsonrpc",
        json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": msg()}},
        headers=V1,
    )
    rpc_err = await http.post("/a2a/agents/echo/jsonrpc", content=b"{", headers=V1)
    rest_ok = await http.post(
        "/a2a/agents/echo/rest/message:send", json={"message": msg()}, headers=V1
    )
    rest_err = await http.get("/a2a/agents/echo/rest/tasks/nope", headers=V1)
    rest_version = await http.get("/a2a/agents/echo/rest/tasks/nope")
    v03_ok = await http.post(
        "/a2a/agents/echo/rest/v1/message:send",
        json={"message": {"messageId": "m", "role": "ROLE_USER", "content": [{"text": "x"}]}},
    )
    v03_err = await http.get("/a2a/agents/echo/rest/v1/tasks/nope")
    assert [media(r) for r in (rpc_ok, rpc_err)] == ["application/json"] * 2
    assert [media(r) for r in (rest_ok, rest_err, rest_version)] == [A2A_JSON] * 3
    assert [media(r) for r in (v03_ok, v03_err)] == ["application/json"] * 2
    async with http.stream(
        "POST",
        "/a2a/agents/echo/rest/message:stream",
        json={"message": msg()},
        headers={**V1, "Accept": "text/event-stream"},
    ) as r:
        assert media(r) == "text/event-stream"
        await r.aread()


async def test_an_unavailable_agent_answers_503_with_its_reason_on_each_binding(
    tmp_path, monkeypatch
):
    """An agent whose provider cannot start (here: no OPENAI_API_KEY) is answered with its
    reason and 503 in the binding's shape, not as an unknown agent."""
    import json

    from a2a_helpers import make_config, serve

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    config = make_config(tmp_path)
    keyless = tmp_path / "agents" / "keyless" / "agent.json"
    keyless.parent.mkdir()
    keyless.write_text(
        json.dumps(
            {
                "name": "keyless",
                "description": "needs a key",
                "model": {"provider": "openai", "name": "gpt-4o-mini"},
                "a2a": {"enabled": True},
            }
        )
    )
    async with serve(config) as (kernel, url), httpx.AsyncClient(base_url=url, timeout=10) as http:
        assert "keyless" in kernel.agent_errors
        rpc = await http.post(
            "/a2a/agents/keyless/jsonrpc",
            json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": msg()}},
            headers=V1,
        )
        rest = await http.post(
            "/a2a/agents/keyless/rest/message:send", json={"message": msg()}, headers=V1
        )
        root = await http.post(
            "/a2a/jsonrpc",
            json={
                "jsonrpc": "2.0",
                "id": 2,
                "method": "SendMessage",
                "params": {"message": msg(metadata={"agent": "keyless"})},
            },
            headers=V1,
        )
    assert rpc.status_code == 503 and "OPENAI_API_KEY" in rpc.json()["error"]["message"]
    assert isinstance(rpc.json()["error"]["code"], int)
    assert rest.status_code == 503 and rest.json()["error"]["status"] == "UNAVAILABLE"
    assert "OPENAI_API_KEY" in rest.json()["error"]["message"]
    assert "OPENAI_API_KEY" in root.json()["error"]["message"]
