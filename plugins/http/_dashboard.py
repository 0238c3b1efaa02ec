"""The dashboard: static files at ``/`` (no data in them, so public) and recent traces'
spans (``GET /api/traces[/<id>]``: admins only, like the event stream). The page runs only
its own script and style (a strict Content-Security-Policy) and renders values as text.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

from quart import request
from roost.kernel import InvalidInput, parse_int

from ._auth import principal_of, split_host
from ._common import InvalidRequest, admin_only, refusal

FILES = {
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "style.css": "text/css; charset=utf-8",
}
DEFAULT_TRACES = 20


def page_headers(host: str | None) -> dict[str, str]:
    """The page's headers; its policy: its own script, style and API, websockets to the host
    it was loaded from (named as well as ``'self'``, which some browsers do not apply to ws:)."""
    sockets = f" ws://{host} wss://{host}" if host and split_host(host) is not None else ""
    return {
        "Content-Security-Policy": (
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
            f"connect-src 'self'{sockets}; base-uri 'none'; form-action 'none'; "
            "frame-ancestors 'none'"
        ),
        "X-Frame-Options": "DENY",
        "Referrer-Policy": "no-referrer",
        "Cross-Origin-Opener-Policy": "same-origin",
    }


def install(app: Any, state: Any) -> None:
    """Add the dashboard's routes to the daemon's app."""
    from ._app import refusal_response

    folder = resources.files(__package__).joinpath("dashboard")  # shipped as package data
    files = {name: folder.joinpath(name).read_bytes() for name in FILES}

    def serve(name: str) -> Any:
        return app.response_class(
            files[name], content_type=FILES[name], headers=page_headers(request.headers.get("Host"))
        )

    @app.get("/")
    async def dashboard() -> Any:
        return serve("index.html")

    @app.get("/dashboard/<name>")
    async def dashboard_file(name: str) -> Any:
        if name not in FILES or name == "index.html":
            refused = refusal(404, "not_found", f"no dashboard file {name!r}")
            return refusal_response(app, refused)
        return serve(name)

    state.public_endpoints.update(("dashboard", "dashboard_file"))

    def refused() -> Any:
        principal = principal_of(request)
        if principal is not None and principal.admin:
            return None
        reason = "traces show every caller's work, so only an admin principal may read them"
        return refusal_response(app, admin_only(reason))

    @app.get("/api/traces")
    async def list_traces() -> Any:
        if (refused_now := refused()) is not None:
            return refused_now
        try:
            limit = parse_int(request.args.get("limit", str(DEFAULT_TRACES)), "limit", 1, 10_000)
        except InvalidInput as exc:
            raise InvalidRequest("limit", f"query parameter {exc}") from None
        log = state.traces
        return {"traces": log.recent(limit), "kept": len(log), "history": log.max_traces}

    @app.get("/api/traces/<trace_id>")
    async def get_trace(trace_id: str) -> Any:
        if (refused_now := refused()) is not None:
            return refused_now
        spans = state.traces.spans(trace_id)
        if spans is None:
            kept = state.traces.max_traces
            message = f"trace {trace_id[:64]!r} is not held here (the newest {kept} traces are)"
            return refusal_response(app, refusal(404, "trace_not_found", message))
        return {"trace_id": trace_id, "spans": spans}
