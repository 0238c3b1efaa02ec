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
    """An HTTP route served by the daemon.

    ``handler`` is ``async (roost.plugins.http.PlainRequest, **path_args) ->
    roost.plugins.http.PlainResponse`` (a body of bytes, or an async iterable of bytes to
    stream, e.g. server-sent events); the daemon calls it after its Host, Origin, bearer
    auth, rate-limit and body-size checks, with the body read. ``path`` takes werkzeug
    rules (``/x/<name>``, ``<path:rest>``) and is served with and without a trailing slash
    (same handler, no redirect). ``methods`` lists what the handler takes (GET brings HEAD;
    an OPTIONS request on a route without OPTIONS is answered as a CORS preflight).

    ``max_body_bytes`` caps this route's request bodies (chunked ones too); None keeps the
    daemon's ``http.max_body_bytes``. ``render_error`` (optional) shapes every error the
    daemon itself answers for this route (401, 403, 404, 405, 413, 429, 5xx, an unhandled
    exception): ``(HTTP status, roost error code such as "rate_limited", message) -> (body
    bytes, content type)``; status and headers (Retry-After, WWW-Authenticate) stay the
    daemon's. None keeps roost's ``{"error": {"code", "message"}}``. A path no route matches
    takes the renderer of the route sharing the most leading path segments with it.
    """

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
    """An MCP server the kernel should connect to (same fields as ``[[mcp_servers]]``).

    ``protocol`` is "auto" or a version; ``sampling`` lets the server ask the calling
    agent's model; ``allow_local`` permits private/loopback http(s) URLs.
    """

    name: str
    transport: Mapping[str, Any]
    timeout_secs: float = 30.0
    env: tuple[str, ...] = ()
    protocol: str = "auto"
    sampling: bool = False
    allow_local: bool = False


@attrs.frozen
class ServiceDescriptor:
    """A long-running task a plugin needs (e.g. MCP connections), run in the kernel's nursery.

    ``run(kernel, task_status=...)`` (``kernel``: a ``KernelAPI``) must call
    ``task_status.started()`` once ready; the kernel waits for that (up to
    ``start_timeout_s``) before it reports itself started.
    A service that raises is reported and stopped; it never takes the kernel down.
    """

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
        """Check the parts of ``config`` this plugin reads (its ``[providers.<name>]``
        table, ``[[mcp_servers]]``, ``[a2a]``, …); raise ``ConfigError`` naming the key, the
        valid keys and the fix. Called as the kernel boots, before anything starts: an
        error stops the boot (``roost run`` exits non-zero). The kernel puts the file's
        path (``config.where``) in front of a message that does not start with it."""

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
