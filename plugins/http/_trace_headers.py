"""The trace context of a local caller that does not send it (or sends a lower one).

A process an agent's ``bash`` started may call the daemon without trace headers. For a
POST over loopback TCP while such processes run, the daemon's edge asks the kernel which
registered run holds the client end of the connection (``ProcessTraces.caller_of``: Linux
``/proc``, off the event loop) and, when it finds one, rewrites the request's trace
headers to the deeper of what the caller sent and that run's context. Every entry that
reads trace headers (``/api``, ``/mcp``, A2A, plugin routes) then continues the run's
chain, so the depth breaker trips however the caller calls.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from roost.kernel import InvalidTraceContext, KernelAPI, TraceContext


async def caller_headers(
    kernel: KernelAPI, method: str, items: Iterable[tuple[str, str]], peer: Any, local: Any
) -> list[tuple[str, str]] | None:
    """The request's headers with the trace headers the calling process's run calls for
    (``peer`` → ``local``: the connection's two ``(host, port)`` ends); None when they
    stay as they are (not a POST, no registered run holds the connection, or the caller
    already sent a context as deep). A malformed depth header is left for the entry to
    refuse (400)."""
    processes = kernel.process_traces
    if method != "POST" or not processes:
        return None
    found = await processes.caller_of(peer, local)
    if found is None:
        return None
    items = list(items)
    try:
        sent = TraceContext.from_headers(dict(items))
    except InvalidTraceContext:
        return None
    chosen = TraceContext.deepest(sent, found)
    if chosen is sent:
        return None
    names = TraceContext.header_names
    return [(n, v) for n, v in items if n.lower() not in names] + list(chosen.to_headers().items())


def install(app: Any, state: Any) -> None:
    """Apply ``caller_headers`` to the requests Quart serves (after the daemon's gates);
    plugin routes get it where their ``PlainRequest`` is made (``_asgi``)."""
    from quart import request

    @app.before_request
    async def _process_trace() -> None:
        if request.method != "POST" or not state.kernel.process_traces:
            return
        scope = request.scope
        rewritten = await caller_headers(
            state.kernel,
            request.method,
            request.headers.items(),
            scope.get("client"),
            scope.get("server"),
        )
        if rewritten is not None:
            for name in TraceContext.header_names:
                request.headers.remove(name)
            for name, value in rewritten:
                if name.lower() in TraceContext.header_names:
                    request.headers.add(name, value)
