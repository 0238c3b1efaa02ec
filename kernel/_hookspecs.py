"""pluggy hook specifications: project ``roost``, entry-point group ``roost.plugins``.

Hooks are synchronous and return descriptors; the kernel does the async work.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import pluggy

if TYPE_CHECKING:  # pragma: no cover
    from ._api import KernelAPI

PROJECT = "roost"
ENTRY_POINT_GROUP = "roost.plugins"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@attrs.frozen
class ProviderDescriptor:
    """A model provider: ``factory(model_config, provider_settings)`` returns a ``Provider``."""

    name: str
    factory: Callable[..., Any] = attrs.field(eq=False, repr=False)
    description: str = ""
    requires_env: tuple[str, ...] = ()


@attrs.frozen
class RouteDescriptor:
    """An HTTP route served by the daemon. ``handler``: ``async (PlainRequest, **path_args)
    -> PlainResponse`` (``roost.plugins.http``; a body of bytes or an async iterable of them),
    called after the daemon's Host, Origin, auth, rate-limit and body-size checks. ``path``: a
    werkzeug rule (``/x/<name>``), served with and without a trailing slash. ``methods``: GET
    brings HEAD; OPTIONS without a handler is a CORS preflight. ``max_body_bytes``: None keeps
    ``http.max_body_bytes``. ``render_error``: ``(status, roost error code, message) -> (body,
    content type)`` for the daemon's errors on this route (and unmatched paths sharing the
    most leading segments); None keeps ``{"error": {"code", "message"}}``."""

    path: str
    handler: Callable[..., Any] = attrs.field(eq=False, repr=False)
    methods: tuple[str, ...] = ("GET",)
    public: bool = False  # True: no bearer auth (like /health)
    max_body_bytes: int | None = None
    render_error: Callable[[int, str, str], tuple[bytes, str]] | None = attrs.field(
        default=None, eq=False, repr=False
    )


@attrs.frozen
class McpServerDescriptor:
    """An MCP server to connect to (fields as ``[[mcp_servers]]``): ``protocol`` "auto" or
    a version; ``sampling``: it may ask the agent's model; ``allow_local``: private URLs."""

    name: str
    transport: Mapping[str, Any]
    timeout_secs: float = 30.0
    env: tuple[str, ...] = ()
    protocol: str = "auto"
    sampling: bool = False
    allow_local: bool = False


@attrs.frozen
class ServiceDescriptor:
    """A plugin's long-running task in the kernel's nursery: ``run(kernel, task_status=...)``
    calls ``started()`` once ready (awaited ``start_timeout_s``); a failure is only reported."""

    name: str
    run: Callable[..., Any] = attrs.field(eq=False, repr=False)
    start_timeout_s: float = 30.0


@attrs.frozen
class ToolVeto:
    """Returned by ``roost_before_tool_call`` to refuse a call; ``reason`` reaches the model."""

    reason: str
    plugin: str = ""


class RoostHookSpecs:
    """Every hook a plugin may implement. Implement any subset."""

    @hookspec
    def roost_tools(self, config: Any) -> Sequence[Any]:
        """Return ``Tool`` descriptors (``roost.kernel.Tool``) this plugin provides."""

    @hookspec
    def roost_check_config(self, config: Any) -> None:
        """Check what this plugin reads of ``config`` (``[providers.<name>]``, ``[a2a]``, …):
        ``ConfigError`` naming the key, valid keys and fix stops the boot (nothing started)."""

    @hookspec
    def roost_providers(self) -> Sequence[ProviderDescriptor]:
        """Return model providers this plugin provides."""

    @hookspec
    def roost_mcp_servers(self, config: Any) -> Sequence[McpServerDescriptor]:
        """Return MCP servers to connect to, in addition to the config file's."""

    @hookspec
    def roost_http_routes(self, kernel: KernelAPI) -> Sequence[RouteDescriptor]:
        """Return extra HTTP routes for the daemon."""

    @hookspec
    def roost_services(self, kernel: KernelAPI) -> Sequence[ServiceDescriptor]:
        """Return long-running services the kernel should run while it is up."""

    @hookspec
    def roost_kernel_started(self, kernel: KernelAPI) -> None:
        """Called once the kernel is up (synchronous; do not block)."""

    @hookspec
    def roost_kernel_stopping(self, kernel: KernelAPI) -> None:
        """Called when graceful shutdown begins (synchronous; do not block)."""

    @hookspec
    def roost_before_tool_call(self, call: Any, spec: Any, context: Any) -> ToolVeto | None:
        """Inspect a call before it runs; return ``ToolVeto`` to refuse it."""

    @hookspec
    def roost_after_tool_call(self, call: Any, spec: Any, result: Any) -> Any | None:
        """See a result; return a replacement ``ToolResult`` or None to keep it."""
