"""MCP messages up to 10 MB over the daemon's HTTP endpoints (the daemon's own cap is 1 MiB)."""

from __future__ import annotations

import httpx
import pytest
from roost.plugins.http import open_daemon
from roost.plugins.mcp import _protocol as p
from test_mcp_http_server import open_session, sse_messages


@pytest.fixture
async def base_url(kernel):
    async with open_daemon(kernel) as url:
        yield url


def echo_call(request_id: int, text: str) -> dict:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": text}},
    }


async def test_message_over_the_daemon_cap_but_under_10_mb_is_served(base_url, kernel):
    assert kernel.config.http.max_body_bytes < 3_000_000
    big = "x" * 3_000_000
    async with httpx.AsyncClient(timeout=30) as client:
        headers = await open_session(client, base_url)
        r = await client.post(base_url + "/mcp", json=echo_call(2, big), headers=headers)
    assert r.status_code == 200, r.text[:300]
    replies = [m for m in sse_messages(r.text) if m.get("id") == 2]
    text = replies[0]["result"]["content"][0]["text"]
    # The 3 MB body parsed and the tool ran (a cut body would be -32700); the kernel's
    # result policy then truncates the echo.
    assert text.startswith("echo:xxxx") and text.endswith("[output truncated]")


@pytest.mark.parametrize("path", ["/mcp", "/agents/alpha/mcp"])
@pytest.mark.parametrize("streamed", [False, True], ids=["content-length", "chunked"])
async def test_oversize_mcp_message_is_rejected_with_json_rpc_413_and_the_session_survives(
    base_url, path, streamed
):
    body = (
        b'{"jsonrpc":"2.0","id":9,"method":"ping","params":{"pad":"'
        + b"x" * (p.MAX_MESSAGE_BYTES + 10)
        + b'"}}'
    )

    async def chunks():
        for start in range(0, len(body), 1 << 20):
            yield body[start : start + (1 << 20)]

    async with httpx.AsyncClient(timeout=30) as client:
        headers = await open_session(client, base_url, path)
        r = await client.post(
            base_url + path, content=chunks() if streamed else body, headers=headers
        )
        assert ("content-length" in r.request.headers) is not streamed
        assert r.status_code == 413, r.text[:300]
        error = r.json()["error"]
        assert r.json()["jsonrpc"] == "2.0"
        assert error["code"] == -32600
        assert "10 MB" in error["message"] and str(p.MAX_MESSAGE_BYTES) in error["message"]
        after = await client.post(
            base_url + path, json={"jsonrpc": "2.0", "id": 10, "method": "ping"}, headers=headers
        )
    assert after.status_code == 200
    assert after.json() == {"jsonrpc": "2.0", "id": 10, "result": {}}
