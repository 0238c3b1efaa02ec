"""Streamable HTTP and HTTP+SSE client transports: SSE parsing, error mapping, SSRF guard,
and the manager connecting to the official SDK's HTTP servers."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import trio
from roost.kernel import ToolCall, UrlRefused, default_config, open_kernel, parse_manifest
from roost.plugins.mcp._client_plugin import manager_for
from roost.plugins.mcp.transports.http import http_error_message, open_http_transport
from roost.plugins.mcp.transports.sse import (
    json_messages,
    open_sse_transport,
    same_origin,
)
from test_client_interop import sdk_http, sdk_sse  # noqa: F401  (module-scoped server fixtures)
from waiting import wait_until

sys.path.insert(0, str(Path(__file__).parents[2] / "fixtures"))
from peer_stub import running_stub  # noqa: E402


def test_json_messages_and_origins():
    assert json_messages('{"id":1}') == [{"id": 1}]
    assert json_messages('[{"id":1}, 2]') == [{"id": 1}]
    assert json_messages("nope") == []
    assert same_origin("http://a:80/x", "http://a/y")
    assert not same_origin("http://a/x", "http://b/x")
    assert not same_origin("http://a/x", "https://a/x")


def test_http_errors_become_json_rpc_errors_for_the_request():
    kept = http_error_message(
        4,
        400,
        b'{"jsonrpc":"2.0","id":null,"error":{"code":-32022,"message":"Unsupported","data":{"supported":["2026-07-28"]}}}',
    )
    assert kept == {
        "jsonrpc": "2.0",
        "id": 4,
        "error": {
            "code": -32022,
            "message": "HTTP 400 Bad Request: Unsupported",
            "data": {"supported": ["2026-07-28"], "httpStatus": 400},
        },
    }
    wrapped = http_error_message(5, 404, b"Not Found")
    assert wrapped["id"] == 5 and wrapped["error"]["code"] == -32000
    assert (
        wrapped["error"]["data"] == {"httpStatus": 404}
        and wrapped["error"]["message"] == "HTTP 404 Not Found: Not Found"
    )
    # roost's REST error shape (a string code) is not JSON-RPC: wrapped, its message kept.
    rest = http_error_message(
        6, 429, b'{"error":{"code":"rate_limited","message":"too many requests"}}', retry_after=1.0
    )
    assert rest["error"] == {
        "code": -32000,
        "message": "HTTP 429 Too Many Requests: too many requests",
        "data": {"httpStatus": 429, "retryAfter": 1.0},
    }
    html = http_error_message(
        7,
        500,
        b"<html><head><title>Oops</title><style>p{}</style></head>"
        b"<body><p>it broke</p></body></html>",
    )
    assert html["error"]["message"] == "HTTP 500 Internal Server Error: Oops it broke"
    assert (
        http_error_message(8, 403, b"", hint="set the key")["error"]["message"]
        == "HTTP 403 Forbidden (set the key)"
    )


@pytest.mark.parametrize(
    "url, rule",
    [
        ("http://169.254.169.254/mcp", "metadata"),
        ("http://127.0.0.1:9/mcp", "loopback"),
        ("http://10.0.0.1/mcp", "private"),
        ("file:///etc/passwd", None),
    ],
)
async def test_server_urls_are_checked_against_ssrf(url, rule):
    for opener in (open_http_transport, open_sse_transport):
        with pytest.raises(UrlRefused) as info:
            async with opener(url, name="x"):
                pass
        if rule:
            assert info.value.rule == rule
        if rule in ("loopback", "private"):
            assert "allow_local = true" in str(info.value)


async def test_session_ends_with_delete_and_a_dead_session_closes_the_connection(sdk_http):  # noqa: F811
    from roost.plugins.mcp._client import ClientOptions, McpConnectionClosed, open_mcp_client

    async with open_http_transport(sdk_http, allow_loopback=True, timeout_secs=10) as transport:
        async with open_mcp_client(transport, ClientOptions(protocol="2025-11-25")) as client:
            session = transport.session_id
            assert session
            transport.session_id = "not-a-session-the-server-knows"
            with trio.fail_after(10):
                with pytest.raises(McpConnectionClosed, match="ended the session"):
                    await client.list_tools()


def agent():
    return parse_manifest(
        {
            "name": "a",
            "description": "d",
            "model": {"provider": "scripted", "script": {"rules": []}},
            "capabilities": {"tools": ["mcp_*"]},
        }
    )


async def test_manager_connects_over_http_and_sse(tmp_path, sdk_http, sdk_sse):  # noqa: F811
    servers = [
        {"name": "web", "allow_local": True, "transport": {"type": "http", "url": sdk_http}},
        {"name": "old", "allow_local": True, "transport": {"type": "sse", "url": sdk_sse}},
        {"name": "blocked", "transport": {"type": "http", "url": sdk_http}},
    ]
    config = default_config(home=tmp_path / "home", agents={"bundled": False}, mcp_servers=servers)
    async with open_kernel(config, agents=[agent()]) as kernel:
        manager = manager_for(kernel)
        await wait_until(
            lambda: "mcp_web_echo" in kernel.registry and "mcp_old_echo" in kernel.registry,
            "both tools",
            timeout=20,
        )
        await wait_until(
            lambda: manager.states["blocked"].last_error, "the blocked server's error", timeout=20
        )
        assert "loopback" in manager.states["blocked"].last_error
        assert (
            await kernel.call_tool("a", ToolCall("mcp_web_add_numbers", {"a": 1, "b": 2}))
        ).as_text() == "3"
        assert (
            await kernel.call_tool("a", ToolCall("mcp_old_echo", {"text": "sse"}))
        ).as_text() == "sse"
        assert (
            "mcp_web_read_resource" in kernel.registry and "mcp_web_get_prompt" in kernel.registry
        )
        read = await kernel.call_tool(
            "a", ToolCall("mcp_web_read_resource", {"uri": "fixture://greeting"})
        )
        assert read.as_text() == "hello from the fixture"
        prompt = await kernel.call_tool(
            "a", ToolCall("mcp_old_get_prompt", {"name": "greet", "arguments": {"name": "Ada"}})
        )
        assert "Ada" in prompt.as_text()
        status = {c["name"]: c for c in manager.status()["connected"]}
        assert status["web"]["era"] == "modern" and status["old"]["era"] == "handshake"


def test_x_mcp_header_validation_and_mirroring():
    from roost.plugins.mcp.transports.http import mcp_param_headers, x_mcp_header_problem

    good = {
        "type": "object",
        "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "count": {"type": "integer", "x-mcp-header": "Count"},
            "nested": {
                "type": "object",
                "properties": {"flag": {"type": "boolean", "x-mcp-header": "Flag"}},
            },
            "plain": {"type": "string"},
        },
    }
    assert x_mcp_header_problem(good) is None
    headers = mcp_param_headers(
        good, {"region": "Hello, 世界", "count": 42, "nested": {"flag": False}, "plain": "x"}
    )
    assert headers == {
        "Mcp-Param-Region": "=?base64?SGVsbG8sIOS4lueVjA==?=",
        "Mcp-Param-Count": "42",
        "Mcp-Param-Flag": "false",
    }
    assert mcp_param_headers(good, {"region": None}) == {}
    bad = [
        {"type": "object", "properties": {"a": {"type": "number", "x-mcp-header": "A"}}},
        {"type": "object", "properties": {"a": {"type": "string", "x-mcp-header": ""}}},
        {"type": "object", "properties": {"a": {"type": "string", "x-mcp-header": "Bad Name"}}},
        {
            "type": "object",
            "properties": {
                "a": {"type": "string", "x-mcp-header": "X"},
                "b": {"type": "string", "x-mcp-header": "x"},
            },
        },
        {
            "type": "object",
            "properties": {
                "a": {"type": "array", "items": {"type": "string", "x-mcp-header": "A"}}
            },
        },
        {
            "type": "object",
            "anyOf": [{"properties": {"a": {"type": "string", "x-mcp-header": "A"}}}],
        },
    ]
    for schema in bad:
        assert x_mcp_header_problem(schema), schema


async def test_progress_and_logs_reach_the_event_stream(tmp_path, sdk_http):  # noqa: F811
    servers = [
        {
            "name": "web",
            "allow_local": True,
            "protocol": "2025-11-25",
            "transport": {"type": "http", "url": sdk_http},
        }
    ]
    config = default_config(home=tmp_path / "home", agents={"bundled": False}, mcp_servers=servers)
    async with open_kernel(config, agents=[agent()]) as kernel:
        await wait_until(lambda: "mcp_web_steps" in kernel.registry, "the steps tool", timeout=20)
        async with kernel.tap.subscribe(kinds=["MCP:PROGRESS", "MCP:LOG"]) as events:
            result = await kernel.call_tool("a", ToolCall("mcp_web_steps", {"count": 2}))
            assert result.as_text() == "did 2 steps"
            seen = []
            with trio.move_on_after(5):
                async for event in events:
                    seen.append(
                        (event.kind, event.payload.get("progress", event.payload.get("data")))
                    )
                    if len(seen) == 3:
                        break
        assert ("MCP:LOG", "starting steps") in seen
        assert ("MCP:PROGRESS", 1) in seen and ("MCP:PROGRESS", 2) in seen


async def test_global_allow_private_network_also_admits_loopback_servers(tmp_path, sdk_http):  # noqa: F811
    servers = [{"name": "web", "transport": {"type": "http", "url": sdk_http}}]
    config = default_config(
        home=tmp_path / "home",
        agents={"bundled": False},
        mcp_servers=servers,
        tools={"allow_private_network": True},
    )
    async with open_kernel(config, agents=[agent()]) as kernel:
        await wait_until(lambda: "mcp_web_echo" in kernel.registry, "the echo tool", timeout=20)


async def test_a_tool_schema_nested_hundreds_deep_does_not_fail_the_server():
    """Regression: the x-mcp-header check recursed through a generator per level, so a
    schema json.loads admits (700 levels) raised RecursionError in list_tools and the
    server never connected."""
    from roost.plugins.mcp._client import ClientOptions, open_mcp_client

    options = ClientOptions(protocol="2025-11-25", timeout_secs=20)
    async with (
        running_stub(schema_depth=700) as base,
        open_http_transport(f"{base}/mcp", allow_loopback=True, timeout_secs=20) as transport,
        open_mcp_client(transport, options) as client,
    ):
        with trio.fail_after(20):
            tools = await client.list_tools()
    assert [t["name"] for t in tools] == ["echo", "deep"]


async def test_transport_repr_hides_configured_headers_and_url_credentials():
    # A server's configured headers are secrets (ServerConfig keeps them out of its repr) and
    # a URL may carry user info: a transport's repr (a log line, a traceback) shows neither.
    url = "http://alice:url-s3cret@127.0.0.1:9/mcp"
    headers = {"Authorization": "Bearer header-s3cret"}
    with trio.fail_after(10):
        async with open_http_transport(url, headers=headers, allow_loopback=True) as transport:
            shown = repr(transport)
    assert transport.headers == headers  # kept, only not shown
    assert "header-s3cret" not in shown
    assert "url-s3cret" not in shown
