"""A configured peer's URL is shown without its credentials (issue 15, item 15).

Regression: an MCP server's or external A2A agent's URL may hold credentials
(``https://user:secret@host/mcp?api_key=...``), and ``GET /api/mcp/servers``, ``GET
/api/a2a/external_agents`` (so the dashboard and ``roost agents``), their error messages
("cannot reach …", "refused to fetch …"), a tool's error result and the daemon's logs
showed it whole to any principal. Now each shows the URL without user info, query or
fragment (``public_url``). Real daemon on 127.0.0.1, a real peer process, real sockets.
"""

from __future__ import annotations

import json
import logging
import socket
import sys
from pathlib import Path

import httpx
from roost.kernel import ToolCall, default_config, open_kernel
from roost.plugins.cli._commands import _pending_peer_lines
from roost.plugins.http import open_daemon
from waiting import wait_until

sys.path.insert(0, str(Path(__file__).parents[1] / "fixtures"))
from peer_stub import running_stub  # noqa: E402

SECRETS = ("mcp-pass-0123", "mcp-key-4567", "a2a-pass-89ab", "a2a-key-cdef")


def closed_port() -> int:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return port


def config(tmp_path: Path, closed: int, stub: str):
    mcp_auth, a2a_auth = "mcpuser:mcp-pass-0123@", "a2auser:a2a-pass-89ab@"
    mcp_down = f"http://{mcp_auth}127.0.0.1:{closed}"
    servers = [
        {
            "name": "keyed_http",
            "transport": {"type": "http", "url": f"{mcp_down}/mcp?api_key=mcp-key-4567#frag"},
            "timeout_secs": 2,
        },
        {
            "name": "keyed_sse",
            "transport": {"type": "sse", "url": f"{mcp_down}/sse?api_key=mcp-key-4567"},
            "timeout_secs": 2,
        },
        {  # refused before any connection: an instance-metadata address
            "name": "keyed_metadata",
            "transport": {
                "type": "http",
                "url": f"http://{mcp_auth}169.254.169.254/mcp?api_key=mcp-key-4567",
            },
        },
    ]
    stub_port = stub.rsplit(":", 1)[1]
    externals = [
        {"name": "down", "url": f"http://{a2a_auth}127.0.0.1:{closed}/?api_key=a2a-key-cdef"},
        {"name": "metadata", "url": f"http://{a2a_auth}169.254.169.254/?api_key=a2a-key-cdef"},
        # Its card names its endpoint relative to the card's URL, user info and all.
        {"name": "stub", "url": f"http://{a2a_auth}127.0.0.1:{stub_port}/?api_key=a2a-key-cdef"},
    ]
    return default_config(
        home=str(tmp_path / "home"),
        agents={"bundled": False},
        http={"port": 0},
        mcp_servers=servers,
        a2a={"external_agents": externals},
    )


def assert_no_secret(text: str, where: str) -> None:
    for secret in SECRETS:
        assert secret not in text, f"{where} shows {secret!r}: {text}"


def caller_agent():
    from roost.kernel import parse_manifest

    return parse_manifest(
        {
            "name": "caller",
            "description": "calls the stub",
            "model": {"provider": "scripted", "script": {"rules": []}},
            "capabilities": {"tools": ["a2a_*"]},
        }
    )


async def test_peer_urls_and_their_errors_never_show_credentials(tmp_path, caplog):
    closed = closed_port()
    caplog.set_level(logging.INFO, logger="roost")
    async with running_stub(relative_card=True) as stub:
        async with open_kernel(config(tmp_path, closed, stub), agents=[caller_agent()]) as kernel:
            from roost.plugins.a2a._server import service_for

            async with open_daemon(kernel, graceful_timeout=1) as url:
                service = service_for(kernel)
                await wait_until(
                    lambda: (
                        {"down", "metadata"}
                        <= {n for n, p in service.external_peers.items() if p.error}
                    ),
                    "the discovery errors",
                )
                async with httpx.AsyncClient(base_url=url, timeout=20) as http:

                    async def mcp_errors():
                        body = (await http.get("/api/mcp/servers")).json()
                        return all(s.get("error") for s in body["configured"]) and body

                    mcp = await wait_until(mcp_errors, "every MCP server's error", timeout=20)
                    a2a = (await http.get("/api/a2a/external_agents")).json()
    shown = {s["name"]: s["url"] for s in mcp["configured"]}
    assert shown == {
        "keyed_http": f"http://127.0.0.1:{closed}/mcp",
        "keyed_sse": f"http://127.0.0.1:{closed}/sse",
        "keyed_metadata": "http://169.254.169.254/mcp",
    }
    assert {a["name"]: a["url"] for a in a2a["external_agents"]}["stub"] == f"{stub}/"
    assert_no_secret(json.dumps(mcp), "GET /api/mcp/servers")
    assert_no_secret(json.dumps(a2a), "GET /api/a2a/external_agents")
    peers = [{**s, "kind": "mcp"} for s in mcp["configured"]]
    peers += [{**a, "kind": "a2a"} for a in a2a["external_agents"]]
    assert_no_secret("\n".join(_pending_peer_lines(peers)), "roost agents")
    logged = "\n".join(
        r.getMessage() + (logging.Formatter().formatException(r.exc_info) if r.exc_info else "")
        for r in caplog.records
    )
    assert "keyed_http" in logged and "down" in logged
    assert_no_secret(logged, "the daemon's log")


async def test_an_agent_url_with_a_key_in_its_query_is_found_and_its_errors_hide_the_key(
    tmp_path,
):
    # Regression too: the card's path was appended after the query
    # ("/?api_key=…/.well-known/agent-card.json"), so such an agent was never found.
    async with running_stub(relative_card=True, fail_status=500, fail_body="rest") as stub:
        async with open_kernel(
            config(tmp_path, closed_port(), stub), agents=[caller_agent()]
        ) as kernel:
            await wait_until(lambda: "a2a_stub" in kernel.registry, "the stub's tool")
            result = await kernel.call_tool(
                "caller", ToolCall("a2a_stub", {"message": "hi"}), check_capability=False
            )
    assert result.is_error and "HTTP 500" in result.as_text()
    # The card's relative endpoint joined to the configured URL kept its user info.
    assert_no_secret(result.as_text(), "the a2a_stub tool's error")
