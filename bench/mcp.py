"""MCP speed: roost's client and server against the official ``mcp`` SDK, same run.

- stdio ``tools/call``: p50 of sequential round trips, and completed calls/s with 32 calls
  in flight — roost's client + roost's stdio server (``_mcp_roost_server.py``: a kernel
  with one agent exposing an ``echo`` tool, served by the code behind ``roost mcp``) vs the
  SDK client + SDK server (``MCPServer``, stdio subprocess), both serving one echo tool.
  Floor: a hand-written NDJSON echo (``_mcp_ndjson_echo.py``) driven by a bare Trio client.
  roost's number includes what the SDK's does not: the kernel's policy pipeline (argument
  validation, timeout, events) and the audit record of every call, committed to SQLite
  before the reply (concurrent calls share a commit).
- in-host agent→agent: ``kernel.call_tool`` of ``agent_<name>`` (the in-memory MCP path:
  a JSON-RPC ``tools/call`` routed as ``EXEC:TOOL_CALL`` to a scripted agent that answers at
  once; the one-shot run keeps its history in memory and writes its token usage behind, the
  caller's audit row is committed to SQLite before the reply) vs the SDK
  client and server in one process over the SDK's in-memory streams.
- ``roost mcp`` start-up: wall clock from spawning the process to reading its
  ``initialize`` response (best of 5), next to a bare interpreter start.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio

from . import Row, Target

HERE = Path(__file__).resolve().parent
IN_FLIGHT = 32
INIT_RUNS = 5
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "bench", "version": "1"},
    },
}

Call = Callable[[int], Awaitable[None]]


async def _measure(
    call: Call, n: int, seconds: float, concurrency: int = IN_FLIGHT
) -> dict[str, float]:
    """p50 (ms) of ``n`` sequential calls, then calls/s with ``concurrency`` in flight."""
    for i in range(20):  # warm up
        await call(-i - 1)
    samples = []
    for i in range(n):
        start = time.perf_counter()
        await call(i)
        samples.append(time.perf_counter() - start)
    done = 0
    deadline = time.perf_counter() + seconds

    async def worker(k: int) -> None:
        nonlocal done
        i = k * 10_000_000
        while time.perf_counter() < deadline:
            i += 1
            await call(i)
            done += 1

    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for k in range(concurrency):
            nursery.start_soon(worker, k)
    return {
        "p50_ms": statistics.median(samples) * 1000,
        "throughput_per_s": done / (time.perf_counter() - start),
    }


# ---- roost over stdio --------------------------------------------------------------------------


async def _roost_stdio(n: int, seconds: float) -> dict[str, float]:
    from roost.plugins.mcp._client import ClientOptions, open_mcp_client
    from roost.plugins.mcp.transports.stdio import open_stdio_transport

    with tempfile.TemporaryDirectory(prefix="roost-bench-mcp-") as home:
        args = ["-P", str(HERE / "_mcp_roost_server.py"), home]
        async with open_stdio_transport(sys.executable, args, name="bench") as transport:
            async with open_mcp_client(
                transport, ClientOptions(server_name="bench", timeout_secs=60)
            ) as client:

                async def call(i: int) -> None:
                    result = await client.call_tool("echo", {"text": f"hello {i}"})
                    if result.get("isError") or result["content"][0]["text"] != f"hello {i}":
                        raise RuntimeError(f"roost echo answered {result!r}")

                return await _measure(call, n, seconds)


# ---- the floor: a bare NDJSON echo -------------------------------------------------------------


async def _bare_stdio(n: int, seconds: float) -> dict[str, float]:
    process = await trio.lowlevel.open_process(
        [sys.executable, "-P", str(HERE / "_mcp_ndjson_echo.py")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    waiting: dict[int, Any] = {}
    answers: dict[int, Any] = {}
    write_lock = trio.Lock()

    async def read() -> None:
        buffer = b""
        assert process.stdout is not None
        while True:
            chunk = await process.stdout.receive_some(65536)
            if not chunk:
                return
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                reply = json.loads(line)
                answers[reply["id"]] = reply
                waiting.pop(reply["id"]).set()

    async def call(i: int) -> None:
        done = waiting[i] = trio.Event()
        request = {
            "jsonrpc": "2.0",
            "id": i,
            "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": f"hello {i}"}},
        }
        assert process.stdin is not None
        async with write_lock:
            await process.stdin.send_all(
                json.dumps(request, separators=(",", ":")).encode() + b"\n"
            )
        await done.wait()
        if answers.pop(i)["result"]["content"][0]["text"] != f"hello {i}":
            raise RuntimeError("the bare echo answered wrong")

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(read)
            result = await _measure(call, n, seconds)
            nursery.cancel_scope.cancel()
        return result
    finally:
        with trio.CancelScope(shield=True):
            if process.stdin is not None:
                await process.stdin.aclose()
            with trio.move_on_after(5):
                await process.wait()
            if process.returncode is None:
                process.kill()
                await process.wait()


# ---- in-host agent→agent -------------------------------------------------------------------------


async def _roost_in_host(n: int, seconds: float) -> dict[str, float]:
    from roost.kernel import ToolCall, default_config, open_kernel, parse_manifest

    def agent(name: str, tools: list[str]) -> Any:
        script = {"rules": [], "default_reply": "{message}"}
        return parse_manifest(
            {
                "name": name,
                "description": name,
                "model": {"provider": "scripted", "script": script},
                "capabilities": {"tools": tools},
            }
        )

    with tempfile.TemporaryDirectory(prefix="roost-bench-mcp-") as home:
        config = default_config(home=home, agents={"bundled": False})
        async with open_kernel(
            config, agents=[agent("caller", ["agent_callee"]), agent("callee", [])]
        ) as kernel:

            async def call(i: int) -> None:
                result = await kernel.call_tool(
                    "caller", ToolCall("agent_callee", {"message": f"hello {i}"})
                )
                if result.is_error or result.as_text() != f"hello {i}":
                    raise RuntimeError(f"the callee answered {result!r}")

            return await _measure(call, n, seconds)


# ---- the SDK, in a subprocess (asyncio) ----------------------------------------------------------


def _sdk(kind: str, n: int, seconds: float) -> dict[str, float]:
    out = subprocess.run(
        [
            sys.executable,
            "-P",
            str(HERE / "_mcp_sdk_client.py"),
            kind,
            str(n),
            str(seconds),
            str(IN_FLIGHT),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


# ---- roost mcp start-up --------------------------------------------------------------------------


def _spawn_to_initialize(argv: list[str], env: dict[str, str]) -> float:
    """Seconds from spawning ``argv`` to reading its answer to ``initialize``."""
    start = time.perf_counter()
    process = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env
    )
    try:
        assert process.stdin is not None and process.stdout is not None
        process.stdin.write(json.dumps(INITIALIZE).encode() + b"\n")
        process.stdin.flush()
        line = process.stdout.readline()
        elapsed = time.perf_counter() - start
        reply = json.loads(line)
        if reply.get("id") != 1 or "result" not in reply:
            raise RuntimeError(f"roost mcp answered initialize with {reply!r}")
        return elapsed
    finally:
        process.stdin.close()  # type: ignore[union-attr]
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _initialize_latency(runs: int) -> float:
    roost = Path(sys.executable).with_name("roost")
    with tempfile.TemporaryDirectory(prefix="roost-bench-mcp-") as home:
        config = Path(home) / "roost.toml"
        config.write_text(f'home = "{home}"\n', encoding="utf-8")
        env = {**os.environ, "ROOST_CONFIG": str(config)}
        return min(
            _spawn_to_initialize([str(roost), "mcp", "--no-daemon"], env) for _ in range(runs)
        )


def _python_start(runs: int) -> float:
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True, timeout=30)
        best = min(best, time.perf_counter() - start)
    return best


# ---- the table -----------------------------------------------------------------------------------


def _median(runs: list[dict[str, float]], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def run(quick: bool) -> list[Row]:
    """stdio and in-host MCP calls: roost vs the mcp SDK; ``roost mcp`` start-up."""
    n, seconds, repeats = (300, 1.5, 1) if quick else (2_000, 4.0, 3)
    roost_stdio, bare, roost_host = [], [], []
    sdk_stdio: list[dict[str, float]] = []
    sdk_memory: list[dict[str, float]] = []
    note = ""
    # Alternate roost and the baselines so that machine noise hits both alike.
    for _ in range(repeats):
        try:
            sdk_stdio.append(_sdk("stdio", n, seconds))
            sdk_memory.append(_sdk("memory", n, seconds))
        except (subprocess.SubprocessError, OSError, ValueError) as exc:
            note = f"mcp SDK unavailable: {type(exc).__name__}"
        roost_stdio.append(trio.run(_roost_stdio, n, seconds))
        bare.append(trio.run(_bare_stdio, n, seconds))
        roost_host.append(trio.run(_roost_in_host, n, seconds))

    def sdk(runs: list[dict[str, float]], key: str) -> float | None:
        return _median(runs, key) if runs else None

    init_runs = 3 if quick else INIT_RUNS
    try:
        init_ms: float | None = _initialize_latency(init_runs) * 1000
        init_note = ""
    except (subprocess.SubprocessError, OSError, ValueError, RuntimeError) as exc:
        init_ms, init_note = None, f"roost mcp failed: {type(exc).__name__}: {exc}"
    python_ms = _python_start(init_runs) * 1000

    sdk_label = "mcp SDK stdio"
    memory_label = "mcp SDK in-memory"
    roost_p50 = _median(roost_stdio, "p50_ms")
    roost_tput = _median(roost_stdio, "throughput_per_s")
    return [
        Row(
            "MCP stdio tools/call p50",
            roost_p50,
            "ms",
            sdk(sdk_stdio, "p50_ms"),
            sdk_label,
            Target("ratio", "<=", 0.5),
            note,
        ),
        Row(
            f"MCP stdio tools/call ({IN_FLIGHT} in flight)",
            roost_tput,
            "calls/s",
            sdk(sdk_stdio, "throughput_per_s"),
            sdk_label,
            Target("ratio", ">=", 5.0),
            note,
        ),
        Row(
            "MCP stdio p50 vs bare NDJSON echo",
            roost_p50,
            "ms",
            _median(bare, "p50_ms"),
            "hand-written echo",
        ),
        Row(
            "MCP stdio calls/s vs bare NDJSON echo",
            roost_tput,
            "calls/s",
            _median(bare, "throughput_per_s"),
            "hand-written echo",
        ),
        Row(
            "in-host agent→agent call p50",
            _median(roost_host, "p50_ms"),
            "ms",
            sdk(sdk_memory, "p50_ms"),
            memory_label,
            note=note,
        ),
        Row(
            f"in-host agent→agent calls ({IN_FLIGHT} in flight)",
            _median(roost_host, "throughput_per_s"),
            "calls/s",
            sdk(sdk_memory, "throughput_per_s"),
            memory_label,
            Target("ratio", ">=", 5.0),
            note,
        ),
        Row(
            f"roost mcp: spawn → initialize (best of {init_runs})",
            init_ms,
            "ms",
            python_ms,
            "python -c pass",
            Target("value", "<=", 300),
            init_note,
        ),
    ]
