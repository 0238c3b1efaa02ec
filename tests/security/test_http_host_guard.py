"""DNS rebinding (issue 15, item 7): a page on an attacker's name that resolves to 127.0.0.1
sends same-origin requests (no ``Origin`` header on a GET) carrying ``Host: <that name>``.

Against a real ``roost run`` (no API key, the default), every entry point — Quart's
(``/health``, ``/api``, the websocket) and the plugin routes' plain handlers (MCP, A2A) — refuses
a forged ``Host`` with 421 in the route's own error shape and leaks nothing; loopback names, the
bound address and ``http.allowed_hosts`` are served; card URLs name the bound address
whatever ``Host`` says; the official a2a-sdk and mcp clients work with 127.0.0.1 and
localhost URLs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import httpx
import pytest
import trio
from http_guard_daemon import ROOST, start_daemon, write_agent

SECRET = "my bank PIN is 4711"
V1 = {"A2A-Version": "1.0"}
SDK_CLIENT = Path(__file__).resolve().parents[1] / "plugins" / "mcp" / "sdk_client.py"

pytestmark = pytest.mark.skipif(
    not ROOST.exists(), reason="the roost console script is not installed (make install)"
)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    root = tmp_path_factory.mktemp("host-guard")
    write_agent(
        root / "agents",
        "alpha",
        reply="alpha heard: {message}",
        mcp={"expose_tools": ["list", "read"], "private_tools": ["read"]},
    )
    daemon = start_daemon(root, 'allowed_hosts = ["roost.test"]\n')
    try:
        # A task whose history holds the user's text: what a rebinding page would read.
        message = {"messageId": "m-secret", "role": "ROLE_USER", "parts": [{"text": SECRET}]}
        body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}
        sent = httpx.post(f"{daemon.url}/a2a/jsonrpc", json=body, headers=V1, timeout=30)
        assert sent.status_code == 200 and "result" in sent.json(), sent.text
        yield daemon
    finally:
        daemon.stop()


async def raw_request(
    port: int, method: str, path: str, host: str, *, body: bytes = b"", headers: dict | None = None
) -> tuple[int, dict, bytes]:
    """One request over a fresh socket with exactly this ``Host``; ``(status, headers, body)``."""
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}", "Connection: close"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    if body or method == "POST":
        lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    data = ("\r\n".join(lines) + "\r\n\r\n").encode() + body
    with trio.fail_after(15):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            await stream.send_all(data)
            received = b""
            while chunk := await stream.receive_some(65536):
                received += chunk
    head, _, rest = received.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    fields = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        fields[name.strip().lower()] = value.strip()
    return int(status_line.split()[1]), fields, rest


def jsonrpc(method: str, params: dict) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}).encode()


MCP_INIT = jsonrpc(
    "initialize",
    {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "page", "version": "1"},
    },
)
WEBSOCKET = {
    "Upgrade": "websocket",
    "Connection": "Upgrade",
    "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
    "Sec-WebSocket-Version": "13",
}

# (entry point, handler, method, path, body, headers, error shape)
ENTRIES = [
    ("health", "quart", "GET", "/health", b"", {}, "roost"),
    ("api-agents", "quart", "GET", "/api/agents", b"", {}, "roost"),
    (
        "api-message",
        "quart",
        "POST",
        "/api/agents/alpha/message",
        b'{"message": "hi"}',
        {},
        "roost",
    ),
    ("api-events-websocket", "quart", "GET", "/api/events", b"", WEBSOCKET, "roost"),
    (
        "mcp",
        "plain",
        "POST",
        "/mcp",
        MCP_INIT,
        {"Accept": "application/json, text/event-stream"},
        "jsonrpc",
    ),
    (
        "agent-mcp",
        "plain",
        "POST",
        "/agents/alpha/mcp",
        MCP_INIT,
        {"Accept": "application/json, text/event-stream"},
        "jsonrpc",
    ),
    ("a2a-rest-tasks", "plain", "GET", "/a2a/rest/tasks?historyLength=10", b"", V1, "rest"),
    (
        "a2a-jsonrpc-list",
        "plain",
        "POST",
        "/a2a/jsonrpc",
        jsonrpc("ListTasks", {"historyLength": 10}),
        V1,
        "jsonrpc",
    ),
    (
        "a2a-jsonrpc-send",
        "plain",
        "POST",
        "/a2a/agents/alpha/jsonrpc",
        jsonrpc(
            "SendMessage",
            {"message": {"messageId": "x", "role": "ROLE_USER", "parts": [{"text": "hi"}]}},
        ),
        V1,
        "jsonrpc",
    ),
    ("a2a-card", "plain", "GET", "/.well-known/agent-card.json", b"", {}, "rest"),
    ("a2a-legacy-task", "plain", "GET", "/a2a/tasks/whatever?historyLength=10", b"", {}, "rest"),
]
ATTACKS = [
    "evil.example",
    "evil.example:{port}",
    "localhost.evil.example:{port}",
    "127.0.0.1.nip.io:{port}",
]


@pytest.mark.parametrize("attack", ATTACKS)
@pytest.mark.parametrize("entry", ENTRIES, ids=[e[0] for e in ENTRIES])
async def test_a_forged_host_is_refused_with_421_in_the_route_shape_at_every_entry(
    daemon, entry, attack
):
    _, _, method, path, body, headers, shape = entry
    host = attack.format(port=daemon.port)
    status, fields, raw = await raw_request(
        daemon.port, method, path, host, body=body, headers=headers
    )
    assert status == 421, raw[:300]
    text = raw.decode()
    assert SECRET not in text and "alpha heard" not in text
    answer = json.loads(raw)
    if shape == "roost":
        assert answer["error"]["code"] == "host_not_allowed"
        assert "http.allowed_hosts" in answer["error"]["message"]
    elif shape == "jsonrpc":
        assert answer["jsonrpc"] == "2.0" and isinstance(answer["error"]["code"], int)
        assert "http.allowed_hosts" in answer["error"]["message"]
    else:  # A2A HTTP+JSON: AIP-193
        assert answer["error"]["code"] == 421 and "http.allowed_hosts" in answer["error"]["message"]
    # A2A 1.0 HTTP+JSON answers in its own media type, the daemon's errors there too.
    media = "application/a2a+json" if "/rest/" in path else "application/json"
    assert fields["content-type"].startswith(media), fields["content-type"]


ALLOWED = [
    "localhost",
    "localhost:{port}",
    "LOCALHOST.:{port}",
    "127.0.0.1:{port}",
    "[::1]:{port}",
    "roost.test",
    "roost.test:{port}",
]


@pytest.mark.parametrize("host", ALLOWED)
async def test_allowed_hosts_are_served_and_card_urls_name_the_bound_address(daemon, host):
    host = host.format(port=daemon.port)
    status, _, raw = await raw_request(daemon.port, "GET", "/api/agents", host)
    assert status == 200 and b"alpha" in raw
    status, _, raw = await raw_request(
        daemon.port, "GET", "/a2a/rest/tasks?historyLength=10", host, headers=V1
    )
    assert status == 200 and SECRET in raw.decode()
    # The card URLs come from the bound address (or http.public_url), never from Host.
    bound = f"http://127.0.0.1:{daemon.port}/"
    for path in (
        "/.well-known/agent-card.json",
        "/a2a/agents/alpha/.well-known/agent-card.json",
        "/.well-known/agent.json",
        "/a2a/agents",
    ):
        status, _, raw = await raw_request(daemon.port, "GET", path, host)
        assert status == 200, raw[:300]
        cards = json.loads(raw)
        for card in cards.get("agents", [cards]):
            urls = [card["url"]] + [i["url"] for i in card.get("supportedInterfaces", [])]
            assert all(url.startswith(bound) for url in urls), (path, urls)


async def run_mcp_sdk(url: str) -> dict:
    with trio.fail_after(90):
        done = await trio.run_process(
            [sys.executable, str(SDK_CLIENT), url, "legacy", "read"],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    return json.loads(done.stdout.decode().strip().splitlines()[-1])


@pytest.mark.parametrize("name", ["127.0.0.1", "localhost"])
async def test_official_clients_work_with_loopback_urls_and_a_rebound_name_does_not(daemon, name):
    from a2a.client import ClientConfig, ClientFactory
    from a2a.client.card_resolver import A2ACardResolver
    from a2a.types import Message, Part, Role, SendMessageRequest, a2a_pb2

    base = f"http://{name}:{daemon.port}"
    async with httpx.AsyncClient(timeout=20) as http:
        card = await A2ACardResolver(http, f"{base}/a2a/agents/alpha").get_agent_card()
    client = ClientFactory(ClientConfig(streaming=False)).create(card)
    try:
        with trio.fail_after(30):
            message = Message(
                message_id=f"m-{name}", role=Role.ROLE_USER, parts=[Part(text="hello sdk")]
            )
            events = [e async for e in client.send_message(SendMessageRequest(message=message))]
    finally:
        await client.close()
    task = events[0].task
    assert task.status.state == a2a_pb2.TASK_STATE_COMPLETED
    assert task.artifacts[0].parts[0].text == "alpha heard: hello sdk"

    seen = await run_mcp_sdk(f"{base}/mcp")
    assert seen["answer"] == ["alpha heard: hello from the SDK"] and not seen["answer_is_error"]

    # The same requests under a name the attacker controls get nothing.
    async with httpx.AsyncClient(
        timeout=20, headers={"Host": f"rebound.example:{daemon.port}"}
    ) as http:
        card = await http.get(f"{base}/a2a/agents/alpha/.well-known/agent-card.json")
        mcp = await http.post(
            f"{base}/mcp",
            content=MCP_INIT,
            headers={
                "Content-Type": "application/json",
                "Accept": "application/json, text/event-stream",
            },
        )
    assert card.status_code == 421 and mcp.status_code == 421
