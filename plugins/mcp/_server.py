"""roost as an MCP server: one protocol core for every transport (stdio, HTTP, memory).

``McpServer`` turns MCP messages into kernel calls. It is transport-free: a transport
decodes a message, calls ``await server.handle(session, message, notify=...)`` inside a
cancel scope that ``notifications/cancelled`` can cancel (HTTP: a task per request; stream
transports: reused request tasks, ``_RequestWorkers``) and sends back what it returns.
``notify`` sends request-related notifications (progress, log messages) to the client.

Surfaces:

* the **host** surface (``agent=None``: ``/mcp`` and ``roost mcp``): every agent as
  ``agent_{name}`` (lowercase, ``-`` → ``_``: the name other agents call it by in-host)
  plus every agent's exposed tools. A tool exposed by exactly one
  agent keeps its name; a tool exposed by several agents is listed once per agent as
  ``{agent}_{tool}`` (characters MCP does not allow become ``_``), so names are stable,
  predictable and never ambiguous.
* the **agent** surface (``agent="coder"``: ``/agents/coder/mcp``): ``message`` plus that
  agent's exposed tools, exactly as the in-memory kernel path offers them.

Private and unexposed tools are never listed and never callable, under any name.

Artifacts an agent hands over reach the client as content blocks whose URIs
(``roost://artifacts/<id>[/<file>]``) ``resources/read`` resolves: the kernel's
``ArtifactShelf`` keeps them in memory, bounded, for ``ARTIFACT_TTL_S``, readable only by the
session that received them (stateless requests: by the same principal's stateless calls).

A session may name its caller's principal (``ServerSession.principal``, set by the HTTP
transport from the caller's API key): the agent conversations its ``message`` calls start
are that principal's (``kernel.send(principal=...)``).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import secrets
import time
import weakref
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, NoReturn

import attrs
import trio
from roost.kernel import (
    AgentNotFound,
    AgentUnavailable,
    Event,
    EventKind,
    InvalidText,
    InvalidTraceContext,
    Output,
    RecursionLimitExceeded,
    RoostError,
    ToolNotFound,
    TraceContext,
    agent_tool_name,
    check_text,
    is_mapping,
)
from roost.kernel import jsonrpc as rpc

from . import _protocol as p

log = logging.getLogger("roost.mcp.server")

PROMPTS_CHANGED_EVENT = "MCP:PROMPTS_CHANGED"
"""Event kind a plugin publishes when the prompts it offers changed."""
RESOURCES_CHANGED_EVENT = "MCP:RESOURCES_CHANGED"
"""Event kind a plugin publishes when the resources it offers changed."""
_CHANGE_KINDS = (EventKind.KERNEL_TOOLS_CHANGED, PROMPTS_CHANGED_EVENT, RESOURCES_CHANGED_EVENT)
PROGRESS_EVENT = "EXEC:PROGRESS"
"""Event kind a tool publishes to report progress (payload: progress, total, message)."""
LOG_EVENT = "EXEC:LOG"
"""Event kind a tool publishes to log to the MCP client (payload: level, data, logger)."""
SERVER_NAME = "roost"
DEFAULT_PAGE_SIZE = 100
MAX_IN_FLIGHT = 64

Notify = Callable[[dict[str, Any]], Awaitable[None]]


def report_progress(ctx: Any, progress: float, total: float | None = None, message: str | None = None) -> None:
    """From inside a tool: report progress to the MCP client that called it (if it asked)."""
    kernel = getattr(ctx, "kernel", None)
    if kernel is not None and ctx.trace is not None:
        payload = {"progress": progress, "total": total, "message": message}
        kernel.publish(Event(PROGRESS_EVENT, ctx.agent, payload=payload, trace=ctx.trace))


def report_log(ctx: Any, level: str, data: Any, logger: str | None = None) -> None:
    """From inside a tool: send a log message to the MCP client (if it set a log level)."""
    kernel = getattr(ctx, "kernel", None)
    if kernel is not None and ctx.trace is not None:
        payload = {"level": level, "data": data, "logger": logger}
        kernel.publish(Event(LOG_EVENT, ctx.agent, payload=payload, trace=ctx.trace))


def server_version() -> str:
    try:
        from importlib import metadata

        return metadata.version("roost")
    except Exception:  # pragma: no cover - bare checkout
        return "0+unknown"


# ---- catalog ------------------------------------------------------------------------------


@attrs.frozen
class ToolEntry:
    """A tool as one surface lists it: wire name, MCP ``Tool`` object, and what it runs."""

    name: str
    mcp: Mapping[str, Any]
    agent: str
    target: str | None  # registry tool name; None for the agent's message tool


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


def _message_tool(agent: str, name: str, description: str) -> dict[str, Any]:
    return {
        "name": name,
        "title": f"Ask {agent}",
        "description": description or f"Send a message to the {agent} agent and get its answer.",
        "inputSchema": {
            "type": "object",
            "properties": {"message": {"type": "string", "description": f"What to ask {agent}"}},
            "required": ["message"],
            "additionalProperties": False,
        },
    }


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
        "mcp": {"endpoint": f"/agents/{name}/mcp", "tools": ["message"] + [s.name for s in kernel.exposed_tools(name)]},
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


def extra_resources(kernel: Any) -> list[ResourceEntry]:
    """Resources plugins add through the ``roost_mcp_resources`` hook."""
    return [r for r in _extras(kernel, "roost_mcp_resources") if isinstance(r, ResourceEntry)]


def extra_templates(kernel: Any) -> list[TemplateEntry]:
    """Resource templates plugins add through the ``roost_mcp_resource_templates`` hook."""
    return [r for r in _extras(kernel, "roost_mcp_resource_templates") if isinstance(r, TemplateEntry)]


def extra_prompts(kernel: Any) -> list[PromptEntry]:
    """Prompts plugins add through the ``roost_mcp_prompts`` hook."""
    return [r for r in _extras(kernel, "roost_mcp_prompts") if isinstance(r, PromptEntry)]


def _extras(kernel: Any, hook_name: str) -> list[Any]:
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
        out.extend(result or ())
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


def _artifact_scope(call: _Call) -> str:
    if not call.stateless:
        return call.session.id
    principal = call.session.principal
    return STATELESS_SCOPE if principal is None else f"{STATELESS_SCOPE}:{principal}"


# ---- sessions -------------------------------------------------------------------------------


@attrs.define(eq=False)
class ServerSession:
    """One client's state: the negotiated era and version, its log level, requests in flight.

    Stateless (2026-07-28) requests never read or change it, except to be cancellable.
    """

    id: str = attrs.field(factory=lambda: secrets.token_urlsafe(24))
    protocol_version: str | None = None
    initialized: bool = False
    client_info: Mapping[str, Any] | None = None
    client_capabilities: Mapping[str, Any] | None = None
    log_level: str | None = None
    in_flight: dict[Any, trio.CancelScope] = attrs.field(factory=dict)
    closed: bool = False
    subscriptions: set[str] = attrs.field(factory=set)
    outgoing: dict[Any, trio.MemorySendChannel[Any]] = attrs.field(factory=dict)
    next_outgoing_id: int = 0
    event_router: Any = None  # a stream connection's _EventRouter (see serve_connection)
    # Requests read but not yet started (stream transports), and those of them cancelled
    # before they started: a notifications/cancelled read in the same burst as its request
    # must still stop it.
    starting: set[Any] = attrs.field(factory=set)
    cancelled_early: set[Any] = attrs.field(factory=set)
    # Who the client is (the principal of its API key); None: the kernel's host principal.
    principal: str | None = None

    @property
    def handshake_done(self) -> bool:
        return self.protocol_version is not None

    def cancel(self, request_id: Any) -> bool:
        """Cancel a request in flight (or read and about to start); False if there is none
        with that id."""
        scope = self.in_flight.get(request_id)
        if scope is None:
            if request_id in self.starting:
                self.cancelled_early.add(request_id)
                return True
            return False
        scope.cancel()
        return True

    def cancel_all(self) -> None:
        for scope in list(self.in_flight.values()):
            scope.cancel()


class _Call:
    """What a method handler knows about the request it serves. (A plain class: one is
    built per request, in a third of the time of an attrs one.)"""

    __slots__ = ("session", "request", "meta", "stateless", "notify")

    def __init__(
        self, session: ServerSession, request: rpc.Request, meta: p.RequestMeta, stateless: bool, notify: Notify | None
    ) -> None:
        self.session = session
        self.request = request
        self.meta = meta
        self.stateless = stateless
        self.notify = notify

    @property
    def params(self) -> Mapping[str, Any]:
        return self.request.params if is_mapping(self.request.params) else {}

    @property
    def log_level(self) -> str | None:
        # 2026-07-28: only when the request opts in. Handshake era: what the client set
        # with logging/setLevel, else "info" (the server's choice until it says otherwise).
        if self.stateless:
            return self.meta.log_level
        return self.session.log_level or "info"


class McpServer:
    """The MCP server core over a kernel, for the host surface or one agent's surface."""

    def __init__(
        self,
        kernel: Any,
        *,
        agent: str | None = None,
        page_size: int = DEFAULT_PAGE_SIZE,
        call_timeout_s: float | None = None,
    ) -> None:
        # kernel may be None until it has booted (``roost mcp`` answers initialize first);
        # only initialize and server/discover may be served before it is set.
        if agent is not None and (kernel is None or agent not in kernel.agents):
            raise AgentNotFound(agent, list(kernel.agents) if kernel is not None else [])
        self.kernel = kernel
        self.agent = agent
        self.page_size = page_size
        self.call_timeout_s = call_timeout_s
        self.server_info = p.implementation(SERVER_NAME if agent is None else f"roost-{agent}", server_version())
        self._state_key = secrets.token_bytes(32)
        self._index: dict[str, ToolEntry] = {}
        self._index_key: tuple[Any, ...] | None = None
        self._methods: dict[str, Callable[[_Call], Awaitable[Any]]] = {
            p.PING: self._ping,
            p.DISCOVER: self._discover,
            p.TOOLS_LIST: self._tools_list,
            p.TOOLS_CALL: self._tools_call,
            p.RESOURCES_LIST: self._resources_list,
            p.RESOURCES_READ: self._resources_read,
            p.RESOURCES_TEMPLATES_LIST: self._templates_list,
            p.PROMPTS_LIST: self._prompts_list,
            p.PROMPTS_GET: self._prompts_get,
            p.LOGGING_SET_LEVEL: self._set_level,
            p.COMPLETION_COMPLETE: self._complete,
            p.SUBSCRIPTIONS_LISTEN: self._listen,
            p.RESOURCES_SUBSCRIBE: self._subscribe,
            p.RESOURCES_UNSUBSCRIBE: self._unsubscribe,
        }

    # ---- what this surface offers ------------------------------------------------------------
    @property
    def agents(self) -> list[str]:
        """The agents this surface serves (sorted)."""
        if self.agent is not None:
            return [self.agent]
        return sorted(a for a in self.kernel.agents if a not in getattr(self.kernel, "agent_errors", {}))

    def capabilities(self) -> dict[str, Any]:
        return {
            "tools": {"listChanged": True},
            "resources": {"listChanged": True, "subscribe": True},
            "prompts": {"listChanged": True},
            "logging": {},
            "completions": {},
        }

    def instructions(self) -> str:
        if self.agent is not None:
            m = self.kernel.agents[self.agent]
            return f"The roost agent {self.agent}: {m.description} Ask it with the message tool."
        return (
            "roost hosts AI agents. Ask one with its agent_{name} tool (the agent's name lowercased, "
            "'-' → '_'); the other tools are those the agents expose."
        )

    def tools(self) -> list[ToolEntry]:
        """Every tool this surface lists, sorted by name (the order ``tools/list`` uses)."""
        kernel = self.kernel
        entries: list[ToolEntry] = []
        if self.agent is not None:
            m = kernel.agents[self.agent]
            entries.append(ToolEntry("message", _message_tool(self.agent, "message", m.description), self.agent, None))
            for spec in kernel.exposed_tools(self.agent):
                if spec.name != "message":
                    entries.append(ToolEntry(spec.name, spec.to_mcp(), self.agent, spec.name))
            return sorted(entries, key=lambda e: e.name)
        exposers: dict[str, list[tuple[str, Any]]] = {}
        for agent in self.agents:
            m = kernel.agents[agent]
            name = agent_tool_name(agent)
            entries.append(ToolEntry(name, _message_tool(agent, name, m.description), agent, None))
            for spec in kernel.exposed_tools(agent):
                exposers.setdefault(spec.name, []).append((agent, spec))
        taken = {e.name for e in entries}
        for tool_name in sorted(exposers):
            owners = exposers[tool_name]
            for agent, spec in owners:
                wire = tool_name if len(owners) == 1 else p.safe_tool_name(f"{agent}_{tool_name}")
                base, n = wire, 2
                while wire in taken:  # e.g. agent "a_b" + tool "c" against agent "a" + tool "b_c"
                    suffix = f"_{n}"
                    wire, n = base[: 128 - len(suffix)] + suffix, n + 1
                taken.add(wire)
                entries.append(ToolEntry(wire, {**spec.to_mcp(), "name": wire}, agent, spec.name))
        return sorted(entries, key=lambda e: e.name)

    def _tool_index(self) -> dict[str, ToolEntry]:
        """``tools()`` by wire name, rebuilt only when the registry or the agents change."""
        kernel = self.kernel
        registry = getattr(kernel, "registry", None)
        version = getattr(registry, "version", None)
        if version is None:
            return {e.name: e for e in self.tools()}
        key = (id(registry), version, id(kernel.agents), len(kernel.agents), len(getattr(kernel, "agent_errors", ())))
        if self._index_key != key:
            self._index = {e.name: e for e in self.tools()}
            self._index_key = key
        return self._index

    def resources(self) -> list[ResourceEntry]:
        kernel = self.kernel
        out: list[ResourceEntry] = []
        for agent in self.agents:
            out.append(
                ResourceEntry(
                    f"roost://agents/{agent}/card", f"{agent}-card", "application/json",
                    f"The card of the {agent} agent: who it is, its skills and endpoints",
                    lambda agent=agent: json.dumps(agent_card(kernel, agent), ensure_ascii=False, indent=2),
                    title=f"{agent} card",
                )
            )
            out.append(
                ResourceEntry(
                    f"roost://agents/{agent}/manifest", f"{agent}-manifest", "application/json",
                    f"The manifest (agent.json, public parts) of the {agent} agent",
                    lambda agent=agent: json.dumps(agent_manifest_view(kernel, agent), ensure_ascii=False, indent=2),
                    title=f"{agent} manifest",
                )
            )
        if self.agent is None:
            out.extend(extra_resources(kernel))
        return sorted(out, key=lambda r: r.uri)

    def prompts(self) -> list[PromptEntry]:
        out: list[PromptEntry] = []
        for agent in self.agents:
            m = self.kernel.agents[agent]
            if not m.system_prompt:
                continue
            out.append(
                PromptEntry(
                    p.safe_tool_name(agent), f"The system prompt of the {agent} agent", (),
                    lambda _args, text=m.system_prompt: [{"role": "user", "content": p.text_content(text)}],
                    title=f"{agent} system prompt",
                )
            )
        if self.agent is None:
            out.extend(extra_prompts(self.kernel))
        return sorted(out, key=lambda e: e.name)

    # ---- entry point --------------------------------------------------------------------------
    def new_session(self) -> ServerSession:
        return ServerSession()

    async def handle(
        self,
        session: ServerSession,
        message: Any,
        *,
        notify: Notify | None = None,
        scope: trio.CancelScope | None = None,
    ) -> dict[str, Any] | None:
        """Serve one decoded JSON message; the response to send, or None (notifications,
        stray responses, cancelled requests). Never raises for bad input.

        A request runs in a cancel scope that ``notifications/cancelled`` cancels: its own
        (a cancelled request then returns None), or ``scope``, the caller's, when given
        (the caller then sees ``trio.Cancelled``, and the scope is spent)."""
        if session.starting and isinstance(message, dict):
            raw_id = message.get("id")
            if isinstance(raw_id, (str, int)) and raw_id in session.starting:
                session.starting.discard(raw_id)
                if raw_id in session.cancelled_early:
                    session.cancelled_early.discard(raw_id)
                    return None  # cancelled before it started: the spec asks for no response
        try:
            if isinstance(message, list):
                parsed = rpc.parse(message, allow_batch=False, max_bytes=None)
            else:
                parsed = rpc.parse_message(message)  # already decoded: a str is not a message
        except rpc.JsonRpcError as exc:
            return exc.to_response().to_dict()
        if isinstance(parsed, rpc.Notification):
            self._notification(session, parsed)
            return None
        if isinstance(parsed, (rpc.Response, rpc.ErrorResponse)):
            waiter = session.outgoing.pop(parsed.id, None)
            if waiter is None:
                log.debug("ignoring a response (id %r) that answers no request of ours", parsed.id)
            else:
                try:
                    waiter.send_nowait(parsed)
                except (trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
                    pass
            return None
        assert isinstance(parsed, rpc.Request)
        if parsed.id is None:
            return rpc.error_response(None, rpc.INVALID_REQUEST, "id: must not be null in MCP; use a string or an integer").to_dict()
        if parsed.params is not None and not is_mapping(parsed.params):
            return rpc.error_response(parsed.id, rpc.INVALID_PARAMS, "params: expected an object (MCP uses named parameters)").to_dict()
        if parsed.id in session.in_flight:
            return rpc.error_response(parsed.id, rpc.INVALID_REQUEST, f"id {parsed.id!r} is already in use by a request in flight; use a new id").to_dict()
        if scope is None:
            with trio.CancelScope() as scope:
                return await self._respond(session, parsed, notify, scope)
            return None  # cancelled: the spec asks for no response
        return await self._respond(session, parsed, notify, scope)

    async def _respond(
        self, session: ServerSession, request: rpc.Request, notify: Notify | None, scope: trio.CancelScope
    ) -> dict[str, Any]:
        """Run ``request`` cancellable through ``scope``; its response (errors included)."""
        session.in_flight[request.id] = scope
        try:
            result = await self._request(session, request, notify)
        except rpc.JsonRpcError as exc:
            return rpc.ErrorResponse(request.id, exc.to_error()).to_dict()
        except RecursionLimitExceeded as exc:
            return rpc.error_response(request.id, p.RECURSION_LIMIT, str(exc), exc.to_dict()).to_dict()
        except RoostError as exc:
            # A StoreError (by its code: the store module loads only when used): storage
            # failed, e.g. the disk is full, and nothing was kept: -32603 saying so.
            code = rpc.INTERNAL_ERROR if exc.code == "store_error" else rpc.SERVER_ERROR
            return rpc.error_response(request.id, code, str(exc), exc.to_dict()).to_dict()
        except Exception as exc:
            ref = secrets.token_hex(6)
            log.error("MCP method %r failed (ref %s)", request.method, ref, exc_info=exc)
            return rpc.error_response(
                request.id, rpc.INTERNAL_ERROR, f"internal error in {request.method!r}; the server logged it as {ref}"
            ).to_dict()
        finally:
            session.in_flight.pop(request.id, None)
        return {"jsonrpc": rpc.VERSION, "id": request.id, "result": result}  # rpc.Response(...).to_dict()

    def _notification(self, session: ServerSession, note: rpc.Notification) -> None:
        params = note.params if isinstance(note.params, Mapping) else {}
        if note.method == p.INITIALIZED:
            session.initialized = True
        elif note.method == p.NOTIFY_CANCELLED:
            request_id = params.get("requestId")
            if isinstance(request_id, (str, int)) and not isinstance(request_id, bool):
                session.cancel(request_id)
        # progress, roots/list_changed and unknown notifications need nothing from us.

    async def _request(self, session: ServerSession, request: rpc.Request, notify: Notify | None) -> Any:
        params = request.params if is_mapping(request.params) else {}
        stateless = p.request_era(params) == p.ERA_STATELESS
        if request.method == p.INITIALIZE and not stateless:
            return self._initialize(session, params)
        meta = p.read_request_meta(params)
        handler = self._methods.get(request.method)
        if stateless:
            p.check_stateless_meta(meta)
            if request.method in p.HANDSHAKE_ONLY_METHODS:
                raise rpc.JsonRpcError(
                    rpc.METHOD_NOT_FOUND,
                    f"method {request.method!r} does not exist at {meta.protocol_version}",
                    {"method": request.method},
                )
        else:
            if request.method == p.SUBSCRIPTIONS_LISTEN:
                handler = None
            if request.method not in (p.PING, p.DISCOVER) and not session.handshake_done:
                raise rpc.JsonRpcError(
                    rpc.INVALID_PARAMS,
                    f"params._meta[{p.META_PROTOCOL_VERSION!r}]: required (protocol {p.LATEST_VERSION}); "
                    "or open a session with initialize first",
                )
        if handler is None:
            raise rpc.JsonRpcError(
                rpc.METHOD_NOT_FOUND, f"method {request.method!r} not found", {"method": request.method}
            )
        result = await handler(_Call(session, request, meta, stateless, notify))
        if stateless:
            result = p.finish_stateless_result(request.method, result, self.server_info)
        return result

    # ---- lifecycle ----------------------------------------------------------------------------
    def _initialize(self, session: ServerSession, params: Mapping[str, Any]) -> dict[str, Any]:
        if session.handshake_done:
            raise rpc.JsonRpcError(rpc.INVALID_REQUEST, "initialize: this session is already initialized; start a new session")
        requested = params.get("protocolVersion")
        if not isinstance(requested, str):
            raise rpc.JsonRpcError(
                rpc.INVALID_PARAMS,
                f"params.protocolVersion: required, a version string such as {p.LATEST_HANDSHAKE_VERSION!r}",
            )
        caps = params.get("capabilities", {})
        if not isinstance(caps, Mapping):
            raise rpc.JsonRpcError(rpc.INVALID_PARAMS, "params.capabilities: expected an object")
        info = params.get("clientInfo")
        session.protocol_version = p.negotiate_version(requested)
        session.client_capabilities = dict(caps)
        session.client_info = dict(info) if isinstance(info, Mapping) else None
        return p.initialize_result(
            session.protocol_version, self.capabilities(), self.server_info, instructions=self.instructions()
        )

    async def _ping(self, call: _Call) -> dict[str, Any]:
        return {}

    async def _discover(self, call: _Call) -> dict[str, Any]:
        return p.discover_result(self.capabilities(), self.server_info, instructions=self.instructions())

    async def _set_level(self, call: _Call) -> dict[str, Any]:
        level = rpc.param(call.params, "level", str)
        if level not in p.LOG_LEVELS:
            raise rpc.JsonRpcError(rpc.INVALID_PARAMS, f"params.level: expected one of {', '.join(p.LOG_LEVELS)}, got {level!r}")
        call.session.log_level = level
        return {}

    # ---- lists ----------------------------------------------------------------------------------
    def _page(self, call: _Call, items: list[dict[str, Any]], key: str) -> tuple[list[Any], str | None]:
        cursor = call.params.get("cursor")
        return p.paginate(items, cursor, key=key, page_size=self.page_size)

    async def _tools_list(self, call: _Call) -> dict[str, Any]:
        page, cursor = self._page(call, [dict(e.mcp) for e in self.tools()], "name")
        out: dict[str, Any] = {"tools": page}
        if cursor:
            out["nextCursor"] = cursor
        return out

    async def _resources_list(self, call: _Call) -> dict[str, Any]:
        page, cursor = self._page(call, [r.to_mcp() for r in self.resources()], "uri")
        out: dict[str, Any] = {"resources": page}
        if cursor:
            out["nextCursor"] = cursor
        return out

    def templates(self) -> list[TemplateEntry]:
        return sorted(extra_templates(self.kernel), key=lambda t: t.uri_template) if self.agent is None else []

    async def _templates_list(self, call: _Call) -> dict[str, Any]:
        page, cursor = self._page(call, [t.to_mcp() for t in self.templates()], "uriTemplate")
        out: dict[str, Any] = {"resourceTemplates": page}
        if cursor:
            out["nextCursor"] = cursor
        return out

    async def _subscribe(self, call: _Call) -> dict[str, Any]:
        call.session.subscriptions.add(rpc.param(call.params, "uri", str))
        return {}

    async def _unsubscribe(self, call: _Call) -> dict[str, Any]:
        call.session.subscriptions.discard(rpc.param(call.params, "uri", str))
        return {}

    async def _resources_read(self, call: _Call) -> dict[str, Any]:
        uri = rpc.param(call.params, "uri", str)
        for entry in self.resources():
            if entry.uri == uri:
                value = entry.read()
                if hasattr(value, "__await__"):
                    value = await value
                if isinstance(value, Mapping):  # a full contents item (e.g. a blob)
                    return {"contents": [{"uri": uri, "mimeType": entry.mime_type, **value}]}
                return {"contents": [{"uri": uri, "mimeType": entry.mime_type, "text": str(value)}]}
        for template in self.templates():
            values = template.match(uri)
            if values is not None:
                value = template.read(uri, values)
                if hasattr(value, "__await__"):
                    value = await value
                if isinstance(value, Mapping):
                    return {"contents": [{"uri": uri, "mimeType": template.mime_type, **value}]}
                return {"contents": [{"uri": uri, "mimeType": template.mime_type, "text": str(value)}]}
        code = rpc.INVALID_PARAMS if call.stateless else p.RESOURCE_NOT_FOUND_LEGACY
        artifact_id = Output.id_in_uri(uri)
        if artifact_id is not None:
            output = artifact_shelf(self.kernel).get(_artifact_scope(call), artifact_id)
            contents = output.resource_contents(uri) if output is not None else []
            if contents:
                return {"contents": contents}
            raise rpc.JsonRpcError(
                code,
                f"Resource not found: {uri}; an artifact is kept for {ARTIFACT_TTL_S / 60:g} minutes after the "
                f"answer that carried it (the newest {MAX_KEPT_ARTIFACTS}), for the MCP session that received it",
                {"uri": uri},
            )
        raise rpc.JsonRpcError(code, f"Resource not found: {uri}; see resources/list", {"uri": uri})

    async def _prompts_list(self, call: _Call) -> dict[str, Any]:
        page, cursor = self._page(call, [e.to_mcp() for e in self.prompts()], "name")
        out: dict[str, Any] = {"prompts": page}
        if cursor:
            out["nextCursor"] = cursor
        return out

    async def _prompts_get(self, call: _Call) -> dict[str, Any]:
        name = rpc.param(call.params, "name", str)
        arguments = rpc.param(call.params, "arguments", dict, default={}) or {}
        for key, value in arguments.items():
            if not isinstance(value, str):
                raise rpc.JsonRpcError(rpc.INVALID_PARAMS, f"params.arguments.{key}: expected a string, got {rpc.json_type(value)}")
        for entry in self.prompts():
            if entry.name == name:
                for arg in entry.arguments:
                    if arg.get("required") and arg.get("name") not in arguments:
                        raise rpc.JsonRpcError(rpc.INVALID_PARAMS, f"params.arguments.{arg.get('name')}: required by prompt {name!r}")
                if not entry.input_requests:
                    messages = entry.render(arguments)
                    return {"description": entry.description, "messages": list(messages)}
                if call.stateless:
                    channel = _client_channel("", call)
                    self._read_round_trip(call, channel)
                    if not all(k in channel.responses_in for k in entry.input_requests):
                        return p.input_required_result({k: dict(v) for k, v in entry.input_requests.items()})
                    inputs = {k: channel.responses_in[k] for k in entry.input_requests}
                else:
                    inputs = {}
                    for key, item in entry.input_requests.items():
                        inputs[key] = await _send_client_request(call, str(item.get("method")), item.get("params") or {})
                messages = entry.render(arguments, inputs)
                return {"description": entry.description, "messages": list(messages)}
        raise rpc.JsonRpcError(rpc.INVALID_PARAMS, f"params.name: unknown prompt {name!r}; see prompts/list")

    async def _complete(self, call: _Call) -> dict[str, Any]:
        rpc.param(call.params, "ref", dict)
        rpc.param(call.params, "argument", dict)
        return {"completion": {"values": [], "total": 0, "hasMore": False}}

    # ---- tools/call -------------------------------------------------------------------------
    async def _tools_call(self, call: _Call) -> dict[str, Any]:
        params = call.params
        try:  # text the agents' store could not keep (a lone surrogate): refused up front
            check_text(params, "params")
        except InvalidText as exc:
            raise rpc.JsonRpcError(rpc.INVALID_PARAMS, str(exc), {"field": exc.field}) from None
        name = rpc.param(params, "name", str)
        arguments = rpc.param(params, "arguments", dict, default={}) or {}
        index = self._tool_index()
        entry = index.get(name)
        if entry is None:
            self._unknown_tool(name, index)
        try:  # an HTTP transport has put its headers' context here already (the deeper one)
            caller = TraceContext.from_meta(call.meta.raw, field="params._meta") if call.meta.raw else None
        except InvalidTraceContext as exc:
            raise rpc.JsonRpcError(rpc.INVALID_PARAMS, str(exc), {"field": exc.field}) from None
        origin = caller if caller is not None else _external_root()
        watcher = _RunWatcher(self.kernel, call, origin.trace_id, heartbeat=entry.target is None)
        with _client_channel(origin.trace_id, call) as channel:
            if call.stateless:
                self._read_round_trip(call, channel)
            try:
                result = await self._run_call(call, entry, name, arguments, origin, watcher)
            except RecursionLimitExceeded as exc:
                # Refused by the depth breaker: a tool execution error the calling model reads.
                return exc.to_mcp_result()
        if channel.input_required is not None:
            requests, state = channel.input_required
            return p.input_required_result(requests, request_state=self._seal_state(state) if state is not None else None)
        if channel.missing:
            needed = sorted(channel.missing)
            raise rpc.JsonRpcError(
                p.MISSING_REQUIRED_CLIENT_CAPABILITY,
                f"this tool needs the client capabilities {', '.join(needed)}; declare them "
                + ("in _meta" if call.stateless else "in initialize"),
                {"requiredCapabilities": {c: {} for c in needed}},
            )
        return result

    async def _run_call(self, call: _Call, entry: ToolEntry, name: str, arguments: Mapping[str, Any], origin: TraceContext, watcher: Any) -> dict[str, Any]:
        if entry.target is None:
            return await watcher.run(lambda: self._ask_agent(call, entry.agent, arguments, origin))
        limit = self.kernel.max_depth_for(entry.agent)
        try:
            trace = origin.child(entry.agent, max_depth=limit)
        except RecursionLimitExceeded as exc:
            self.kernel.breaker_tripped(exc, caller=origin.path[-1] if origin.path else "mcp", target=entry.agent)
            raise
        try:
            result = await watcher.run(lambda: self.kernel.call_exposed(entry.agent, entry.target, arguments, trace=trace))
        except ToolNotFound:
            self._unknown_tool(name, ())
        return result.to_mcp()

    def _unknown_tool(self, name: str, index: Mapping[str, Any]) -> NoReturn:
        """Raise the error for a tool this surface does not have: an agent that is
        configured but cannot answer says why; a misspelt name gets the right one."""
        if self.agent is None:
            for agent, reason in getattr(self.kernel, "agent_errors", {}).items():
                if agent_tool_name(agent) == name:
                    raise AgentUnavailable(agent, reason)
        hint = ToolNotFound(name, index).hint
        raise rpc.JsonRpcError(rpc.INVALID_PARAMS, f"unknown tool: {name}{hint}; see tools/list", {"tool": name})

    async def _ask_agent(
        self, call: _Call, agent: str, arguments: Mapping[str, Any], origin: TraceContext
    ) -> dict[str, Any]:
        session_id = None
        message = arguments.get("message")
        if call.stateless and call.params.get("requestState") is not None:
            session_id = self._open_state(call.params.get("requestState"))
            message = _answer_from(call.params.get("inputResponses"))
            if message is None:
                return p.tool_error_result(
                    "inputResponses.answer: the agent's question was not answered (declined, cancelled or "
                    'missing); send {"action": "accept", "content": {"answer": "..."}}'
                )
            arguments = {"message": message}
        if not isinstance(message, str) or not message:
            return p.tool_error_result("arguments.message: required, the text to send to the agent (a non-empty string)")
        extra = set(arguments) - {"message"}
        if extra:
            return p.tool_error_result(f"arguments: unexpected {', '.join(sorted(extra))}; this tool takes only 'message'")
        reply = await self.kernel.send(
            agent, message, session_id=session_id, trace=origin, timeout=self.call_timeout_s,
            principal=call.session.principal,
        )
        if reply.outputs:  # so that resources/read of their URIs returns them
            artifact_shelf(self.kernel).keep(_artifact_scope(call), reply.outputs)
        if call.stateless and reply.stop_reason == "input_required":
            return p.input_required_result(
                {
                    "answer": {
                        "method": p.ELICITATION_CREATE,
                        "params": {
                            "mode": "form",
                            "message": reply.text,
                            "requestedSchema": {
                                "type": "object",
                                "properties": {"answer": {"type": "string", "description": "Your answer"}},
                                "required": ["answer"],
                            },
                        },
                    }
                },
                request_state=self._seal_state(reply.session_id),
            )
        return reply.to_mcp(session_id=reply.session_id)

    def _read_round_trip(self, call: _Call, channel: _client_channel) -> None:
        """Check a retry's ``requestState`` (signed by us) and ``inputResponses``."""
        state = call.params.get("requestState")
        if state is not None:
            channel.state_in = self._open_state(state)
        responses = call.params.get("inputResponses")
        if responses is None:
            return
        if not isinstance(responses, Mapping):
            raise rpc.JsonRpcError(rpc.INVALID_PARAMS, f"params.inputResponses: expected an object keyed like inputRequests, got {rpc.json_type(responses)}")
        for key, value in responses.items():
            if not isinstance(value, Mapping):
                raise rpc.JsonRpcError(rpc.INVALID_PARAMS, f"params.inputResponses.{key}: expected the result object of that input request, got {rpc.json_type(value)}")
        channel.responses_in = dict(responses)

    def _seal_state(self, session_id: str) -> str:
        tag = hmac.new(self._state_key, session_id.encode("utf-8"), hashlib.sha256).hexdigest()[:32]
        return f"{session_id}.{tag}"

    def _open_state(self, state: Any) -> str:
        if isinstance(state, str) and "." in state:
            session_id, _, tag = state.rpartition(".")
            expected = hmac.new(self._state_key, session_id.encode("utf-8"), hashlib.sha256).hexdigest()[:32]
            if hmac.compare_digest(tag.encode("utf-8", "replace"), expected.encode("ascii")):
                return session_id
        raise rpc.JsonRpcError(rpc.INVALID_PARAMS, "params.requestState: not a state this server issued; retry the original request without it")

    # ---- subscriptions/listen (2026-07-28) -------------------------------------------------------
    async def _listen(self, call: _Call) -> dict[str, Any]:
        if call.notify is None:
            raise rpc.JsonRpcError(rpc.METHOD_NOT_FOUND, "subscriptions/listen needs a streaming transport")
        wanted = rpc.param(call.params, "notifications", dict)
        honoured: dict[str, Any] = {}
        for key in ("toolsListChanged", "resourcesListChanged", "promptsListChanged"):
            if wanted.get(key) is True:
                honoured[key] = True
        subscription = str(call.request.id)
        tag = {p.META_SUBSCRIPTION_ID: subscription}
        async with self.kernel.tap.subscribe(buffer=64, kinds=_CHANGE_KINDS) as events:
            await call.notify({"jsonrpc": "2.0", "method": p.NOTIFY_SUBSCRIPTIONS_ACK, "params": {"notifications": honoured, p.META: tag}})
            async for event in events:
                for method in change_notifications(event):
                    key = {p.NOTIFY_TOOLS_CHANGED: "toolsListChanged", p.NOTIFY_RESOURCES_CHANGED: "resourcesListChanged", p.NOTIFY_PROMPTS_CHANGED: "promptsListChanged"}[method]
                    if honoured.get(key):
                        await call.notify({"jsonrpc": "2.0", "method": method, "params": {p.META: tag}})
        return {}

    async def watch_changes(self, session: ServerSession, send: Notify) -> None:
        """Handshake era: send ``list_changed`` notifications to ``session`` while it lives."""
        async with self.kernel.tap.subscribe(buffer=64, kinds=_CHANGE_KINDS) as events:
            async for event in events:
                if not session.handshake_done or session.closed:
                    continue
                for method in change_notifications(event):
                    await send({"jsonrpc": "2.0", "method": method})


_channels: dict[str, _client_channel] = {}


class _client_channel:
    """While a tools/call runs, let tools on its trace reach its client (requests,
    capability checks)."""

    def __init__(self, trace_id: str, call: _Call) -> None:
        self.trace_id, self.call = trace_id, call
        self.missing: set[str] = set()
        self.responses_in: Mapping[str, Any] = {}
        self.state_in: str | None = None
        self.input_required: tuple[dict[str, Any], str | None] | None = None

    def __enter__(self) -> _client_channel:
        _channels.setdefault(self.trace_id, self)
        return self

    def __exit__(self, *exc: Any) -> None:
        if _channels.get(self.trace_id) is self:
            del _channels[self.trace_id]

    def client_capabilities(self) -> Mapping[str, Any]:
        if self.call.stateless:
            return self.call.meta.client_capabilities or {}
        return self.call.session.client_capabilities or {}


def require_client_capability(ctx: Any, capability: str) -> None:
    """From inside a tool: fail unless the calling MCP client declared ``capability``
    (e.g. ``"elicitation"``). The client then gets ``MissingRequiredClientCapability``
    (-32021) naming it, instead of a result."""
    trace = getattr(ctx, "trace", None)
    channel = _channels.get(trace.trace_id) if trace is not None else None
    if channel is None or capability in channel.client_capabilities():
        return
    channel.missing.add(capability)
    raise ClientRequestFailed(f"the MCP client did not declare the {capability!r} capability this tool needs")


def client_capabilities(ctx: Any) -> Mapping[str, Any]:
    """From inside a tool: the capabilities the calling MCP client declared ({} if none)."""
    trace = getattr(ctx, "trace", None)
    channel = _channels.get(trace.trace_id) if trace is not None else None
    return channel.client_capabilities() if channel is not None else {}


def request_state(ctx: Any) -> str | None:
    """From inside a tool, at 2026-07-28: the ``requestState`` the client echoed on this
    retry (already verified: roost signs the state it hands out), else None."""
    trace = getattr(ctx, "trace", None)
    channel = _channels.get(trace.trace_id) if trace is not None else None
    return channel.state_in if channel is not None else None


async def gather_input(
    ctx: Any, requests: Mapping[str, Mapping[str, Any]], *, state: str | None = None, timeout_s: float = 60.0
) -> dict[str, Any] | None:
    """From inside a tool: get input from the client. ``requests`` maps a key to
    ``{"method": "elicitation/create" | "sampling/createMessage" | "roots/list", "params": {...}}``.

    Handshake era: each request goes to the client now; returns the results by key.
    2026-07-28 (multi round-trip requests): returns the client's ``inputResponses`` when this
    retry carries all keys; otherwise the call is answered with an ``InputRequiredResult``
    (with ``state`` as the signed ``requestState``) and this returns None — the tool should
    then return at once (its result is discarded)."""
    trace = getattr(ctx, "trace", None)
    channel = _channels.get(trace.trace_id) if trace is not None else None
    if channel is None:
        raise ClientRequestFailed("no MCP client is waiting on this tool call")
    if channel.call.stateless:
        given = channel.responses_in
        if all(key in given for key in requests):
            return {key: given[key] for key in requests}
        channel.input_required = ({k: dict(v) for k, v in requests.items()}, state)
        return None
    out: dict[str, Any] = {}
    for key, item in requests.items():
        out[key] = await request_client(ctx, str(item.get("method")), item.get("params") or {}, timeout_s=timeout_s)
    return out


class ClientRequestFailed(RoostError):
    """The MCP client could not or would not answer a server-to-client request."""

    code = "mcp_client_request_failed"


_CAPABILITY_FOR = {p.SAMPLING_CREATE_MESSAGE: "sampling", p.ELICITATION_CREATE: "elicitation", p.ROOTS_LIST: "roots"}


async def request_client(ctx: Any, method: str, params: Mapping[str, Any] | None = None, *, timeout_s: float = 60.0) -> Any:
    """From inside a tool: send ``method`` (e.g. ``sampling/createMessage``,
    ``elicitation/create``) to the MCP client whose ``tools/call`` is running this tool,
    and return its result. Handshake-era sessions only; raises ClientRequestFailed when
    there is no such client, it lacks the capability, answers an error or times out."""
    needed = _CAPABILITY_FOR.get(method)
    if needed:
        require_client_capability(ctx, needed)
    trace = getattr(ctx, "trace", None)
    channel = _channels.get(trace.trace_id) if trace is not None else None
    if channel is None:
        raise ClientRequestFailed(f"{method}: no MCP client session is waiting on this tool call")
    return await _send_client_request(channel.call, method, params, timeout_s=timeout_s)


async def _send_client_request(call: _Call, method: str, params: Mapping[str, Any] | None, *, timeout_s: float = 60.0) -> Any:
    if call.notify is None:
        raise ClientRequestFailed(f"{method}: this transport cannot carry requests to the client")
    if call.stateless:
        raise ClientRequestFailed(f"{method}: server-to-client requests do not exist at {call.meta.protocol_version}")
    session = call.session
    needed = _CAPABILITY_FOR.get(method)
    if needed and needed not in (session.client_capabilities or {}):
        raise ClientRequestFailed(f"{method}: the MCP client did not declare the {needed!r} capability")
    session.next_outgoing_id += 1
    request_id = f"roost-{session.next_outgoing_id}"
    send, receive = trio.open_memory_channel[Any](1)
    session.outgoing[request_id] = send
    try:
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = dict(params)
        await call.notify(message)
        with trio.move_on_after(timeout_s) as scope:
            reply = await receive.receive()
        if scope.cancelled_caught:
            await call.notify({"jsonrpc": "2.0", "method": p.NOTIFY_CANCELLED, "params": p.cancelled_params(request_id, "timed out")})
            raise ClientRequestFailed(f"{method}: the MCP client did not answer within {timeout_s:g} s")
    finally:
        session.outgoing.pop(request_id, None)
    if isinstance(reply, rpc.ErrorResponse):
        raise ClientRequestFailed(f"{method}: the MCP client answered error {reply.error.code}: {reply.error.message}")
    return reply.result


def change_notifications(event: Event) -> list[str]:
    """The ``list_changed`` notifications a change event calls for."""
    if event.kind == PROMPTS_CHANGED_EVENT:
        return [p.NOTIFY_PROMPTS_CHANGED]
    if event.kind == RESOURCES_CHANGED_EVENT:
        return [p.NOTIFY_RESOURCES_CHANGED]
    methods = [p.NOTIFY_TOOLS_CHANGED]
    payload = event.payload if isinstance(event.payload, Mapping) else {}
    names = list(payload.get("added") or ()) + list(payload.get("removed") or ())
    if any(isinstance(n, str) and n.startswith("agent_") for n in names):
        methods += [p.NOTIFY_RESOURCES_CHANGED, p.NOTIFY_PROMPTS_CHANGED]
    return methods


def _external_root() -> TraceContext:
    """The context of a caller outside roost: depth 0, so the agent it calls is depth 1."""
    fresh = TraceContext.new("mcp-client")
    return TraceContext(fresh.trace_id, fresh.span_id, 0, (), fresh.max_depth)


def _answer_from(responses: Any) -> str | None:
    if not isinstance(responses, Mapping):
        return None
    answer = responses.get("answer")
    if not isinstance(answer, Mapping) or answer.get("action") != "accept":
        return None
    content = answer.get("content")
    if isinstance(content, Mapping) and isinstance(content.get("answer"), str):
        return content["answer"]
    return None


class _RunWatcher:
    """While a tools/call runs: forward progress (if the request has a progressToken) and
    tool log messages (if the client set a log level) belonging to its trace."""

    _KINDS = (EventKind.AGENT_TOKEN, EventKind.EXEC_TOOL_CALL, EventKind.EXEC_TOOL_RESULT, PROGRESS_EVENT, LOG_EVENT)

    def __init__(self, kernel: Any, call: _Call, trace_id: str, heartbeat: bool) -> None:
        self.heartbeat = heartbeat  # an agent run: report each step; else only the tool's own
        self.kernel = kernel
        self.call = call
        self.trace_id = trace_id
        self.token = call.meta.progress_token
        self._count = 0
        self._reported: float | None = None
        self._last_sent = -1.0

    def _kinds(self) -> tuple[str, ...]:
        """The event kinds this call needs to see (none: nothing to forward)."""
        if self.call.notify is None:
            return ()
        kinds: tuple[str, ...] = (LOG_EVENT,) if self.call.log_level is not None else ()
        if self.token is not None:
            # Only an agent run reports its steps; a tool call only its own progress, so
            # it need not wake for every other call's tool events.
            kinds += self._KINDS[:-1] if self.heartbeat else (PROGRESS_EVENT,)
        return kinds

    async def run(self, fn: Callable[[], Awaitable[Any]]) -> Any:
        """``await fn()`` while forwarding; its exceptions propagate unwrapped."""
        kinds = self._kinds()
        if not kinds:
            return await fn()
        router = self.call.session.event_router
        if router is not None and router.active and _EventRouter.KIND_SET.issuperset(kinds):
            return await router.watch(self, fn)
        error: Exception | None = None
        result: Any = None
        async with self.kernel.tap.subscribe(buffer=256, kinds=kinds) as events:
            self._events = events
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._forward)
                try:
                    result = await fn()
                except Exception as exc:
                    error = exc
                nursery.cancel_scope.cancel()
            if error is None:
                # Everything the run published is already queued: send what is left, in
                # order, before the response goes out.
                while True:
                    try:
                        event = events.receive_nowait()
                    except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                        break
                    await self._handle(event, final=True)
        if error is not None:
            raise error
        return result

    async def _forward(self) -> None:
        async for event in self._events:
            await self._handle(event)

    async def _handle(self, event: Event, *, final: bool = False) -> None:
        notify = self.call.notify
        assert notify is not None
        if event.trace is None or event.trace.trace_id != self.trace_id:
            return
        payload = event.payload if isinstance(event.payload, Mapping) else {}
        if event.kind == LOG_EVENT:
            level = payload.get("level", "info")
            if p.log_level_allows(self.call.log_level, level):
                await notify({"jsonrpc": "2.0", "method": p.NOTIFY_MESSAGE, "params": p.log_params(level, payload.get("data"), payload.get("logger"))})
            return
        if self.token is None:
            return
        if event.kind == PROGRESS_EVENT and not self.heartbeat:
            value = payload.get("progress")
            if isinstance(value, (int, float)) and not isinstance(value, bool) and (self._reported is None or value > self._reported):
                self._reported = value  # progress must increase; a repeat or a step back is dropped
                await notify({"jsonrpc": "2.0", "method": p.NOTIFY_PROGRESS, "params": p.progress_params(self.token, value, payload.get("total"), payload.get("message"))})
            return
        if not self.heartbeat:
            return
        self._count += 1  # an agent at work: every step it takes is progress
        now = trio.current_time()
        if event.kind == EventKind.AGENT_TOKEN and (final or now - self._last_sent < 0.05):
            return  # coalesce streamed tokens
        self._last_sent = now
        if event.kind == EventKind.EXEC_TOOL_CALL:
            message = f"{event.source}: calling {payload.get('tool')}"
        elif event.kind == EventKind.EXEC_TOOL_RESULT:
            message = f"{event.target}: {payload.get('tool')} {payload.get('outcome')}"
        elif event.kind == PROGRESS_EVENT:
            message = str(payload.get("message") or f"{event.source}: working")
        else:
            message = f"{event.source} is answering"
        await notify({"jsonrpc": "2.0", "method": p.NOTIFY_PROGRESS, "params": p.progress_params(self.token, self._count, None, message)})


__all__ = [
    "ARTIFACT_TTL_S",
    "ArtifactShelf",
    "artifact_shelf",
    "LOG_EVENT",
    "PROGRESS_EVENT",
    "McpServer",
    "PromptEntry",
    "ResourceEntry",
    "ServerSession",
    "ToolEntry",
    "agent_card",
    "agent_manifest_view",
    "change_notifications",
    "ClientRequestFailed",
    "TemplateEntry",
    "request_client",
    "require_client_capability",
    "client_capabilities",
    "gather_input",
    "request_state",
    "PROMPTS_CHANGED_EVENT",
    "RESOURCES_CHANGED_EVENT",
    "report_log",
    "report_progress",
]


class _EventRouter:
    """One tap subscription per stream connection for tool progress and log events, each
    handed to the watcher of the call on its trace — instead of a subscription and a
    forwarding task per call, which with many calls in flight cost more than the calls."""

    KINDS = (PROGRESS_EVENT, LOG_EVENT)
    KIND_SET = frozenset(KINDS)
    FLUSH_TIMEOUT_S = 5.0

    def __init__(self) -> None:
        self.watchers: dict[str, list[_RunWatcher]] = {}
        self._tap: Any = None
        self._events: trio.MemoryReceiveChannel[Event] | None = None
        self._taken = 0
        self._handled = 0
        self._waiting = False
        self._moved = trio.Event()

    @property
    def active(self) -> bool:
        return self._events is not None

    async def run(self, kernel: Any, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        self._tap = kernel.tap
        async with kernel.tap.subscribe(buffer=256, kinds=self.KINDS) as events:
            self._events = events
            task_status.started()
            try:
                while True:
                    self._waiting = True
                    try:
                        event = await events.receive()
                    except trio.EndOfChannel:
                        break
                    finally:
                        self._waiting = False
                    self._taken += 1
                    try:
                        if event.trace is not None:
                            for watcher in list(self.watchers.get(event.trace.trace_id, ())):
                                await watcher._handle(event)
                    except Exception:  # one bad notification must not end the connection
                        log.exception("forwarding %s to the MCP client failed", event.kind)
                    finally:
                        self._handled += 1
                        self._moved.set()
                        self._moved = trio.Event()
            finally:
                self._events = None
                self._moved.set()

    async def watch(self, watcher: _RunWatcher, fn: Callable[[], Awaitable[Any]]) -> Any:
        """``await fn()`` with ``watcher`` receiving its trace's events; before returning,
        wait until the events published during the run have been forwarded."""
        self.watchers.setdefault(watcher.trace_id, []).append(watcher)
        try:
            published = self._tap.published
            result = await fn()
            if self._tap.published != published:  # else the run published nothing to wait for
                await self._flush()
        finally:
            mine = self.watchers.get(watcher.trace_id, [])
            if watcher in mine:
                mine.remove(watcher)
            if not mine:
                self.watchers.pop(watcher.trace_id, None)
        return result

    async def _flush(self) -> None:
        events = self._events
        if events is None:
            return
        # Publishing hands events to the channel at once: everything the run published is
        # handled, being handled, in the buffer, or handed to the router while it waited
        # (then it is still marked waiting though no longer queued as a receiver).
        stats = events.statistics()
        in_transit = 1 if self._waiting and stats.tasks_waiting_receive == 0 else 0
        target = self._taken + stats.current_buffer_used + in_transit
        if self._handled >= target:
            return
        with trio.move_on_after(self.FLUSH_TIMEOUT_S):
            while self._handled < target and self._events is not None:
                await self._moved.wait()


# ---- a message loop for stream transports (stdio, memory) ------------------------------------


async def serve_connection(
    server: McpServer,
    receive: Callable[[], Awaitable[Any]],
    send: Notify,
    *,
    max_in_flight: int = MAX_IN_FLIGHT,
    session: ServerSession | None = None,
    drain_timeout_s: float = 5.0,
) -> None:
    """Serve one client over a message stream until ``receive()`` raises EndOfChannel.

    ``receive()`` returns a decoded JSON message, or an ``rpc.JsonRpcError`` to answer (a
    framing problem such as a parse error). Requests run in tasks apart from the reader,
    at most ``max_in_flight`` at once (reading pauses beyond that; see
    ``_RequestWorkers``); list changes are pushed once the session is initialized. When
    the stream ends, requests in flight may answer for ``drain_timeout_s``, then are
    cancelled.
    """
    session = session or server.new_session()

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(server.watch_changes, session, send)
            router = _EventRouter()
            await nursery.start(router.run, server.kernel)
            session.event_router = router
            workers = _RequestWorkers(server, session, send, nursery, max_in_flight)
            while True:
                try:
                    message = await receive()
                except (trio.EndOfChannel, trio.ClosedResourceError, trio.BrokenResourceError):
                    break
                if isinstance(message, rpc.JsonRpcError):
                    await send(message.to_response().to_dict())
                    continue
                if isinstance(message, dict) and (
                    ("method" in message and "id" not in message)  # a notification
                    or ("method" not in message and ("result" in message or "error" in message))
                ):
                    # Notifications (cancelled, initialized, …) and the client's answers to
                    # requests of ours (elicitation, sampling) are handled here, in read
                    # order: a cancel must find the request read before it, and an answer
                    # may be awaited by a request holding the last free request task.
                    await server.handle(session, message, notify=send)
                    continue
                if isinstance(message, dict) and message.get("method") == p.INITIALIZE:
                    # Answered before anything read after it (the reader does not yield
                    # between requests, and Trio does not promise to start tasks in order).
                    reply = await server.handle(session, message, notify=send)
                    try:
                        if reply is not None:
                            await send(reply)
                    except (trio.BrokenResourceError, trio.ClosedResourceError):
                        break  # the client went away
                    continue
                request_id = message.get("id") if isinstance(message, dict) else None
                if isinstance(request_id, (str, int)) and not isinstance(request_id, bool):
                    session.starting.add(request_id)
                await workers.submit(message)
            # The client closed its end: let requests in flight answer (briefly), then stop.
            workers.close()
            with trio.move_on_after(drain_timeout_s):
                while workers.busy:
                    await trio.sleep(0.01)
            session.closed = True
            nursery.cancel_scope.cancel()
    finally:
        session.closed = True
        session.cancel_all()


class _RequestWorkers:
    """The tasks that serve a stream connection's requests, at most ``limit`` at once.

    A task serves one request after another, each in the task's one cancel scope (which
    ``notifications/cancelled`` cancels; the task then ends, as the scope is spent, and a
    new one takes its place): a task and a cancel scope per request cost more than serving
    most requests. A request waits for a free task when all ``limit`` are busy (reading
    pauses). Tasks live until the connection ends; they carry no state from one request
    to the next but their context variables, which roost's code sets and resets in pairs.
    """

    def __init__(self, server: McpServer, session: ServerSession, send: Notify, nursery: trio.Nursery, limit: int) -> None:
        self._server = server
        self._session = session
        self._send = send
        self._nursery = nursery
        self._limit = limit
        self._hand_over, self._requests = trio.open_memory_channel[Any](0)
        self._room: trio.Event | None = None  # what submit waits on while every task is busy
        self.tasks = 0
        self.busy = 0  # requests handed over and not yet answered

    async def submit(self, message: Any) -> None:
        """Hand ``message`` to an idle task, or a new one, or wait until one is free."""
        self.busy += 1
        try:
            while True:
                try:
                    self._hand_over.send_nowait(message)  # succeeds only when a task is waiting
                    return
                except trio.WouldBlock:
                    pass
                if self.tasks < self._limit:
                    self.tasks += 1
                    self._nursery.start_soon(self._work, message)
                    return
                self._room = trio.Event()
                await self._room.wait()
        except BaseException:
            self.busy -= 1
            raise

    def close(self) -> None:
        """No more requests: idle tasks end; busy ones end after their request."""
        self._hand_over.close()

    def _done(self) -> None:
        """A request was answered (or cancelled): wake a ``submit`` waiting for room."""
        self.busy -= 1
        room = self._room
        if room is not None:
            self._room = None
            room.set()

    async def _work(self, message: Any) -> None:
        handling = True  # a request of this task is counted in ``busy``
        reply = None
        try:
            with trio.CancelScope() as scope:
                while True:
                    reply = await self._server.handle(self._session, message, notify=self._send, scope=scope)
                    if scope.cancel_called:
                        break  # cancelled after its last checkpoint: answered all the same, below
                    await self._answer(reply)
                    reply = None
                    handling = False
                    self._done()  # this task waits for the next request before the reader runs
                    try:
                        message = await self._requests.receive()
                    except trio.EndOfChannel:
                        return
                    handling = True
            # A cancelled request (notifications/cancelled): no response unless it had
            # finished; either way this task's scope is spent, so it ends.
            await self._answer(reply)
        finally:
            self.tasks -= 1
            if handling:
                self._done()  # after the count: a waiting submit may start a new task

    async def _answer(self, reply: dict[str, Any] | None) -> None:
        if reply is not None:
            try:
                await self._send(reply)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass  # the client went away


__all__ += ["serve_connection"]
