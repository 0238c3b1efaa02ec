"""Two real daemons (``roost run`` subprocesses, own ROOST_HOME and roost.toml, 127.0.0.1):
agents in daemon A call an agent in daemon B through ``[[mcp_servers]]`` (Streamable
HTTP at B's ``/agents/{name}/mcp``), and a chain deeper than 5 that crosses the two
processes is rejected with a JSON-RPC error naming the whole path."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from roost.kernel import TraceContext
from roost.plugins.mcp._client import ClientOptions, open_mcp_client
from roost.plugins.mcp.transports.http import open_http_transport
from waiting import wait_until_sync

ROOST = str(Path(sys.executable).parent / "roost")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_agent(directory: Path, name: str, tools=(), rules=(), default_reply="{message}") -> None:
    path = directory / name / "agent.json"
    path.parent.mkdir(parents=True)
    manifest = {
        "name": name,
        "description": f"{name} (scripted)",
        "model": {
            "provider": "scripted",
            "script": {"rules": list(rules), "default_reply": default_reply},
        },
        "capabilities": {"tools": list(tools)},
    }
    path.write_text(json.dumps(manifest))


def forward(tool: str) -> dict:
    return {
        "match": ".",
        "steps": [{"tool": tool, "arguments": {"message": "{message}"}}],
        "reply": "{result}",
    }


def start_daemon(root: Path, port: int, toml_extra: str = ""):
    home = root / "home"
    (root / "roost.toml").write_text(
        f'home = "{home}"\n[agents]\ndirs = ["{root / "agents"}"]\nbundled = false\n'
        f"[http]\nport = {port}\n{toml_extra}"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROOST_")}
    env["ROOST_HOME"] = str(home)
    env["ROOST_CONFIG"] = str(root / "roost.toml")
    log = open(root / "daemon.log", "wb")
    proc = subprocess.Popen(
        [ROOST, "run"],
        cwd=root,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"daemon exited: {(root / 'daemon.log').read_text()[-2000:]}")
        try:
            return httpx.get(url + "/health", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_until_sync(
            healthy,
            lambda: f"daemon healthy: {(root / 'daemon.log').read_text()[-2000:]}",
            timeout=30,
        )
    except BaseException:
        stop(proc)
        raise
    return proc, url


def stop(proc) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


@pytest.fixture
def daemons(tmp_path):
    if not Path(ROOST).exists():
        pytest.skip("the roost console script is not installed (run make install)")
    port_a, port_b = free_port(), free_port()
    b_root, a_root = tmp_path / "b", tmp_path / "a"
    write_agent(b_root / "agents", "b1", default_reply="b1 got: {message}")
    b_proc, b_url = start_daemon(b_root, port_b)
    try:
        agents = a_root / "agents"
        write_agent(agents, "caller", tools=["mcp_b_*"], rules=[forward("mcp_b_message")])
        for i in range(1, 5):
            write_agent(
                agents, f"a{i}", tools=[f"agent_a{i + 1}"], rules=[forward(f"agent_a{i + 1}")]
            )
        write_agent(agents, "a5", tools=["mcp_b_*"], rules=[forward("mcp_b_message")])
        server = (
            f'[[mcp_servers]]\nname = "b"\ntimeout_secs = 30\nallow_local = true\n'
            f'[mcp_servers.transport]\ntype = "http"\nurl = "{b_url}/agents/b1/mcp"\n'
        )
        a_proc, a_url = start_daemon(a_root, port_a, server)
        try:
            yield a_url, b_url
        finally:
            stop(a_proc)
    finally:
        stop(b_proc)


def wait_for_tool(a_url: str, name: str) -> None:
    def connected():
        body = httpx.get(a_url + "/api/mcp/servers", timeout=5).json()
        return any(name in server["tools"] for server in body["connected"])

    wait_until_sync(connected, f"{name} appeared", timeout=30)


async def test_agents_in_two_daemons_call_each_other_and_the_breaker_holds_across(daemons):
    a_url, b_url = daemons
    wait_for_tool(a_url, "mcp_b_message")
    async with httpx.AsyncClient(base_url=a_url, timeout=60) as http:
        ok = (
            await http.post("/api/agents/caller/message", json={"message": "hello over MCP"})
        ).json()
        assert "b1 got: hello over MCP" in json.dumps(ok)
        deep = (await http.post("/api/agents/a1/message", json={"message": "go deep"})).json()
    # a1 → a2 → a3 → a4 → a5 in daemon A, then b1 in daemon B would be the sixth hop.
    assert "a1 → a2 → a3 → a4 → a5 → b1" in json.dumps(deep, ensure_ascii=False)
    assert "b1 got" not in json.dumps(deep)

    # The same refusal seen as the tool execution error B sends over the wire.
    trace = TraceContext.new("x1")
    for hop in ("x2", "x3", "x4", "x5"):
        trace = trace.child(hop)
    async with open_http_transport(f"{b_url}/agents/b1/mcp", allow_loopback=True) as transport:
        async with open_mcp_client(transport, ClientOptions(protocol="2025-11-25")) as client:
            shallow = await client.call_tool(
                "message", {"message": "hi"}, meta=TraceContext.new("x1").to_meta()
            )
            assert "b1 got: hi" in json.dumps(shallow)
            refused = await client.call_tool("message", {"message": "hi"}, meta=trace.to_meta())
    assert refused["isError"] is True
    assert "x1 → x2 → x3 → x4 → x5 → b1" in refused["content"][0]["text"]
    assert refused["_meta"]["io.roost/error"]["path"] == ["x1", "x2", "x3", "x4", "x5", "b1"]
