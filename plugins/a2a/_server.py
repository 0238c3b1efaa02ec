"""A2A on the daemon: agent cards, the JSON-RPC and HTTP+JSON bindings, SSE, the 0.1 routes.

Routes (``/a2a`` is ``a2a.listen_path``):
- ``GET /.well-known/agent-card.json`` (primary agent, 1.0 card), ``/.well-known/agent.json``
  (legacy card), ``GET /a2a/agents`` → ``{"agents": [...], "total": N}``,
  ``GET /a2a/agents/{name}/.well-known/agent-card.json`` (one card per agent);
- JSON-RPC: ``POST /a2a/jsonrpc`` (primary agent) and ``POST /a2a/agents/{name}/jsonrpc``;
- HTTP+JSON: ``/a2a/rest/...`` and ``/a2a/agents/{name}/rest/...`` (``message:send``,
  ``message:stream``, ``tasks``, ``tasks/{id}``, ``tasks/{id}:cancel``, ``tasks/{id}:subscribe``,
  ``tasks/{id}/pushNotificationConfigs[/{cid}]``, ``extendedAgentCard``; ``/v1/...`` for 0.3,
  with ``/v1/card`` for the extended card, answered in the 0.3 binding's shapes, see ``_rest03``);
- 0.1: ``POST /a2a/tasks/send``, ``GET /a2a/tasks/{id}``, ``POST /a2a/tasks/{id}/cancel``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import weakref
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import attrs
import trio
from roost.kernel import RouteDescriptor, TraceContext, is_mapping, jsonrpc
from roost.plugins.http._plain import PlainRequest, PlainResponse

from . import _models as m
from . import _protocol as p
from . import _rest03 as rest03
from ._http_errors import render_jsonrpc_error, render_rest_error
from ._push import PushDispatcher, PushSettings
from ._settings import A2ASettings
from ._store import open_task_store
from ._tasks import TaskManager

log = logging.getLogger("roost.a2a")

CARD_CACHE_CONTROL = "public, max-age=300"
_SERVICES: weakref.WeakKeyDictionary[Any, A2AService] = weakref.WeakKeyDictionary()
_INPUT_MODES = ["text/plain", "application/json"]
_OUTPUT_MODES = ["text/plain"]
# An agent that can hand over artifacts (the artifact tool, or another agent's via agent_*
# and a2a_* tools) may answer with data parts and files of any type as well.
_ARTIFACT_OUTPUT_MODES = ["text/plain", "application/json", "application/octet-stream"]


def _output_modes(kernel: Any, name: str) -> list[str]:
    hands_over = any(
        spec.name == "artifact" or spec.owner in ("agents", "a2a") for spec in kernel.list_tools(name)
    )
    return list(_ARTIFACT_OUTPUT_MODES if hands_over else _OUTPUT_MODES)


def service_for(kernel: Any) -> A2AService | None:
    """The running A2A service of ``kernel`` (None before it started)."""
    return _SERVICES.get(kernel)


class A2AService:
    """Everything A2A needs while the kernel runs: settings, task manager, push dispatcher."""

    def __init__(self, kernel: Any, settings: A2ASettings) -> None:
        self.kernel = kernel
        self.settings = settings
        self.tasks: TaskManager | None = None
        self.push: PushDispatcher | None = None
        self.ready = trio.Event()
        self.external_cards: dict[str, Any] = {}
        self.external_errors: dict[str, str] = {}

    async def run(self, kernel: Any, *, task_status: Any = trio.TASK_STATUS_IGNORED, push_transport: Any = None) -> None:
        """Open the task store, recover, serve until cancelled (the kernel's service)."""
        home = Path(kernel.config.home)
        synchronous = getattr(getattr(kernel.config, "store", None), "synchronous", "normal")
        async with open_task_store(home / "a2a.db", max_tasks=self.settings.max_tasks, synchronous=synchronous) as store:
            async with trio.open_nursery() as nursery:
                if self.settings.push_notifications:
                    self.push = PushDispatcher(
                        store,
                        PushSettings(allow_private=self.settings.push_allow_private, allow_loopback=self.settings.push_allow_private),
                        transport=push_transport,
                    )
                    await nursery.start(self.push.run)
                self.tasks = TaskManager(kernel, store, nursery, push=self.push)
                await self.tasks.recover()
                _SERVICES[kernel] = self
                if self.settings.external_agents:
                    from ._external import discover_external_agents

                    nursery.start_soon(discover_external_agents, self)
                self.ready.set()
                task_status.started()
                try:
                    await trio.sleep_forever()
                finally:
                    _SERVICES.pop(kernel, None)
                    nursery.cancel_scope.cancel()

    # ---- agents ----------------------------------------------------------------------
    def a2a_agents(self) -> list[str]:
        return [n for n, man in self.kernel.agents.items() if man.a2a.enabled and n not in self.kernel.agent_errors]

    def is_a2a_agent(self, name: str) -> bool:
        """``name in a2a_agents()``, without listing them."""
        man = self.kernel.agents.get(name)
        return man is not None and man.a2a.enabled and name not in self.kernel.agent_errors

    def primary_agent(self) -> str | None:
        """``a2a.default_agent``, or the only A2A agent; None when that is ambiguous."""
        if self.settings.default_agent:
            return self.settings.default_agent if self.settings.default_agent in self.a2a_agents() else None
        agents = self.a2a_agents()
        return agents[0] if len(agents) == 1 else None

    def check_agent(self, name: str) -> None:
        if not self.is_a2a_agent(name):
            known = ", ".join(self.a2a_agents()) or "none"
            raise m.A2AError(m.INVALID_PARAMS, f"agent {name!r} is not reachable over A2A; A2A agents: {known}")

    def agent_for_send(self, route_agent: str | None, params: p.SendParams) -> str:
        """The agent a message goes to: the endpoint's agent, or the one named in metadata,
        or the primary agent; never a guess."""
        if route_agent:
            return route_agent
        for meta in (params.message.metadata, params.metadata):
            if is_mapping(meta) and isinstance(meta.get("agent"), str):
                self.check_agent(meta["agent"])
                return meta["agent"]
        primary = self.primary_agent()
        if primary is None:
            raise m.invalid(
                "message.metadata.agent",
                "this roost hosts several A2A agents; name one in message.metadata.agent or use "
                f"{self.settings.listen_path}/agents/<name>/jsonrpc (agents: {', '.join(self.a2a_agents())})",
            )
        return primary

    # ---- operations --------------------------------------------------------------------
    async def execute(self, op: p.Operation, agent: str | None, trace: TraceContext | None, base_url: str) -> Any:
        """Run a non-streaming operation; returns its result rendered in ``op.dialect``."""
        tasks = self._tasks()
        d = op.dialect
        if op.op == "send":
            if op.params.options.return_immediately:
                task = (await self._send(op, agent, trace)).task
            else:
                task = await self._send(op, agent, trace, wait=True)
            return p.send_result(task, d, op.params.options.history_length)
        if op.op == "get":
            task, _, origin = await tasks.find(op.params.id, agent=agent)
            return task.to_json(_reply_dialect(d, origin), history_length=op.params.history_length)
        if op.op == "cancel":
            task = await tasks.cancel(op.params.id, agent=agent)
            return task.to_json(d)
        if op.op == "list":
            q: p.ListQuery = op.params
            found, token, total = await tasks.list(
                agent=agent,
                context_id=q.context_id,
                state=q.state,
                page_size=q.page_size,
                page_token=q.page_token,
                updated_after=q.updated_after,
                include_artifacts=q.include_artifacts,
            )
            return {
                "tasks": [t.to_json(d, history_length=q.history_length, include_artifacts=q.include_artifacts) for t in found],
                "nextPageToken": token,
                "pageSize": q.page_size,
                "totalSize": total,
            }
        if op.op == "push_set":
            config = await tasks.set_push(op.params, agent=agent)
            return config.to_json(d)
        if op.op == "push_get":
            configs = await tasks.push_configs(op.params.task_id, agent=agent)
            for config in configs:
                if op.params.id in (None, config.id):
                    return config.to_json(d)
            raise m.A2AError(m.TASK_NOT_FOUND, f"task {op.params.task_id} has no push-notification config {op.params.id!r}")
        if op.op == "push_list":
            configs = await tasks.push_configs(op.params.task_id, agent=agent)
            listed = [c.to_json(d) for c in configs]
            return {"configs": listed, "nextPageToken": ""} if d == m.V1 else listed
        if op.op == "push_delete":
            await tasks.delete_push(op.params.task_id, op.params.id or "", agent=agent)
            return {} if d == m.V1 else None
        if op.op == "card":
            if not self.settings.api_key:
                raise m.A2AError(
                    m.UNSUPPORTED_OPERATION,
                    "The agent does not support authenticated extended cards (set a2a.api_key to enable them)",
                )
            name = agent or self.primary_agent()
            if name is None:
                raise m.invalid("agent", "name the agent: use <listen_path>/agents/<name>/jsonrpc")
            return build_card(self, name, base_url, extended=True)
        raise m.A2AError(m.METHOD_NOT_FOUND, f"operation {op.op!r} is not implemented")

    async def _send(self, op: p.Operation, agent: str | None, trace: TraceContext | None, *, wait: bool = False) -> Any:
        """Start the task (its ``LiveTask``), or with ``wait`` run it here (the task as it settled)."""
        params: p.SendParams = op.params
        target = self.agent_for_send(agent, params)
        meta_trace = TraceContext.from_meta(params.message.metadata) or TraceContext.from_meta(params.metadata)
        tasks = self._tasks()
        send = tasks.send_and_wait if wait else tasks.send
        return await send(
            target,
            params.message,
            params.options,
            trace=meta_trace or trace,
            dialect=op.dialect,
            task_id=params.task_id,
        )

    async def open_stream(self, op: p.Operation, agent: str | None, trace: TraceContext | None) -> AsyncIterator[dict]:
        """Start a streaming operation (errors raise here, before any byte is sent) and
        return the iterator of its events rendered in ``op.dialect``."""
        tasks = self._tasks()
        if op.op == "stream":
            live = await self._send(op, agent, trace)
        else:
            live = await tasks.subscribe(op.params.id, agent=agent)
        return _render(tasks.follow(live), op.dialect)

    def _tasks(self) -> TaskManager:
        if self.tasks is None:
            raise m.A2AError(m.INTERNAL_ERROR, "the A2A service is not running yet; retry in a moment")
        return self.tasks


def _reply_dialect(dialect: str, origin: str) -> str:
    return m.V01 if origin == m.V01 and dialect != m.V1 else dialect


async def _render(events: AsyncIterator[m.Event], dialect: str) -> AsyncIterator[dict]:
    async for event in events:
        if dialect == m.V01 and isinstance(event, m.Task):
            continue
        yield m.event_to_json(event, dialect)


# ---- cards ---------------------------------------------------------------------------------


def _agent_base(service: A2AService, name: str, base_url: str) -> str:
    return f"{base_url.rstrip('/')}{service.settings.listen_path}/agents/{name}"


def build_card(service: A2AService, name: str, base_url: str, *, extended: bool = False) -> dict[str, Any]:
    """The A2A 1.0 agent card of ``name`` (with the 0.3 fields older clients read)."""
    kernel = service.kernel
    manifest = kernel.agents[name]
    root = _agent_base(service, name, base_url)
    skills = [
        {
            "id": s.id,
            "name": s.name,
            "description": s.description,
            "tags": list(s.tags),
            **({"examples": list(s.examples)} if s.examples else {}),
            **({"inputModes": list(s.input_modes)} if s.input_modes else {}),
            **({"outputModes": list(s.output_modes)} if s.output_modes else {}),
        }
        for s in manifest.a2a.skills
    ]
    for spec in kernel.exposed_tools(name):
        skills.append(
            {"id": f"tool:{spec.name}", "name": spec.title or spec.name, "description": spec.description or spec.name, "tags": ["tool"]}
        )
    if not skills:
        skills.append({"id": "chat", "name": name, "description": manifest.description or f"Talk to {name}", "tags": ["chat"]})
    card: dict[str, Any] = {
        "name": name,
        "description": manifest.description or f"roost agent {name}",
        "supportedInterfaces": [
            {"url": f"{root}/jsonrpc", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
            {"url": f"{root}/rest", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"},
            {"url": f"{root}/jsonrpc", "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
        ],
        "provider": {"organization": "roost", "url": base_url.rstrip("/")},
        "version": manifest.version or "0.0.0",
        "capabilities": {
            "streaming": True,
            "pushNotifications": service.settings.push_notifications,
            "extendedAgentCard": bool(service.settings.api_key),
        },
        "defaultInputModes": list(_INPUT_MODES),
        "defaultOutputModes": _output_modes(kernel, name),
        "skills": skills,
        # 0.3 fields, so 0.3 clients can use the same card
        "preferredTransport": "JSONRPC",
        "protocolVersion": "0.3",
        "url": f"{root}/jsonrpc",
    }
    if service.settings.api_key or getattr(getattr(kernel.config, "http", None), "api_key", None):
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
        "capabilities": {"streaming": True, "pushNotifications": service.settings.push_notifications, "stateTransitionHistory": True},
        "defaultInputModes": ["text"],
        "defaultOutputModes": ["text"],
        "skills": [{"id": s.id, "name": s.name, "description": s.description, "tags": list(s.tags)} for s in manifest.a2a.skills],
    }


def gateway_card(service: A2AService, base_url: str) -> dict[str, Any]:
    """The card served at the root when several agents share the host: it routes by
    ``message.metadata.agent`` and points at each agent's own card."""
    base = base_url.rstrip("/")
    lp = service.settings.listen_path
    agents = service.a2a_agents()
    skills = []
    for name in agents:
        for s in service.kernel.agents[name].a2a.skills:
            skills.append({"id": f"{name}:{s.id}", "name": f"{name}: {s.name}", "description": s.description, "tags": [name, *s.tags]})
    if not skills:
        skills = [{"id": "agents", "name": "roost agents", "description": "Agents: " + ", ".join(agents), "tags": ["roost"]}]
    return {
        "name": "roost",
        "description": "roost hosts several agents: "
        + ", ".join(agents)
        + f". Each has its own card at {base}{lp}/agents/<name>/.well-known/agent-card.json; "
        "at this endpoint name the agent in message.metadata.agent.",
        "supportedInterfaces": [
            {"url": f"{base}{lp}/jsonrpc", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
            {"url": f"{base}{lp}/rest", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"},
            {"url": f"{base}{lp}/jsonrpc", "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
        ],
        "version": "1.0",
        "capabilities": {"streaming": True, "pushNotifications": service.settings.push_notifications},
        "defaultInputModes": list(_INPUT_MODES),
        "defaultOutputModes": list(_OUTPUT_MODES),
        "skills": skills,
        "preferredTransport": "JSONRPC",
        "protocolVersion": "0.3",
        "url": f"{base}{lp}/jsonrpc",
    }


# ---- HTTP layer ------------------------------------------------------------------------------
#
# Each route is one server-neutral function ``(service, PlainRequest, ..., stream_ok) ->
# PlainResponse | SseAnswer | None``. ``make_routes`` serves it twice: as the route's
# ``fast_handler`` (the daemon's fast lane, which cannot stream: a streaming request makes it
# return None and the daemon hands the request to Quart) and as the quart view.


@attrs.frozen
class SseAnswer:
    """A streamed answer: the events, and how to wrap each (JSON-RPC) before sending."""

    events: AsyncIterator[dict]
    wrap: Any = None


def _json(body: Any, status: int = 200, content_type: str = "application/json", headers: Mapping[str, str] | None = None) -> PlainResponse:
    data = jsonrpc.dumps(body, allow_nan=True).encode()
    return PlainResponse(status, data, content_type, tuple(headers.items()) if headers else ())


def _card_response(req: PlainRequest, card: dict[str, Any]) -> PlainResponse:
    text = json.dumps(card, ensure_ascii=False, separators=(",", ":"))
    etag = 'W/"' + hashlib.sha256(text.encode()).hexdigest()[:40] + '"'
    headers = {"ETag": etag, "Cache-Control": CARD_CACHE_CONTROL}
    match = req.headers.get("If-None-Match") or ""
    if etag in [t.strip() for t in match.split(",")] or match.strip() == "*":
        return PlainResponse(304, b"", "text/html; charset=utf-8", tuple(headers.items()))
    return _json(card, headers=headers)


def _sse(answer: SseAnswer):
    from quart import Response

    events, wrap = answer.events, answer.wrap

    async def body() -> AsyncIterator[bytes]:
        try:
            async for event in events:
                payload = wrap(event) if wrap else event
                yield f"data: {json.dumps(payload, ensure_ascii=False)}\n\n".encode()
        except m.A2AError as exc:  # an error after the stream began ends it with an error event
            yield f"data: {json.dumps(wrap_error(exc) if wrap else exc.rest_error())}\n\n".encode()

    response = Response(
        body(),
        status=200,
        content_type="text/event-stream; charset=utf-8",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )
    response.timeout = None
    return response


def wrap_error(exc: m.A2AError) -> dict:
    return p.error_json(None, exc)


def _problem(service: A2AService | None) -> PlainResponse | None:
    if service is None:
        return _json({"error": {"code": "a2a_unavailable", "message": "the A2A service is not running (see the daemon log)"}}, 503)
    return None


def _auth_failure(service: A2AService, headers: Any) -> PlainResponse | None:
    """401 when ``a2a.api_key`` is set and the bearer token does not match."""
    key = service.settings.api_key
    if not key:
        return None
    header = headers.get("Authorization") or ""
    token = header[7:].strip() if header[:7].lower() == "bearer " else ""
    if token and hmac.compare_digest(token.encode(), key.encode()):
        return None
    return _json(
        {"error": {"code": "unauthorized", "message": "A2A needs 'Authorization: Bearer <a2a.api_key>'"}},
        401,
        headers={"WWW-Authenticate": 'Bearer realm="roost-a2a"'},
    )


def _route_agent(service: A2AService, name: str | None) -> PlainResponse | None:
    if name is None or service.is_a2a_agent(name):
        return None
    known = ", ".join(service.a2a_agents()) or "none"
    return _json({"error": {"code": "agent_not_found", "message": f"no A2A agent {name!r}; A2A agents: {known}"}}, 404)


def _gate(service: A2AService | None, req: PlainRequest, name: str | None = None, *, auth: bool = True) -> PlainResponse | None:
    if service is None:
        return _problem(service)
    return (_auth_failure(service, req.headers) if auth else None) or _route_agent(service, name)


# The routes: ``(service, req, stream_ok, **path_args)``.


async def _root_card(service: A2AService, req: PlainRequest, stream_ok: bool) -> Any:
    primary = service.primary_agent()
    card = build_card(service, primary, req.host_url) if primary else gateway_card(service, req.host_url)
    return _card_response(req, card)


async def _root_legacy_card(service: A2AService, req: PlainRequest, stream_ok: bool) -> Any:
    primary = service.primary_agent() or (service.a2a_agents() or [None])[0]
    if primary is None:
        return _json({"error": {"code": "agent_not_found", "message": "no agent is reachable over A2A"}}, 404)
    return _card_response(req, legacy_card(service, primary, req.host_url))


async def _agent_card(service: A2AService, req: PlainRequest, stream_ok: bool, name: str) -> Any:
    return _card_response(req, build_card(service, name, req.host_url))


async def _agent_legacy_card(service: A2AService, req: PlainRequest, stream_ok: bool, name: str) -> Any:
    return _card_response(req, legacy_card(service, name, req.host_url))


async def _list_agents(service: A2AService, req: PlainRequest, stream_ok: bool) -> Any:
    cards = [build_card(service, n, req.host_url) for n in service.a2a_agents()]
    return _card_response(req, {"agents": cards, "total": len(cards)})


async def _jsonrpc(service: A2AService, req: PlainRequest, stream_ok: bool, name: str | None = None) -> Any:
    headers = req.headers
    try:
        op = p.parse_jsonrpc(req.body, headers.get(p.VERSION_HEADER), req.args.get(p.VERSION_HEADER))
    except m.A2AError as exc:
        return _json(p.error_json(getattr(exc, "rpc_id", None), exc, getattr(exc, "dialect", m.V1)))
    streaming = op.op in p.STREAMING_OPS
    if streaming and not stream_ok:
        return None
    trace = TraceContext.from_headers(headers)
    try:
        if streaming:
            events = await service.open_stream(op, name, trace)
            return SseAnswer(events, lambda e, rid=op.id: p.result_json(op.dialect, rid, e))
        result = await service.execute(op, name, trace, req.host_url if op.op == "card" else "")
    except m.A2AError as exc:
        return _json(p.error_json(op.id, exc, op.dialect))
    return _json(p.result_json(op.dialect, op.id, result))


async def _rest(service: A2AService, req: PlainRequest, stream_ok: bool, rest_path: str, name: str | None = None) -> Any:
    legacy_prefix = rest_path.startswith("v1/")
    path = rest_path[3:] if legacy_prefix else rest_path
    content_type = "application/json" if legacy_prefix else "application/a2a+json"
    try:
        if not legacy_prefix:
            version = p.negotiate_version(req.headers.get(p.VERSION_HEADER), req.args.get(p.VERSION_HEADER))
            if version != m.V1:
                raise m.A2AError(
                    m.VERSION_NOT_SUPPORTED,
                    f"the HTTP+JSON binding here speaks A2A 1.0 but the request speaks {version} "
                    "(no A2A-Version header means 0.3); send A2A-Version: 1.0, or use the /v1/ paths for 0.3",
                )
        op = _rest_operation(req, path, v03=legacy_prefix)
        if op.op in p.STREAMING_OPS:
            if not stream_ok:
                return None
            events = await service.open_stream(op, name, TraceContext.from_headers(req.headers))
            return SseAnswer(_events_v03(events) if legacy_prefix else events)
        result = await service.execute(op, name, TraceContext.from_headers(req.headers), req.host_url if op.op == "card" else "")
        if legacy_prefix:
            result = rest03.result_out(op.op, result)
    except m.A2AError as exc:
        return _json(exc.rest_error(), exc.http_status)
    return _json(result, content_type=content_type)


async def _agent_rest(service: A2AService, req: PlainRequest, stream_ok: bool, name: str, rest_path: str) -> Any:
    return await _rest(service, req, stream_ok, rest_path, name)


async def _legacy_send(service: A2AService, req: PlainRequest, stream_ok: bool) -> Any:
    try:
        params = _loads(req.body)
        op = p.Operation("send", p.parse_params("send", params, m.V01), m.V01)
        result = await service.execute(op, None, TraceContext.from_headers(req.headers), "")
    except m.A2AError as exc:
        return _json(exc.rest_error(), exc.http_status)
    return _json(result)


async def _legacy_get(service: A2AService, req: PlainRequest, stream_ok: bool, task_id: str) -> Any:
    try:
        params = {"id": task_id}
        if "historyLength" in req.args:
            params["historyLength"] = req.args["historyLength"]
        op = p.Operation("get", p.parse_params("get", params, m.V01), m.V01)
        result = await service.execute(op, None, None, "")
    except m.A2AError as exc:
        return _json(exc.rest_error(), exc.http_status)
    return _json(result)


async def _legacy_cancel(service: A2AService, req: PlainRequest, stream_ok: bool, task_id: str) -> Any:
    try:
        result = await service.execute(p.Operation("cancel", p.TaskQuery(task_id), m.V01), None, None, "")
    except m.A2AError as exc:
        return _json(exc.rest_error(), exc.http_status)
    return _json(result)


def _serve_twice(kernel: Any, core: Any, *, auth: bool = True, agent_arg: bool = False) -> tuple[Any, Any]:
    """``(quart view, fast handler)`` of one neutral route function."""

    async def run(req: PlainRequest, stream_ok: bool, args: dict[str, Any]) -> Any:
        service = service_for(kernel)
        bad = _gate(service, req, args.get("name") if agent_arg else None, auth=auth)
        if bad is not None:
            return bad
        return await core(service, req, stream_ok, **args)

    async def fast(req: PlainRequest, **args: Any) -> PlainResponse | None:
        return await run(req, False, args)

    async def view(**args: Any) -> Any:
        from quart import request

        answer = await run(await PlainRequest.from_quart(request), True, args)
        return _sse(answer) if isinstance(answer, SseAnswer) else answer.to_quart()

    return view, fast


def make_routes(kernel: Any, settings: A2ASettings) -> list[RouteDescriptor]:
    """The daemon routes of the A2A plugin (each with a quart view and a fast handler)."""
    lp = settings.listen_path

    def route(path: str, core: Any, methods: tuple[str, ...], *, public: bool = False, agent_arg: bool = False) -> RouteDescriptor:
        view, fast = _serve_twice(kernel, core, auth=not public, agent_arg=agent_arg)
        render_error = render_jsonrpc_error if core is _jsonrpc else render_rest_error
        return RouteDescriptor(path, view, methods, public=public, fast_handler=fast, render_error=render_error)

    methods_all = ("GET", "POST", "DELETE")
    return [
        route("/.well-known/agent-card.json", _root_card, ("GET",), public=True),
        route("/.well-known/agent.json", _root_legacy_card, ("GET",), public=True),
        route(f"{lp}/agents", _list_agents, ("GET",), public=True),
        route(f"{lp}/agents/<name>/.well-known/agent-card.json", _agent_card, ("GET",), public=True, agent_arg=True),
        route(f"{lp}/agents/<name>/.well-known/agent.json", _agent_legacy_card, ("GET",), public=True, agent_arg=True),
        route(f"{lp}/jsonrpc", _jsonrpc, ("POST",)),
        route(f"{lp}/agents/<name>/jsonrpc", _jsonrpc, ("POST",), agent_arg=True),
        route(f"{lp}/rest/<path:rest_path>", _rest, methods_all),
        route(f"{lp}/agents/<name>/rest/<path:rest_path>", _agent_rest, methods_all, agent_arg=True),
        route(f"{lp}/tasks/send", _legacy_send, ("POST",)),
        route(f"{lp}/tasks/<task_id>", _legacy_get, ("GET",)),
        route(f"{lp}/tasks/<task_id>/cancel", _legacy_cancel, ("POST",)),
    ]


def _loads(body: bytes) -> Any:
    try:
        return json.loads(body.decode("utf-8-sig")) if body.strip() else {}
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise m.A2AError(m.PARSE_ERROR, f"request body is not valid JSON: {exc}") from None
    except RecursionError:
        raise m.A2AError(m.PARSE_ERROR, "request body is nested too deeply") from None


def _query_params(args: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in ("contextId", "status", "pageSize", "pageToken", "historyLength", "statusTimestampAfter", "includeArtifacts"):
        if key in args:
            out[key] = args[key]
    return out


async def _events_v03(events: AsyncIterator[dict]) -> AsyncIterator[dict]:
    async for event in events:
        yield rest03.event_out(event)


def _rest_operation(request: PlainRequest, path: str, *, v03: bool = False) -> p.Operation:
    """Map an HTTP+JSON request (method + path) to an operation, method for method.

    ``v03``: the body is in the 0.3 binding's shapes (the ``/v1/`` paths)."""
    method = request.method
    parts = path.strip("/").split("/")

    def body() -> Any:
        data = _loads(request.body)
        if not isinstance(data, Mapping):
            raise m.invalid("body", "must be a JSON object")
        return data

    if path in ("message:send", "message:stream") and method == "POST":
        op = "send" if path == "message:send" else "stream"
        data = body()
        return p.Operation(op, rest03.parse_send(op, data) if v03 else p.parse_params(op, data, m.V1), m.V1)
    if path == "tasks" and method == "GET":
        return p.Operation("list", p.parse_list(_query_params(request.args)), m.V1)
    if method == "GET" and (path == "extendedAgentCard" or (v03 and path == "card")):  # 0.3: GET /v1/card
        return p.Operation("card", None, m.V1)
    if parts[0] == "tasks" and len(parts) == 2:
        ident = parts[1]
        if ident.endswith(":cancel") and method == "POST":
            return p.Operation("cancel", p.TaskQuery(_path_id(ident[: -len(":cancel")])), m.V1)
        if ident.endswith(":subscribe") and method in ("GET", "POST"):
            return p.Operation("subscribe", p.TaskQuery(_path_id(ident[: -len(":subscribe")])), m.V1)
        if method == "GET" and ":" not in ident:
            params: dict[str, Any] = {"id": _path_id(ident)}
            for key in ("historyLength", "history_length") if v03 else ("historyLength",):
                if key in request.args:  # 0.3 proto JSON: either spelling
                    params["historyLength"] = request.args[key]
            return p.Operation("get", p.parse_params("get", params, m.V1), m.V1)
    if parts[0] == "tasks" and len(parts) in (3, 4) and parts[2] == "pushNotificationConfigs":
        task_id = _path_id(parts[1])
        if len(parts) == 3 and method == "POST":
            if v03:
                return p.Operation("push_set", rest03.push_config_in(body(), task_id), m.V1)
            data = dict(body())
            data["taskId"] = task_id
            return p.Operation("push_set", m.push_config_from_json(data), m.V1)
        if len(parts) == 3 and method == "GET":
            return p.Operation("push_list", p.PushQuery(task_id), m.V1)
        if len(parts) == 4 and method == "GET":
            return p.Operation("push_get", p.PushQuery(task_id, _path_id(parts[3])), m.V1)
        if len(parts) == 4 and method == "DELETE":
            return p.Operation("push_delete", p.PushQuery(task_id, _path_id(parts[3])), m.V1)
    raise m.A2AError(m.METHOD_NOT_FOUND, f"no A2A operation at {method} {path[:100]!r}")


def _path_id(value: str) -> str:
    if not value or len(value) > 256:
        raise m.invalid("id", "must be a task id of 1-256 characters")
    return value
