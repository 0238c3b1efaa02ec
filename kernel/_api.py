"""``KernelAPI``: the kernel as a plugin sees it.

Hooks that take ``kernel``, a service's ``run(kernel, ...)`` and ``ToolContext.kernel`` get
an object with exactly these members; first-party plugins use nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # pragma: no cover
    from ._agent import AgentReply
    from ._config import RoostConfig
    from ._errors import RoostError
    from ._events import Event, EventTap
    from ._loop import Provider
    from ._manifest import AgentManifest
    from ._plugins import PluginManager
    from ._proctrace import ProcessTraces
    from ._spans import Span
    from ._store import Store
    from ._surface import AgentSurface
    from ._tools import Tool, ToolRegistry, ToolSpec
    from ._trace import TraceContext


class KernelAPI(Protocol):
    """What a plugin may use of a running kernel (``roost.kernel.Kernel`` is one)."""

    @property
    def config(self) -> RoostConfig:
        """The configuration the kernel booted with."""

    @property
    def host_principal(self) -> str:
        """Who in-process callers are (``send`` without a principal)."""

    @property
    def plugins(self) -> PluginManager:
        """The plugin manager: its ``hook`` relay, ``failures``, ``call_each``."""

    @property
    def store(self) -> Store:
        """Sessions, history, usage and the audit trail."""

    @property
    def tap(self) -> EventTap:
        """Every event the kernel publishes; ``subscribe`` to follow them."""

    @property
    def registry(self) -> ToolRegistry:
        """Every registered tool, by name (read it; change it with ``add_tool``)."""

    @property
    def process_traces(self) -> ProcessTraces:
        """The processes tools run for agents' runs, with each run's trace context."""

    @property
    def agents(self) -> Mapping[str, AgentManifest]:
        """Every loaded agent's manifest, by name (available or not)."""

    @property
    def agent_errors(self) -> Mapping[str, str]:
        """Why an agent is unavailable, by name (it could not be set up)."""

    @property
    def manifest_errors(self) -> Sequence[RoostError]:
        """Manifests that failed to load and were skipped."""

    @property
    def load_warnings(self) -> Sequence[str]:
        """What loaded but is likely a mistake (an ``expose_tools`` entry matching no tool)."""

    @property
    def extensions(self) -> MutableMapping[str, Any]:
        """Per-kernel state of plugins, each under a key it owns (its module's name, say
        ``"roost_hello.cache"``): it lives and dies with this kernel, never shared by two in
        one process."""

    def publish(self, event: Event) -> None:
        """Make ``event`` observable on the tap."""

    async def send(
        self,
        agent: str,
        message: str,
        *,
        session_id: str | None = None,
        trace: TraceContext | None = None,
        timeout: float | None = None,
        stream: bool = False,
        new_session: bool = False,
        principal: str | None = None,
    ) -> AgentReply:
        """Send ``message`` to ``agent`` and wait for its answer (see ``Kernel.send``)."""

    def list_tools(self, agent: str | None = None) -> list[ToolSpec]:
        """All registered tools, or the ones ``agent`` may call."""

    def exposed_tools(self, agent: str) -> list[ToolSpec]:
        """The tools ``agent`` offers to others over MCP."""

    def surface(self, agent: str) -> AgentSurface:
        """The MCP surface of ``agent`` that every transport drives."""

    def agent_status(self, agent: str) -> tuple[str, str | None]:
        """``(status, reason)``: "ready", "unavailable" or "stopped"."""

    def agent_info(self, agent: str | None = None) -> list[dict[str, Any]]:
        """A JSON-ready description of every agent, or of ``agent`` alone."""

    def max_depth_for(self, agent: str) -> int:
        """The depth limit of a chain that reaches ``agent``."""

    def breaker_tripped(
        self, exc: RoostError, *, caller: str, target: str, trace: TraceContext | None = None
    ) -> None:
        """Publish ``KERNEL:BREAKER`` for a refused hop; ``trace``: the span it was refused in."""

    @property
    def tracing(self) -> bool:
        """Whether spans are recorded now (someone follows ``TRACE:`` events)."""

    def start_span(
        self,
        kind: str,
        name: str,
        trace: TraceContext,
        *,
        source: str = "kernel",
        **attributes: Any,
    ) -> Span:
        """Open the span ``trace`` names; ``NO_SPAN`` while nobody follows spans."""

    def workspace_for(self, manifest: AgentManifest) -> Path:
        """The agent's workspace directory, created on first use."""

    def provider_for(self, agent: str) -> Provider | None:
        """The model provider of ``agent`` (None if it is unknown or unavailable)."""

    def add_tool(self, tool: Tool) -> None:
        """Register a tool while running; raises ``ToolNameCollision``."""

    def remove_tool(self, name: str) -> None:
        """Unregister a tool while running (nothing if there is none of that name)."""
