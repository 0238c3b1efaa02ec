"""No input reaches a crash: the three edges fuzzed with Hypothesis (issue 15, item 9).

A real ``roost run`` daemon (its own ROOST_HOME and roost.toml, 127.0.0.1) gets bounded
numbers of generated requests at ``POST /api/agents/<name>/message``, MCP ``tools/call``
and A2A ``SendMessage`` / ``GetTask`` / ``ListTasks``: text with lone surrogates, NULs and
other odd characters, integers past Python's 4300-digit conversion limit, numbers that
overflow to infinity, nesting past the decoder's depth, values of the wrong type in every
field. Every answer must be protocol-shaped (REST: 200 or a 4xx ``{"error": ...}``;
JSON-RPC: a ``result`` or an ``error`` object) and never a 5xx, and afterwards every agent
is still ready and answers. Examples are derandomized, so a run is reproducible.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from waiting import wait_until_sync

ROOST = str(Path(sys.executable).parent / "roost")
V1 = {"A2A-Version": "1.0", "Content-Type": "application/json"}
META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "fuzz", "version": "1"},
}
FUZZ = settings(
    max_examples=120,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@attrs.frozen
class Raw:
    """JSON text put in the body as is (what ``json.dumps`` cannot write)."""

    text: str


def dump(value: Any) -> str:
    """JSON text with non-ASCII escaped (a lone surrogate travels as "\\ud800")."""
    if isinstance(value, Raw):
        return value.text
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(str(k))}:{dump(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(dump(v) for v in value) + "]"
    return json.dumps(value)


odd_chars = st.sampled_from(
    ["\ud800", "\udfff", "\udbff\udbff", "\x00", "\u2028", "\ufeff", "\U0001f600", "\\", '"', "\n"]
)
texts = st.lists(st.one_of(st.characters(blacklist_categories=()), odd_chars), max_size=12).map(
    "".join
)
raw_numbers = st.sampled_from(
    [
        "9" * 5000,
        "-" + "9" * 4400,
        "1e999",
        "-1e999",
        "1" + "0" * 400,
        "1e-999",
        "0.0000000000000000000001",
    ]
).map(Raw)
deep = st.integers(min_value=1, max_value=3000).map(lambda n: Raw("[" * n + "]" * n))
leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    texts,
    raw_numbers,
    deep,
)
values = st.recursive(
    leaves,
    lambda kids: st.one_of(st.lists(kids, max_size=3), st.dictionaries(texts, kids, max_size=3)),
    max_leaves=10,
)
text_or_value = st.one_of(texts, values)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    if not Path(ROOST).exists():
        pytest.skip("the roost console script is not installed (run make install)")
    root = tmp_path_factory.mktemp("fuzz")
    for name in ("echo", "asker"):
        rules = (
            [{"match": "(?i)question", "ask": "Which?", "reply": "chose {answer}"}]
            if name == "asker"
            else []
        )
        path = root / "agents" / name / "agent.json"
        path.parent.mkdir(parents=True)
        path.write_text(
            json.dumps(
                {
                    "name": name,
                    "description": name,
                    "a2a": {"enabled": True},
                    "model": {
                        "provider": "scripted",
                        "script": {"rules": rules, "default_reply": "echo: {message}"},
                    },
                }
            )
        )
    port = _free_port()
    (root / "roost.toml").write_text(
        f'home = "{root / "home"}"\n[agents]\ndirs = ["{root / "agents"}"]\nbundled = false\n'
        f"[http]\nport = {port}\nrate_limit_per_s = 100000\nrate_limit_burst = 100000\n"
        '[a2a]\ndefault_agent = "echo"\n'
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROOST_")}
    env.update(ROOST_HOME=str(root / "home"), ROOST_CONFIG=str(root / "roost.toml"))
    with open(root / "daemon.log", "wb") as log:
        proc = subprocess.Popen(
            [ROOST, "run"],
            cwd=root,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:

        def healthy() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"the daemon exited: {(root / 'daemon.log').read_text()[-2000:]}"
                )
            try:
                return httpx.get(url + "/health", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until_sync(
            healthy,
            lambda: f"the daemon healthy: {(root / 'daemon.log').read_text()[-2000:]}",
            timeout=30,
        )
        with httpx.Client(base_url=url, timeout=30) as http:
            yield http, proc, root / "daemon.log"
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)


def _jsonrpc_answer(response: httpx.Response) -> dict:
    """The JSON-RPC object of an answer (a JSON body, or the last SSE data line)."""
    assert response.status_code < 500, (response.status_code, response.text[:500])
    text = response.text
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        text = [line[5:] for line in text.splitlines() if line.startswith("data:")][-1]
    body = json.loads(text)
    assert isinstance(body, dict) and body.get("jsonrpc") == "2.0", body
    assert ("result" in body) != ("error" in body), body
    if "error" in body:
        assert isinstance(body["error"]["code"], int) and isinstance(
            body["error"]["message"], str
        ), body
    return body


def _rest_answer(response: httpx.Response) -> dict:
    assert response.status_code < 500, (response.status_code, response.text[:500])
    body = response.json()
    if response.status_code == 200:
        assert isinstance(body["reply"], str), body
    else:
        assert 400 <= response.status_code < 500 and isinstance(body["error"]["message"], str), body
    return body


def test_fuzzing_the_three_edges_never_reaches_a_crash(daemon):
    http, proc, log = daemon

    @FUZZ
    @given(shape=st.integers(min_value=0, max_value=4), value=text_or_value, other=values)
    def rest(shape: int, value: Any, other: Any) -> None:
        body = [
            {"message": value},
            {"message": "hi", "session_id": value},
            {"message": value, "timeout": other},
            {"message": "hi", value if isinstance(value, str) else "x": other},
            value,
        ][shape]
        response = http.post(
            "/api/agents/echo/message",
            content=dump(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        _rest_answer(response)

    @FUZZ
    @given(shape=st.integers(min_value=0, max_value=4), value=text_or_value, other=values)
    def mcp(shape: int, value: Any, other: Any) -> None:
        name = "agent_echo"
        params = [
            {"name": name, "arguments": {"message": value}, "_meta": META},
            {"name": name, "arguments": value, "_meta": META},
            {"name": value, "arguments": {"message": "hi"}, "_meta": META},
            {
                "name": name,
                "arguments": {"message": "hi", "extra": other},
                "_meta": {**META, "x": value},
            },
            value,
        ][shape]
        message = {
            "jsonrpc": "2.0",
            "id": other if shape == 3 else 1,
            "method": "tools/call",
            "params": params,
        }
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": "2026-07-28",
            "Mcp-Method": "tools/call",
            "Mcp-Name": name if shape != 2 else "x",
        }
        _jsonrpc_answer(http.post("/mcp", content=dump(message).encode(), headers=headers))

    @FUZZ
    @given(shape=st.integers(min_value=0, max_value=7), value=text_or_value, other=values)
    def a2a(shape: int, value: Any, other: Any) -> None:
        def send(message: Any, **params: Any) -> dict:
            return {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "SendMessage",
                "params": {"message": message, **params},
            }

        def msg(**extra: Any) -> dict:
            return {"role": "ROLE_USER", "messageId": "m1", "parts": [{"text": "hi"}], **extra}

        body = [
            send(msg(parts=[{"text": value}])),
            send(msg(parts=[{"data": value}])),
            send(msg(metadata=value)),
            send(msg(contextId=value)),
            send(value),
            send(msg(), configuration=value, metadata=other),
            {"jsonrpc": "2.0", "id": other, "method": "GetTask", "params": {"id": value}},
            {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "ListTasks",
                "params": {"contextId": value, "pageSize": other},
            },
        ][shape]
        _jsonrpc_answer(
            http.post("/a2a/agents/echo/jsonrpc", content=dump(body).encode(), headers=V1)
        )

    rest()
    mcp()
    a2a()
    assert proc.poll() is None, log.read_text()[-3000:]
    agents = http.get("/api/agents").json()["agents"]
    assert {a["name"]: a["status"] for a in agents} == {"asker": "ready", "echo": "ready"}
    reply = http.post("/api/agents/echo/message", json={"message": "still here"})
    assert reply.json()["reply"] == "echo: still here"
    assert "Traceback" not in log.read_text(), log.read_text()[-3000:]
