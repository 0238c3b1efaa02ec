"""One load-generator process for ``bench/load.py`` and the soak tests:
``python -m bench._load_client SPEC_JSON``.

SPEC: ``{"base": "http://127.0.0.1:PORT", "surface": "a2a" | "a2a_stream" | "mcp" | "rest"
| "mixed" | "mcp_open", "callers": N, "requests": R, "agents": [names], "start_at": epoch seconds,
"timeout_s": per request, "tag": text put in every message, "headers": {...}, "out": a file
for the result (default: stdout)}``.

Each of the N callers opens its own keep-alive connection when ``start_at`` comes (so the
daemon sees N connects at once) and sends R requests one after another, each bounded by
``timeout_s``. ``mixed`` gives caller k the surface ``SURFACES[k % 4]``; a request of
``mcp_open`` opens an MCP session and abandons it (no DELETE). Prints one JSON object: per
surface the latencies of the answered requests (seconds), the errors by kind, and
(``"acked"``) what the daemon acknowledged: ``[task id, context id]`` of A2A tasks, REST
session ids, MCP session ids — so a soak can look for them after a crash.

The HTTP client is ``_a2a_load.Connection`` (raw sockets, pre-encoded requests): httpx
would cost the client more CPU per request than the daemon spends on it.
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from typing import Any

import trio

from ._a2a_load import Connection, LoadError, Response

SURFACES = ("a2a", "a2a_stream", "mcp", "rest")
A2A_HEADERS = {"A2A-Version": "1.0"}
MCP_VERSION = "2025-06-18"
MCP_ACCEPT = {"Accept": "application/json, text/event-stream"}
COMPLETED = "TASK_STATE_COMPLETED"


class Refused(Exception):
    """The daemon answered, but not with what the request asked for; ``kind`` says how."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


def _status_kind(response: Response) -> str:
    kind = f"http {response.status}"
    try:
        body = response.json()
    except ValueError:
        return kind
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and "code" in error:
        kind += f" {error['code']}"
    return kind


def _rpc_result(response: Response) -> Any:
    if response.status != 200:
        raise Refused(_status_kind(response))
    body = response.json()
    if "error" in body:
        raise Refused(f"jsonrpc {body['error'].get('code')}")
    return body["result"]


class Caller:
    """One simulated client: one connection, one surface, requests one after another."""

    def __init__(self, spec: dict[str, Any], index: int, surface: str) -> None:
        self.spec = spec
        self.index = index
        self.surface = surface
        self.agent = spec["agents"][index % len(spec["agents"])]
        base = spec["base"]
        extra = dict(spec.get("headers") or {})
        if surface in ("a2a", "a2a_stream"):
            self.conn = Connection(
                f"{base}/a2a/agents/{self.agent}/jsonrpc", {**A2A_HEADERS, **extra}
            )
        elif surface in ("mcp", "mcp_open"):
            self.conn = Connection(f"{base}/agents/{self.agent}/mcp", {**MCP_ACCEPT, **extra})
        else:
            self.conn = Connection(f"{base}/api/agents/{self.agent}/message", extra)
        self.session: str | None = None
        self.acked: list[Any] = []
        self.handshakes: list[float] = []  # MCP initialize + initialized, seconds each

    def text(self, i: int) -> str:
        return f"{self.spec.get('tag', 'load')} c{self.index} r{i}"

    async def request(self, i: int) -> None:
        if self.surface == "a2a":
            await self._a2a(i, "SendMessage")
        elif self.surface == "a2a_stream":
            await self._a2a(i, "SendStreamingMessage")
        elif self.surface == "mcp":
            await self._mcp(i)
        elif self.surface == "mcp_open":  # a session opened and abandoned: no DELETE
            await self._mcp_initialize()
            await self.conn.aclose()
        else:
            await self._rest(i)

    async def _a2a(self, i: int, method: str) -> None:
        message = {
            "messageId": f"m-{self.index}-{i}-{time.time_ns()}",
            "role": "ROLE_USER",
            "parts": [{"text": self.text(i)}],
        }
        body = {"jsonrpc": "2.0", "id": i, "method": method, "params": {"message": message}}
        response = await self.conn.post(body)
        if method == "SendMessage":
            task = _rpc_result(response).get("task") or {}
            if task.get("status", {}).get("state") != COMPLETED:
                raise Refused(f"task {task.get('status', {}).get('state')}")
            self.acked.append([task["id"], task["contextId"]])
            return
        if response.status != 200 or not response.headers.get("content-type", "").startswith(
            "text/event-stream"
        ):
            raise Refused(_status_kind(response))
        events = response.sse_data()
        errors = [e["error"] for e in events if "error" in e]
        if errors:
            raise Refused(f"jsonrpc {errors[0].get('code')}")
        states = [_state_of(e.get("result") or {}) for e in events]
        if COMPLETED not in states:
            raise Refused(f"stream ended in {next((s for s in reversed(states) if s), 'nothing')}")
        self.acked.append(
            next(_ids_of(e.get("result") or {}) for e in events if _ids_of(e.get("result") or {}))
        )

    async def _mcp(self, i: int) -> None:
        if self.session is None:
            await self._mcp_initialize()
        headers = {"Mcp-Session-Id": self.session or "", "MCP-Protocol-Version": MCP_VERSION}
        call = {
            "jsonrpc": "2.0",
            "id": i + 2,
            "method": "tools/call",
            "params": {"name": "message", "arguments": {"message": self.text(i)}},
        }
        response = await self.conn.post(call, headers)
        if response.status == 404:
            self.session = None  # ended (idle, or closed to make room): the next call starts one
        if response.status != 200:
            raise Refused(_status_kind(response))
        if response.headers.get("content-type", "").startswith("text/event-stream"):
            replies = [e for e in response.sse_data() if e.get("id") == i + 2]
            if not replies:
                raise Refused("stream ended without the answer")
            reply = replies[-1]
        else:
            reply = response.json()
        if "error" in reply:
            raise Refused(f"jsonrpc {reply['error'].get('code')}")
        if reply["result"].get("isError"):
            raise Refused("tool error")

    async def _mcp_initialize(self) -> None:
        started = time.perf_counter()
        init = {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": MCP_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "roost-load", "version": "1"},
            },
        }
        response = await self.conn.post(init)
        _rpc_result(response)
        session = response.headers.get("mcp-session-id")
        if not session:
            raise Refused("initialize without Mcp-Session-Id")
        headers = {"Mcp-Session-Id": session, "MCP-Protocol-Version": MCP_VERSION}
        note = await self.conn.post(
            {"jsonrpc": "2.0", "method": "notifications/initialized"}, headers
        )
        if note.status != 202:
            raise Refused(_status_kind(note))
        self.session = session
        self.acked.append(session)
        self.handshakes.append(time.perf_counter() - started)

    async def _rest(self, i: int) -> None:
        response = await self.conn.post({"message": self.text(i)})
        if response.status != 200:
            raise Refused(_status_kind(response))
        reply = response.json()
        if reply.get("is_error"):
            raise Refused("agent error")
        self.acked.append(reply["session_id"])


def _state_of(result: dict[str, Any]) -> str | None:
    for key in ("statusUpdate", "task"):
        part = result.get(key)
        if isinstance(part, dict):
            return (part.get("status") or {}).get("state")
    return None


def _ids_of(result: dict[str, Any]) -> list[str] | None:
    """``[task id, context id]`` of a stream event, if it names them."""
    if isinstance(result.get("task"), dict):
        return [result["task"].get("id"), result["task"].get("contextId")]
    if isinstance(result.get("statusUpdate"), dict):
        update = result["statusUpdate"]
        return [update.get("taskId"), update.get("contextId")]
    return None


async def run(spec: dict[str, Any]) -> dict[str, Any]:
    surfaces = SURFACES if spec["surface"] == "mixed" else (spec["surface"],)
    offset = int(spec.get("first_index", 0))
    callers = [
        Caller(spec, offset + k, surfaces[(offset + k) % len(surfaces)])
        for k in range(spec["callers"])
    ]
    latencies: dict[str, list[float]] = {s: [] for s in surfaces}
    errors: dict[str, Counter[str]] = {s: Counter() for s in surfaces}
    timeout = float(spec.get("timeout_s", 30.0))
    stop_at = float(spec.get("stop_at", 0)) or None

    async def drive(caller: Caller) -> None:
        try:
            for i in range(spec["requests"]):
                if stop_at is not None and time.time() >= stop_at:
                    return
                start = time.perf_counter()
                try:
                    with trio.fail_after(timeout):
                        await caller.request(i)
                except trio.TooSlowError:
                    errors[caller.surface]["timeout"] += 1
                except Refused as exc:
                    errors[caller.surface][exc.kind] += 1
                except (LoadError, OSError, ValueError, KeyError, trio.BrokenResourceError) as exc:
                    errors[caller.surface][f"{type(exc).__name__}: {str(exc)[:60]}"] += 1
                    if isinstance(exc, OSError):  # nobody listening (a restart): not a busy loop
                        await trio.sleep(0.1)
                else:
                    latencies[caller.surface].append(time.perf_counter() - start)
        finally:
            with trio.CancelScope(shield=True):
                await caller.conn.aclose()

    await trio.sleep(max(0.0, float(spec.get("start_at", 0)) - time.time()))
    started = time.time()
    async with trio.open_nursery() as nursery:
        for caller in callers:
            nursery.start_soon(drive, caller)
    acked: dict[str, list[str]] = {s: [] for s in surfaces}
    for caller in callers:
        acked[caller.surface] += caller.acked
    handshakes = [t for caller in callers for t in caller.handshakes]
    return {
        "started": started,
        "ended": time.time(),
        "latencies": latencies,
        "errors": {s: dict(c) for s, c in errors.items()},
        "acked": acked,
        "cpu_s": time.process_time(),
        "handshakes": handshakes,
    }


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m bench._load_client SPEC_JSON", file=sys.stderr)
        return 2
    spec = json.loads(argv[0])
    result = json.dumps(trio.run(run, spec))
    if spec.get("out"):  # a file: a pipe's buffer would block this process until read
        with open(spec["out"], "w", encoding="utf-8") as out:
            out.write(result)
    else:
        print(result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
