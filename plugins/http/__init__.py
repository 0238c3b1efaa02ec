"""roost.plugins.http — the daemon (``/health``, ``/api/...``, the ``/api/events`` websocket,
the dashboard and the ``roost_http_routes`` plugin routes), served by hypercorn. Importing it is
cheap (CLI start-up): Quart and Hypercorn load on first use.
"""

from __future__ import annotations

from typing import Any

from ._auth import (
    Principal,
    bearer_token,
    origin_allowed,
    principal_of,
    resolve_api_key,
    tokens_match,
)
from ._daemonfile import (
    DaemonInfo,
    daemon_file,
    daemon_http_client,
    find_daemon,
    pid_alive,
    read_daemon_file,
    remove_daemon_file,
    write_daemon_file,
)
from ._ratelimit import Gcra

# Loaded on first use (they import Quart and Hypercorn): name -> module.
_LAZY = {
    name: module
    for module, names in {
        "._app": ("create_app", "daemon_state", "parse_kinds"),
        "._common": (
            "DaemonState",
            "InvalidRequest",
            "base_url",
            "jsonrpc_error_code",
            "loopback_for",
            "reply_json",
            "status_for",
            "tool_json",
        ),
        "._plain": ("PlainRequest", "PlainResponse"),
        "._server": ("open_daemon", "serve"),
        "._settings": ("HttpSettings",),
    }.items()
    for name in names
}

__all__ = [
    "DaemonInfo",
    "Gcra",
    "Principal",
    "bearer_token",
    "daemon_file",
    "daemon_http_client",
    "find_daemon",
    "origin_allowed",
    "pid_alive",
    "principal_of",
    "read_daemon_file",
    "remove_daemon_file",
    "resolve_api_key",
    "tokens_match",
    "write_daemon_file",
    *_LAZY,
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value
