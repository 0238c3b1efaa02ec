"""roost's MCP client against servers nobody here wrote: the official `mcp` SDK (stdio,
Streamable HTTP in both eras, HTTP+SSE) and `mcp-server-time` from PyPI."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
import trio
from roost.plugins.mcp._client import ClientOptions, McpProtocolError, open_mcp_client, probe_era
from roost.plugins.mcp.transports.http import open_http_transport
from roost.plugins.mcp.transports.sse import open_sse_transport
from roost.plugins.mcp.transports.stdio import open_stdio_transport
from waiting import wait_until_sync

SDK_SERVER = str(Path(__file__).parents[2] / "fixtures" / "mcp" / "sdk_server.py")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_sdk_server(mode: str):
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, SDK_SERVER, mode, str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def listening() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"the SDK {mode} server exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return True
        except OSError:
            return False

    try:
        wait_until_sync(listening, f"the SDK {mode} server listening", timeout=20)
    except BaseException:
        proc.kill()
        proc.wait(5)
        raise
    return proc, port


@pytest.fixture(scope="module")
def sdk_http():
    proc, port = start_sdk_server("streamable-http")
    yield f"http://127.0.0.1:{port}/mcp"
    proc.terminate()
    proc.wait(10)


@pytest.fixture(scope="module")
def sdk_sse():
    proc, port = start_sdk_server("sse")
    yield f"http://127.0.0.1:{port}/sse"
    proc.terminate()
    proc.wait(10)


async def exercise(client):
    names = [t["name"] for t in await client.list_tools()]
    assert {"echo", "add-numbers", "steps"} <= set(names)
    assert (await client.call_tool("echo", {"text": "héllo"}))["content"][0]["text"] == "héllo"
    assert (await client.call_tool("add-numbers", {"a": 2, "b": 40}))["content"][0]["text"] == "42"
    progress = []
    result = await client.call_tool(
        "steps", {"count": 3}, on_progress=lambda p: progress.append(p["progress"])
    )
    assert result["content"][0]["text"] == "did 3 steps"
    assert progress == [1, 2, 3]
    bad = await client.call_tool("add-numbers", {"a": "x"})
    assert bad["isError"] is True
    resources = await client.list_resources()
    assert [r["uri"] for r in resources] == ["fixture://greeting"]
    read = await client.read_resource("fixture://greeting")
    assert read["contents"][0]["text"] == "hello from the fixture"
    prompt = await client.get_prompt("greet", {"name": "Ada"})
    assert "Ada" in prompt["messages"][0]["content"]["text"]


@pytest.mark.parametrize(
    "protocol, era",
    [("2025-11-25", "handshake"), ("2025-03-26", "handshake"), ("2026-07-28", "modern")],
)
async def test_sdk_server_over_stdio(protocol, era):
    notes = []
    options = ClientOptions(protocol=protocol, on_notification=lambda m, p: notes.append((m, p)))
    async with open_stdio_transport(sys.executable, [SDK_SERVER, "stdio"], name="sdk") as transport:
        async with open_mcp_client(transport, options) as client:
            assert (client.era, client.protocol_version) == (era, protocol)
            assert client.server_info["name"] == "sdk-fixture"
            await exercise(client)
            await client.ping()
    assert ("notifications/message", {"level": "info", "data": "starting steps"}) in [
        (m, {k: p[k] for k in ("level", "data") if k in p}) for m, p in notes
    ]


async def test_sdk_stdio_server_probes_as_modern_and_auto_uses_it():
    async with open_stdio_transport(sys.executable, [SDK_SERVER, "stdio"], name="sdk") as transport:
        assert await probe_era(transport, timeout=10) == "modern"
    async with open_stdio_transport(sys.executable, [SDK_SERVER, "stdio"], name="sdk") as transport:
        async with open_mcp_client(transport, ClientOptions(), era="modern") as client:
            assert client.era == "modern"
            await exercise(client)


async def test_sdk_input_required_round_trip_answered_by_the_elicitation_hook():
    async def elicit(params, context):
        assert params["message"] == "your name?"
        return {"action": "accept", "content": {"name": "Ada"}}

    options = ClientOptions(protocol="2026-07-28", elicitation=elicit)
    async with open_stdio_transport(sys.executable, [SDK_SERVER, "stdio"], name="sdk") as transport:
        async with open_mcp_client(transport, options) as client:
            assert (await client.call_tool("ask_name"))["content"][0]["text"] == "hello Ada"


async def test_sdk_timeout_then_connection_still_usable():
    async with open_stdio_transport(sys.executable, [SDK_SERVER, "stdio"], name="sdk") as transport:
        async with open_mcp_client(transport, ClientOptions(protocol="2025-11-25")) as client:
            from roost.plugins.mcp._client import McpTimeout

            with pytest.raises(McpTimeout):
                await client.call_tool("slow", {"seconds": 30}, timeout=0.3)
            assert (await client.call_tool("echo", {"text": "still here"}))["content"][0][
                "text"
            ] == "still here"


@pytest.mark.parametrize(
    "protocol, era", [("auto", "modern"), ("2025-11-25", "handshake"), ("2026-07-28", "modern")]
)
async def test_sdk_server_over_streamable_http(sdk_http, protocol, era):
    async with open_http_transport(
        sdk_http, name="sdk", allow_loopback=True, timeout_secs=10
    ) as transport:
        async with open_mcp_client(transport, ClientOptions(protocol=protocol)) as client:
            assert client.era == era
            assert (transport.session_id is not None) == (era == "handshake")
            await exercise(client)


async def test_sdk_server_over_legacy_http_sse(sdk_sse):
    async with open_sse_transport(
        sdk_sse, name="sdk", allow_loopback=True, timeout_secs=10
    ) as transport:
        assert transport.endpoint.startswith(sdk_sse.rsplit("/", 1)[0])
        async with open_mcp_client(transport, ClientOptions(protocol="auto")) as client:
            assert client.era == "handshake"
            await exercise(client)


async def test_mcp_server_time_over_stdio():
    async with open_stdio_transport(
        sys.executable, ["-m", "mcp_server_time", "--local-timezone", "UTC"], name="time"
    ) as transport:
        async with open_mcp_client(transport, ClientOptions(protocol="2025-11-25")) as client:
            names = sorted(t["name"] for t in await client.list_tools())
            assert names == ["convert_time", "get_current_time"]
            result = await client.call_tool(
                "convert_time",
                {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"},
            )
            assert "Asia/Tokyo" in result["content"][0]["text"]
            bad = await client.call_tool("get_current_time", {"timezone": "Not/AZone"})
            assert bad["isError"] is True


async def test_unknown_tool_on_the_sdk_server_is_an_error_not_a_hang():
    async with open_stdio_transport(sys.executable, [SDK_SERVER, "stdio"], name="sdk") as transport:
        async with open_mcp_client(transport, ClientOptions(protocol="2025-11-25")) as client:
            with trio.fail_after(10):
                try:
                    result = await client.call_tool("no_such_tool")
                except McpProtocolError as exc:
                    assert "no_such_tool" in str(exc)
                else:
                    assert result["isError"] is True
