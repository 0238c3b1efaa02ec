"""Serving the app with hypercorn's trio worker, plus ``<home>/daemon.json`` bookkeeping."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import trio
from hypercorn.config import Config as HyperConfig
from hypercorn.trio import serve as hypercorn_serve

from ._app import create_app, daemon_state
from ._asgi import DrainingApp
from ._daemonfile import DaemonInfo, remove_daemon_file, write_daemon_file

log = logging.getLogger("roost.http")

DEFAULT_GRACEFUL_TIMEOUT = 5.0
WEBSOCKET_MAX_MESSAGE_BYTES = 64 * 1024


def _hyper_config(host: str, port: int, graceful_timeout: float) -> HyperConfig:
    config = HyperConfig()
    bind_host = f"[{host}]" if ":" in host and not host.startswith("[") else host
    config.bind = [f"{bind_host}:{port}"]
    config.graceful_timeout = graceful_timeout
    config.websocket_max_message_size = WEBSOCKET_MAX_MESSAGE_BYTES
    config.errorlog = logging.getLogger("roost.http.server")
    access = logging.getLogger("roost.http.access")
    # hypercorn formats the access-log fields of every request whenever an access logger is
    # set, logged or not; set it only when that logger would write something.
    if access.isEnabledFor(logging.INFO):
        config.accesslog = access
        # %(r)s is the request line without the query string, so ?token= never reaches a log.
        config.access_log_format = '%(h)s "%(r)s" %(s)s %(b)s %(D)sus'
    return config


async def serve(
    kernel: Any,
    *,
    host: str = "127.0.0.1",
    port: int = 8470,
    shutdown_trigger: Callable[[], Awaitable[Any]] | None = None,
    graceful_timeout: float = DEFAULT_GRACEFUL_TIMEOUT,
    app: Any = None,
    write_daemon_json: bool = True,
    task_status: trio.TaskStatus[tuple[str, int]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``kernel``'s HTTP API until ``shutdown_trigger()`` returns (or cancellation).

    Use as ``host, port = await nursery.start(partial(serve, kernel, host=..., port=0))``:
    the bound address is reported through ``task_status`` (port 0 picks a free port).
    When the trigger returns, open websockets are closed with 1001 and in-flight requests
    get ``graceful_timeout`` seconds to finish. While serving, ``<home>/daemon.json``
    records the pid, host and port so the CLI can find this daemon.
    """
    if app is None:
        app = create_app(kernel)
    state = daemon_state(app)

    async def trigger() -> None:
        if shutdown_trigger is None:
            await trio.sleep_forever()
        else:
            await shutdown_trigger()
        state.closing.set()

    hyper_config = _hyper_config(host, port, graceful_timeout)
    home = Path(kernel.config.home)
    owner: DaemonInfo | None = None
    try:
        async with trio.open_nursery() as nursery:
            binds = await nursery.start(
                partial(
                    hypercorn_serve,
                    DrainingApp(app),
                    hyper_config,
                    shutdown_trigger=trigger,
                    mode="asgi",
                )
            )
            bound_host, bound_port = _parse_bind(binds[0]) if binds else (host, port)
            if write_daemon_json:
                owner = write_daemon_file(home, bound_host, bound_port)
            log.debug("roost daemon listening on %s:%s", bound_host, bound_port)
            task_status.started((bound_host, bound_port))
    except BaseExceptionGroup as group:
        if owner is None:  # failed while starting: surface the cause (e.g. port in use) plainly
            cause = _sole_cause(group)
            if cause is not None:
                raise cause from None
        raise
    finally:
        state.closing.set()
        if owner is not None:
            remove_daemon_file(home, owner)


def _sole_cause(group: BaseExceptionGroup) -> BaseException | None:
    leaves: list[BaseException] = []

    def walk(exc: BaseException) -> None:
        if isinstance(exc, BaseExceptionGroup):
            for inner in exc.exceptions:
                walk(inner)
        else:
            leaves.append(exc)

    walk(group)
    return leaves[0] if len(leaves) == 1 and isinstance(leaves[0], Exception) else None


def _parse_bind(bind: str) -> tuple[str, int]:
    parts = urlsplit(bind)
    return parts.hostname or "127.0.0.1", int(parts.port or 0)


def base_url(host: str, port: int) -> str:
    """``http://host:port`` (IPv6 hosts bracketed)."""
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}"


@asynccontextmanager
async def open_daemon(
    kernel: Any,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    graceful_timeout: float = DEFAULT_GRACEFUL_TIMEOUT,
    app: Any = None,
) -> AsyncIterator[str]:
    """Serve ``kernel`` for the duration of the block; yields the base URL.

    On exit the daemon shuts down gracefully, bounded by ``graceful_timeout`` (plus a
    second of slack, after which everything left is cancelled).
    """
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
