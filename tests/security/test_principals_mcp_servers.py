"""``GET /api/mcp/servers`` showed every principal each stdio MCP server's command line,
where an operator may have put a token (``--api-key …``). Only an admin principal (or every
caller of a daemon without keys, the one ``local`` admin) sees ``command`` and ``args`` now,
as only an admin reads ``/api/events``. Real daemon on 127.0.0.1, real keys."""

from __future__ import annotations

import sys

import attrs
import httpx
from principals_helpers import bearer, make_config, serve, set_key_env
from roost.kernel import default_config

SECRET_ARG = "--api-key=stdio-secret-0123"


def _with_stdio_server(config):
    server = {
        "name": "tokened",
        "transport": {
            "type": "stdio",
            "command": sys.executable,
            "args": ["-c", "pass", SECRET_ARG],
        },
        "timeout_secs": 2,
    }
    servers = default_config(home=config.home, mcp_servers=[server]).mcp_servers
    return attrs.evolve(config, mcp_servers=servers)


async def _servers(url: str, who: str | None) -> list[dict]:
    headers = bearer(who) if who else {}
    async with httpx.AsyncClient(base_url=url, timeout=20, headers=headers) as http:
        reply = await http.get("/api/mcp/servers")
    assert reply.status_code == 200, reply.text
    return reply.json()["configured"]


async def test_only_an_admin_principal_sees_a_stdio_servers_command_line(tmp_path, monkeypatch):
    set_key_env(monkeypatch)
    async with serve(_with_stdio_server(make_config(tmp_path))) as (_kernel, url):
        (bob,) = await _servers(url, "bob")
        (ops,) = await _servers(url, "ops")
    assert bob["name"] == "tokened" and "command" not in bob and "args" not in bob
    assert SECRET_ARG not in str(bob)
    assert ops["command"] == sys.executable and SECRET_ARG in ops["args"]


async def test_without_keys_the_one_local_principal_is_the_admin(tmp_path):
    async with serve(_with_stdio_server(make_config(tmp_path, keys=False))) as (_kernel, url):
        (local,) = await _servers(url, None)
    assert SECRET_ARG in local["args"]
