"""10,000 agents started the way a user starts them: folders in ``agents.dirs``, ``roost run``.

- boot: wall clock from spawning ``roost run`` to ``/health`` answering 200, best of 3, with
  10,000 generated agent folders (scripted provider, one rule each) in ``agents.dirs``;
- RSS per idle agent: the daemon's RSS with 10,000 agents minus a 0-agent daemon's, over
  10,000, after ten of the agents have answered a message (they are alive, not just loaded).
The floor is 10,000 bare roost actors (``bench._idle roost``: ``ActorSystem.spawn`` in a
fresh process, what ``bench/actors.py`` reports): an agent is an actor plus its manifest,
its runtime, its ``agent_<name>`` tool and its share of the daemon.
"""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from . import Row, Target
from ._daemon import Daemon, write_agents, write_config

COUNT = 10_000


def _idle_actors(count: int) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "bench._idle", "roost", str(count)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(out.stdout)


def _ask(port: int, agent: str) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        body = json.dumps({"message": "are you there?"})
        conn.request(
            "POST", f"/api/agents/{agent}/message", body, {"Content-Type": "application/json"}
        )
        response = conn.getresponse()
        reply = json.loads(response.read())
    finally:
        conn.close()
    if response.status != 200 or "echo" not in reply.get("reply", ""):
        raise RuntimeError(f"agent {agent} answered {response.status}: {reply}")


def _daemon(root: Path, count: int, runs: int) -> dict:
    """Best boot time of ``runs`` daemons with ``count`` agents, and the last one's RSS
    (KB) and CPU seconds at ``/health``."""
    names = [f"agent-{i:05d}" for i in range(count)]
    agents = write_agents(root / f"agents-{count}", names)
    best = float("inf")
    rss = cpu = 0.0
    for run in range(runs):
        where = root / f"run-{count}-{run}"
        where.mkdir()
        config = write_config(where, agents_dir=agents, home=where / "home")
        daemon = Daemon(config, log=where / "daemon.log")
        try:
            best = min(best, daemon.start(timeout=120))
            cpu = daemon.cpu_s()
            for name in names[:: max(1, count // 10)][:10]:
                _ask(daemon.port, name)
            time.sleep(0.5)  # let the asks' garbage go
            rss = daemon.rss_kb()
        finally:
            daemon.stop()
    return {"boot_s": best, "rss_kb": rss, "cpu_s": cpu}


def run(quick: bool) -> list[Row]:
    runs = 1 if quick else 3
    actors = _idle_actors(COUNT)
    actor_kb = (actors["rss_after_kb"] - actors["rss_before_kb"]) / COUNT
    with tempfile.TemporaryDirectory(prefix="roost-bench-agents-") as tmp:
        root = Path(tmp)
        empty = _daemon(root, 0, runs)
        full = _daemon(root, COUNT, runs)
    per_agent = (full["rss_kb"] - empty["rss_kb"]) / COUNT
    boot_note = (
        f"best of {runs}; 0 agents: {empty['boot_s']:.2f} s; CPU at /health {full['cpu_s']:.2f} s"
    )
    return [
        Row(
            f"{COUNT:,} agents: roost run to /health",
            full["boot_s"],
            "s",
            actors["spawn_s"],
            f"{COUNT:,} bare actors spawn",
            Target("value", "<=", 2),
            boot_note,
        ),
        Row(
            f"{COUNT:,} agents: RSS per idle agent",
            per_agent,
            "KB",
            actor_kb,
            "bare actor",
            Target("value", "<=", 20),
            f"daemon {full['rss_kb'] / 1024:.0f} MB, 0 agents {empty['rss_kb'] / 1024:.0f} MB",
        ),
    ]
