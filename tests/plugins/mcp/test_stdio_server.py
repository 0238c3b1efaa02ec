"""``roost mcp``: the stdio server in-process (byte streams) and as a real subprocess,
including the bridge to a running daemon."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio
import trio.testing
from mcp_server_fixtures import INITIALIZE
from roost.plugins.http import open_daemon
from roost.plugins.mcp._stdio_server import serve_kernel_stdio

ROOST = Path(sys.executable).parent / "roost"


def line(message) -> bytes:
    return json.dumps(message).encode() + b"\n"


def tool_call(request_id, name: str, arguments: dict) -> dict:
    """A ``tools/call`` request of tool ``name``."""
    params = {"name": name, "arguments": arguments}
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


class StreamClient:
    """Reads framed replies from a byte stream."""

    def __init__(self, stream):
        self.stream = stream
        self.buffer = b""

    async def send(self, data: bytes):
        await self.stream.send_all(data)

    async def read_line(self):
        with trio.fail_after(10):
            while b"\n" not in self.buffer:
                chunk = await self.stream.receive_some(65536)
                assert chunk, "the server closed its output"
                self.buffer += chunk
        raw, _, self.buffer = self.buffer.partition(b"\n")
        return json.loads(raw)

    async def read_until_id(self, request_id):
        while True:
            message = await self.read_line()
            if message.get("id") == request_id:
                return message


@asynccontextmanager
async def piped_server(kernel):
    """``serve_kernel_stdio`` on real pipes, past ``initialize``: yields (a client reading
    its output, the stream writing its input); every pipe end closed after."""
    r1, w1 = os.pipe()
    r2, w2 = os.pipe()
    server_in, client_out = trio.lowlevel.FdStream(r1), trio.lowlevel.FdStream(w1)
    client_in, server_out = trio.lowlevel.FdStream(r2), trio.lowlevel.FdStream(w2)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve_kernel_stdio, kernel, server_in, server_out)
            client = StreamClient(client_in)
            await client_out.send_all(line(INITIALIZE))
            await client.read_until_id(INITIALIZE["id"])
            yield client, client_out
            nursery.cancel_scope.cancel()
    finally:
        for stream in (server_in, client_out, client_in, server_out):
            await stream.aclose()


async def test_stdio_answers_ndjson_and_survives_garbage_and_oversize(kernel):
    client_stream, server_stream = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve_kernel_stdio, kernel, server_stream, server_stream)
        client = StreamClient(client_stream)
        await client.send(line(INITIALIZE))
        assert (await client.read_line())["result"]["serverInfo"]["name"] == "roost"
        await client.send(b"this is not json\n")
        error = await client.read_line()
        assert error["id"] is None and error["error"]["code"] == -32700
        await client.send(
            b'{"jsonrpc":"2.0","id":2,"method":"ping","params":{"pad":"'
            + b"x" * (10 * 1024 * 1024)
            + b'"}}\n'
        )
        error = await client.read_line()
        assert error["error"]["code"] == -32600 and "over the limit" in error["error"]["message"]
        await client.send(line({"jsonrpc": "2.0", "id": 3, "method": "ping"}))
        assert (await client.read_until_id(3))["result"] == {}
        await client.send(line([{"jsonrpc": "2.0", "id": 4, "method": "ping"}]))
        assert (await client.read_line())["error"]["code"] == -32600  # no batches
        nursery.cancel_scope.cancel()


async def test_stdio_answers_a_content_length_peer_in_that_framing(kernel):
    client_stream, server_stream = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve_kernel_stdio, kernel, server_stream, server_stream)
        body = json.dumps(INITIALIZE).encode()
        await client_stream.send_all(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        data = b""
        with trio.fail_after(10):
            while b"\r\n\r\n" not in data or len(data.split(b"\r\n\r\n", 1)[1]) < int(
                data.split(b"\r\n")[0].split(b":")[1]
            ):
                data += await client_stream.receive_some(65536)
        header, _, payload = data.partition(b"\r\n\r\n")
        assert header.lower().startswith(b"content-length:")
        assert json.loads(payload)["result"]["protocolVersion"] == "2025-11-25"
        nursery.cancel_scope.cancel()


async def _framed_answers(stream, count: int) -> list[dict]:
    """The next ``count`` Content-Length framed messages on ``stream``."""
    data, answers = b"", []
    with trio.fail_after(10):
        while len(answers) < count:
            head, sep, rest = data.partition(b"\r\n\r\n")
            length = int(head.split(b":")[1]) if sep else -1
            if 0 <= length <= len(rest):
                answers.append(json.loads(rest[:length]))
                data = rest[length:]
            else:
                data += await stream.receive_some(65536)
    return answers


@pytest.mark.parametrize(
    "declared", ["١٢", "²", "+2", " 2 x", "1_0", "-1", "1e1", "9" * 5000, "", "0x2"]
)
async def test_a_content_length_not_in_ascii_digits_is_refused_and_the_peer_served(
    kernel, declared
):
    # Regression: the header went to int(), which reads "+2", "1_0" and "١٢" (then swallowed
    # the bytes of the next message).
    def framed(message: dict) -> bytes:
        body = json.dumps(message).encode()
        return b"Content-Length: %d\r\n\r\n" % len(body) + body

    client_stream, server_stream = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve_kernel_stdio, kernel, server_stream, server_stream)
        await client_stream.send_all(framed(INITIALIZE))
        assert "result" in (await _framed_answers(client_stream, 1))[0]
        hostile = b"Content-Length: " + declared.encode() + b"\r\n\r\n"
        await client_stream.send_all(
            hostile + framed({"jsonrpc": "2.0", "id": 2, "method": "ping"})
        )
        refused, answered = await _framed_answers(client_stream, 2)
        assert refused["id"] is None and refused["error"]["code"] == -32700, refused
        assert "Content-Length" in refused["error"]["message"]
        assert answered == {"jsonrpc": "2.0", "id": 2, "result": {}}
        nursery.cancel_scope.cancel()


async def test_stdio_end_of_input_lets_requests_in_flight_answer(kernel):
    client_stream, server_stream = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve_kernel_stdio, kernel, server_stream, server_stream)
        client = StreamClient(client_stream)
        await client.send(line(INITIALIZE) + line(tool_call(2, "agent_beta", {"message": "bye"})))
        await client_stream.send_eof()
        assert (await client.read_until_id(2))["result"]["content"][0]["text"] == "beta:bye"


def write_config(tmp_path: Path, home: Path) -> Path:
    agent = tmp_path / "agents" / "solo" / "agent.json"
    agent.parent.mkdir(parents=True)
    agent.write_text(
        json.dumps(
            {
                "name": "solo",
                "description": "solo agent",
                "model": {
                    "provider": "scripted",
                    "script": {"rules": [], "default_reply": "solo: {message}"},
                },
                "mcp": {
                    "expose_tools": ["list", "read", "write"],
                    "private_tools": ["read", "write"],
                },
            }
        )
    )
    config = tmp_path / "roost.toml"
    config.write_text(
        f'home = "{home}"\n[agents]\ndirs = ["{tmp_path / "agents"}"]\nbundled = false\n'
    )
    return config


async def run_roost_mcp(config: Path, messages: list[dict], expect_ids: set, *, extra_args=()):
    """Spawn ``roost mcp``, send ``messages``, read until every id in ``expect_ids`` is
    answered; returns (every stdout line, decoded)."""
    if not ROOST.exists():
        pytest.skip("the roost console script is not installed (make install)")
    env = {"ROOST_CONFIG": str(config), "PATH": "/usr/bin:/bin"}
    async with trio.open_nursery() as nursery:
        process = await nursery.start(
            lambda task_status: trio.run_process(
                [str(ROOST), "mcp", *extra_args],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env=env,
                check=False,
                task_status=task_status,
            )
        )
        await process.stdin.send_all(b"".join(line(m) for m in messages))
        lines, buffer = [], b""
        with trio.fail_after(30):
            while expect_ids - {m.get("id") for m in lines}:
                chunk = await process.stdout.receive_some(65536)
                assert chunk, "roost mcp exited early"
                buffer += chunk
                while b"\n" in buffer:
                    raw, _, buffer = buffer.partition(b"\n")
                    lines.append(json.loads(raw))  # every stdout line is protocol: JSON
        await process.stdin.aclose()
        with trio.fail_after(15):
            await process.wait()
    return lines


async def test_roost_mcp_subprocess_keeps_stdout_clean_and_private_tools_out(tmp_path):
    config = write_config(tmp_path, tmp_path / "home")
    lines = await run_roost_mcp(
        config,
        [
            INITIALIZE,
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
            tool_call(3, "read", {"path": "x"}),
            tool_call(4, "solo_read", {"path": "x"}),
            tool_call(5, "agent_solo", {"message": "hi"}),
        ],
        {1, 2, 3, 4, 5},
        extra_args=("--no-daemon",),
    )
    by_id = {m.get("id"): m for m in lines}
    names = [t["name"] for t in by_id[2]["result"]["tools"]]
    assert names == ["agent_solo", "list"]
    assert by_id[3]["error"]["code"] == -32602 and by_id[4]["error"]["code"] == -32602
    assert by_id[5]["result"]["content"][0]["text"] == "solo: hi"


async def test_roost_mcp_bridges_to_a_running_daemon(kernel, tmp_path):
    # The daemon's kernel has the test plugin's tools (echo); a kernel booted by the
    # subprocess would not, so seeing echo proves the bridge.
    config = tmp_path / "bridge.toml"
    config.write_text(f'home = "{kernel.config.home}"\n[agents]\nbundled = false\n')
    async with open_daemon(kernel):
        lines = await run_roost_mcp(
            config,
            [
                INITIALIZE,
                {"jsonrpc": "2.0", "method": "notifications/initialized"},
                {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
                tool_call(3, "echo", {"text": "via daemon"}),
                tool_call(4, "secret", {}),
            ],
            {1, 2, 3, 4},
        )
    by_id = {m.get("id"): m for m in lines}
    assert by_id[1]["result"]["protocolVersion"] == "2025-11-25"
    names = [t["name"] for t in by_id[2]["result"]["tools"]]
    assert "echo" in names and "agent_alpha" in names and "secret" not in names
    assert by_id[3]["result"]["content"][0]["text"] == "echo:via daemon:alpha"
    assert by_id[4]["error"]["code"] == -32602


async def test_bridge_relays_each_json_event_of_a_daemon_sse_stream():
    import httpx
    from roost.plugins.mcp._stdio_server import _relay_sse

    async def body():
        for chunk in [
            ": keep-alive\r\n\r\nda",
            'ta: {"jsonrpc": "2.0", "method": "notifications/progress"}\r\n\r\n',
            "event: message\ndata: not json\n\n",
            'data: {"jsonrpc": "2.0",\ndata:  "id": 7, "result": {}}\n\n',
        ]:
            yield chunk.encode()

    got = []

    async def deliver(message):
        got.append(message)

    await _relay_sse(
        httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body()), deliver
    )
    assert got == [
        {"jsonrpc": "2.0", "method": "notifications/progress"},
        {"jsonrpc": "2.0", "id": 7, "result": {}},
    ]


async def test_a_cancel_read_with_its_request_in_one_burst_still_stops_it(kernel, tools_plugin):
    # Regression: the reader no longer yields between messages, so the request's task and
    # the cancel's could start in either order; a cancel handled first found nothing to
    # cancel and the request ran to the end and answered.
    for _ in range(10):  # Trio starts a batch of tasks in either order: try both often
        tools_plugin.sleepy_cancelled = trio.Event()
        tools_plugin.sleepy_started = trio.Event()
        async with piped_server(kernel) as (client, client_out):
            await client_out.send_all(
                line(tool_call("slow", "sleepy", {}))
                + line(
                    {
                        "jsonrpc": "2.0",
                        "method": "notifications/cancelled",
                        "params": {"requestId": "slow"},
                    }
                )
                + line({"jsonrpc": "2.0", "id": "after", "method": "ping"})
            )
            assert (await client.read_until_id("after"))["result"] == {}
            with trio.move_on_after(0.3):
                await tools_plugin.sleepy_cancelled.wait()
            # Stopped: either it never started, or it started and was cancelled.
            assert (
                tools_plugin.sleepy_cancelled.is_set() or not tools_plugin.sleepy_started.is_set()
            )


async def test_a_last_message_without_its_newline_is_answered_not_dropped(kernel):
    # Regression: when stdin ended inside a line (printf '{...}' | roost mcp), the bytes
    # held for that line were dropped without a word: no answer, no error. The last line
    # is read as a line (as the MCP SDKs read it), and garbage there is a parse error.
    for tail, check in (
        (b'{"jsonrpc":"2.0","id":2,"method":"ping"}', lambda m: m["result"] == {}),
        (b'{"jsonrpc":"2.0","id":2,"meth', lambda m: m["error"]["code"] == -32700),
    ):
        async with piped_server(kernel) as (client, client_out):
            await client_out.send_all(tail)
            await client_out.aclose()  # end of input inside the line
            assert check(await client.read_line()), tail


def test_a_reply_holding_a_lone_surrogate_goes_to_stdout_as_utf8_json():
    # Regression: encode_message used "surrogatepass", so a lone surrogate in a reply (a
    # plugin's resource text, say) reached stdout as the bytes ED A0 80, which are not
    # UTF-8 and so not JSON; it goes as the escape "\\ud800" JSON reads back as sent.
    from roost.plugins.mcp._stdio_server import encode_message

    reply = {"jsonrpc": "2.0", "id": 1, "result": {"text": "a\ud800b é"}}
    data = encode_message(reply)
    assert json.loads(data.decode("utf-8")) == reply  # strict UTF-8
    assert "é".encode() in data  # other text stays as it is, not escaped


async def test_a_cancel_read_in_one_burst_is_not_lost_when_the_id_comes_again(kernel, tools_plugin):
    # Regression: requests read but not started were kept as id -> "cancelled" flags, and
    # reading the id again reset its flag, so a request cancelled in the same burst ran
    # after all (and its reused id's second request was refused as in use).
    call = tool_call("dup", "sleepy", {})
    cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled"}
    cancel["params"] = {"requestId": "dup"}
    for _ in range(5):
        async with piped_server(kernel) as (client, client_out):
            ping = {"jsonrpc": "2.0", "id": "after", "method": "ping"}
            await client_out.send_all(line(call) + line(cancel) + line(call) + line(ping))
            seen = [await client.read_line()]
            while seen[-1].get("id") != "after":
                seen.append(await client.read_line())
            # The one "dup" that runs is cancelled now; nothing may have answered "dup".
            await client_out.send_all(line(cancel) + line({**ping, "id": "end"}))
            seen.append(await client.read_line())
            while seen[-1].get("id") != "end":
                seen.append(await client.read_line())
            assert [m for m in seen if m.get("id") == "dup"] == []


async def test_a_lone_surrogate_in_a_resource_uri_never_puts_invalid_utf8_on_stdout(kernel):
    # Regression: resources/read echoed its uri into its error, and a lone surrogate there
    # (JSON "\\ud800") went to stdout as the bytes ED A0 80, which are not UTF-8: the
    # client's reader failed on the line. Now refused, naming the field, in valid JSON.
    async with piped_server(kernel) as (client, client_out):
        read = {"jsonrpc": "2.0", "id": 2, "method": "resources/read"}
        await client_out.send_all(line({**read, "params": {"uri": "roost://nothing/\ud800"}}))
        with trio.fail_after(10):
            while b"\n" not in client.buffer:
                client.buffer += await client.stream.receive_some(65536)
        raw = client.buffer.partition(b"\n")[0]
        error = json.loads(raw.decode("utf-8"))["error"]  # strict (json.loads(bytes) is not)
        assert error["code"] == -32602 and error["data"] == {"field": "params.uri"}


def test_roost_mcp_answers_initialize_before_loading_the_heavy_kernel_modules(tmp_path):
    # What broke: `roost mcp` spent ~100 ms importing the whole kernel (manifests, the
    # agent loop, the store, jsonschema) before it answered initialize, and missed its
    # 300 ms start-up budget on a loaded machine. The CLI's steps, up to the first answer:
    config = write_config(tmp_path, tmp_path / "home")
    script = f"""
import json, sys, trio
from roost.kernel import load_config
from roost.plugins.mcp._stdio_server import _serve_booting

class Answered(Exception):
    pass

async def receive():
    return {INITIALIZE!r}

async def send(message):
    heavy = ["jsonschema", "sqlite3", "httpx", "werkzeug", "roost.kernel._kernel",
             "roost.kernel._manifest", "roost.kernel._policy", "roost.kernel._loop",
             "roost.kernel._store",
             "roost.kernel._plugins"]
    print(json.dumps({{"answer": message, "loaded": [m for m in heavy if m in sys.modules]}}))
    raise Answered

try:
    trio.run(_serve_booting, load_config({str(config)!r}), receive, send)
except Answered:
    pass
"""
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["answer"]["result"]["protocolVersion"] == "2025-11-25"
    assert report["loaded"] == []
