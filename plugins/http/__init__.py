"""roost.plugins.http — the daemon, served by ``hypercorn.trio.serve``.

Endpoints: ``GET /health`` (public), ``GET /api/agents``, ``GET /api/agents/{name}``,
``POST /api/agents/{name}/message``, ``GET /api/tools[?agent=NAME]``, the websocket
``/api/events[?kinds=EXEC:,AGENT:REPLY]`` (a quart-trio app), and routes from the
``roost_http_routes`` hook (plain handlers: ``PlainRequest`` → ``PlainResponse``).

Importing this package is cheap: Quart and Hypercorn load on first use of ``create_app``,
``serve`` or ``open_daemon`` (the CLI's start-up time depends on it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:  # pragma: no cover
    from ._app import DaemonState, create_app, daemon_state, parse_kinds
    from ._common import (
        InvalidRequest,
        base_url,
        jsonrpc_error_code,
        loopback_for,
        reply_json,
        status_for,
        tool_json,
    )
    from ._plain import PlainRequest, PlainResponse
    from ._server import open_daemon, serve
    from ._settings import HttpSettings

_LAZY = {
    "create_app": "._app",
    "daemon_state": "._app",
    "DaemonState": "._app",
    "InvalidRequest": "._common",
    "jsonrpc_error_code": "._common",
    "parse_kinds": "._app",
    "status_for": "._common",
    "PlainRequest": "._plain",
    "PlainResponse": "._plain",
    "serve": "._server",
    "open_daemon": "._server",
    "base_url": "._common",
    "loopback_for": "._common",
    "reply_json": "._common",
    "tool_json": "._common",
    "HttpSettings": "._settings",
}

__all__ = [
    "DaemonInfo",
    "DaemonState",
    "Gcra",
    "HttpSettings",
    "InvalidRequest",
    "PlainRequest",
    "PlainResponse",
    "Principal",
    "base_url",
    "loopback_for",
    "bearer_token",
    "create_app",
    "daemon_file",
    "daemon_http_client",
    "daemon_state",
    "find_daemon",
    "jsonrpc_error_code",
    "open_daemon",
    "origin_allowed",
    "parse_kinds",
    "pid_alive",
    "principal_of",
    "read_daemon_file",
    "remove_daemon_file",
    "reply_json",
    "resolve_api_key",
    "serve",
    "status_for",
    "tokens_match",
    "tool_json",
    "write_daemon_file",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value
