"""One client cannot lock everyone out of MCP (issue 15, item 12).

Regression: the MCP session table had one global cap (1,000) and a one-hour idle expiry,
so 1,200 ``initialize`` calls from one client made every other client's ``initialize`` on
``/mcp`` and ``/agents/<name>/mcp`` fail with "too many MCP sessions". Now each caller (its
principal with API keys, else its address) holds at most ``http.mcp_sessions_per_caller``
sessions: past that, its own oldest idle session is closed to make room; a session with a
request in flight or a GET stream open is never idle. Idle sessions close after
``http.mcp_session_idle_s``. Real daemon; the second caller is the official ``mcp`` SDK.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import httpx
import trio
from principals_helpers import (
    KEYS,
    bearer,
    make_config,
    release,
    serve,
    set_key_env,
    waiter_started,
)
from roost.plugins.mcp._http_server import hub_for

HERE = Path(__file__).parent
LEGACY = "2025-06-18"
HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": LEGACY,
        "capabilities": {},
        "clientInfo": {"name": "flood", "version": "1"},
    },
}
FLOOD = 1200


async def initialize(http: httpx.AsyncClient, path: str, headers: dict | None = None) -> str:
    response = await http.post(path, json=INIT, headers={**HEADERS, **(headers or {})})
    assert response.status_code == 200, response.text
    sid = response.headers["mcp-session-id"]
    done = await http.post(
        path,
        json={"jsonrpc": "2.0", "method": "notifications/initialized"},
        headers={
            **HEADERS,
            **(headers or {}),
            "Mcp-Session-Id": sid,
            "MCP-Protocol-Version": LEGACY,
        },
    )
    assert done.status_code == 202, done.text
    return sid


async def tools_list(
    http: httpx.AsyncClient, path: str, sid: str, headers: dict | None = None
) -> httpx.Response:
    return await http.post(
        path,
        json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        headers={
            **HEADERS,
            **(headers or {}),
            "Mcp-Session-Id": sid,
            "MCP-Protocol-Version": LEGACY,
        },
    )


async def flood(url: str, count: int, headers: dict | None = None) -> None:
    """``count`` initialize requests (half on /mcp, half on an agent's endpoint), 16 at a time."""
    limits = httpx.Limits(max_connections=16)
    async with httpx.AsyncClient(base_url=url, timeout=30, limits=limits) as http:
        send, receive = trio.open_memory_channel(count)
        for i in range(count):
            send.send_nowait("/mcp" if i % 2 else "/agents/recall/mcp")
        send.close()

        async def worker() -> None:
            async for path in receive:
                response = await http.post(path, json=INIT, headers={**HEADERS, **(headers or {})})
                assert response.status_code == 200, (response.status_code, response.text)

        async with trio.open_nursery() as nursery:
            for _ in range(16):
                nursery.start_soon(worker)


async def sdk_call(url: str, tool: str, local_address: str, key: str = "") -> dict:
    done = await trio.run_process(
        [sys.executable, str(HERE / "mcp_sdk_caller.py"), url, tool, local_address, key],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    return json.loads(done.stdout)


async def test_a_flood_of_sessions_from_one_address_locks_no_one_else_out_and_spares_busy_sessions(
    tmp_path,
):
    async with (
        serve(make_config(tmp_path, keys=False)) as (kernel, url),
        httpx.AsyncClient(base_url=url, timeout=60) as http,
    ):
        with trio.fail_after(240):
            # Before the flood, the flooding caller (127.0.0.1) holds three sessions:
            idle = await initialize(http, "/mcp")  # idle: made room for the flood
            streaming = await initialize(http, "/mcp")  # a GET stream open: never idle
            working = await initialize(http, "/agents/waiter/mcp")  # a tools/call in flight
            get_headers = {
                "Accept": "text/event-stream",
                "Mcp-Session-Id": streaming,
                "MCP-Protocol-Version": LEGACY,
            }
            answered: list[httpx.Response] = []
            async with (
                trio.open_nursery() as nursery,
                http.stream("GET", "/mcp", headers=get_headers) as stream,
            ):
                assert stream.status_code == 200

                async def call_in_flight() -> None:
                    answered.append(
                        await http.post(
                            "/agents/waiter/mcp",
                            json={
                                "jsonrpc": "2.0",
                                "id": 7,
                                "method": "tools/call",
                                "params": {"name": "message", "arguments": {"message": "wait"}},
                            },
                            headers={
                                **HEADERS,
                                "Accept": "application/json",
                                "Mcp-Session-Id": working,
                                "MCP-Protocol-Version": LEGACY,
                            },
                        )
                    )

                nursery.start_soon(call_in_flight)
                await waiter_started()

                await flood(url, FLOOD)

                hub = hub_for(kernel)
                mine = [s for s in hub.sessions.values() if s.caller == ("addr", "127.0.0.1")]
                assert len(mine) <= hub.per_caller == 100
                # Another caller (another address) is not locked out, on either endpoint,
                # using the official SDK client.
                host = await sdk_call(f"{url}/mcp", "agent_recall", "127.0.0.2")
                assert (
                    host["answer"] == ["heard: hello from another caller"] and not host["is_error"]
                )
                agent = await sdk_call(f"{url}/agents/recall/mcp", "message", "127.0.0.2")
                assert (
                    agent["answer"] == ["heard: hello from another caller"]
                    and not agent["is_error"]
                )

                # The busy sessions of the flooding caller survived it; the idle one made room.
                assert (await tools_list(http, "/mcp", streaming)).status_code == 200
                assert (await tools_list(http, "/mcp", idle)).status_code == 404
                release()
            assert answered[0].status_code == 200, answered[0].text
            assert answered[0].json()["result"]["content"][0]["text"] == "done: wait"


async def test_with_keys_each_principal_has_its_own_bound_and_its_own_sessions(
    tmp_path, monkeypatch
):
    set_key_env(monkeypatch)
    config = make_config(tmp_path, mcp_sessions_per_caller=5)
    async with serve(config) as (kernel, url), httpx.AsyncClient(base_url=url, timeout=60) as http:
        with trio.fail_after(120):
            bobs = await initialize(http, "/mcp", bearer("bob"))
            alices = await initialize(http, "/mcp", bearer("alice"))
            # Another principal's session id is unknown to bob, exactly as an ended one.
            assert (await tools_list(http, "/mcp", alices, bearer("bob"))).status_code == 404
            stream = await http.get(
                "/mcp",
                headers={
                    **bearer("bob"),
                    "Accept": "text/event-stream",
                    "Mcp-Session-Id": alices,
                    "MCP-Protocol-Version": LEGACY,
                },
            )
            assert stream.status_code == 404
            deleted = await http.delete(
                "/mcp",
                headers={**bearer("bob"), "Mcp-Session-Id": alices, "MCP-Protocol-Version": LEGACY},
            )
            assert deleted.status_code == 404
            assert (await tools_list(http, "/mcp", alices, bearer("alice"))).status_code == 200
            # Alice opening many sessions closes only her own idle ones; bob's stays.
            await flood(url, 40, bearer("alice"))
            hub = hub_for(kernel)
            assert len([s for s in hub.sessions.values() if s.owner == "alice"]) == 5
            assert (await tools_list(http, "/mcp", bobs, bearer("bob"))).status_code == 200
            used = await sdk_call(f"{url}/mcp", "agent_recall", "127.0.0.1", KEYS["bob"])
            assert used["answer"] == ["heard: hello from another caller"]


async def test_idle_sessions_close_after_the_configured_time_busy_ones_stay(tmp_path):
    config = make_config(tmp_path, keys=False, mcp_session_idle_s=0.5)
    async with serve(config) as (kernel, url), httpx.AsyncClient(base_url=url, timeout=60) as http:
        with trio.fail_after(60):
            idle = await initialize(http, "/mcp")
            streaming = await initialize(http, "/mcp")
            get_headers = {
                "Accept": "text/event-stream",
                "Mcp-Session-Id": streaming,
                "MCP-Protocol-Version": LEGACY,
            }
            async with http.stream("GET", "/mcp", headers=get_headers) as stream:
                assert stream.status_code == 200
                await trio.sleep_until(trio.current_time() + 0.6)  # both now idle that long
                await initialize(http, "/mcp")  # sessions are expired when one is opened
                assert (await tools_list(http, "/mcp", idle)).status_code == 404
                assert (await tools_list(http, "/mcp", streaming)).status_code == 200
