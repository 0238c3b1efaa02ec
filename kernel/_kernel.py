"""The running kernel: its state, the agents and tools as callers see them, and events.

``Kernel`` is the tool pipeline (``_toolcalls.ToolCalls``) and message delivery
(``_messaging.Messaging``) over this state; ``_boot.open_kernel`` boots and stops it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._errors import AgentNotFound, AgentUnavailable, RoostError
from ._events import Event, EventKind, EventTap
from ._hookspecs import ProviderDescriptor
from ._messaging import Messaging
from ._plugins import PluginManager
from ._policy import Capabilities, Exposure
from ._proctrace import ProcessTraces
from ._spans import start_span, tracing
from ._surface import AgentSurface
from ._toolcalls import ToolCalls, _CallPlan
from ._tools import Tool, ToolRegistry, ToolSpec, agent_tool_name
from ._trace import TraceContext

if TYPE_CHECKING:  # pragma: no cover
    from ._actor import ActorSystem
    from ._agent import AgentRuntime
    from ._config import RoostConfig
    from ._loop import Provider
    from ._manifest import AgentManifest
    from ._store import Store


class Kernel(ToolCalls, Messaging):
    """The running kernel. Obtain one with ``open_kernel``."""

    def __init__(
        self, config: RoostConfig, plugins: PluginManager, store: Store, actors: ActorSystem
    ) -> None:
        self.config = config
        # Who in-process callers are (``kernel.send`` without a principal).
        self.host_principal = config.http.host_principal
        self.plugins = plugins
        self.store = store
        self.actors = actors
        self.tap: EventTap = actors.tap
        self.registry = ToolRegistry()
        # The processes tools run for agents' runs (bash), with each run's trace context: the
        # HTTP entries continue that trace for a loopback caller among them.
        self.process_traces = ProcessTraces()
        self.providers: dict[str, ProviderDescriptor] = {}
        self.agents: dict[str, AgentManifest] = {}
        self.agent_errors: dict[str, str] = {}
        self.manifest_errors: list[RoostError] = []
        # What loaded but is likely a mistake (an expose_tools entry matching no tool, …).
        self.load_warnings: list[str] = []
        self.service_errors: dict[str, str] = {}
        # Plugins' per-kernel state, each under a key it owns (see KernelAPI.extensions).
        self.extensions: dict[str, Any] = {}
        self._runtimes: dict[str, AgentRuntime] = {}
        # Per-agent views on every tool call's path, rebuilt when the manifest or registry does.
        self._policy_cache: dict[tuple[str, str], tuple[Any, Any, Any]] = {}
        self._plans: dict[tuple[str, str], _CallPlan] = {}
        # The kernel's own agent_<name> tools (those registered), by name. Whether a tool is
        # one of them is decided by identity, never by a field a plugin could set too.
        self._agent_tools: dict[str, Tool] = {}
        self._surfaces: dict[str, AgentSurface] = {}

    # ---- events ----------------------------------------------------------------------
    def publish(self, event: Event) -> None:
        """Make ``event`` observable on the tap (the API's event stream)."""
        self.tap.publish(event)

    def breaker_tripped(
        self, exc: RoostError, *, caller: str, target: str, trace: TraceContext | None = None
    ) -> None:
        """Publish ``KERNEL:BREAKER`` for a refused hop; ``trace``: the span it was refused in."""
        self.publish(
            Event(
                EventKind.KERNEL_BREAKER,
                "kernel",
                target=target,
                payload={"caller": caller, **exc.to_dict()},
                trace=trace,
            )
        )

    @property
    def tracing(self) -> bool:
        """Whether spans are recorded now (someone subscribes to ``TRACE:`` events)."""
        return bool(self.tap.subscriber_count) and tracing(self.tap)

    def start_span(
        self,
        kind: str,
        name: str,
        trace: TraceContext,
        *,
        source: str = "kernel",
        **attributes: Any,
    ) -> Any:
        """Open the span ``trace`` names (``set``, ``mark``, ``end``); ``NO_SPAN`` if untraced."""
        return start_span(self.tap, kind, name, trace, source=source, **attributes)

    # ---- agents ------------------------------------------------------------------------
    def max_depth_for(self, agent: str) -> int:
        limit = self.config.kernel.max_depth
        manifest = self.agents.get(agent)
        if manifest is not None:
            limit = min(limit, manifest.limits.max_depth)
        return limit

    def _manifest(self, agent: str) -> AgentManifest:
        """The manifest of ``agent``; AgentNotFound naming the known ones."""
        manifest = self.agents.get(agent)
        if manifest is None:
            raise AgentNotFound(agent, list(self.agents))
        return manifest

    def _require_agent(self, agent: str) -> AgentManifest:
        """The manifest of ``agent``; AgentNotFound, or RoostError if it is unavailable."""
        manifest = self._manifest(agent)
        if agent in self.agent_errors:
            raise AgentUnavailable(agent, self.agent_errors[agent])
        return manifest

    def provider_for(self, agent: str) -> Provider | None:
        """The main model's provider of ``agent`` (None: unknown or unavailable)."""
        runtime = self._runtimes.get(agent)
        return runtime.provider if runtime is not None else None

    def list_tools(self, agent: str | None = None) -> list[ToolSpec]:
        """All registered tools, or the ones ``agent`` may call."""
        if agent is None:
            return self.registry.specs()
        return list(self.allowed_specs(self._manifest(agent)))

    def allowed_specs(self, manifest: Any) -> tuple[ToolSpec, ...]:
        """The tools ``manifest``'s agent may call (cached; do not copy on the hot path)."""
        return self._cached(
            ("allowed", manifest.name), manifest, lambda: self._allowed_specs(manifest)
        )

    def _allowed_specs(self, manifest: Any) -> tuple[ToolSpec, ...]:
        caps = self._capabilities(manifest)
        if not caps.patterns:
            return ()  # allowed nothing: no need to look through every tool
        own = self._agent_tools.get(agent_tool_name(manifest.name))  # an agent does not ask itself
        return tuple(
            s
            for s in self.registry.specs()
            if (own is None or s is not own.spec) and caps.allows(s)
        )

    def exposed_tools(self, agent: str) -> list[ToolSpec]:
        """The tools ``agent`` offers to others over MCP (expose_tools minus private_tools)."""
        # Its surface keeps the list per registry version.
        exposure = self._exposure(self._manifest(agent))
        if not exposure.expose:
            return []
        # The registry's tools but agent_<name> ones (never exposed); cached: they are many.
        exposable = self._cached(
            ("exposable", ""),
            None,
            lambda: tuple(s for s in self.registry.specs() if not self._is_agent_tool(s)),
        )
        return [s for s in exposable if exposure.is_exposed(s)]

    def _is_agent_tool(self, spec: ToolSpec) -> bool:
        """True for the kernel's own ``agent_<name>`` tools: never exposed (an agent is asked
        on its own surface), their calls not published as tool events (the ask is one)."""
        tool = self._agent_tools.get(spec.name)
        return tool is not None and tool.spec is spec

    def surface(self, agent: str) -> AgentSurface:
        """The MCP surface of ``agent`` that every transport drives; raises AgentNotFound."""
        surface = self._surfaces.get(agent)
        if surface is None:
            self._manifest(agent)
            surface = self._surfaces[agent] = AgentSurface(self, agent)
        return surface

    def _cached(
        self, key: tuple[str, str], manifest: Any, build: Any, *, follows_registry: bool = True
    ) -> Any:
        """``build()`` for ``manifest`` (None: for the kernel), rebuilt when the manifest
        changes (and, when ``follows_registry``, when a tool is added or removed)."""
        hit = self._policy_cache.get(key)
        version = (id(self.registry), self.registry.version) if follows_registry else None
        if hit is not None and hit[0] is manifest and hit[1] == version:
            return hit[2]
        value = build()
        self._policy_cache[key] = (manifest, version, value)
        return value

    def agent_status(self, agent: str) -> tuple[str, str | None]:
        """``(status, reason)``: "ready", "unavailable" (could not be set up) or "stopped"
        (shut down, or past its restart budget: the reason says which and when)."""
        if agent in self.agent_errors:
            return "unavailable", self.agent_errors[agent]
        cause = self.actors.stop_cause(agent)
        return ("ready", None) if cause is None else ("stopped", cause)

    def agent_info(self, agent: str | None = None) -> list[dict[str, Any]]:
        """A JSON-ready description of every agent, or of ``agent`` (else AgentNotFound)."""
        out = []
        chosen = sorted(self.agents.items()) if agent is None else [(agent, self._manifest(agent))]
        for name, m in chosen:
            status, reason = self.agent_status(name)
            out.append(
                {
                    "name": name,
                    "description": m.description,
                    "version": m.version,
                    "provider": m.model.provider,
                    "model": m.model.name,
                    "status": status,
                    "error": reason,
                    "tools": [s.name for s in self.list_tools(name)],
                    "expose_tools": list(m.mcp.expose_tools),
                    "private_tools": list(m.mcp.private_tools),
                    "a2a_enabled": bool(m.a2a.enabled),
                }
            )
        return out

    # ---- tools -------------------------------------------------------------------------
    def _capabilities(self, manifest: Any) -> Any:
        return self._cached(
            ("capabilities", manifest.name),
            manifest,
            lambda: Capabilities(tuple(manifest.capabilities.tools), agent=manifest.name),
            follows_registry=False,
        )

    def _exposure(self, manifest: Any) -> Any:
        return self._cached(
            ("exposure", manifest.name),
            manifest,
            lambda: Exposure(tuple(manifest.mcp.expose_tools), tuple(manifest.mcp.private_tools)),
            follows_registry=False,
        )

    def workspace_for(self, manifest: Any) -> Path:
        """The agent's workspace directory, created on first use."""

        def create() -> Path:
            path = manifest.workspace_dir(Path(self.config.home))
            path.mkdir(parents=True, exist_ok=True)
            return path

        return self._cached(("workspace", manifest.name), manifest, create, follows_registry=False)

    def add_tool(self, tool: Tool) -> None:
        """Register a tool while running (ToolNameCollision); publishes ``KERNEL:TOOLS_CHANGED``."""
        self.registry.register(tool)
        self.publish(
            Event(EventKind.KERNEL_TOOLS_CHANGED, "kernel", payload={"added": [tool.spec.name]})
        )

    def remove_tool(self, name: str) -> None:
        """Unregister a tool while running; publishes ``KERNEL:TOOLS_CHANGED``."""
        if name in self.registry:
            self.registry.unregister(name)
            self.publish(
                Event(EventKind.KERNEL_TOOLS_CHANGED, "kernel", payload={"removed": [name]})
            )
