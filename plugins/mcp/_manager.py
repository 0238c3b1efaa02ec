"""The MCP client manager: connects roost to the configured MCP servers and keeps them up.

Servers come from ``[[mcp_servers]]``, agents' ``mcp_servers`` and the ``roost_mcp_servers``
hook; each is validated, connected in the background and supervised: one that dies loses
its tools, fails its calls in flight and is reconnected (1 s doubling to 60 s, forever).
Its tools become ``mcp_{server}_{tool}``; a server with resources or prompts also gets
``mcp_{server}_list_resources`` / ``_read_resource`` / ``_list_prompts`` / ``_get_prompt``.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Mapping, Sequence
from contextlib import suppress
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import attrs
import trio
from roost.kernel import (
    ConfigError,
    Event,
    KernelAPI,
    McpServerDescriptor,
    RecursionLimitExceeded,
    RoostError,
    Tool,
    ToolCall,
    ToolContext,
    ToolResult,
    ToolSpec,
    header_table,
    jsonrpc,
    namespaced,
    normalise_name,
    number_setting,
    public_url,
    redact,
    redact_from_logs,
    unknown_key,
)
from roost.plugins.http.client import credential_values

from . import _protocol as p
from ._client import (
    PROTOCOL_CHOICES,
    ClientOptions,
    McpClient,
    McpError,
    McpProtocolError,
    ServerRequestContext,
    open_mcp_client,
    probe_era,
)
from .transports.stdio import command_problem, open_stdio_transport

log = logging.getLogger("roost.mcp.manager")

EVENT_LOG = "MCP:LOG"
EVENT_PROGRESS = "MCP:PROGRESS"
EVENT_SERVER = "MCP:SERVER"

TRANSPORT_TYPES = ("stdio", "http", "sse")
MAX_SAMPLING_TOKENS = 1_000_000  # a server's sampling/createMessage maxTokens, at most
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SERVER_KEYS = ("name", "timeout_secs", "env", "transport", "protocol", "sampling", "allow_local")
_STDIO_KEYS = ("type", "command", "args", "cwd")
_HTTP_KEYS = ("type", "url", "headers")

BACKOFF_BASE_S = 1.0  # the first retry; doubling up to BACKOFF_MAX_S, forever
BACKOFF_MAX_S = 60.0
STABLE_AFTER_S = 30.0  # a connection that lasted this long starts the backoff afresh
PROBE_TIMEOUT_S = 5.0


# ---- configuration -----------------------------------------------------------------------


@attrs.frozen
class ServerConfig:
    """One validated MCP server entry. ``origin`` says where it was configured."""

    name: str
    transport: str  # stdio | http | sse
    command: str | None = None
    args: tuple[str, ...] = ()
    cwd: str | None = None
    url: str | None = None
    headers: Mapping[str, str] = attrs.field(factory=dict, repr=False)
    timeout_secs: float = 30.0
    env: tuple[str, ...] = ()
    protocol: str = "auto"
    sampling: bool = False
    allow_local: bool = False
    origin: str = "roost.toml"
    agent: str | None = None

    @property
    def secrets(self) -> tuple[str, ...]:
        """The credentials this server is given (among its headers, its environment
        variables and its URL): taken out of what it answers and of its errors."""
        env = {name: os.environ.get(name, "") for name in self.env}
        return credential_values({**self.headers, **env}, self.url)

    def public(self, *, admin: bool = True) -> dict[str, Any]:
        """What ``GET /api/mcp/servers`` shows: no header or env values, a public URL; a
        stdio command line (which may carry a token) to an ``admin`` only."""
        out: dict[str, Any] = {
            "name": self.name,
            "transport": self.transport,
            "timeout_secs": self.timeout_secs,
            "protocol": self.protocol,
            "sampling": self.sampling,
            "allow_local": self.allow_local,
            "origin": self.origin,
        }
        if self.transport == "stdio":
            if admin:
                out["command"] = self.command
                out["args"] = list(self.args)
            out["env"] = list(self.env)
        else:
            out["url"] = public_url(self.url or "")
            out["headers"] = sorted(self.headers)
        return out


def _fail(where: str, field: str, expected: str) -> ConfigError:
    return ConfigError(f"{where}: {field}: {expected}")


def _known_keys(
    where: str, entries: Mapping[str, Any], valid: Sequence[str], table: str, prefix: str = ""
) -> None:
    """Refuse an unknown key, naming it, the likely one, the valid keys and their table."""
    unknown = [k for k in entries if k not in valid]
    if unknown:
        raise unknown_key(where, f"{prefix}{unknown[0]}", valid, table)


def parse_server_config(
    raw: Any, *, where: str = "mcp_servers[0]", origin: str = "roost.toml", agent: str | None = None
) -> ServerConfig:
    """Validate one ``[[mcp_servers]]`` table; raises ConfigError naming the field and the fix."""
    if isinstance(raw, McpServerDescriptor):
        raw = attrs.asdict(raw, recurse=False)
    if not isinstance(raw, Mapping):
        raise ConfigError(
            f"{where}: expected a table with name and transport, got {type(raw).__name__}"
        )
    _known_keys(where, raw, _SERVER_KEYS, "[[mcp_servers]]")
    name = raw.get("name")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise _fail(
            where,
            "name",
            "expected 1-64 letters, digits, '_', '.' or '-' starting with "
            f"a letter or digit, got {name!r}",
        )
    where = f"{where} ({name})"
    timeout = raw.get("timeout_secs", 30.0)
    if number_setting(timeout, 0, 86400) is None:
        raise _fail(
            where,
            "timeout_secs",
            f"expected a number of seconds above 0 (at most 86400), got {timeout!r}",
        )
    env = raw.get("env", ())
    if not isinstance(env, (list, tuple)) or not all(
        isinstance(e, str) and _ENV_NAME.fullmatch(e) for e in env
    ):
        raise _fail(
            where,
            "env",
            f'expected an array of environment variable names like ["GITHUB_TOKEN"], got {env!r}',
        )
    protocol = raw.get("protocol", "auto")
    if protocol not in PROTOCOL_CHOICES:
        raise _fail(
            where, "protocol", f"expected one of {', '.join(PROTOCOL_CHOICES)}, got {protocol!r}"
        )
    for flag in ("sampling", "allow_local"):
        if not isinstance(raw.get(flag, False), bool):
            raise _fail(where, flag, f"expected true or false, got {raw[flag]!r}")
    transport = raw.get("transport")
    if not isinstance(transport, Mapping):
        raise _fail(
            where,
            "transport",
            'missing; add a [mcp_servers.transport] table with type = "stdio", "http" or "sse"',
        )
    kind = transport.get("type")
    if kind not in TRANSPORT_TYPES:
        raise _fail(where, "transport.type", f'expected "stdio", "http" or "sse", got {kind!r}')
    common = dict(
        name=name,
        transport=kind,
        timeout_secs=float(timeout),
        env=tuple(env),
        protocol=protocol,
        sampling=raw.get("sampling", False),
        allow_local=raw.get("allow_local", False),
        origin=origin,
        agent=agent,
    )
    keys = _STDIO_KEYS if kind == "stdio" else _HTTP_KEYS
    _known_keys(where, transport, keys, f'[mcp_servers.transport] (type = "{kind}")', "transport.")
    if kind == "stdio":
        command = transport.get("command")
        problem = command_problem(command)
        if problem:
            raise _fail(where, "transport.command", problem)
        args = transport.get("args", ())
        if not isinstance(args, (list, tuple)) or not all(isinstance(a, str) for a in args):
            raise _fail(where, "transport.args", f"expected an array of strings, got {args!r}")
        cwd = transport.get("cwd")
        if cwd is not None and (not isinstance(cwd, str) or not cwd):
            raise _fail(where, "transport.cwd", f"expected a directory path, got {cwd!r}")
        return ServerConfig(command=command, args=tuple(args), cwd=cwd, **common)
    url = transport.get("url")
    if not isinstance(url, str) or not url.strip():
        raise _fail(
            where, "transport.url", f'missing; an {kind} transport needs url = "https://host/mcp"'
        )
    if not re.match(r"^https?://[^/\s]+", url.strip(), re.IGNORECASE):
        shown = public_url(url.strip())  # the errors are listed by GET /api/mcp/servers
        got = f", got {shown!r}" if shown else ""
        raise _fail(where, "transport.url", f"expected an absolute http:// or https:// URL{got}")
    headers = header_table(transport.get("headers", {}), f"{where}: transport.headers")
    return ServerConfig(url=url.strip(), headers=headers, **common)


def check_config_servers(config: Any) -> None:
    """Check the config file's ``[[mcp_servers]]`` (fields, unique names); raise the first
    ConfigError."""
    where = getattr(config, "where", "roost.toml")
    seen: dict[str, int] = {}
    for index, raw in enumerate(getattr(config, "mcp_servers", ()) or ()):
        cfg = parse_server_config(raw, where=f"{where}: mcp_servers[{index}]")
        key = normalise_name(cfg.name)
        if key in seen:
            raise ConfigError(
                f"{where}: mcp_servers[{index}]: name: {cfg.name!r} is already "
                f"used by mcp_servers[{seen[key]}]; rename one"
            )
        seen[key] = index


def collect_server_configs(kernel: KernelAPI) -> tuple[list[ServerConfig], list[str]]:
    """Every server to connect: the config file, then agents, then plugins. Returns
    (configs, errors); a duplicate name is an error and the later entry is skipped."""
    configs: list[ServerConfig] = []
    errors: list[str] = []
    seen: dict[str, str] = {}

    def add(raw: Any, where: str, origin: str, agent: str | None = None) -> None:
        try:
            cfg = parse_server_config(raw, where=where, origin=origin, agent=agent)
        except ConfigError as exc:
            errors.append(str(exc))
            return
        key = normalise_name(cfg.name)
        if key in seen:
            errors.append(
                f"{where}: name: {cfg.name!r} is already used by the server "
                f"from {seen[key]}; rename one"
            )
            return
        seen[key] = origin
        configs.append(cfg)

    where = kernel.config.where
    for index, raw in enumerate(kernel.config.mcp_servers):
        add(raw, f"{where}: mcp_servers[{index}]", "roost.toml")
    for agent_name, manifest in sorted(kernel.agents.items()):
        for index, desc in enumerate(manifest.mcp_servers):
            add(
                desc, f"agent {agent_name}: mcp_servers[{index}]", f"agent:{agent_name}", agent_name
            )
    for plugin, results in kernel.plugins.call_each("roost_mcp_servers", config=kernel.config):
        for index, desc in enumerate(results):
            add(desc, f"plugin {plugin}: roost_mcp_servers[{index}]", f"plugin:{plugin}")
    return configs, errors


# ---- transports --------------------------------------------------------------------------


def open_transport(
    cfg: ServerConfig, *, allow_private: bool = False, secrets: Sequence[str] = ()
) -> Any:
    """Open the transport ``cfg`` describes (stdio process, Streamable HTTP, HTTP+SSE);
    ``secrets`` (its credentials, ``ServerState.secrets``) are kept out of a process's log."""
    if cfg.transport == "stdio":
        return open_stdio_transport(
            cfg.command or "",
            cfg.args,
            name=cfg.name,
            cwd=cfg.cwd,
            env=cfg.env,
            secrets=secrets,
        )
    from .transports.http import HttpTransport
    from .transports.sse import SseTransport, open_http_peer

    local = allow_private or cfg.allow_local
    return open_http_peer(
        HttpTransport if cfg.transport == "http" else SseTransport,
        cfg.url or "",
        headers=cfg.headers,
        name=cfg.name,
        timeout_secs=cfg.timeout_secs,
        allow_private=local,
        allow_loopback=local,
    )


# ---- results -----------------------------------------------------------------------------


def peer_attributes(
    config: ServerConfig, server_info: Mapping[str, Any], tool: str
) -> dict[str, Any]:
    """What a tool call's span says of the MCP server it reaches (``peer_*``; for a roost
    daemon, by its ``serverInfo`` name, ``peer_dashboard``: its base URL)."""
    out: dict[str, Any] = {"peer": "mcp", "peer_name": config.name, "peer_tool": tool}
    if config.url:
        out["peer_url"] = url = public_url(config.url)  # a key in it is no span's business
        name = server_info.get("name") if isinstance(server_info, Mapping) else None
        if isinstance(name, str) and name.startswith("roost"):
            parts = urlsplit(url)
            out["peer_dashboard"] = f"{parts.scheme}://{parts.netloc}"
    return out


# ---- the manager -------------------------------------------------------------------------


@attrs.define
class ServerState:
    """The live state of one configured server."""

    config: ServerConfig
    client: McpClient | None = None
    status: str = "pending"  # pending | connecting | connected | failed (retried) | stopped
    era: str | None = None
    tools: list[str] = attrs.field(factory=list)
    last_error: str | None = None
    restarts: int = 0
    connected_at: float | None = None
    next_retry_at: float | None = None  # Unix time of the next attempt while failed
    refresh: Any = None  # trio.MemorySendChannel
    # The config's credentials, read once (headers, environment, URL), not per notification.
    secrets: tuple[str, ...] = attrs.field(
        default=attrs.Factory(lambda self: self.config.secrets, takes_self=True), repr=False
    )


class McpManager:
    """Connects and supervises every configured MCP server for one kernel."""

    def __init__(self, kernel: KernelAPI) -> None:
        configs, self.config_errors = collect_server_configs(kernel)
        for error in self.config_errors:
            log.error("MCP server configuration skipped: %s", error)
        self.kernel = kernel
        self.states: dict[str, ServerState] = {c.name: ServerState(c) for c in configs}
        redact_from_logs(s for state in self.states.values() for s in state.secrets)
        self.elicitation_handler: Any = None  # set to an ElicitationHandler to allow elicitation
        self.allow_private = kernel.config.tools.allow_private_network

    def status(self, *, admin: bool = True) -> dict[str, Any]:
        """The body of ``GET /api/mcp/servers`` (``admin``: see ``ServerConfig.public``)."""
        configured = []
        connected = []
        for name, state in self.states.items():
            configured.append(
                {
                    **state.config.public(admin=admin),
                    "status": state.status,
                    "error": state.last_error,
                    "next_retry_at": state.next_retry_at,
                    "restarts": state.restarts,
                }
            )
            client = state.client
            if state.status == "connected" and client is not None:
                connected.append(
                    {
                        "name": name,
                        "transport": state.config.transport,
                        "tools_count": len(state.tools),
                        "tools": list(state.tools),
                        "protocol_version": client.protocol_version,
                        "era": client.era,
                        "server_info": redact(dict(client.server_info), state.secrets),
                        "capabilities": sorted(client.server_capabilities),
                        "connected_at": state.connected_at,
                    }
                )
        return {
            "configured": configured,
            "connected": connected,
            "errors": list(self.config_errors),
        }

    def client(self, server: str) -> McpClient:
        """The live client of ``server``; raises McpError when it is not connected."""
        state = self.states.get(server)
        if state is None:
            raise McpError(
                f"unknown MCP server {server!r}; configured: {', '.join(self.states) or 'none'}"
            )
        if state.client is None or state.status != "connected":
            raise McpError(
                f"MCP server {server!r} is not connected ({state.last_error or state.status}); "
                "roost reconnects in the background"
            )
        return state.client

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Supervise every server until cancelled (ready at once)."""
        async with trio.open_nursery() as nursery:
            for state in self.states.values():
                nursery.start_soon(self._supervise, state)
            task_status.started()
            await trio.sleep_forever()

    async def _supervise(self, state: ServerState) -> None:
        """Keep ``state``'s server connected: retry after a failure or a drop (``BACKOFF_*``)."""
        delay = BACKOFF_BASE_S
        try:
            while True:
                started = time.monotonic()
                state.status, state.next_retry_at = "connecting", None
                try:
                    await self._connect_once(state)
                    state.last_error = state.last_error or "the connection ended"
                except RoostError as exc:  # McpError included
                    state.last_error = str(exc)
                except (OSError, trio.TooSlowError) as exc:
                    state.last_error = f"{type(exc).__name__}: {exc}"
                except Exception as exc:  # a broken server must not take the manager down
                    log.exception("MCP server %s failed", state.config.name)
                    state.last_error = f"{type(exc).__name__}: {exc}"
                state.last_error = redact(state.last_error, state.secrets)
                if time.monotonic() - started >= STABLE_AFTER_S:
                    delay = BACKOFF_BASE_S
                state.status, state.next_retry_at = "failed", time.time() + delay
                state.restarts += 1
                log.warning(
                    "MCP server %s is down (retrying in %g s): %s",
                    state.config.name,
                    delay,
                    state.last_error,
                )
                self._publish(state, "down")
                await trio.sleep(delay)
                delay = min(delay * 2, BACKOFF_MAX_S)
        finally:
            state.status, state.next_retry_at = "stopped", None

    async def _connect_once(self, state: ServerState) -> None:
        cfg = state.config
        if cfg.transport == "stdio" and cfg.protocol == "auto" and state.era is None:
            with trio.fail_after(PROBE_TIMEOUT_S + 10):
                async with open_transport(cfg, secrets=state.secrets) as probe_transport:
                    state.era = await probe_era(
                        probe_transport,
                        timeout=min(cfg.timeout_secs, PROBE_TIMEOUT_S),
                        server_name=cfg.name,
                    )
            log.info("MCP server %s speaks the %s era", cfg.name, state.era)
        refresh_send, refresh_receive = trio.open_memory_channel[str](1)
        state.refresh = refresh_send
        era = state.era if cfg.transport == "stdio" else None
        opened = open_transport(cfg, allow_private=self.allow_private, secrets=state.secrets)
        async with opened as transport:
            options = ClientOptions(  # once open: a handler set while it opened counts
                server_name=cfg.name,
                protocol=cfg.protocol,
                timeout_secs=cfg.timeout_secs,
                sampling=self._sample if cfg.sampling else None,
                elicitation=self.elicitation_handler,
                roots=self._roots,
                on_notification=lambda method, params: self._on_notification(state, method, params),
                secrets=state.secrets,
            )
            async with open_mcp_client(transport, options, era=era) as client:
                try:
                    await self._sync_tools(state, client)
                    state.client = client
                    state.status = "connected"
                    state.connected_at = time.time()
                    state.last_error = None
                    self._publish(state, "connected")
                    log.info(
                        "MCP server %s connected (%s, %d tools)",
                        cfg.name,
                        client.protocol_version,
                        len(state.tools),
                    )
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(self._refresher, state, client, refresh_receive)
                        if client.era == "modern" and _announces_changes(
                            client.server_capabilities
                        ):
                            nursery.start_soon(self._listen, state, client)
                        await client.closed.wait()
                        state.last_error = client.closed_reason
                        nursery.cancel_scope.cancel()
                finally:
                    state.client = None
                    state.refresh = None
                    for name in state.tools:
                        self.kernel.remove_tool(name)
                    state.tools = []

    def _on_notification(self, state: ServerState, method: str, params: Mapping[str, Any]) -> None:
        name = state.config.name
        if method == p.NOTIFY_MESSAGE:
            params = redact(params, state.secrets)
            level = str(params.get("level", "info"))
            log.log(_LEVELS.get(level, logging.INFO), "MCP server %s: %s", name, params.get("data"))
            self.kernel.publish(
                Event(EVENT_LOG, f"mcp:{name}", payload={"server": name, **dict(params)})
            )
        elif method in p.LIST_CHANGES:
            if state.refresh is not None:
                with suppress(trio.WouldBlock):  # a refresh is queued: it will see this change too
                    state.refresh.send_nowait(method)

    async def _listen(self, state: ServerState, client: McpClient) -> None:
        """Keep a 2026-07-28 ``subscriptions/listen`` open for list-change notifications."""
        try:
            await client.listen()
        except McpError as exc:
            log.info("MCP server %s: subscriptions/listen ended: %s", state.config.name, exc)

    async def _refresher(self, state: ServerState, client: McpClient, receive: Any) -> None:
        async for _method in receive:
            try:
                await self._sync_tools(state, client)
            except McpError as exc:
                log.warning("MCP server %s: refreshing tools failed: %s", state.config.name, exc)

    def _publish(self, state: ServerState, what: str) -> None:
        payload = {
            "server": state.config.name,
            "status": what,
            "error": state.last_error,
            "next_retry_at": state.next_retry_at,
        }
        self.kernel.publish(Event(EVENT_SERVER, f"mcp:{state.config.name}", payload=payload))

    async def _sync_tools(self, state: ServerState, client: McpClient) -> None:
        remote = (
            await client.list_tools()
            if "tools" in client.server_capabilities or client.era == "handshake"
            else []
        )
        wanted: dict[str, Tool] = {}
        for item in remote:
            tool = self._make_tool(state, item)
            if tool is not None and tool.spec.name not in wanted:
                wanted[tool.spec.name] = tool
        offers = await self._offers(state, client)
        taken = {t.spec.original_name for t in wanted.values()}
        for tool in self._extra_tools(state, taken, offers):
            wanted.setdefault(tool.spec.name, tool)
        registry = self.kernel.registry
        for name in list(state.tools):
            if name not in wanted:
                self.kernel.remove_tool(name)
        kept = []
        for name, tool in wanted.items():
            if name in state.tools and name in registry:
                registry.unregister(name)  # replace silently: the spec may have changed
                registry.register(tool)
                kept.append(name)
                continue
            try:
                self.kernel.add_tool(tool)
                kept.append(name)
            except RoostError as exc:
                log.error("MCP server %s: tool %s skipped: %s", state.config.name, name, exc)
        state.tools = sorted(kept)

    def _make_tool(self, state: ServerState, item: Mapping[str, Any]) -> Tool | None:
        server = state.config.name
        original = item.get("name")
        if not isinstance(original, str) or not original:
            log.warning("MCP server %s listed a tool without a name (skipped)", server)
            return None
        schema = item.get("inputSchema")
        if not isinstance(schema, Mapping):
            schema = {"type": "object", "properties": {}}
        annotations = item.get("annotations")
        output_schema = item.get("outputSchema")
        secrets = state.secrets
        title = item.get("title") if isinstance(item.get("title"), str) else None
        spec = ToolSpec(
            name=namespaced(server, original),
            # What the model reads each turn: as much the server's word as a result.
            description=redact(str(item.get("description") or ""), secrets),
            input_schema=dict(schema),
            title=redact(title, secrets),
            output_schema=dict(output_schema) if isinstance(output_schema, Mapping) else None,
            annotations=dict(annotations) if isinstance(annotations, Mapping) else None,
            owner=f"mcp:{server}",
            original_name=original,
            untrusted=True,
            timeout_s=state.config.timeout_secs + 1.0,
        )

        async def call_remote(call: ToolCall, ctx: ToolContext) -> ToolResult:
            try:
                client = self.client(server)
            except McpError as exc:  # not connected (roost reconnects in the background)
                return ToolResult.error(str(exc))
            trace = call.trace or ctx.trace
            meta = trace.to_meta() if trace is not None else None
            caller = call.caller or ctx.agent
            if ctx.span.recording:  # the call's span is the client hop: name the peer
                ctx.span.set(peer_attributes(state.config, client.server_info, original))

            def progress(params: Mapping[str, Any]) -> None:
                self.kernel.publish(
                    Event(
                        EVENT_PROGRESS,
                        f"mcp:{server}",
                        target=caller,
                        payload=redact({"server": server, "tool": original, **params}, secrets),
                        trace=trace,
                    )
                )

            try:
                result = await client.call_tool(
                    original,
                    call.arguments,
                    meta=meta,
                    timeout=state.config.timeout_secs,
                    on_progress=progress,
                    caller=caller,
                )
            except McpError as exc:
                # A JSON-RPC error: how roost refuses a hop, before any tool execution error.
                data = exc.data if isinstance(exc, McpProtocolError) else None
                if isinstance(data, Mapping) and (
                    data.get("code") == "recursion_limit" or exc.rpc_code == p.RECURSION_LIMIT
                ):
                    raise RecursionLimitExceeded.from_dict(data) from None
                return ToolResult.error(str(exc))
            return ToolResult.from_mcp(result)

        return Tool(spec, call_remote, secrets=secrets)

    async def _offers(self, state: ServerState, client: McpClient) -> set[str]:
        """Which of resources / prompts the server really has (not merely declares)."""
        offers = set()
        caps = client.server_capabilities
        checks = (
            ("resources", client.list_resources),
            ("resources", client.list_resource_templates),
            ("prompts", client.list_prompts),
        )
        for kind, lister in checks:
            if kind in caps and kind not in offers:
                try:
                    if await lister():
                        offers.add(kind)
                except McpError as exc:
                    log.info("MCP server %s: listing %s failed: %s", state.config.name, kind, exc)
        return offers

    def _extra_tools(self, state: ServerState, taken: set[Any], offers: set[str]) -> list[Tool]:
        server = state.config.name

        async def list_resources(call: ToolCall, ctx: ToolContext) -> ToolResult:
            items = await self.client(server).list_resources()
            text = "\n".join(
                f"{r.get('uri')}  {r.get('name', '')}  {r.get('description', '')}".rstrip()
                for r in items
            )
            text = text or "(no resources)"
            return ToolResult(({"type": "text", "text": text},), {"resources": items})

        async def read_resource(call: ToolCall, ctx: ToolContext) -> ToolResult:
            result = await self.client(server).read_resource(
                str(call.arguments.get("uri", "")), caller=call.caller or ctx.agent
            )
            contents = [i for i in result.get("contents") or () if isinstance(i, Mapping)]
            return ToolResult(tuple({"type": "resource", "resource": dict(i)} for i in contents))

        async def list_prompts(call: ToolCall, ctx: ToolContext) -> ToolResult:
            items = await self.client(server).list_prompts()
            text = "\n".join(f"{i.get('name')}: {i.get('description', '')}" for i in items)
            text = text or "(no prompts)"
            return ToolResult(({"type": "text", "text": text},), {"prompts": items})

        async def get_prompt(call: ToolCall, ctx: ToolContext) -> ToolResult:
            args = call.arguments.get("arguments") or {}
            result = await self.client(server).get_prompt(
                str(call.arguments.get("name", "")), args, caller=call.caller or ctx.agent
            )
            lines = []
            for message in result.get("messages") or ():
                content = message.get("content") if isinstance(message, Mapping) else None
                text = content.get("text") if isinstance(content, Mapping) else None
                text = text if text is not None else "[non-text content]"
                lines.append(f"{message.get('role', '?')}: {text}")
            return ToolResult(({"type": "text", "text": "\n".join(lines)},), {"prompt": result})

        def guarded(run: Any) -> Any:
            async def handler(call: ToolCall, ctx: ToolContext) -> ToolResult:
                try:
                    return await run(call, ctx)
                except McpError as exc:
                    return ToolResult.error(str(exc))

            return handler

        empty = {"type": "object", "properties": {}, "additionalProperties": False}
        uri = {"type": "string", "description": "the resource URI"}
        named = {
            "name": {"type": "string"},
            "arguments": {"type": "object", "additionalProperties": {"type": "string"}},
        }
        extras = {
            "resources": (
                ("list_resources", "List the resources of MCP server {}.", empty, list_resources),
                (
                    "read_resource",
                    "Read a resource of MCP server {} by URI.",
                    {"type": "object", "properties": {"uri": uri}, "required": ["uri"]},
                    read_resource,
                ),
            ),
            "prompts": (
                ("list_prompts", "List the prompts of MCP server {}.", empty, list_prompts),
                (
                    "get_prompt",
                    "Get a prompt of MCP server {} by name, with its arguments.",
                    {"type": "object", "properties": named, "required": ["name"]},
                    get_prompt,
                ),
            ),
        }
        out = []
        for kind, tools in extras.items():
            for name, what, schema, run in tools if kind in offers else ():
                if name not in taken:
                    spec = ToolSpec(
                        name=namespaced(server, name),
                        description=what.format(server),
                        input_schema=schema,
                        owner=f"mcp:{server}",
                        original_name=name,
                        untrusted=True,
                        annotations={"readOnlyHint": True},
                        timeout_s=state.config.timeout_secs + 1.0,
                    )
                    out.append(Tool(spec, guarded(run), secrets=state.secrets))
        return out

    def _roots(self, context: ServerRequestContext) -> list[dict[str, Any]]:
        """The calling agent's workspace (or, for an agent's own server, that agent's)."""
        state = self.states.get(context.server)
        agent = context.caller or (state.config.agent if state else None)
        manifest = self.kernel.agents.get(agent) if agent else None
        if manifest is None:
            return []
        path = Path(self.kernel.workspace_for(manifest)).resolve()
        return [{"uri": path.as_uri(), "name": f"{agent} workspace"}]

    async def _sample(
        self, params: Mapping[str, Any], context: ServerRequestContext
    ) -> dict[str, Any]:
        """Answer ``sampling/createMessage`` with the calling agent's own provider."""
        from roost.kernel import CompletionRequest, Message  # the agent loop's types, on use

        agent = context.caller
        state = self.states.get(context.server)
        secrets = state.secrets if state is not None else ()
        provider = self.kernel.provider_for(agent) if agent else None
        if provider is None:
            raise jsonrpc.JsonRpcError(
                jsonrpc.INVALID_REQUEST,
                "sampling: no agent is calling this server right now, "
                "so there is no model to answer with",
            )
        messages = []
        for index, item in enumerate(params.get("messages") or ()):
            if not isinstance(item, Mapping):
                raise jsonrpc.JsonRpcError(
                    jsonrpc.INVALID_PARAMS, f"params.messages[{index}]: expected an object"
                )
            content = item.get("content")
            blocks = content if isinstance(content, list) else [content]
            text = "\n".join(
                str(b.get("text", ""))
                for b in blocks
                if isinstance(b, Mapping) and b.get("type") == "text"
            )
            role = "assistant" if item.get("role") == "assistant" else "user"
            messages.append(Message(role=role, content=redact(text, secrets)))
        if not messages:
            raise jsonrpc.JsonRpcError(
                jsonrpc.INVALID_PARAMS, "params.messages: expected at least one message"
            )
        max_tokens = tokens = params.get("maxTokens")
        if isinstance(tokens, float) and tokens.is_integer():
            tokens = int(tokens)  # 100.0 is JSON Schema's integer (PHP writes it so)
        tokens = number_setting(tokens, 1, MAX_SAMPLING_TOKENS, integer=True, closed=True)
        if tokens is None:  # required (CreateMessageRequestParams): the vendor needs a cap
            said = "missing" if "maxTokens" not in params else f"got {max_tokens!r:.40}"
            raise jsonrpc.JsonRpcError(
                jsonrpc.INVALID_PARAMS,
                f"params.maxTokens: expected an integer from 1 to {MAX_SAMPLING_TOKENS}, {said}",
            )
        request = CompletionRequest(
            agent=agent,
            system=redact(str(params.get("systemPrompt") or ""), secrets),
            messages=tuple(messages),
            parameters={"max_tokens": tokens},
        )
        completion = await provider.complete(request)
        return {
            "role": "assistant",
            "content": {"type": "text", "text": completion.text},
            "model": getattr(provider, "name", "roost"),  # not part of the Provider protocol
            "stopReason": "maxTokens" if completion.stop_reason == "max_tokens" else "endTurn",
        }


def _announces_changes(caps: Mapping[str, Any]) -> bool:
    return any(
        isinstance(caps.get(k), Mapping) and caps[k].get("listChanged")
        for k in ("tools", "prompts", "resources")
    )


_LEVELS = {"debug": logging.DEBUG, "warning": logging.WARNING, "error": logging.ERROR}
_LEVELS.update(dict.fromkeys(("critical", "alert", "emergency"), logging.CRITICAL))
