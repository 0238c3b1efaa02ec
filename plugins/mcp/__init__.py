"""MCP for roost: client and server, both protocol eras, every transport.

This module is the server half's plugin (entry point ``mcp``): it mounts the daemon's
Streamable HTTP endpoints ``/mcp`` and ``/agents/<name>/mcp`` and runs the service that
owns their sessions. The stdio server is ``roost mcp``. Importing this package is cheap;
the protocol and HTTP modules load on first use.

Plugins may add resources and prompts to the ``/mcp`` surface by implementing
``roost_mcp_resources(kernel)`` / ``roost_mcp_prompts(kernel)`` (see ``McpHookSpecs``),
returning ``ResourceEntry`` / ``PromptEntry`` objects from ``roost.plugins.mcp._server``.
"""

from __future__ import annotations

from typing import Any

from roost.kernel import RouteDescriptor, ServiceDescriptor, hookimpl, hookspec


class McpHookSpecs:
    """Hooks of the MCP server plugin (optional; other plugins implement them)."""

    @hookspec
    def roost_mcp_resources(self, kernel: Any) -> list[Any]:
        """Return extra ``ResourceEntry`` objects for the ``/mcp`` surface."""

    @hookspec
    def roost_mcp_resource_templates(self, kernel: Any) -> list[Any]:
        """Return extra ``TemplateEntry`` objects for the ``/mcp`` surface."""

    @hookspec
    def roost_mcp_prompts(self, kernel: Any) -> list[Any]:
        """Return extra ``PromptEntry`` objects for the ``/mcp`` surface."""


def _add_specs(kernel: Any) -> None:
    plugins = getattr(kernel, "plugins", None)
    if plugins is not None and not getattr(plugins, "_roost_mcp_specs", False):
        try:
            plugins.add_hookspecs(McpHookSpecs)
            plugins._roost_mcp_specs = True
        except Exception:  # a fake plugin manager in tests; the hooks are optional anyway
            pass


@hookimpl
def roost_http_routes(kernel: Any) -> list[RouteDescriptor]:
    from ._http_server import mcp_routes

    _add_specs(kernel)
    return mcp_routes(kernel)


@hookimpl
def roost_services(kernel: Any) -> list[ServiceDescriptor]:
    from ._http_server import run_hub

    _add_specs(kernel)
    return [ServiceDescriptor("mcp-http", run_hub, start_timeout_s=5.0)]


def report_progress(ctx: Any, progress: float, total: float | None = None, message: str | None = None) -> None:
    """From inside a tool: report progress to the MCP client that called it (if it asked)."""
    from ._server import report_progress as impl

    impl(ctx, progress, total, message)


async def request_client(ctx: Any, method: str, params: Any = None, *, timeout_s: float = 60.0) -> Any:
    """From inside a tool: ask the MCP client that called it (sampling, elicitation, roots)."""
    from ._server import request_client as impl

    return await impl(ctx, method, params, timeout_s=timeout_s)


def report_log(ctx: Any, level: str, data: Any, logger: str | None = None) -> None:
    """From inside a tool: send a log message to the MCP client (if it set a log level)."""
    from ._server import report_log as impl

    impl(ctx, level, data, logger)


__all__ = ["McpHookSpecs", "report_log", "report_progress", "request_client", "roost_http_routes", "roost_services"]
