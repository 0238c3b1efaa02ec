"""One-shot commands (``roost tools``, ``send``, ``chat``) without a daemon wait for the
configured MCP servers before listing or running tools; ``roost chat`` uses a running
daemon like ``send`` does.

The MCP server is the real ``mcp-server-time`` from PyPI, configured in a temporary
roost.toml; a second server whose program does not exist shows how a failure is named.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
import trio
from roost.kernel import default_config, open_kernel, parse_manifest
from roost.plugins.cli._chat import chat_command
from roost.plugins.http import open_daemon

ROOST = Path(sys.executable).parent / "roost"

CLOCK = {
    "name": "clock",
    "description": "tells the time through the time MCP server",
    "model": {
        "provider": "scripted",
        "script": {
            "rules": [
                {
                    "match": "^time",
                    "steps": [
                        {"tool": "mcp_time_get_current_time", "arguments": {"timezone": "UTC"}}
                    ],
                    "reply": "now: {result}",
                },
            ],
            "default_reply": "ask me the time",
        },
    },
    "capabilities": {"tools": ["mcp_time_*"]},
}


def write_project(tmp_path: Path) -> Path:
    agents = tmp_path / "agents" / "clock"
    agents.mkdir(parents=True)
    (agents / "agent.json").write_text(json.dumps(CLOCK))
    config = tmp_path / "roost.toml"
    config.write_text(
        f'home = "{tmp_path / "home"}"\n'
        f'[agents]\ndirs = ["{tmp_path / "agents"}"]\nbundled = false\n'
        '[[mcp_servers]]\nname = "time"\ntimeout_secs = 20\n'
        f'[mcp_servers.transport]\ntype = "stdio"\ncommand = "{sys.executable}"\n'
        'args = ["-m", "mcp_server_time", "--local-timezone", "UTC"]\n'
        '[[mcp_servers]]\nname = "ghost"\ntimeout_secs = 15\n'
        '[mcp_servers.transport]\ntype = "stdio"\ncommand = "/nonexistent/mcp-server"\n'
    )
    return config


async def roost(tmp_path: Path, *args: str, stdin: bytes = b"") -> subprocess.CompletedProcess:
    if not ROOST.exists():
        pytest.skip("the roost console script is not installed (make install)")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    with trio.fail_after(90):
        return await trio.run_process(
            [str(ROOST), "--config", str(tmp_path / "roost.toml"), *args],
            stdin=stdin,
            capture_stdout=True,
            capture_stderr=True,
            env=env,
            cwd=str(tmp_path),
            check=False,
        )


@pytest.mark.slow
async def test_roost_tools_without_a_daemon_lists_the_mcp_servers_tools(tmp_path):
    write_project(tmp_path)
    done = await roost(tmp_path, "tools", "--agent", "clock", "--json")
    err = done.stderr.decode()
    assert done.returncode == 0, err
    names = sorted(t["name"] for t in json.loads(done.stdout))
    assert names == ["mcp_time_convert_time", "mcp_time_get_current_time"], err
    assert "waiting for MCP server 'time' (up to 20 s)…" in err
    assert "MCP server 'time' connected (2 tools)" in err
    assert "MCP server 'ghost' failed:" in err and "going on without its tools" in err


@pytest.mark.slow
async def test_roost_send_without_a_daemon_runs_an_mcp_tool_on_the_first_call(tmp_path):
    write_project(tmp_path)
    done = await roost(tmp_path, "send", "clock", "time please", "--json")
    err = done.stderr.decode()
    assert done.returncode == 0, err
    reply = json.loads(done.stdout)
    assert not reply["is_error"], reply
    assert reply["reply"].startswith("now: ") and '"timezone": "UTC"' in reply["reply"], reply
    assert "unknown tool" not in reply["reply"]


@pytest.mark.slow
async def test_roost_chat_without_a_daemon_runs_an_mcp_tool_on_the_first_message(tmp_path):
    write_project(tmp_path)
    done = await roost(tmp_path, "chat", "clock", stdin=b"time please\n")
    err = done.stderr.decode()
    assert done.returncode == 0, err
    assert (
        "clock › now: " in done.stdout.decode() and '"timezone": "UTC"' in done.stdout.decode()
    ), done.stdout
    assert "waiting for MCP server 'time'" in err


def feeder(*lines):
    queue = list(lines)

    async def read_line():
        return queue.pop(0) if queue else None

    return read_line


def no_kernel(config):
    raise AssertionError("roost chat should have used the running daemon, not booted a kernel")


class Writes(io.StringIO):
    """Records each write, to tell a streamed reply from one printed whole."""

    def __init__(self):
        super().__init__()
        self.writes = []

    def write(self, text):
        self.writes.append(text)
        return super().write(text)


async def test_roost_chat_uses_a_running_daemon_and_streams_its_reply(tmp_path):
    echo = parse_manifest(
        {
            "name": "echo",
            "description": "echoes",
            "model": {
                "provider": "scripted",
                "script": {"rules": [], "default_reply": "you said: {message}"},
            },
        }
    )
    config = default_config(home=tmp_path / "home", agents={"bundled": False})
    out, err = Writes(), io.StringIO()
    async with open_kernel(config, agents=[echo]) as kernel:
        async with open_daemon(kernel, graceful_timeout=1) as url:
            with trio.fail_after(30):
                code = await chat_command(
                    config,
                    "echo",
                    session_id="chat-1",
                    out=out,
                    err=err,
                    read_line=feeder("hello there", "again", "/quit"),
                    open_kernel=no_kernel,
                )
        history = await kernel.store.history("chat-1")
    assert code == 0
    assert f"via the daemon at {url}" in err.getvalue()
    text = out.getvalue()
    # each reply once: streamed token by token, not repeated whole afterwards
    assert (
        text.count("echo › you said: hello there\n") == 1
        and text.count("you said: hello there") == 1
    )
    assert text.count("echo › you said: again\n") == 1
    assert "there" in out.writes and "you said: hello there" not in out.writes, out.writes
    assert [m.content for m in history if m.role == "user"] == ["hello there", "again"]
