"""The official ``mcp`` SDK (code nobody here wrote) as a client of roost's MCP server:
``roost mcp`` over stdio and the daemon's ``/mcp`` over HTTP, in both protocol eras.

The SDK runs on asyncio, so it runs in a subprocess (``sdk_client.py``) and reports what
it saw as JSON.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import trio
from roost.plugins.http import open_daemon

HERE = Path(__file__).parent
ROOST = Path(sys.executable).parent / "roost"
MODES = ["legacy", "2026-07-28"]


async def run_sdk(*args: str) -> dict:
    with trio.fail_after(60):
        done = await trio.run_process(
            [sys.executable, str(HERE / "sdk_client.py"), *args], capture_stdout=True, capture_stderr=True, check=False
        )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    return json.loads(done.stdout.decode().strip().splitlines()[-1])


@pytest.fixture
def stdio_config(tmp_path):
    agent = tmp_path / "agents" / "alpha" / "agent.json"
    agent.parent.mkdir(parents=True)
    agent.write_text(json.dumps({
        "name": "alpha",
        "description": "alpha agent",
        "system_prompt": "You are alpha.",
        "model": {"provider": "scripted", "script": {"rules": [], "default_reply": "alpha heard: {message}"}},
        "mcp": {"expose_tools": ["list", "read"], "private_tools": ["read"]},
    }))
    config = tmp_path / "roost.toml"
    config.write_text(f'home = "{tmp_path / "home"}"\n[agents]\ndirs = ["{tmp_path / "agents"}"]\nbundled = false\n')
    return config


@pytest.mark.parametrize("mode", MODES)
async def test_sdk_client_over_stdio(stdio_config, mode):
    if not ROOST.exists():
        pytest.skip("the roost console script is not installed (make install)")
    seen = await run_sdk(f"stdio:{ROOST}:{stdio_config}", mode, "read")
    assert seen["protocol_version"] == ("2025-11-25" if mode == "legacy" else "2026-07-28")
    assert seen["tools"] == ["list", "roost_agent_alpha"]  # read is private: never listed
    assert seen["answer"] == ["alpha heard: hello from the SDK"] and not seen["answer_is_error"]
    assert seen["private"].get("error_code") == -32602  # ...and never callable
    assert seen["resources"] == ["roost://agents/alpha/card", "roost://agents/alpha/manifest"]
    assert seen["card"]["name"] == "alpha"
    assert seen["prompts"] == ["alpha"]


@pytest.mark.parametrize("mode", MODES)
async def test_sdk_client_over_streamable_http(kernel, mode):
    async with open_daemon(kernel) as url:
        seen = await run_sdk(url + "/mcp", mode, "secret")
    assert seen["protocol_version"] == ("2025-11-25" if mode == "legacy" else "2026-07-28")
    assert "roost_agent_alpha" in seen["tools"] and "echo" in seen["tools"]
    assert not any("secret" in name for name in seen["tools"])
    assert seen["private"].get("error_code") == -32602
    assert seen["answer"] == ["alpha:hello from the SDK"]
    assert seen["steps"] == ["3 steps done"]
    assert seen["progress"] == [1, 2, 3]
    assert "roost://agents/beta/card" in seen["resources"]
