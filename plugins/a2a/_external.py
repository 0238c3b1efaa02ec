"""External A2A agents (``[[a2a.external_agents]]``), offered to local agents as tools.

Each is discovered in the background at boot; a failure is logged and retried a few times
with backoff, and never holds up the boot. Once discovered, the tool ``a2a_{name}`` sends
a message there and returns the answer, tainted as untrusted. The caller's trace context
travels in the message metadata and the HTTP headers, so the depth breaker holds across
A2A hops.
"""

from __future__ import annotations

import logging
from typing import Any

import trio
from roost.kernel import (
    Output,
    Outputs,
    Tool,
    ToolArgumentsInvalid,
    ToolCall,
    ToolContext,
    ToolResult,
    ToolSpec,
)

from . import _models as m
from ._client import A2AClient, AgentInfo, task_text
from ._settings import ExternalAgent

log = logging.getLogger("roost.a2a")

DISCOVERY_ATTEMPTS = 3
DISCOVERY_BACKOFF_S = 1.0


def tool_name(name: str) -> str:
    return "a2a_" + name.replace("-", "_")


def external_tool(agent: ExternalAgent, info: AgentInfo, client_options: dict[str, Any]) -> Tool:
    """The ``a2a_{name}`` tool that delegates to ``info``."""
    skills = "; ".join(str(s.get("name") or s.get("id")) for s in info.skills[:8])
    spec = ToolSpec(
        name=tool_name(agent.name),
        title=f"Ask {info.name} (A2A)",
        description=(f"Send a message to the external A2A agent {info.name}: {info.description}"
                     + (f" Skills: {skills}." if skills else "")).strip(),
        input_schema={
            "type": "object",
            "properties": {
                "message": {"type": "string", "description": f"What to ask {info.name}"},
                "context_id": {"type": "string", "description": "Continue an earlier conversation (optional)"},
                "task_id": {"type": "string", "description": "Answer a task that asked for input (optional)"},
            },
            "required": ["message"],
            "additionalProperties": False,
        },
        owner="a2a",
        original_name=agent.name,
        untrusted=True,
    )

    async def handler(call: ToolCall, ctx: ToolContext) -> ToolResult:
        trace = call.trace or ctx.trace
        async with A2AClient(**client_options) as client:
            try:
                outcome = await client.send(
                    info,
                    str(call.arguments["message"]),
                    context_id=call.arguments.get("context_id"),
                    task_id=call.arguments.get("task_id"),
                    trace=trace,
                )
            except m.A2AError as exc:
                return ToolResult.error(f"A2A agent {info.name} failed: {exc.message}")
        if isinstance(outcome, m.Message):
            return ToolResult.text(outcome.text())
        if ctx.outputs is not None:
            _adopt_files(ctx.outputs, outcome, info.name)
        text = task_text(outcome)
        state = m.state_to_json(outcome.status.state, m.V03)
        if outcome.status.state == m.COMPLETED:
            return ToolResult.text(text)
        note = f"[task {outcome.id} in context {outcome.context_id} is {state}]"
        return ToolResult.text(f"{note}\n{text}".strip(), is_error=outcome.status.state in (m.FAILED, m.REJECTED, m.CANCELED))

    return Tool(spec, handler)


def _adopt_files(outputs: Outputs, task: m.Task, agent: str) -> None:
    """The remote task's file and data parts become the asking run's outputs (its text is
    the tool's result already), each artifact whole or not at all, within the run's bounds."""
    for artifact in task.artifacts:
        parts = tuple(p.to_output() for p in artifact.parts if p.text is None)
        if not parts:
            continue
        try:
            outputs.adopt(Output(artifact.name or "artifact", parts, artifact.description))
        except ToolArgumentsInvalid as exc:
            log.warning("artifact %r from A2A agent %s not handed on: %s", artifact.name, agent, exc)


async def discover_external_agents(service: Any) -> None:
    """Discover every configured external agent concurrently; register its tool."""
    async with trio.open_nursery() as nursery:
        for agent in service.settings.external_agents:
            nursery.start_soon(_discover_one, service, agent)


async def _discover_one(service: Any, agent: ExternalAgent) -> None:
    # The operator configured this URL, so private and loopback hosts are allowed; metadata
    # and link-local addresses are still refused by the SSRF guard.
    options = {"allow_private": True, "allow_loopback": True}
    delay = DISCOVERY_BACKOFF_S
    for attempt in range(1, DISCOVERY_ATTEMPTS + 1):
        try:
            async with A2AClient(**options) as client:
                info = await client.discover(agent.url)
        except m.A2AError as exc:
            service.external_errors[agent.name] = exc.message
            log.warning("A2A external agent %s (%s): discovery attempt %d failed: %s", agent.name, agent.url, attempt, exc.message)
            await trio.sleep(delay)
            delay *= 2
            continue
        service.external_cards[agent.name] = info
        service.external_errors.pop(agent.name, None)
        try:
            service.kernel.add_tool(external_tool(agent, info, options))
        except Exception as exc:
            service.external_errors[agent.name] = str(exc)
            log.error("A2A external agent %s: cannot register its tool: %s", agent.name, exc)
        return
