"""Messages to agents: ``Kernel.send`` and the ``agent_<name>`` tools through which agents
ask each other (the in-memory MCP transport).

``send`` makes the agent the next hop of the caller's trace and asks its actor with an
``AGENT:MESSAGE`` event. An ``agent_<name>`` tool asks the target's actor with an
``EXEC:TOOL_CALL`` event holding a JSON-RPC ``tools/call`` of its ``message`` tool (the
trace on the event, as headers carry it between hosts), which its ``AgentSurface``
answers. A caller that stops waiting cancels the run. ``Messaging`` is that part of
``Kernel`` (a mixin over its state).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ._errors import (
    AgentUnavailable,
    AskTimeout,
    RecursionLimitExceeded,
    RoostError,
    ToolArgumentsInvalid,
    is_mapping,
)
from ._events import EventKind
from ._ids import uuid7_hex
from ._outputs import output_from_json
from ._policy import check_ping_pong
from ._surface import ask_tool_spec
from ._toolcalls import _timed_out
from ._tools import Tool, ToolCall, ToolContext, ToolResult, ToolSpec, agent_tool_name
from ._trace import TraceContext

if TYPE_CHECKING:  # pragma: no cover
    from ._agent import AgentReply

log = logging.getLogger("roost.kernel")


class Messaging:
    """How ``Kernel`` delivers messages to agents (see the module's docstring)."""

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
        """Send ``message`` to ``agent`` and wait for its answer. ``trace``: the caller's
        context (e.g. from HTTP headers), whose next hop the agent is (the depth breaker holds
        for external callers too). ``new_session``: ``session_id`` was just made up.
        ``principal``: who calls (default ``config.http.host_principal``); ``session_id``
        names a session of theirs (the same id from another principal is another session)."""
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
                caller = trace.path[-1] if trace.path else "?"
                self.breaker_tripped(exc, caller=caller, target=agent, trace=trace)
                raise
        return await self._deliver(
            agent, message, trace, session_id, timeout, stream, new_session, principal
        )

    async def _deliver(
        self,
        agent: str,
        message: str,
        trace: TraceContext,
        session_id: str | None,
        timeout: float | None,
        stream: bool,
        new_session: bool,
        principal: str | None,
    ) -> AgentReply:
        """``send``'s delivery, ``trace`` already naming ``agent`` as its last hop."""
        run_id = uuid7_hex()  # from the id pool: no syscall per message
        try:
            return await self.actors.ask_payload(
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

    def _cancel_run(self, agent: str, run_id: str) -> None:
        """The caller stopped waiting (cancelled, timed out): the agent stops working too."""
        runtime = self._runtimes.get(agent)
        if runtime is not None:
            runtime.cancel(run_id)

    def _agent_tool(self, target: str) -> Tool:
        """``agent_<target>``, the tool through which agents ask ``target``."""
        spec = ask_tool_spec(target, self.agents[target].description, name=agent_tool_name(target))

        async def ask_agent(call: ToolCall, ctx: ToolContext) -> ToolResult:
            return await self._ask_agent(target, spec, call, ctx.agent, ctx.timeout_s, ctx.outputs)

        return Tool(spec, ask_agent)

    async def _ask_agent(
        self,
        target: str,
        spec: ToolSpec,
        call: ToolCall,
        agent: str,
        timeout_s: float,
        outputs: Any,
    ) -> ToolResult:
        """``agent_{target}`` called by ``agent``: a ``tools/call`` of the target's ``message``
        tool (its surface applies the depth limit), the tool's timeout its deadline."""
        if target in self.agent_errors:
            raise AgentUnavailable(target, self.agent_errors[target])
        caller = call.caller or agent
        origin = call.trace or TraceContext.new(caller, max_depth=self.max_depth_for(caller))
        if len(origin.path) > 2:  # bouncing more than twice takes four hops (A, B, A, B)
            check_ping_pong(origin.path + (target,))
        # The trace rides the event (``trace=origin``), as HTTP headers carry it between hosts.
        params = {"name": "message", "arguments": {"message": call.arguments["message"]}}
        request = {"jsonrpc": "2.0", "id": call.id, "method": "tools/call", "params": params}
        try:
            answer = await self.actors.ask_payload(
                target,
                EventKind.EXEC_TOOL_CALL,
                request,
                source=caller,
                trace=origin,
                timeout=timeout_s,
            )
        except BaseException as exc:
            self._cancel_run(target, call.id)
            if isinstance(exc, AskTimeout):
                raise _timed_out(spec, timeout_s) from None
            raise
        result = result_from_jsonrpc(answer)
        if (
            outputs is not None
            and result.structured_content
            and "artifacts" in result.structured_content
        ):
            _adopt_outputs(outputs, result.structured_content["artifacts"], result.content, target)
        return result


def _adopt_outputs(outputs: Any, artifacts: Any, content: Any, agent: str) -> None:
    """What an asked agent handed over becomes the asking run's too (like ADK's AgentTool), for
    the caller's caller (an A2A client, say). Each artifact whole or not at all: one past this
    run's bounds is left out (the tool result still has it)."""
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
