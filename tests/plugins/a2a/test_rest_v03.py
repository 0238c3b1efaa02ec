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
from roost.plugins.a2a import _models as m
from roost.plugins.a2a import _rest03 as rest03

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
                    {"file": {"fileWithBytes": raw, "mimeType": "application/octet-stream", "name": "a.bin"}},
                    {"file": {"fileWithUri": "https://example.com/a.pdf", "mimeType": "application/pdf"}},
                    {"data": {"data": {"k": [1, 2]}}},
                ],
            },
            "configuration": {"pushNotification": {"url": "https://example.com/hook"}},
        }
    )
    parts = [m.part_from_json(p) for p in body["message"]["parts"]]
    assert parts[0].text == "hi"
    assert parts[1].raw == b"\x00\x01binary" and parts[1].filename == "a.bin" and parts[1].media_type == "application/octet-stream"
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
        "status": {"state": m.CANCELED, "message": {"messageId": "s", "role": "ROLE_AGENT", "parts": [{"text": "stopped"}]}},
        "artifacts": [{"artifactId": "a", "parts": [{"raw": "AAE=", "filename": "f", "mediaType": "x/y"}, {"data": {"n": 1}}]}],
        "history": [{"messageId": "h", "role": "ROLE_USER", "parts": [{"url": "https://e.com/x"}]}],
    }
    out = rest03.result_out("get", task)
    assert out["status"]["state"] == "TASK_STATE_CANCELLED"
    assert out["status"]["message"]["content"] == [{"text": "stopped"}]
    assert out["artifacts"][0]["parts"] == [
        {"file": {"fileWithBytes": "AAE=", "mimeType": "x/y", "name": "f"}},
        {"data": {"data": {"n": 1}}},
    ]
    assert out["history"][0]["content"] == [{"file": {"fileWithUri": "https://e.com/x"}}]
    assert "parts" not in out["history"][0]
    working = rest03.event_out({"statusUpdate": {"taskId": "t", "contextId": "c", "status": {"state": m.WORKING}}})
    done = rest03.event_out({"statusUpdate": {"taskId": "t", "contextId": "c", "status": {"state": m.INPUT_REQUIRED}}})
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
    assert set(user) == set(expected["task"]["history"][0]) and user["content"] == [{"text": "rest v0.3"}]
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
    assert content[1] == {"file": {"fileWithBytes": raw, "mimeType": "application/pdf", "name": "doc.pdf"}}
    assert content[2] == {"data": {"data": {"rows": [1, 2, 3]}}}


async def test_v1_message_stream_sends_03_events_ending_with_a_final_update(http):
    async with http.stream("POST", "/a2a/agents/echo/rest/v1/message:stream", json=_message({"text": "stream me"})) as r:
        assert r.status_code == 200
        events = [json.loads(line[6:]) async for line in r.aiter_lines() if line.startswith("data: ")]
    assert next(iter(events[0])) == "task" and events[0]["task"]["history"][0]["content"] == [{"text": "stream me"}]
    updates = [e["statusUpdate"] for e in events if "statusUpdate" in e]
    assert updates[-1]["final"] is True and updates[-1]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert all(u["final"] is False for u in updates[:-1])
    artifacts = [e["artifactUpdate"] for e in events if "artifactUpdate" in e]
    assert artifacts and artifacts[0]["artifact"]["parts"][0]["text"] == "echo: stream me"


async def test_v1_bad_parts_get_a_clear_error(http):
    r = await http.post(V1_SEND, json=_message({"file": {"fileWithBytes": "%%% not base64"}}))
    assert r.status_code == 400
    assert "message.parts[0]" in r.text and "base64" in r.text.lower()
    r = await http.post(V1_SEND, json={"message": {"messageId": "x", "role": "ROLE_USER", "content": []}})
    assert r.status_code == 400 and "parts" in r.text


async def test_v1_cancel_of_a_finished_task_is_refused(http):
    task = (await http.post(V1_SEND, json=_message({"text": "done soon"}))).json()["task"]
    r = await http.post(f"/a2a/agents/echo/rest/v1/tasks/{task['id']}:cancel")
    assert r.status_code == 409 and "TASK_NOT_CANCELABLE" in r.text
