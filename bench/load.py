"""roost under load: one ``roost run`` daemon, scripted agents, callers in 4 processes.

- **1,000 concurrent callers per surface** — A2A ``SendMessage`` (blocking), A2A
  ``SendStreamingMessage``, MCP ``tools/call`` over Streamable HTTP (each caller opens one
  session with ``initialize`` and reuses it for all its calls) and ``POST
  /api/agents/{name}/message``. 1,000 callers (4 processes × 250, raw keep-alive sockets:
  ``_load_client``) connect at once and each sends its requests one after another, each
  bounded by 60 s. Throughput is answered requests over the wall time; the floor is the
  same surface with 32 callers in the same run (the ratio shows what 1,000 cost). The
  notes give p50/max latency, the daemon's RSS before/at peak/after, its open
  descriptors after and its CPU time (a daemon is one Python process: CPU seconds close to
  the wall time mean it was saturated, and then a caller waits about callers /
  throughput). Without API keys every caller is the principal ``local`` at
  127.0.0.1, so the bench's ``roost.toml`` raises the bounds that are per caller: 1,000
  MCP sessions (``http.mcp_sessions_per_caller``, default 100) and 1,000 open A2A tasks
  (``a2a.max_open_tasks_per_caller``, default 100, so ``a2a.max_tasks`` = 10,000) —
  otherwise the 101st concurrent caller gets the documented 429 / a closed session.
  Loopback callers are not rate limited (``http.rate_limit_loopback`` is false).
- **no leak** — a daemon with the default bounds: warm-up (4,000 mixed requests, 1,000 MCP
  sessions opened and abandoned), then 20,000 mixed requests and 10,000 abandoned
  sessions: RSS after vs the post-warm-up baseline, and every table at its bound
  (``bench._soak.leak``).
- **mesh** — 1,000 agents on one daemon; each request to one of 10 top agents fans out to
  10 agents (scripted ``{"parallel": [...]}`` steps), each of which fans out to 10 more:
  111 agent runs per request, depth 3 under the breaker's 5, the loop guard on.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from . import Row, Target
from ._daemon import Daemon, write_agents, write_config
from ._soak import drive, leak, summary

PROCESSES = 4
CALLERS = 1000
FEW = 32
SURFACES = {
    "a2a": "A2A SendMessage",
    "a2a_stream": "A2A SendStreamingMessage",
    "mcp": "MCP tools/call",
    "rest": "POST /api/agents/{name}/message",
}
BOUNDS = """[http]
mcp_sessions_per_caller = 1000

[a2a]
max_tasks = 10000
max_open_tasks_per_caller = 1000
"""
MESH_AGENTS = 1000
FAN_OUT = 10


def _mb(kb: float) -> str:
    return f"{kb / 1024:.0f}"


def _load(root: Path, quick: bool) -> tuple[list[Row], dict[str, int]]:
    names = [f"echo{i}" for i in range(10)]
    agents = write_agents(root / "agents", names)
    config = write_config(root, agents_dir=agents, home=root / "home", extra=BOUNDS)
    daemon = Daemon(config, log=root / "daemon.log")
    daemon.start()
    rows: list[Row] = []
    unexplained: dict[str, int] = {}
    requests = 1 if quick else 3
    try:
        for surface, label in SURFACES.items():
            few = drive(daemon.base, root, surface=surface, processes=1, callers=FEW,
                        requests=10 if quick else 40, agents=names,
                        tag=f"{surface}-few")  # fmt: skip
            before, cpu = daemon.rss_kb(), daemon.cpu_s()
            peak = [before]

            def sample(peak: list[int] = peak) -> None:
                peak[0] = max(peak[0], daemon.rss_kb())

            many = drive(daemon.base, root, surface=surface, processes=PROCESSES, callers=CALLERS,
                         requests=requests, agents=names, tag=surface, sample=sample)  # fmt: skip
            after, fds, cpu = daemon.rss_kb(), daemon.fds(), daemon.cpu_s() - cpu
            s, f = summary(many), summary(few)
            for kind, n in s["errors"].items():
                if not kind.startswith("http 429"):  # the documented refusal under a bound
                    unexplained[f"{surface}: {kind}"] = n
            handshakes = many.get("handshakes") or []
            if handshakes:  # MCP: each caller's initialize + initialized, before its first call
                p50, p99 = handshakes[len(handshakes) // 2], handshakes[int(0.99 * len(handshakes))]
                label_note = f"sessions opened: p50 {p50:.2f} s, p99 {p99:.2f} s; "
            else:
                label_note = ""
            note = label_note + (
                f"{s['answered']:,} answered; p50 {s['p50'] or 0:.2f} s, "
                f"max {s['max'] or 0:.2f} s; RSS {_mb(before)}/{_mb(peak[0])}/{_mb(after)} MB "
                f"(before/peak/after), {fds} fds after; daemon CPU {cpu:.1f} s "
                f"in {s['wall_s']:.1f} s ({1000 * cpu / max(1, s['answered']):.1f} ms a request)"
            )
            rows.append(Row(f"{label} ×{CALLERS:,}: throughput", s["throughput"], "req/s",
                            f["throughput"], f"{FEW} callers", Target("ratio", ">=", 0.8),
                            note))  # fmt: skip
            errors = ", ".join(f"{k} ×{n}" for k, n in s["errors"].items()) or "no errors"
            rows.append(Row(f"{label} ×{CALLERS:,}: p99", s["p99"], "s", f["p99"], f"{FEW} callers",
                            Target("value", "<=", 1.0), errors))  # fmt: skip
    finally:
        daemon.stop()
    return rows, unexplained


def _mesh_agents(root: Path) -> tuple[Path, list[str]]:
    """``MESH_AGENTS`` agents: 10 top ones, each asking 10 middle ones at once, each of
    which asks 10 leaves at once (111 runs per request to a top agent)."""
    names = [f"m{i:04d}" for i in range(MESH_AGENTS)]
    leaves = names[10 + 10 * FAN_OUT :]

    def fan_out(children: list[str], prefix: str) -> dict[str, Any]:
        calls = [
            {"tool": f"agent_{c}", "arguments": {"message": f"{prefix} {{message}}"}}
            for c in children
        ]
        return {"rules": [{"match": ".", "steps": [{"parallel": calls}], "reply": "{results}"}]}

    limits = {"max_concurrent_tools": FAN_OUT}
    for t in range(10):
        middle = names[10 + t * FAN_OUT : 10 + (t + 1) * FAN_OUT]
        write_agents(
            root,
            [names[t]],
            fan_out(middle, "L1"),
            capabilities={"tools": [f"agent_{c}" for c in middle]},
            limits=limits,
        )
        for k, mid in enumerate(middle):
            start = ((t * FAN_OUT + k) * FAN_OUT) % len(leaves)
            mine = [leaves[(start + j) % len(leaves)] for j in range(FAN_OUT)]
            write_agents(
                root,
                [mid],
                fan_out(mine, "L2"),
                capabilities={"tools": [f"agent_{c}" for c in mine]},
                limits=limits,
            )
    write_agents(root, leaves, {"rules": [{"match": ".", "reply": "leaf"}]})
    return root, names[:10]


def _mesh(root: Path, quick: bool) -> list[Row]:
    agents, tops = _mesh_agents(root / "mesh-agents")
    config = write_config(root, agents_dir=agents, home=root / "mesh-home")
    daemon = Daemon(config, log=root / "mesh.log")
    daemon.start()
    try:
        callers = 20 if quick else 50
        result = drive(daemon.base, root, surface="rest", processes=2, callers=callers,
                       requests=2 if quick else 6, agents=tops, tag="mesh",
                       timeout_s=120)  # fmt: skip
    finally:
        daemon.stop()
    s = summary(result)
    runs = 1 + FAN_OUT + FAN_OUT * FAN_OUT
    errors = ", ".join(f"{k} ×{n}" for k, n in s["errors"].items()) or "no errors"
    # A breaker trip (508) or a loop stopped would be an error of its request.
    note = f"{callers} callers; {s['throughput'] * runs:,.0f} agent runs/s; {errors}"
    return [
        Row(
            f"mesh: {MESH_AGENTS:,} agents, fan-out {FAN_OUT}×{FAN_OUT}: throughput",
            s["throughput"],
            "req/s",
            note=note,
        ),
        Row(
            f"mesh: {MESH_AGENTS:,} agents, fan-out {FAN_OUT}×{FAN_OUT}: p99",
            s["p99"],
            "s",
            note=f"p50 {s['p50'] or 0:.2f} s, max {s['max'] or 0:.2f} s; {runs} runs per request",
        ),  # fmt: skip
    ]


def _leak(root: Path, quick: bool) -> list[Row]:
    sizes = (2000, 1000, 4000, 2000) if quick else (4000, 1000, 20000, 10000)
    result = leak(
        root, warm_requests=sizes[0], warm_sessions=sizes[1], requests=sizes[2], sessions=sizes[3]
    )
    base, after = result["baseline"], result["after"]
    errors = sum(sum(p["errors"].values()) for p in result["phases"].values())
    tables = "; ".join(result["problems"]) or (
        f"tables at rest: {after['mcp_sessions']} MCP sessions "
        f"(bound {after['mcp_sessions_per_caller_bound']} per caller), 0 runs, 0 open tasks, "
        f"{after['tap_subscribers']} subscribers"
    )
    return [
        Row(
            f"leak: RSS after {sizes[2]:,} requests + {sizes[3]:,} abandoned MCP sessions",
            after["rss_kb"] / 1024,
            "MB",
            base["rss_kb"] / 1024,
            "post-warm-up baseline",
            Target("ratio", "<=", 1.10),
            f"peak {_mb(result['peak_rss_kb'])} MB; {errors} errors; {tables}",
        )
    ]


def run(quick: bool) -> list[Row]:
    with tempfile.TemporaryDirectory(prefix="roost-bench-load-") as tmp:
        root = Path(tmp)
        (root / "load").mkdir()
        (root / "leak").mkdir()
        (root / "mesh").mkdir()
        rows, unexplained = _load(root / "load", quick)
        rows.append(
            Row(
                f"load: unexplained errors ({CALLERS:,} callers, 4 surfaces)",
                float(sum(unexplained.values())),
                "",
                target=Target("value", "<=", 0),
                note=", ".join(f"{k} ×{n}" for k, n in unexplained.items())
                or "only documented 429s allowed",
            )
        )
        rows += _leak(root / "leak", quick)
        rows += _mesh(root / "mesh", quick)
    return rows
