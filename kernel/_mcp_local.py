"""The in-memory MCP surface of an agent: ``tools/list`` and ``tools/call`` over JSON-RPC.

Messages arrive exactly as an MCP client sends them; the trace context is read from
``params._meta`` and the callee applies its own depth limit, as it would over HTTP.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

from ._errors import (
    InvalidTraceContext,
    RecursionLimitExceeded,
    ToolArgumentsInvalid,
    ToolDenied,
    ToolNotFound,
    is_mapping,
)
from ._jsonrpc import INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND
from ._trace import TraceContext

if TYPE_CHECKING:  # pragma: no cover
    from ._actor import DirectAsk
    from ._agent import AgentReply, AgentRuntime


def message_tool_schema(agent: str, description: str) -> dict[str, Any]:
    """The MCP ``Tool`` through which callers ask an agent."""
    return {
        "name": "message",
        "title": f"Ask {agent}",
        "description": description or f"Send a message to the {agent} agent and get its answer.",
        "inputSchema": {
            "type": "object",
            "properties": {"message": {"type": "string", "description": "What to ask the agent"}},
            "required": ["message"],
            "additionalProperties": False,
        },
    }


def _message_result(req_id: Any, reply: AgentReply) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": req_id, "result": reply.to_mcp()}


def _error(req_id: Any, code: int, message: str, data: Any = None) -> dict[str, Any]:
    err: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        err["data"] = data
    return {"jsonrpc": "2.0", "id": req_id, "error": err}


async def handle(
    agent: AgentRuntime, request: Any, caller: str, direct_ask: DirectAsk | None = None
) -> dict[str, Any]:
    """Answer one JSON-RPC request to ``agent``; ``direct_ask``: the request is that ask's
    (running in the asker's task), see ``AgentRuntime.handle_message``."""
    if not is_mapping(request) or request.get("jsonrpc") != "2.0":
        return _error(None, INVALID_REQUEST, "expected a JSON-RPC 2.0 request object")
    req_id = request.get("id")
    method = request.get("method")
    params = request.get("params") or {}
    if not is_mapping(params):
        return _error(req_id, INVALID_PARAMS, "params: expected an object")
    kernel = agent.kernel
    if method == "tools/list":
        tools = [message_tool_schema(agent.name, agent.manifest.description)]
        tools += [spec.to_mcp() for spec in kernel.exposed_tools(agent.name)]
        return {"jsonrpc": "2.0", "id": req_id, "result": {"tools": tools}}
    if method != "tools/call":
        return _error(req_id, METHOD_NOT_FOUND, f"method {method!r} not found")

    name = params.get("name")
    arguments = params.get("arguments") or {}
    if not isinstance(name, str):
        return _error(req_id, INVALID_PARAMS, "params.name: expected the tool name as a string")
    if not is_mapping(arguments):
        return _error(req_id, INVALID_PARAMS, "params.arguments: expected an object")
    try:
        trace = TraceContext.for_hop(params.get("_meta"), agent.name, max_depth=kernel.max_depth_for(agent.name))
    except InvalidTraceContext as exc:
        return _error(req_id, INVALID_PARAMS, str(exc), exc.to_dict())
    except RecursionLimitExceeded as exc:
        kernel.breaker_tripped(exc, caller=caller, target=agent.name)
        return {"jsonrpc": "2.0", "id": req_id, "result": exc.to_mcp_result()}

    if name == "message":
        text = arguments.get("message")
        if not isinstance(text, str):
            return _error(req_id, INVALID_PARAMS, "params.arguments.message: expected a string")
        run_id = str(req_id) if req_id is not None else None
        # A one-shot call nobody can continue: its history stays in memory (handle_message).
        reply = await agent.handle_message(
            text,
            session_id=None,
            trace=trace,
            run_id=run_id,
            persist=False,
            direct_ask=direct_ask,
            answer_as=partial(_message_result, req_id),
        )
        return _message_result(req_id, reply)

    try:
        result = await kernel.call_exposed(agent.name, name, dict(arguments), trace=trace)
    except ToolNotFound:
        # Unexposed and private tools are indistinguishable from absent ones.
        known = ["message", *(spec.name for spec in kernel.exposed_tools(agent.name))]
        return _error(req_id, INVALID_PARAMS, f"unknown tool: {name}{ToolNotFound(name, known).hint}")
    except (ToolDenied, ToolArgumentsInvalid) as exc:
        return _error(req_id, INVALID_PARAMS, str(exc), exc.to_dict())
    return {"jsonrpc": "2.0", "id": req_id, "result": result.to_mcp()}
