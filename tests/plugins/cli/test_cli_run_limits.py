"""``roost run`` as a real process: the open-file limit it serves with, and the one its
children (an agent's ``bash``, an MCP stdio server) get back."""

from __future__ import annotations

import http.client
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench._daemon import free_port, get, write_agents, write_config

RAW = str(Path(__file__).parents[2] / "fixtures" / "mcp" / "raw_server.py")
OPERATOR_LIMIT = 256


def _soft_nofile(pid: int) -> int:
    with open(f"/proc/{pid}/limits", encoding="ascii") as limits:
        for line in limits:
            if line.startswith("Max open files"):
                return int(line.split()[3])
    raise AssertionError("no 'Max open files' line")


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", encoding="ascii") as stat:
                    parent = int(stat.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(parent, []).append(int(entry))
    found, pending = [], [pid]
    while pending:
        for child in children.get(pending.pop(), []):
            found.append(child)
            pending.append(child)
    return found


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return cmdline.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_run_raises_the_open_file_limit_and_children_get_the_operators_back(tmp_path):
    """Under a soft limit of 1,024 (a common default), 1,000 callers made the daemon run
    out of descriptors: accept() failed and SQLite could not open its files (503 "storage
    failed"). ``roost run`` raises its soft limit to the hard one; a child it starts — an
    agent's bash, an MCP stdio server — gets the operator's limit back."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard <= OPERATOR_LIMIT:
        pytest.skip("the hard open-file limit leaves nothing to raise")
    script = {
        "rules": [
            {
                "match": "limit",
                "steps": [{"tool": "bash", "arguments": {"command": "ulimit -Sn"}}],
                "reply": "{result}",
            }
        ]
    }
    agents = write_agents(tmp_path / "agents", ["shell"], script, capabilities={"tools": ["bash"]})
    extra = (
        '[[mcp_servers]]\nname = "raw"\ntimeout_secs = 20\n[mcp_servers.transport]\n'
        f'type = "stdio"\ncommand = {json.dumps(sys.executable)}\nargs = [{json.dumps(RAW)}]\n'
    )
    config = write_config(tmp_path, agents_dir=agents, home=tmp_path / "home", extra=extra)
    port = free_port()
    roost = Path(sys.executable).with_name("roost")
    env = {**os.environ, "ROOST_CONFIG": str(config)}
    env.pop("ROOST_HOME", None)
    daemon = subprocess.Popen(
        ["bash", "-c", f'ulimit -Sn {OPERATOR_LIMIT} && exec "$0" run --port {port}', str(roost)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        # The MCP server itself, not the supervisor it runs under (which keeps roost's). The
        # manager may start it twice (it probes the protocol era first): any instance will do.
        server_limits: list[int] = []
        while not server_limits:
            assert time.monotonic() < deadline, (
                "roost run did not serve, or its MCP server did not start"
            )
            assert daemon.poll() is None, f"roost run exited with {daemon.returncode}"
            try:
                healthy = get(port, "/health", timeout=1)[0] == 200
            except OSError:
                healthy = False
            for pid in _descendants(daemon.pid) if healthy else ():
                command = _cmdline(pid)
                if command.endswith(f"{RAW} ") and "_pdeathsig" not in command:
                    try:
                        server_limits.append(_soft_nofile(pid))
                    except FileNotFoundError:  # that instance has gone
                        pass
            time.sleep(0.05)
        assert _soft_nofile(daemon.pid) > OPERATOR_LIMIT
        assert set(server_limits) == {OPERATOR_LIMIT}

        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        conn.request(
            "POST",
            "/api/agents/shell/message",
            json.dumps({"message": "limit"}),
            {"Content-Type": "application/json"},
        )
        reply = json.loads(conn.getresponse().read())
        conn.close()
        assert reply["reply"].splitlines()[0] == str(OPERATOR_LIMIT), reply
    finally:
        daemon.terminate()
        daemon.wait(30)
