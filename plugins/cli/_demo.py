"""``roost demo``: agents collaborating over kernel-routed MCP calls, then the breaker; on
a throw-away data directory (unless ``home`` is given), never the user's sessions.
"""

from __future__ import annotations

import tempfile
from functools import partial
from typing import Any, TextIO

import attrs

COLLABORATION_MESSAGE = "Write a haiku about Trio nurseries"
RUNAWAY_MESSAGE = "runaway: keep passing this along forever"


async def run_demo(
    config: Any = None, out: TextIO | None = None, *, home: str | None = None
) -> int:
    """Run the demo, printing to ``out``; returns a process exit code."""
    import sys

    import trio
    from roost.kernel import EventKind, default_config, open_kernel

    from ._commands import drain

    out = out or sys.stdout
    with tempfile.TemporaryDirectory(prefix="roost-demo-") as tmp:
        if config is None:
            config = default_config(home=home or tmp)
        else:
            config = attrs.evolve(config, home=home or tmp)

        say = partial(print, file=out, flush=True)
        say("booting kernel…")
        async with open_kernel(config) as kernel:
            say(f"agents: {', '.join(kernel.agents)}  ·  tools: {len(kernel.registry)}")
            for failure in kernel.plugins.failures:
                say(f"warning: plugin {failure.name} skipped: {failure.error}")

            async with kernel.tap.subscribe(buffer=10_000) as events:
                say()
                say(f"1. coordinator ← {COLLABORATION_MESSAGE!r}")
                reply = await kernel.send("coordinator", COLLABORATION_MESSAGE, timeout=60)
                collected = drain(events)
            say()
            say("trace tree (every hop is an EXEC:TOOL_CALL event routed by the kernel):")
            for line in trace_tree(collected, reply.trace_id):
                say("  " + line)
            say()
            say(f"reply: {reply.text}")
            for output in reply.outputs:  # handed over by the worker, adopted up the chain
                sizes = ", ".join(
                    f"{p.media_type or 'file'}, {len(p.raw)} bytes"
                    if p.raw is not None
                    else (p.media_type or "text")
                    for p in output.parts
                )
                say(f"artifact: {output.name} ({sizes}) — {output.description or 'no description'}")

            async with kernel.tap.subscribe(
                buffer=10_000, kinds=(EventKind.KERNEL_BREAKER,)
            ) as breaker:
                say()
                say(
                    f"2. coordinator ← {RUNAWAY_MESSAGE!r}  (coordinator → "
                    "worker → reviewer → coordinator → …)"
                )
                with trio.move_on_after(60):
                    runaway = await kernel.send("coordinator", RUNAWAY_MESSAGE, timeout=60)
                trips = drain(breaker)
            if not trips:
                say("error: the depth breaker did not trip")
                return 1
            trip = trips[0].payload
            say(
                f"breaker tripped: hop {len(trip['path'])} refused, "
                f"the depth limit is {trip['max_depth']}:"
            )
            say("  " + " → ".join(trip["path"]))
            say(f"reply: {runaway.text}")
        say()
        say("demo finished.")
    return 0


def trace_tree(events: list[Any], trace_id: str) -> list[str]:
    """Lines of an indented tree of the tool calls in one trace, in the order they began."""
    from roost.kernel import EventKind

    lines = []
    for ev in events:
        if ev.kind != EventKind.EXEC_TOOL_CALL or ev.trace is None or ev.trace.trace_id != trace_id:
            continue
        depth = ev.trace.depth
        payload = ev.payload if isinstance(ev.payload, dict) else {}
        if "jsonrpc" in payload:  # an agent asked another agent over the in-memory MCP transport
            args = payload.get("params", {}).get("arguments", {})
            what = (
                f"{ev.source} → {ev.target}  (MCP tools/call message: "
                f"{_short(args.get('message', ''))})"
            )
        else:
            what = (
                f"{ev.source} → {payload.get('tool', ev.target)}  "
                f"{_short(str(payload.get('arguments', '')))}"
            )
        lines.append("  " * (depth - 1) + "└─ " + what)
    return lines


def _short(text: str, limit: int = 60) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
