"""Idle connections exhausting file descriptors (issue 15, item 11).

A real ``roost run`` under ``RLIMIT_NOFILE`` 256 (set in the child before it execs) gets
300 connections that never finish a request: some send nothing, some half a request head,
some one ``GET /health`` and then idle. A fresh client must still get ``/health`` and an
A2A ``SendMessage`` answered promptly, the server must close every one of the 300 by
itself (a connection with no request under way closes after ``http.keep_alive_s``, the
first head's wait included), and its stderr must hold no traceback (no EMFILE storm from
the accept loop)."""

from __future__ import annotations

import httpx
import pytest
import trio
from http_guard_daemon import ROOST, start_daemon, write_agent

KEEP_ALIVE_S = 1.0
SILENT, HALF_HEAD, KEPT_ALIVE = 220, 40, 40

pytestmark = pytest.mark.skipif(
    not ROOST.exists(), reason="the roost console script is not installed (make install)"
)


async def read_response(stream: trio.SocketStream) -> bytes:
    """One complete response (by Content-Length) from ``stream``."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = await stream.receive_some(65536)
        assert chunk, f"closed before a response: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        chunk = await stream.receive_some(65536)
        assert chunk, "closed in the middle of a response"
        body += chunk
    return head


async def closed_by_server(stream: trio.SocketStream) -> None:
    """Returns once the server has closed ``stream`` (EOF or reset); fails on stray data."""
    try:
        while chunk := await stream.receive_some(65536):
            assert chunk.startswith(b"HTTP/1.1 503"), chunk[:200]  # at most the over-limit answer
    except trio.BrokenResourceError:
        pass


async def test_idle_and_half_open_connections_cannot_lock_clients_out(tmp_path):
    write_agent(tmp_path / "agents", "alpha", reply="alpha heard: {message}")
    daemon = start_daemon(tmp_path, f"keep_alive_s = {KEEP_ALIVE_S}\n", nofile=256)
    streams: list[trio.SocketStream] = []
    try:
        with trio.fail_after(30):
            for _ in range(SILENT):
                streams.append(await trio.open_tcp_stream("127.0.0.1", daemon.port))
            for _ in range(HALF_HEAD):
                stream = await trio.open_tcp_stream("127.0.0.1", daemon.port)
                await stream.send_all(b"GET /health HTTP/1.1\r\nHo")
                streams.append(stream)
            for _ in range(KEPT_ALIVE):
                stream = await trio.open_tcp_stream("127.0.0.1", daemon.port)
                await stream.send_all(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                head = await read_response(stream)
                assert head.startswith((b"HTTP/1.1 200", b"HTTP/1.1 503")), head
                streams.append(stream)

        # With all 300 still open, a new client is served at once.
        async with httpx.AsyncClient(base_url=daemon.url, timeout=10) as http:
            with trio.fail_after(5):
                health = await http.get("/health")
            assert health.status_code == 200, health.text
            message = {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "still there?"}]}
            body = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "SendMessage",
                "params": {"message": message},
            }
            with trio.fail_after(10):
                sent = await http.post("/a2a/jsonrpc", json=body, headers={"A2A-Version": "1.0"})
            assert sent.status_code == 200, sent.text
            assert sent.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"

        # The server closes every one of them by itself, at the latest at its deadlines.
        with trio.fail_after(2 * KEEP_ALIVE_S + 10):
            async with trio.open_nursery() as nursery:
                for stream in streams:
                    nursery.start_soon(closed_by_server, stream)

        async with httpx.AsyncClient(base_url=daemon.url, timeout=10) as http:
            with trio.fail_after(5):
                assert (await http.get("/health")).status_code == 200
    finally:
        for stream in streams:
            await stream.aclose()
        daemon.stop()
    stderr = daemon.stderr()
    assert "Traceback" not in stderr, stderr[-3000:]
    assert "Too many open files" not in stderr and "EMFILE" not in stderr, stderr[-3000:]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far."""
    import os

    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def test_out_of_descriptors_the_accept_loop_waits_quietly(tmp_path):
    """More connections than descriptors, each with half a request head: accept() fails
    with EMFILE. The daemon says so in one line (not a traceback ten times a second), does
    not spin, and serves again as soon as the keep-alive limit frees descriptors."""
    write_agent(tmp_path / "agents", "alpha")
    head_timeout = 3.0  # http.keep_alive_s: a head must be complete within it
    daemon = start_daemon(tmp_path, f"keep_alive_s = {head_timeout}\n", nofile=256)
    streams: list[trio.SocketStream] = []
    try:
        with trio.fail_after(30):
            for _ in range(300):
                stream = await trio.open_tcp_stream("127.0.0.1", daemon.port)
                await stream.send_all(b"GET /health HTTP/1.1\r\nHo")
                streams.append(stream)
        cpu_before = cpu_seconds(daemon.proc.pid)
        async with httpx.AsyncClient(base_url=daemon.url, timeout=30) as http:
            with trio.fail_after(2 * head_timeout + 10):
                assert (await http.get("/health")).status_code == 200
        # Waiting for descriptors took (about) a head timeout; spinning would burn all of it.
        assert cpu_seconds(daemon.proc.pid) - cpu_before < head_timeout / 2
        with trio.fail_after(3 * head_timeout + 10):
            async with trio.open_nursery() as nursery:
                for stream in streams:
                    nursery.start_soon(closed_by_server, stream)
    finally:
        for stream in streams:
            await stream.aclose()
        daemon.stop()
    stderr = daemon.stderr()
    assert "Traceback" not in stderr, stderr[-3000:]
    warnings = [line for line in stderr.splitlines() if "cannot accept connections" in line]
    assert 1 <= len(warnings) <= 3, stderr[-3000:]
    assert "http.keep_alive_s" in warnings[0] and "ulimit -n" in warnings[0]
