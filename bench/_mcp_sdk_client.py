"""Drive the official ``mcp`` SDK client (asyncio) for ``bench/mcp.py``; prints JSON.

Usage: ``python _mcp_sdk_client.py stdio|memory N SECONDS CONCURRENCY``

- ``stdio``: the SDK client against the SDK server (``_mcp_sdk_server.py``) in a subprocess;
- ``memory``: the SDK client and server in this process over the SDK's in-memory streams.

Measures the p50 of ``N`` sequential ``tools/call`` round trips, then completed calls/s
with ``CONCURRENCY`` calls in flight for ``SECONDS``.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


async def _measure(client, n: int, seconds: float, concurrency: int) -> dict:
    for i in range(20):  # warm up
        await client.call_tool("echo", {"text": f"warm {i}"})
    samples = []
    for i in range(n):
        start = time.perf_counter()
        result = await client.call_tool("echo", {"text": f"hello {i}"})
        samples.append(time.perf_counter() - start)
        assert not result.is_error, result
    done = 0
    deadline = time.perf_counter() + seconds

    async def worker(k: int) -> None:
        nonlocal done
        i = 0
        while time.perf_counter() < deadline:
            i += 1
            await client.call_tool("echo", {"text": f"w{k} {i}"})
            done += 1

    start = time.perf_counter()
    await asyncio.gather(*(worker(k) for k in range(concurrency)))
    throughput = done / (time.perf_counter() - start)
    return {
        "p50_ms": statistics.median(samples) * 1000,
        "sequential_per_s": n / sum(samples),
        "throughput_per_s": throughput,
    }


async def main(kind: str, n: int, seconds: float, concurrency: int) -> dict:
    from mcp import Client, StdioServerParameters

    if kind == "stdio":
        target = StdioServerParameters(
            command=sys.executable, args=["-P", str(HERE / "_mcp_sdk_server.py")]
        )
    elif kind == "memory":
        sys.path.insert(0, str(HERE))
        from _mcp_sdk_server import server as target  # type: ignore[import-not-found]
    else:
        raise SystemExit(f"kind: expected stdio or memory, got {kind!r}")
    async with Client(target, mode="legacy", read_timeout_seconds=60) as client:
        return await _measure(client, n, seconds, concurrency)


if __name__ == "__main__":
    kind, n, seconds, concurrency = (
        sys.argv[1],
        int(sys.argv[2]),
        float(sys.argv[3]),
        int(sys.argv[4]),
    )
    print(json.dumps(asyncio.run(main(kind, n, seconds, concurrency))))
