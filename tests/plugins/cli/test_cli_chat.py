"""``roost chat``: streamed replies, sessions, and clean exits."""

from __future__ import annotations

import io

import pytest
from roost.kernel import AgentNotFound, default_config, parse_manifest
from roost.kernel import open_kernel as real_open_kernel
from roost.plugins.cli._chat import chat_command

ECHO = parse_manifest(
    {
        "name": "echo",
        "description": "echoes",
        "model": {
            "provider": "scripted",
            "script": {
                "rules": [
                    {"match": "(?i)^name (.+)", "reply": "noted"},
                ],
                "default_reply": "you said: {message}",
            },
        },
    }
)


def feeder(*lines):
    queue = list(lines)

    async def read_line():
        return queue.pop(0) if queue else None

    return read_line


def opener(config):
    return real_open_kernel(config, agents=[ECHO])


async def test_chat_streams_replies_and_keeps_one_session(tmp_path):
    out, err = io.StringIO(), io.StringIO()
    config = default_config(home=tmp_path)
    code = await chat_command(
        config,
        "echo",
        session_id="s1",
        out=out,
        err=err,
        read_line=feeder("hello there", "second line", "/quit"),
        open_kernel=opener,
    )
    assert code == 0
    text = out.getvalue()
    assert "echo › you said: hello there\n" in text
    assert "echo › you said: second line\n" in text
    async with real_open_kernel(config, agents=[ECHO]) as kernel:
        history = await kernel.store.history("s1")
    assert [m.content for m in history if m.role == "user"] == ["hello there", "second line"]


async def test_chat_ends_at_end_of_input_and_new_starts_a_session(tmp_path):
    out, err = io.StringIO(), io.StringIO()
    code = await chat_command(
        default_config(home=tmp_path),
        "echo",
        out=out,
        err=err,
        read_line=feeder("a", "/new", "b"),
        open_kernel=opener,
    )
    assert code == 0 and "new session" in err.getvalue()


async def test_chat_with_an_unknown_agent_names_the_known_ones(tmp_path):
    with pytest.raises(AgentNotFound, match="known agents"):
        await chat_command(
            default_config(home=tmp_path),
            "ghost",
            out=io.StringIO(),
            err=io.StringIO(),
            read_line=feeder(),
            open_kernel=opener,
        )


def test_roost_chat_console_script_reads_stdin_and_exits_cleanly(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    roost = Path(sys.executable).with_name("roost")
    done = subprocess.run(
        [str(roost), "chat", "reviewer"],
        input="please review this\n/quit\n",
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "ROOST_HOME": str(tmp_path)},
    )
    assert done.returncode == 0, done.stderr
    assert "reviewer › Reviewer: approved." in done.stdout


async def test_an_unavailable_agent_is_refused_before_waiting_for_mcp_servers(
    tmp_path, monkeypatch
):
    # Regression: since chat boots through _connect, an agent that cannot answer (here: its
    # API key is not set) was refused only after every MCP server connected or timed out.
    import json
    import sys

    import trio
    from roost.kernel import load_config

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    agent = tmp_path / "agents" / "keyless"
    agent.mkdir(parents=True)
    manifest = {
        "name": "keyless",
        "description": "no key",
        "model": {"provider": "openai", "name": "gpt-4o-mini"},
    }
    (agent / "agent.json").write_text(json.dumps(manifest))
    silent = "import time; time.sleep(60)"  # started, never answers
    (tmp_path / "roost.toml").write_text(
        f'home = "{tmp_path / "home"}"\n'
        f'[agents]\ndirs = ["{tmp_path / "agents"}"]\nbundled = false\n'
        '[[mcp_servers]]\nname = "mute"\ntimeout_secs = 30\n'
        f'[mcp_servers.transport]\ntype = "stdio"\ncommand = "{sys.executable}"\n'
        f"args = ['-c', '{silent}']\n"
    )
    config = load_config(tmp_path / "roost.toml", env={})
    out, err = io.StringIO(), io.StringIO()
    with trio.fail_after(15), pytest.raises(Exception, match="keyless.* is unavailable") as info:
        await chat_command(config, "keyless", session_id=None, out=out, err=err,
                           read_line=feeder("hello"))  # fmt: skip
    assert "OPENAI_API_KEY" in str(info.value)
    assert "waiting for MCP server" not in err.getvalue(), err.getvalue()
