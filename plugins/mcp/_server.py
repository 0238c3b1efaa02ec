"""roost as an MCP server: one protocol core for every transport (stdio, HTTP, memory).

A transport sends back what ``await server.handle(session, message, notify=...)`` returns.
The **agent** surface (``/agents/coder/mcp``) is the kernel's ``AgentSurface`` plus the
session's part; the **host** surface (``/mcp``, ``roost mcp``) lists each agent's
``message`` as ``agent_{name}`` and its exposed tools (``{agent}_{tool}`` when several
expose one). An answer's artifacts are kept (``ArtifactShelf``) for ``resources/read``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import re
import secrets
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Mapping
from contextlib import suppress
from functools import partial
from typing import Any, NoReturn

import attrs
import trio
from roost.kernel import (
    MESSAGE_TOOL,
    NO_SPAN,
    AgentNotFound,
    AgentSurface,
    AgentUnavailable,
    Event,
    EventKind,
    InvalidInput,
    KernelAPI,
    Output,
    RecursionLimitExceeded,
    SpanKind,
    SurfaceCall,
    agent_tool_name,
    check_json_input,
    is_mapping,
    jsonrpc_error,
    roost_version,
    unknown_tool_error,
)
from roost.kernel import jsonrpc as rpc

from . import _protocol as p
from ._tool_context import _client_channel

log = logging.getLogger("roost.mcp.server")

PROMPTS_CHANGED_EVENT = "MCP:PROMPTS_CHANGED"
"""Event kind a plugin publishes when the prompts it offers changed."""
RESOURCES_CHANGED_EVENT = "MCP:RESOURCES_CHANGED"
"""Event kind a plugin publishes when the resources it offers changed."""
_CHANGE_KINDS = (EventKind.KERNEL_TOOLS_CHANGED, PROMPTS_CHANGED_EVENT, RESOURCES_CHANGED_EVENT)
SERVER_NAME = "roost"
DEFAULT_PAGE_SIZE = 100

Notify = Callable[[dict[str, Any]], Awaitable[None]]
"""Sends a message (a notification, a request to the client) on a request's stream."""


@attrs.define(eq=False)
class ServerSession:
    """One client's state: negotiated version, log level, requests in flight."""

    id: str = attrs.field(factory=lambda: secrets.token_urlsafe(24))
    protocol_version: str | None = None
    client_capabilities: Mapping[str, Any] | None = None
    log_level: str | None = None
    in_flight: dict[Any, trio.CancelScope] = attrs.field(factory=dict)
    closed: bool = False
    outgoing: dict[Any, trio.MemorySendChannel[Any]] = attrs.field(factory=dict)
    next_outgoing_id: int = 0
    event_router: Any = None  # a stream connection's _EventRouter (see serve_connection)
    # Requests read but not yet started (stream transports) → cancelled before they started:
    # a notifications/cancelled read in the same burst as its request must still stop it.
    starting: dict[Any, bool] = attrs.field(factory=dict)
    # Who the client is (the principal of its API key); None: the kernel's host principal.
    principal: str | None = None

    @property
    def handshake_done(self) -> bool:
        return self.protocol_version is not None

    def cancel(self, request_id: Any) -> bool:
        """Cancel a request in flight or about to start; False if there is none."""
        scope = self.in_flight.get(request_id)
        if scope is not None:
            scope.cancel()
        elif request_id in self.starting:
            self.starting[request_id] = True
        return scope is not None or request_id in self.starting

    def cancel_all(self) -> None:
        for scope in list(self.in_flight.values()):
            scope.cancel()


@attrs.define(eq=False)
class _Call:
    """What a method handler knows about its request (built per request: no validators)."""

    session: ServerSession
    request: rpc.Request
    meta: p.RequestMeta
    stateless: bool
    notify: Notify | None

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


# ---- what the surfaces offer: entries, cards, plugins' extras -------------------------------


@attrs.frozen
class ToolEntry:
    """A tool as one surface lists it: wire name, MCP ``Tool``, and ``target`` on ``agent``."""

    name: str
    mcp: Mapping[str, Any]
    agent: str
    target: str

    def to_mcp(self) -> dict[str, Any]:
        return dict(self.mcp)


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
        out = {
            "uri": self.uri,
            "name": self.name,
            "mimeType": self.mime_type,
            "description": self.description,
        }
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
        return {
            "uriTemplate": self.uri_template,
            "name": self.name,
            "mimeType": self.mime_type,
            "description": self.description,
        }

    def match(self, uri: str) -> dict[str, str] | None:
        pattern = "".join(
            f"(?P<{part[1:-1]}>[^/]+)"
            if part.startswith("{") and part.endswith("}")
            else re.escape(part)
            for part in re.split(r"(\{[A-Za-z_][A-Za-z0-9_]*\})", self.uri_template)
        )
        found = re.fullmatch(pattern, uri)
        return found.groupdict() if found else None


def agent_card(kernel: KernelAPI, name: str) -> dict[str, Any]:
    """A JSON description of an agent (its "card"): identity, skills and endpoints."""
    m = kernel.agents[name]
    status, error = kernel.agent_status(name)  # as /api/agents reports it
    return {
        "name": m.name,
        "description": m.description,
        "version": m.version,
        "skills": [
            {
                "id": s.id,
                "name": s.name,
                "description": s.description,
                "tags": list(s.tags),
                "examples": list(s.examples),
            }
            for s in m.a2a.skills
        ],
        "a2a": {"enabled": bool(m.a2a.enabled)},
        "mcp": {
            "endpoint": f"/agents/{name}/mcp",
            "tools": [s.name for s in kernel.surface(name).tools()],
        },
        "status": status,
        "error": error,
    }


def agent_manifest_view(kernel: KernelAPI, name: str) -> dict[str, Any]:
    """The public parts of an agent's manifest (no filesystem paths, no secrets)."""
    m = kernel.agents[name]
    return {
        "name": m.name,
        "description": m.description,
        "version": m.version,
        "model": {"provider": m.model.provider, "name": m.model.name},
        "capabilities": {"tools": list(m.capabilities.tools)},
        "mcp": {
            "expose_tools": list(m.mcp.expose_tools),
            "private_tools": list(m.mcp.private_tools),
        },
        "a2a": {"enabled": bool(m.a2a.enabled), "skills": [s.id for s in m.a2a.skills]},
        "limits": {
            "max_turns": m.limits.max_turns,
            "tool_timeout_s": m.limits.tool_timeout_s,
            "max_depth": m.limits.max_depth,
        },
        "sandbox": m.sandbox,
    }


_AGENT_VIEWS = (  # the resources of each agent: (kind, view, description)
    ("card", agent_card, "The card of the {} agent: who it is, its skills and endpoints"),
    ("manifest", agent_manifest_view, "The manifest (agent.json, public parts) of the {} agent"),
)


def _json_view(view: Callable[[KernelAPI, str], Any], kernel: KernelAPI, agent: str) -> str:
    return json.dumps(view(kernel, agent), ensure_ascii=False, indent=2)


def extras(kernel: KernelAPI, hook_name: str, kind: type) -> list[Any]:
    """The ``kind`` entries plugins add through the hook ``hook_name`` (``roost_mcp_resources``,
    ``roost_mcp_resource_templates``, ``roost_mcp_prompts``); a plugin raising is logged."""
    hook = getattr(kernel.plugins.hook, hook_name, None)  # none until a plugin implements it
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
    """The artifacts MCP surfaces handed to clients, for ``resources/read``: the newest
    ``max_items`` and ``max_bytes``, each kept ``ttl_s``, readable only in the ``scope`` that
    received it (an MCP session's id, or ``STATELESS_SCOPE``)."""

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
            if (
                expires > now
                and len(self._items) <= self.max_items
                and self._bytes <= self.max_bytes
            ):
                return
            del self._items[ident]
            self._bytes -= size


_SHELF = "roost.plugins.mcp.artifacts"  # its key in kernel.extensions


def artifact_shelf(kernel: KernelAPI) -> ArtifactShelf:
    """The kernel's one ``ArtifactShelf`` (shared by its MCP surfaces and transports)."""
    shelf = kernel.extensions.get(_SHELF)
    if shelf is None:
        shelf = kernel.extensions[_SHELF] = ArtifactShelf()
    return shelf


def _artifact_scope(call: _Call) -> str:
    if not call.stateless:
        return call.session.id
    principal = call.session.principal
    return STATELESS_SCOPE if principal is None else f"{STATELESS_SCOPE}:{principal}"


class McpServer:
    """The MCP server core over a kernel, for the host surface or one agent's surface."""

    def __init__(
        self,
        kernel: KernelAPI | None,
        *,
        agent: str | None = None,
        page_size: int = DEFAULT_PAGE_SIZE,
    ) -> None:
        # kernel may be None until it has booted (``roost mcp`` answers initialize first);
        # only initialize and server/discover may be served before it is set.
        if agent is not None and (kernel is None or agent not in kernel.agents):
            raise AgentNotFound(agent, list(kernel.agents) if kernel is not None else [])
        self.kernel = kernel
        self.agent = agent
        self.page_size = page_size
        name = SERVER_NAME if agent is None else f"roost-{agent}"
        self.server_info = {"name": name, "version": roost_version()}
        self._state_key = secrets.token_bytes(32)
        self._index: dict[str, ToolEntry] = {}
        self._index_key: tuple[Any, ...] | None = None
        self._methods: dict[str, Callable[[_Call], Awaitable[Any]]] = {
            p.PING: self._ping,
            p.DISCOVER: self._discover,
            p.TOOLS_LIST: self._list,
            p.TOOLS_CALL: self._tools_call,
            p.RESOURCES_LIST: self._list,
            p.RESOURCES_READ: self._resources_read,
            p.RESOURCES_TEMPLATES_LIST: self._list,
            p.PROMPTS_LIST: self._list,
            p.PROMPTS_GET: self._prompts_get,
            p.LOGGING_SET_LEVEL: self._set_level,
            p.COMPLETION_COMPLETE: self._complete,
            p.SUBSCRIPTIONS_LISTEN: self._listen,
            p.RESOURCES_SUBSCRIBE: self._subscribe,
            p.RESOURCES_UNSUBSCRIBE: self._subscribe,
        }

    @property
    def agents(self) -> list[str]:
        """The agents this surface serves (sorted)."""
        if self.agent is not None:
            return [self.agent]
        return sorted(a for a in self.kernel.agents if a not in self.kernel.agent_errors)

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
            "roost hosts AI agents. Ask one with its agent_{name} tool (the agent's name "
            "lowercased, '-' → '_'); the other tools are those the agents expose."
        )

    def tools(self) -> list[ToolEntry]:
        """Every tool this surface lists, sorted by name (the order ``tools/list`` uses)."""
        kernel = self.kernel
        if self.agent is not None:
            return [
                ToolEntry(s.name, s.to_mcp(), self.agent, s.name)
                for s in kernel.surface(self.agent).tools()
            ]
        entries: list[ToolEntry] = []
        exposers: dict[str, list[tuple[str, Any]]] = {}
        for agent in self.agents:
            for spec in kernel.surface(agent).tools():
                if spec.name == MESSAGE_TOOL:
                    name = agent_tool_name(agent)
                    entries.append(
                        ToolEntry(name, {**spec.to_mcp(), "name": name}, agent, MESSAGE_TOOL)
                    )
                else:
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
        key = (
            id(kernel.registry),
            kernel.registry.version,
            id(kernel.agents),
            len(kernel.agents),
            len(kernel.agent_errors),
        )
        if self._index_key != key:
            self._index = {e.name: e for e in self.tools()}
            self._index_key = key
        return self._index

    def resources(self) -> list[ResourceEntry]:
        """Each agent's card and manifest (JSON), and on the host surface plugins' extras."""
        kernel = self.kernel
        out = [
            ResourceEntry(
                f"roost://agents/{agent}/{kind}",
                f"{agent}-{kind}",
                "application/json",
                what.format(agent),
                partial(_json_view, view, kernel, agent),
                title=f"{agent} {kind}",
            )
            for agent in self.agents
            for kind, view, what in _AGENT_VIEWS
        ]
        if self.agent is None:
            out.extend(extras(kernel, "roost_mcp_resources", ResourceEntry))
        return sorted(out, key=lambda r: r.uri)

    def prompts(self) -> list[PromptEntry]:
        out: list[PromptEntry] = []
        for agent in self.agents:
            m = self.kernel.agents[agent]
            if not m.system_prompt:
                continue
            out.append(
                PromptEntry(
                    p.safe_tool_name(agent),
                    f"The system prompt of the {agent} agent",
                    (),
                    lambda _args, text=m.system_prompt: [
                        {"role": "user", "content": {"type": "text", "text": text}}
                    ],
                    title=f"{agent} system prompt",
                )
            )
        if self.agent is None:
            out.extend(extras(self.kernel, "roost_mcp_prompts", PromptEntry))
        return sorted(out, key=lambda e: e.name)

    async def handle(
        self,
        session: ServerSession,
        message: Any,
        *,
        notify: Notify | None = None,
        scope: trio.CancelScope | None = None,
    ) -> dict[str, Any] | None:
        """Serve one decoded message: the response to send, or None (notifications, stray
        responses, cancelled requests); never raises for bad input. ``notifications/cancelled``
        cancels a request's own scope, or the caller's ``scope`` (then spent)."""
        if session.starting and isinstance(message, dict):
            raw_id = message.get("id")
            if isinstance(raw_id, (str, int)) and session.starting.pop(raw_id, False):
                return None  # cancelled before it started: the spec asks for no response
        try:
            if isinstance(message, list):
                parsed = rpc.parse(message, allow_batch=False, max_bytes=None)
            else:
                parsed = rpc.parse_message(message)  # already decoded: a str is not a message
        except rpc.JsonRpcError as exc:
            return exc.to_response().to_dict()
        if isinstance(parsed, rpc.Notification):
            # Only cancelled needs anything from us (not initialized, progress, roots, …).
            request_id = parsed.params.get("requestId") if is_mapping(parsed.params) else None
            if parsed.method == p.NOTIFY_CANCELLED and isinstance(request_id, (str, int)):
                if not isinstance(request_id, bool):
                    session.cancel(request_id)
            return None
        if isinstance(parsed, (rpc.Response, rpc.ErrorResponse)):
            waiter = session.outgoing.pop(parsed.id, None)
            if waiter is None:
                log.debug("ignoring a response (id %r) that answers no request of ours", parsed.id)
            else:
                with suppress(trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
                    waiter.send_nowait(parsed)
            return None
        assert isinstance(parsed, rpc.Request)
        error = None
        if parsed.id is None:
            error = rpc.INVALID_REQUEST, "id: must not be null in MCP; use a string or an integer"
        elif parsed.params is not None and not is_mapping(parsed.params):
            error = rpc.INVALID_PARAMS, "params: expected an object (MCP uses named parameters)"
        elif parsed.id in session.in_flight:
            in_use = f"id {parsed.id!r} is already in use by a request in flight; use a new id"
            error = rpc.INVALID_REQUEST, in_use
        if error is not None:
            return rpc.error_response(parsed.id, *error).to_dict()
        if scope is None:
            with trio.CancelScope() as scope:
                return await self._respond(session, parsed, notify, scope)
            return None  # cancelled: the spec asks for no response
        return await self._respond(session, parsed, notify, scope)

    async def _respond(
        self,
        session: ServerSession,
        request: rpc.Request,
        notify: Notify | None,
        scope: trio.CancelScope,
    ) -> dict[str, Any]:
        """Run ``request`` cancellable through ``scope``; its response (errors included)."""
        session.in_flight[request.id] = scope
        try:
            params = request.params if is_mapping(request.params) else {}
            if request.method != p.TOOLS_CALL:  # tools/call's are checked as it starts
                _check_input(params)  # what is echoed back must be text UTF-8 can carry
            stateless = p.request_era(params) == p.ERA_STATELESS
            if request.method == p.INITIALIZE and not stateless:
                result = self._initialize(session, params)
            else:
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
                            f"params._meta[{p.META_PROTOCOL_VERSION!r}]: required "
                            f"(protocol {p.LATEST_VERSION}); "
                            "or open a session with initialize first",
                        )
                if handler is None:
                    raise rpc.JsonRpcError(
                        rpc.METHOD_NOT_FOUND,
                        f"method {request.method!r} not found",
                        {"method": request.method},
                    )
                result = await handler(_Call(session, request, meta, stateless, notify))
                if stateless:
                    result = p.finish_stateless_result(request.method, result, self.server_info)
        except Exception as exc:
            return rpc.ErrorResponse(
                request.id, jsonrpc_error(exc, request.method).to_error()
            ).to_dict()
        finally:
            session.in_flight.pop(request.id, None)
        return {"jsonrpc": rpc.VERSION, "id": request.id, "result": result}

    def _initialize(self, session: ServerSession, params: Mapping[str, Any]) -> dict[str, Any]:
        if session.handshake_done:
            raise rpc.JsonRpcError(
                rpc.INVALID_REQUEST,
                "initialize: this session is already initialized; start a new session",
            )
        requested = params.get("protocolVersion")
        if not isinstance(requested, str):
            raise rpc.JsonRpcError(
                rpc.INVALID_PARAMS,
                "params.protocolVersion: required, a version string such as "
                f"{p.LATEST_HANDSHAKE_VERSION!r}",
            )
        caps = params.get("capabilities", {})
        if not isinstance(caps, Mapping):
            raise rpc.JsonRpcError(rpc.INVALID_PARAMS, "params.capabilities: expected an object")
        session.protocol_version = p.negotiate_version(requested)
        session.client_capabilities = dict(caps)
        return {
            "protocolVersion": session.protocol_version,
            "capabilities": self.capabilities(),
            "serverInfo": dict(self.server_info),
            "instructions": self.instructions(),
        }

    async def _ping(self, call: _Call) -> dict[str, Any]:
        return {}

    async def _discover(self, call: _Call) -> dict[str, Any]:
        return {
            "resultType": p.RESULT_COMPLETE,
            "supportedVersions": list(p.SUPPORTED_VERSIONS),
            "capabilities": self.capabilities(),
            **p.CACHE_FIELDS,
            p.META: {p.META_SERVER_INFO: dict(self.server_info)},
            "instructions": self.instructions(),
        }

    async def _set_level(self, call: _Call) -> dict[str, Any]:
        level = rpc.param(call.params, "level", str)
        if level not in p.LOG_LEVELS:
            raise rpc.JsonRpcError(
                rpc.INVALID_PARAMS,
                f"params.level: expected one of {', '.join(p.LOG_LEVELS)}, got {level!r}",
            )
        call.session.log_level = level
        return {}

    async def _list(self, call: _Call) -> dict[str, Any]:
        """The page of tools, resources, templates or prompts the request's cursor asks for."""
        field, key, entries = _LISTS[call.request.method]
        items = [e.to_mcp() for e in getattr(self, entries)()]
        after = call.params.get("cursor")
        page, cursor = p.paginate(items, after, key=key, page_size=self.page_size)
        return {field: page, "nextCursor": cursor} if cursor else {field: page}

    def templates(self) -> list[TemplateEntry]:
        if self.agent is not None:
            return []
        return sorted(
            extras(self.kernel, "roost_mcp_resource_templates", TemplateEntry),
            key=lambda t: t.uri_template,
        )

    async def _subscribe(self, call: _Call) -> dict[str, Any]:
        rpc.param(call.params, "uri", str)  # (un)subscribing changes nothing: none are sent
        return {}

    async def _resources_read(self, call: _Call) -> dict[str, Any]:
        uri = rpc.param(call.params, "uri", str)
        found = next(((e.mime_type, e.read, ()) for e in self.resources() if e.uri == uri), None)
        for template in () if found else self.templates():
            values = template.match(uri)
            if values is not None:
                found = (template.mime_type, template.read, (uri, values))
                break
        if found is not None:
            mime_type, read, args = found
            value = read(*args)
            if hasattr(value, "__await__"):
                value = await value
            if isinstance(value, Mapping):  # a full contents item (e.g. a blob)
                return {"contents": [{"uri": uri, "mimeType": mime_type, **value}]}
            return {"contents": [{"uri": uri, "mimeType": mime_type, "text": str(value)}]}
        code = rpc.INVALID_PARAMS if call.stateless else p.RESOURCE_NOT_FOUND_LEGACY
        artifact_id = Output.id_in_uri(uri)
        if artifact_id is not None:
            output = artifact_shelf(self.kernel).get(_artifact_scope(call), artifact_id)
            contents = output.resource_contents(uri) if output is not None else []
            if contents:
                return {"contents": contents}
            raise rpc.JsonRpcError(
                code,
                f"Resource not found: {uri}; an artifact is kept for {ARTIFACT_TTL_S / 60:g} "
                f"minutes after the answer that carried it (the newest {MAX_KEPT_ARTIFACTS}), "
                "for the MCP session that received it",
                {"uri": uri},
            )
        raise rpc.JsonRpcError(code, f"Resource not found: {uri}; see resources/list", {"uri": uri})

    async def _prompts_get(self, call: _Call) -> dict[str, Any]:
        name = rpc.param(call.params, "name", str)
        arguments = rpc.param(call.params, "arguments", dict, default={}) or {}
        for key, value in arguments.items():
            if not isinstance(value, str):
                raise rpc.JsonRpcError(
                    rpc.INVALID_PARAMS,
                    f"params.arguments.{key}: expected a string, got {rpc.json_type(value)}",
                )
        entry = next((e for e in self.prompts() if e.name == name), None)
        if entry is None:
            raise rpc.JsonRpcError(
                rpc.INVALID_PARAMS, f"params.name: unknown prompt {name!r}; see prompts/list"
            )
        for arg in entry.arguments:
            if arg.get("required") and arg.get("name") not in arguments:
                raise rpc.JsonRpcError(
                    rpc.INVALID_PARAMS,
                    f"params.arguments.{arg.get('name')}: required by prompt {name!r}",
                )
        given: tuple[Any, ...] = (arguments,)
        if entry.input_requests:
            channel = _client_channel(call)  # not registered: no tool runs
            if call.stateless:
                self._read_round_trip(call, channel)
            inputs = await channel.gather(entry.input_requests)
            if inputs is None:
                return p.input_required_result(
                    channel.input_required[0] if channel.input_required else {}
                )
            given = (arguments, inputs)
        return {"description": entry.description, "messages": list(entry.render(*given))}

    async def _complete(self, call: _Call) -> dict[str, Any]:
        rpc.param(call.params, "ref", dict)
        rpc.param(call.params, "argument", dict)
        return {"completion": {"values": [], "total": 0, "hasMore": False}}

    async def _tools_call(self, call: _Call) -> dict[str, Any]:
        """The agent's surface answers; here: host names, forwarding, client requests, MRTR."""
        params = call.params
        target: str | None = None
        if self.agent is None:
            name = rpc.param(params, "name", str)
            index = self._tool_index()
            entry = index.get(name)
            if entry is None:
                self._unknown_tool(params, name, index)
            agent, target = entry.agent, entry.target
        else:
            agent = self.agent
        surface = self.kernel.surface(agent)
        session_id = None
        if (
            call.stateless
            and params.get("requestState") is not None
            and (target or params.get("name")) == MESSAGE_TOOL
        ):
            # The retry of a question the agent asked: its answer continues that session.
            session_id = self._open_state(params.get("requestState"))
            answer = _answer_from(params.get("inputResponses"))
            if answer is None:
                text = (
                    "inputResponses.answer: the agent's question was not answered (declined, "
                    'cancelled or missing); send {"action": "accept", "content": {"answer": "..."}}'
                )
                return {"content": [{"type": "text", "text": text}], "isError": True}
            params = {**params, "arguments": {"message": answer}}
        prepared = surface.prepare(params, tool=target, server=True)
        # The server's span: a child of the caller's, the agent's run or tool call its child.
        span = NO_SPAN
        if self.kernel.tracing:
            name = str(params.get("name"))
            span = self.kernel.start_span(
                SpanKind.MCP_SERVER,
                f"tools/call {name}",
                prepared.server,
                source=f"mcp:{agent}",
                agent=agent,
                tool=name,
                principal=call.session.principal,
                stateless=call.stateless,
            )
        if prepared.refused is not None:
            tripped = RecursionLimitExceeded.from_mcp_result(prepared.refused)
            if tripped is not None:
                span.mark_refusal(tripped)
            span.end(_error_text(prepared.refused))
            return prepared.refused
        try:
            heartbeat = prepared.tool is None
            link = _client_channel(call, self.kernel, prepared.server, prepared.trace, heartbeat)
            with link as channel:
                if call.stateless:
                    self._read_round_trip(call, channel)
                if prepared.tool is not None:
                    result = await channel.run(lambda: surface.call_tool(prepared))
                else:
                    ask = partial(self._ask_agent, call, surface, prepared, session_id)
                    result = await channel.run(ask)
            result = self._settled(call, channel, result)
        except BaseException as exc:
            if span.recording:
                cancelled = isinstance(exc, trio.Cancelled)
                span.end("cancelled" if cancelled else f"{type(exc).__name__}: {exc}")
            raise
        if span.recording:
            span.end(_error_text(result))
        return result

    def _settled(
        self, call: _Call, channel: _client_channel, result: dict[str, Any]
    ) -> dict[str, Any]:
        """A tools/call's answer: ``result``, the run's question or a missing capability's error."""
        if channel.input_required is not None:
            requests, state = channel.input_required
            return p.input_required_result(
                requests, request_state=self._seal_state(state) if state is not None else None
            )
        if channel.missing:
            needed = sorted(channel.missing)
            raise rpc.JsonRpcError(
                p.MISSING_REQUIRED_CLIENT_CAPABILITY,
                f"this tool needs the client capabilities {', '.join(needed)}; declare them "
                + ("in _meta" if call.stateless else "in initialize"),
                {"requiredCapabilities": {c: {} for c in needed}},
            )
        return result

    def _unknown_tool(
        self, params: Mapping[str, Any], name: str, index: Mapping[str, Any]
    ) -> NoReturn:
        """Raise why the host surface has no tool ``name``: bad text, an agent down, a typo."""
        _check_input(params)
        for agent, reason in self.kernel.agent_errors.items():
            if agent_tool_name(agent) == name:
                raise AgentUnavailable(agent, reason)
        raise unknown_tool_error(name, index)

    async def _ask_agent(
        self, call: _Call, surface: AgentSurface, prepared: SurfaceCall, session_id: str | None
    ) -> dict[str, Any]:
        reply = await surface.ask(prepared, principal=call.session.principal, session_id=session_id)
        if reply.outputs:  # so that resources/read of their URIs returns them
            artifact_shelf(self.kernel).keep(_artifact_scope(call), reply.outputs)
        if call.stateless and reply.stop_reason == "input_required":
            ask = {"mode": "form", "message": reply.text, "requestedSchema": _ANSWER_SCHEMA}
            return p.input_required_result(
                {"answer": {"method": p.ELICITATION_CREATE, "params": ask}},
                request_state=self._seal_state(reply.session_id),
            )
        return surface.answer(reply)

    def _read_round_trip(self, call: _Call, channel: _client_channel) -> None:
        """Check a retry's ``requestState`` (signed by us) and ``inputResponses``."""
        state = call.params.get("requestState")
        if state is not None:
            channel.state_in = self._open_state(state)
        responses = call.params.get("inputResponses")
        if responses is None:
            return
        if not isinstance(responses, Mapping):
            raise rpc.JsonRpcError(
                rpc.INVALID_PARAMS,
                "params.inputResponses: expected an object keyed like inputRequests, "
                f"got {rpc.json_type(responses)}",
            )
        for key, value in responses.items():
            if not isinstance(value, Mapping):
                raise rpc.JsonRpcError(
                    rpc.INVALID_PARAMS,
                    f"params.inputResponses.{key}: expected the result object of that "
                    f"input request, got {rpc.json_type(value)}",
                )
        channel.responses_in = dict(responses)

    def _state_tag(self, session_id: str) -> bytes:
        digest = hmac.new(self._state_key, session_id.encode("utf-8"), hashlib.sha256)
        return digest.hexdigest()[:32].encode("ascii")

    def _seal_state(self, session_id: str) -> str:
        return f"{session_id}.{self._state_tag(session_id).decode()}"

    def _open_state(self, state: Any) -> str:
        if isinstance(state, str) and "." in state:
            session_id, _, tag = state.rpartition(".")
            if hmac.compare_digest(tag.encode("utf-8", "replace"), self._state_tag(session_id)):
                return session_id
        raise rpc.JsonRpcError(
            rpc.INVALID_PARAMS,
            "params.requestState: not a state this server issued; "
            "retry the original request without it",
        )

    async def _listen(self, call: _Call) -> dict[str, Any]:
        if call.notify is None:
            raise rpc.JsonRpcError(
                rpc.METHOD_NOT_FOUND, "subscriptions/listen needs a streaming transport"
            )
        wanted = rpc.param(call.params, "notifications", dict)
        keys = p.LIST_CHANGES
        honoured = {key: True for key in keys.values() if wanted.get(key) is True}
        tag = {p.META_SUBSCRIPTION_ID: str(call.request.id)}
        async with self.kernel.tap.subscribe(buffer=64, kinds=_CHANGE_KINDS) as events:
            ack = {"notifications": honoured, p.META: tag}
            await call.notify(rpc.Notification(p.NOTIFY_SUBSCRIPTIONS_ACK, ack).to_dict())
            async for event in events:
                for method in change_notifications(event):
                    if keys[method] in honoured:
                        await call.notify(rpc.Notification(method, {p.META: tag}).to_dict())
        return {}

    async def watch_changes(self, session: ServerSession, send: Notify) -> None:
        """Handshake era: send ``list_changed`` notifications to ``session`` while it lives."""
        async with self.kernel.tap.subscribe(buffer=64, kinds=_CHANGE_KINDS) as events:
            async for event in events:
                if not session.handshake_done or session.closed:
                    continue
                for method in change_notifications(event):
                    await send(rpc.Notification(method).to_dict())


_LISTS = {  # a list method → its result's field, the items' sort key, McpServer's method
    p.TOOLS_LIST: ("tools", "name", "tools"),
    p.RESOURCES_LIST: ("resources", "uri", "resources"),
    p.RESOURCES_TEMPLATES_LIST: ("resourceTemplates", "uriTemplate", "templates"),
    p.PROMPTS_LIST: ("prompts", "name", "prompts"),
}


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


# What the stateless era asks for when an agent's answer is a question (see _answer_from).
_ANSWER_SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string", "description": "Your answer"}},
    "required": ["answer"],
}


def _check_input(params: Any) -> None:
    """-32602 naming the field of ``params`` no answer echoing it could carry (check_json_input)."""
    try:
        check_json_input(params, "params")
    except InvalidInput as exc:
        raise p.field_error(exc) from None


def _answer_from(responses: Any) -> str | None:
    answer = responses.get("answer") if isinstance(responses, Mapping) else None
    if not isinstance(answer, Mapping) or answer.get("action") != "accept":
        return None
    content = answer.get("content")
    text = content.get("answer") if isinstance(content, Mapping) else None
    return text if isinstance(text, str) and text else None


def _error_text(result: Any) -> str | None:
    """A failed ``CallToolResult``'s text (cut to 500 characters), else None."""
    if not is_mapping(result) or not result.get("isError"):
        return None
    for block in result.get("content") or ():
        if is_mapping(block) and block.get("type") == "text":
            return str(block.get("text", ""))[:500]
    return "error"
