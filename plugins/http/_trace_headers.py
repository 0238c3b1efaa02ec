"""The trace context of a local caller that does not send it (or sends a lower one).

A process an agent's ``bash`` started may call the daemon without trace headers. For a
POST while such processes run, the kernel finds the run holding the connection's client
end (``ProcessTraces.caller_of``) and its context replaces a shallower one, so every entry
continues the run's chain and the depth breaker trips however the caller calls.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from roost.kernel import InvalidTraceContext, KernelAPI, TraceContext


async def caller_headers(
    kernel: KernelAPI, method: str, items: Iterable[tuple[str, str]], peer: Any, local: Any
) -> list[tuple[str, str]] | None:
    """The request's headers with the trace headers of the run holding the connection
    (``peer`` → ``local``), or None to keep them (a malformed one is the entry's to refuse)."""
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
