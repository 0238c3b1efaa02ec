"""An agent's MCP surface, sans I/O: the one code path that every transport drives.

Every agent is an MCP server: ``message`` ("ask this agent") plus the tools its manifest
exposes. ``AgentSurface`` (``kernel.surface(name)``) lists them and answers ``tools/call``
(exposure, argument validation, the trace from ``params._meta`` or the transport, the depth
breaker, every error's shape) whatever the transport. In memory, an ``EXEC:TOOL_CALL`` to
the agent's actor (the trace on the event) is answered by ``handle`` (a one-shot ask, kept
in memory); over stdio and HTTP the MCP plugin's server calls ``prepare`` and ``ask`` /
``call_tool`` for a principal (stored as ``kernel.send`` stores it) and adds what belongs to
the session.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Mapping
from functools import partial
from typing import TYPE_CHECKING, Any

import attrs

from ._errors import (
    AgentNotFound,
    InvalidInput,
    InvalidTraceContext,
    RecursionLimitExceeded,
    RoostError,
    ToolArgumentsInvalid,
    ToolNotFound,
    check_json_input,
    is_mapping,
)
from ._jsonrpc import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    SERVER_ERROR,
    JsonRpcError,
    Response,
    param,
)
from ._tools import ToolCall, ToolResult, ToolSpec
from ._trace import TraceContext

if TYPE_CHECKING:  # pragma: no cover
    from ._actor import DirectAsk
    from ._agent import AgentReply
    from ._kernel import Kernel

log = logging.getLogger("roost.kernel.surface")

MESSAGE_TOOL = "message"
"""The tool of an agent's own surface through which a caller asks it."""


def ask_tool_spec(agent: str, description: str = "", *, name: str = MESSAGE_TOOL) -> ToolSpec:
    """The tool through which a caller asks ``agent``: ``message`` on the agent's own
    surface; ``agent_<name>`` in-host and on the host surface. One schema, one wording."""
    return ToolSpec(
        name=name,
        title=f"Ask {agent}",
        description=f"Ask the {agent} agent and get its answer. {description}".strip(),
        input_schema={
            "type": "object",
            "properties": {
                "message": {"type": "string", "minLength": 1, "description": f"What to ask {agent}"}
            },
            "required": ["message"],
            "additionalProperties": False,
        },
        owner="agents",
        original_name=agent,
    )


def message_arguments_ok(arguments: Any) -> bool:
    """True for a plain ``{"message": "<non-empty text>"}`` (the schema accepts it): every ask's
    quick check on the hot path; False: ask the schema's validator, which words what is wrong."""
    if arguments.__class__ is not dict or len(arguments) != 1:
        return False
    text = arguments.get("message")
    return text.__class__ is str and text != ""


def unknown_tool_error(name: str, known: Any) -> JsonRpcError:
    """The error for a ``tools/call`` of a tool the surface does not list (private and
    unexposed tools included: they are indistinguishable from absent ones)."""
    hint = ToolNotFound(name, known).hint
    return JsonRpcError(
        INVALID_PARAMS, f"unknown tool: {name}{hint}; see tools/list", {"tool": name}
    )


def jsonrpc_error(exc: Exception, method: str = "") -> JsonRpcError:
    """The JSON-RPC error an MCP server answers when serving ``method`` raised ``exc``."""
    if isinstance(exc, JsonRpcError):
        return exc
    if isinstance(exc, RoostError):
        # A StoreError, known by its code (the store module loads only when used): storage
        # failed, e.g. the disk is full, and nothing was kept: -32603 saying so.
        code = INTERNAL_ERROR if exc.code == "store_error" else SERVER_ERROR
        return JsonRpcError(code, str(exc), exc.to_dict())
    ref = secrets.token_hex(6)
    log.error("MCP method %r failed (ref %s)", method, ref, exc_info=exc)
    return JsonRpcError(
        INTERNAL_ERROR, f"internal error in {method!r}; the server logged it as {ref}"
    )


@attrs.define(eq=False)
class SurfaceCall:
    """A ``tools/call`` ``prepare`` accepted: ``tool`` to run (None: ``message``); ``trace``,
    the caller's with this agent as last hop; ``refused``, the result of a call that must not
    run (breaker, bad arguments); ``server``, the server's span (``server=True``), its parent."""

    tool: str | None
    arguments: Mapping[str, Any]
    trace: Any
    refused: Any
    server: Any = None


class AgentSurface:
    """The MCP surface of one agent (``Kernel.surface``): ``message`` plus its exposed tools."""

    def __init__(self, kernel: Kernel, agent: str) -> None:
        self.kernel = kernel
        self.agent = agent

    # ---- tools/list ---------------------------------------------------------------------
    def tools(self) -> list[ToolSpec]:
        """What ``tools/list`` lists, sorted by name: ``message`` and the exposed tools (an
        exposed tool called ``message`` is hidden behind the agent's own)."""
        return list(self._index().values())

    def _index(self) -> dict[str, ToolSpec]:
        """The tools by name, rebuilt when the manifest or the registry changes."""
        kernel = self.kernel
        manifest = kernel.agents.get(self.agent)
        if manifest is None:
            raise AgentNotFound(self.agent, list(kernel.agents))

        def build() -> dict[str, ToolSpec]:
            specs = {spec.name: spec for spec in kernel.exposed_tools(self.agent)}
            specs[MESSAGE_TOOL] = ask_tool_spec(self.agent, manifest.description)
            return {name: specs[name] for name in sorted(specs)}

        return kernel._cached(("surface", self.agent), manifest, build)

    # ---- tools/call ----------------------------------------------------------------------
    def prepare(
        self,
        params: Any,
        *,
        tool: str | None = None,
        server: bool = False,
        carried: TraceContext | None = None,
    ) -> SurfaceCall:
        """Check a ``tools/call``'s ``params`` and read its trace context; ``JsonRpcError``
        for what the protocol refuses (bad params, unknown tool, a malformed ``_meta``
        depth). ``tool``: the name here when the caller used another (the host surface's
        ``agent_<name>``, ``<agent>_<tool>``).
        ``server``: the transport's server opens a span for it (``SurfaceCall.server``), so
        the agent's run is that span's child rather than the caller's.
        ``carried``: the caller's context as the transport carries it beside ``_meta`` (in
        memory: the ask's event); the deeper of the two is continued (a tie: ``_meta``)."""
        if not is_mapping(params):
            params = param(params, "name", str)  # raises, naming what params should be
        try:  # a lone surrogate or a non-finite number (see check_json_input): refused up front
            check_json_input(params, "params")
        except InvalidInput as exc:
            raise JsonRpcError(INVALID_PARAMS, str(exc), {"field": exc.field}) from None
        name = param(params, "name", str)
        arguments = param(params, "arguments", dict, default={}) or {}
        index = self._index()
        spec = index.get(tool or name)
        if spec is None:
            raise unknown_tool_error(name, index)
        kernel = self.kernel
        agent = self.agent
        tool = None if spec.name == MESSAGE_TOOL else spec.name
        limit = kernel.max_depth_for(agent)
        span = remote = None
        try:
            # A tie goes to the request's own carrier, as on every entry (README).
            remote = TraceContext.deepest(
                TraceContext.from_meta(params.get("_meta"), field="params._meta"), carried
            )
            if server:
                span = remote.nested() if remote is not None else TraceContext.root(max_depth=limit)
                trace = span.child(agent, max_depth=limit)
            elif remote is not None:
                trace = remote.child(agent, max_depth=limit)
            else:
                trace = TraceContext.new(agent, max_depth=limit)
        except InvalidTraceContext as exc:
            raise JsonRpcError(INVALID_PARAMS, str(exc), {"field": exc.field}) from None
        except RecursionLimitExceeded as exc:
            # Refused by the depth breaker: a tool execution error the calling model reads.
            caller = exc.path[-2] if len(exc.path) > 1 else "mcp-client"
            kernel.breaker_tripped(exc, caller=caller, target=agent, trace=span or remote)
            return SurfaceCall(tool, arguments, None, exc.to_mcp_result(), span)
        if tool is not None:
            # No agent runs: call_tool's span is the caller's (or server's) child, not a hop's.
            if trace.parent_span_id is not None:
                trace = attrs.evolve(trace, span_id=trace.parent_span_id, parent_span_id=None)
            return SurfaceCall(tool, arguments, trace, None, span)  # call_tool validates
        if message_arguments_ok(arguments):
            return SurfaceCall(None, arguments, trace, None, span)
        from ._policy import validate_arguments  # here: roost mcp answers initialize without it

        try:  # words what is wrong, naming the tool as the caller did
            validate_arguments(
                spec if name == spec.name else ToolSpec(name, input_schema=spec.input_schema),
                arguments,
            )
        except ToolArgumentsInvalid as exc:
            return SurfaceCall(None, arguments, trace, ToolResult.error(str(exc)).to_mcp(), span)
        return SurfaceCall(None, arguments, trace, None, span)

    async def call_tool(self, call: SurfaceCall) -> dict[str, Any]:
        """The ``CallToolResult`` of the exposed tool of ``call``, run by the kernel's pipeline
        with the agent's limits, whatever its capabilities (a failure: an ``isError`` result)."""
        index = self._index()
        if call.tool not in index:  # gone since ``prepare``
            raise unknown_tool_error(str(call.tool), index)
        tool_call = ToolCall(call.tool, dict(call.arguments), caller=self.agent, trace=call.trace)
        return (await self.kernel.call_tool(self.agent, tool_call, check_capability=False)).to_mcp()

    async def ask(
        self,
        call: SurfaceCall,
        *,
        principal: str | None = None,
        session_id: str | None = None,
        timeout: float | None = None,
    ) -> AgentReply:
        """Ask the agent ``call``'s ``message`` through its mailbox as ``kernel.send`` does, for
        ``principal`` (default: the host's), in their session ``session_id`` if one is named."""
        assert call.tool is None and call.refused is None
        self.kernel._require_agent(self.agent)
        message = call.arguments["message"]
        return await self.kernel._deliver(
            self.agent, message, call.trace, session_id, timeout, False, False, principal
        )

    @staticmethod
    def answer(reply: AgentReply) -> dict[str, Any]:
        """The ``message`` tool's ``CallToolResult`` of ``reply`` (one-shot: no session_id)."""
        return reply.to_mcp(session_id=reply.session_id or None)

    # ---- the in-memory transport ----------------------------------------------------------
    async def handle(
        self,
        request: Any,
        *,
        direct_ask: DirectAsk | None = None,
        carried: TraceContext | None = None,
    ) -> dict[str, Any]:
        """Answer a JSON-RPC request sent to the actor (``direct_ask``: that ask's, in its task;
        ``carried``: the trace context of the ask's event)."""
        if not is_mapping(request) or request.get("jsonrpc") != "2.0":
            return (
                JsonRpcError(INVALID_REQUEST, "expected a JSON-RPC 2.0 request object")
                .to_response(None)
                .to_dict()
            )
        req_id, method, params = request.get("id"), request.get("method"), request.get("params")
        try:
            if params is not None and not is_mapping(params):
                raise JsonRpcError(
                    INVALID_PARAMS, "params: expected an object (MCP uses named parameters)"
                )
            if method == "tools/list":
                return Response(req_id, {"tools": [s.to_mcp() for s in self.tools()]}).to_dict()
            if method != "tools/call":
                raise JsonRpcError(
                    METHOD_NOT_FOUND, f"method {method!r} not found", {"method": method}
                )
            call = self.prepare(params, carried=carried)
            if call.refused is not None:
                return Response(req_id, call.refused).to_dict()
            if call.tool is not None:
                return Response(req_id, await self.call_tool(call)).to_dict()
            # A one-shot ask, run here in the agent's actor: its history stays in memory.
            self.kernel._require_agent(self.agent)
            answer_as = partial(_response, req_id)
            reply = await self.kernel._runtimes[self.agent].handle_message(
                call.arguments["message"],
                session_id=None,
                trace=call.trace,
                run_id=str(req_id) if req_id is not None else None,
                persist=False,
                direct_ask=direct_ask,
                answer_as=answer_as,
            )
            return answer_as(reply)
        except Exception as exc:
            return jsonrpc_error(exc, str(method)).to_response(req_id).to_dict()


def _response(req_id: Any, reply: AgentReply) -> dict[str, Any]:
    """The JSON-RPC response of a ``message`` call's reply (a cancelled one's too)."""
    return Response(req_id, AgentSurface.answer(reply)).to_dict()
