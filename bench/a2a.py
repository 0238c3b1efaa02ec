"""A2A server speed: roost's daemon vs the official a2a-sdk server (uvicorn), same run.

Both serve an echo agent in a subprocess on 127.0.0.1 (roost: ``roost run``, the daemon as
a user starts it, boot and all); one lean load generator
(``_a2a_load``: raw keep-alive HTTP/1.1, so the client is not what sets the pace) drives
both the same way:
- SendMessage round trips/s, one client, sequential (A2A-Version 1.0, JSON-RPC, blocking),
  on a blocking socket: the round trip is the server's time plus one send and one receive;
- completed tasks/s with 32 concurrent clients (on Trio).
roost's number includes what roost does and the SDK's in-memory default does not: the
task's settled state and the agent's session history are committed to SQLite before
replying (WAL, roost's default ``synchronous = "normal"``: a reply's data survives roost
being killed; ``"full"`` adds an fsync per commit for power loss, and is slower).
Both servers run at once and are measured in alternating rounds; the table shows
medians, since the machine is shared and its load comes in bursts.
"""

from __future__ import annotations

import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import httpx
import trio

from . import Row, Target
from ._a2a_load import BlockingConnection, Connection
from ._daemon import Daemon, write_agents, write_config

HERE = Path(__file__).resolve().parent
CLIENTS = 32
HEADERS = {"A2A-Version": "1.0"}
BOUNDS = """[http]
rate_limit_per_s = 1000000
rate_limit_burst = 1000000

[a2a]
max_tasks = 100000
"""


def _body(i: int) -> dict:
    return {
        "jsonrpc": "2.0",
        "id": i,
        "method": "SendMessage",
        "params": {
            "message": {
                "messageId": f"m-{i}",
                "role": "ROLE_USER",
                "parts": [{"text": f"hello {i}"}],
            }
        },
    }


async def _wait_ready(card_url: str, proc: subprocess.Popen) -> None:
    async with httpx.AsyncClient(timeout=2) as http:
        with trio.fail_after(60):
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"server exited with {proc.returncode}")
                try:
                    if (await http.get(card_url)).status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                await trio.sleep(0.1)


def _completed(reply: dict) -> bool:
    return (
        reply.get("result", {}).get("task", {}).get("status", {}).get("state")
        == "TASK_STATE_COMPLETED"
    )


def _sequential(rpc_url: str, n: int) -> float:
    """SendMessage round trips/s of one client on a blocking socket (run in a thread)."""
    conn = BlockingConnection(rpc_url, HEADERS)
    try:
        for i in range(20):  # warm up
            conn.post_json(_body(i))
        start = time.perf_counter()
        for i in range(n):
            reply = conn.post_json(_body(i))
            assert _completed(reply), reply
        return n / (time.perf_counter() - start)
    finally:
        conn.close()


async def _measure(rpc_url: str, seconds: float, sequential_n: int) -> tuple[float, float]:
    sequential = await trio.to_thread.run_sync(
        _sequential, rpc_url, sequential_n, abandon_on_cancel=True
    )
    conns = [Connection(rpc_url, HEADERS) for _ in range(CLIENTS)]
    try:
        done = 0
        deadline = time.perf_counter() + seconds

        async def client(k: int) -> None:
            nonlocal done
            i = k * 1_000_000
            while time.perf_counter() < deadline:
                i += 1
                if _completed(await conns[k].post_json(_body(i))):
                    done += 1

        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for k in range(CLIENTS):
                nursery.start_soon(client, k)
        concurrent = done / (time.perf_counter() - start)
    finally:
        for conn in conns:
            await conn.aclose()
    return sequential, concurrent


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@asynccontextmanager
async def _sdk_server() -> AsyncIterator[str]:
    """The a2a-sdk echo server; yields its JSON-RPC URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(512)
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    proc = subprocess.Popen(
        [sys.executable, "-P", str(HERE / "_a2a_sdk_server.py"), str(sock.fileno()), base],
        pass_fds=(sock.fileno(),),
    )
    sock.close()
    try:
        await _wait_ready(base + "/.well-known/agent-card.json", proc)
        yield base + "/a2a/jsonrpc"
    finally:
        _stop(proc)


@asynccontextmanager
async def _roost_server() -> AsyncIterator[str]:
    """roost's daemon as a user starts it (``roost run``) with the echo agent; yields its
    JSON-RPC URL."""
    with tempfile.TemporaryDirectory(prefix="roost-bench-a2a-") as tmp:
        root = Path(tmp)
        agents = write_agents(root / "agents", ["echo"])
        config = write_config(root, agents_dir=agents, home=root / "home", extra=BOUNDS)
        daemon = Daemon(config, log=root / "daemon.log")
        await trio.to_thread.run_sync(daemon.start)
        try:
            yield daemon.base + "/a2a/agents/echo/jsonrpc"
        finally:
            daemon.stop()


async def _bench(
    seconds: float, n: int, rounds: int
) -> tuple[dict[str, list[tuple[float, float]]], str]:
    """Both servers up at once, measured in alternating rounds (so a burst of load from
    elsewhere on the machine hits both alike); the per-server results of every round."""
    results: dict[str, list[tuple[float, float]]] = {"roost": [], "sdk": []}
    note = ""
    async with AsyncExitStack() as stack:
        urls = {"roost": await stack.enter_async_context(_roost_server())}
        try:
            urls["sdk"] = await stack.enter_async_context(_sdk_server())
        except Exception as exc:  # the SDK may be missing: roost still gets measured
            note = f"a2a-sdk server unavailable: {type(exc).__name__}"
        for r in range(rounds):
            order = sorted(urls, reverse=r % 2 == 1)
            for name in order:
                results[name].append(await _measure(urls[name], seconds, n))
    return results, note


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def run(quick: bool) -> list[Row]:
    """SendMessage round trips and completed tasks/s: roost vs the a2a-sdk server
    (medians of alternating rounds)."""
    seconds, n, rounds = (1.5, 150, 3) if quick else (4.0, 400, 5)
    results, note = trio.run(_bench, seconds, n, rounds)
    seq = {k: _median([s for s, _ in v]) for k, v in results.items()}
    conc = {k: _median([c for _, c in v]) for k, v in results.items()}
    target = Target("ratio", ">=", 2.0)
    note = note or f"median of {rounds} alternating rounds"
    return [
        Row(
            "A2A SendMessage round trips (1 client)",
            seq["roost"],
            "req/s",
            seq["sdk"],
            "a2a-sdk",
            target,
            note,
        ),
        Row(
            f"A2A completed tasks ({CLIENTS} clients)",
            conc["roost"],
            "tasks/s",
            conc["sdk"],
            "a2a-sdk",
            target,
            note,
        ),
    ]
