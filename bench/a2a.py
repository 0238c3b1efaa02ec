"""A2A server speed: roost's daemon vs the official a2a-sdk server (uvicorn), same run.

Both serve an echo agent in a subprocess on 127.0.0.1; one load generator (httpx on Trio)
drives both the same way:
- SendMessage round trips/s, one client, sequential (A2A-Version 1.0, JSON-RPC, blocking);
- completed tasks/s with 32 concurrent clients.
roost's number includes what roost does and the SDK's in-memory default does not: every
task state change and the agent's session history are committed to SQLite before replying.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import trio

from . import Row, Target

HERE = Path(__file__).resolve().parent
CLIENTS = 32


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _body(i: int) -> dict:
    return {
        "jsonrpc": "2.0",
        "id": i,
        "method": "SendMessage",
        "params": {"message": {"messageId": f"m-{i}", "role": "ROLE_USER", "parts": [{"text": f"hello {i}"}]}},
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


async def _measure(rpc_url: str, seconds: float, sequential_n: int) -> tuple[float, float]:
    headers = {"A2A-Version": "1.0"}
    limits = httpx.Limits(max_connections=CLIENTS, max_keepalive_connections=CLIENTS)
    async with httpx.AsyncClient(timeout=30, limits=limits, headers=headers) as http:
        for i in range(20):  # warm up
            (await http.post(rpc_url, json=_body(i))).raise_for_status()
        start = time.perf_counter()
        for i in range(sequential_n):
            r = await http.post(rpc_url, json=_body(i))
            assert r.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", r.text
        sequential = sequential_n / (time.perf_counter() - start)
        done = 0
        deadline = time.perf_counter() + seconds

        async def client(k: int) -> None:
            nonlocal done
            i = k * 1_000_000
            while time.perf_counter() < deadline:
                i += 1
                r = await http.post(rpc_url, json=_body(i))
                if r.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED":
                    done += 1

        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for k in range(CLIENTS):
                nursery.start_soon(client, k)
        concurrent = done / (time.perf_counter() - start)
    return sequential, concurrent


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


async def _bench_sdk(seconds: float, n: int) -> tuple[float, float]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(512)
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    proc = subprocess.Popen([sys.executable, "-P", str(HERE / "_a2a_sdk_server.py"), str(sock.fileno()), base], pass_fds=(sock.fileno(),))
    sock.close()
    try:
        await _wait_ready(base + "/.well-known/agent-card.json", proc)
        return await _measure(base + "/a2a/jsonrpc", seconds, n)
    finally:
        _stop(proc)


async def _bench_roost(seconds: float, n: int) -> tuple[float, float]:
    with tempfile.TemporaryDirectory(prefix="roost-bench-a2a-") as home:
        port = _free_port()
        proc = subprocess.Popen([sys.executable, "-P", str(HERE / "_a2a_roost_server.py"), home, str(port)])
        base = f"http://127.0.0.1:{port}"
        try:
            await _wait_ready(base + "/.well-known/agent-card.json", proc)
            return await _measure(base + "/a2a/agents/echo/jsonrpc", seconds, n)
        finally:
            _stop(proc)


def run(quick: bool) -> list[Row]:
    """SendMessage round trips and completed tasks/s: roost vs the a2a-sdk server."""
    seconds, n = (2.0, 100) if quick else (6.0, 500)
    try:
        sdk_seq, sdk_conc = trio.run(_bench_sdk, seconds, n)
    except Exception as exc:  # the SDK may be missing: roost still gets measured
        sdk_seq = sdk_conc = None
        note = f"a2a-sdk server unavailable: {type(exc).__name__}"
    else:
        note = ""
    roost_seq, roost_conc = trio.run(_bench_roost, seconds, n)
    target = Target("ratio", ">=", 3.0)
    return [
        Row("A2A SendMessage round trips (1 client)", roost_seq, "req/s", sdk_seq, "a2a-sdk", target, note),
        Row(f"A2A completed tasks ({CLIENTS} clients)", roost_conc, "tasks/s", sdk_conc, "a2a-sdk", target, note),
    ]
