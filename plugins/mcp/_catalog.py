"""What an MCP server surface offers beside its calls: the entries it lists (tools,
resources, prompts, resource templates), agents' cards and manifest views, the resources
and prompts plugins add, and the shelf of artifacts that ``resources/read`` serves."""

from __future__ import annotations

import logging
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs
from roost.kernel import Output

log = logging.getLogger("roost.mcp.server")


@attrs.frozen
class ToolEntry:
    """A tool as one surface lists it: wire name, MCP ``Tool`` object, and what it runs:
    ``target`` on ``agent``'s surface (``message``, or an exposed tool's name)."""

    name: str
    mcp: Mapping[str, Any]
    agent: str
    target: str


@attrs.frozen
class ResourceEntry:
    """A readable resource: ``read()`` returns its text."""

    uri: str
    name: str
    mime_type: str
    description: str
    read: Callable[[], Any] = attrs.field(eq=False, repr=False)
    title: str | None = None

    def to_mcp(self) -> dict[str, Any]:
        out = {"uri": self.uri, "name": self.name, "mimeType": self.mime_type, "description": self.description}
        if self.title:
            out["title"] = self.title
        return out


@attrs.frozen
class PromptEntry:
    """A prompt: ``render(arguments)`` returns the ``messages`` list of ``prompts/get``."""

    name: str
    description: str
    arguments: tuple[Mapping[str, Any], ...]
    render: Callable[..., Any] = attrs.field(eq=False, repr=False)
    title: str | None = None
    input_requests: Mapping[str, Mapping[str, Any]] | None = None
    """Input the prompt needs from the client first (keyed like MRTR ``inputRequests``);
    then ``render(arguments, inputs)`` gets the client's answers by key."""

    def to_mcp(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "description": self.description}
        if self.arguments:
            out["arguments"] = [dict(a) for a in self.arguments]
        if self.title:
            out["title"] = self.title
        return out


@attrs.frozen
class TemplateEntry:
    """A resource template (RFC 6570 level 1, ``{var}`` segments): ``read(uri, values)``
    returns the text (or a contents mapping) of the concrete resource."""

    uri_template: str
    name: str
    mime_type: str
    description: str
    read: Callable[[str, Mapping[str, str]], Any] = attrs.field(eq=False, repr=False)

    def to_mcp(self) -> dict[str, Any]:
        return {"uriTemplate": self.uri_template, "name": self.name, "mimeType": self.mime_type, "description": self.description}

    def match(self, uri: str) -> dict[str, str] | None:
        import re

        pattern = "".join(
            f"(?P<{part[1:-1]}>[^/]+)" if part.startswith("{") and part.endswith("}") else re.escape(part)
            for part in re.split(r"(\{[A-Za-z_][A-Za-z0-9_]*\})", self.uri_template)
        )
        found = re.fullmatch(pattern, uri)
        return found.groupdict() if found else None


def agent_card(kernel: Any, name: str) -> dict[str, Any]:
    """A JSON description of an agent (its "card"): identity, skills and endpoints."""
    m = kernel.agents[name]
    return {
        "name": m.name,
        "description": m.description,
        "version": m.version,
        "skills": [
            {"id": s.id, "name": s.name, "description": s.description, "tags": list(s.tags), "examples": list(s.examples)}
            for s in m.a2a.skills
        ],
        "a2a": {"enabled": bool(m.a2a.enabled)},
        "mcp": {"endpoint": f"/agents/{name}/mcp", "tools": [s.name for s in kernel.surface(name).tools()]},
        **_status_of(kernel, name),
    }


def _status_of(kernel: Any, name: str) -> dict[str, Any]:
    """``{"status": ..., "error": ...}`` as ``/api/agents`` reports it (stopped: why, and when it restarts)."""
    agent_status = getattr(kernel, "agent_status", None)
    if agent_status is None:
        return {}
    status, reason = agent_status(name)
    return {"status": status, "error": reason}


def agent_manifest_view(kernel: Any, name: str) -> dict[str, Any]:
    """The public parts of an agent's manifest (no filesystem paths, no secrets)."""
    m = kernel.agents[name]
    return {
        "name": m.name,
        "description": m.description,
        "version": m.version,
        "model": {"provider": m.model.provider, "name": m.model.name},
        "capabilities": {"tools": list(m.capabilities.tools)},
        "mcp": {"expose_tools": list(m.mcp.expose_tools), "private_tools": list(m.mcp.private_tools)},
        "a2a": {"enabled": bool(m.a2a.enabled), "skills": [s.id for s in m.a2a.skills]},
        "limits": {"max_turns": m.limits.max_turns, "tool_timeout_s": m.limits.tool_timeout_s, "max_depth": m.limits.max_depth},
        "sandbox": m.sandbox,
    }


def extras(kernel: Any, hook_name: str, kind: type) -> list[Any]:
    """The ``kind`` entries plugins add through the hook ``hook_name`` (``roost_mcp_resources``,
    ``roost_mcp_resource_templates``, ``roost_mcp_prompts``); a plugin raising is logged."""
    plugins = getattr(kernel, "plugins", None)
    hook = getattr(getattr(plugins, "hook", None), hook_name, None)
    if hook is None:
        return []
    out: list[Any] = []
    for impl in hook.get_hookimpls():
        try:
            result = impl.function(**({"kernel": kernel} if "kernel" in impl.argnames else {}))
        except Exception:
            log.exception("plugin %s: %s raised", impl.plugin_name, hook_name)
            continue
        out.extend(entry for entry in result or () if isinstance(entry, kind))
    return out


# ---- artifacts ------------------------------------------------------------------------------

ARTIFACT_TTL_S = 3600.0
MAX_KEPT_ARTIFACTS = 256
MAX_KEPT_ARTIFACT_BYTES = 64 * 1024 * 1024
STATELESS_SCOPE = "stateless"


class ArtifactShelf:
    """The artifacts a kernel's MCP surfaces handed to clients, so that ``resources/read``
    of their URIs returns them. In memory, bounded (the newest ``max_items`` and
    ``max_bytes``), each kept ``ttl_s`` and readable only in the ``scope`` that received it
    (an MCP session's id, or ``STATELESS_SCOPE``)."""

    def __init__(
        self,
        *,
        ttl_s: float = ARTIFACT_TTL_S,
        max_items: int = MAX_KEPT_ARTIFACTS,
        max_bytes: int = MAX_KEPT_ARTIFACT_BYTES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl_s, self.max_items, self.max_bytes = ttl_s, max_items, max_bytes
        self._clock = clock
        # id → (expires, scope, output, size), oldest first (one TTL: also soonest to expire)
        self._items: OrderedDict[str, tuple[float, str, Output, int]] = OrderedDict()
        self._bytes = 0

    def keep(self, scope: str, outputs: Iterable[Output]) -> None:
        now = self._clock()
        for output in outputs:
            size = output.size
            old = self._items.pop(output.id, None)
            if old is not None:
                self._bytes -= old[3]
            if size <= self.max_bytes:
                self._items[output.id] = (now + self.ttl_s, scope, output, size)
                self._bytes += size
        self._evict(now)

    def get(self, scope: str, artifact_id: str) -> Output | None:
        """The artifact ``artifact_id`` if ``scope`` received it and it is still kept."""
        self._evict(self._clock())
        item = self._items.get(artifact_id)
        return item[2] if item is not None and item[1] == scope else None

    def __len__(self) -> int:
        return len(self._items)

    def _evict(self, now: float) -> None:
        while self._items:
            ident, (expires, _, _, size) = next(iter(self._items.items()))
            if expires > now and len(self._items) <= self.max_items and self._bytes <= self.max_bytes:
                return
            del self._items[ident]
            self._bytes -= size


_shelves: weakref.WeakKeyDictionary[Any, ArtifactShelf] = weakref.WeakKeyDictionary()


def artifact_shelf(kernel: Any) -> ArtifactShelf:
    """The kernel's one ``ArtifactShelf`` (shared by its MCP surfaces and transports)."""
    shelf = _shelves.get(kernel)
    if shelf is None:
        shelf = _shelves[kernel] = ArtifactShelf()
    return shelf
