"""MCP for roost: client and server, both protocol eras, every transport.

The server half's plugin (entry point ``mcp``): the daemon's Streamable HTTP endpoints
``/mcp`` and ``/agents/<name>/mcp`` and the service owning their sessions (stdio: ``roost
mcp``). Plugins may add resources and prompts to ``/mcp`` (``McpHookSpecs``); tools reach
their MCP client with ``report_progress``, ``request_client`` and their kin. Importing is
cheap: the names re-exported here load on first use from ``_server``, ``_tool_context``
(a call's reach to its client) and ``_connection`` (serving a message stream).
"""

from __future__ import annotations

from typing import Any

from roost.kernel import KernelAPI, RouteDescriptor, ServiceDescriptor, hookimpl, hookspec


class McpHookSpecs:
    """Hooks of the MCP server plugin (optional; other plugins implement them)."""

    @hookspec
    def roost_mcp_resources(self, kernel: KernelAPI) -> list[Any]:
        """Return extra ``ResourceEntry`` objects for the ``/mcp`` surface."""

    @hookspec
    def roost_mcp_resource_templates(self, kernel: KernelAPI) -> list[Any]:
        """Return extra ``TemplateEntry`` objects for the ``/mcp`` surface."""

    @hookspec
    def roost_mcp_prompts(self, kernel: KernelAPI) -> list[Any]:
        """Return extra ``PromptEntry`` objects for the ``/mcp`` surface."""


def _add_specs(kernel: KernelAPI) -> None:
    """Teach the kernel's plugin manager this plugin's hooks (once per kernel)."""
    hook = getattr(kernel.plugins.hook, "roost_mcp_resources", None)  # pluggy's HookRelay
    if hook is None or not hook.has_spec():
        kernel.plugins.add_hookspecs(McpHookSpecs)


@hookimpl
def roost_http_routes(kernel: KernelAPI) -> list[RouteDescriptor]:
    from ._http_server import mcp_routes

    _add_specs(kernel)
    return mcp_routes(kernel)


@hookimpl
def roost_services(kernel: KernelAPI) -> list[ServiceDescriptor]:
    from ._http_server import run_hub

    _add_specs(kernel)
    return [ServiceDescriptor("mcp-http", run_hub, start_timeout_s=5.0)]


# Each re-exported name → the private module that defines it (loaded on first use; not
# listed by dir(), so that registering this module as a plugin loads none of them).
_EXPORTS = {
    name: module
    for module, names in {
        "_server": (
            "ARTIFACT_TTL_S DEFAULT_PAGE_SIZE PROMPTS_CHANGED_EVENT RESOURCES_CHANGED_EVENT "
            "ArtifactShelf McpServer PromptEntry ResourceEntry ServerSession TemplateEntry "
            "ToolEntry agent_card agent_manifest_view artifact_shelf change_notifications"
        ),
        "_connection": "MAX_IN_FLIGHT serve_connection",
        "_tool_context": (
            "LOG_EVENT PROGRESS_EVENT ClientRequestFailed client_capabilities gather_input "
            "report_log report_progress request_client request_state require_client_capability"
        ),
    }.items()
    for name in names.split()
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


__all__ = ["McpHookSpecs", "roost_http_routes", "roost_services", *_EXPORTS]
