"""Edge cases a hostile review of issues 14 and 15 found in the HTTP intake and A2A routing.

Copied from the review's ``tests/security/test_review_findings.py`` (branch ``review1``),
unchanged: each FAILED on main when written. Real ``roost run`` daemons on 127.0.0.1, real
sockets, the real CLI; nothing mocked.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import trio
from security_targets import Daemon

ROOST = Path(sys.executable).with_name("roost")


def _alive(daemon: Daemon) -> Daemon:
    if not daemon.alive():
        daemon.stop()
        daemon.start()
    return daemon


def _raw(port: int, data: bytes, timeout: float = 10) -> bytes:
    """Send ``data`` on a fresh connection and read until the server closes it."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        out = b""
        while chunk := sock.recv(65536):
            out += chunk
    return out


@pytest.mark.parametrize(
    "method,path,body",
    [
        ("GET", "/health", b""),
        ("GET", "/api/agents", b""),
        ("POST", "/mcp", b'{"jsonrpc":"2.0","id":1,"method":"ping"}'),
    ],
    ids=["health", "api", "mcp"],
)
async def test_a_host_with_an_empty_label_is_refused_not_a_500(daemon: Daemon, method, path, body):
    """``Host: evil..example`` passes the guard's parser to Quart, whose URL adapter raises
    (IDNA: "label empty") before any handler: a 500 with an empty body (not JSON, not
    JSON-RPC on /mcp) and a traceback in the log for every such request."""
    d = _alive(daemon)
    request = (
        f"{method} {path} HTTP/1.1\r\nHost: evil..example\r\nAuthorization: Bearer {d.api_key}\r\n"
        f"Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode() + body
    answer = await trio.to_thread.run_sync(_raw, d.port, request)
    status = int(answer.split(b" ", 2)[1])
    payload = answer.split(b"\r\n\r\n", 1)[1]
    assert status in (400, 421), answer[:300]
    parsed = json.loads(payload)
    if path == "/mcp":
        assert parsed.get("jsonrpc") == "2.0" and isinstance(parsed["error"]["code"], int), parsed


async def test_an_http10_request_without_host_is_served(daemon: Daemon):
    """README: "A request without Host (HTTP/1.0 tools; browsers always send one) is served."
    On the hypercorn lane it gets 421 "does not serve requests for host ''"."""
    answer = await trio.to_thread.run_sync(
        _raw, _alive(daemon).port, b"GET /health HTTP/1.0\r\n\r\n"
    )
    assert answer.startswith(b"HTTP/1.1 200"), answer[:400]


# ---- issue 14, item 4: error shapes and statuses -------------------------------------------


async def test_a_session_id_of_another_agent_is_a_client_error_not_a_storage_failure(
    daemon: Daemon,
):
    """A caller that reuses its own ``session_id`` with another agent is told 503
    ``store_error`` "storage failed: session … belongs to agent 'attacker'" (A2A: -32603
    for a reused ``contextId``): a retryable server failure for a mistake of the request."""
    d = _alive(daemon)
    headers = {"Authorization": f"Bearer {d.api_key}"}
    async with httpx.AsyncClient(base_url=d.url, timeout=30, headers=headers) as http:
        first = await http.post("/api/agents/attacker/message", json={"message": "hi"})
        session = first.json()["session_id"]
        second = await http.post(
            "/api/agents/victim/message", json={"message": "hi", "session_id": session}
        )
    assert second.status_code in (400, 409), (second.status_code, second.text)
    assert second.json()["error"]["code"] != "store_error", second.text


async def test_http_json_daemon_errors_carry_the_a2a_media_type(daemon: Daemon):
    """HTTP+JSON 1.0 answers ``application/a2a+json`` (README); the handler's own errors do
    (404 task not found), the daemon's (401, 405, 413, 421, 429) are ``application/json``."""
    async with httpx.AsyncClient(base_url=_alive(daemon).url, timeout=30) as http:
        response = await http.post(
            "/a2a/rest/message:send", json={}, headers={"A2A-Version": "1.0"}
        )
    assert response.status_code == 401
    assert response.headers["content-type"].startswith("application/a2a+json"), response.headers[
        "content-type"
    ]


# ---- issue 14, item 6: roost as a client reads what a peer sends, all of it ------------------


# ---- issue 14, item 11: a config value that names nothing ----------------------------------


def test_a_typo_in_a2a_default_agent_stops_roost_run(tmp_path):
    """``[a2a] default_agent = "cordinator"`` is logged as an ERROR and the daemon serves
    anyway: the root card (what every A2A client reads first) is a 404 and every root send
    is refused, exit code 0 — where every other typo now stops the boot."""
    config = tmp_path / "roost.toml"
    config.write_text(f'home = "{tmp_path / "home"}"\n[a2a]\ndefault_agent = "cordinator"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROOST_")}
    proc = subprocess.Popen(
        [str(ROOST), "--config", str(config), "run", "--port", "0"],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        seen = b""
        while b"listening on" not in seen:
            line = proc.stdout.readline()
            if not line:
                break
            seen += line
        listening = b"listening on" in seen
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        proc.stdout.close()
        err = proc.stderr.read()
        proc.stderr.close()
    assert not listening, f"roost run served with a default_agent that is no agent: {err[-400:]!r}"
    assert proc.returncode not in (0, None) and b"default_agent" in err


# ---- issue 15, item 9 / issue 14, item 4: what is stored must be servable -------------------


async def test_a_task_never_serves_non_finite_numbers_as_json(tmp_path):
    """``1e400`` is valid JSON syntax and overflows to ``inf``; the 0.1 route (unlike the
    1.0 JSON-RPC one) also takes the ``NaN`` literal. Both are stored and served back as the
    tokens ``Infinity`` / ``NaN`` in GetTask and ListTasks — not JSON: a JavaScript
    client's ``JSON.parse`` of the principal's task list fails from then on."""
    from http_guard_daemon import start_daemon, write_agent

    write_agent(tmp_path / "agents", "echo")
    daemon = await trio.to_thread.run_sync(start_daemon, tmp_path)

    def strict(text: str):
        def refuse(token: str):
            raise ValueError(f"not JSON: {token}")

        return json.loads(text, parse_constant=refuse)

    try:
        async with httpx.AsyncClient(base_url=daemon.url, timeout=30) as http:
            v1 = {"A2A-Version": "1.0", "Content-Type": "application/json"}
            sent = await http.post(
                "/a2a/agents/echo/rest/message:send",
                content=b'{"message":{"role":"ROLE_USER","messageId":"m-inf","parts":[{"data":[1e400]}]}}',
                headers=v1,
            )
            legacy = await http.post(
                "/a2a/tasks/send",
                content=b'{"id":"t-nan-1","message":{"role":"user","parts":[{"type":"data","data":{"v":NaN}}]}}',
                headers={"Content-Type": "application/json"},
            )
            listed = await http.get("/a2a/agents/echo/rest/tasks", headers=v1)
        for response in (sent, legacy, listed):
            if response.status_code < 400:
                strict(response.text)  # raises on Infinity / NaN
    finally:
        daemon.stop()


@pytest.mark.parametrize("explicit", [False, True], ids=["first-agent", "a2a.default_agent"])
async def test_an_unavailable_primary_agent_answers_503_at_the_root(
    tmp_path, monkeypatch, explicit
):
    """The primary agent (``a2a.default_agent``, else the A2A agent whose name sorts first)
    is left out when it is unavailable (here: no ANTHROPIC_API_KEY). Implicitly, the root
    card and root sends silently move to the next agent (``zzz`` answers messages meant for
    ``aaa``); explicitly, the root says "a2a.default_agent 'aaa' is not an agent … fix it in
    roost.toml" (-32602 on ``message.metadata.agent``) instead of 503 with the reason."""
    from http_guard_daemon import start_daemon, write_agent

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
    daemon = await trio.to_thread.run_sync(
        start_daemon, tmp_path, '[a2a]\ndefault_agent = "aaa"\n' if explicit else ""
    )
    try:
        async with httpx.AsyncClient(base_url=daemon.url, timeout=30) as http:
            body = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "SendMessage",
                "params": {
                    "message": {
                        "role": "ROLE_USER",
                        "messageId": "m-root",
                        "parts": [{"text": "hi"}],
                    }
                },
            }
            response = await http.post("/a2a/jsonrpc", json=body, headers={"A2A-Version": "1.0"})
    finally:
        daemon.stop()
    assert "I am zzz" not in response.text, (
        f"the root sent aaa's message to zzz: {response.text[:300]}"
    )
    assert response.status_code == 503 and "ANTHROPIC_API_KEY" in response.text, (
        response.status_code,
        response.text[:300],
    )
