"""roost as an HTTP client reads at most a cap of what a peer answers (issue 14, item 6 area).

A peer's answer — an agent card, a JSON-RPC answer, an MCP POST's JSON answer, one SSE
event, an error body, a model's answer, a webhook's answer — is streamed and read up to a
byte cap (``roost.plugins.http.client.read_body`` / ``sse_events``); past it the call
fails at once with an error naming the limit and the peer. The in-process tests below use
peers that send a little more than the cap and then hold the connection open: a client
that buffers the whole answer waits for ever (here: until ``trio.fail_after``); one that
stops at the cap answers at once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Awaitable, Callable
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import h2.config
import h2.connection
import h2.events
import httpx
import pytest
import trio
from roost.plugins.a2a._client import MAX_ANSWER_BYTES, MAX_CARD_BYTES, A2AClient, A2AClientError
from roost.plugins.a2a._push import Delivery, PushDispatcher, PushSettings
from roost.plugins.mcp._protocol import MAX_MESSAGE_BYTES
from roost.plugins.mcp.transports._base import TransportError
from roost.plugins.mcp.transports.http import open_http_transport
from roost.plugins.providers._http import MAX_ANSWER_BYTES as MAX_MODEL_ANSWER_BYTES
from roost.plugins.providers._http import HttpClient, ProviderResponseError, ProviderSettings

ROOST = Path(sys.executable).with_name("roost")
MiB = 1024 * 1024


# ---- the reviewer's test: a real CLI against a peer answering 512 MiB ----------------------


class _HugeAnswer(BaseHTTPRequestHandler):
    """An A2A agent card that points at itself, then a 512 MiB answer to every POST."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        port = self.server.server_address[1]
        card = {
            "name": "huge",
            "description": "answers with 512 MiB",
            "version": "1",
            "supportedInterfaces": [
                {
                    "url": f"http://127.0.0.1:{port}/rpc",
                    "protocolBinding": "JSONRPC",
                    "protocolVersion": "1.0",
                }
            ],
            "capabilities": {},
            "defaultInputModes": ["text/plain"],
            "defaultOutputModes": ["text/plain"],
            "skills": [],
        }
        body = json.dumps(card).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(512 * MiB))
        self.end_headers()
        chunk = b" " * MiB
        try:
            for _ in range(512):
                self.wfile.write(chunk)
        except OSError:
            pass


class _HugeChunkedAnswer(_HugeAnswer):
    """The same, the 512 MiB announced by no ``Content-Length`` (chunked)."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        chunk = b"%x\r\n%s\r\n" % (MiB, b" " * MiB)
        try:
            for _ in range(512):
                self.wfile.write(chunk)
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            pass


# Runs argv[1:] and prints its ru_maxrss (KiB). A child's ru_maxrss starts from the high
# water of the memory it was forked (or vforked) from: started from pytest itself, after
# other tests, /bin/true "peaks" at pytest's size. Started from this small launcher, it is
# the command's own peak.
_LAUNCHER = """
import os, subprocess, sys
proc = subprocess.Popen(sys.argv[1:], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
_, _, usage = os.wait4(proc.pid, 0)
proc.returncode = 0
print(usage.ru_maxrss)
"""


def _peak_rss_of(argv: list[str], env: dict, timeout: float = 120) -> tuple[int, bytes]:
    """Run ``argv``; its peak RSS in bytes (``wait4``'s ru_maxrss) and its stderr."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _LAUNCHER, *argv],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
    assert out.strip().isdigit(), f"the command did not finish: {err[-300:]!r}"
    return int(out) * 1024, err


@pytest.mark.parametrize("framing", ["length", "chunked"])
@pytest.mark.parametrize("client", ["a2a", "mcp"])
def test_roost_as_a_client_does_not_buffer_an_unbounded_answer(tmp_path, client, framing):
    """The A2A client (``roost a2a send``, and the daemon's external agents) and the MCP
    HTTP client (``[[mcp_servers]]`` type http) read a peer's whole body before checking
    its size (MCP: "over the 10 MB limit" — after holding all of it): a peer answering
    512 MiB took the CLI to ~1.5 GB; a few GiB kill the daemon that talks to it."""
    server = ThreadingHTTPServer(
        ("127.0.0.1", 0), _HugeAnswer if framing == "length" else _HugeChunkedAnswer
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROOST_")}
    env["ROOST_HOME"] = str(tmp_path / "home")
    if client == "a2a":
        argv = [str(ROOST), "a2a", "send", url, "hi"]
    else:
        config = tmp_path / "roost.toml"
        config.write_text(
            "[agents]\nbundled = false\n[tools]\nallow_private_network = true\n"
            '[[mcp_servers]]\nname = "huge"\ntimeout_secs = 30\n[mcp_servers.transport]\n'
            f'type = "http"\nurl = "{url}/mcp"\n'
        )
        argv = [str(ROOST), "--config", str(config), "tools"]
    try:
        peak, err = _peak_rss_of(argv, env)
    finally:
        server.shutdown()
        server.server_close()
    assert peak < 400 * MiB, (
        f"roost {client} client peaked at {peak // MiB} MiB for a 512 MiB answer: {err[-300:]!r}"
    )


# ---- a peer that sends a little more than the cap, then holds the connection open ----------

Answer = tuple[int, str, bytes, bool]  # status, content type, body, chunked (no Content-Length)
Route = Callable[[str, str, bytes], Answer]


async def _serve_one(stream: trio.SocketStream, route: Route) -> None:
    """Answer requests on one connection; after the first answer the route marks as too
    long, keep the connection open (the body never ends) until the test is over."""
    buffer = b""
    while True:
        while b"\r\n\r\n" not in buffer:
            data = await stream.receive_some(65536)
            if not data:
                return
            buffer += data
        head, _, buffer = buffer.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, path, _ = lines[0].split(" ", 2)
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)
        while len(buffer) < length:
            buffer += await stream.receive_some(65536)
        body, buffer = buffer[:length], buffer[length:]
        status, ctype, answer, endless = route(method, path, body)
        framing = "Transfer-Encoding: chunked" if endless else f"Content-Length: {len(answer)}"
        await stream.send_all(
            f"HTTP/1.1 {status} X\r\nContent-Type: {ctype}\r\n{framing}\r\n\r\n".encode()
        )
        if not endless:
            await stream.send_all(answer)
            continue
        for start in range(0, len(answer), MiB):
            piece = answer[start : start + MiB]
            await stream.send_all(b"%x\r\n%s\r\n" % (len(piece), piece))
        await trio.sleep_forever()  # the answer never ends


async def _peer(nursery: trio.Nursery, route: Route) -> str:
    listeners = await nursery.start(
        partial(trio.serve_tcp, lambda s: _serve_one(s, route), 0, host="127.0.0.1")
    )
    return f"http://127.0.0.1:{listeners[0].socket.getsockname()[1]}"


def _card(port_url: str, *, streaming: bool = False) -> bytes:
    return json.dumps(
        {
            "name": "peer",
            "description": "a test peer",
            "version": "1",
            "supportedInterfaces": [
                {"url": f"{port_url}/rpc", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
            ],
            "capabilities": {"streaming": streaming},
            "defaultInputModes": ["text/plain"],
            "defaultOutputModes": ["text/plain"],
            "skills": [],
        }
    ).encode()


def _client() -> A2AClient:
    return A2AClient(allow_private=True, allow_loopback=True, timeout=60)


async def _fails_at_once(call: Awaitable, error: type[Exception]) -> str:
    with trio.fail_after(15):  # the peer never ends its answer: only a cap returns
        with pytest.raises(error) as caught:
            await call
    return str(caught.value)


async def test_an_agent_card_over_its_cap_fails_at_once_naming_the_limit(nursery):
    base = await _peer(
        nursery,
        lambda method, path, body: (200, "application/json", b" " * (MAX_CARD_BYTES + 1), True),
    )
    async with _client() as client:
        message = await _fails_at_once(client.discover(base), A2AClientError)
    assert f"{base}/.well-known/agent-card.json" in message and "1 MiB" in message, message


async def test_a_jsonrpc_answer_over_its_cap_fails_at_once_naming_the_limit(nursery):
    base = ""

    def route(method: str, path: str, body: bytes) -> Answer:
        if method == "GET":
            return 200, "application/json", _card(base), False
        return 200, "application/json", b" " * (MAX_ANSWER_BYTES + 1), True

    base = await _peer(nursery, route)
    async with _client() as client:
        message = await _fails_at_once(client.send(base, "hi"), A2AClientError)
    assert f"{base}/rpc" in message and f"{MAX_ANSWER_BYTES // MiB} MiB" in message, message


async def test_an_a2a_sse_event_over_its_cap_fails_at_once_naming_the_limit(nursery):
    base = ""

    def route(method: str, path: str, body: bytes) -> Answer:
        if method == "GET":
            return 200, "application/json", _card(base, streaming=True), False
        return 200, "text/event-stream", b"data: " + b"x" * (MAX_ANSWER_BYTES + 1), True

    base = await _peer(nursery, route)

    async def follow() -> None:
        async with _client() as client:
            async for _event in client.stream(base, "hi"):
                pass

    message = await _fails_at_once(follow(), A2AClientError)
    assert (
        f"{base}/rpc" in message
        and "SSE event" in message
        and f"{MAX_ANSWER_BYTES // MiB} MiB" in message
    ), message


async def test_an_a2a_sse_event_may_hold_a_line_separator(nursery):
    """SSE ends lines at CR and LF only; the A2A client's own reader (``aiter_lines``)
    also split on U+2028 and lost the event's JSON."""
    base = ""
    text = "one\u2028two"
    event = {
        "jsonrpc": "2.0",
        "id": 1,
        "result": {"message": {"messageId": "m1", "role": "ROLE_AGENT", "parts": [{"text": text}]}},
    }

    def route(method: str, path: str, body: bytes) -> Answer:
        if method == "GET":
            return 200, "application/json", _card(base, streaming=True), False
        data = json.dumps(event, ensure_ascii=False).encode()
        return 200, "text/event-stream", b"data: " + data + b"\n\n", False

    base = await _peer(nursery, route)
    with trio.fail_after(15):
        async with _client() as client:
            events = [e async for e in client.stream(base, "hi")]
    assert [e.text() for e in events] == [text]


async def test_an_a2a_error_body_is_read_only_in_part(nursery):
    base = ""

    def route(method: str, path: str, body: bytes) -> Answer:
        if method == "GET":
            return 200, "application/json", _card(base), False
        return 500, "text/plain", b"broken " * (1 << 18), True

    base = await _peer(nursery, route)
    async with _client() as client:
        message = await _fails_at_once(client.send(base, "hi"), A2AClientError)
    assert "HTTP 500" in message and "broken" in message, message


async def test_an_mcp_json_answer_over_its_cap_fails_at_once_naming_the_limit(nursery):
    base = await _peer(
        nursery,
        lambda method, path, body: (200, "application/json", b" " * (MAX_MESSAGE_BYTES + 1), True),
    )
    with trio.fail_after(15):
        async with open_http_transport(
            base + "/mcp", name="big", allow_private=True, allow_loopback=True
        ) as transport:
            await transport.send({"jsonrpc": "2.0", "id": 1, "method": "ping"})
            answer = await transport.incoming.receive()
    message = answer["error"]["message"]
    assert answer["id"] == 1 and f"{base}/mcp" in message and "10 MiB" in message, message


async def test_an_mcp_sse_event_over_its_cap_fails_at_once_naming_the_limit(nursery):
    base = await _peer(
        nursery,
        lambda method, path, body: (
            200,
            "text/event-stream",
            b"data: " + b"x" * (MAX_MESSAGE_BYTES + 1),
            True,
        ),
    )
    with trio.fail_after(15):
        async with open_http_transport(
            base + "/mcp", name="big", allow_private=True, allow_loopback=True
        ) as transport:
            await transport.send({"jsonrpc": "2.0", "id": 1, "method": "ping"})
            answer = await transport.incoming.receive()
    message = answer["error"]["message"]
    assert (
        answer["id"] == 1
        and "SSE event" in message
        and f"{base}/mcp" in message
        and "10 MiB" in message
    ), message


async def test_an_mcp_notification_refused_with_an_endless_body_fails_at_once(nursery):
    base = await _peer(
        nursery, lambda method, path, body: (500, "text/plain", b"broken " * (1 << 18), True)
    )
    with trio.fail_after(15):
        async with open_http_transport(
            base + "/mcp", name="big", allow_private=True, allow_loopback=True
        ) as transport:
            with pytest.raises(TransportError) as caught:
                await transport.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    assert "HTTP 500" in str(caught.value) and "broken" in str(caught.value), caught.value


async def test_a_model_answer_over_its_cap_fails_at_once_naming_the_limit(nursery):
    base = await _peer(
        nursery,
        lambda method, path, body: (
            200,
            "application/json",
            b" " * (MAX_MODEL_ANSWER_BYTES + 1),
            True,
        ),
    )
    settings = ProviderSettings(provider="openai", base_url=base, api_key_env=None, max_retries=0)
    message = await _fails_at_once(
        HttpClient(settings, {}).post_json(base + "/v1/chat/completions", {}), ProviderResponseError
    )
    assert base in message and f"{MAX_MODEL_ANSWER_BYTES // MiB} MiB" in message, message


async def test_a_webhook_answer_is_not_read(nursery):
    """A push webhook's answer body means nothing to roost: a 2xx is a delivery, however
    long the body that follows (main read all of it first, and waited for its end)."""
    base = await _peer(
        nursery, lambda method, path, body: (200, "text/plain", b"ok " * (1 << 20), True)
    )
    from roost.plugins.a2a import _models as m

    dispatcher = PushDispatcher(
        None, PushSettings(allow_private=True, allow_loopback=True, timeout_s=60, retries=1)
    )
    config = m.PushConfig(task_id="t1", id="c1", url=base + "/hook")
    with trio.fail_after(15):
        assert await dispatcher.deliver(Delivery(config, {"statusUpdate": {}}))


async def _declaring_peer(nursery: trio.Nursery, length: bytes) -> str:
    """A peer whose every answer declares ``Content-Length: length`` and then sends 2 bytes
    and holds the connection open."""

    async def serve(stream: trio.SocketStream) -> None:
        while b"\r\n\r\n" not in await stream.receive_some(65536):
            pass
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
        await stream.send_all(head + length + b"\r\n\r\n{}")
        await trio.sleep_forever()

    listeners = await nursery.start(partial(trio.serve_tcp, serve, 0, host="127.0.0.1"))
    return f"http://127.0.0.1:{listeners[0].socket.getsockname()[1]}"


@pytest.mark.parametrize(
    "length",
    ["١٢".encode(), "²".encode("latin-1"), b"+2", b"1_000", b"-1", b"1e3", b"9" * 5000, b""],
)
async def test_a_peer_declaring_a_content_length_not_in_ascii_digits_fails_at_once(nursery, length):
    base = await _declaring_peer(nursery, length)
    async with _client() as client:
        message = await _fails_at_once(client.discover(base), A2AClientError)
    assert message.startswith(f"cannot reach {base}/.well-known/agent-card.json"), message
    assert "Content-Length" in message, message


async def test_a_peer_declaring_more_than_the_cap_in_20_digits_fails_before_reading(nursery):
    # The most digits h11 passes on: read as a number, over the cap, refused unread.
    base = await _declaring_peer(nursery, b"9" * 20)
    async with _client() as client:
        message = await _fails_at_once(client.discover(base), A2AClientError)
    assert f"{base}/.well-known/agent-card.json" in message and "1 MiB" in message, message


async def _declaring_h2_peer(nursery: trio.Nursery, length: bytes) -> str:
    """An HTTP/2 peer (prior knowledge) whose every answer declares ``Content-Length: length``,
    then sends 2 bytes and holds the stream open."""

    async def serve(stream: trio.SocketStream) -> None:
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
        conn.initiate_connection()
        while data := await stream.receive_some(65536):
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.RequestReceived):
                    head = [(":status", "200"), ("content-type", "application/json")]
                    conn.send_headers(event.stream_id, [*head, ("content-length", length)])
                    conn.send_data(event.stream_id, b"{}")
            await stream.send_all(conn.data_to_send())

    listeners = await nursery.start(partial(trio.serve_tcp, serve, 0, host="127.0.0.1"))
    return f"http://127.0.0.1:{listeners[0].socket.getsockname()[1]}"


async def test_an_h2_peer_declaring_30_digits_fails_over_the_cap_not_with_invalid_input(nursery):
    # Regression: h2 (a client given an HTTP/2 transport) passes a Content-Length of any number
    # of digits (h11 stops at 20); read_body's parse_int refused 30 with InvalidInput, which
    # no caller expects, instead of ResponseTooLarge: more than any cap.
    base = await _declaring_h2_peer(nursery, "9" * 30)
    transport = httpx.AsyncHTTPTransport(http1=False, http2=True)
    async with A2AClient(allow_private=True, allow_loopback=True, transport=transport) as client:
        message = await _fails_at_once(client.discover(base), A2AClientError)
    assert f"{base}/.well-known/agent-card.json" in message and "1 MiB" in message, message
