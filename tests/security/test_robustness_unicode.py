"""A lone surrogate never stops an agent (issue 15, item 9).

Regression: a lone surrogate (JSON "\\ud800", which Python decodes into one) in a message
raised UnicodeEncodeError in the store and crashed the agent's actor; four such requests in
a minute spent its restart budget and the agent stayed stopped while /api/agents said
"ready"; A2A answered 500. Each edge now refuses such text up front (it is rejected, not
replaced: replacing would silently change what the caller said, and an id changed that way
could name someone else's session or task) with a 400 / -32602 naming the field, and the
store refuses it with a StoreError, which fails only that request.
"""

from __future__ import annotations

import base64

import httpx
import pytest
from robustness_helpers import V1, a2a_send, make_config, mcp_call, mcp_headers, raw_json, serve
from roost.kernel import ActorStopped, StoreError, open_store

BAD = "x\ud800y"
FILE = base64.b64encode(b"hello").decode()

# (name, method, path, body, headers, field the error must name)
EDGE_CASES = [
    ("rest message", "/api/agents/echo/message", {"message": BAD}, {}, "message"),
    (
        "rest session id",
        "/api/agents/echo/message",
        {"message": "hi", "session_id": BAD},
        {},
        "session_id",
    ),
    (
        "mcp tools/call",
        "/mcp",
        mcp_call("agent_echo", {"message": BAD}),
        mcp_headers("agent_echo"),
        "params.arguments.message",
    ),
    (
        "mcp agent endpoint",
        "/agents/echo/mcp",
        mcp_call("message", {"message": BAD}),
        mcp_headers("message"),
        "params.arguments.message",
    ),
    (
        "a2a text part",
        "/a2a/agents/echo/jsonrpc",
        a2a_send({"text": BAD}),
        V1,
        "message.parts[0].text",
    ),
    (
        "a2a data part",
        "/a2a/agents/echo/jsonrpc",
        a2a_send({"data": {"k": [BAD]}}),
        V1,
        "message.parts[0].data.k[0]",
    ),
    (
        "a2a file name",
        "/a2a/agents/echo/jsonrpc",
        a2a_send({"raw": FILE, "filename": BAD}),
        V1,
        "message.parts[0].filename",
    ),
    (
        "a2a metadata",
        "/a2a/agents/echo/jsonrpc",
        a2a_send({"text": "hi"}, message_extra={"metadata": {"k": BAD}}),
        V1,
        "message.metadata.k",
    ),
    (
        "a2a context id",
        "/a2a/agents/echo/jsonrpc",
        a2a_send({"text": "hi"}, message_extra={"contextId": BAD}),
        V1,
        "message.contextId",
    ),
    (
        "a2a params metadata",
        "/a2a/agents/echo/jsonrpc",
        a2a_send({"text": "hi"}, params_extra={"metadata": {BAD: 1}}),
        V1,
        "metadata (a key)",
    ),
    (
        "a2a 0.3",
        "/a2a/agents/echo/jsonrpc",
        {**a2a_send({"kind": "text", "text": BAD}), "method": "message/send"},
        {},
        "message.parts[0].text",
    ),
    (
        "a2a rest binding",
        "/a2a/agents/echo/rest/message:send",
        a2a_send({"text": BAD})["params"],
        V1,
        "message.parts[0].text",
    ),
    (
        "a2a 0.1 tasks/send",
        "/a2a/tasks/send",
        {"id": "t-01", "message": {"role": "user", "parts": [{"type": "text", "text": BAD}]}},
        {},
        "message.parts[0].text",
    ),
]


def _field_named(response: httpx.Response, field: str) -> str:
    """The error message of a 4xx or JSON-RPC -32602 answer (asserting its shape)."""
    body = response.json()
    if "jsonrpc" in body:
        assert body["error"]["code"] == -32602, body
        return body["error"]["message"]
    assert 400 <= response.status_code < 500, (response.status_code, body)
    return body["error"]["message"]


async def test_a_lone_surrogate_is_refused_at_every_edge_naming_the_field_and_no_agent_stops(
    tmp_path,
):
    async with (
        serve(make_config(tmp_path)) as (kernel, url),
        httpx.AsyncClient(base_url=url, timeout=30) as http,
    ):
        for _ in range(5):  # more than the restart budget (3 in a minute), at every edge
            for name, path, body, headers, field in EDGE_CASES:
                response = await http.post(
                    path,
                    content=raw_json(body),
                    headers={"Content-Type": "application/json", **headers},
                )
                message = _field_named(response, field)
                assert message.startswith(f"{field}: contains a lone surrogate (U+D800)"), (
                    name,
                    message,
                )
                assert "send valid Unicode" in message, name
        agents = (await http.get("/api/agents")).json()["agents"]
        reply = await http.post("/api/agents/echo/message", json={"message": "still there?"})
        tasks = (await http.get("/a2a/agents/echo/rest/tasks", headers=V1)).json()
    assert {a["name"]: a["status"] for a in agents} == {"echo": "ready", "fragile": "ready"}
    assert reply.status_code == 200 and reply.json()["reply"] == "echo: still there?"
    assert tasks["tasks"] == []  # nothing was accepted, so nothing was stored


async def test_a_surrogate_in_a_jsonrpc_id_or_method_is_refused_not_a_500(tmp_path):
    async with (
        serve(make_config(tmp_path)) as (kernel, url),
        httpx.AsyncClient(base_url=url, timeout=30) as http,
    ):
        a2a = await http.post(
            "/a2a/agents/echo/jsonrpc",
            content=raw_json({**a2a_send({"text": "hi"}), "id": BAD}),
            headers=V1,
        )
        mcp = await http.post(
            "/mcp",
            content=raw_json(mcp_call("agent_echo", {"message": "hi"}, rpc_id=BAD)),
            headers=mcp_headers("agent_echo"),
        )
        method = await http.post(
            "/a2a/agents/echo/jsonrpc",
            content=raw_json({**a2a_send({"text": "hi"}), "method": BAD}),
            headers=V1,
        )
    for response, field in ((a2a, "id"), (mcp, "id"), (method, "method")):
        error = response.json()["error"]
        assert response.status_code < 500 and error["code"] == -32600
        assert error["message"].startswith(f"{field}: contains a lone surrogate (U+D800)")


async def test_the_store_refuses_text_it_cannot_keep_with_a_store_error_naming_the_field(tmp_path):
    async with open_store(tmp_path / "roost.db") as store:
        cases = [
            (
                ("s1", "a", [{"role": "user", "content": BAD}]),
                r"messages\[0\]\.content: contains a lone surrogate",
            ),
            (
                ("s1", "a", [{"role": "user", "content": "", "data": {"k": BAD}}]),
                r"messages\[0\]\.data\.k: contains a lone surrogate",
            ),
            (
                (BAD, "a", [{"role": "user", "content": "hi"}]),
                r"session_id: contains a lone surrogate",
            ),
        ]
        for args, problem in cases:
            with pytest.raises(StoreError, match=problem):
                await store.append_messages(*args)
            with pytest.raises(StoreError, match=problem.replace("messages", "messages")):
                await store.start_exchange(args[0], args[1], args[2][0])
        await store.append_messages("s1", "a", [{"role": "user", "content": "fine"}])
        assert [m.content for m in await store.history("s1")] == ["fine"]


async def test_a_store_error_inside_a_run_fails_that_request_and_costs_no_restart(tmp_path):
    # Past the edges (an in-process caller): the store's refusal reaches the caller as a
    # StoreError, and the agent never crashes, however often it happens.
    async with serve(make_config(tmp_path)) as (kernel, url):
        for i in range(6):
            with pytest.raises(StoreError, match="contains a lone surrogate"):
                await kernel.send("echo", BAD, session_id=f"s-{i}")
        assert kernel.agent_status("echo") == ("ready", None)
        reply = await kernel.send("echo", "hello")
    assert reply.text == "echo: hello"
    assert not isinstance(reply, ActorStopped)
