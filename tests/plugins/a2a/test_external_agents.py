"""External A2A agents become ``a2a_{name}`` tools of local agents: discovered at boot in
the background (a failure is logged, boot goes on), results tainted, depth breaker across hops."""

from __future__ import annotations

import json
import socket

import httpx
import trio
from a2a_helpers import SlowToolPlugin, sdk_server, write_agent
from roost.kernel import EventKind, default_config, open_kernel
from waiting import wait_until


def kernel_config(tmp_path, externals, agents_rules):
    agents = tmp_path / "agents"
    for name, rules, tools in agents_rules:
        write_agent(agents, name, rules, tools=tools)
    return default_config(
        home=str(tmp_path / "home"),
        agents={"dirs": [str(agents)], "bundled": False},
        http={"port": 0, "rate_limit_per_s": 10000, "rate_limit_burst": 10000},
        a2a={"external_agents": externals},
    )


async def wait_for_tool(kernel, name):
    await wait_until(lambda: name in kernel.registry, f"the tool {name}", timeout=15)


async def test_external_sdk_agent_is_a_tool_and_its_result_is_tainted(tmp_path):
    async with sdk_server() as sdk_url:
        config = kernel_config(
            tmp_path,
            [{"name": "sdkecho", "url": sdk_url}, {"name": "ghost", "url": "http://127.0.0.1:9/"}],
            [
                (
                    "delegator",
                    [
                        {
                            "match": ".",
                            "steps": [
                                {"tool": "a2a_sdkecho", "arguments": {"message": "{message}"}}
                            ],
                            "reply": "remote said: {result}",
                        }
                    ],
                    ["a2a_*"],
                )
            ],
        )
        async with open_kernel(config) as kernel:
            from roost.plugins.a2a._server import service_for

            await wait_for_tool(kernel, "a2a_sdkecho")
            spec = kernel.registry.get("a2a_sdkecho").spec
            reply = await kernel.send("delegator", "ping")
            history = await kernel.store.history(reply.session_id)
            service = service_for(kernel)
            peers = service.external_peers
            await wait_until(lambda: peers["ghost"].error, "ghost's discovery error")
    assert spec.untrusted and "SDK Echo" in spec.description
    assert reply.text == "remote said: echo: ping"
    tool_messages = [h for h in history if h.role == "tool"]
    assert tool_messages and "untrusted" in json.dumps(tool_messages[0].data)
    assert "a2a_ghost" not in kernel.registry


async def test_the_depth_breaker_holds_across_a2a_hops(tmp_path):
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    me = f"http://127.0.0.1:{port}/a2a/agents/looper"
    config = kernel_config(
        tmp_path,
        [{"name": "self", "url": me}],
        [
            (
                "looper",
                [
                    {
                        "match": ".",
                        "steps": [{"tool": "a2a_self", "arguments": {"message": "{message}"}}],
                        "reply": "{result}",
                    }
                ],
                ["a2a_self"],
            )
        ],
    )
    from roost.plugins.http import open_daemon

    async with open_kernel(config, plugins=[SlowToolPlugin()]) as kernel:
        async with open_daemon(kernel, port=port, graceful_timeout=1) as url:
            await wait_for_tool(kernel, "a2a_self")
            breaker = []
            async with kernel.tap.subscribe(
                buffer=100, kinds=(EventKind.KERNEL_BREAKER,)
            ) as events:
                with trio.fail_after(30):
                    reply = await kernel.send("looper", "around and around")
                    async for event in events:
                        breaker.append(event)
                        break
            async with httpx.AsyncClient(base_url=url) as http:
                listed = (
                    await http.post(
                        "/a2a/agents/looper/jsonrpc",
                        json={"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}},
                        headers={"A2A-Version": "1.0"},
                    )
                ).json()
    assert "depth" in reply.text
    assert breaker and breaker[0].payload["path"][:2] == ["looper", "looper"]
    assert listed["result"]["totalSize"] <= 5  # the chain stopped at the depth limit
