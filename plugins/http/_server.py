"""Serving the daemon with hypercorn's public API, plus ``<home>/daemon.json`` bookkeeping.

The listening socket is ours (served as ``fd://N``), so connections inherit its options:
``TCP_USER_TIMEOUT`` aborts one whose peer has not taken our data for ``SEND_TIMEOUT_S``. Idle
connections close after ``http.keep_alive_s``. When accept() runs out of descriptors Trio
retries; ``_AcceptErrors`` turns its tracebacks into a warning now and then.
"""

from __future__ import annotations

import contextlib
import logging
import re
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import trio
from hypercorn.config import Config as HyperConfig
from hypercorn.trio import serve as hypercorn_serve
from roost.kernel import KernelAPI

from ._app import create_app, daemon_state
from ._asgi import DaemonApp
from ._common import base_url, daemon_public_url, loopback_for
from ._daemonfile import DaemonInfo, remove_daemon_file, write_daemon_file
from ._settings import HttpSettings
from ._traces import follow as follow_traces

log = logging.getLogger("roost.http")

DEFAULT_GRACEFUL_TIMEOUT = 5.0
WEBSOCKET_MAX_MESSAGE_BYTES = 64 * 1024
SEND_TIMEOUT_S = 30.0
# Connections queued while the daemon is busy (capped by net.core.somaxconn): past it a SYN
# is dropped and retried after 1 s, 3 s, 7 s..., too late for a thousand callers at once.
BACKLOG = 4096
WARN_EVERY_S = 10.0
ACCEPT_LOGGER = "trio.serve_listeners"  # where trio.serve_listeners reports failed accepts


def listen_socket(host: str, port: int) -> socket.socket:
    """A bound, non-blocking TCP socket for ``host:port`` (port 0: a free one)."""
    host = host.strip("[]")
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if hasattr(socket, "TCP_USER_TIMEOUT"):  # Linux
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, int(SEND_TIMEOUT_S * 1000))
        sock.bind((host, port))
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


def _hyper_config(fd: int, graceful_timeout: float, settings: HttpSettings) -> HyperConfig:
    config = HyperConfig()
    config.bind = [f"fd://{fd}"]
    config.backlog = BACKLOG
    config.graceful_timeout = graceful_timeout
    config.keep_alive_timeout = settings.keep_alive_s
    config.websocket_max_message_size = WEBSOCKET_MAX_MESSAGE_BYTES
    config.include_server_header = False
    config.errorlog = logging.getLogger("roost.http.server")
    access = logging.getLogger("roost.http.access")
    # hypercorn formats access-log fields whenever a logger is set: set one only if it logs.
    if access.isEnabledFor(logging.INFO):
        config.accesslog = access
        config.logger_class = _AccessLog  # so that ?token= never reaches a log
        config.access_log_format = '%(h)s "%(r)s" %(s)s %(b)s %(D)sus'
    return config


_TOKEN_VALUE = re.compile(r"(token=)[^;&/?#]*", re.IGNORECASE)


class _AccessLog(HyperConfig.logger_class):  # type: ignore[misc,valid-type]
    """hypercorn's logger (``Config.logger_class``) whose access log never shows a key: the
    request line holds the path without the query (browsers pass ``?token=``)."""

    def atoms(self, request: Any, response: Any, request_time: float) -> Any:
        atoms = super().atoms(request, response, request_time)
        # The path up to a ``?`` (it is decoded: a ``%3F`` is one too), with no ``token=`` value.
        path = _TOKEN_VALUE.sub(r"\1…", str(request.get("path", "")).partition("?")[0])
        atoms["r"] = atoms["R"] = f"{atoms['m']} {path} {atoms['H']}"
        atoms["U"] = atoms["Uq"] = path
        atoms["q"] = ""
        return atoms


class _AcceptErrors(logging.Filter):
    """Drop trio's log lines for a failing accept(); warn every ``WARN_EVERY_S`` instead."""

    def __init__(self, settings: HttpSettings) -> None:
        super().__init__()
        self.settings = settings
        # Read now (out of descriptors, an import would fail); None: unlimited, or unreadable.
        self.limit: int | None = None
        with contextlib.suppress(ImportError, OSError, ValueError):
            import resource

            soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
            self.limit = None if soft == resource.RLIM_INFINITY else soft
        self.last = -WARN_EVERY_S

    def filter(self, record: logging.LogRecord) -> bool:
        now = time.monotonic()
        if now - self.last >= WARN_EVERY_S:
            self.last = now
            name = str(record.args[0]) if isinstance(record.args, tuple) and record.args else ""
            want = "memory" if name in ("ENOMEM", "ENOBUFS") else "file descriptors"
            log.warning(
                "cannot accept connections: out of %s (open-file limit: %s); waiting for "
                "connections to close (idle ones close after http.keep_alive_s = %g s). Raise "
                "the open-file limit (ulimit -n) or lower http.keep_alive_s in roost.toml",
                want,
                self.limit or "unlimited",
                self.settings.keep_alive_s,
            )
        return False


async def serve(
    kernel: KernelAPI,
    *,
    host: str = "127.0.0.1",
    port: int = 8470,
    shutdown_trigger: Callable[[], Awaitable[Any]] | None = None,
    graceful_timeout: float = DEFAULT_GRACEFUL_TIMEOUT,
    app: Any = None,
    write_daemon_json: bool = True,
    task_status: trio.TaskStatus[tuple[str, int]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``kernel``'s HTTP API until ``shutdown_trigger()`` returns (or cancellation);
    ``nursery.start`` gives the bound ``(host, port)``. Then websockets close with 1001 and
    requests get ``graceful_timeout`` seconds. While serving, ``<home>/daemon.json`` tells the
    CLI where this daemon is."""
    if app is None:
        app = create_app(kernel)
    state = daemon_state(app)

    async def trigger() -> None:
        await (shutdown_trigger or trio.sleep_forever)()
        state.closing.set()

    sock = listen_socket(host, port)
    bound_host, bound_port = sock.getsockname()[:2]
    state.public_url = daemon_public_url(state.settings.public_url, bound_host, bound_port)
    # hypercorn owns the descriptor from here and closes it when it stops listening
    config = _hyper_config(sock.detach(), graceful_timeout, state.settings)
    home = Path(kernel.config.home)
    owner: DaemonInfo | None = None
    accept_log = logging.getLogger(ACCEPT_LOGGER)
    quiet = _AcceptErrors(state.settings)
    accept_log.addFilter(quiet)
    try:
        async with trio.open_nursery() as nursery:
            if state.traces.max_traces:  # until shutdown begins: then the server drains
                await nursery.start(follow_traces, kernel, state.traces, state.closing)
            await nursery.start(
                partial(
                    hypercorn_serve,
                    DaemonApp(app, state),
                    config,
                    shutdown_trigger=trigger,
                    mode="asgi",
                )
            )
            if write_daemon_json:
                # Local clients use loopback: a wildcard address names a Host not served.
                owner = write_daemon_file(home, loopback_for(bound_host), bound_port)
            log.debug("roost daemon listening on %s:%s", bound_host, bound_port)
            task_status.started((bound_host, bound_port))
    except BaseExceptionGroup as group:
        if owner is None:  # failed while starting: surface the cause plainly
            if (cause := _sole_cause(group)) is not None:
                raise cause from None
        raise
    finally:
        accept_log.removeFilter(quiet)
        state.closing.set()
        if owner is not None:
            remove_daemon_file(home, owner)


def _sole_cause(group: BaseExceptionGroup) -> BaseException | None:
    """The one exception ``group`` holds, unless it is a BaseException such as Cancelled."""
    exc: BaseException = group
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc if isinstance(exc, Exception) and not isinstance(exc, BaseExceptionGroup) else None


@asynccontextmanager
async def open_daemon(
    kernel: KernelAPI,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    graceful_timeout: float = DEFAULT_GRACEFUL_TIMEOUT,
    app: Any = None,
) -> AsyncIterator[str]:
    """Serve ``kernel`` for the block, yielding the base URL; on exit the daemon shuts down
    within ``graceful_timeout`` plus a second."""
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        bound_host, bound_port = await nursery.start(
            partial(
                serve,
                kernel,
                host=host,
                port=port,
                shutdown_trigger=stop.wait,
                graceful_timeout=graceful_timeout,
                app=app,
            )
        )
        try:
            yield base_url(bound_host, bound_port)
        finally:
            stop.set()
            nursery.cancel_scope.deadline = trio.current_time() + graceful_timeout + 1.0
