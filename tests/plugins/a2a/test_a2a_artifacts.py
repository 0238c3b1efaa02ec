"""Outputs as artifacts: an agent hands over a workspace file, JSON data and a link (the
``artifact`` tool) and every A2A shape carries them as file, data and url parts — also to
the official a2a-sdk client, and across a daemon restart."""

from __future__ import annotations

import base64
import json

import httpx
import pytest
import trio
from a2a.client import ClientConfig, ClientFactory
from a2a.client.card_resolver import A2ACardResolver
from a2a.types import Message, Part, Role, SendMessageRequest, a2a_pb2
from a2a_helpers import REPORT_CSV, serve
from waiting import wait_until

V1 = {"A2A-Version": "1.0"}
REPORT_B64 = base64.b64encode(REPORT_CSV.encode()).decode()
PATH = "/a2a/agents/maker/jsonrpc"


@pytest.fixture
async def http(daemon):
    kernel, url = daemon
    async with httpx.AsyncClient(base_url=url, timeout=10) as client:
        yield client


async def _send_v1(http, text="q3 numbers"):
    message = {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": text}]}
    r = await http.post(
        PATH,
        json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}},
        headers=V1,
    )
    assert r.status_code == 200, r.text
    return r.json()["result"]["task"]


def _check_v1_artifacts(artifacts):
    by_name = {a["name"]: a for a in artifacts}
    assert [a["name"] for a in artifacts] == ["response", "report", "summary", "source"]
    assert by_name["response"]["parts"] == [{"text": "made q3 numbers"}]
    assert by_name["report"]["description"] == "the numbers"
    assert by_name["report"]["parts"] == [
        {"raw": REPORT_B64, "filename": "report.csv", "mediaType": "text/csv"}
    ]
    assert by_name["summary"]["parts"] == [{"data": {"topic": "q3 numbers", "rows": 1}}]
    assert by_name["source"]["parts"] == [
        {
            "url": "https://example.com/data/report.pdf",
            "filename": "report.pdf",
            "mediaType": "application/pdf",
        }
    ]
    assert len({a["artifactId"] for a in artifacts}) == 4


async def test_v1_send_message_carries_file_data_and_url_artifacts(http):
    task = await _send_v1(http)
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    _check_v1_artifacts(task["artifacts"])
    r = await http.post(
        PATH,
        json={"jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": {"id": task["id"]}},
        headers=V1,
    )
    _check_v1_artifacts(r.json()["result"]["artifacts"])


async def test_v03_shapes_of_the_artifacts(http):
    message = {
        "messageId": "m-1",
        "role": "user",
        "kind": "message",
        "parts": [{"kind": "text", "text": "q3 numbers"}],
    }
    r = await http.post(
        PATH,
        json={"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": message}},
    )
    task = r.json()["result"]
    assert task["kind"] == "task" and task["status"]["state"] == "completed"
    parts = {a["name"]: a["parts"] for a in task["artifacts"]}
    assert parts["report"] == [
        {
            "kind": "file",
            "file": {"bytes": REPORT_B64, "mimeType": "text/csv", "name": "report.csv"},
        }
    ]
    assert parts["summary"] == [{"kind": "data", "data": {"topic": "q3 numbers", "rows": 1}}]
    assert parts["source"] == [
        {
            "kind": "file",
            "file": {
                "uri": "https://example.com/data/report.pdf",
                "mimeType": "application/pdf",
                "name": "report.pdf",
            },
        }
    ]


async def test_v03_rest_shapes_of_the_artifacts(http):
    body = {
        "message": {"messageId": "m-1", "role": "ROLE_USER", "content": [{"text": "q3 numbers"}]}
    }
    r = await http.post("/a2a/agents/maker/rest/v1/message:send", json=body)
    assert r.status_code == 200, r.text
    parts = {a["name"]: a["parts"] for a in r.json()["task"]["artifacts"]}
    assert parts["report"] == [
        {"file": {"fileWithBytes": REPORT_B64, "mimeType": "text/csv", "name": "report.csv"}}
    ]
    assert parts["summary"] == [{"data": {"data": {"topic": "q3 numbers", "rows": 1}}}]
    assert parts["source"][0]["file"]["fileWithUri"] == "https://example.com/data/report.pdf"


async def test_streaming_announces_each_artifact(http):
    message = {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "q3 numbers"}]}
    payload = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendStreamingMessage",
        "params": {"message": message},
    }
    events = []
    async with http.stream(
        "POST", PATH, json=payload, headers={**V1, "Accept": "text/event-stream"}
    ) as r:
        async for line in r.aiter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[6:])["result"])
    updates = [e["artifactUpdate"]["artifact"] for e in events if "artifactUpdate" in e]
    _check_v1_artifacts(updates)
    assert events[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"


async def test_the_sdk_client_reads_file_data_and_url_parts(daemon):
    kernel, url = daemon
    async with httpx.AsyncClient(timeout=10) as http:
        card = await A2ACardResolver(http, f"{url}/a2a/agents/maker").get_agent_card()
    client = ClientFactory(
        ClientConfig(streaming=False, supported_protocol_bindings=["JSONRPC"])
    ).create(card)
    try:
        with trio.fail_after(20):
            request = SendMessageRequest(
                message=Message(
                    message_id="m-1", role=Role.ROLE_USER, parts=[Part(text="q3 numbers")]
                )
            )
            events = [e async for e in client.send_message(request)]
    finally:
        await client.close()
    task = events[0].task
    assert task.status.state == a2a_pb2.TASK_STATE_COMPLETED
    by_name = {a.name: a for a in task.artifacts}
    report = by_name["report"].parts[0]
    assert (
        report.raw == REPORT_CSV.encode()
        and report.media_type == "text/csv"
        and report.filename == "report.csv"
    )
    summary = by_name["summary"].parts[0]
    assert summary.WhichOneof("content") == "data"
    assert summary.data.struct_value["topic"] == "q3 numbers"
    assert by_name["source"].parts[0].url == "https://example.com/data/report.pdf"


async def test_artifacts_survive_a_daemon_restart(config):
    async with serve(config) as (kernel, url):
        async with httpx.AsyncClient(base_url=url, timeout=10) as http:
            task = await _send_v1(http)
    async with serve(config) as (kernel, url):
        async with httpx.AsyncClient(base_url=url, timeout=10) as http:
            r = await http.post(
                PATH,
                json={"jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": {"id": task["id"]}},
                headers=V1,
            )
    _check_v1_artifacts(r.json()["result"]["artifacts"])


async def test_the_readable_outcome_counts_a_files_bytes_instead_of_printing_them(http):
    from roost.plugins.a2a._client import task_text
    from roost.plugins.a2a._models import task_from_json

    task = task_from_json(await _send_v1(http))
    assert task_text(task).splitlines() == [
        "made q3 numbers",
        f"[file report.csv (text/csv, {len(REPORT_CSV)} bytes)]",
        "```json",
        "{",
        '  "topic": "q3 numbers",',
        '  "rows": 1',
        "}",
        "```",
        "[file report.pdf (application/pdf)] https://example.com/data/report.pdf",
    ]


def test_data_that_is_not_an_object_is_wrapped_for_03_and_01_whose_data_parts_are_objects():
    from roost.plugins.a2a import _models as m

    part = m.Part(data=[1, 2, 3], has_data=True)
    assert part.to_json(m.V1) == {"data": [1, 2, 3]}
    assert part.to_json(m.V03) == {"kind": "data", "data": {"value": [1, 2, 3]}}
    assert part.to_json(m.V01) == {"type": "data", "data": {"value": [1, 2, 3]}}
    assert m.Part(data={"a": 1}, has_data=True).to_json(m.V03) == {"kind": "data", "data": {"a": 1}}
    task = m.Task("t", "c", m.TaskStatus(m.COMPLETED), (m.Artifact("a", (part,)),))
    out = task.to_json(m.REST03)
    assert out["artifacts"][0]["parts"] == [{"data": {"data": {"value": [1, 2, 3]}}}]


async def test_an_external_a2a_agents_files_reach_the_asking_run(config, tmp_path):
    # Regression: only the text of a remote task reached the asking agent; its files were
    # counted in the text and then dropped.
    from a2a_helpers import write_agent
    from roost.kernel import default_config, open_kernel

    async with serve(config) as (_, url):
        agents = tmp_path / "asking-agents"
        rule = {
            "match": ".",
            "steps": [{"tool": "a2a_maker", "arguments": {"message": "{message}"}}],
            "reply": "remote: {result}",
        }
        write_agent(agents, "delegator", [rule], tools=["a2a_*"])
        local = default_config(
            home=str(tmp_path / "home2"),
            agents={"dirs": [str(agents)], "bundled": False},
            a2a={"external_agents": [{"name": "maker", "url": f"{url}/a2a/agents/maker"}]},
        )
        async with open_kernel(local) as kernel:
            await wait_until(
                lambda: "a2a_maker" in kernel.registry, "the a2a_maker tool", timeout=15
            )
            reply = await kernel.send("delegator", "q3 numbers")
    assert reply.text.startswith("remote: made q3 numbers")
    by_name = {o.name: o for o in reply.outputs}
    assert sorted(by_name) == [
        "report",
        "source",
        "summary",
    ]  # the text answer is the result, not an artifact
    assert (
        by_name["report"].parts[0].raw == REPORT_CSV.encode()
        and by_name["report"].parts[0].media_type == "text/csv"
    )
    assert by_name["summary"].parts[0].data == {"topic": "q3 numbers", "rows": 1}
    assert by_name["source"].parts[0].url == "https://example.com/data/report.pdf"


async def test_cards_say_which_agents_may_answer_with_data_and_files(http):
    maker = (await http.get("/a2a/agents/maker/.well-known/agent-card.json")).json()
    echo = (await http.get("/a2a/agents/echo/.well-known/agent-card.json")).json()
    assert maker["defaultOutputModes"] == [
        "text/plain",
        "application/json",
        "application/octet-stream",
    ]
    assert echo["defaultOutputModes"] == ["text/plain"]


@pytest.mark.parametrize(
    "modes, names",
    [
        (["text/plain"], ["response"]),
        (["text/plain", "text/csv"], ["response", "report"]),
        (["text/plain", "application/json"], ["response", "summary"]),
        (["text/*", "application/*"], ["response", "report", "summary", "source"]),
        (["*/*"], ["response", "report", "summary", "source"]),
    ],
)
async def test_accepted_output_modes_leave_out_what_the_client_cannot_take(http, modes, names):
    message = {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "q3 numbers"}]}
    params = {"message": message, "configuration": {"acceptedOutputModes": modes}}
    r = await http.post(
        PATH,
        json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params},
        headers=V1,
    )
    task = r.json()["result"]["task"]
    assert [a["name"] for a in task["artifacts"]] == names


async def test_v03_rest_get_task_reads_history_length_in_either_spelling(http):
    body = {
        "message": {"messageId": "m-1", "role": "ROLE_USER", "content": [{"text": "q3 numbers"}]}
    }
    task = (await http.post("/a2a/agents/maker/rest/v1/message:send", json=body)).json()["task"]
    assert (await http.get(f"/a2a/agents/maker/rest/v1/tasks/{task['id']}")).json()["history"]
    for key in ("historyLength", "history_length"):
        got = (await http.get(f"/a2a/agents/maker/rest/v1/tasks/{task['id']}?{key}=0")).json()
        assert "history" not in got or got["history"] == [], key


@pytest.mark.parametrize(
    "modes, ok",
    [
        (["text/plain; charset=utf-8"], True),
        (["application/*"], True),
        (["*"], True),
        (["data"], True),
        (["TEXT/*"], True),
        (["image/png"], False),
        (["application/pdf", "image/*"], False),
    ],
)
async def test_the_up_front_check_and_the_filter_read_modes_alike(http, modes, ok):
    # Regression: the up-front -32005 check compared exact lower-cased strings, while the
    # artifact filter understood wildcards, parameters and the 0.1 names.
    message = {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "q3 numbers"}]}
    params = {"message": message, "configuration": {"acceptedOutputModes": modes}}
    body = (
        await http.post(
            PATH,
            json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params},
            headers=V1,
        )
    ).json()
    assert ("result" in body) is ok and (ok or body["error"]["code"] == -32005), body


def test_an_agent_artifact_named_response_is_filtered_like_any_other():
    from roost.plugins.a2a import _models as m
    from roost.plugins.a2a._tasks import _accepted

    answer = m.Artifact("a1", (m.Part(text="the answer"),), name="response")
    handed = m.Artifact("a2", (m.Part(raw=b"png", media_type="image/png"),), name="response")
    assert _accepted((answer, handed), ("text/plain",), keep=(answer,)) == (answer,)
