"""Odd ``Host`` headers (review of issues 14 and 15, findings 8 and 14).

Regression: a ``Host`` the guard's parser passed but Werkzeug's URL adapter refused
(``evil..example``: IDNA "label empty") got a 500 with an empty body and a traceback in
the log, on every Quart route; and a request with no ``Host`` at all (HTTP/1.0), which
Quart fills in as ``""``, got 421 on those routes though the README says it is served.
Now a value that is no host name is refused with 400 in the endpoint's shape before any
router parses it (``"*"`` in ``http.allowed_hosts`` or not), an empty one counts as none,
and Quart's request context never turns a Werkzeug HTTPException into a 500.
"""

from __future__ import annotations

import json

import pytest
import trio
from http_guard_daemon import ROOST, start_daemon, write_agent
from roost.kernel import default_config, open_kernel

pytestmark = pytest.mark.skipif(
    not ROOST.exists(), reason="the roost console script is not installed (make install)"
)

MCP_PING = b'{"jsonrpc":"2.0","id":1,"method":"ping"}'
WEBSOCKET = (
    "Upgrade: websocket\r\nConnection: Upgrade\r\n"
    "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
)
# (name, request line + headers after Host, body, error shape)
ENTRIES = [
    ("health", "GET /health", "", b"", "roost"),
    ("api", "GET /api/agents", "", b"", "roost"),
    ("unknown path", "GET /nowhere", "", b"", "roost"),
    ("websocket", "GET /api/events", WEBSOCKET, b"", "roost"),
    ("mcp", "POST /mcp", "Accept: application/json, text/event-stream\r\n", MCP_PING, "jsonrpc"),
    (
        "a2a jsonrpc",
        "POST /a2a/jsonrpc",
        "A2A-Version: 1.0\r\n",
        b'{"jsonrpc":"2.0","id":1,"method":"ListTasks","params":{}}',
        "jsonrpc",
    ),
    ("a2a card", "GET /.well-known/agent-card.json", "", b"", "rest"),
]
MALFORMED = [
    "evil..example",
    "a" * 64 + ".example",
    ".".join(["a" * 63] * 4),
    "localhost..:8470",
    "[::1",
    "user@localhost",
]


@pytest.fixture(scope="module", params=["default", "star"])
def daemon(request, tmp_path_factory):
    """A real ``roost run``: with the default Host check, and with it off (``["*"]``)."""
    root = tmp_path_factory.mktemp(f"edges-host-{request.param}")
    write_agent(root / "agents", "alpha", reply="alpha heard: {message}")
    daemon = start_daemon(root, 'allowed_hosts = ["*"]\n' if request.param == "star" else "")
    yield daemon
    daemon.stop()


async def _raw(port: int, data: bytes) -> bytes:
    """Send ``data`` on a fresh connection; everything the server sends until it closes."""
    with trio.fail_after(15):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            await stream.send_all(data)
            out = b""
            while chunk := await stream.receive_some(65536):
                out += chunk
    return out


def _request(line: str, host: str | None, extra: str, body: bytes, version: str = "1.1") -> bytes:
    head = f"{line} HTTP/{version}\r\n" + (f"Host: {host}\r\n" if host is not None else "") + extra
    head += "Content-Type: application/json\r\n" if body else ""
    head += f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    return head.encode() + body


@pytest.mark.parametrize("host", MALFORMED)
@pytest.mark.parametrize("entry", ENTRIES, ids=[e[0] for e in ENTRIES])
async def test_a_malformed_host_is_400_in_the_endpoint_shape_never_a_500(daemon, entry, host):
    _, line, extra, body, shape = entry
    answer = await _raw(daemon.port, _request(line, host, extra, body))
    status = int(answer.split(b" ", 2)[1])
    assert status == 400, answer[:400]
    error = json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]
    if shape == "jsonrpc":
        assert isinstance(error["code"], int)
    elif shape == "rest":
        assert error["code"] == 400 and error["status"] == "INVALID_ARGUMENT"
    else:
        assert error["code"] == "bad_host"
    assert "is not a host name" in error["message"]


async def test_malformed_hosts_leave_no_traceback_in_the_log(daemon):
    for host in MALFORMED:
        for _, line, extra, body, _ in ENTRIES:
            await _raw(daemon.port, _request(line, host, extra, body))
    assert "Traceback" not in daemon.stderr() and "BadHost" not in daemon.stderr(), daemon.stderr()[
        -2000:
    ]


@pytest.mark.parametrize(
    "line,extra,body,expect",
    [
        ("GET /health", "", b"", b'"status":"ok"'),
        ("GET /api/agents", "", b"", b'"alpha"'),
        ("GET /.well-known/agent-card.json", "", b"", b'"name":"alpha"'),
        (
            "POST /a2a/jsonrpc",
            "A2A-Version: 1.0\r\n",
            b'{"jsonrpc":"2.0","id":1,"method":"ListTasks","params":{}}',
            b'"result":',
        ),
    ],
    ids=["health", "api", "a2a-card", "a2a-jsonrpc"],
)
@pytest.mark.parametrize("host", [None, ""], ids=["http10-no-host", "empty-host"])
async def test_a_request_without_a_host_name_is_served_on_every_lane(
    daemon, line, extra, body, expect, host
):
    version = "1.0" if host is None else "1.1"
    answer = await _raw(daemon.port, _request(line, host, extra, body, version))
    assert answer.split(b" ", 2)[1] == b"200", answer[:400]
    assert expect in answer.split(b"\r\n\r\n", 1)[1].replace(b" ", b""), answer[:600]


async def test_quart_never_answers_a_werkzeug_error_from_its_request_context_with_a_500(tmp_path):
    """Past the daemon's own Host check (the quart app called directly), a Host the URL
    adapter refuses is the request's routing error, answered by roost's error handlers."""
    from roost.plugins.http import create_app

    config = default_config(
        env={}, home=str(tmp_path / "home"), agents={"dirs": [], "bundled": False}
    )
    async with open_kernel(config) as kernel:
        app = create_app(kernel)
        sent: list[dict] = []
        requests = [{"type": "http.request", "body": b"", "more_body": False}]

        async def receive():
            if requests:
                return requests.pop()
            await trio.sleep_forever()  # the client stays; the app ends once it has answered

        async def send(message):
            sent.append(message)

        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "GET",
            "scheme": "http",
            "path": "/health",
            "raw_path": b"/health",
            "query_string": b"",
            "root_path": "",
            "headers": [(b"host", b"evil..example")],
            "client": ("127.0.0.1", 1),
            "server": ("127.0.0.1", 8470),
            "extensions": {},
        }
        with trio.fail_after(10):
            await app(scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    assert start["status"] == 400, (start, body)
    assert json.loads(body)["error"]["code"] == "bad_host"
