"""``<home>/daemon.json``: how the CLI finds a running daemon.

Cheap to import (no Trio, no Quart) so the CLI can use it at start-up.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import attrs

DAEMON_FILE = "daemon.json"


@attrs.frozen
class DaemonInfo:
    """Where a daemon listens, which process it is and when it started (Unix time)."""

    pid: int
    host: str
    port: int
    started: float

    @property
    def url(self) -> str:
        return base_url(self.host, self.port)

    def to_dict(self) -> dict:
        return attrs.asdict(self)


def base_url(host: str, port: int) -> str:
    """``http://host:port`` (IPv6 hosts bracketed)."""
    shown = f"[{host}]" if ":" in host and not host.startswith("[") else host
    return f"http://{shown}:{port}"


def daemon_file(home: Path | str) -> Path:
    """The path of the daemon file under ``home``."""
    return Path(home) / DAEMON_FILE


def write_daemon_file(
    home: Path | str, host: str, port: int, *, pid: int | None = None
) -> DaemonInfo:
    """Atomically write the daemon file for this process; returns what was written."""
    info = DaemonInfo(os.getpid() if pid is None else pid, host, port, time.time())
    path = daemon_file(home)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{DAEMON_FILE}.{info.pid}.tmp")
    tmp.write_text(json.dumps(info.to_dict()) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return info


def read_daemon_file(home: Path | str) -> DaemonInfo | None:
    """The daemon file's contents, or None if it is missing or malformed."""
    try:
        data = json.loads(daemon_file(home).read_text(encoding="utf-8"))
        pid, host, port, started = data["pid"], data["host"], data["port"], data.get("started", 0)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not (isinstance(pid, int) and isinstance(host, str) and isinstance(port, int)):
        return None
    if not isinstance(started, (int, float)) or not 0 < port < 65536 or pid <= 0:
        return None
    return DaemonInfo(pid, host, port, float(started))


def remove_daemon_file(home: Path | str, owner: DaemonInfo) -> None:
    """Remove the daemon file if it still describes ``owner`` (same pid and port)."""
    info = read_daemon_file(home)
    if info is not None and (info.pid, info.port) != (owner.pid, owner.port):
        return  # another daemon has taken over this home since
    daemon_file(home).unlink(missing_ok=True)


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists (it may belong to another user)."""
    try:
        os.kill(pid, 0)
    except PermissionError:
        return True
    except OSError:  # ProcessLookupError among them
        return False
    return True


HEALTH_TIMEOUT_S = 1.0


def daemon_http_client(url: str, **options: Any) -> Any:
    """An ``httpx.AsyncClient`` for the daemon at ``url``: for plain HTTP without loading
    the CA bundle (slow, and nothing to verify); an ``https`` URL keeps verification."""
    import httpx  # lazily: importing this module must stay cheap (CLI start-up)

    plain = url.startswith("http://")
    return httpx.AsyncClient(verify=not plain, **options)


async def find_daemon(home: Path | str) -> DaemonInfo | None:
    """The daemon serving ``home``, if ``daemon.json`` names a live process that answers /health."""
    info = read_daemon_file(home)
    if info is None or not pid_alive(info.pid):
        return None
    import httpx  # lazily: importing this module must stay cheap (CLI start-up)

    try:
        async with daemon_http_client(info.url, timeout=HEALTH_TIMEOUT_S) as client:
            response = await client.get(info.url + "/health")
    except httpx.HTTPError:
        return None
    if response.status_code != 200:
        return None
    try:
        healthy = response.json().get("status") == "ok"
    except (ValueError, AttributeError):
        return None
    return info if healthy else None
