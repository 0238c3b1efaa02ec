"""roost's MCP client session against a hand-written server whose misbehaviour we choose.

The server (tests/fixtures/mcp/raw_server.py) is a real child process on stdio.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import trio
from roost.plugins.mcp._client import (
    ClientOptions,
    ClientProtocol,
    McpConnectionClosed,
    McpProtocolError,
    McpTimeout,
    open_mcp_client,
    probe_era,
)
from roost.plugins.mcp._protocol import META_SERVER_INFO
from roost.plugins.mcp.transports.stdio import open_stdio_transport

RAW = str(Path(__file__).parents[2] / "fixtures" / "mcp" / "raw_server.py")


def raw_server(mode="legacy", log_path=None, info=None):
    extra = {"RAW_SERVER_LOG": str(log_path)} if log_path else {}
    if info:
        extra["RAW_SERVER_INFO"] = info
    return open_stdio_transport(sys.executable, [RAW, mode], name="raw", extra_env=extra)


def logged(path):
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


async def test_handshake_and_paginated_tools_list():
    async with (
        raw_server() as transport,
        open_mcp_client(transport, ClientOptions(server_name="raw")) as client,
    ):
        assert client.era == "handshake"
        assert client.protocol_version == "2025-11-25"
        assert client.server_info["name"] == "raw"
        names = [t["name"] for t in await client.list_tools()]
        assert names[:2] == ["alpha", "Beta-Tool"]  # the second page was fetched
        result = await client.call_tool("alpha", {"text": "hi"})
        assert result["content"][0]["text"] == "alpha:hi"
        await client.ping()


async def test_a_huge_odd_server_info_is_kept_as_the_specs_fields_bounded():
    # Regression: serverInfo was kept whole, any size and keys (here 1.5 MB, nested 200
    # deep), and shown by GET /api/mcp/servers.
    async with (
        raw_server(info="odd") as transport,
        open_mcp_client(transport, ClientOptions(server_name="raw")) as client,
    ):
        info = client.server_info
        assert (await client.list_tools())[0]["name"] == "alpha"  # the session works on
    assert info == {
        "name": "n" * 256,
        "description": "d" * 2048,
        "icons": [
            {"src": "https://e.example/i.png", "sizes": ["48x48"]},
            *[{"src": "https://e.example/more.png"}] * 4,
        ],
    }


async def test_a_server_info_quoting_a_secret_across_its_cut_keeps_no_head_of_it():
    # Regression: serverInfo's texts were cut on arrival (title at 256, description at
    # 2,048 characters) and redacted later (GET /api/mcp/servers): a secret the cut went
    # through left its head, which no redaction finds. Redacted before the cut now.
    token = "tok-0123456789abcdef"
    extra = {
        "RAW_SECRET": token,
        "ROOST_TEST_INFO_QUOTES": "RAW_SECRET",
        "ROOST_TEST_INFO_PAD": "245",  # "x" * 245 + "raw (" + token: the cut at 256 in it
    }
    options = ClientOptions(server_name="raw", secrets=(token,))
    transport = open_stdio_transport(sys.executable, [RAW], name="raw", extra_env=extra)
    async with transport as transport, open_mcp_client(transport, options) as client:
        info = dict(client.server_info)
    assert info["title"] == "x" * 245 + "raw ([redac", info
    assert len(info["description"]) == 2048 and info["description"].endswith("raw ([red")
    # A modern result's _meta naming the server: the same.
    protocol = ClientProtocol(options)
    protocol.note_server_info({"_meta": {META_SERVER_INFO: {"name": "n" * 250 + token}}})
    assert protocol.server_info == {"name": "n" * 250 + "[redac"}


async def test_many_calls_in_flight_on_one_connection():
    async with raw_server() as transport, open_mcp_client(transport) as client:
        results = {}

        async def one(i):
            results[i] = await client.call_tool("alpha", {"text": str(i)})

        async with trio.open_nursery() as nursery:
            for i in range(32):
                nursery.start_soon(one, i)
        assert {i: r["content"][0]["text"] for i, r in results.items()} == {
            i: f"alpha:{i}" for i in range(32)
        }


async def test_server_that_never_answers_times_out_and_gets_cancelled(tmp_path):
    log_path = tmp_path / "received.jsonl"
    async with raw_server(log_path=log_path) as transport:
        async with open_mcp_client(transport, ClientOptions(timeout_secs=0.5)) as client:
            with pytest.raises(McpTimeout, match="did not answer tools/call within 0.5 s"):
                await client.call_tool("hang")
            # The connection is still usable afterwards.
            assert (await client.call_tool("alpha", {"text": "x"}))["content"][0][
                "text"
            ] == "alpha:x"
    messages = logged(log_path)
    hang_id = next(
        m["id"]
        for m in messages
        if m.get("method") == "tools/call" and m["params"]["name"] == "hang"
    )
    cancels = [m for m in messages if m.get("method") == "notifications/cancelled"]
    assert cancels and cancels[0]["params"]["requestId"] == hang_id
    assert cancels[0]["params"]["reason"] == "timeout"


async def test_cancelling_the_caller_sends_cancelled(tmp_path):
    log_path = tmp_path / "received.jsonl"
    async with raw_server(log_path=log_path) as transport:
        async with open_mcp_client(transport) as client:
            with trio.move_on_after(0.3):
                await client.call_tool("hang")
            await client.ping()  # ordered after the notification on the same pipe
    cancels = [m for m in logged(log_path) if m.get("method") == "notifications/cancelled"]
    assert cancels and cancels[0]["params"]["reason"] == "cancelled"


async def test_server_exiting_mid_call_fails_the_call_at_once():
    async with (
        raw_server() as transport,
        open_mcp_client(transport, ClientOptions(timeout_secs=60)) as client,
    ):
        with trio.fail_after(10):  # far below timeout_secs: the failure must not wait for it
            with pytest.raises(McpConnectionClosed, match="exited with code 5"):
                await client.call_tool("exit")
        with pytest.raises(McpConnectionClosed):
            await client.call_tool("alpha", {"text": "late"})


async def test_garbage_on_stdout_is_skipped():
    async with raw_server() as transport, open_mcp_client(transport) as client:
        result = await client.call_tool("garbage")
        assert result["content"][0]["text"] == "after garbage"
        assert transport.skipped_lines >= 500
        assert (await client.call_tool("alpha", {"text": "ok"}))["content"][0]["text"] == "alpha:ok"


async def test_nine_megabyte_message_arrives_and_eleven_is_dropped():
    async with (
        raw_server() as transport,
        open_mcp_client(transport, ClientOptions(timeout_secs=20)) as client,
    ):
        big = await client.call_tool("big")
        assert len(big["content"][0]["text"]) == 9 * 1024 * 1024
        small = await client.call_tool("huge")
        assert small["content"][0]["text"] == "small after huge"
        assert transport.oversized_lines == 1


async def test_sampling_is_refused_by_default():
    async with raw_server() as transport, open_mcp_client(transport) as client:
        result = await client.call_tool("sample")
        assert result["isError"] is True
        assert "sampling is disabled" in result["content"][0]["text"]


async def test_sampling_handler_answers_with_the_caller_known():
    seen = []

    async def sample(params, context):
        seen.append((context.caller, params["messages"][0]["content"]["text"]))
        return {
            "role": "assistant",
            "content": {"type": "text", "text": "Paris"},
            "model": "m",
            "stopReason": "endTurn",
        }

    options = ClientOptions(sampling=sample)
    async with raw_server() as transport, open_mcp_client(transport, options) as client:
        result = await client.call_tool("sample", caller="alice")
        assert result["content"][0]["text"] == "model said: Paris"
    assert seen == [("alice", "capital of France?")]


async def test_roots_are_offered_when_a_provider_is_set():
    options = ClientOptions(roots=lambda ctx: [{"uri": "file:///work/alice", "name": "alice"}])
    async with raw_server() as transport, open_mcp_client(transport, options) as client:
        result = await client.call_tool("roots", caller="alice")
        assert json.loads(result["content"][0]["text"]) == [
            {"uri": "file:///work/alice", "name": "alice"}
        ]


async def test_list_changed_notification_reaches_the_handler():
    notes = []
    options = ClientOptions(on_notification=lambda method, params: notes.append(method))
    async with raw_server() as transport, open_mcp_client(transport, options) as client:
        await client.call_tool("grow")
        assert "notifications/tools/list_changed" in notes
        assert "gamma" in [t["name"] for t in await client.list_tools()]


async def test_modern_server_input_required_round_trip(tmp_path):
    log_path = tmp_path / "received.jsonl"
    asked = []

    async def elicit(params, context):
        asked.append(params["message"])
        return {"action": "accept", "content": {"yes": True}}

    options = ClientOptions(protocol="2026-07-28", elicitation=elicit)
    async with (
        raw_server("modern", log_path) as transport,
        open_mcp_client(transport, options) as client,
    ):
        assert client.era == "modern"
        assert client.protocol_version == "2026-07-28"
        assert [t["name"] for t in await client.list_tools()] == ["alpha", "confirm", "grow"]
        result = await client.call_tool("confirm")
        assert result["content"][0]["text"] == 'state=st-1 action=accept content={"yes": true}'
    assert asked == ["sure?"]
    calls = [m for m in logged(log_path) if m.get("method") == "tools/call"]
    assert len(calls) == 2 and calls[0]["id"] != calls[1]["id"]
    assert (
        "inputResponses" not in calls[0]["params"] and calls[1]["params"]["requestState"] == "st-1"
    )
    for message in logged(log_path):
        if "id" in message:  # every request carries the per-request _meta
            meta = message["params"]["_meta"]
            assert meta["io.modelcontextprotocol/protocolVersion"] == "2026-07-28"
            assert meta["io.modelcontextprotocol/clientInfo"]["name"] == "roost"
            assert "io.modelcontextprotocol/clientCapabilities" in meta


async def test_modern_input_required_without_a_handler_is_a_clear_error():
    options = ClientOptions(protocol="2026-07-28")
    async with raw_server("modern") as transport, open_mcp_client(transport, options) as client:
        with pytest.raises(McpProtocolError, match="needs elicitation/create"):
            await client.call_tool("confirm")


async def test_handshake_client_against_modern_only_server_fails_clearly():
    async with raw_server("modern") as transport:
        with pytest.raises(McpProtocolError, match="initialize is not supported"):
            async with open_mcp_client(transport, ClientOptions(protocol="2025-11-25")):
                pass


async def test_probe_finds_each_era_and_never_confuses_a_strict_legacy_server():
    async with raw_server("modern") as transport:
        assert await probe_era(transport, timeout=3) == "modern"
    async with raw_server("legacy") as transport:
        assert await probe_era(transport, timeout=3) == "legacy"
    async with raw_server("strict-legacy") as transport:
        # It exits on the unexpected first message: that is a legacy signal, not a crash.
        assert await probe_era(transport, timeout=3) == "legacy"
    # ...and a fresh process opened with initialize works.
    async with (
        raw_server("strict-legacy") as transport,
        open_mcp_client(transport, era="legacy") as client,
    ):
        assert client.era == "handshake"
        assert (await client.call_tool("alpha", {"text": "ok"}))["content"][0]["text"] == "alpha:ok"


def test_protocol_core_builds_and_checks_messages():
    core = ClientProtocol(ClientOptions(protocol="2025-06-18"))
    assert core.initialize_params()["protocolVersion"] == "2025-06-18"
    with pytest.raises(McpProtocolError, match="configured but the server speaks"):
        core.accept_initialize({"protocolVersion": "2025-11-25", "capabilities": {}})
    with pytest.raises(McpProtocolError, match="does not support"):
        ClientProtocol(ClientOptions()).accept_initialize({"protocolVersion": "1999-01-01"})
    modern = ClientProtocol(ClientOptions())
    with pytest.raises(McpProtocolError, match="none of roost's modern versions"):
        modern.accept_discover({"supportedVersions": ["2030-01-01"]})
    assert (
        modern.accept_discover(
            {"supportedVersions": ["2025-11-25", "2026-07-28"], "capabilities": {"tools": {}}}
        )
        == "2026-07-28"
    )
    params = modern.decorate({"name": "x", "_meta": {"traceparent": "t"}})
    assert params["_meta"]["traceparent"] == "t"
    assert params["_meta"]["io.modelcontextprotocol/protocolVersion"] == "2026-07-28"
    retry = ClientProtocol.retry_params(
        {"name": "x", "requestState": "old"}, {"resultType": "input_required"}, {}
    )
    assert "requestState" not in retry  # not echoed when the server sent none


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("protocol", "2020-01-01", "protocol: expected one of auto"),
        ("timeout_secs", 0, "timeout_secs: expected a positive number"),
        ("timeout_secs", True, "timeout_secs: expected a positive number"),  # was 1 s
        ("timeout_secs", float("inf"), "timeout_secs: expected a positive number"),  # no deadline
        ("timeout_secs", float("nan"), "timeout_secs: expected a positive number"),
        ("timeout_secs", "5", "timeout_secs: expected a positive number"),
        ("log_level", "loud", "log_level: expected one of"),
    ],
)
def test_bad_client_options_name_the_field(field, value, message):
    with pytest.raises(ValueError, match=message):
        ClientOptions(**{field: value})
