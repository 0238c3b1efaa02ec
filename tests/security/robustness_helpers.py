"""A real kernel and daemon on 127.0.0.1 for the robustness tests (issue 15, items 9, 13):
scripted agents, plus a provider that raises a plain exception (a bug, so a crash) on
messages that start with "crash"."""

from __future__ import annotations

import json
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from roost.kernel import (
    Completion,
    ProviderDescriptor,
    StreamDelta,
    default_config,
    hookimpl,
    open_kernel,
)

V1 = {"A2A-Version": "1.0"}
MCP_VERSION = "2026-07-28"
MCP_META = {
    "io.modelcontextprotocol/protocolVersion": MCP_VERSION,
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "robustness-test", "version": "1"},
}


class Crashy:
    """Answers "ok: <message>"; raises RuntimeError (not a RoostError) for "crash..."."""

    name = "crashy"

    def _answer(self, request: Any) -> Completion:
        text = request.messages[-1].content
        if text.startswith("crash"):
            raise RuntimeError(f"the model blew up on {text!r}")
        return Completion(text=f"ok: {text}")

    async def complete(self, request: Any) -> Completion:
        return self._answer(request)

    async def stream(self, request: Any):
        yield StreamDelta(completion=self._answer(request))


class CrashyPlugin:
    @hookimpl
    def roost_providers(self):
        return [ProviderDescriptor("crashy", lambda model, settings: Crashy())]


def write_agent(directory: Path, name: str, *, provider: str = "scripted", rules=None) -> None:
    path = directory / name / "agent.json"
    path.parent.mkdir(parents=True)
    model: dict[str, Any] = {"provider": provider, "name": "rules"}
    if provider == "scripted":
        model["script"] = {"rules": rules or [{"match": ".", "reply": "echo: {message}"}]}
    path.write_text(
        json.dumps(
            {
                "name": name,
                "description": f"{name} (robustness test agent)",
                "version": "0.1.0",
                "model": model,
                "a2a": {"enabled": True},
            }
        )
    )


def make_config(tmp_path: Path, **kernel: Any):
    agents = tmp_path / "agents"
    if not agents.exists():
        write_agent(agents, "echo")
        write_agent(agents, "fragile", provider="crashy")
    return default_config(
        home=str(tmp_path / "home"),
        agents={"dirs": [str(agents)], "bundled": False},
        http={"port": 0, "rate_limit_per_s": 100000, "rate_limit_burst": 100000},
        a2a={"default_agent": "echo"},
        kernel=kernel,
    )


@asynccontextmanager
async def serve(config):
    from roost.plugins.http import open_daemon

    async with open_kernel(config, plugins=[CrashyPlugin()]) as kernel:
        async with open_daemon(kernel, graceful_timeout=1) as url:
            yield kernel, url


def a2a_send(
    text_part: Any,
    *,
    message_extra: dict | None = None,
    params_extra: dict | None = None,
    rpc_id: Any = 1,
) -> dict:
    """A JSON-RPC SendMessage (1.0) with one part."""
    message = {
        "role": "ROLE_USER",
        "messageId": "m-1",
        "parts": [text_part],
        **(message_extra or {}),
    }
    return {
        "jsonrpc": "2.0",
        "id": rpc_id,
        "method": "SendMessage",
        "params": {"message": message, **(params_extra or {})},
    }


def mcp_call(tool: str, arguments: Any, rpc_id: Any = 1) -> dict:
    """A stateless (2026-07-28) MCP tools/call."""
    return {
        "jsonrpc": "2.0",
        "id": rpc_id,
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments, "_meta": MCP_META},
    }


def mcp_headers(tool: str) -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MCP_VERSION,
        "Mcp-Method": "tools/call",
        "Mcp-Name": tool,
    }


def raw_json(value: Any) -> bytes:
    """JSON with non-ASCII escaped, so a lone surrogate travels as the escape "\\ud800"
    (exactly what a client that sends one puts on the wire)."""
    return json.dumps(value, ensure_ascii=True).encode()
