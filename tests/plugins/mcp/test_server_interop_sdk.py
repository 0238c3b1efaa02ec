"""The official ``mcp`` SDK (code nobody here wrote) as a client of roost's MCP server:
``roost mcp`` over stdio and the daemon's ``/mcp`` over HTTP, in both protocol eras.

The SDK runs on asyncio, so it runs in a subprocess (``sdk_client.py``) and reports what
it saw as JSON.
"""

from __future__ import annotations

import base64
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
            [sys.executable, str(HERE / "sdk_client.py"), *args],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    return json.loads(done.stdout.decode().strip().splitlines()[-1])


# The agent hands over a workspace file, an image, data and a link beside its answer.
MAKE_RULE = {
    "match": "^make",
    "steps": [
        {"tool": "write", "arguments": {"path": "report.csv", "content": "a,b\n1,2\n"}},
        {"tool": "write", "arguments": {"path": "chart.svg", "content": "<svg/>"}},
        {"tool": "artifact", "arguments": {"name": "report", "path": "report.csv"}},
        {"tool": "artifact", "arguments": {"name": "chart", "path": "chart.svg"}},
        {"tool": "artifact", "arguments": {"name": "stats", "data": {"rows": 1}}},
        {"tool": "artifact", "arguments": {"name": "source", "url": "https://example.com/r.pdf"}},
    ],
    "reply": "made it",
}


@pytest.fixture
def stdio_config(tmp_path):
    agent = tmp_path / "agents" / "alpha" / "agent.json"
    agent.parent.mkdir(parents=True)
    agent.write_text(
        json.dumps(
            {
                "name": "alpha",
                "description": "alpha agent",
                "system_prompt": "You are alpha.",
                "model": {
                    "provider": "scripted",
                    "script": {"rules": [MAKE_RULE], "default_reply": "alpha heard: {message}"},
                },
                "capabilities": {"tools": ["write", "artifact"]},
                "mcp": {"expose_tools": ["list", "read"], "private_tools": ["read"]},
            }
        )
    )
    config = tmp_path / "roost.toml"
    config.write_text(
        f'home = "{tmp_path / "home"}"\n[agents]\ndirs = ["{tmp_path / "agents"}"]\n'
        "bundled = false\n"
    )
    return config


@pytest.mark.parametrize("mode", MODES)
async def test_sdk_client_over_stdio(stdio_config, mode):
    if not ROOST.exists():
        pytest.skip("the roost console script is not installed (make install)")
    seen = await run_sdk(f"stdio:{ROOST}:{stdio_config}", mode, "read", "make")
    assert seen["protocol_version"] == ("2025-11-25" if mode == "legacy" else "2026-07-28")
    assert seen["tools"] == ["agent_alpha", "list"]  # read is private: never listed
    assert seen["answer"] == ["alpha heard: hello from the SDK"] and not seen["answer_is_error"]
    assert seen["private"].get("error_code") == -32602  # ...and never callable
    assert seen["resources"] == ["roost://agents/alpha/card", "roost://agents/alpha/manifest"]
    assert seen["card"]["name"] == "alpha"
    assert seen["prompts"] == ["alpha"]
    # Artifacts arrive as content blocks the SDK understands, and in structuredContent.
    csv, svg = base64.b64encode(b"a,b\n1,2\n").decode(), base64.b64encode(b"<svg/>").decode()
    blocks = seen["made"]["blocks"]
    assert blocks[0] == {"type": "text", "text": "made it"}
    report = blocks[1]
    assert (
        report["type"] == "resource"
        and report["resource"]["blob"] == csv
        and report["resource"]["mimeType"] == "text/csv"
    )
    assert report["resource"]["uri"].startswith("roost://artifacts/") and report["resource"][
        "uri"
    ].endswith("/report.csv")
    assert blocks[2] == {"type": "image", "data": svg, "mimeType": "image/svg+xml"}
    assert blocks[3] == {"type": "text", "text": '{"rows": 1}'}
    assert blocks[4] == {
        "type": "resource_link",
        "uri": "https://example.com/r.pdf",
        "name": "r.pdf",
        "mimeType": "application/pdf",
    }
    artifacts = seen["made"]["structured"]["artifacts"]
    assert [a["name"] for a in artifacts] == ["report", "chart", "stats", "source"]
    # A file's bytes travel once: its part names the content block that carries them.
    assert artifacts[0]["parts"] == [
        {"content": 1, "size": 8, "filename": "report.csv", "mediaType": "text/csv"}
    ]
    assert artifacts[2]["parts"] == [{"data": {"rows": 1}}]


@pytest.mark.parametrize("mode", MODES)
async def test_sdk_client_over_streamable_http(kernel, mode):
    async with open_daemon(kernel) as url:
        seen = await run_sdk(url + "/mcp", mode, "secret")
    assert seen["protocol_version"] == ("2025-11-25" if mode == "legacy" else "2026-07-28")
    assert "agent_alpha" in seen["tools"] and "echo" in seen["tools"]
    assert not any("secret" in name for name in seen["tools"])
    assert seen["private"].get("error_code") == -32602
    assert seen["answer"] == ["alpha:hello from the SDK"]
    assert seen["steps"] == ["3 steps done"]
    assert seen["progress"] == [1, 2, 3]
    assert "roost://agents/beta/card" in seen["resources"]
