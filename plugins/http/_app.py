"""The quart-trio application: REST API, event websocket; the plugin routes' table.

Every error leaves as ``{"error": {...}}`` (or in the route's ``render_error`` shape), never
a traceback. Plugin routes are rules of the app's URL map without a view (``_asgi`` serves
them), so the map decides 404 and 405 for every path.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from typing import Any

import trio
from quart import has_request_context, request, websocket
from quart_trio import QuartTrio
from roost.kernel import (
    AgentNotFound,
    ConfigError,
    InvalidInput,
    InvalidTraceContext,
    KernelAPI,
    PluginFailure,
    RoostError,
    RouteDescriptor,
    TraceContext,
    check_json_input,
    escape_lone_surrogates,
    jsonrpc,
    number_setting,
    roost_version,
)
from roost.kernel import json_type_name as _json_type
from werkzeug.exceptions import HTTPException

from . import _dashboard
from ._auth import WEBSOCKET_PROTOCOL, principal_of, subprotocol_token
from ._common import (
    DaemonState,
    InvalidRequest,
    Refusal,
    admin_only,
    caller_headers,
    canonical_path,
    common_headers,
    internal_error,
    refusal,
    refusal_for,
    render_refusal,
    reply_json,
    too_large,
    tool_json,
)
from ._ratelimit import Gcra
from ._settings import HttpSettings
from ._traces import TraceLog

log = logging.getLogger("roost.http")

DEFAULT_EVENT_BUFFER = 1000
MAX_SESSION_ID_LEN = 256
MAX_KINDS = 32
_KIND = re.compile(r"^[A-Za-z0-9_.\-]{1,64}:[A-Za-z0-9_.\-]{0,64}$")
_MESSAGE_FIELDS = ("message", "session_id", "timeout")


def create_app(
    kernel: KernelAPI,
    *,
    settings: HttpSettings | None = None,
    env: Mapping[str, str] | None = None,
    event_buffer: int = DEFAULT_EVENT_BUFFER,
) -> QuartTrio:
    """The daemon's app for ``kernel``; ``event_buffer`` bounds each events subscriber's queue."""
    if settings is None:
        settings = HttpSettings.from_config(kernel.config.http, env)
    if number_setting(event_buffer, integer=True) is None:
        raise ValueError(f"event_buffer must be a positive integer, got {event_buffer!r}")
    app = _QuartApp("roost.http")
    app.config["MAX_CONTENT_LENGTH"] = settings.max_body_bytes
    app.config["PROPAGATE_EXCEPTIONS"] = False
    app.json.sort_keys = False  # type: ignore[attr-defined]
    history = getattr(getattr(getattr(kernel, "config", None), "http", None), "trace_history", 0)
    state = DaemonState(
        kernel=kernel,
        settings=settings,
        limiter=Gcra(settings.rate_limit_per_s, settings.rate_limit_burst),
        event_buffer=event_buffer,
        version=roost_version(),
        traces=TraceLog(history if isinstance(history, int) and history > 0 else 0),
    )
    app.extensions["roost"] = state
    _install_gates(app, state)
    _install_error_handlers(app, state)
    _install_api(app, state)
    _dashboard.install(app, state)
    _install_plugin_routes(app, state)
    state.error_shapes.set_routes(
        (rule.rule, rule.methods or (), rule.endpoint) for rule in app.url_map.iter_rules()
    )
    return app


class _QuartApp(QuartTrio):
    """Quart whose request context never fails to build: an HTTPException binding the URL
    adapter (``BadHost``) becomes the routing error, answered after the gates, not a 500."""

    def create_url_adapter(self, request: Any) -> Any:
        try:
            return super().create_url_adapter(request)
        except HTTPException as exc:
            if request is None:
                raise
            request.routing_exception = exc
            return None


_ROUTE_CACHE_MAX = 4096


def route_for(
    app: QuartTrio, state: DaemonState, method: str, path: str
) -> tuple[str, dict[str, Any]] | None:
    """``(endpoint, view args)`` for ``path`` (trailing slashes ignored), or None; cached."""
    cache = state.route_cache
    path = canonical_path(path)
    key = (method, path)
    try:
        return cache[key]
    except KeyError:
        pass
    try:
        found = app.url_map.bind("localhost").match(path, method=method)
    except Exception:
        found = None
    if len(cache) >= _ROUTE_CACHE_MAX:  # bounded: paths carry agent names and ids
        cache.clear()
    cache[key] = found
    return found


def daemon_state(app: QuartTrio) -> DaemonState:
    """The shared state of an app made by ``create_app``."""
    return app.extensions["roost"]


def _current():
    return request if has_request_context() else websocket


def refusal_response(app: QuartTrio, refusal: Refusal, req: Any = None):
    """A ``Refusal`` as a quart response, shaped by ``req``'s route (default: this request)."""
    if req is None:
        req = _current()
    renderer = daemon_state(app).error_shapes.for_request(req.endpoint, req.method, req.path)
    body, content_type = render_refusal(refusal, renderer)
    return app.response_class(
        body, status=refusal.status, headers=dict(refusal.headers), content_type=content_type
    )


def _install_gates(app: QuartTrio, state: DaemonState) -> None:
    settings = state.settings

    def gate(req, *, is_websocket: bool):
        # Only Quart's automatic OPTIONS answer (a CORS preflight has no credentials) skips auth.
        automatic = getattr(getattr(req, "url_rule", None), "provide_automatic_options", False)
        is_preflight = not is_websocket and req.method == "OPTIONS" and bool(automatic)
        server = req.server

        def socket_token() -> str | None:  # a page's key rides as a subprotocol, or ?token=
            offered = req.headers.get("Sec-WebSocket-Protocol")
            return subprotocol_token(offered) or req.args.get("token")

        refusal, principal = state.check(
            req.endpoint,
            req.headers,
            req.remote_addr,
            None if is_websocket else req.content_length,
            local_addr=str(server[0]) if server else None,
            is_websocket=is_websocket,
            is_preflight=is_preflight,
            query_token=socket_token,
        )
        if refusal is not None:
            return refusal_response(app, refusal, req)
        req.principal = principal
        return None

    @app.before_request
    async def _gate_request():
        refused = gate(request, is_websocket=False)
        if refused is None:
            # A local process's run continues its trace (see caller_headers).
            scope = request.scope
            items = request.headers.items()
            rewritten = await caller_headers(
                state.kernel, request.method, items, scope.get("client"), scope.get("server")
            )
            if rewritten is not None:
                for name in TraceContext.header_names:
                    request.headers.remove(name)
                for name, value in rewritten:
                    if name.lower() in TraceContext.header_names:
                        request.headers.add(name, value)
        return refused

    @app.before_websocket
    async def _gate_websocket():
        return gate(websocket, is_websocket=True)

    @app.after_request
    async def _common_headers(response):
        for name, value, replace in common_headers(settings, request.headers.get("Origin")):
            if replace:
                response.headers[name] = value
            else:
                response.headers.setdefault(name, value)
        return response


def _install_error_handlers(app: QuartTrio, state: DaemonState) -> None:
    @app.errorhandler(HTTPException)
    async def _http_error(exc: HTTPException):
        status = exc.code or 500
        if status < 400:
            return exc  # redirects and the like keep Quart's own response
        req = _current()
        headers: dict[str, str] = {}
        if status == 404:
            message = f"no such endpoint: {req.path}; see GET /health, /api/agents, /api/tools"
        elif status == 405:
            allowed = ", ".join(sorted(getattr(exc, "valid_methods", None) or ()))
            headers["Allow"] = allowed
            message = (
                f"method {req.method} is not allowed on {req.path}; allowed: {allowed or 'none'}"
            )
        elif status == 413:
            settings = state.settings
            return refusal_response(app, too_large(settings, settings.max_body_bytes, req.path))
        elif status == 400 and type(exc).__name__ == "WebsocketMismatch":
            message = f"{req.path} is a websocket endpoint; connect to it with a websocket client"
        else:
            message = exc.description or exc.name
        code = re.sub(r"[^a-z0-9]+", "_", exc.name.lower()).strip("_") or "http_error"
        return refusal_response(app, refusal(status, code, message, headers))

    @app.errorhandler(RoostError)
    async def _roost_error(exc: RoostError):
        return refusal_response(app, refusal_for(exc, _current().path))

    @app.errorhandler(Exception)
    async def _unexpected(exc: Exception):
        log.error("unexpected error serving %s", _current().path, exc_info=exc)
        return refusal_response(app, internal_error())


async def _read_json_object() -> dict[str, Any]:
    data = await request.get_data(cache=False)
    if not data or not data.strip():
        raise InvalidRequest(
            "body", 'request body is empty; send a JSON object such as {"message": "hello"}'
        )
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise InvalidRequest("body", "request body is not UTF-8 text; send UTF-8 JSON") from None
    try:
        body = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidRequest(
            "body",
            f"request body is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})",
        ) from None
    except RecursionError:
        raise InvalidRequest("body", "request body is nested too deeply") from None
    except ValueError as exc:  # e.g. an integer of more digits than Python converts
        said = jsonrpc.value_error_text(exc)
        raise InvalidRequest("body", f"request body is not valid JSON ({said})") from None
    if not isinstance(body, dict):
        raise InvalidRequest(
            "body",
            f'request body must be a JSON object such as {{"message": "hello"}}, '
            f"got {_json_type(body)}",
        )
    return body


def parse_message_body(body: Mapping[str, Any]) -> tuple[str, str | None, float | None]:
    """Check a ``POST /api/agents/{name}/message`` body: ``(message, session_id, timeout)``."""
    try:  # first: every later error may quote what was sent
        check_json_input(body, "")
    except InvalidInput as exc:
        raise InvalidRequest(exc.field, str(exc)) from None
    if unknown := sorted(set(body) - set(_MESSAGE_FIELDS)):
        raise InvalidRequest(
            unknown[0],
            f"unknown field {unknown[0]!r}; allowed fields: {', '.join(_MESSAGE_FIELDS)}",
        )
    if "message" not in body:
        raise InvalidRequest("message", "field 'message' is required: the text to send the agent")
    message = body["message"]
    if not isinstance(message, str):
        raise InvalidRequest(
            "message", f"field 'message' must be a string, got {_json_type(message)}"
        )
    if not message.strip():
        raise InvalidRequest("message", "field 'message' must not be empty")
    session_id = body.get("session_id")
    if session_id is not None:
        if not isinstance(session_id, str):
            raise InvalidRequest(
                "session_id",
                f"field 'session_id' must be a string or null, got {_json_type(session_id)}",
            )
        if not session_id or len(session_id) > MAX_SESSION_ID_LEN or not session_id.isprintable():
            raise InvalidRequest(
                "session_id",
                f"field 'session_id' must be 1-{MAX_SESSION_ID_LEN} printable characters; "
                "omit it to start a new session",
            )
    timeout = body.get("timeout")
    if timeout is not None:
        timeout = number_setting(timeout, 0, 3600)
        if timeout is None:
            raise InvalidRequest(
                "timeout", "field 'timeout' must be a number of seconds between 0 and 3600"
            )
    return message, session_id, timeout


def parse_kinds(raw: str | None) -> tuple[str, ...] | None:
    """Parse ``?kinds=EXEC:,AGENT:REPLY`` (None when absent)."""
    if raw is None or not raw.strip():
        return None
    kinds = tuple(k.strip() for k in raw.split(",") if k.strip())
    if len(kinds) > MAX_KINDS:
        raise InvalidRequest("kinds", f"at most {MAX_KINDS} kinds may be given, got {len(kinds)}")
    for kind in kinds:
        if not _KIND.fullmatch(kind):
            raise InvalidRequest(
                "kinds",
                f"invalid event kind {kind[:80]!r}: use NAMESPACE:NAME (e.g. AGENT:REPLY) "
                "or a namespace prefix ending in ':' (e.g. EXEC:), comma-separated",
            )
    return kinds


def _install_api(app: QuartTrio, state: DaemonState) -> None:
    kernel = state.kernel

    def require_agent(name: str) -> None:
        if name not in kernel.agents:
            raise AgentNotFound(name, list(kernel.agents))

    @app.get("/health")
    async def health():
        status = "stopping" if state.closing.is_set() else "ok"
        body = {"status": status, "agents": len(kernel.agents), "version": state.version}
        return body, (503 if state.closing.is_set() else 200)

    state.public_endpoints.add("health")
    state.unlimited_endpoints.add("health")

    async def agents_with_usage(name: str | None = None) -> list[dict[str, Any]]:
        usage = await kernel.store.usage_by_agent()
        empty = {"input_tokens": 0, "output_tokens": 0, "requests": 0}
        return [
            {**info, "usage": usage.get(info.get("name"), empty)}
            for info in kernel.agent_info(name)
        ]

    @app.get("/api/agents")
    async def list_agents():
        return {"agents": await agents_with_usage()}

    @app.get("/api/agents/<name>")
    async def get_agent(name: str):
        require_agent(name)
        return (await agents_with_usage(name))[0]

    @app.post("/api/agents/<name>/message")
    async def send_message(name: str):
        require_agent(name)
        message, session_id, timeout = parse_message_body(await _read_json_object())
        try:
            trace = TraceContext.from_headers(request.headers)
        except InvalidTraceContext as exc:
            raise InvalidRequest(exc.field, str(exc)) from None
        # A session is its principal's: the same id from another principal names its own.
        principal = getattr(principal_of(request), "name", None)
        reply = await kernel.send(
            name, message, session_id=session_id, trace=trace, timeout=timeout, principal=principal
        )
        headers = {"X-Roost-Trace-Id": reply.trace_id} if reply.trace_id else {}
        return reply_json(reply), 200, headers

    @app.get("/api/tools")
    async def list_tools():
        agent = request.args.get("agent")
        if agent is not None:
            if not agent.strip():
                raise InvalidRequest(
                    "agent", "query parameter 'agent' must name an agent; omit it to list all tools"
                )
            require_agent(agent)
        return {"tools": [tool_json(spec) for spec in kernel.list_tools(agent)]}

    @app.websocket("/api/events")
    async def events():
        principal = principal_of(websocket)
        if principal is None or not principal.admin:
            # Events show every caller's messages: admins only (no key configured: everyone).
            reason = (
                "the event stream shows every caller's work, so only an admin principal may read it"
            )
            return refusal_response(app, admin_only(reason), websocket)
        kinds = parse_kinds(websocket.args.get("kinds"))
        # Subscribe before accepting, so nothing published after the handshake is missed.
        async with kernel.tap.subscribe(buffer=state.event_buffer, kinds=kinds) as rx:
            offered = WEBSOCKET_PROTOCOL in websocket.requested_subprotocols
            await websocket.accept(subprotocol=WEBSOCKET_PROTOCOL if offered else None)
            # Until close/tap end: slow clients lose events (TAP:DROPPED), never slowing the kernel.
            async with trio.open_nursery() as nursery:

                async def discard_inbound() -> None:
                    # Keep reading: a chatty client could fill Quart's queue, hiding its close.
                    while True:
                        await websocket.receive()

                async def stop_on_close() -> None:
                    await state.closing.wait()
                    nursery.cancel_scope.cancel()

                nursery.start_soon(discard_inbound)
                nursery.start_soon(stop_on_close)
                async for event in rx:
                    text = json.dumps(event.to_dict(), ensure_ascii=False, default=str)
                    # a lone surrogate (legal in JSON, not in UTF-8) escaped
                    await websocket.send(escape_lone_surrogates(text))
                nursery.cancel_scope.cancel()
        code, reason = (1001, "daemon shutting down") if state.closing.is_set() else (1000, "")
        await websocket.close(code, reason)


def _install_plugin_routes(app: QuartTrio, state: DaemonState) -> None:
    plugins = state.kernel.plugins
    hook = "roost_http_routes"
    for name, routes in plugins.call_each(hook, answers=(Exception,), kernel=state.kernel):
        for index, route in enumerate(routes):
            if isinstance(route, ConfigError):
                raise route  # a setting that names nothing stops the daemon before it listens
            if isinstance(route, Exception):
                problem = f"{hook} raised {type(route).__name__}: {route}"
            else:
                problem = _add_plugin_route(app, state, name, index, route)
            if problem:
                log.error("plugin %r: %s", name, problem)
                plugins.failures.append(PluginFailure(name, "routes", problem))


def _add_plugin_route(
    app: QuartTrio, state: DaemonState, plugin: str, index: int, route: Any
) -> str | None:
    if not isinstance(route, RouteDescriptor):
        return f"route #{index} is a {type(route).__name__}, expected roost.kernel.RouteDescriptor"
    if not isinstance(route.path, str) or not route.path.startswith("/"):
        return f"route #{index} path {route.path!r} must start with '/'"
    if not callable(route.handler):
        return f"route {route.path} handler is not callable"
    render_error = route.render_error
    if render_error is not None and not callable(render_error):
        return f"route {route.path} render_error is not callable"
    cap = route.max_body_bytes
    if cap is not None and number_setting(cap, integer=True) is None:
        return f"route {route.path} max_body_bytes must be a positive integer or None, got {cap!r}"
    methods = {str(m).upper() for m in route.methods}
    path = canonical_path(route.path)  # requests are routed without trailing slashes
    same = (
        r for r in app.url_map.iter_rules() if r.rule == path and not getattr(r, "websocket", False)
    )
    if any(methods & set(r.methods or ()) for r in same):
        return f"route {route.path} collides with an existing route; the first one is kept"
    endpoint = f"plugin.{plugin}.{index}"
    try:
        # A rule without a view: _asgi.DaemonApp calls route.handler for it.
        app.add_url_rule(path, endpoint, None, methods=sorted(methods))
    except Exception as exc:
        return f"route {route.path} could not be added: {type(exc).__name__}: {exc}"
    state.routes[endpoint] = (route.handler, frozenset(methods))
    if render_error is not None:
        state.error_shapes.by_endpoint[endpoint] = render_error
    if route.public:
        state.public_endpoints.add(endpoint)
    if cap is not None:
        state.body_limits[endpoint] = cap
    return None
