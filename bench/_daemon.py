"""A real ``roost run`` in a subprocess, for the agents and load benches and the soak tests.

``write_agents`` generates agent folders (scripted provider), ``write_config`` a
``roost.toml``; ``Daemon`` starts ``roost run`` on them, waits for ``/health``, reads the
process's RSS, open descriptors and CPU time from ``/proc``, and stops it (SIGTERM, or
SIGKILL for a crash). Everything is blocking and bounded.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

ECHO_SCRIPT: dict[str, Any] = {"rules": [{"match": ".", "reply": "echo: {message}"}]}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_agents(
    root: Path, names: Iterable[str], script: Mapping[str, Any] | None = None, **fields: Any
) -> Path:
    """One folder per name under ``root`` (``<root>/<name>/agent.json``), each a scripted
    agent following ``script`` (default: echo the message); ``fields`` go into every manifest."""
    root.mkdir(parents=True, exist_ok=True)
    for name in names:
        folder = root / name
        folder.mkdir(exist_ok=True)
        manifest = {
            "name": name,
            "description": f"Scripted agent {name}",
            "model": {
                "provider": "scripted",
                "name": "rules",
                "script": dict(script or ECHO_SCRIPT),
            },
            **fields,
        }
        (folder / "agent.json").write_text(json.dumps(manifest), encoding="utf-8")
    return root


def write_config(root: Path, *, agents_dir: Path, home: Path, extra: str = "") -> Path:
    """``<root>/roost.toml``: the data directory, the agents (no bundled ones), ``extra``."""
    path = root / "roost.toml"
    path.write_text(
        f"home = {json.dumps(str(home))}\n\n"
        f"[agents]\ndirs = [{json.dumps(str(agents_dir))}]\nbundled = false\n\n{extra}",
        encoding="utf-8",
    )
    return path


def proc_status(pid: int, field: str) -> int:
    """A ``kB`` or count field of ``/proc/<pid>/status`` (``VmRSS``, ``VmHWM``, ``Threads``)."""
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not found in /proc/{pid}/status")


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of ``pid`` so far."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def get(port: int, path: str, timeout: float = 5.0) -> tuple[int, Any]:
    """``GET http://127.0.0.1:<port><path>``: (status, decoded JSON or None)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        body = response.read()
    finally:
        conn.close()
    try:
        return response.status, json.loads(body)
    except ValueError:
        return response.status, None


class Daemon:
    """``roost run --port PORT`` (or ``command --port PORT``) with ``ROOST_CONFIG=config``;
    ``start()`` waits for ``/health``."""

    def __init__(
        self,
        config: Path,
        port: int | None = None,
        env: Mapping[str, str] | None = None,
        log: Path | None = None,
        command: list[str] | None = None,
    ) -> None:
        self.config = config
        # What runs it (``--port PORT`` is appended): ``roost run`` unless told otherwise.
        self.command = command or [str(Path(sys.executable).with_name("roost")), "run"]
        self.port = port or free_port()
        self.env = {**os.environ, "ROOST_CONFIG": str(config), **(env or {})}
        self.env.pop("ROOST_HOME", None)
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None
        self.boot_s: float | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> float:
        """Start it; seconds from spawning the process to ``/health`` answering 200."""
        out = open(self.log, "ab") if self.log else subprocess.DEVNULL  # closed below
        try:
            started = time.perf_counter()
            self.proc = subprocess.Popen(
                [*self.command, "--port", str(self.port)], env=self.env, stdout=out, stderr=out
            )
        finally:
            if self.log:
                out.close()
        deadline = started + timeout
        while time.perf_counter() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"roost run exited with {self.proc.returncode} (log: {self.log})"
                )
            try:
                status, _ = get(self.port, "/health", timeout=1.0)
            except OSError:
                status = 0
            if status == 200:
                self.boot_s = time.perf_counter() - started
                return self.boot_s
            time.sleep(0.01)
        self.kill()
        raise RuntimeError(
            f"roost run did not answer /health within {timeout:g} s (log: {self.log})"
        )

    def rss_kb(self) -> int:
        return proc_status(self.pid, "VmRSS")

    def fds(self) -> int:
        return open_fds(self.pid)

    def cpu_s(self) -> float:
        return cpu_seconds(self.pid)

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM, then wait (SIGKILL after ``timeout``); the exit code."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return -signal.SIGKILL

    def kill(self) -> None:
        """SIGKILL (a crash) and reap."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)

    def __enter__(self) -> Daemon:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
