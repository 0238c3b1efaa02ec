"""The tool pipeline: ``Kernel.call_tool`` and what it reuses from call to call.

One call: registry lookup → capability check → argument validation → ``roost_before_tool_call``
vetoes → taint check → loop guard → ``EXEC:TOOL_CALL`` → the handler under its timeout (for
an ``agent_<name>`` tool, the ask: see ``_messaging``) → truncation → taint labels →
``roost_after_tool_call`` → ``EXEC:TOOL_RESULT`` → the audit row, stored before the result
is returned. ``ToolCalls`` is that part of ``Kernel`` (a mixin over the kernel's state).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import trio

from ._audit import (
    AUDIT_COLUMNS,
    OUTCOMES,
    AuditRecord,
    _audit_arguments,
    _known_outcome,
    _optional_text,
    _required_text,
)
from ._errors import (
    LoopDetected,
    RecursionLimitExceeded,
    RoostError,
    ToolArgumentsInvalid,
    ToolDenied,
    ToolError,
    ToolTimeout,
)
from ._events import Event, EventKind
from ._frozen import frozen_builder
from ._hookspecs import ToolVeto
from ._jsonrpc import make_encoder
from ._plugins import collect
from ._policy import argument_check, resolve_timeout, truncate_result, validate_arguments
from ._spans import NO_SPAN, SpanKind, start_span
from ._surface import message_arguments_ok
from ._tools import TAINT_UNTRUSTED, Tool, ToolCall, ToolContext, ToolResult, ToolSpec, redact
from ._trace import TraceContext

if TYPE_CHECKING:  # pragma: no cover
    from ._agent import Conversation

log = logging.getLogger("roost.kernel")

# Within the store's MAX_AUDIT_CHARS: its converter would not cut them again.
_AUDIT_ARGS_MAX = 4_000


# The validators and converters whose work ``_audit_record`` does itself before it takes the
# builder: non-empty agent and tool, a known outcome, arguments within bounds, no error text.
_AUDIT_CHECKS = {
    "agent": (_required_text, None),
    "tool": (_required_text, None),
    "arguments": (None, _audit_arguments),
    "outcome": (_known_outcome, None),
    "error": (None, _optional_text),
}


def _audit_builder() -> Callable[..., AuditRecord]:
    """AuditRecord's builder (values in ``AUDIT_COLUMNS`` order); the class itself, so that
    every record is validated, when its fields or their checks are no longer these."""
    if tuple(f.name for f in attrs.fields(AuditRecord)) != AUDIT_COLUMNS:
        return AuditRecord
    return frozen_builder(AuditRecord, checked_by_caller=_AUDIT_CHECKS)


_build_audit = _audit_builder()
_tool_call = frozen_builder(ToolCall)


# ``json.dumps(..., ensure_ascii=False, default=repr)`` with one encoder for every row.
_audit_json = make_encoder(
    separators=(", ", ": "), default=repr, allow_nan=True, check_circular=True
)


_MAX_PLANS = 4096
# The codes of the ToolErrors that refuse a call (audited as "denied", not "error").
_REFUSALS = {
    "tool_denied",
    "taint_violation",
    "sandbox_violation",
    "invalid_arguments",
    "recursion_limit",
    "tool_not_found",
}
_UNKNOWN = object()


@attrs.define(eq=False)
class _CallPlan:
    """The per-(agent, tool) policy decisions a call reuses (see ``Kernel._plan``)."""

    manifest: Any
    tool: Tool
    asks: str | None  # the agent this tool asks, when it is one of the kernel's agent_* tools
    allowed: bool
    timeout_s: float
    env_allowlist: tuple[str, ...]
    workspace: Path
    # The tool schema's quick argument check (``argument_check``), got on first use.
    arguments_check: Any = _UNKNOWN


class ToolCalls:
    """The tool pipeline of ``Kernel`` (see the module's docstring)."""

    def _plan(self, manifest: Any, tool: Tool) -> _CallPlan:
        """The policy's decisions for ``manifest`` calling ``tool``, kept while neither changes."""
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
        self,
        manifest: Any,
        plan: _CallPlan,
        trace: TraceContext | None,
        outputs: Any = None,
        span: Any = None,
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
            span=span if span is not None else NO_SPAN,
        )

    async def call_tool(
        self,
        agent: str,
        call: ToolCall,
        *,
        conversation: Conversation | None = None,
        check_capability: bool = True,
    ) -> ToolResult:
        """Run ``call`` on behalf of ``agent`` through the whole policy pipeline: failures come
        back as ``is_error`` results; only ``LoopDetected`` is raised (the loop stops on it)."""
        manifest = self._require_agent(agent)
        started = time.monotonic()
        # A span of its own in its caller's: the parent a callee (agent, MCP, A2A peer) sees.
        traced = call.trace is not None
        if traced:
            trace = call.trace.nested()
        else:  # a call from outside any run: one starts at the agent
            trace = TraceContext.new(agent, max_depth=self.max_depth_for(agent))
        call = _tool_call(
            call.name, call.arguments, call.id, call.caller, trace, call.arguments_error
        )
        span = start_span(
            self.tap, SpanKind.TOOL, call.name, trace, source=agent, agent=agent, call_id=call.id
        )
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
                result = await self._run_checked(manifest, plan, tool, call, conversation, span)
            except LoopDetected as exc:
                outcome, error = "denied", "loop detected"
                span.mark_refusal(exc)
                raise
            except trio.Cancelled:
                outcome, error = "cancelled", "the call was cancelled"
                raise
            except ToolTimeout as exc:
                outcome, error = "timeout", str(exc)
                result = ToolResult.error(str(exc))
            except ToolError as exc:
                outcome = "denied" if exc.code in _REFUSALS else "error"
                error = str(exc)
                # A refusal by an agent of this kernel was published by its surface.
                if isinstance(exc, RecursionLimitExceeded) and (
                    spec is None or not self._is_agent_tool(spec)
                ):
                    self.breaker_tripped(exc, caller=agent, target=call.name, trace=trace)
                span.mark_refusal(exc)
                result = ToolResult.error(str(exc))
            if result.is_error and error is None:
                outcome, error = "error", result.as_text()[:500]
            return result
        finally:
            duration_ms = (time.monotonic() - started) * 1000
            if span.recording:
                span.set(outcome=outcome, owner=spec.owner if spec is not None else None)
                span.end(error)
            # Nobody watching: an event nobody can observe is not built (hot path).
            if (spec is None or not self._is_agent_tool(spec)) and self.tap.wants(
                EventKind.EXEC_TOOL_RESULT
            ):
                self.publish(
                    Event(
                        EventKind.EXEC_TOOL_RESULT,
                        call.name,
                        target=agent,
                        payload={
                            "call_id": call.id,
                            "tool": call.name,
                            "outcome": outcome,
                            "error": error,
                            "duration_ms": round(duration_ms, 3),
                        },
                        trace=trace,
                    )
                )
            # The audit row, stored before the result is returned (no cancel point). A call
            # that came without a trace is audited without one, as it always was.
            audited = trace if traced else None
            record = self._audit_record(
                agent, call, audited, duration_ms, outcome, error, conversation
            )
            try:
                await self.store.record_tool_call(record)
            except Exception:
                log.exception("could not write the audit record of %s", call.name)

    async def _run_checked(
        self,
        manifest: Any,
        plan: _CallPlan,
        tool: Tool,
        call: ToolCall,
        conversation: Conversation | None,
        span: Any,
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
            context = self._context(manifest, plan, call.trace, outputs, span)
            for veto in collect(
                hooks.roost_before_tool_call(call=call, spec=spec, context=context)
            ):
                if isinstance(veto, ToolVeto):
                    raise ToolDenied(
                        f"{spec.name} refused by plugin {veto.plugin or '?'}: {veto.reason}"
                    )
        if conversation is not None:
            policy = manifest.taint_policy or self.config.taint.policy
            warning = conversation.taint.check(
                call, sinks=tuple(self.config.taint.sinks), policy=policy
            )
            if warning:
                log.warning("%s", warning)
            conversation.loop_guard.check(call)
        if plan.asks is None and self.tap.wants(EventKind.EXEC_TOOL_CALL):
            self.publish(
                Event(
                    EventKind.EXEC_TOOL_CALL,
                    manifest.name,
                    target=spec.name,
                    payload={
                        "call_id": call.id,
                        "tool": spec.name,
                        "arguments": dict(call.arguments),
                    },
                    trace=call.trace,
                )
            )
        if plan.asks is not None:
            # Asking an agent: the ask carries this very deadline (one cancel scope, not two),
            # and the kernel's own handler needs no ToolContext.
            result = await _invoke(
                spec, self._ask_agent, plan.asks, spec, call, manifest.name, plan.timeout_s, outputs
            )
        else:
            if context is None:
                context = self._context(manifest, plan, call.trace, outputs, span)
            with trio.move_on_after(context.timeout_s) as scope:
                try:
                    result = await _invoke(spec, tool.handler, call, context)
                except RecursionLimitExceeded as exc:
                    if not tool.secrets:
                        raise
                    # A peer's refusal: its path is the peer's word, so redacted like a result.
                    path = redact(exc.path, tool.secrets)
                    raise RecursionLimitExceeded(path, exc.max_depth, exc.depth) from None
            if scope.cancelled_caught:
                raise _timed_out(spec, context.timeout_s)
        if not isinstance(result, ToolResult):
            result = ToolResult.error(
                f"tool {spec.name} returned {type(result).__name__}, not a ToolResult"
            )
        if tool.secrets:  # before the cut, which could leave a secret's head behind
            result = result.redacted(tool.secrets)
        result = truncate_result(result, self.config.tools.max_output_chars)
        if spec.untrusted:
            result = result.with_taint(TAINT_UNTRUSTED, f"source:{spec.qualified_name}")
        if conversation is not None:
            conversation.taint.observe(result)
        if hooks.roost_after_tool_call.get_hookimpls():
            for replacement in collect(
                hooks.roost_after_tool_call(call=call, spec=spec, result=result)
            ):
                if isinstance(replacement, ToolResult):
                    result = replacement
        return result

    def _audit_record(
        self, agent, call, trace, duration_ms, outcome, error, conversation
    ) -> AuditRecord:
        """The audit record of ``call``: one without error skips attrs' validators and
        converters (they cost as much as the rest of the audit). Sound because its ids, times,
        session and outcome are the kernel's own and its arguments text is already cut to
        ``_AUDIT_ARGS_MAX``: only ``agent`` and ``tool`` need checks, made here. Any other
        record (an error text to cut, a bad name) goes through the validating constructor."""
        arguments = call.arguments
        try:
            args = _audit_json(arguments if arguments.__class__ is dict else dict(arguments))
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
            return AuditRecord(**dict(zip(AUDIT_COLUMNS, values, strict=True)))
        return _build_audit(*values)


async def _invoke(spec: ToolSpec, handler: Callable[..., Awaitable[Any]], *args: Any) -> Any:
    """``await handler(*args)`` for the tool ``spec``; its failures become error results,
    never crashes: a buggy tool must not take the agent down (its crash is logged)."""
    try:
        return await handler(*args)
    except (ToolError, LoopDetected):
        raise
    except RoostError as exc:
        return ToolResult.error(str(exc))
    except Exception as exc:
        log.exception("tool %s raised", spec.name)
        return ToolResult.error(f"tool {spec.name} failed: {type(exc).__name__}: {exc}")


def _timed_out(spec: ToolSpec, timeout_s: float) -> ToolTimeout:
    return ToolTimeout(
        f"tool {spec.name} did not finish within {timeout_s:g} s "
        "(set limits.tool_timeouts in agent.json to allow longer)"
    )
