"""A real ``roost run`` for the HTTP security tests: its own ROOST_HOME and roost.toml,
127.0.0.1, ``--port 0`` (the port is read from the banner), optionally under a low
open-file limit set in the child before it execs."""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOST = Path(sys.executable).parent / "roost"
_BANNER = re.compile(rb"listening on (http://127\.0\.0\.1:(\d+))")


def write_agent(
    agents: Path, name: str, *, reply: str = "{message}", mcp: dict | None = None
) -> None:
    """A scripted agent that answers ``reply``, reachable over A2A (and MCP as configured)."""
    path = agents / name / "agent.json"
    path.parent.mkdir(parents=True)
    manifest = {
        "name": name,
        "description": f"{name} (scripted)",
        "model": {"provider": "scripted", "script": {"rules": [], "default_reply": reply}},
        "a2a": {"enabled": True},
    }
    if mcp is not None:
        manifest["mcp"] = mcp
    path.write_text(json.dumps(manifest))


class Daemon:
    """A running ``roost run``; ``stop()`` ends it (SIGTERM, then SIGKILL) and reaps it."""

    def __init__(self, proc: subprocess.Popen, url: str, stderr_path: Path) -> None:
        self.proc = proc
        self.url = url
        self.port = int(url.rsplit(":", 1)[1])
        self.stderr_path = stderr_path

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def start_daemon(
    root: Path, http_toml: str = "", *, nofile: int | None = None, timeout: float = 60
) -> Daemon:
    """Start ``roost run`` for the agents under ``root/agents``; returns once it listens."""
    home = root / "home"
    config = root / "roost.toml"
    config.write_text(
        f'home = "{home}"\n[agents]\ndirs = ["{root / "agents"}"]\n'
        f"bundled = false\n[http]\n{http_toml}"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROOST_")}
    env["ROOST_HOME"] = str(home)
    env["ROOST_CONFIG"] = str(config)
    argv = [str(ROOST), "run", "--host", "127.0.0.1", "--port", "0"]
    if nofile is not None:
        # Set in the child, between fork and exec of roost (no preexec_fn in a threaded parent).
        launcher = (
            "import os, resource, sys; "
            f"resource.setrlimit(resource.RLIMIT_NOFILE, ({nofile}, {nofile})); "
            "os.execv(sys.argv[1], sys.argv[1:])"
        )
        argv = [sys.executable, "-c", launcher, *argv]
    stderr_path = root / "daemon.stderr"
    with stderr_path.open("wb") as stderr:
        proc = subprocess.Popen(
            argv, cwd=root, env=env, stdout=subprocess.PIPE, stderr=stderr, start_new_session=True
        )
    seen = b""
    deadline = time.monotonic() + timeout
    fd = proc.stdout.fileno()
    while (match := _BANNER.search(seen)) is None:
        remaining = deadline - time.monotonic()
        ready = select.select([fd], [], [], max(0.0, remaining))[0] if remaining > 0 else []
        chunk = os.read(fd, 4096) if ready else b""
        if not chunk:
            daemon = Daemon(proc, "http://127.0.0.1:0", stderr_path)
            daemon.stop()
            raise RuntimeError(
                f"roost run did not start: {seen.decode(errors='replace')}\n"
                f"{daemon.stderr()[-3000:]}"
            )
        seen += chunk
    return Daemon(proc, match[1].decode(), stderr_path)
