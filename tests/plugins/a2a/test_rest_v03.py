"""The 0.3 HTTP+JSON binding at ``/v1/...``: requests and answers in 0.3 proto-JSON shapes
(``content`` instead of ``parts``, ``fileWithBytes``/``fileWithUri``, wrapped data parts,
``TASK_STATE_CANCELLED``, ``final`` on status updates), compared with the captured SDK
exchange in reference/a2a/24_rest_v03_v1_prefix.txt."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import httpx
import pytest
import trio
from roost.plugins.a2a import _models as m
from roost.plugins.a2a import _rest03 as rest03
from waiting import wait_until

REFERENCE = Path(__file__).resolve().parents[2] / "fixtures" / "a2a_reference"
V1_SEND = "/a2a/agents/echo/rest/v1/message:send"


@pytest.fixture
async def http(daemon):
    _, url = daemon
    async with httpx.AsyncClient(base_url=url, timeout=10) as client:
        yield client


def _message(*content, task_id=None):
    msg = {"messageId": "r-1", "role": "ROLE_USER", "content": list(content)}
    if task_id:
        msg["taskId"] = task_id
    return {"message": msg}


# ---- sans-I/O shapes ---------------------------------------------------------------------


def test_a_03_message_becomes_a_10_message_with_its_parts_intact():
    raw = base64.b64encode(b"\x00\x01binary").decode()
    body = rest03.send_body_in(
        {
            "message": {
                "messageId": "x",
                "role": "ROLE_USER",
                "content": [
                    {"text": "hi"},
                    {
                        "file": {
                            "fileWithBytes": raw,
                            "mimeType": "application/octet-stream",
                            "name": "a.bin",
                        }
                    },
                    {
                        "file": {
                            "fileWithUri": "https://example.com/a.pdf",
                            "mimeType": "application/pdf",
                        }
                    },
                    {"data": {"data": {"k": [1, 2]}}},
                ],
            },
            "configuration": {"pushNotification": {"url": "https://example.com/hook"}},
        }
    )
    parts = [m.part_from_json(p) for p in body["message"]["parts"]]
    assert parts[0].text == "hi"
    assert (
        parts[1].raw == b"\x00\x01binary"
        and parts[1].filename == "a.bin"
        and parts[1].media_type == "application/octet-stream"
    )
    assert parts[2].url == "https://example.com/a.pdf" and parts[2].media_type == "application/pdf"
    assert parts[3].data == {"k": [1, 2]}
    assert "content" not in body["message"]
    assert body["configuration"] == {"pushNotificationConfig": {"url": "https://example.com/hook"}}


def test_a_10_message_passes_unchanged():
    message = {"messageId": "x", "role": "ROLE_USER", "parts": [{"data": {"data": 1}}]}
    assert rest03.message_in(message) is message  # no re-wrapping of a 1.0 data part


def test_10_results_become_03_shapes():
    task = {
        "id": "t",
        "contextId": "c",
        "status": {
            "state": m.CANCELED,
            "message": {"messageId": "s", "role": "ROLE_AGENT", "parts": [{"text": "stopped"}]},
        },
        "artifacts": [
            {
                "artifactId": "a",
                "parts": [{"raw": "AAE=", "filename": "f", "mediaType": "x/y"}, {"data": {"n": 1}}],
            }
        ],
        "history": [{"messageId": "h", "role": "ROLE_USER", "parts": [{"url": "https://e.com/x"}]}],
    }
    out = m.task_from_json(task).to_json(m.REST03)
    assert out["status"]["state"] == "TASK_STATE_CANCELLED"
    assert out["status"]["message"]["content"] == [{"text": "stopped"}]
    assert out["artifacts"][0]["parts"] == [
        {"file": {"fileWithBytes": "AAE=", "mimeType": "x/y", "name": "f"}},
        {"data": {"data": {"n": 1}}},
    ]
    assert out["history"][0]["content"] == [{"file": {"fileWithUri": "https://e.com/x"}}]
    assert "parts" not in out["history"][0]
    working = m.event_to_json(m.StatusUpdate("t", "c", m.TaskStatus(m.WORKING)), m.REST03)
    done = m.event_to_json(m.StatusUpdate("t", "c", m.TaskStatus(m.INPUT_REQUIRED)), m.REST03)
    assert working["statusUpdate"]["final"] is False and done["statusUpdate"]["final"] is True
    assert task["status"]["state"] == m.CANCELED  # the input is not modified


# ---- over the daemon -----------------------------------------------------------------------


async def test_v1_message_send_answers_like_the_reference(http):
    text = (REFERENCE / "24_rest_v03_v1_prefix.txt").read_text()
    body = json.loads(text.split(">>> request body:\n", 1)[1])
    expected = json.loads(next(line for line in text.splitlines() if line.startswith('{"task"')))
    r = await http.post(V1_SEND, json=body)
    assert r.status_code == 200, r.text
    task = r.json()["task"]
    assert set(task) == set(expected["task"])
    assert task["status"]["state"] == expected["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    user = task["history"][0]
    assert set(user) == set(expected["task"]["history"][0]) and user["content"] == [
        {"text": "rest v0.3"}
    ]
    assert task["artifacts"][0]["parts"][0]["text"] == "echo: rest v0.3"
    got = await http.get(f"/a2a/agents/echo/rest/v1/tasks/{task['id']}")
    assert got.status_code == 200 and got.json()["history"][0]["content"] == [{"text": "rest v0.3"}]


async def test_v1_file_and_data_parts_reach_the_task_intact(http):
    raw = base64.b64encode(b"%PDF-1.7 bytes").decode()
    r = await http.post(
        V1_SEND,
        json=_message(
            {"text": "look"},
            {"file": {"fileWithBytes": raw, "mimeType": "application/pdf", "name": "doc.pdf"}},
            {"data": {"data": {"rows": [1, 2, 3]}}},
        ),
    )
    assert r.status_code == 200, r.text
    content = r.json()["task"]["history"][0]["content"]
    assert content[1] == {
        "file": {"fileWithBytes": raw, "mimeType": "application/pdf", "name": "doc.pdf"}
    }
    assert content[2] == {"data": {"data": {"rows": [1, 2, 3]}}}


async def test_v1_message_stream_sends_03_events_ending_with_a_final_update(http):
    async with http.stream(
        "POST", "/a2a/agents/echo/rest/v1/message:stream", json=_message({"text": "stream me"})
    ) as r:
        assert r.status_code == 200
        events = [
            json.loads(line[6:]) async for line in r.aiter_lines() if line.startswith("data: ")
        ]
    assert next(iter(events[0])) == "task" and events[0]["task"]["history"][0]["content"] == [
        {"text": "stream me"}
    ]
    updates = [e["statusUpdate"] for e in events if "statusUpdate" in e]
    assert updates[-1]["final"] is True and updates[-1]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert all(u["final"] is False for u in updates[:-1])
    artifacts = [e["artifactUpdate"] for e in events if "artifactUpdate" in e]
    assert artifacts and artifacts[0]["artifact"]["parts"][0]["text"] == "echo: stream me"


async def test_v1_bad_parts_get_a_clear_error(http):
    r = await http.post(V1_SEND, json=_message({"file": {"fileWithBytes": "%%% not base64"}}))
    assert r.status_code == 400
    assert (
        r.json()["error"]["message"]
        == "Validation failed: message.content[0].file.fileWithBytes: is not valid base64"
    )
    r = await http.post(
        V1_SEND, json={"message": {"messageId": "x", "role": "ROLE_USER", "content": []}}
    )
    assert (
        r.status_code == 400
        and "message.content: Field must contain at least one element" in r.text
    )


async def test_v1_cancel_of_a_finished_task_is_refused(http):
    task = (await http.post(V1_SEND, json=_message({"text": "done soon"}))).json()["task"]
    r = await http.post(f"/a2a/agents/echo/rest/v1/tasks/{task['id']}:cancel")
    assert r.status_code == 409 and "TASK_NOT_CANCELABLE" in r.text


# ---- push-notification configs and the card (0.3 a2a.proto: TaskPushNotificationConfig,
# CreateTaskPushNotificationConfigRequest, ListTaskPushNotificationConfigResponse, AgentCard) --

HOOK = "http://127.0.0.1:9/h"
AUTH = {"Authorization": "Bearer 0123456789abcdef"}


def _strict_03(obj, message_name):
    """Parse ``obj`` as the 0.3 proto message (the a2a-sdk's copy of the 0.3 a2a.proto),
    refusing unknown fields: the answer uses 0.3 field names and nothing else."""
    from a2a.compat.v0_3 import a2a_v0_3_pb2
    from google.protobuf.json_format import ParseDict

    return ParseDict(obj, getattr(a2a_v0_3_pb2, message_name)())


def test_03_push_config_bodies_are_read_in_either_spelling():
    sdk_style = {  # what the a2a-sdk 0.3 REST client sends (proto field names)
        "parent": "tasks/t1",
        "config_id": "c1",
        "config": {
            "name": "tasks/t1/pushNotificationConfigs/c1",
            "push_notification_config": {
                "id": "c1",
                "url": HOOK,
                "token": "tok",
                "authentication": {"schemes": ["Bearer"], "credentials": "sec"},
            },
        },
    }
    config = rest03.push_config_in(sdk_style, "t1")
    assert (config.task_id, config.id, config.url, config.token) == ("t1", "c1", HOOK, "tok")
    assert (config.auth_scheme, config.credentials) == ("Bearer", "sec")
    camel = rest03.push_config_in(
        {
            "parent": "tasks/t1",
            "configId": "c2",
            "config": {"pushNotificationConfig": {"url": HOOK}},
        },
        "t1",
    )
    assert (camel.id, camel.url) == ("c2", HOOK)
    bare = rest03.push_config_in(
        {
            "name": "tasks/t1/pushNotificationConfigs/c3",
            "pushNotificationConfig": {"id": "c3", "url": HOOK},
        },
        "t1",
    )
    assert bare.id == "c3"  # the proto's HTTP rule: body is the config itself
    fresh = rest03.push_config_in({"config": {"pushNotificationConfig": {"url": HOOK}}}, "t1")
    assert fresh.id  # no id anywhere: the server makes one


@pytest.mark.parametrize(
    "body,field",
    [
        ({}, "config"),
        ({"parent": "tasks/t1", "configId": "c"}, "config"),
        ({"url": HOOK}, "config"),  # the 1.0 flat shape is not a 0.3 body
        ({"config": "x"}, "config"),
        (
            {"config": {"name": "tasks/t1/pushNotificationConfigs/c"}},
            "config.pushNotificationConfig",
        ),
        (
            {"config": {"pushNotificationConfig": {"token": "t"}}},
            "config.pushNotificationConfig.url",
        ),
        ({"parent": "tasks/other", "config": {"pushNotificationConfig": {"url": HOOK}}}, "parent"),
        (
            {
                "config": {
                    "name": "tasks/other/pushNotificationConfigs/c",
                    "pushNotificationConfig": {"url": HOOK},
                }
            },
            "config.name",
        ),
        (
            {"configId": "a", "config": {"pushNotificationConfig": {"id": "b", "url": HOOK}}},
            "configId",
        ),
        # proto field names, as the a2a-sdk's 0.3 REST client writes them
        ({"config_id": 5, "config": {"push_notification_config": {"url": HOOK}}}, "config_id"),
        ({"config": {"push_notification_config": "x"}}, "config.push_notification_config"),
        (
            {"config": {"push_notification_config": {"token": "t"}}},
            "config.push_notification_config.url",
        ),
        (
            {
                "config": {
                    "push_notification_config": {"url": HOOK, "authentication": {"schemes": []}}
                }
            },
            "config.push_notification_config.authentication.scheme",
        ),
        (
            {
                "config_id": "a",
                "configId": "a",
                "config": {"pushNotificationConfig": {"url": HOOK}},
            },
            "config_id",
        ),
    ],
)
def test_bad_03_push_config_bodies_name_the_field(body, field):
    with pytest.raises(m.A2AError) as info:
        rest03.push_config_in(body, "t1")
    assert info.value.code == m.INVALID_PARAMS
    assert info.value.fields[0][0] == field and info.value.message.startswith(f"{field}: ")


def test_10_push_configs_and_cards_become_03_shapes():
    flat = {
        "taskId": "t1",
        "id": "c1",
        "url": HOOK,
        "token": "tok",
        "authentication": {"scheme": "Bearer", "credentials": "sec"},
    }
    expected = {
        "name": "tasks/t1/pushNotificationConfigs/c1",
        "pushNotificationConfig": {
            "id": "c1",
            "url": HOOK,
            "token": "tok",
            "authentication": {"schemes": ["Bearer"]},  # the credentials are never echoed
        },
    }
    # (the 0.3 list and delete answers: test_v1_push_configs_set_get_list_delete_in_03_shapes)
    assert m.push_config_from_json(flat).to_json(m.REST03) == expected
    _strict_03(expected, "TaskPushNotificationConfig")
    card = {
        "name": "a",
        "description": "d",
        "supportedInterfaces": [
            {"url": "http://h/a/jsonrpc", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
            {"url": "http://h/a/rest", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"},
            {"url": "http://h/a/jsonrpc", "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
        ],
        "version": "1",
        "capabilities": {"streaming": True, "pushNotifications": False, "extendedAgentCard": True},
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"],
        "skills": [
            {
                "id": "s",
                "name": "S",
                "description": "sd",
                "tags": ["t"],
                "securityRequirements": [{"schemes": {"b": {"list": []}}}],
            }
        ],
        "securitySchemes": {"b": {"httpAuthSecurityScheme": {"scheme": "Bearer"}}},
        "securityRequirements": [{"schemes": {"b": {"list": []}}}],
        "preferredTransport": "JSONRPC",
        "protocolVersion": "0.3",
        "url": "http://h/a/jsonrpc",
    }
    out = rest03.card_out(card)
    assert out["additionalInterfaces"] == [
        {"url": "http://h/a/rest", "transport": "HTTP+JSON"},
        {"url": "http://h/a/jsonrpc", "transport": "JSONRPC"},
    ]
    assert out["capabilities"] == {"streaming": True, "pushNotifications": False}
    assert out["supportsAuthenticatedExtendedCard"] is True
    assert (
        out["security"] == card["securityRequirements"]
        and out["skills"][0]["security"] == card["securityRequirements"]
    )
    assert not {"supportedInterfaces", "securityRequirements"} & set(out)
    _strict_03(out, "AgentCard")


@pytest.fixture
async def push_http(tmp_path):
    from a2a_helpers import make_config, serve

    config = make_config(tmp_path, a2a={"push_notifications": True, "push_allow_private": True})
    async with (
        serve(config) as (kernel, url),
        httpx.AsyncClient(base_url=url, timeout=10) as client,
    ):
        yield client, url


async def test_v1_push_configs_set_get_list_delete_in_03_shapes(push_http):
    http, _ = push_http
    tid = (await http.post(V1_SEND, json=_message({"text": "hook me"}))).json()["task"]["id"]
    base = f"/a2a/agents/echo/rest/v1/tasks/{tid}/pushNotificationConfigs"
    name = f"tasks/{tid}/pushNotificationConfigs/c1"
    inner = {
        "id": "c1",
        "url": HOOK,
        "token": "tok",
        "authentication": {"schemes": ["Bearer"], "credentials": "sec"},
    }
    created = await http.post(
        base,
        json={
            "parent": f"tasks/{tid}",
            "configId": "c1",
            "config": {"name": name, "pushNotificationConfig": inner},
        },
    )
    got = await http.get(f"{base}/c1")
    listed = await http.get(base)
    deleted = await http.delete(f"{base}/c1")
    after = await http.get(base)
    missing = await http.get(f"{base}/c1")
    assert created.status_code == 200, created.text
    assert created.headers["content-type"].startswith("application/json")
    # Answered without the webhook's credentials (a secret: kept to send, never echoed).
    shown = {**inner, "authentication": {"schemes": ["Bearer"]}}
    assert created.json() == got.json() == {"name": name, "pushNotificationConfig": shown}
    assert listed.json() == {"configs": [{"name": name, "pushNotificationConfig": shown}]}
    _strict_03(listed.json(), "ListTaskPushNotificationConfigResponse")
    assert deleted.status_code == 200 and deleted.json() == {}
    assert after.json() == {"configs": []}
    assert missing.status_code == 404


async def test_v1_push_config_body_without_config_is_a_clear_400(push_http):
    http, _ = push_http
    tid = (await http.post(V1_SEND, json=_message({"text": "hook me"}))).json()["task"]["id"]
    base = f"/a2a/agents/echo/rest/v1/tasks/{tid}/pushNotificationConfigs"
    r = await http.post(base, json={"parent": f"tasks/{tid}", "configId": "c1"})
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["status"] == "INVALID_ARGUMENT" and error["message"].startswith(
        "config: is required"
    )
    assert error["details"][0]["metadata"]["errors"][0]["field"] == "config"
    r = await http.post(base, json={"config": {"pushNotificationConfig": {"token": "t"}}})
    assert (
        r.status_code == 400 and "config.pushNotificationConfig.url" in r.json()["error"]["message"]
    )


async def test_v1_card_is_the_03_extended_card_behind_the_api_key(tmp_path):
    from a2a_helpers import make_config, serve

    config = make_config(tmp_path, a2a={"api_key": AUTH["Authorization"][7:]})
    async with serve(config) as (kernel, url), httpx.AsyncClient(base_url=url, timeout=10) as http:
        refused = await http.get("/a2a/agents/echo/rest/v1/card")
        r = await http.get("/a2a/agents/echo/rest/v1/card", headers=AUTH)
        root = await http.get("/a2a/rest/v1/card", headers=AUTH)
    assert refused.status_code == 401
    assert r.status_code == 200, r.text
    card = r.json()
    root_url = f"{url}/a2a/agents/echo"
    at_root = root.json()  # the primary agent's card, naming the root endpoints
    assert {k: v for k, v in at_root.items() if k not in ("url", "additionalInterfaces")} == {
        k: v for k, v in card.items() if k not in ("url", "additionalInterfaces")
    }
    assert at_root["url"] == f"{url}/a2a/jsonrpc"
    assert set(card) == {
        "protocolVersion", "name", "description", "url", "preferredTransport",
        "additionalInterfaces", "provider", "version", "capabilities", "securitySchemes",
        "security", "defaultInputModes", "defaultOutputModes",
        "skills", "supportsAuthenticatedExtendedCard",
    }  # fmt: skip
    assert card["name"] == "echo" and card["description"].endswith("(extended card)")
    assert (card["url"], card["preferredTransport"], card["protocolVersion"]) == (
        f"{root_url}/jsonrpc",
        "JSONRPC",
        "0.3",
    )
    assert card["additionalInterfaces"] == [
        {"url": f"{root_url}/rest", "transport": "HTTP+JSON"},
        {"url": f"{root_url}/jsonrpc", "transport": "JSONRPC"},
    ]
    assert card["capabilities"] == {"streaming": True, "pushNotifications": False}
    assert card["supportsAuthenticatedExtendedCard"] is True
    assert card["securitySchemes"] == {"bearer": {"httpAuthSecurityScheme": {"scheme": "Bearer"}}}
    assert card["security"] == [{"schemes": {"bearer": {"list": []}}}]
    assert card["skills"][0] == {
        "id": "echo",
        "name": "Echo",
        "description": "Echoes text",
        "tags": ["echo"],
        "examples": ["hi"],
    }
    _strict_03(card, "AgentCard")


async def test_v1_card_without_api_key_is_unsupported(http):
    r = await http.get("/a2a/agents/echo/rest/v1/card")
    assert r.status_code == 400 and "api_key" in r.json()["error"]["message"]


async def test_sdk_03_rest_client_sets_and_gets_push_configs_and_reads_the_card(tmp_path):
    """The a2a-sdk's 0.3 REST transport (CompatRestTransport; its list and delete raise
    NotImplementedError in the SDK, so they are covered by the raw-HTTP test above)."""
    from a2a.compat.v0_3.rest_transport import CompatRestTransport
    from a2a.types import GetExtendedAgentCardRequest, GetTaskPushNotificationConfigRequest, a2a_pb2
    from a2a_helpers import make_config, serve

    config = make_config(
        tmp_path,
        a2a={
            "push_notifications": True,
            "push_allow_private": True,
            "api_key": AUTH["Authorization"][7:],
        },
    )
    async with serve(config) as (kernel, url), httpx.AsyncClient(timeout=10, headers=AUTH) as raw:
        tid = (await raw.post(url + V1_SEND, json=_message({"text": "hook me"}))).json()["task"][
            "id"
        ]
        transport = CompatRestTransport(
            raw, None, f"{url}/a2a/agents/echo/rest", is_shared_httpx=True
        )
        wanted = a2a_pb2.TaskPushNotificationConfig(
            task_id=tid,
            id="c1",
            url=HOOK,
            token="tok",
            authentication=a2a_pb2.AuthenticationInfo(scheme="Bearer", credentials="sec"),
        )
        created = await transport.create_task_push_notification_config(wanted)
        got = await transport.get_task_push_notification_config(
            GetTaskPushNotificationConfigRequest(task_id=tid, id="c1")
        )
        card = await transport.get_extended_agent_card(GetExtendedAgentCardRequest())
        stored = (
            await raw.get(f"{url}/a2a/agents/echo/rest/v1/tasks/{tid}/pushNotificationConfigs")
        ).json()
    for config in (created, got):
        assert (config.task_id, config.id, config.url, config.token) == (tid, "c1", HOOK, "tok")
        # The scheme comes back, the credentials (a secret) never do.
        assert (config.authentication.scheme, config.authentication.credentials) == ("Bearer", "")
    assert [c["pushNotificationConfig"]["id"] for c in stored["configs"]] == ["c1"]
    assert card.name == "echo" and card.description.endswith("(extended card)")
    assert card.capabilities.push_notifications and card.capabilities.extended_agent_card
    assert {(i.protocol_binding, i.url) for i in card.supported_interfaces} >= {
        ("HTTP+JSON", f"{url}/a2a/agents/echo/rest")
    }


# ---- proto field names: proto JSON parsers accept a field by its JSON name or its proto name,
# and the a2a-sdk's 0.3 REST client (CompatRestTransport) writes the proto names
# ({"request": {"message_id", "content": [...]},
#   "configuration": {"accepted_output_modes", ...}}) --


def _sdk_user_message(text, **kw):
    from a2a.types import Message, Part, Role

    return Message(message_id=f"m-{text[:10]}", role=Role.ROLE_USER, parts=[Part(text=text)], **kw)


async def _sdk_03_send_body(request):
    """The body the SDK's 0.3 REST client posts for ``request`` to ``message:send``, caught
    on the wire (the SDK builds it: ``MessageToDict(..., preserving_proto_field_name=True)``)."""
    from a2a.compat.v0_3.rest_transport import CompatRestTransport

    sent = []

    def handler(request):
        sent.append(json.loads(request.content))
        return httpx.Response(
            200,
            json={"message": {"messageId": "a", "role": "ROLE_AGENT", "content": [{"text": "ok"}]}},
        )

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as raw:
        await CompatRestTransport(
            raw, None, "http://agent/rest", is_shared_httpx=True
        ).send_message(request)
    return sent[0]


async def test_the_sdk_03_rest_clients_send_body_reads_like_its_json_name_twin():
    from a2a.types import Part, SendMessageRequest, a2a_pb2

    message = _sdk_user_message("hi", context_id="c1", task_id="t1", extensions=["urn:x"])
    message.parts.append(
        Part(url="https://example.com/a.pdf", media_type="application/pdf", filename="a.pdf")
    )
    message.parts.append(Part())
    message.parts[-1].data.struct_value.update({"rows": [1, 2]})
    message.metadata.update({"k": "v"})
    push = a2a_pb2.TaskPushNotificationConfig(
        id="p1",
        url=HOOK,
        token="tok",
        authentication=a2a_pb2.AuthenticationInfo(scheme="Bearer", credentials="sec"),
    )
    config = a2a_pb2.SendMessageConfiguration(
        accepted_output_modes=["text/plain"], history_length=3, task_push_notification_config=push
    )
    body = await _sdk_03_send_body(SendMessageRequest(message=message, configuration=config))
    assert body == {
        "request": {
            "message_id": "m-hi",
            "context_id": "c1",
            "task_id": "t1",
            "role": "ROLE_USER",
            "content": [
                {"text": "hi"},
                {
                    "file": {
                        "file_with_uri": "https://example.com/a.pdf",
                        "mime_type": "application/pdf",
                        "name": "a.pdf",
                    }
                },
                {"data": {"data": {"rows": [1.0, 2.0]}}},
            ],
            "metadata": {"k": "v"},
            "extensions": ["urn:x"],
        },
        "configuration": {
            "accepted_output_modes": ["text/plain"],
            "push_notification": {
                "id": "p1",
                "url": HOOK,
                "token": "tok",
                "authentication": {"schemes": ["Bearer"], "credentials": "sec"},
            },
            "history_length": 3,
            "blocking": True,
        },
    }
    twin = {
        "message": {
            "messageId": "m-hi",
            "contextId": "c1",
            "taskId": "t1",
            "role": "ROLE_USER",
            "content": [
                {"text": "hi"},
                {
                    "file": {
                        "fileWithUri": "https://example.com/a.pdf",
                        "mimeType": "application/pdf",
                        "name": "a.pdf",
                    }
                },
                {"data": {"data": {"rows": [1.0, 2.0]}}},
            ],
            "metadata": {"k": "v"},
            "extensions": ["urn:x"],
        },
        "configuration": {
            "acceptedOutputModes": ["text/plain"],
            "pushNotification": {
                "id": "p1",
                "url": HOOK,
                "token": "tok",
                "authentication": {"schemes": ["Bearer"], "credentials": "sec"},
            },
            "historyLength": 3,
            "blocking": True,
        },
    }
    params = rest03.parse_send("send", body)
    assert params == rest03.parse_send("send", twin)
    assert (params.message.message_id, params.message.context_id, params.message.task_id) == (
        "m-hi",
        "c1",
        "t1",
    )
    assert [p.text for p in params.message.parts[:1]] == ["hi"]
    assert (params.message.parts[1].url, params.message.parts[1].media_type,
            params.message.parts[1].filename) == (
        "https://example.com/a.pdf", "application/pdf", "a.pdf",
    )  # fmt: skip
    assert params.message.parts[2].data == {"rows": [1.0, 2.0]}
    options = params.options
    assert (options.history_length, options.accepted_output_modes, options.return_immediately) == (
        3,
        ("text/plain",),
        False,
    )
    assert (
        options.push.id,
        options.push.url,
        options.push.auth_scheme,
        options.push.credentials,
    ) == ("p1", HOOK, "Bearer", "sec")
    raw = base64.b64encode(b"\x00\x01").decode()
    file_part = {
        "file": {"file_with_bytes": raw, "mime_type": "application/octet-stream", "name": "a.bin"}
    }
    read = rest03.parse_send(
        "send", {"request": {"message_id": "x", "role": "ROLE_USER", "content": [file_part]}}
    )
    assert (read.message.parts[0].raw, read.message.parts[0].filename) == (b"\x00\x01", "a.bin")


_OK = {"message_id": "x", "role": "ROLE_USER", "content": [{"text": "a"}]}


@pytest.mark.parametrize(
    "body,field",
    [
        (
            {"request": {**_OK, "content": [{"file": {"file_with_bytes": "%%% not base64"}}]}},
            "request.content[0].file.file_with_bytes",
        ),
        (
            {"request": {**_OK, "content": [{"file": {"file_with_uri": 7}}]}},
            "request.content[0].file.file_with_uri",
        ),
        (
            {
                "request": {
                    **_OK,
                    "content": [{"file": {"file_with_uri": "https://e.com/a", "mime_type": 1}}],
                }
            },
            "request.content[0].file.mime_type",
        ),
        (
            {"request": {**_OK, "content": [{"file": {"mime_type": "text/plain"}}]}},
            "request.content[0].file",
        ),
        (
            {"request": {**_OK, "content": [{"text": "a", "data": {"data": {}}}]}},
            "request.content[0]",
        ),
        ({"request": {**_OK, "content": [{}]}}, "request.content[0]"),
        ({"request": {**_OK, "content": []}}, "request.content"),
        ({"request": {"role": "ROLE_USER", "content": [{"text": "a"}]}}, "request.message_id"),
        ({"request": {**_OK, "message_id": 5}}, "request.message_id"),
        ({"request": {**_OK, "context_id": ["c"]}}, "request.context_id"),
        ({"request": {**_OK, "role": "ROLE_AGENT"}}, "request.role"),
        ({"request": {**_OK, "messageId": "y"}}, "request.message_id"),  # both spellings at once
        ({"request": _OK, "message": _OK}, "request"),
        ({"request": "hi"}, "request"),
        ({"configuration": {}}, "message"),
        ({"request": _OK, "configuration": {"history_length": -1}}, "configuration.history_length"),
        (
            {"request": _OK, "configuration": {"accepted_output_modes": "text/plain"}},
            "configuration.accepted_output_modes",
        ),
        (
            {"request": _OK, "configuration": {"push_notification": {"token": "t"}}},
            "configuration.push_notification.url",
        ),
        (
            {"request": _OK, "configuration": {"push_notification": "x"}},
            "configuration.push_notification",
        ),
        ({"request": _OK, "configuration": {"blocking": "yes"}}, "configuration.blocking"),
    ],
)
def test_bad_03_send_bodies_name_the_field_as_written(body, field):
    with pytest.raises(m.A2AError) as info:
        rest03.parse_send("send", body)
    assert info.value.code == m.INVALID_PARAMS
    assert info.value.fields[0][0] == field
    assert f"{field}: " in info.value.message


async def test_v1_message_send_reads_proto_field_names(http):
    body = {
        "request": {
            "message_id": "snake-1",
            "role": "ROLE_USER",
            "content": [
                {"text": "snake case"},
                {
                    "file": {
                        "file_with_uri": "https://example.com/a.pdf",
                        "mime_type": "application/pdf",
                        "name": "a.pdf",
                    }
                },
                {"data": {"data": {"n": 1}}},
            ],
        },
        "configuration": {
            "accepted_output_modes": ["text/plain"],
            "history_length": 1,
            "blocking": True,
        },
    }
    r = await http.post(V1_SEND, json=body)
    assert r.status_code == 200, r.text
    task = r.json()["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert task["artifacts"][0]["parts"][0]["text"].startswith("echo: snake case")
    full = (await http.get(f"/a2a/agents/echo/rest/v1/tasks/{task['id']}")).json()
    assert full["history"][0]["messageId"] == "snake-1"
    assert full["history"][0]["content"] == [
        {"text": "snake case"},
        {
            "file": {
                "fileWithUri": "https://example.com/a.pdf",
                "mimeType": "application/pdf",
                "name": "a.pdf",
            }
        },
        {"data": {"data": {"n": 1}}},
    ]


async def test_v1_bad_proto_field_name_body_gets_a_clear_error(http):
    bad = {
        "request": {
            "message_id": "x",
            "role": "ROLE_USER",
            "content": [{"file": {"file_with_bytes": "%%% not base64", "name": "a"}}],
        }
    }
    r = await http.post(V1_SEND, json=bad)
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["status"] == "INVALID_ARGUMENT"
    assert (
        error["message"]
        == "Validation failed: request.content[0].file.file_with_bytes: is not valid base64"
    )
    assert error["details"][0]["metadata"]["errors"] == [
        {"field": "request.content[0].file.file_with_bytes", "message": "is not valid base64"}
    ]
    r = await http.post(
        "/a2a/agents/echo/rest/v1/message:stream",
        json={"request": {"role": "ROLE_USER", "content": [{"text": "a"}]}},
    )
    assert (
        r.status_code == 400
        and r.json()["error"]["message"]
        == "Validation failed: request.message_id: Field is required."
    )


def _compat_rest(raw, url, agent):
    from a2a.compat.v0_3.rest_transport import CompatRestTransport

    return CompatRestTransport(raw, None, f"{url}/a2a/agents/{agent}/rest", is_shared_httpx=True)


async def test_sdk_03_rest_client_sends_streams_and_gets(daemon):
    """The a2a-sdk's 0.3 REST transport: message:send (blocking), message:stream, tasks/{id}."""
    from a2a.types import GetTaskRequest, SendMessageRequest, a2a_pb2

    _, url = daemon
    async with httpx.AsyncClient(timeout=10) as raw:
        transport = _compat_rest(raw, url, "echo")
        with trio.fail_after(20):
            sent = await transport.send_message(
                SendMessageRequest(message=_sdk_user_message("hello 0.3 rest"))
            )
            got = await transport.get_task(GetTaskRequest(id=sent.task.id))
            events = [
                e
                async for e in transport.send_message_streaming(
                    SendMessageRequest(message=_sdk_user_message("stream 0.3 rest"))
                )
            ]
    assert sent.WhichOneof("payload") == "task"
    task = sent.task
    assert task.status.state == a2a_pb2.TASK_STATE_COMPLETED
    assert task.artifacts[0].parts[0].text == "echo: hello 0.3 rest"
    assert (
        task.history[0].parts[0].text == "hello 0.3 rest"
        and task.history[0].message_id == "m-hello 0.3 "
    )
    assert (got.id, got.context_id, got.status.state) == (
        task.id,
        task.context_id,
        a2a_pb2.TASK_STATE_COMPLETED,
    )
    assert got.artifacts[0].parts[0].text == "echo: hello 0.3 rest"
    kinds = [e.WhichOneof("payload") for e in events]
    assert kinds[0] == "task" and "artifact_update" in kinds and kinds[-1] == "status_update"
    assert events[0].task.history[0].parts[0].text == "stream 0.3 rest"
    artifact = next(
        e.artifact_update for e in events if e.WhichOneof("payload") == "artifact_update"
    )
    assert (
        artifact.task_id == events[0].task.id
        and artifact.artifact.parts[0].text == "echo: stream 0.3 rest"
    )
    assert events[-1].status_update.status.state == a2a_pb2.TASK_STATE_COMPLETED


async def test_sdk_03_rest_client_subscribes_and_cancels(daemon):
    """The a2a-sdk's 0.3 REST transport: message:stream to an agent that works for 30 s,
    tasks/{id}:subscribe beside it, tasks/{id}:cancel (the agent's tool call is cancelled).
    (Streaming, not a non-blocking send: that client sends ``"configuration": {}`` both for a
    default send and for ``return_immediately``, and roost reads it as the default, blocking.)"""
    from a2a.types import CancelTaskRequest, SendMessageRequest, SubscribeToTaskRequest, a2a_pb2
    from a2a_helpers import SLEEP_CANCELLED

    _, url = daemon
    streamed, seen = [], []
    async with httpx.AsyncClient(timeout=10) as raw:
        transport = _compat_rest(raw, url, "slow")

        async def stream():
            async for event in transport.send_message_streaming(
                SendMessageRequest(message=_sdk_user_message("take your time"))
            ):
                streamed.append(event)

        async def follow(task_id):
            async for event in transport.subscribe(SubscribeToTaskRequest(id=task_id)):
                seen.append(event)

        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(stream)
                await wait_until(lambda: streamed, "the first streamed event")
                task = streamed[0].task
                assert task.status.state in (
                    a2a_pb2.TASK_STATE_SUBMITTED,
                    a2a_pb2.TASK_STATE_WORKING,
                )
                nursery.start_soon(follow, task.id)
                await wait_until(lambda: seen, "the subscription's first event")
                before = len(SLEEP_CANCELLED)

                async def cancel():
                    canceled = await transport.cancel_task(CancelTaskRequest(id=task.id))
                    return (
                        canceled if canceled.status.state == a2a_pb2.TASK_STATE_CANCELED else None
                    )

                canceled = await wait_until(cancel, "the task canceled")
    assert canceled.id == task.id and canceled.status.state == a2a_pb2.TASK_STATE_CANCELED
    assert len(SLEEP_CANCELLED) > before, "the agent's tool call was not cancelled"
    assert seen[0].WhichOneof("payload") == "task" and seen[0].task.id == task.id
    for events in (streamed, seen):
        assert events[-1].status_update.task_id == task.id
        assert events[-1].status_update.status.state == a2a_pb2.TASK_STATE_CANCELED


async def test_a_task_sent_over_the_03_paths_is_stored_in_the_10_dialect(daemon):
    """The /v1/ paths render 1.0 tasks in 0.3 proto JSON; the task itself is a 1.0 task,
    and its stored ``dialect`` (which webhooks' shape follows, and which daemons of earlier
    versions read from the same a2a.db) says so, never the rendering's name."""
    from roost.plugins.a2a._server import service_for

    kernel, url = daemon
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        sent = await http.post(V1_SEND, json=_message({"text": "kept"}))
        assert sent.status_code == 200, sent.text
        async with http.stream(
            "POST", "/a2a/agents/echo/rest/v1/message:stream", json=_message({"text": "s"})
        ) as r:
            first = await anext(line async for line in r.aiter_lines() if line.startswith("data"))
    store = service_for(kernel).tasks.store
    for task_id in (sent.json()["task"]["id"], json.loads(first[6:])["task"]["id"]):
        row = await wait_until(lambda t=task_id: store.get(t), "the task's row")
        assert row.data["dialect"] == m.V1
