"""A2A routing and error edges (review of issues 14 and 15, findings 10, 12 and 13).

Regressions: an unavailable primary agent was skipped at the root (its messages answered
by the next agent); a session id (A2A: ``contextId``) reused with another agent was a
"storage failed" 503 / -32603; the daemon's own errors on the 1.0 HTTP+JSON routes came as
``application/json`` while the routes' answers are ``application/a2a+json``. Real kernel,
real daemon on 127.0.0.1.
"""

from __future__ import annotations

import json

import httpx
from http_guard_daemon import start_daemon, write_agent
from robustness_helpers import V1, a2a_send, make_config, serve

A2A_JSON = "application/a2a+json"


def _media(response: httpx.Response) -> str:
    return response.headers["content-type"].split(";")[0].strip()


async def test_every_root_surface_names_the_unavailable_primary_agent_never_another(
    tmp_path, monkeypatch
):
    """Root cards, root sends on each binding and the 0.1 route answer 503 with the reason;
    ``metadata.agent`` still reaches the available agent."""
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    agents = tmp_path / "agents"
    (agents / "aaa").mkdir(parents=True)
    (agents / "aaa" / "agent.json").write_text(
        json.dumps(
            {
                "name": "aaa",
                "description": "needs a key",
                "model": {"provider": "anthropic", "name": "claude-sonnet-4-5"},
                "a2a": {"enabled": True},
            }
        )
    )
    write_agent(agents, "zzz", reply="I am zzz")
    daemon = start_daemon(tmp_path)
    message = {"role": "ROLE_USER", "messageId": "m-root", "parts": [{"text": "hi"}]}
    try:
        async with httpx.AsyncClient(base_url=daemon.url, timeout=30) as http:
            card = await http.get("/.well-known/agent-card.json")
            legacy_card = await http.get("/.well-known/agent.json")
            rest = await http.post("/a2a/rest/message:send", json={"message": message}, headers=V1)
            stream = await http.post(
                "/a2a/jsonrpc",
                json={
                    "jsonrpc": "2.0",
                    "id": 2,
                    "method": "SendStreamingMessage",
                    "params": {"message": message},
                },
                headers=V1,
            )
            v03 = await http.post(
                "/a2a/jsonrpc",
                json={
                    "jsonrpc": "2.0",
                    "id": 3,
                    "method": "message/send",
                    "params": {
                        "message": {
                            **message,
                            "kind": "message",
                            "role": "user",
                            "parts": [{"kind": "text", "text": "hi"}],
                        }
                    },
                },
            )
            v01 = await http.post(
                "/a2a/tasks/send",
                json={
                    "id": "t-1",
                    "message": {"role": "user", "parts": [{"type": "text", "text": "hi"}]},
                },
            )
            routed = await http.post(
                "/a2a/jsonrpc",
                json={
                    "jsonrpc": "2.0",
                    "id": 4,
                    "method": "SendMessage",
                    "params": {"message": {**message, "metadata": {"agent": "zzz"}}},
                },
                headers=V1,
            )
            own_card = await http.get("/a2a/agents/aaa/.well-known/agent-card.json")
    finally:
        daemon.stop()
    for response in (card, legacy_card, rest, stream, v03, v01, own_card):
        assert response.status_code == 503, (
            response.request.url,
            response.status_code,
            response.text[:300],
        )
        assert "ANTHROPIC_API_KEY" in response.text and "I am zzz" not in response.text, (
            response.text[:300]
        )
    assert _media(rest) == A2A_JSON and rest.json()["error"]["status"] == "UNAVAILABLE"
    for response, rpc_id in ((stream, 2), (v03, 3)):
        body = response.json()
        assert body["id"] == rpc_id and body["error"]["code"] == -32603, body
    assert routed.status_code == 200 and "I am zzz" in routed.text, routed.text[:300]


async def test_a_reused_context_id_is_no_storage_failure_and_a_session_id_is_409(tmp_path):
    async with (
        serve(make_config(tmp_path)) as (kernel, url),
        httpx.AsyncClient(base_url=url, timeout=30) as http,
    ):
        first = await http.post("/api/agents/echo/message", json={"message": "hi"})
        session = first.json()["session_id"]
        replies = [
            await http.post(
                "/api/agents/fragile/message", json={"message": "hi", "session_id": session}
            )
            for _ in range(5)
        ]
        mine = await http.post(
            "/a2a/agents/echo/jsonrpc",
            json=a2a_send({"text": "hi"}, message_extra={"contextId": "ctx-1"}),
            headers=V1,
        )
        reused = await http.post(
            "/a2a/agents/fragile/jsonrpc",
            json=a2a_send({"text": "hi"}, message_extra={"contextId": "ctx-1"}),
            headers=V1,
        )
        again = await http.post(
            "/api/agents/echo/message", json={"message": "still mine", "session_id": session}
        )
        status = kernel.agent_status("fragile")
    for reply in replies:  # more than the restart budget: a refused request costs none
        assert reply.status_code == 409, reply.text
        error = reply.json()["error"]
        assert error["code"] == "session_conflict" and error["field"] == "session_id"
        assert f"session {session!r} belongs to agent 'echo', not 'fragile'" in error["message"]
    assert status == ("ready", None)
    assert again.status_code == 200 and again.json()["reply"] == "echo: still mine"
    assert mine.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    error = reused.json()["error"]  # not -32603 "storage failed": -32602 up front, no task made
    assert error["code"] == -32602 and error["message"].startswith("message.contextId:"), error
    assert (
        "'ctx-1' belongs to agent 'echo'" in error["message"] and "contextId" in error["message"]
    ), error


async def test_the_daemons_errors_take_each_a2a_routes_media_type(tmp_path):
    """401 (the daemon's key check) and 404 (an unknown agent, the A2A handler's) in the
    same media type as the route's answers: a2a+json on 1.0 HTTP+JSON, json elsewhere."""
    write_agent(tmp_path / "agents", "alpha")
    daemon = start_daemon(tmp_path, 'api_key = "k-edges"\n')
    key = {"Authorization": "Bearer k-edges"}
    try:
        async with httpx.AsyncClient(base_url=daemon.url, timeout=30) as http:
            cases = {
                "1.0 root": (
                    await http.post("/a2a/rest/message:send", json={}, headers=V1),
                    401,
                    A2A_JSON,
                ),
                "1.0 agent": (
                    await http.get("/a2a/agents/alpha/rest/tasks", headers=V1),
                    401,
                    A2A_JSON,
                ),
                "1.0 unknown agent": (
                    await http.get("/a2a/agents/nobody/rest/tasks", headers={**V1, **key}),
                    404,
                    A2A_JSON,
                ),
                "1.0 ok": (
                    await http.get("/a2a/agents/alpha/rest/tasks", headers={**V1, **key}),
                    200,
                    A2A_JSON,
                ),
                "0.3 root": (
                    await http.post("/a2a/rest/v1/message:send", json={}),
                    401,
                    "application/json",
                ),
                "0.3 agent": (
                    await http.get("/a2a/agents/alpha/rest/v1/tasks"),
                    401,
                    "application/json",
                ),
                "0.3 unknown agent": (
                    await http.get("/a2a/agents/nobody/rest/v1/tasks", headers=key),
                    404,
                    "application/json",
                ),
                "0.3 ok": (
                    await http.get("/a2a/agents/alpha/rest/v1/tasks", headers=key),
                    200,
                    "application/json",
                ),
                "0.1": (await http.get("/a2a/tasks/t-x"), 401, "application/json"),
                "jsonrpc": (await http.post("/a2a/jsonrpc", json={}), 401, "application/json"),
            }
    finally:
        daemon.stop()
    for name, (response, status, media) in cases.items():
        assert (response.status_code, _media(response)) == (status, media), (
            name,
            response.text[:200],
        )
        if status >= 400 and name != "jsonrpc":
            assert response.json()["error"]["code"] == status, (name, response.text[:200])
