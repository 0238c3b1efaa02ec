"""A small in-memory kernel with exactly the surface the HTTP daemon and the CLI use.

It is not a stub of behaviour under test: the daemon and CLI are the code under test;
this stands in for ``open_kernel`` so those tests stay fast and isolated.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
from roost.kernel import (
    AgentNotFound,
    AgentReply,
    Event,
    EventKind,
    EventTap,
    PluginManager,
    ProcessTraces,
    ToolCall,
    ToolResult,
    ToolSpec,
    TraceContext,
)


@attrs.frozen
class FakeHttpConfig:
    host: str = "127.0.0.1"
    port: int = 8470
    api_key: str | None = None
    api_key_env: str = "ROOST_TEST_API_KEY_UNSET"
    rate_limit_per_s: float = 1000.0
    rate_limit_burst: int = 1000
    max_body_bytes: int = 1_048_576
    allowed_origins: tuple[str, ...] = ()
    rate_limit_loopback: bool = False
    allowed_hosts: tuple[str, ...] = ()
    public_url: str | None = None
    keep_alive_s: float = 5.0


@attrs.frozen
class FakeConfig:
    home: Path
    http: FakeHttpConfig = FakeHttpConfig()


@attrs.frozen
class FakeModel:
    provider: str = "scripted"
    name: str = "echo-1"


@attrs.frozen
class FakeManifest:
    name: str
    description: str = ""
    version: str = "1.0.0"
    model: FakeModel = FakeModel()


class FakeStore:
    """No usage recorded yet."""

    async def usage_by_agent(self) -> dict[str, dict]:
        return {}


class FakeKernel:
    """Agents answer ``echo: <message>``; ``fail_with`` makes ``send`` raise instead.

    It has the members of ``roost.kernel.KernelAPI`` that the daemon and the CLI use."""

    def __init__(self, config: FakeConfig, agents: tuple[str, ...] = ("echo", "coder")) -> None:
        self.config = config
        self.agents = {n: FakeManifest(n, description=f"the {n} agent") for n in agents}
        self.agent_errors: dict[str, str] = {}
        self.manifest_errors: list[Exception] = []
        self.load_warnings: list[str] = []
        self.host_principal = "local"
        self.store = FakeStore()
        self.process_traces = ProcessTraces()
        self.extensions: dict[str, Any] = {}
        self.tap = EventTap()
        self.plugins = PluginManager()
        self.sent: list[dict[str, Any]] = []
        self.fail_with: BaseException | None = None
        self.tools = [
            ToolSpec("read", "Read a file", owner="tools"),
            ToolSpec("bash", "Run a command", owner="tools"),
            ToolSpec("agent_echo", "Ask the echo agent", owner="agents"),
        ]

    async def send(
        self,
        agent: str,
        message: str,
        *,
        session_id: str | None = None,
        trace: TraceContext | None = None,
        timeout: float | None = None,
        principal: str | None = None,
    ) -> AgentReply:
        if agent not in self.agents:
            raise AgentNotFound(agent, list(self.agents))
        trace = TraceContext.new(agent) if trace is None else trace.child(agent)
        self.sent.append(
            {
                "agent": agent,
                "message": message,
                "session_id": session_id,
                "trace": trace,
                "timeout": timeout,
                "principal": principal,
            }
        )
        self.tap.publish(Event(EventKind.AGENT_MESSAGE, "api", agent, {"message": message}, trace))
        if self.fail_with is not None:
            raise self.fail_with
        reply = AgentReply(
            agent, f"echo: {message}", session_id or "sess-1", trace.trace_id, False, 1
        )
        self.tap.publish(Event(EventKind.AGENT_REPLY, agent, "api", {"text": reply.text}, trace))
        return reply

    def list_tools(self, agent: str | None = None) -> list[ToolSpec]:
        if agent is not None and agent not in self.agents:
            raise AgentNotFound(agent, list(self.agents))
        if agent == "echo":
            return [t for t in self.tools if t.name == "read"]
        return list(self.tools)

    def agent_info(self, agent: str | None = None) -> list[dict[str, Any]]:
        return [
            {
                "name": m.name,
                "description": m.description,
                "version": m.version,
                "provider": m.model.provider,
                "model": m.model.name,
                "tools": [t.name for t in self.list_tools(m.name)],
                "expose_tools": [],
                "status": "ready",
            }
            for m in self.agents.values()
            if agent is None or m.name == agent
        ]

    async def call_tool(self, agent: str, call: ToolCall) -> ToolResult:
        return ToolResult.text(f"{call.name} ran for {agent}")


@asynccontextmanager
async def open_fake_kernel(config: FakeConfig, **kwargs: Any) -> AsyncIterator[FakeKernel]:
    """Shaped like ``open_kernel(config)``."""
    kernel = FakeKernel(config, **kwargs)
    kernel.tap.publish(Event(EventKind.KERNEL_STARTED, "kernel"))
    yield kernel


@asynccontextmanager
async def serving(kernel: Any, *, app: Any = None, **client_kwargs: Any) -> AsyncIterator[Any]:
    """The real daemon for ``kernel`` on a free 127.0.0.1 port, plus an httpx client for it."""
    import httpx
    from roost.plugins.http import open_daemon

    async with open_daemon(kernel, "127.0.0.1", 0, graceful_timeout=1.0, app=app) as url:
        async with httpx.AsyncClient(base_url=url, timeout=10.0, **client_kwargs) as client:
            client.roost_url = url  # type: ignore[attr-defined]
            yield client
