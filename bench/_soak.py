"""Load, leak and crash scenarios against a real daemon, for ``bench/load.py`` and the
soak tests (``tests/soak/``): one implementation, run at full size by the bench and at a
bounded size by ``make test``.

The daemon is ``roost run`` (its own code path: ``run_command(own_process=True)``) in a
process of its own, started as ``python -m bench._soak daemon STATS --port PORT``: the
same process, plus a handler that writes the sizes of its tables (MCP sessions, A2A tasks
in memory, event subscribers, caches, Trio tasks) and its RSS to ``STATS`` on SIGUSR1, so
a check can hold each table to its bound. Traffic comes from ``bench._load_client``
processes (several, so that the generator does not starve itself).
"""

from __future__ import annotations

import gc
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

from ._daemon import Daemon, proc_status

# ---- the daemon side ---------------------------------------------------------------------


def tables(kernel: Any) -> dict[str, Any]:
    """What the daemon holds in memory, table by table, with each bound where it has one."""
    import trio
    from roost.plugins.a2a._server import service_for
    from roost.plugins.mcp._http_server import hub_for
    from roost.plugins.mcp._server import artifact_shelf

    hub = hub_for(kernel)
    sessions = list(hub.sessions.values())
    service = service_for(kernel)
    tasks = service.tasks if service is not None else None
    runtimes = list(kernel._runtimes.values())
    shelf = artifact_shelf(kernel)
    trio_tasks = 0
    pending = [trio.lowlevel.current_root_task()]
    while pending:
        task = pending.pop()
        trio_tasks += 1
        for nursery in task.child_nurseries:
            pending.extend(nursery.child_tasks)
    pid = os.getpid()
    return {
        "rss_kb": proc_status(pid, "VmRSS"),
        "fds": len(os.listdir(f"/proc/{pid}/fd")),
        "trio_tasks": trio_tasks,
        "gc_objects": len(gc.get_objects()),
        "mcp_sessions": len(sessions),
        "mcp_sessions_bound": hub.max_sessions,
        "mcp_sessions_per_caller_bound": hub.per_caller,
        "mcp_session_streams": sum(len(s.streams) for s in sessions),
        "mcp_stream_events": sum(len(st.events) for s in sessions for st in s.streams.values()),
        "a2a_live_tasks": len(tasks.live) if tasks else 0,
        "a2a_open_tasks": sum(len(v) for v in tasks._open.values()) if tasks else 0,
        "a2a_open_tasks_bound": tasks.open_per_caller if tasks else 0,
        "a2a_deferred_rows": len(tasks._deferred.due) if tasks else 0,
        "tap_subscribers": kernel.tap.subscriber_count,
        "agent_runs": sum(len(r._runs) for r in runtimes),
        "session_locks": sum(len(r._session_locks) for r in runtimes),
        "policy_cache": len(kernel._policy_cache),
        "call_plans": len(kernel._plans),
        "surfaces": len(kernel._surfaces),
        "agents": len(kernel.agents),
        "artifacts": len(shelf._items),
    }


async def _stats_on_signal(kernel: Any, path: Path) -> None:
    import trio

    with trio.open_signal_receiver(signal.SIGUSR1) as signals:
        async for _ in signals:
            gc.collect()
            data = json.dumps(tables(kernel))
            temp = path.with_suffix(".tmp")
            temp.write_text(data, encoding="utf-8")
            temp.replace(path)


def _daemon_main(argv: list[str]) -> int:
    """``daemon STATS --port PORT``: ``roost run`` with the stats handler."""
    import trio
    from roost.kernel import load_config
    from roost.kernel import open_kernel as real_open_kernel
    from roost.plugins.cli._commands import run_command

    stats, port = Path(argv[0]), int(argv[2])
    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )

    @asynccontextmanager
    async def open_kernel(config: Any):
        async with real_open_kernel(config) as kernel, trio.open_nursery() as nursery:
            nursery.start_soon(_stats_on_signal, kernel, stats)
            try:
                yield kernel
            finally:
                nursery.cancel_scope.cancel()

    run = partial(
        run_command, load_config(), host="127.0.0.1", port=port, out=sys.stdout, err=sys.stderr,
        open_kernel=open_kernel, own_process=True,
    )  # fmt: skip
    return trio.run(run)


class SoakDaemon(Daemon):
    """``roost run`` with the stats handler; ``stats()`` reads its tables."""

    def __init__(self, config: Path, workdir: Path, **kwargs: Any) -> None:
        self.stats_path = workdir / "daemon-stats.json"
        command = [sys.executable, "-m", "bench._soak", "daemon", str(self.stats_path)]
        super().__init__(config, log=workdir / "daemon.log", command=command, **kwargs)

    def stats(self, timeout: float = 30.0) -> dict[str, Any]:
        self.stats_path.unlink(missing_ok=True)
        os.kill(self.pid, signal.SIGUSR1)
        deadline = time.monotonic() + timeout
        while not self.stats_path.exists():
            if time.monotonic() > deadline:
                raise RuntimeError(f"the daemon wrote no stats within {timeout:g} s")
            time.sleep(0.02)
        return json.loads(self.stats_path.read_text(encoding="utf-8"))

    def settle(
        self, timeout: float = 60.0, until: Callable[[dict[str, Any]], bool] | None = None
    ) -> dict[str, Any]:
        """Wait until nothing is in flight (no agent run, no open A2A task in memory) and
        ``until(stats)`` holds, or ``timeout`` passes; the tables then."""
        deadline = time.monotonic() + timeout
        while True:
            stats = self.stats()
            idle = stats["agent_runs"] == 0 and stats["a2a_deferred_rows"] == 0
            if (idle and (until is None or until(stats))) or time.monotonic() > deadline:
                return stats
            time.sleep(0.2)


# ---- the clients -------------------------------------------------------------------------


def drive(
    base: str,
    workdir: Path,
    *,
    surface: str,
    processes: int,
    callers: int,
    requests: int,
    agents: list[str],
    tag: str = "load",
    timeout_s: float = 60.0,
    stop_at: float | None = None,
    sample: Callable[[], None] | None = None,
    headers: dict[str, str] | None = None,
) -> dict[str, Any]:
    """``processes`` load clients with ``callers`` callers in all, each sending ``requests``
    requests one after another (until ``stop_at``, epoch seconds, if given); ``sample()``
    is called every 50 ms meanwhile. Their results merged."""
    import subprocess

    per_process = max(1, callers // processes)
    start_at = time.time() + 1.0 + 0.2 * processes  # every process ready before it
    procs = []
    for k in range(processes):
        out = workdir / f"client-{tag}-{k}.json"
        out.unlink(missing_ok=True)
        spec = {
            "base": base, "surface": surface, "callers": per_process,
            "first_index": k * per_process,
            "requests": requests, "agents": agents, "start_at": start_at, "timeout_s": timeout_s,
            "tag": tag, "out": str(out), "stop_at": stop_at or 0, "headers": headers or {},
        }  # fmt: skip
        procs.append(
            (out, subprocess.Popen([sys.executable, "-m", "bench._load_client", json.dumps(spec)]))
        )
    # Every request is bounded: the whole run is too.
    deadline = (
        time.monotonic() + 5 + requests * timeout_s + (stop_at - time.time() if stop_at else 0)
    )
    while any(p.poll() is None for _, p in procs):
        if time.monotonic() > deadline:
            for _, p in procs:
                p.kill()
            raise RuntimeError("the load clients did not finish in time")
        if sample is not None:
            sample()
        time.sleep(0.05)
    results = []
    for out, p in procs:
        if p.returncode != 0:
            raise RuntimeError(f"a load client exited with {p.returncode}")
        results.append(json.loads(out.read_text(encoding="utf-8")))
    merged: dict[str, Any] = {"latencies": {}, "errors": {}, "acked": {}}
    for r in results:
        for key in ("latencies", "acked"):
            for s, values in r[key].items():
                merged[key].setdefault(s, []).extend(values)
        for s, counts in r["errors"].items():
            bucket = merged["errors"].setdefault(s, {})
            for kind, n in counts.items():
                bucket[kind] = bucket.get(kind, 0) + n
    merged["asked"] = None if stop_at else per_process * processes * requests
    merged["started"] = min(r["started"] for r in results)
    merged["ended"] = max(r["ended"] for r in results)
    merged["client_cpu_s"] = sum(r["cpu_s"] for r in results)
    merged["handshakes"] = sorted(t for r in results for t in r.get("handshakes", ()))
    return merged


def percentile(sorted_values: list[float], q: float) -> float | None:
    if not sorted_values:
        return None
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def summary(result: dict[str, Any], surface: str | None = None) -> dict[str, Any]:
    """Throughput, p50/p99/max latency (s) and errors of one surface (None: all); with all,
    how many requests were sent (``asked``, None for a run until a given time)."""
    surfaces = [surface] if surface else list(result["latencies"])
    latencies = sorted(x for s in surfaces for x in result["latencies"].get(s, ()))
    errors: dict[str, int] = {}
    for s in surfaces:
        for kind, n in result["errors"].get(s, {}).items():
            errors[kind] = errors.get(kind, 0) + n
    wall = max(1e-9, result["ended"] - result["started"])
    return {
        "answered": len(latencies),
        "asked": None if surface else result.get("asked"),
        "throughput": len(latencies) / wall,
        "p50": percentile(latencies, 0.50),
        "p99": percentile(latencies, 0.99),
        "max": latencies[-1] if latencies else None,
        "errors": errors,
        "wall_s": wall,
    }


# ---- no leak ------------------------------------------------------------------------------

# The tables that must be empty once nothing is in flight.
IDLE_EMPTY = (
    "agent_runs",
    "session_locks",
    "a2a_live_tasks",
    "a2a_open_tasks",
    "a2a_deferred_rows",
)


def _over_baseline(after: dict[str, Any], baseline: dict[str, Any]) -> list[str]:
    """The per-connection tables above their baseline by more than one per open MCP session."""
    return [
        table
        for table in ("tap_subscribers", "trio_tasks")
        if after[table] > baseline[table] + after["mcp_sessions"]
    ]


def leak(
    workdir: Path,
    *,
    requests: int,
    sessions: int,
    warm_requests: int,
    warm_sessions: int = 1000,
    processes: int = 4,
    callers: int = 100,
    agents: int = 10,
) -> dict[str, Any]:
    """Warm up (``warm_requests`` mixed requests, ``warm_sessions`` MCP sessions opened and
    abandoned: the bounded tables fill), take the baseline, then ``requests`` mixed
    requests and ``sessions`` sessions opened and abandoned; the tables and RSS before and
    after, and in ``"problems"`` every table over its bound or not back to empty. The
    daemon runs with roost's default bounds."""
    from ._daemon import write_agents, write_config

    names = [f"echo{i}" for i in range(agents)]
    agents_dir = write_agents(workdir / "agents", names)
    config = write_config(workdir, agents_dir=agents_dir, home=workdir / "home")
    daemon = SoakDaemon(config, workdir)
    daemon.start()
    peak = [0]

    def sample() -> None:
        peak[0] = max(peak[0], daemon.rss_kb())

    per_caller = max(1, callers // processes) * processes
    common = {"processes": processes, "callers": callers, "agents": names, "sample": sample}
    phases: dict[str, Any] = {}
    try:
        # Every client is 127.0.0.1, one caller to the daemon: with as many sessions in
        # their handshake as http.mcp_sessions_per_caller allows, a new one rightly closes
        # the oldest idle of them. Openers stay at half the bound: only abandoned ones close.
        openers = max(1, min(callers, daemon.stats()["mcp_sessions_per_caller_bound"] // 2))
        per_opener = max(1, openers // processes) * processes
        opening = {**common, "callers": openers}
        phases["warm"] = drive(
            daemon.base,
            workdir,
            surface="mixed",
            requests=max(1, warm_requests // per_caller),
            tag="warm",
            **common,
        )
        phases["warm_open"] = drive(
            daemon.base,
            workdir,
            surface="mcp_open",
            requests=max(1, warm_sessions // per_opener),
            tag="warmopen",
            **opening,
        )
        baseline = daemon.settle()
        peak[0] = 0
        phases["mixed"] = drive(
            daemon.base,
            workdir,
            surface="mixed",
            requests=max(1, requests // per_caller),
            tag="mixed",
            **common,
        )
        phases["open"] = drive(
            daemon.base,
            workdir,
            surface="mcp_open",
            requests=max(1, sessions // per_opener),
            tag="open",
            **opening,
        )
        # The clients have gone, but a loaded daemon may not have read every closed
        # connection's end yet: wait (bounded) for its tasks to come back, as a leak won't.
        after = daemon.settle(timeout=30.0, until=lambda s: not _over_baseline(s, baseline))
    finally:
        daemon.stop()
    problems = []
    if after["mcp_sessions"] > after["mcp_sessions_bound"]:
        problems.append(
            f"{after['mcp_sessions']} MCP sessions, over the bound of {after['mcp_sessions_bound']}"
        )
    if after["mcp_sessions"] > after["mcp_sessions_per_caller_bound"]:  # every client is 127.0.0.1
        problems.append(f"{after['mcp_sessions']} MCP sessions of one caller, over its bound")
    for table in IDLE_EMPTY:
        if after[table]:
            problems.append(f"{table}: {after[table]} with nothing in flight")
    for table in _over_baseline(after, baseline):
        problems.append(f"{table}: {after[table]} after, {baseline[table]} at the baseline")
    ratio = after["rss_kb"] / baseline["rss_kb"]
    if ratio > 1.10:
        problems.append(
            f"RSS {after['rss_kb']} KB after, {ratio:.3f}x the baseline {baseline['rss_kb']} KB"
        )
    return {
        "baseline": baseline,
        "after": after,
        "peak_rss_kb": peak[0],
        "rss_ratio": ratio,
        "phases": {name: summary(result) for name, result in phases.items()},
        "problems": problems,
    }


# ---- a day of traffic with a crash in the middle ----------------------------------------

TOOL_SCRIPT = {
    "rules": [
        {
            "match": ".",
            "steps": [{"tool": "artifact", "arguments": {"name": "note", "text": "{message}"}}],
            "reply": "noted: {message}",
        }
    ]
}
SLOW_SCRIPT = {
    "rules": [
        {
            "match": ".",
            "steps": [{"tool": "bash", "arguments": {"command": "sleep 60"}}],
            "reply": "slept",
        }
    ]
}
ASK_SCRIPT = {"rules": [{"match": ".", "ask": "Which one?", "reply": "you chose {answer}"}]}
A2A = {"A2A-Version": "1.0", "Content-Type": "application/json"}
STOPPED = "the roost daemon stopped while this task was running"


def _a2a(
    port: int, agent: str | None, method: str, params: dict[str, Any], timeout: float = 30.0
) -> Any:
    """One A2A 1.0 JSON-RPC call to ``agent`` (None: the root endpoint, which finds any
    of the caller's tasks); its result (RuntimeError on an error)."""
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
        path = f"/a2a/agents/{agent}/jsonrpc" if agent else "/a2a/jsonrpc"
        conn.request("POST", path, body, A2A)
        reply = json.loads(conn.getresponse().read())
    finally:
        conn.close()
    if "error" in reply:
        raise RuntimeError(f"{method}: {reply['error']}")
    return reply["result"]


def _message(text: str, **ids: str) -> dict[str, Any]:
    return {
        "messageId": f"m-{time.time_ns()}",
        "role": "ROLE_USER",
        "parts": [{"text": text}],
        **ids,
    }


def _start_time(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _descendants(pid: int) -> dict[int, str]:
    """Every process below ``pid``, with its start time (to tell a reused pid apart)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", encoding="ascii") as stat:
                    parent = int(stat.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(parent, []).append(int(entry))
    found: dict[int, str] = {}
    pending = [pid]
    while pending:
        for child in children.get(pending.pop(), []):
            started = _start_time(child)
            if started is not None:
                found[child] = started
            pending.append(child)
    return found


def _resubscribe(port: int, agent: str, task_id: str, context_id: str) -> tuple[dict, str]:
    """SubscribeToTask after the restart: the task as it stands (the replay: its state and
    history; a task waiting for input is settled, so the stream ends there), then the state
    the task reaches once the question is answered."""
    import http.client

    from ._a2a_load import Response

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        body = json.dumps(
            {"jsonrpc": "2.0", "id": 1, "method": "SubscribeToTask", "params": {"id": task_id}}
        )
        conn.request("POST", f"/a2a/agents/{agent}/jsonrpc", body, A2A)
        response = conn.getresponse()
        events = Response(response.status, {}, response.read(), False).sse_data()
    finally:
        conn.close()
    first = (
        events[0]["result"]["task"]
        if events and "task" in events[0].get("result", {})
        else {"status": {"state": str(events)[:200]}}
    )
    answer = {"message": _message("the blue one", taskId=task_id, contextId=context_id)}
    final = _a2a(port, agent, "SendMessage", answer)["task"]["status"]["state"]
    return first, final


def crash(
    workdir: Path,
    *,
    seconds: float,
    processes: int = 4,
    callers: int = 40,
    in_flight: int = 8,
    waiting: int = 8,
) -> dict[str, Any]:
    """Mixed traffic from ``processes`` clients for ``seconds``; half-way, ``in_flight``
    non-blocking A2A tasks are left running (``bash sleep``) and the daemon is SIGKILLed,
    then restarted on the same data directory and port while the traffic goes on.
    ``waiting`` tasks wait for input across the crash. Returns the counts, and in
    ``"problems"`` every acknowledged write that was lost (empty when none was)."""
    import sqlite3
    import threading

    from ._daemon import write_agents, write_config

    tools = [f"tool{i}" for i in range(4)]
    agents_dir = write_agents(
        workdir / "agents", tools, TOOL_SCRIPT, capabilities={"tools": ["artifact"]}
    )
    write_agents(agents_dir, ["slow"], SLOW_SCRIPT, capabilities={"tools": ["bash"]})
    write_agents(agents_dir, ["asker"], ASK_SCRIPT)
    home = workdir / "home"
    # No finished task may be evicted while the soak runs: each is looked for afterwards.
    extra = "[a2a]\nmax_tasks = 1000000\nmax_open_tasks_per_caller = 10000\n"
    config = write_config(workdir, agents_dir=agents_dir, home=home, extra=extra)
    daemon = Daemon(config, log=workdir / "daemon.log")
    daemon.start()
    port = daemon.port
    problems: list[str] = []
    try:
        asked = []
        for _ in range(waiting):
            task = _a2a(port, "asker", "SendMessage", {"message": _message("pick one")})["task"]
            assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", task
            asked.append((task["id"], task["contextId"]))
        stop_at = time.time() + seconds
        result: dict[str, Any] = {}

        def traffic() -> None:
            result.update(
                drive(
                    daemon.base, workdir, surface="mixed", processes=processes, callers=callers,
                    requests=1_000_000, agents=tools, tag="soak", timeout_s=10.0, stop_at=stop_at,
                )
            )  # fmt: skip

        clients = threading.Thread(target=traffic)
        clients.start()
        time.sleep(seconds / 2)
        running = []
        for _ in range(in_flight):
            params = {
                "message": _message("take your time"),
                "configuration": {"returnImmediately": True},
            }
            task = _a2a(port, "slow", "SendMessage", params)["task"]
            running.append((task["id"], task["contextId"]))
        deadline = time.monotonic() + 30
        while sum("sleep" in _cmdline(p) for p in _descendants(daemon.pid)) < in_flight:
            if time.monotonic() > deadline:
                problems.append("the slow tasks' bash commands did not start")
                break
            time.sleep(0.05)
        children = _descendants(daemon.pid)
        daemon.kill()
        killed_at = time.time()
        deadline = time.monotonic() + 10
        orphans = children
        while orphans and time.monotonic() < deadline:
            orphans = {pid: t for pid, t in children.items() if _start_time(pid) == t}
            time.sleep(0.05)
        restart = Daemon(config, port=port, log=workdir / "daemon.log")
        restart_s = restart.start()
        clients.join(seconds + 120)
        daemon = restart
        if "acked" not in result:
            raise RuntimeError("the load clients failed (see above)")

        # Every task acknowledged before (or after) the kill is there, in the state it had.
        acked_tasks = [tuple(x) for s in ("a2a", "a2a_stream") for x in result["acked"].get(s, [])]
        for task_id, _ in acked_tasks:
            state = _a2a(port, None, "GetTask", {"id": task_id})["status"]["state"]
            if state != "TASK_STATE_COMPLETED":
                problems.append(f"acknowledged task {task_id} is {state} after the crash")
        failed = 0
        for task_id, _ in running:
            task = _a2a(port, "slow", "GetTask", {"id": task_id})
            text = " ".join(
                p.get("text", "") for p in (task["status"].get("message") or {}).get("parts", [])
            )
            if task["status"]["state"] == "TASK_STATE_FAILED" and STOPPED in text:
                failed += 1
            else:
                problems.append(
                    f"task {task_id} in flight at the kill is {task['status']['state']}: {text!r}"
                )
        replayed = 0
        for task_id, context_id in asked:
            first, final = _resubscribe(port, "asker", task_id, context_id)
            question = [m for m in first.get("history", []) if m.get("role") == "ROLE_AGENT"]
            if (
                first["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
                and question
                and final == "TASK_STATE_COMPLETED"
            ):
                replayed += 1
            else:
                problems.append(
                    f"resubscribing to {task_id}: first {first['status']['state']}, then {final}"
                )
    finally:
        daemon.stop()

    # Every acknowledged session and tool call is in the store (read once roost is stopped).
    db = sqlite3.connect(f"file:{home / 'roost.db'}?mode=ro", uri=True)
    try:
        sessions = {row[0] for row in db.execute("SELECT id FROM sessions")}
        audited = {row[0] for row in db.execute("SELECT DISTINCT session_id FROM audit")}
    finally:
        db.close()
    tasks_db = sqlite3.connect(f"file:{home / 'a2a.db'}?mode=ro", uri=True)
    try:
        by_state = dict(
            tasks_db.execute("SELECT state, count(*) FROM tasks GROUP BY state").fetchall()
        )
    finally:
        tasks_db.close()
    acked_sessions = list(result["acked"].get("rest", [])) + [c for _, c in acked_tasks]
    for session in acked_sessions:
        if session not in sessions:
            problems.append(f"acknowledged session {session} is missing after the crash")
        if session not in audited:
            problems.append(f"acknowledged session {session} has no audit row for its tool call")
    for pid in orphans:
        problems.append(f"process {pid} ({_cmdline(pid)!r}) outlived the daemon")
    return {
        "summary": summary(result),
        "acked_tasks": len(acked_tasks) + len(running) + len(asked),
        "acked_sessions": len(acked_sessions),
        "audited_sessions": len(acked_sessions) - sum("audit" in p for p in problems),
        "in_flight_failed": failed,
        "stored_tasks_by_state": by_state,
        "resubscribed": replayed,
        "children_at_kill": len(children),
        "orphans": len(orphans),
        "restart_s": restart_s,
        "errors_around_kill": summary(result)["errors"],
        "killed_after_s": killed_at - result.get("started", killed_at),
        "problems": problems,
    }


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return cmdline.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "daemon" and sys.argv[3] == "--port":
        sys.exit(_daemon_main(sys.argv[2:]))
    print("usage: python -m bench._soak daemon STATS --port PORT", file=sys.stderr)
    sys.exit(2)
