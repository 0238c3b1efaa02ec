"""A2A on the daemon: agent cards, the JSON-RPC and HTTP+JSON bindings, SSE, the 0.1 routes.

Routes (``/a2a`` is ``a2a.listen_path``; ``make_routes`` lists them): the primary agent's
cards at ``/.well-known/``, every agent's under ``/a2a/agents/{name}/``; JSON-RPC at
``/a2a/jsonrpc`` (the root endpoint: ``message.metadata.agent``, else the task's agent, else
the primary agent) and ``/a2a/agents/{name}/jsonrpc``; HTTP+JSON under ``[...]/rest/`` (0.3
under ``rest/v1/``, see ``_rest03``); the seed's 0.1 ``/a2a/tasks/...`` routes.

The primary agent is ``a2a.default_agent``, else the A2A agent whose name sorts first.
Errors take the shape of the route's binding (JSON-RPC error, AIP-193 error object).
"""

from __future__ import annotations

import difflib
import hashlib
import json
import logging
import math
from collections.abc import AsyncIterator, Mapping
from functools import partial
from pathlib import Path
from typing import Any

import trio
from roost.kernel import (
    ConfigError,
    InvalidTraceContext,
    KernelAPI,
    RecursionLimitExceeded,
    RouteDescriptor,
    SpanKind,
    StoreError,
    TraceContext,
    is_mapping,
    jsonrpc,
    redact_from_logs,
)
from roost.plugins.http import PlainRequest, PlainResponse, bearer_token, principal_of, tokens_match
from roost.plugins.http.client import credential_values

from . import _models as m
from . import _protocol as p
from . import _rest03 as rest03
from ._http_errors import A2A_JSON, media_type, render_error
from ._push import PushDispatcher, PushSettings
from ._settings import A2ASettings
from ._store import TaskStoreError, open_task_store
from ._tasks import LiveTask, TaskManager, storage_failed

log = logging.getLogger("roost.a2a")

CARD_CACHE_CONTROL = "public, max-age=300"
_SERVICE = "roost.plugins.a2a.service"  # its key in kernel.extensions
_INPUT_MODES = ["text/plain", "application/json"]
_OUTPUT_MODES = ["text/plain"]
# An agent that can hand over artifacts (the artifact tool, or another agent's via agent_*
# and a2a_* tools) may answer with data parts and files of any type as well.
_ARTIFACT_OUTPUT_MODES = ["text/plain", "application/json", "application/octet-stream"]


def service_for(kernel: KernelAPI) -> A2AService | None:
    """The running A2A service of ``kernel`` (None before it started)."""
    return kernel.extensions.get(_SERVICE)


class A2AService:
    """Everything A2A needs while the kernel runs: settings, task manager, push dispatcher."""

    def __init__(self, kernel: KernelAPI, settings: A2ASettings) -> None:
        self.kernel = kernel
        self.settings = settings
        self.tasks: TaskManager | None = None
        self.external_peers: dict[str, Any] = {}  # name → its discovery state (PeerState)
        # Before any service starts and logs: its own key, and its external agents'.
        redact_from_logs((settings.api_key or "",))
        for agent in settings.external_agents:
            redact_from_logs(credential_values(agent.headers, agent.url))

    async def run(self, kernel: KernelAPI, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Open the task store, recover, serve until cancelled (the kernel's service)."""
        async with open_task_store(
            Path(kernel.config.home) / "a2a.db",
            max_tasks=self.settings.max_tasks,
            synchronous=kernel.config.store.synchronous,
            legacy_owner=kernel.host_principal,  # who owns tasks from before principals
        ) as store:
            async with trio.open_nursery() as nursery:
                push = None
                if self.settings.push_notifications:
                    allow = self.settings.push_allow_private
                    push = PushDispatcher(
                        store, PushSettings(allow_private=allow, allow_loopback=allow)
                    )
                    await nursery.start(push.run)
                self.tasks = TaskManager(
                    kernel,
                    store,
                    nursery,
                    push=push,
                    open_per_caller=self.settings.open_tasks_per_caller,
                    input_required_ttl_s=self.settings.input_required_ttl_s,
                )
                await self.tasks.recover()
                kernel.extensions[_SERVICE] = self
                if self.settings.external_agents:
                    from ._external import discover_external_agents

                    nursery.start_soon(discover_external_agents, self)
                task_status.started()
                try:
                    await trio.sleep_forever()
                finally:
                    kernel.extensions.pop(_SERVICE, None)
                    nursery.cancel_scope.cancel()

    def a2a_agents(self) -> list[str]:
        return [n for n in self.kernel.agents if self.is_a2a_agent(n)]

    def is_a2a_agent(self, name: str) -> bool:
        """``name in a2a_agents()``, without listing them."""
        man = self.kernel.agents.get(name)
        return man is not None and man.a2a.enabled and name not in self.kernel.agent_errors

    def primary_agent(self) -> str | None:
        """``a2a.default_agent``, else the A2A agent whose name sorts first; None if none.
        Available or not: an unavailable one answers 503, never passing its messages on."""
        agents = self.kernel.agents
        default = self.settings.default_agent
        if default:
            man = agents.get(default)
            return default if man is not None and man.a2a.enabled else None
        return next((n for n in sorted(agents) if agents[n].a2a.enabled), None)

    def no_primary(self) -> str:
        """Why there is no primary agent, and the fix."""
        known = ", ".join(self.a2a_agents()) or "none"
        if self.settings.default_agent:
            return (
                f"a2a.default_agent {self.settings.default_agent!r} is not an agent "
                f"reachable over A2A (A2A agents: {known}); fix it in roost.toml"
            )
        return (
            'no agent is reachable over A2A (enable one with "a2a": '
            '{"enabled": true} in its agent.json)'
        )

    def unavailable_reason(self, name: str) -> str | None:
        """Why an A2A agent cannot answer now (e.g. no provider key), else None."""
        man = self.kernel.agents.get(name)
        return self.kernel.agent_errors.get(name) if man is not None and man.a2a.enabled else None

    def check_agent(self, name: str) -> None:
        reason = self.unavailable_reason(name)
        if reason is not None:
            raise agent_unavailable(name, reason)
        if not self.is_a2a_agent(name):
            known = ", ".join(self.a2a_agents()) or "none"
            raise m.A2AError(
                m.INVALID_PARAMS, f"agent {name!r} is not reachable over A2A; A2A agents: {known}"
            )

    async def agent_for_send(
        self, route_agent: str | None, params: p.SendParams, owner: str
    ) -> str:
        """The endpoint's agent; at the root, ``metadata.agent``, else the agent of the task it
        continues, else the primary agent."""
        if route_agent:
            return route_agent
        for meta in (params.message.metadata, params.metadata):
            if is_mapping(meta) and isinstance(meta.get("agent"), str):
                self.check_agent(meta["agent"])
                return meta["agent"]
        existing = params.message.task_id or params.task_id
        if existing:
            try:
                _, served_by, _ = await self._tasks().find(existing, owner=owner)
            except m.A2AError:
                pass  # a new task (0.1: the client's id), or -32001 from the send itself
            else:
                return served_by
        primary = self.primary_agent()
        if primary is None:
            raise m.invalid("message.metadata.agent", self.no_primary())
        self.check_agent(primary)
        return primary

    async def execute(
        self, op: p.Operation, agent: str | None, trace: TraceContext | None, req: PlainRequest
    ) -> Any:
        """Run ``op`` for the request's principal: its result in ``op.dialect`` (a stream's
        events, errors raised before any byte is sent); storage failing is -32603 (HTTP 503)."""
        try:
            tasks = self._tasks()
            principal = principal_of(req)  # the tasks' owner (the host if not authenticated)
            owner = principal.name if principal is not None else self.kernel.host_principal
            d = op.dialect
            if op.op == "send":
                wait = not op.params.options.return_immediately
                task = (await self._send(op, agent, trace, owner, wait=wait)).task
                body = task.to_json(d, history_length=op.params.options.history_length)
                return {"task": body} if d == m.V1 or d == m.REST03 else body  # 0.3, 0.1: bare
            if op.op == "stream":
                return _render(tasks.follow(await self._send(op, agent, trace, owner)), d)
            if op.op == "subscribe":
                live = await tasks.subscribe(op.params.id, agent=agent, owner=owner)
                return _render(tasks.follow(live), d)
            if op.op == "get":
                task, _, origin = await tasks.find(op.params.id, agent=agent, owner=owner)
                # A task made in the 0.1 shape reads back in it over 0.3 JSON-RPC (and 0.1).
                dialect = m.V01 if origin == m.V01 and d == m.V03 else d
                return task.to_json(dialect, history_length=op.params.history_length)
            if op.op == "cancel":
                task = await tasks.cancel(op.params.id, agent=agent, owner=owner)
                return task.to_json(d)
            if op.op == "list":
                q = op.params
                found, token, total = await tasks.list(q, agent=agent, owner=owner)
                shown = {
                    "history_length": q.history_length,
                    "include_artifacts": q.include_artifacts,
                }
                return {
                    "tasks": [t.to_json(d, **shown) for t in found],
                    "nextPageToken": token,
                    "pageSize": q.page_size,
                    "totalSize": total,
                }
            if op.op == "push_set":
                config = await tasks.set_push(op.params, agent=agent, owner=owner)
                return config.to_json(d)
            if op.op in ("push_get", "push_list"):  # a get without an id: the first config
                configs = await tasks.push_configs(op.params.task_id, agent=agent, owner=owner)
                listed = [c.to_json(d) for c in configs if op.params.id in (None, c.id)]
                if op.op == "push_get":
                    if listed:
                        return listed[0]
                    raise m.A2AError(
                        m.TASK_NOT_FOUND,
                        f"task {op.params.task_id} has no push-notification config "
                        f"{op.params.id!r}",
                    )
                if d == m.V1:
                    return {"configs": listed, "nextPageToken": ""}
                return {"configs": listed} if d == m.REST03 else listed
            if op.op == "push_delete":
                await tasks.delete_push(
                    op.params.task_id, op.params.id or "", agent=agent, owner=owner
                )
                return None if d == m.V03 else {}  # 1.0's, and protobuf's, Empty
            if op.op == "card":
                if not self.settings.api_key:
                    raise m.A2AError(
                        m.UNSUPPORTED_OPERATION,
                        "The agent does not support authenticated extended cards "
                        "(set a2a.api_key to enable them)",
                    )
                name = agent or self.primary_agent()
                if name is None:
                    raise m.A2AError(m.EXTENDED_CARD_NOT_CONFIGURED, self.no_primary())
                self.check_agent(name)
                card = build_card(self, name, req.base_url, extended=True, root=agent is None)
                return rest03.card_out(card) if d == m.REST03 else card
            raise m.A2AError(m.METHOD_NOT_FOUND, f"operation {op.op!r} is not implemented")
        except (TaskStoreError, StoreError) as exc:
            raise storage_failed(exc) from None

    async def _send(
        self,
        op: p.Operation,
        agent: str | None,
        trace: TraceContext | None,
        owner: str,
        *,
        wait: bool = False,
    ) -> LiveTask:
        """Start ``owner``'s task, or with ``wait`` run it here until it settles."""
        params: p.SendParams = op.params
        target = await self.agent_for_send(agent, params, owner)
        return await self._tasks().send(
            target,
            params.message,
            params.options,
            trace=self._caller_trace(params, trace, target),
            # 0.3 REST renders 1.0 tasks: stored (and pushed) as 1.0, as earlier daemons read it
            dialect=m.V1 if op.dialect == m.REST03 else op.dialect,
            task_id=params.task_id,
            owner=owner,
            wait=wait,
        )

    def _caller_trace(
        self, params: p.SendParams, headers: TraceContext | None, target: str
    ) -> TraceContext | None:
        """The deepest of the contexts in the message's and the request's metadata and the
        headers (none can lower the count); a hop past the limit is refused here (-32010)."""
        try:
            trace = TraceContext.deepest(
                TraceContext.from_meta(params.message.metadata, field="message.metadata"),
                TraceContext.from_meta(params.metadata, field="metadata"),
                headers,
            )
        except InvalidTraceContext as exc:
            raise m.invalid(exc.field, exc.problem) from None
        if trace is not None:
            try:
                trace.check_hop(target, max_depth=self.kernel.max_depth_for(target))
            except RecursionLimitExceeded as exc:
                caller = trace.path[-1] if trace.path else "a2a"
                self.kernel.breaker_tripped(exc, caller=caller, target=target, trace=trace)
                # The refused send is a server span of its own, ended at once, marked.
                span = self.kernel.start_span(
                    SpanKind.A2A_SERVER, f"A2A {target}", trace.nested(), source="a2a", agent=target
                )
                span.mark_refusal(exc)
                span.end(str(exc))
                raise m.A2AError(m.RECURSION_LIMIT, str(exc)) from None
        return trace

    def _tasks(self) -> TaskManager:
        if self.tasks is None:
            raise m.A2AError(
                m.INTERNAL_ERROR, "the A2A service is not running yet; retry in a moment"
            )
        return self.tasks


def agent_unavailable(name: str, reason: str) -> m.A2AError:
    """-32603, HTTP 503 on every binding: the agent cannot answer now (``reason`` says why)."""
    return m.A2AError(
        m.INTERNAL_ERROR,
        f"agent {name!r} is unavailable: {reason}",
        unavailable=True,
        jsonrpc_status=503,
    )


def check_default_agent(kernel: KernelAPI, settings: A2ASettings) -> None:
    """ConfigError (with a did-you-mean) when ``a2a.default_agent`` names no A2A agent: it
    stops the boot rather than serve a root URL that refuses everything."""
    name = settings.default_agent
    if not name:
        return
    man = kernel.agents.get(name)
    if man is not None and man.a2a.enabled:
        return
    known = ", ".join(n for n, a in kernel.agents.items() if a.a2a.enabled) or "none"
    if man is not None:
        problem = (
            f'agent {name!r} is not reachable over A2A; enable it with "a2a": {{"enabled": true}} '
            f"in its agent.json, or name another (A2A agents: {known})"
        )
    else:
        close = difflib.get_close_matches(name, list(kernel.agents), n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        problem = f"no agent is called {name!r}; {hint}A2A agents: {known}"
        if kernel.manifest_errors:
            problem += " (some agent manifests failed to load; see the errors above)"
    raise ConfigError(
        f"{kernel.config.where}: a2a.default_agent: {problem}; fix it, or remove it to use "
        "the first A2A agent"
    )


async def _render(events: AsyncIterator[m.Event], dialect: str) -> AsyncIterator[dict]:
    async for event in events:
        if dialect == m.V01 and isinstance(event, m.Task):
            continue
        yield m.event_to_json(event, dialect)


def build_card(
    service: A2AService, name: str, base_url: str, *, extended: bool = False, root: bool = False
) -> dict[str, Any]:
    """The A2A 1.0 agent card of ``name`` (with the 0.3 fields older clients read);
    ``root``: the host's root card, naming the root endpoints."""
    kernel = service.kernel
    manifest = kernel.agents[name]
    endpoint = f"{base_url.rstrip('/')}{service.settings.listen_path}"
    if not root:  # the root endpoints route by metadata.agent
        endpoint += f"/agents/{name}"
    skills = []
    for s in manifest.a2a.skills:
        lists = {"examples": s.examples, "inputModes": s.input_modes, "outputModes": s.output_modes}
        skills.append(_skill(s.id, s.name, s.description, s.tags, **lists))
    skills += [
        _skill(
            f"tool:{spec.name}", spec.title or spec.name, spec.description or spec.name, ["tool"]
        )
        for spec in kernel.exposed_tools(name)
    ]
    if not skills:
        skills.append(_skill("chat", name, manifest.description or f"Talk to {name}", ["chat"]))
    hands_over = any(
        spec.name == "artifact" or spec.owner in ("agents", "a2a")
        for spec in kernel.list_tools(name)
    )
    card: dict[str, Any] = {
        "name": name,
        "description": manifest.description or f"roost agent {name}",
        "supportedInterfaces": [
            {"url": f"{endpoint}/jsonrpc", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
            {"url": f"{endpoint}/rest", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"},
            {"url": f"{endpoint}/jsonrpc", "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
        ],
        "provider": {"organization": "roost", "url": base_url.rstrip("/")},
        "version": manifest.version or "0.0.0",
        "capabilities": {
            "streaming": True,
            "pushNotifications": service.settings.push_notifications,
            "extendedAgentCard": bool(service.settings.api_key),
        },
        "defaultInputModes": list(_INPUT_MODES),
        "defaultOutputModes": list(_ARTIFACT_OUTPUT_MODES if hands_over else _OUTPUT_MODES),
        "skills": skills,
        # 0.3 fields, so 0.3 clients can use the same card
        "preferredTransport": "JSONRPC",
        "protocolVersion": "0.3",
        "url": f"{endpoint}/jsonrpc",
    }
    http = kernel.config.http
    if service.settings.api_key or http.api_key or http.keys:
        card["securitySchemes"] = {"bearer": {"httpAuthSecurityScheme": {"scheme": "Bearer"}}}
        card["securityRequirements"] = [{"schemes": {"bearer": {"list": []}}}]
    if extended:
        card["description"] += " (extended card)"
    return card


def legacy_card(service: A2AService, name: str, base_url: str) -> dict[str, Any]:
    """The seed's 0.1 card (``/.well-known/agent.json``)."""
    manifest = service.kernel.agents[name]
    return {
        "name": name,
        "description": manifest.description or f"roost agent {name}",
        "url": f"{base_url.rstrip('/')}{service.settings.listen_path}",
        "version": manifest.version or "0.0.0",
        "capabilities": {
            "streaming": True,
            "pushNotifications": service.settings.push_notifications,
            "stateTransitionHistory": True,
        },
        "defaultInputModes": ["text"],
        "defaultOutputModes": ["text"],
        "skills": [_skill(s.id, s.name, s.description, s.tags) for s in manifest.a2a.skills],
    }


def _skill(skill_id: str, name: str, description: str, tags: Any, **lists: Any) -> dict[str, Any]:
    """A card's skill; each of ``lists`` (examples, inputModes, ...) only when not empty."""
    skill = {"id": skill_id, "name": name, "description": description, "tags": list(tags)}
    return skill | {key: list(value) for key, value in lists.items() if value}


def _json(body: Any, status: int = 200, content_type: str = "application/json") -> PlainResponse:
    return PlainResponse(status, _dumps(body).encode(), content_type)


def _dumps(body: Any) -> str:
    """JSON text, never with ``NaN`` / ``Infinity`` (a strict parser refuses the whole
    answer): one stored before inputs were checked for them is sent with ``null``."""
    try:
        return jsonrpc.dumps(body)
    except ValueError:
        log.warning(
            "A2A: an answer held a non-finite number (stored before inputs "
            "were checked); sent null for it"
        )
        return jsonrpc.dumps(_finite(body))


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _card_response(req: PlainRequest, card: dict[str, Any]) -> PlainResponse:
    text = _dumps(card)
    etag = 'W/"' + hashlib.sha256(text.encode()).hexdigest()[:40] + '"'
    headers = {"ETag": etag, "Cache-Control": CARD_CACHE_CONTROL}
    match = req.headers.get("If-None-Match") or ""
    if etag in [t.strip() for t in match.split(",")] or match.strip() == "*":
        return PlainResponse(304, b"", "text/html; charset=utf-8", headers)
    return PlainResponse(200, text.encode(), headers=headers)


def _sse(events: AsyncIterator[dict], wrap: Any = None) -> PlainResponse:
    """Each event (wrapped by ``wrap``, e.g. in a JSON-RPC response) as a server-sent event."""

    async def body() -> AsyncIterator[bytes]:
        try:
            async for event in events:
                payload = wrap(event) if wrap else event
                yield f"data: {_dumps(payload)}\n\n".encode()
        except m.A2AError as exc:  # an error after the stream began ends it with an error event
            error = p.error_json(None, exc) if wrap else exc.rest_error()
            yield f"data: {_dumps(error)}\n\n".encode()

    headers = (("Cache-Control", "no-store"), ("X-Accel-Buffering", "no"))
    return PlainResponse(200, body(), "text/event-stream; charset=utf-8", headers)


def _daemon_error(
    binding: str, status: int, code: str, message: str, headers: Mapping[str, str] | None = None
) -> PlainResponse:
    """A refusal made before the A2A protocol is involved, in the binding's shape."""
    body, content_type = render_error(binding, status, code, message)
    return PlainResponse(status, body, content_type, headers or ())


def _error(
    binding: str, req: PlainRequest, exc: m.A2AError, status: int | None = None
) -> PlainResponse:
    """``exc`` in the shape of the route's binding (JSON-RPC: HTTP 200 unless ``status``,
    with the id and dialect of the request, refused before it was parsed, if they read)."""
    if binding == "jsonrpc":
        try:
            dialect = p.negotiate_version(
                req.headers.get(p.VERSION_HEADER), req.args.get(p.VERSION_HEADER)
            )
        except m.A2AError:
            dialect = m.V1
        try:
            rpc_id = p.parse_envelope(req.body)[0]
        except m.A2AError as unread:
            rpc_id = unread.rpc_id
        return _json(p.error_json(rpc_id, exc, dialect), status or exc.jsonrpc_status)
    return _json(exc.rest_error(), status or exc.http_status, media_type(binding))


def _route_agent(
    service: A2AService, req: PlainRequest, binding: str, args: Mapping[str, Any]
) -> PlainResponse | None:
    name = args.get("name")
    if name is None or service.is_a2a_agent(name):
        return None
    reason = service.unavailable_reason(name)
    if reason is not None:
        return _error(binding, req, agent_unavailable(name, reason))
    known = ", ".join(service.a2a_agents()) or "none"
    lp = service.settings.listen_path
    exc = m.A2AError(
        m.METHOD_NOT_FOUND,
        f"no A2A agent {str(name)[:100]!r} here; A2A agents: {known} (each "
        f"at {lp}/agents/<name>/..., the primary one at {lp}/...)",
    )
    return _error(binding, req, exc, 404)


# Each route is ``(service, req, **path_args) -> PlainResponse``; ``make_routes`` puts it
# behind the A2A checks (service up, api key, agent named in the path).


def _card_route(card: Any) -> Any:
    """The route of a card built by ``card(service, name, base_url)``: the agent's named in
    the path, else the primary agent's (404 without one, 503 when it is unavailable)."""

    async def route(service: A2AService, req: PlainRequest, name: str | None = None) -> Any:
        if name is None:
            name = service.primary_agent()
            if name is None:
                return _json(m.A2AError(m.METHOD_NOT_FOUND, service.no_primary()).rest_error(), 404)
            reason = service.unavailable_reason(name)
            if reason is not None:
                return _error("card", req, agent_unavailable(name, reason))
        return _card_response(req, card(service, name, req.base_url))

    return route


async def _list_agents(service: A2AService, req: PlainRequest) -> PlainResponse:
    cards = [build_card(service, n, req.base_url) for n in service.a2a_agents()]
    return _card_response(req, {"agents": cards, "total": len(cards)})


def header_trace(headers: Any) -> TraceContext | None:
    """The context a request's ``traceparent`` / ``X-Roost-Trace-*`` headers carry."""
    try:
        return TraceContext.from_headers(headers)
    except InvalidTraceContext as exc:
        raise m.invalid(exc.field, exc.problem) from None


async def _jsonrpc(
    service: A2AService, req: PlainRequest, name: str | None = None
) -> PlainResponse:
    headers = req.headers
    try:
        p.check_content_type(headers.get("Content-Type"))
    except m.A2AError as exc:
        return _error("jsonrpc", req, exc)
    try:
        op = p.parse_jsonrpc(
            req.body,
            headers.get(p.VERSION_HEADER),
            req.args.get(p.VERSION_HEADER),
            push=service.settings.push_notifications,
        )
    except m.A2AError as exc:
        return _json(p.error_json(exc.rpc_id, exc, exc.dialect), exc.jsonrpc_status)
    try:
        trace = header_trace(headers)
        result = await service.execute(op, name, trace, req)
        if op.op in p.STREAMING_OPS:
            return _sse(result, lambda e, rid=op.id: p.result_json(rid, e))
    except m.A2AError as exc:
        return _json(p.error_json(op.id, exc, op.dialect), exc.jsonrpc_status)
    return _json(p.result_json(op.id, result))


async def _rest(
    service: A2AService,
    req: PlainRequest,
    rest_path: str,
    name: str | None = None,
    *,
    v03: bool = False,
) -> PlainResponse:
    """The HTTP+JSON binding: 1.0, or with ``v03`` 0.3 (its ``/v1/`` paths)."""
    content_type = "application/json" if v03 else A2A_JSON
    try:
        if not v03:
            version = p.negotiate_version(
                req.headers.get(p.VERSION_HEADER), req.args.get(p.VERSION_HEADER)
            )
            if version != m.V1:
                raise m.A2AError(
                    m.VERSION_NOT_SUPPORTED,
                    f"the HTTP+JSON binding here speaks A2A 1.0 but the request speaks {version} "
                    "(no A2A-Version header means 0.3); send A2A-Version: "
                    "1.0, or use the /v1/ paths for 0.3",
                )
        if req.body.strip():
            p.check_content_type(req.headers.get("Content-Type"))
        op = _rest_operation(req, rest_path, v03=v03, push=service.settings.push_notifications)
        trace = header_trace(req.headers)
        result = await service.execute(op, name, trace, req)
        if op.op in p.STREAMING_OPS:
            return _sse(result)
    except m.A2AError as exc:
        return _json(exc.rest_error(), exc.http_status, content_type)
    return _json(result, content_type=content_type)


async def _legacy_send(service: A2AService, req: PlainRequest) -> PlainResponse:
    """The seed's ``tasks/send``: bare params (answered with the bare task) or an envelope."""
    try:
        if req.body.strip():
            p.check_content_type(req.headers.get("Content-Type"))
        params = _loads(req.body)
        if not (is_mapping(params) and ("jsonrpc" in params or "method" in params)):
            op = p.Operation("send", p.parse_params("send", params, m.V01), m.V01)
            return _json(await service.execute(op, None, header_trace(req.headers), req))
    except m.A2AError as exc:
        return _json(exc.rest_error(), exc.http_status)
    rpc_id = None
    try:
        rpc_id, method, params = p.parse_envelope(req.body)  # an error names the id it read
        if method != "tasks/send":
            lp = service.settings.listen_path
            raise m.A2AError(
                m.METHOD_NOT_FOUND,
                f"{lp}/tasks/send takes the method tasks/send; "
                f"send {method[:100]!r} to {lp}/jsonrpc",
            )
        op = p.Operation("send", p.parse_params("send", params, m.V01), m.V01, rpc_id)
        result = await service.execute(op, None, header_trace(req.headers), req)
    except m.A2AError as exc:
        rpc_id = exc.rpc_id if rpc_id is None else rpc_id
        return _json(p.error_json(rpc_id, exc, m.V01), exc.jsonrpc_status)
    return _json(p.result_json(rpc_id, result))


async def _legacy_task(
    service: A2AService, req: PlainRequest, task_id: str, *, cancel: bool = False
) -> PlainResponse:
    """The seed's ``GET /a2a/tasks/{id}[?historyLength=n]`` and ``POST .../cancel``."""
    try:
        if cancel:
            op = p.Operation("cancel", p.TaskQuery(task_id), m.V01)
        else:
            params = {"id": task_id, "historyLength": req.args.get("historyLength")}
            op = p.Operation("get", p.parse_params("get", params, m.V01), m.V01)
        result = await service.execute(op, None, None, req)
    except m.A2AError as exc:
        return _json(exc.rest_error(), exc.http_status)
    return _json(result)


def make_routes(kernel: KernelAPI, settings: A2ASettings) -> list[RouteDescriptor]:
    """The A2A routes: each ``core`` behind the A2A checks, daemon errors in its binding's shape."""
    lp = settings.listen_path

    def route(
        path: str, core: Any, methods: tuple[str, ...], binding: str, *, public: bool = False
    ) -> RouteDescriptor:
        async def handler(req: PlainRequest, **args: Any) -> PlainResponse:
            service = service_for(kernel)
            if service is None:
                return _daemon_error(
                    binding,
                    503,
                    "a2a_unavailable",
                    "the A2A service is not running (see the daemon log)",
                )
            key = None if public else service.settings.api_key  # 401 unless the bearer matches
            if key and not tokens_match(bearer_token(req.headers.get("Authorization")), key):
                return _daemon_error(
                    binding,
                    401,
                    "unauthorized",
                    "A2A needs 'Authorization: Bearer <a2a.api_key>'",
                    {"WWW-Authenticate": 'Bearer realm="roost-a2a"'},
                )
            bad = _route_agent(service, req, binding, args)
            return bad if bad is not None else await core(service, req, **args)

        render = partial(render_error, binding)
        return RouteDescriptor(path, handler, methods, public=public, render_error=render)

    def card(path: str, build: Any) -> RouteDescriptor:
        return route(path, _card_route(build), ("GET",), "card", public=True)

    methods_all = ("GET", "POST", "DELETE")
    rest_v03 = partial(_rest, v03=True)
    return [
        card("/.well-known/agent-card.json", partial(build_card, root=True)),
        card("/.well-known/agent.json", legacy_card),
        route(f"{lp}/agents", _list_agents, ("GET",), "card", public=True),
        card(f"{lp}/agents/<name>/.well-known/agent-card.json", build_card),
        card(f"{lp}/agents/<name>/.well-known/agent.json", legacy_card),
        route(f"{lp}/jsonrpc", _jsonrpc, ("POST",), "jsonrpc"),
        route(f"{lp}/agents/<name>/jsonrpc", _jsonrpc, ("POST",), "jsonrpc"),
        # The 0.3 paths have routes of their own so that the daemon's errors there are in
        # their media type (application/json; 1.0's is application/a2a+json).
        route(f"{lp}/rest/v1/<path:rest_path>", rest_v03, methods_all, "rest03"),
        route(f"{lp}/agents/<name>/rest/v1/<path:rest_path>", rest_v03, methods_all, "rest03"),
        route(f"{lp}/rest/<path:rest_path>", _rest, methods_all, "rest"),
        route(f"{lp}/agents/<name>/rest/<path:rest_path>", _rest, methods_all, "rest"),
        route(f"{lp}/tasks/send", _legacy_send, ("POST",), "v01"),
        route(f"{lp}/tasks/<task_id>", _legacy_task, ("GET",), "v01"),
        route(f"{lp}/tasks/<task_id>/cancel", partial(_legacy_task, cancel=True), ("POST",), "v01"),
    ]


def _loads(body: bytes) -> Any:
    try:
        return json.loads(body.decode("utf-8-sig")) if body.strip() else {}
    except ValueError as exc:  # not UTF-8, not JSON, or an int of more digits than int() reads
        said = jsonrpc.value_error_text(exc)
        raise m.A2AError(m.PARSE_ERROR, f"request body is not valid JSON: {said}") from None
    except RecursionError:
        raise m.A2AError(m.PARSE_ERROR, "request body is nested too deeply") from None


def _rest_operation(
    request: PlainRequest, path: str, *, v03: bool = False, push: bool = True
) -> p.Operation:
    """Map an HTTP+JSON request (method + path) to an operation; ``v03``: the 0.3 shapes.
    ``push=False``: push-config operations are refused (-32003) before their body is read."""
    method = request.method
    d = m.REST03 if v03 else m.V1
    parts = path.strip("/").split("/")

    def body() -> Any:
        data = _loads(request.body)
        if not isinstance(data, Mapping):
            raise m.invalid("body", "must be a JSON object")
        return data

    if path in ("message:send", "message:stream") and method == "POST":
        op = "send" if path == "message:send" else "stream"
        data = body()
        return p.Operation(
            op, rest03.parse_send(op, data) if v03 else p.parse_params(op, data, m.V1), d
        )
    if path == "tasks" and method == "GET":
        return p.Operation("list", p.parse_list(request.args), d)
    if method == "GET" and (path == "extendedAgentCard" or (v03 and path == "card")):
        return p.Operation("card", None, d)  # 0.3: GET /v1/card
    if parts[0] == "tasks" and len(parts) == 2:
        ident = parts[1]
        if ident.endswith(":cancel") and method == "POST":
            return p.Operation("cancel", p.TaskQuery(_path_id(ident[: -len(":cancel")])), d)
        if ident.endswith(":subscribe") and method in ("GET", "POST"):
            return p.Operation("subscribe", p.TaskQuery(_path_id(ident[: -len(":subscribe")])), d)
        if method == "GET" and ":" not in ident:
            params: dict[str, Any] = {"id": _path_id(ident)}
            for key in ("historyLength", "history_length") if v03 else ("historyLength",):
                if key in request.args:  # 0.3 proto JSON: either spelling
                    params["historyLength"] = request.args[key]
            return p.Operation("get", p.parse_params("get", params, m.V1), d)
    if parts[0] == "tasks" and len(parts) in (3, 4) and parts[2] == "pushNotificationConfigs":
        if not push:
            raise m.push_not_supported()
        task_id = _path_id(parts[1])
        if len(parts) == 3 and method == "POST":
            if v03:
                return p.Operation("push_set", rest03.push_config_in(body(), task_id), d)
            return p.Operation("push_set", m.push_config_from_json(body(), task_id=task_id), d)
        if len(parts) == 3 and method == "GET":
            return p.Operation("push_list", p.PushQuery(task_id), d)
        if len(parts) == 4 and method == "GET":
            return p.Operation("push_get", p.PushQuery(task_id, _path_id(parts[3])), d)
        if len(parts) == 4 and method == "DELETE":
            return p.Operation("push_delete", p.PushQuery(task_id, _path_id(parts[3])), d)
    raise m.A2AError(m.METHOD_NOT_FOUND, f"no A2A operation at {method} {path[:100]!r}")


def _path_id(value: str) -> str:
    if not value or len(value) > 256:
        raise m.invalid("id", "must be a task id of 1-256 characters")
    return value
