"""Helpers: a real kernel with scripted agents, served by the real daemon on 127.0.0.1."""

from __future__ import annotations

import json
from contextlib import asynccontextmanager

import trio
from roost.kernel import Tool, ToolResult, ToolSpec, default_config, hookimpl, open_kernel
from waiting import wait_until

SLEEP_STARTED: list[str] = []
SLEEP_CANCELLED: list[str] = []


class SlowToolPlugin:
    """A test plugin with a tool that sleeps until cancelled (to prove cancel stops work)."""

    @hookimpl
    def roost_tools(self, config):
        async def sleepy(call, ctx):
            SLEEP_STARTED.append(call.id)
            try:
                await trio.sleep(float(call.arguments.get("seconds", 30)))  # the work to cancel
            except trio.Cancelled:
                SLEEP_CANCELLED.append(call.id)
                raise
            return ToolResult.text("slept")

        spec = ToolSpec(
            name="sleepy",
            description="sleep",
            input_schema={"type": "object", "properties": {"seconds": {"type": "number"}}},
            owner="test",
        )
        return [Tool(spec, sleepy)]


REPORT_CSV = "a,b\n1,2\n"
# Hands over a file from its workspace, JSON data and a link, beside its answer.
MAKER_RULES = [
    {
        "match": ".",
        "steps": [
            {"tool": "write", "arguments": {"path": "report.csv", "content": REPORT_CSV}},
            {
                "tool": "artifact",
                "arguments": {"name": "report", "path": "report.csv", "description": "the numbers"},
            },
            {
                "tool": "artifact",
                "arguments": {"name": "summary", "data": {"topic": "{message}", "rows": 1}},
            },
            {
                "tool": "artifact",
                "arguments": {"name": "source", "url": "https://example.com/data/report.pdf"},
            },
        ],
        "reply": "made {message}",
    }
]


def write_agent(directory, name, rules, *, tools=(), skills=(), enabled=True, default_reply=None):
    path = directory / name / "agent.json"
    path.parent.mkdir(parents=True)
    script = {"rules": rules}
    if default_reply is not None:
        script["default_reply"] = default_reply
    path.write_text(
        json.dumps(
            {
                "name": name,
                "description": f"{name} (scripted test agent)",
                "version": "0.1.0",
                "model": {"provider": "scripted", "name": "rules", "script": script},
                "capabilities": {"tools": list(tools)},
                "a2a": {"enabled": enabled, "skills": list(skills)},
                "limits": {"tool_timeout_s": 120},
            }
        )
    )


def make_config(tmp_path, *, a2a=None, http=None, home=None):
    agents = tmp_path / "agents"
    if not agents.exists():
        write_agent(
            agents,
            "echo",
            [{"match": "^boom", "reply": "{message}"}, {"match": ".", "reply": "echo: {message}"}],
            skills=[
                {
                    "id": "echo",
                    "name": "Echo",
                    "description": "Echoes text",
                    "tags": ["echo"],
                    "examples": ["hi"],
                }
            ],
        )
        write_agent(
            agents,
            "asker",
            [
                {
                    "match": "(?i)question",
                    "ask": "Which file?",
                    "reply": "You chose {answer} for {message}",
                }
            ],
            default_reply="say question",
        )
        write_agent(
            agents,
            "slow",
            [
                {
                    "match": ".",
                    "steps": [{"tool": "sleepy", "arguments": {"seconds": 30}}],
                    "reply": "done {result}",
                }
            ],
            tools=["sleepy"],
        )
        write_agent(agents, "hidden", [{"match": ".", "reply": "nope"}], enabled=False)
        write_agent(agents, "maker", MAKER_RULES, tools=["write", "artifact"])
    return default_config(
        home=str(home or tmp_path / "home"),
        agents={"dirs": [str(agents)], "bundled": False},
        http={"port": 0, "rate_limit_per_s": 10000, "rate_limit_burst": 10000, **(http or {})},
        a2a={"default_agent": "echo", **(a2a or {})},
    )


@asynccontextmanager
async def serve(config):
    from roost.plugins.http import open_daemon

    async with open_kernel(config, plugins=[SlowToolPlugin()]) as kernel:
        async with open_daemon(kernel, graceful_timeout=1) as url:
            yield kernel, url


SDK_SERVER = (
    __import__("pathlib").Path(__file__).resolve().parents[3] / "bench" / "_a2a_sdk_server.py"
)


@asynccontextmanager
async def sdk_server():
    """Run the a2a-sdk echo server in a subprocess on 127.0.0.1; yields its base URL.
    The child is terminated (then killed) and reaped on exit."""
    import socket
    import sys

    import httpx

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    port = sock.getsockname()[1]
    base = f"http://127.0.0.1:{port}"
    proc = await trio.lowlevel.open_process(
        [sys.executable, "-P", str(SDK_SERVER), str(sock.fileno()), base], pass_fds=(sock.fileno(),)
    )
    sock.close()
    try:
        async with httpx.AsyncClient(timeout=2) as http:

            async def serving():
                try:
                    if (await http.get(base + "/.well-known/agent-card.json")).status_code == 200:
                        return True
                except httpx.TransportError:
                    pass
                if proc.poll() is not None:
                    raise RuntimeError(f"the a2a-sdk server exited with {proc.returncode}")
                return False

            await wait_until(serving, "the a2a-sdk server serves its card", timeout=30)
        yield base
    finally:
        with trio.CancelScope(shield=True):
            proc.terminate()
            with trio.move_on_after(5):
                await proc.wait()
            if proc.poll() is None:
                proc.kill()
                await proc.wait()
