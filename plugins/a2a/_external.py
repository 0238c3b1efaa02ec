"""External A2A agents (``[[a2a.external_agents]]``), offered to local agents as tools.

Each is discovered in the background, never holding up the boot; one that cannot be reached
is tried again while the kernel runs (1 s doubling to 60 s), its state (``GET
/api/a2a/external_agents``) saying why. Once discovered, the tool ``a2a_{name}`` sends a
message there (with the entry's ``headers``) and returns the answer, tainted as untrusted;
the trace context travels along, so the depth breaker holds across A2A hops.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import attrs
import trio
from roost.kernel import (
    KernelAPI,
    Output,
    Outputs,
    RouteDescriptor,
    Tool,
    ToolArgumentsInvalid,
    ToolCall,
    ToolContext,
    ToolResult,
    ToolSpec,
    public_url,
    redact,
)
from roost.plugins.http.client import credential_values

from . import _models as m
from ._client import A2AClient, AgentInfo, task_text
from ._settings import ExternalAgent

log = logging.getLogger("roost.a2a")

DISCOVERY_BACKOFF_S = 1.0  # the first retry; doubling up to DISCOVERY_BACKOFF_MAX_S, forever
DISCOVERY_BACKOFF_MAX_S = 60.0


@attrs.define
class PeerState:
    """Where one external agent stands: ``pending`` (not tried yet), ``connecting``,
    ``connected`` (its tool is registered) or ``failed`` (``error``; tried again at
    ``next_retry_at``, Unix time, unless it is None)."""

    name: str
    url: str
    status: str = "pending"
    error: str | None = None
    next_retry_at: float | None = None
    attempts: int = 0
    tool: str | None = None

    def public(self) -> dict[str, Any]:
        """Its status entry; the URL without user info, query or fragment (credentials)."""
        return {**attrs.asdict(self), "url": public_url(self.url)}


def tool_name(name: str) -> str:
    return "a2a_" + name.replace("-", "_")


def _credentials_hint(agent: ExternalAgent, exc: m.A2AError) -> str:
    """What to configure when the agent refused us (HTTP 401/403), else ""."""
    if getattr(exc, "peer_status", None) not in (401, 403):
        return ""
    where = f"the [[a2a.external_agents]] entry {agent.name!r}"
    if any(k.lower() == "authorization" for k in agent.headers):
        return f" (the agent refused the Authorization header in {where}; check the key)"
    return (
        ' (the agent wants credentials: set headers = { Authorization = "Bearer <key>" } '
        f"in {where})"
    )


def external_tool(agent: ExternalAgent, info: AgentInfo, client_options: dict[str, Any]) -> Tool:
    """The ``a2a_{name}`` tool that delegates to ``info``."""
    skills = "; ".join(str(s.get("name") or s.get("id")) for s in info.skills[:8])
    secrets = credential_values(agent.headers, agent.url)
    described = (
        f"Send a message to the external A2A agent {info.name}: {info.description}"
        + (f" Skills: {skills}." if skills else "")
    ).strip()
    spec = ToolSpec(
        name=tool_name(agent.name),
        # What the model reads each turn: the card is as much the agent's word as an answer.
        title=redact(f"Ask {info.name} (A2A)", secrets),
        description=redact(described, secrets),
        input_schema={
            "type": "object",
            "properties": {
                "message": {"type": "string", "description": f"What to ask {info.name}"},
                "context_id": {
                    "type": "string",
                    "description": "Continue an earlier conversation (optional)",
                },
                "task_id": {
                    "type": "string",
                    "description": "Answer a task that asked for input (optional)",
                },
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
        if ctx.span.recording:  # the call's span is the client hop: name the peer
            ctx.span.set(peer_attributes(agent, info))
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
                return ToolResult.error(
                    f"A2A agent {info.name} failed: {exc.message}{_credentials_hint(agent, exc)}"
                )
        if isinstance(outcome, m.Message):
            return ToolResult.text(outcome.text())
        if ctx.outputs is not None:
            _adopt_files(ctx.outputs, outcome, info.name, secrets)
        text = task_text(outcome)
        state = m.state_to_json(outcome.status.state, m.V03)
        if outcome.status.state == m.COMPLETED:
            return ToolResult.text(text)
        note = f"[task {outcome.id} in context {outcome.context_id} is {state}]"
        return ToolResult.text(
            f"{note}\n{text}".strip(),
            is_error=outcome.status.state in (m.FAILED, m.REJECTED, m.CANCELED),
        )

    return Tool(spec, handler, secrets=secrets)


def peer_attributes(agent: ExternalAgent, info: AgentInfo) -> dict[str, Any]:
    """What a tool call's span says of the A2A agent it reaches (for a roost daemon also
    ``peer_dashboard``, its base URL)."""
    url = public_url(info.jsonrpc_url or info.rest_url or agent.url)  # no key in a span
    out: dict[str, Any] = {"peer": "a2a", "peer_name": agent.name, "peer_url": url}
    provider = info.card.get("provider")
    if isinstance(provider, dict) and provider.get("organization") == "roost":
        base = public_url(provider.get("url"))  # "" for no URL
        if base:
            out["peer_dashboard"] = base.rstrip("/")
    return out


def _adopt_files(outputs: Outputs, task: m.Task, agent: str, secrets: tuple[str, ...] = ()) -> None:
    """The remote task's file and data parts become the asking run's outputs (each artifact
    whole or not at all, within the run's bounds), ``secrets`` redacted as in a result."""
    for artifact in task.artifacts:
        parts = tuple(_redacted(p.to_output(), secrets) for p in artifact.parts if p.text is None)
        if not parts:
            continue
        name, about = redact((artifact.name or "artifact", artifact.description), secrets)
        try:
            outputs.adopt(Output(name, parts, about))
        except ToolArgumentsInvalid as exc:
            log.warning(
                "artifact %r from A2A agent %s not handed on: %s", artifact.name, agent, exc
            )


def _redacted(part: Any, secrets: tuple[str, ...]) -> Any:
    """``part`` with ``secrets`` out of its data, link and file name (not a file's bytes)."""
    if not secrets:
        return part
    data, url, filename = redact((part.data, part.url, part.filename), secrets)
    return attrs.evolve(part, data=data, url=url, filename=filename)


async def discover_external_agents(service: Any) -> None:
    """Discover every external agent concurrently, each until it answers; register its tool."""
    peers = service.external_peers
    async with trio.open_nursery() as nursery:
        for agent in service.settings.external_agents:
            peers[agent.name] = PeerState(agent.name, agent.url)
            nursery.start_soon(_discover_one, service, agent, peers[agent.name])


async def _discover_one(service: Any, agent: ExternalAgent, peer: PeerState) -> None:
    # The operator configured this URL, so private and loopback hosts are allowed; metadata
    # and link-local addresses are still refused by the SSRF guard.
    options: dict[str, Any] = {
        "allow_private": True,
        "allow_loopback": True,
        "headers": dict(agent.headers),
    }
    delay = DISCOVERY_BACKOFF_S
    while True:
        peer.status, peer.next_retry_at = "connecting", None
        peer.attempts += 1
        try:
            async with A2AClient(**options) as client:  # each request bounded by its timeout
                info = await client.discover(agent.url)
        except Exception as exc:  # whatever it was (a bad card, a refusal, a crash): try again
            if isinstance(exc, m.A2AError):
                reason = exc.message + _credentials_hint(agent, exc)
            else:
                reason = f"{type(exc).__name__}: {exc}"
            reason = redact(reason, credential_values(agent.headers, agent.url))
            peer.status, peer.error, peer.next_retry_at = "failed", reason, time.time() + delay
            log.warning(
                "A2A external agent %s (%s): discovery attempt %d failed (retrying in %g s): %s",
                agent.name,
                public_url(agent.url),
                peer.attempts,
                delay,
                reason,
            )
            await trio.sleep(delay)
            delay = min(delay * 2, DISCOVERY_BACKOFF_MAX_S)
            continue
        try:
            service.kernel.add_tool(external_tool(agent, info, options))
        except Exception as exc:  # a name clash: trying again would not help
            peer.status, peer.error = "failed", f"cannot register its tool: {exc}"
            log.error("A2A external agent %s: cannot register its tool: %s", agent.name, exc)
            return
        peer.status, peer.error, peer.tool = "connected", None, tool_name(agent.name)
        log.info(
            "A2A external agent %s (%s) found after %d attempt(s): tool %s",
            agent.name,
            public_url(agent.url),
            peer.attempts,
            peer.tool,
        )
        return


def status_route(kernel: KernelAPI) -> RouteDescriptor:
    """``GET /api/a2a/external_agents``: each external agent and its discovery state."""

    async def list_external_agents(request: Any) -> Any:
        from roost.plugins.http import PlainResponse

        from ._server import service_for

        service = service_for(kernel)
        known = service.external_peers if service is not None else {}
        agents = service.settings.external_agents if service is not None else ()
        states = [(known.get(a.name) or PeerState(a.name, a.url)).public() for a in agents]
        return PlainResponse.json({"external_agents": states})

    return RouteDescriptor("/api/a2a/external_agents", list_external_agents, methods=("GET",))
