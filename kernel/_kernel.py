"""The kernel: boots plugins, tools, providers, the store and one actor per agent.

``async with open_kernel(config) as kernel:`` owns the root nursery (through the actor
system); leaving it shuts everything down within the configured deadline.
"""

from __future__ import annotations

import difflib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import trio

from ._agent import AgentReply, AgentRuntime, Conversation
from ._audit import (
    OUTCOMES,
    AuditRecord,
    _audit_arguments,
    _known_outcome,
    _optional_text,
    _required_text,
)
from ._errors import (
    AgentNotFound,
    AgentUnavailable,
    AskTimeout,
    ConfigError,
    LoopDetected,
    RecursionLimitExceeded,
    RoostError,
    ToolArgumentsInvalid,
    ToolDenied,
    ToolError,
    ToolNameCollision,
    ToolTimeout,
    is_mapping,
)
from ._events import Event, EventKind, EventTap
from ._frozen import frozen_builder
from ._hookspecs import ProviderDescriptor, ServiceDescriptor, ToolVeto
from ._ids import uuid7_hex
from ._jsonrpc import make_encoder
from ._outputs import output_from_json
from ._plugins import PluginFailure, PluginManager, collect
from ._policy import (
    Capabilities,
    Exposure,
    argument_check,
    check_ping_pong,
    resolve_timeout,
    truncate_result,
    validate_arguments,
)
from ._proctrace import ProcessTraces
from ._surface import AgentSurface, ask_tool_spec, message_arguments_ok
from ._tools import (
    TAINT_UNTRUSTED,
    Tool,
    ToolCall,
    ToolContext,
    ToolRegistry,
    ToolResult,
    ToolSpec,
    agent_tool_name,
)
from ._trace import TraceContext

log = logging.getLogger("roost.kernel")

_AUDIT_ARGS_MAX = 4_000  # within the store's MAX_AUDIT_CHARS: its converter would not cut them again
_AUDIT_FIELDS = ("ts", "trace_id", "span_id", "agent", "tool", "arguments", "duration_ms", "outcome", "error", "session_id")


# The validators and converters whose work ``_audit_record`` does itself before it takes
# the builder (non-empty agent and tool, a known outcome, arguments within the limit, no
# error text to cut).
_AUDIT_CHECKS = {
    "agent": (_required_text, None),
    "tool": (_required_text, None),
    "arguments": (None, _audit_arguments),
    "outcome": (_known_outcome, None),
    "error": (None, _optional_text),
}


def _audit_builder() -> Callable[..., AuditRecord]:
    """AuditRecord's builder (values in ``_AUDIT_FIELDS`` order); the class itself, so that
    every record is validated, when its fields or their checks are no longer these."""
    if tuple(f.name for f in attrs.fields(AuditRecord)) != _AUDIT_FIELDS:
        return AuditRecord
    return frozen_builder(AuditRecord, checked_by_caller=_AUDIT_CHECKS)


_build_audit = _audit_builder()


def _audit_json_encoder() -> Callable[[Any], str]:
    """The audit row's arguments as ``json.dumps(..., ensure_ascii=False, default=repr)``
    writes them, without an encoder built per call. One per kernel: it keeps the markers
    of the encoding under way (a kernel encodes on its own thread only)."""
    return make_encoder(separators=(", ", ": "), default=repr, allow_nan=True, check_circular=True)


_MAX_PLANS = 4096
_UNKNOWN = object()


class _CallPlan:
    """The per-(agent, tool) policy decisions a call reuses (see ``Kernel._plan``)."""

    __slots__ = ("manifest", "tool", "asks", "allowed", "timeout_s", "env_allowlist", "workspace", "arguments_check")

    def __init__(
        self,
        manifest: Any,
        tool: Tool,
        *,
        asks: str | None,
        allowed: bool,
        timeout_s: float,
        env_allowlist: tuple[str, ...],
        workspace: Path,
    ) -> None:
        self.manifest = manifest
        self.tool = tool
        self.asks = asks  # the agent this tool asks, when it is one of the kernel's agent_* tools
        self.allowed = allowed
        self.timeout_s = timeout_s
        self.env_allowlist = env_allowlist
        self.workspace = workspace
        # The tool schema's quick argument check (``argument_check``), got on first use.
        self.arguments_check: Any = _UNKNOWN


class Kernel:
    """The running kernel. Obtain one with ``open_kernel``."""

    def __init__(self, config: Any, plugins: PluginManager, store: Any, actors: Any) -> None:
        self.config = config
        # Who in-process callers are (``kernel.send`` without a principal): see
        # ``HttpConfig.host_principal``.
        self.host_principal: str = getattr(getattr(config, "http", None), "host_principal", "local")
        self.plugins = plugins
        self.store = store
        self.actors = actors
        self.tap: EventTap = actors.tap
        self.registry = ToolRegistry()
        # The processes tools run for agents' runs (bash), with each run's trace context:
        # the HTTP entries continue that trace for a loopback caller among them.
        self.process_traces = ProcessTraces()
        self.providers: dict[str, ProviderDescriptor] = {}
        self.agents: dict[str, Any] = {}
        self.agent_errors: dict[str, str] = {}
        self.manifest_errors: list[RoostError] = []
        # What loaded but is likely a mistake (an expose_tools entry matching no tool, …).
        self.load_warnings: list[str] = []
        self.service_errors: dict[str, str] = {}
        self._runtimes: dict[str, AgentRuntime] = {}
        self.started_at = time.time()
        # Per-agent views (capabilities, exposure, tool lists, workspace) rebuilt only when
        # the manifest or the registry changes: they sit on every tool call's path.
        self._policy_cache: dict[tuple[str, str], tuple[Any, Any, Any]] = {}
        self._plans: dict[tuple[str, str], _CallPlan] = {}
        self._allowed: dict[str, tuple[Any, ToolRegistry, int, tuple[ToolSpec, ...]]] = {}
        self._audit_json = _audit_json_encoder()
        # The kernel's own agent_<name> tools (those registered), by name. Whether a tool is
        # one of them is decided by identity, never by a field a plugin could set too.
        self._agent_tools: dict[str, Tool] = {}
        self._surfaces: dict[str, AgentSurface] = {}
        self._exposable_cache: tuple[Any, tuple[ToolSpec, ...]] = (None, ())

    # ---- events ----------------------------------------------------------------------
    def publish(self, event: Event) -> None:
        """Make ``event`` observable on the tap (the API's event stream)."""
        self.tap.publish(event)

    def breaker_tripped(self, exc: RoostError, *, caller: str, target: str) -> None:
        self.publish(
            Event(EventKind.KERNEL_BREAKER, "kernel", target=target, payload={"caller": caller, **exc.to_dict()})
        )

    # ---- agents ------------------------------------------------------------------------
    def max_depth_for(self, agent: str) -> int:
        limit = self.config.kernel.max_depth
        manifest = self.agents.get(agent)
        if manifest is not None:
            limit = min(limit, manifest.limits.max_depth)
        return limit

    def _require_agent(self, agent: str) -> Any:
        """The manifest of ``agent``; AgentNotFound, or RoostError if it is unavailable."""
        manifest = self.agents.get(agent)
        if manifest is None:
            raise AgentNotFound(agent, list(self.agents))
        if agent in self.agent_errors:
            raise AgentUnavailable(agent, self.agent_errors[agent])
        return manifest

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
        """Send ``message`` to ``agent`` and wait for its answer.

        ``trace`` is the caller's context (e.g. read from HTTP headers); the agent becomes
        its next hop, so the depth breaker applies to external callers too.
        ``new_session``: the caller just made ``session_id`` up (no history to load).
        ``principal``: who is calling; ``session_id`` names a session of theirs (the same id
        from another principal is another session). Default: ``config.http.host_principal``.
        """
        self._require_agent(agent)
        if not isinstance(message, str):
            raise RoostError(f"message: expected a string, got {type(message).__name__}")
        if session_id is not None and (not isinstance(session_id, str) or not session_id.strip()):
            raise RoostError("session_id: expected a non-empty string (or none for a new session)")
        limit = self.max_depth_for(agent)
        if trace is None:
            trace = TraceContext.new(agent, max_depth=limit)
        else:
            try:
                trace = trace.child(agent, max_depth=limit)
            except RecursionLimitExceeded as exc:
                self.breaker_tripped(exc, caller=trace.path[-1], target=agent)
                raise
        return await self._deliver(
            agent, message, trace, session_id=session_id, timeout=timeout, stream=stream,
            new_session=new_session, principal=principal,
        )

    async def _deliver(
        self,
        agent: str,
        message: str,
        trace: TraceContext,
        *,
        session_id: str | None = None,
        timeout: float | None = None,
        stream: bool = False,
        new_session: bool = False,
        principal: str | None = None,
    ) -> AgentReply:
        """``send``'s delivery, ``trace`` already naming ``agent`` as its last hop."""
        run_id = uuid7_hex()  # from the id pool: no syscall per message
        try:
            answer = await self.actors.ask_payload(
                agent,
                EventKind.AGENT_MESSAGE,
                {
                    "message": message,
                    "session_id": session_id,
                    "stream": stream,
                    "run_id": run_id,
                    "new_session": new_session or session_id is None,
                    "owner": principal or self.host_principal,
                },
                source="api",
                trace=trace,
                timeout=timeout or self.config.kernel.ask_timeout_s,
            )
        except BaseException:
            self._cancel_run(agent, run_id)
            raise
        return answer

    def _cancel_run(self, agent: str, run_id: str) -> None:
        """The caller stopped waiting (cancelled, timed out): the agent stops working too."""
        runtime = self._runtimes.get(agent)
        if runtime is not None:
            runtime.cancel(run_id)

    def list_tools(self, agent: str | None = None) -> list[ToolSpec]:
        """All registered tools, or the ones ``agent`` may call."""
        if agent is None:
            return self.registry.specs()
        manifest = self.agents.get(agent)
        if manifest is None:
            raise AgentNotFound(agent, list(self.agents))
        return list(self.allowed_specs(manifest))

    def allowed_specs(self, manifest: Any) -> tuple[ToolSpec, ...]:
        """The tools ``manifest``'s agent may call (cached; do not copy on the hot path)."""
        # Every run asks: its own cache, checked without building a key or a builder.
        hit = self._allowed.get(manifest.name)
        registry = self.registry
        if hit is not None and hit[0] is manifest and hit[1] is registry and hit[2] == registry.version:
            return hit[3]
        specs = self._allowed_specs(manifest)
        self._allowed[manifest.name] = (manifest, registry, registry.version, specs)
        return specs

    def _allowed_specs(self, manifest: Any) -> tuple[ToolSpec, ...]:
        caps = self._capabilities(manifest)
        if not caps.patterns:
            return ()  # allowed nothing: no need to look through every tool
        own = self._agent_tools.get(agent_tool_name(manifest.name))  # an agent does not ask itself
        return tuple(s for s in self.registry.specs() if (own is None or s is not own.spec) and caps.allows(s))

    def exposed_tools(self, agent: str) -> list[ToolSpec]:
        """The tools ``agent`` offers to others over MCP (expose_tools minus private_tools)."""
        manifest = self.agents.get(agent)
        if manifest is None:
            raise AgentNotFound(agent, list(self.agents))
        exposure = self._exposure(manifest)  # its surface keeps the list per registry version
        if not exposure.expose:
            return []
        return [s for s in self._exposable() if exposure.is_exposed(s)]

    def _exposable(self) -> tuple[ToolSpec, ...]:
        """The registry's tools but the kernel's ``agent_<name>`` ones (never exposed), per
        registry version: with thousands of agents those are most of the registry."""
        registry = self.registry
        key = (id(registry), registry.version)
        if self._exposable_cache[0] != key:
            self._exposable_cache = (key, tuple(s for s in registry.specs() if not self._is_agent_tool(s)))
        return self._exposable_cache[1]

    def _is_agent_tool(self, spec: ToolSpec) -> bool:
        """True for the kernel's own ``agent_<name>`` tools: never exposed (an agent is asked
        on its own surface), their calls not published as tool events (the ask is one)."""
        tool = self._agent_tools.get(spec.name)
        return tool is not None and tool.spec is spec

    def surface(self, agent: str) -> AgentSurface:
        """The MCP surface of ``agent`` (``message`` plus its exposed tools) that every
        transport drives; raises AgentNotFound."""
        surface = self._surfaces.get(agent)
        if surface is None:
            if agent not in self.agents:
                raise AgentNotFound(agent, list(self.agents))
            surface = self._surfaces[agent] = AgentSurface(self, agent)
        return surface

    def _cached(
        self, key: tuple[str, str], manifest: Any, build: Any, *, follows_registry: bool = True
    ) -> Any:
        """``build()`` for ``manifest``, rebuilt when the manifest changes (and, when
        ``follows_registry``, when a tool is added or removed)."""
        hit = self._policy_cache.get(key)
        version = (id(self.registry), self.registry.version) if follows_registry else None
        if hit is not None and hit[0] is manifest and hit[1] == version:
            return hit[2]
        value = build()
        self._policy_cache[key] = (manifest, version, value)
        return value

    def agent_status(self, agent: str) -> tuple[str, str | None]:
        """``(status, reason)``: "ready"; "unavailable" (it could not be set up); or
        "stopped" (its actor is not running: shut down, or past its restart budget until
        its cool-down ends — the reason says which and when)."""
        if agent in self.agent_errors:
            return "unavailable", self.agent_errors[agent]
        cause = self.actors.stop_cause(agent)
        return ("ready", None) if cause is None else ("stopped", cause)

    def agent_info(self, agent: str | None = None) -> list[dict[str, Any]]:
        """A JSON-ready description of every agent, or of ``agent`` alone (for the API and
        ``roost agents``); AgentNotFound for an unknown ``agent``."""
        if agent is not None and agent not in self.agents:
            raise AgentNotFound(agent, list(self.agents))
        out = []
        chosen = sorted(self.agents.items()) if agent is None else [(agent, self.agents[agent])]
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

    def _plan(self, manifest: Any, tool: Tool) -> _CallPlan:
        """What the policy decides for ``manifest`` calling ``tool`` that does not change
        from call to call; rebuilt when either is replaced (reload, re-registration)."""
        spec = tool.spec
        key = (manifest.name, spec.name)
        hit = self._plans.get(key)
        if hit is not None and hit.manifest is manifest and hit.tool is tool:
            return hit
        tools_cfg = self.config.tools
        asks = spec.original_name if self._agent_tools.get(spec.name) is tool else None
        plan = _CallPlan(
            manifest,
            tool,
            asks=asks,
            allowed=self._capabilities(manifest).allows(spec),
            timeout_s=resolve_timeout(
                spec,
                agent_default=manifest.limits.tool_timeout_s or tools_cfg.timeout_s,
                overrides=manifest.limits.tool_timeouts,
            ),
            env_allowlist=tuple(tools_cfg.env_allowlist) + tuple(manifest.env_allowlist),
            workspace=self.workspace_for(manifest),
        )
        if asks is not None:
            plan.arguments_check = message_arguments_ok  # the ask tool's schema, checked quickly
        if len(self._plans) >= _MAX_PLANS:
            self._plans.clear()  # tools come and go (MCP servers): never grow without bound
        self._plans[key] = plan
        return plan

    def _context(
        self, manifest: Any, plan: _CallPlan, trace: TraceContext | None, outputs: Any = None
    ) -> ToolContext:
        return ToolContext(
            agent=manifest.name,
            workspace=plan.workspace,
            sandbox=manifest.sandbox,
            trace=trace,
            env_allowlist=plan.env_allowlist,
            timeout_s=plan.timeout_s,
            max_output_chars=self.config.tools.max_output_chars,
            kernel=self,
            outputs=outputs,
        )

    def workspace_for(self, manifest: Any) -> Path:
        """The agent's workspace directory, created on first use."""

        def create() -> Path:
            path = manifest.workspace_dir(Path(self.config.home))
            path.mkdir(parents=True, exist_ok=True)
            return path

        return self._cached(("workspace", manifest.name), manifest, create, follows_registry=False)

    async def call_tool(
        self,
        agent: str,
        call: ToolCall,
        *,
        conversation: Conversation | None = None,
        check_capability: bool = True,
    ) -> ToolResult:
        """Run ``call`` on behalf of ``agent`` through the whole policy pipeline.

        Tool failures come back as ``is_error`` results; only ``LoopDetected`` is raised,
        so that the agentic loop can stop.
        """
        manifest = self._require_agent(agent)
        started = time.monotonic()
        trace = call.trace
        outcome = "ok"
        error: str | None = None
        spec: ToolSpec | None = None
        try:
            try:
                tool = self.registry.get(call.name)
                spec = tool.spec
                if call.arguments_error is not None:
                    raise ToolArgumentsInvalid(
                        f"{call.arguments_error} — call {spec.name} again with its arguments "
                        "as one JSON object matching its inputSchema"
                    )
                plan = self._plan(manifest, tool)
                if check_capability and not plan.allowed:
                    self._capabilities(manifest).check(spec)  # raises, saying how to allow it
                result = await self._run_checked(manifest, plan, tool, call, conversation)
            except LoopDetected:
                outcome, error = "denied", "loop detected"
                raise
            except trio.Cancelled:
                outcome, error = "cancelled", "the call was cancelled"
                raise
            except ToolTimeout as exc:
                outcome, error = "timeout", str(exc)
                result = ToolResult.error(str(exc))
            except ToolError as exc:
                outcome = "denied" if exc.code in {"tool_denied", "taint_violation", "sandbox_violation", "invalid_arguments", "recursion_limit", "tool_not_found"} else "error"
                error = str(exc)
                if isinstance(exc, RecursionLimitExceeded):
                    self.breaker_tripped(exc, caller=agent, target=call.name)
                result = ToolResult.error(str(exc))
            if result.is_error and error is None:
                outcome, error = "error", result.as_text()[:500]
            return result
        finally:
            duration_ms = (time.monotonic() - started) * 1000
            # Nobody watching: an event nobody can observe is not built (hot path).
            if (spec is None or not self._is_agent_tool(spec)) and self.tap.wants(EventKind.EXEC_TOOL_RESULT):
                self.publish(
                    Event(
                        EventKind.EXEC_TOOL_RESULT,
                        call.name,
                        target=agent,
                        payload={"call_id": call.id, "tool": call.name, "outcome": outcome, "error": error, "duration_ms": round(duration_ms, 3)},
                        trace=trace,
                    )
                )
            # The audit row, stored before the result is returned (no cancel point).
            record = self._audit_record(agent, call, trace, duration_ms, outcome, error, conversation)
            try:
                await self.store.record_tool_call(record)
            except Exception:
                log.exception("could not write the audit record of %s", call.name)

    async def _run_checked(
        self, manifest: Any, plan: _CallPlan, tool: Tool, call: ToolCall, conversation: Conversation | None
    ) -> ToolResult:
        spec = tool.spec
        check = plan.arguments_check
        if check is _UNKNOWN:
            check = plan.arguments_check = argument_check(spec)
        if check is None or not check(call.arguments):
            validate_arguments(spec, call.arguments)  # raises, naming what is wrong
        outputs = conversation.outputs if conversation is not None else None
        context: ToolContext | None = None  # made when a hook or the tool needs it
        hooks = self.plugins.hook
        if hooks.roost_before_tool_call.get_hookimpls():
            context = self._context(manifest, plan, call.trace, outputs)
            for veto in collect(hooks.roost_before_tool_call(call=call, spec=spec, context=context)):
                if isinstance(veto, ToolVeto):
                    raise ToolDenied(f"{spec.name} refused by plugin {veto.plugin or '?'}: {veto.reason}")
        if conversation is not None:
            policy = manifest.taint_policy or self.config.taint.policy
            warning = conversation.taint.check(call, sinks=tuple(self.config.taint.sinks), policy=policy)
            if warning:
                log.warning("%s", warning)
            conversation.loop_guard.check(call)
        if plan.asks is None and self.tap.wants(EventKind.EXEC_TOOL_CALL):
            self.publish(
                Event(
                    EventKind.EXEC_TOOL_CALL,
                    manifest.name,
                    target=spec.name,
                    payload={"call_id": call.id, "tool": spec.name, "arguments": dict(call.arguments)},
                    trace=call.trace,
                )
            )
        if plan.asks is not None:
            # Asking an agent: the ask carries this very deadline (one cancel scope, not two),
            # and the kernel's own handler needs no ToolContext. Awaited here, not through
            # _invoke (one coroutine less), with the same handling of failures.
            try:
                result = await self._ask_agent(plan.asks, spec, call, manifest.name, plan.timeout_s, outputs)
            except (ToolError, LoopDetected):
                raise
            except Exception as exc:
                result = _failure_result(spec, exc)
        else:
            if context is None:
                context = self._context(manifest, plan, call.trace, outputs)
            with trio.move_on_after(context.timeout_s) as scope:
                result = await _invoke(spec, tool.handler, call, context)
            if scope.cancelled_caught:
                raise _timed_out(spec, context.timeout_s)
        if not isinstance(result, ToolResult):
            result = ToolResult.error(f"tool {spec.name} returned {type(result).__name__}, not a ToolResult")
        result = truncate_result(result, self.config.tools.max_output_chars)
        if spec.untrusted:
            result = result.with_taint(TAINT_UNTRUSTED, f"source:{spec.qualified_name}")
        if conversation is not None:
            conversation.taint.observe(result)
        if hooks.roost_after_tool_call.get_hookimpls():
            for replacement in collect(hooks.roost_after_tool_call(call=call, spec=spec, result=result)):
                if isinstance(replacement, ToolResult):
                    result = replacement
        return result


    def _audit_record(self, agent, call, trace, duration_ms, outcome, error, conversation) -> AuditRecord:
        """The audit record of ``call``. One without error is built without attrs'
        validators and converters (they cost as much as the rest of the audit): its ids,
        times, session and outcome are the kernel's own and its arguments text is already
        cut to ``_AUDIT_ARGS_MAX``, so only ``agent`` and ``tool`` need the checks, made
        here. Any other record (an error text to cut, a bad name) goes through the
        validating constructor."""
        arguments = call.arguments
        try:
            args = self._audit_json(arguments if arguments.__class__ is dict else dict(arguments))
        except (TypeError, ValueError):
            args = repr(call.arguments)
        tool = call.name
        values = (
            time.time(),
            trace.trace_id if trace else None,
            trace.span_id if trace else None,
            agent,
            tool,
            args[:_AUDIT_ARGS_MAX],
            duration_ms,
            outcome,
            error,
            conversation.session_id if conversation else None,
        )
        if (
            _build_audit is AuditRecord
            or error is not None
            or agent.__class__ is not str
            or tool.__class__ is not str
            or not agent
            or not tool
            or outcome not in OUTCOMES
        ):
            return AuditRecord(**dict(zip(_AUDIT_FIELDS, values, strict=True)))
        return _build_audit(*values)

    def add_tool(self, tool: Tool) -> None:
        """Register a tool while running (e.g. discovered on an MCP server).

        Raises ToolNameCollision; publishes ``KERNEL:TOOLS_CHANGED``.
        """
        self.registry.register(tool)
        self.publish(Event(EventKind.KERNEL_TOOLS_CHANGED, "kernel", payload={"added": [tool.spec.name]}))

    def remove_tool(self, name: str) -> None:
        """Unregister a tool while running; publishes ``KERNEL:TOOLS_CHANGED``."""
        if name in self.registry:
            self.registry.unregister(name)
            self.publish(Event(EventKind.KERNEL_TOOLS_CHANGED, "kernel", payload={"removed": [name]}))

    # ---- boot ---------------------------------------------------------------------------
    async def _start_services(self, nursery: trio.Nursery) -> None:
        for plugin, descriptors in _hook_results(self.plugins, "roost_services", kernel=self):
            for desc in descriptors:
                if not isinstance(desc, ServiceDescriptor):
                    self._plugin_failure(plugin, f"roost_services returned {type(desc).__name__}")
                    continue
                with trio.move_on_after(desc.start_timeout_s) as scope:
                    await nursery.start(self._run_service, desc)
                if scope.cancelled_caught:
                    self._service_failed(desc.name, f"did not start within {desc.start_timeout_s:g} s")

    async def _run_service(self, desc: ServiceDescriptor, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        started = False

        class _Status:
            def started(self, value: Any = None) -> None:
                nonlocal started
                started = True
                task_status.started(value)

        try:
            await desc.run(self, task_status=_Status())
        except Exception as exc:  # a failing service is reported; the kernel stays up
            log.exception("service %s failed", desc.name)
            self._service_failed(desc.name, f"{type(exc).__name__}: {exc}")
        if not started:
            task_status.started(None)

    def _service_failed(self, name: str, error: str) -> None:
        self.service_errors[name] = error
        self.publish(Event(EventKind.KERNEL_SERVICE_ERROR, "kernel", payload={"service": name, "error": error}))

    def _register_tools(self, tools: Iterable[Any], source: str) -> None:
        for tool in tools:
            if not isinstance(tool, Tool):
                self._plugin_failure(source, f"roost_tools returned {type(tool).__name__}, expected roost.kernel.Tool")
                continue
            try:
                self.registry.register(tool)
            except ToolNameCollision as exc:
                self._plugin_failure(tool.spec.owner, str(exc))

    def _plugin_failure(self, name: str, error: str) -> None:
        self.plugins.failures.append(PluginFailure(name, "register", error))
        log.error("plugin %s: %s", name, error)
        self.publish(Event(EventKind.KERNEL_PLUGIN_ERROR, "kernel", payload={"plugin": name, "error": error}))

    def _add_agent_tool(self, target: str) -> None:
        """Register ``agent_<target>``, the tool through which agents ask ``target``."""
        spec = ask_tool_spec(target, self.agents[target].description, name=agent_tool_name(target))

        async def ask_agent(call: ToolCall, ctx: ToolContext) -> ToolResult:
            return await self._ask_agent(target, spec, call, ctx.agent, ctx.timeout_s, ctx.outputs)

        tool = Tool(spec, ask_agent)
        try:
            self.registry.register(tool)
        except ToolNameCollision as exc:
            self._plugin_failure("agents", str(exc))
        else:
            self._agent_tools[spec.name] = tool

    async def _ask_agent(
        self, target: str, spec: ToolSpec, call: ToolCall, agent: str, timeout_s: float, outputs: Any
    ) -> ToolResult:
        """The ``agent_{target}`` tool called by ``agent``: a JSON-RPC ``tools/call`` of the
        target's ``message`` tool (its surface applies the depth limit), asked with the
        tool's timeout as the ask's deadline."""
        if target in self.agent_errors:
            raise AgentUnavailable(target, self.agent_errors[target])
        caller = call.caller or agent
        origin = call.trace or TraceContext.new(caller, max_depth=self.max_depth_for(caller))
        if len(origin.path) > 2:  # bouncing more than twice takes four hops (A, B, A, B)
            check_ping_pong(origin.path + (target,))
        params = {"name": "message", "arguments": {"message": call.arguments["message"]}, "_meta": origin.to_meta()}
        request = {"jsonrpc": "2.0", "id": call.id, "method": "tools/call", "params": params}
        try:
            answer = await self.actors.ask_payload(
                target, EventKind.EXEC_TOOL_CALL, request, source=caller, trace=origin, timeout=timeout_s
            )
        except BaseException as exc:
            self._cancel_run(target, call.id)
            if isinstance(exc, AskTimeout):
                raise _timed_out(spec, timeout_s) from None
            raise
        result = result_from_jsonrpc(answer)
        if outputs is not None and result.structured_content and "artifacts" in result.structured_content:
            _adopt_outputs(outputs, result.structured_content["artifacts"], result.content, target)
        return result

    def _create_provider(self, manifest: Any, model: Any = None) -> Any:
        """The provider for ``model`` (default: the manifest's main model)."""
        model = manifest.model if model is None else model
        name = model.provider
        descriptor = self.providers.get(name)
        if descriptor is None:
            known = ", ".join(sorted(self.providers)) or "none"
            raise RoostError(
                f"model.provider {name!r} is not installed (installed providers: {known}); "
                "install its plugin or choose another provider in agent.json"
            )
        settings = dict(self.config.providers.get(name, {})) if isinstance(self.config.providers, Mapping) else {}
        return descriptor.factory(model, settings)

    def _create_tiers(self, manifest: Any) -> tuple[Any, Any] | None:
        """(fast, complex) providers when the manifest names both model tiers, else None."""
        if manifest.model.fast is None or manifest.model.complex is None:
            return None
        return (
            self._create_provider(manifest, manifest.model.for_tier("fast")),
            self._create_provider(manifest, manifest.model.for_tier("complex")),
        )


async def _invoke(spec: ToolSpec, handler: Callable[..., Awaitable[Any]], *args: Any) -> Any:
    """``await handler(*args)`` for the tool ``spec``; its failures become error results,
    never crashes."""
    try:
        return await handler(*args)
    except (ToolError, LoopDetected):
        raise
    except Exception as exc:
        return _failure_result(spec, exc)


def _failure_result(spec: ToolSpec, exc: Exception) -> ToolResult:
    """The error result of the tool ``spec`` that raised ``exc`` (call it in the ``except``
    clause, so that a crash is logged with its traceback): a buggy tool must not take the
    agent down."""
    if isinstance(exc, RoostError):
        return ToolResult.error(str(exc))
    log.exception("tool %s raised", spec.name)
    return ToolResult.error(f"tool {spec.name} failed: {type(exc).__name__}: {exc}")


def _timed_out(spec: ToolSpec, timeout_s: float) -> ToolTimeout:
    return ToolTimeout(
        f"tool {spec.name} did not finish within {timeout_s:g} s "
        "(set limits.tool_timeouts in agent.json to allow longer)"
    )


def _adopt_outputs(outputs: Any, artifacts: Any, content: Any, agent: str) -> None:
    """What an asked agent handed over becomes the asking run's too (like ADK's AgentTool),
    so that the caller's caller (an A2A client, say) receives it. Each artifact whole or
    not at all: one past this run's bounds is left out (the tool result still has it)."""
    for value in artifacts if isinstance(artifacts, list) else ():
        output = output_from_json(value, content)
        if output is None:
            continue
        try:
            outputs.adopt(output)
        except ToolArgumentsInvalid as exc:
            log.warning("artifact %r from agent %s not handed on: %s", output.name, agent, exc)


def result_from_jsonrpc(response: Any) -> ToolResult:
    """Turn an MCP ``tools/call`` JSON-RPC response into a ToolResult."""
    if not is_mapping(response):
        return ToolResult.error("peer returned a malformed response")
    if "error" in response:
        err = response.get("error") or {}
        message = err.get("message", "error") if isinstance(err, Mapping) else str(err)
        data = err.get("data") if isinstance(err, Mapping) else None
        if isinstance(data, Mapping) and data.get("code") == "recursion_limit":
            raise RecursionLimitExceeded.from_dict(data)
        return ToolResult.error(str(message))
    result = response.get("result")
    if not is_mapping(result):
        return ToolResult.error("peer returned a response without a result")
    return ToolResult.from_mcp(result)


@asynccontextmanager
async def open_kernel(
    config: Any = None,
    *,
    agents: Sequence[Any] = (),
    plugins: Sequence[Any] = (),
    load_entry_points: bool = True,
) -> AsyncIterator[Kernel]:
    """Boot a kernel; leaving the block shuts it down gracefully within the deadline.

    ``agents`` adds in-memory manifests (beside the configured ones); ``plugins`` adds
    plugin objects (modules or instances with hookimpls) beside the entry points.
    """
    from ._actor import RestartPolicy, open_actor_system
    from ._config import load_config
    from ._manifest import load_agents, tool_pattern_warnings
    from ._paths import database_path, ensure_private_dir
    from ._store import open_store

    if config is None:
        config = load_config()

    pm = PluginManager()
    if load_entry_points:
        pm.load_entry_points(disabled=config.plugins.disabled)
    for i, plugin in enumerate(plugins):
        pm.register_named(getattr(plugin, "__name__", f"plugin-{i}"), plugin)
    provider_results = _hook_results(pm, "roost_providers")
    _check_config(pm, config, provider_results)  # a bad setting stops the boot here
    home = ensure_private_dir(Path(config.home))

    async with open_store(
        database_path(home), synchronous=config.store.synchronous, legacy_owner=config.http.host_principal
    ) as store:
        async with open_actor_system(shutdown_timeout_s=config.kernel.shutdown_timeout_s) as actors:
            kernel = Kernel(config, pm, store, actors)
            for failure in pm.failures:
                kernel.publish(Event(EventKind.KERNEL_PLUGIN_ERROR, "kernel", payload=attrs.asdict(failure)))
            for name, impl_result in _hook_results(pm, "roost_tools", config=config):
                kernel._register_tools(impl_result, name)
            for name, impl_result in provider_results:
                for desc in impl_result:
                    if isinstance(desc, ProviderDescriptor):
                        kernel.providers.setdefault(desc.name, desc)
                    else:
                        kernel._plugin_failure(name, f"roost_providers returned {type(desc).__name__}")

            found, errors = load_agents(
                [Path(d) for d in config.agents.dirs],
                include_bundled=config.agents.bundled,
                config_file=getattr(config, "where", "roost.toml"),
            )
            kernel.manifest_errors.extend(errors)
            for err in errors:
                log.error("agent manifest skipped: %s", err)
            for manifest in agents:
                found[manifest.name] = manifest
            kernel.agents = dict(sorted(found.items()))
            for name in kernel.agents:
                kernel._add_agent_tool(name)
            specs = kernel.registry.specs()
            for manifest in kernel.agents.values():
                for warning in tool_pattern_warnings(manifest, specs):
                    kernel.load_warnings.append(warning)
                    log.warning("%s", warning)
            for name, manifest in kernel.agents.items():
                try:
                    provider = kernel._create_provider(manifest)
                    tiers = kernel._create_tiers(manifest)
                except Exception as exc:
                    kernel.agent_errors[name] = str(exc)
                    log.error("agent %s is unavailable: %s", name, exc)
                    continue
                runtime = AgentRuntime(kernel, name, provider, tiers=tiers)
                kernel._runtimes[name] = runtime
                actors.spawn(
                    name,
                    lambda runtime=runtime: runtime,
                    mailbox_size=config.kernel.mailbox_size,
                    concurrency=max(config.kernel.agent_concurrency, manifest.limits.max_concurrent_messages),
                    # The kernel cancels an agent's run whenever its caller stops waiting
                    # anyway, so the run may as well execute in the caller's task.
                    direct_asks=True,
                    restart=RestartPolicy(cooldown_s=config.kernel.restart_cooldown_s),
                )
            body_error: Exception | None = None
            async with trio.open_nursery() as services:
                await kernel._start_services(services)
                kernel.publish(
                    Event(EventKind.KERNEL_STARTED, "kernel", payload={"agents": list(kernel.agents), "tools": len(kernel.registry)})
                )
                _call_safely(pm, "roost_kernel_started", kernel=kernel)
                try:
                    yield kernel
                except Exception as exc:
                    # Re-raised below as itself, not wrapped in the services nursery's group.
                    body_error = exc
                finally:
                    _call_safely(pm, "roost_kernel_stopping", kernel=kernel)
                    kernel.publish(Event(EventKind.KERNEL_STOPPING, "kernel"))
                    services.cancel_scope.cancel()
            if body_error is not None:
                raise body_error


def _check_config(pm: PluginManager, config: Any, provider_results: list[tuple[str, list[Any]]]) -> None:
    """Each plugin checks the settings it reads (``roost_check_config``), and every
    ``[providers.<name>]`` table must name an installed (or disabled) provider; raises one
    ``ConfigError`` with every problem, each naming the config file."""
    where = getattr(config, "where", "roost.toml")
    problems: list[str] = []
    for impl in pm.hook.roost_check_config.get_hookimpls():
        try:
            impl.function(**({"config": config} if "config" in impl.argnames else {}))
        except ConfigError as exc:
            text = str(exc)
            problems.append(text if text.startswith(where) else f"{where}: {text}")
        except Exception as exc:  # a broken check is the plugin's failure, not the config's
            name = pm.get_name(impl.plugin) or repr(impl.plugin)
            pm.failures.append(PluginFailure(name, "register", f"roost_check_config raised {type(exc).__name__}: {exc}"))
            log.error("plugin %s: roost_check_config raised %s", name, exc)
    installed = sorted({d.name for _, descs in provider_results for d in descs if isinstance(d, ProviderDescriptor)})
    sections = config.providers if isinstance(getattr(config, "providers", None), Mapping) else {}
    disabled = set(getattr(getattr(config, "plugins", None), "disabled", ()))
    for section in sections:
        if section not in installed and section not in disabled:
            close = difflib.get_close_matches(section, installed, n=1)
            hint = f" — did you mean [providers.{close[0]}]?" if close else ";"
            problems.append(
                f"{where}: [providers.{section}]: no installed provider is called {section!r}{hint} "
                f"installed providers: {', '.join(installed) or 'none'}"
            )
    if len(problems) == 1:
        raise ConfigError(problems[0])
    if problems:
        raise ConfigError(f"{len(problems)} problems in the configuration:\n  " + "\n  ".join(problems))


def _hook_results(pm: PluginManager, hook_name: str, **kwargs: Any) -> list[tuple[str, list[Any]]]:
    """Call a hook plugin by plugin, so one plugin raising is reported and skipped."""
    out = []
    hook = getattr(pm.hook, hook_name)
    for impl in hook.get_hookimpls():
        name = pm.get_name(impl.plugin) or repr(impl.plugin)
        try:
            fn = impl.function
            argnames = impl.argnames
            result = fn(**{k: v for k, v in kwargs.items() if k in argnames})
        except Exception as exc:
            pm.failures.append(PluginFailure(name, "register", f"{hook_name} raised {type(exc).__name__}: {exc}"))
            log.error("plugin %s: %s raised %s", name, hook_name, exc)
            continue
        out.append((name, collect([result])))
    return out


def _call_safely(pm: PluginManager, hook_name: str, **kwargs: Any) -> None:
    """Call a notification hook; a plugin raising is recorded in ``pm.failures``."""
    _hook_results(pm, hook_name, **kwargs)
