"""Plugin hooks of roost's MCP client half (entry point ``mcp_client``): the manager
service and ``GET /api/mcp/servers`` (``McpManager.status``; a stdio server's command
line shown to admin principals only)."""

from __future__ import annotations

from typing import Any

from roost.kernel import KernelAPI, RouteDescriptor, ServiceDescriptor, hookimpl

from ._manager import McpManager, check_config_servers

_MANAGER = "roost.plugins.mcp.manager"  # its key in kernel.extensions


def manager_for(kernel: KernelAPI) -> McpManager | None:
    """The MCP manager running in ``kernel`` (None before the service started)."""
    return kernel.extensions.get(_MANAGER)


async def _run_manager(kernel: KernelAPI, *, task_status: Any) -> None:
    manager = McpManager(kernel)
    kernel.extensions[_MANAGER] = manager
    try:
        await manager.run(task_status=task_status)
    finally:
        kernel.extensions.pop(_MANAGER, None)


@hookimpl
def roost_check_config(config: Any) -> None:
    check_config_servers(config)  # a bad [[mcp_servers]] entry stops the boot


@hookimpl
def roost_services(kernel: KernelAPI) -> list[ServiceDescriptor]:
    return [ServiceDescriptor("mcp-client", _run_manager, start_timeout_s=10.0)]


@hookimpl
def roost_http_routes(kernel: KernelAPI) -> list[RouteDescriptor]:
    async def list_servers(request: Any) -> Any:
        from roost.plugins.http import PlainResponse, principal_of

        manager = manager_for(kernel)
        if manager is None:
            return PlainResponse.json(
                {
                    "configured": [],
                    "connected": [],
                    "errors": ["the MCP client service is not running"],
                }
            )
        principal = principal_of(request)  # a command line is an admin's, as /api/events
        return PlainResponse.json(manager.status(admin=principal is not None and principal.admin))

    return [RouteDescriptor("/api/mcp/servers", list_servers, methods=("GET",))]
