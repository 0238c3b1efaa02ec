"""The real entry points the attacks go through (shared by this folder's tests).

``open_kernel_target`` boots a kernel here (its host process is this test process); a
``Daemon`` is ``roost run --port 0`` in a subprocess with secrets in its environment,
reached over ``/agents/<name>/mcp`` (and ``/mcp``) with ``tools/call``. Both serve the same
three agents: ``attacker`` (sandbox, every file tool and bash exposed), ``auditor``
(read-only) and ``victim`` (whose workspace and temp dir hold secrets).
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
from pathlib import Path

import httpx
from roost.kernel import ToolCall, default_config, open_kernel, parse_manifest
from waiting import wait_until_sync

ROOST = Path(sys.executable).with_name("roost")
TOOLS = ["read", "write", "edit", "list", "glob", "grep", "bash"]
MCP_VERSION = "2025-06-18"
SHUTDOWN_TIMEOUT_S = 3.0


def manifest(name: str, sandbox: str, **extra) -> dict:
    return {
        "name": name,
        "description": f"{name} for the security tests",
        "model": {"provider": "scripted", "script": {"default_reply": "ok"}},
        "capabilities": {"tools": TOOLS},
        "mcp": {"expose_tools": TOOLS},
        "sandbox": sandbox,
        **extra,
    }


AGENTS = [
    manifest("attacker", "sandbox"),
    manifest("auditor", "read-only"),
    manifest("victim", "sandbox"),
]


class Outcome:
    """What a tool call answered: its text and whether it was an error."""

    def __init__(self, text: str, is_error: bool) -> None:
        self.text = text
        self.is_error = is_error

    def __repr__(self) -> str:
        return f"Outcome(is_error={self.is_error}, text={self.text[:400]!r})"


class Target:
    """What an attack aims at: one host process serving the agents (see module docstring)."""

    kind = "?"

    def __init__(self, home: Path, user_home: Path, pid: int) -> None:
        self.home = home
        self.user_home = user_home
        self.pid = pid
        self.secret = "victim-secret-" + secrets.token_hex(8)
        self.tcp_port = 0
        self.abstract_name = ""

    def workspace(self, agent: str) -> Path:
        return self.home / "workspaces" / agent

    def temp(self, agent: str) -> Path:
        return self.home / "tmp" / agent

    def environ_marker(self) -> str:
        """A string certainly in the host process's initial environment."""
        raise NotImplementedError

    def alive(self) -> bool:
        raise NotImplementedError

    async def call(self, agent: str, tool: str, arguments: dict) -> Outcome:
        raise NotImplementedError

    def plant(self) -> None:
        """The victims: a secret file in the victim's workspace and temp dir, an SSH key in
        the host's home."""
        for d in (self.workspace("victim"), self.temp("victim"), self.user_home / ".ssh"):
            d.mkdir(parents=True, exist_ok=True)
        (self.workspace("victim") / "secret.txt").write_text(self.secret + "\n")
        (self.temp("victim") / "secret.txt").write_text(self.secret + "\n")
        (self.user_home / ".ssh" / "id_ed25519").write_text(self.secret + "\n")
        self.workspace("attacker").mkdir(parents=True, exist_ok=True)
        self.workspace("auditor").mkdir(parents=True, exist_ok=True)


class KernelTarget(Target):
    kind = "kernel"

    def __init__(self, kernel, home: Path, user_home: Path) -> None:
        super().__init__(home, user_home, os.getpid())
        self.kernel = kernel

    def environ_marker(self) -> str:
        # /proc/<pid>/environ shows the environment the process started with.
        first = Path("/proc/self/environ").read_bytes().split(b"\0")[0]
        return first.decode(errors="replace")

    def alive(self) -> bool:
        return True  # this process: were it killed, the test would not be running

    async def call(self, agent: str, tool: str, arguments: dict) -> Outcome:
        result = await self.kernel.call_tool(agent, ToolCall(name=tool, arguments=arguments))
        return Outcome(result.as_text(), result.is_error)


def _rpc_result(response: httpx.Response) -> dict:
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        for line in response.text.splitlines():
            if line.startswith("data: "):
                message = json.loads(line[6:])
                if "result" in message or "error" in message:
                    return message
        raise AssertionError(f"no JSON-RPC answer in {response.text[:300]!r}")
    return response.json()


class Daemon(Target):
    """``roost run --port 0`` in a subprocess, secrets in its environment."""

    kind = "daemon"

    def __init__(self, root: Path, *, extra_agents: list[dict] = ()) -> None:
        self.root = root
        home = root / "home"
        user_home = root / "user-home"
        super().__init__(home, user_home, 0)
        self.api_key = "roost-key-" + secrets.token_hex(8)
        self.openai_key = "sk-openai-" + secrets.token_hex(8)
        agents_dir = root / "agents"
        for spec in [*AGENTS, *extra_agents]:
            path = agents_dir / spec["name"] / "agent.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(spec))
        self.config = root / "roost.toml"
        self.config.write_text(
            f'home = "{home}"\n[agents]\ndirs = ["{agents_dir}"]\n'
            f"[kernel]\nshutdown_timeout_s = {SHUTDOWN_TIMEOUT_S}\n"
            "[http]\nrate_limit_per_s = 10000\nrate_limit_burst = 10000\n"
        )
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("ROOST_")}
        self.env.update(
            ROOST_HOME=str(home),
            ROOST_API_KEY=self.api_key,
            OPENAI_API_KEY=self.openai_key,
            HOME=str(user_home),
        )
        self.proc: subprocess.Popen | None = None
        self.port = 0

    def start(self) -> Daemon:
        self.plant()
        daemon_json = self.home / "daemon.json"
        daemon_json.unlink(missing_ok=True)
        self.proc = subprocess.Popen(
            [str(ROOST), "--config", str(self.config), "run", "--port", "0"],
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        self.pid = self.proc.pid

        def started() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"the daemon exited: {self.proc.stderr.read().decode()}")
            return daemon_json.exists()

        wait_until_sync(started, "the daemon started (wrote daemon.json)", timeout=60)
        self.port = json.loads(daemon_json.read_text())["port"]
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        if self.proc is not None and self.proc.stderr is not None:
            self.proc.stderr.close()

    def environ_marker(self) -> str:
        return self.openai_key

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def mcp(self, path: str, tool: str, arguments: dict, *, timeout: float = 60) -> Outcome:
        """``tools/call`` over Streamable HTTP at ``path`` (a fresh session each time)."""
        headers = {
            "Accept": "application/json, text/event-stream",
            "Authorization": f"Bearer {self.api_key}",
        }
        async with httpx.AsyncClient(base_url=self.url, timeout=timeout, headers=headers) as client:
            init = await client.post(
                path,
                json={
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "initialize",
                    "params": {
                        "protocolVersion": MCP_VERSION,
                        "capabilities": {},
                        "clientInfo": {"name": "security-tests", "version": "1"},
                    },
                },
            )
            assert init.status_code == 200, init.text
            session = {
                "Mcp-Session-Id": init.headers["mcp-session-id"],
                "MCP-Protocol-Version": MCP_VERSION,
            }
            await client.post(
                path,
                json={"jsonrpc": "2.0", "method": "notifications/initialized"},
                headers=session,
            )
            response = await client.post(
                path,
                json={
                    "jsonrpc": "2.0",
                    "id": 2,
                    "method": "tools/call",
                    "params": {"name": tool, "arguments": arguments},
                },
                headers=session,
            )
        message = _rpc_result(response)
        if "error" in message:
            return Outcome(json.dumps(message["error"]), True)
        result = message["result"]
        text = "\n".join(b.get("text", "") for b in result.get("content", ()))
        return Outcome(text, bool(result.get("isError")))

    async def call(self, agent: str, tool: str, arguments: dict) -> Outcome:
        return await self.mcp(f"/agents/{agent}/mcp", tool, arguments)


def marked(marker: str) -> list[int]:
    """Host PIDs of processes whose command line holds ``marker`` (zombies included)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    pids.append(int(entry.name))
            except OSError:
                pass
    return pids


def open_kernel_target(tmp_path: Path, monkeypatch, *, agents: list[dict] = AGENTS):
    """``(open_kernel(...), home, user_home)``: a kernel in this process serving ``agents``."""
    home = tmp_path / "home"
    user_home = tmp_path / "user-home"
    monkeypatch.setenv("HOME", str(user_home))
    config = default_config(home=home, agents={"bundled": False})
    manifests = [parse_manifest(spec, base_dir=tmp_path) for spec in agents]
    return open_kernel(config, agents=manifests), home, user_home
