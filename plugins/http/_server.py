"""Serving the daemon: the fast lane (``_fastlane``) in front of hypercorn's trio
connection server, plus ``<home>/daemon.json`` bookkeeping.

``_worker_serve`` is hypercorn's ``trio.run.worker_serve`` (lifespan, worker context,
listeners, graceful shutdown) with one change: the fast lane accepts the connections
(bounded by ``http.max_connections``) and hands anything it does not serve itself to
hypercorn's ``TCPServer``. It uses hypercorn internals, so pyproject pins hypercorn's minor
version. Hypercorn's own limits are set through its public ``Config``: its keep-alive idle
timeout is ``http.keep_alive_s``.
"""

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
from hypercorn.trio.lifespan import Lifespan
from hypercorn.trio.statsd import StatsdLogger
from hypercorn.trio.tcp_server import TCPServer
from hypercorn.trio.worker_context import WorkerContext
from hypercorn.typing import ConnectionState
from hypercorn.utils import ShutdownError, raise_shutdown, repr_socket_addr, wrap_app

from ._app import create_app, daemon_state, route_for
from ._asgi import DrainingApp
from ._common import base_url, daemon_public_url, loopback_for
from ._daemonfile import DaemonInfo, remove_daemon_file, write_daemon_file
from ._fastlane import FastLane
from ._settings import HttpSettings

log = logging.getLogger("roost.http")

DEFAULT_GRACEFUL_TIMEOUT = 5.0
WEBSOCKET_MAX_MESSAGE_BYTES = 64 * 1024


def _hyper_config(host: str, port: int, graceful_timeout: float, settings: HttpSettings) -> HyperConfig:
    config = HyperConfig()
    bind_host = f"[{host}]" if ":" in host and not host.startswith("[") else host
    config.bind = [f"{bind_host}:{port}"]
    config.graceful_timeout = graceful_timeout
    # Idle between requests: closed after http.keep_alive_s (the timer does not run while a
    # request, a stream or a websocket is under way). The wait for a later request's head
    # counts as idle, so it is bounded by the same limit.
    config.keep_alive_timeout = settings.keep_alive_s
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

    hyper_config = _hyper_config(host, port, graceful_timeout, state.settings)
    home = Path(kernel.config.home)
    owner: DaemonInfo | None = None
    try:
        async with trio.open_nursery() as nursery:
            binds = await nursery.start(partial(_worker_serve, app, hyper_config, shutdown_trigger=trigger))
            bound_host, bound_port = _parse_bind(binds[0]) if binds else (host, port)
            if write_daemon_json:
                # Clients on this host connect through loopback: a wildcard address would
                # reach the daemon but name a Host it does not serve.
                owner = write_daemon_file(home, loopback_for(bound_host), bound_port)
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


async def _worker_serve(
    app: Any,
    config: HyperConfig,
    *,
    shutdown_trigger: Callable[[], Awaitable[Any]],
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """hypercorn's ``worker_serve`` (plain HTTP only), connections entering the fast lane."""
    asgi = wrap_app(DrainingApp(app), config.wsgi_max_body_size, "asgi")
    state = daemon_state(app)
    config.set_statsd_logger_class(StatsdLogger)
    lifespan_state: dict[str, Any] = {}
    lifespan = Lifespan(asgi, config, lifespan_state)
    context = WorkerContext(None)

    async with trio.open_nursery() as lifespan_nursery:
        await lifespan_nursery.start(lifespan.handle_lifespan)
        await lifespan.wait_for_startup()

        async with trio.open_nursery() as server_nursery:
            sockets = config.create_sockets()
            listeners = []
            binds = []
            for sock in sockets.insecure_sockets:
                sock.listen(config.backlog)
                listeners.append(trio.SocketListener(trio.socket.from_stdlib_socket(sock)))
                bind = repr_socket_addr(sock.family, sock.getsockname())
                binds.append(f"http://{bind}")
                await config.log.info(f"Running on http://{bind} (CTRL + C to quit)")
            if binds:
                state.public_url = daemon_public_url(state.settings.public_url, *_parse_bind(binds[0]))
            connection_state = ConnectionState(lifespan_state.copy())

            async def hand_off(stream: Any) -> None:
                await TCPServer(asgi, config, context, connection_state, stream).run()

            lane = FastLane(state, partial(route_for, app, state), hand_off)
            task_status.started(binds)
            try:
                async with trio.open_nursery(strict_exception_groups=True) as nursery:
                    nursery.start_soon(raise_shutdown, shutdown_trigger)
                    nursery.start_soon(raise_shutdown, context.terminate.wait)
                    for listener in listeners:
                        nursery.start_soon(lane.serve_listener, listener, server_nursery)
                    await trio.sleep_forever()
            except BaseExceptionGroup as error:
                _, other_errors = error.split((ShutdownError, KeyboardInterrupt))
                if other_errors is not None:
                    raise other_errors from None
            finally:
                lane.close()
                await context.terminated.set()
                server_nursery.cancel_scope.deadline = trio.current_time() + config.graceful_timeout

        await lifespan.wait_for_shutdown()
        lifespan_nursery.cancel_scope.cancel()


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
