"""A2A for roost: server and client (1.0, 0.3 and the seed's 0.1 shape).

The plugin mounts agent cards and the JSON-RPC, HTTP+JSON and 0.1 routes on the daemon
(``roost_http_routes``), runs the task service (``roost_services``: task store, recovery,
push delivery, ``[[a2a.external_agents]]`` as ``a2a_{name}`` tools) and offers a client.
"""

from __future__ import annotations

import logging
from typing import Any

from roost.kernel import ConfigError, KernelAPI, RouteDescriptor, ServiceDescriptor, hookimpl

from ._client import A2AClient, AgentInfo, discover
from ._models import A2AError
from ._settings import A2ASettings, ExternalAgent

log = logging.getLogger("roost.a2a")

__all__ = [
    "A2AClient",
    "A2AError",
    "A2ASettings",
    "AgentInfo",
    "ExternalAgent",
    "discover",
    "roost_check_config",
    "roost_http_routes",
    "roost_services",
]


def _settings(kernel: KernelAPI) -> A2ASettings:
    try:
        return A2ASettings.from_config(kernel.config.a2a)
    except ConfigError as exc:
        log.error("A2A is off: %s", exc)
        raise


@hookimpl
def roost_check_config(config: Any) -> None:
    A2ASettings.from_config(getattr(config, "a2a", None))  # a bad [a2a] stops the boot


@hookimpl
def roost_http_routes(kernel: KernelAPI) -> list[RouteDescriptor]:
    settings = _settings(kernel)
    if not settings.enabled:
        return []
    from ._external import status_route
    from ._server import check_default_agent, make_routes

    # Needs the loaded agents, so not in roost_check_config: a ConfigError here stops the
    # daemon before it listens (``roost run`` exits non-zero naming the setting).
    check_default_agent(kernel, settings)
    return [*make_routes(kernel, settings), status_route(kernel)]


@hookimpl
def roost_services(kernel: KernelAPI) -> list[ServiceDescriptor]:
    settings = _settings(kernel)
    if not settings.enabled:
        return []
    from ._server import A2AService

    service = A2AService(kernel, settings)
    return [ServiceDescriptor("a2a", service.run, start_timeout_s=30.0)]
