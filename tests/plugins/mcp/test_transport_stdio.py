"""The stdio client transport: framing, cleared environment, bounded shutdown, no orphans."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest
import trio
from roost.plugins.mcp.transports._base import TransportError
from roost.plugins.mcp.transports.stdio import (
    check_command,
    child_environment,
    open_stdio_transport,
)
from waiting import wait_until, wait_until_sync


def test_environment_is_cleared_except_path_home_and_listed():
    source = {"PATH": "/bin", "HOME": "/h", "SECRET": "s", "GITHUB_TOKEN": "t", "OTHER": "o"}
    assert child_environment(["GITHUB_TOKEN", "MISSING"], source) == {
        "PATH": "/bin",
        "HOME": "/h",
        "GITHUB_TOKEN": "t",
    }


@pytest.mark.parametrize("command", ["", "   ", "../evil", "/opt/../bin/sh", "bin/..x"])
def test_bad_commands_are_refused(command):
    with pytest.raises(TransportError, match="transport.command"):
        check_command(command)


async def test_child_sees_only_the_allowed_environment(monkeypatch):
    monkeypatch.setenv("ROOST_TEST_SECRET", "do-not-leak")
    monkeypatch.setenv("ROOST_TEST_ALLOWED", "fine")
    script = (
        "import json,os,sys; sys.stdout.write(json.dumps({'env': dict(os.environ)}) "
        "+ '\\n'); sys.stdout.flush(); sys.stdin.read()"
    )
    async with open_stdio_transport(
        sys.executable, ["-c", script], env=["ROOST_TEST_ALLOWED"]
    ) as transport:
        with trio.fail_after(10):
            message = await transport.incoming.receive()
    env = message["env"]
    assert env["ROOST_TEST_ALLOWED"] == "fine"
    assert "ROOST_TEST_SECRET" not in env
    assert set(env) - {"ROOST_TEST_ALLOWED", "PATH", "HOME", "LC_CTYPE"} == set()


async def test_an_error_raised_in_the_transports_block_keeps_its_cause():
    # Regression: the nursery's group of one was unwrapped "from None", which also erased
    # the cause the caller's own error carried.
    script = "import sys; sys.stdin.read()"
    with trio.fail_after(20), pytest.raises(ValueError, match="bad") as info:
        async with open_stdio_transport(sys.executable, ["-c", script]):
            try:
                raise OSError("disk")
            except OSError as exc:
                raise ValueError("bad") from exc
    assert isinstance(info.value.__cause__, OSError) and str(info.value.__cause__) == "disk"


async def test_stderr_goes_to_the_log(caplog):
    script = (
        "import sys; sys.stderr.write('server says hi\\n'); sys.stderr.flush(); sys.stdin.read()"
    )
    with caplog.at_level("INFO", logger="roost.mcp.server.noisy"):
        async with open_stdio_transport(sys.executable, ["-c", script], name="noisy"):
            await wait_until(lambda: "server says hi" in caplog.text, "the server's stderr logged")


async def test_a_stderr_line_with_an_undecodable_or_multiline_secret_logs_none_of_it(caplog):
    # Regression: the line was decoded with "replace" (an undecodable byte read as U+FFFD) but
    # the secret, from the environment, keeps it as a lone surrogate: no match, and all of the
    # secret but that byte was logged; a multi-line secret (a PEM key) was printed line by
    # line, and no line holds all of it.
    odd = b"tok\xffen-abcdefgh"
    pem = (
        "-----BEGIN KEY-----\nQUJDREVGR0hJSktMTU5PUFFSU1RVVldY\nWVphYmNkZWZnaGlqa2xt\n-----END KEY-"
    )
    script = (
        "import sys; out = sys.stderr.buffer; "
        f"out.write(b'odd: ' + {odd!r} + b'\\n' + {pem.encode()!r} + b'\\ndone\\n'); "
        "out.flush(); sys.stdin.read()"
    )
    secrets = [odd.decode("utf-8", "surrogateescape"), pem]
    with caplog.at_level("INFO", logger="roost.mcp.server.leaky"):
        async with open_stdio_transport(
            sys.executable, ["-c", script], name="leaky", secrets=secrets
        ):
            await wait_until(lambda: "done" in caplog.text, "the server's stderr logged")
    logged = caplog.text
    assert "abcdefgh" not in logged and "QUJDREVG" not in logged and "WVphYmNk" not in logged
    assert "odd: [redacted]" in logged


async def test_a_server_ignoring_stdin_and_sigterm_is_killed_and_reaped(monkeypatch):
    from roost.plugins.mcp.transports import stdio

    monkeypatch.setattr(stdio, "STDIN_CLOSE_GRACE_S", 0.2)
    monkeypatch.setattr(stdio, "TERM_GRACE_S", 0.2)
    script = textwrap.dedent(
        """
        import signal, sys, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        sys.stdout.write('{"ready": true}\\n'); sys.stdout.flush()
        while True:
            time.sleep(1)
        """
    )
    async with open_stdio_transport(sys.executable, ["-c", script]) as transport:
        with trio.fail_after(10):
            await transport.incoming.receive()
        process = transport.process
    assert process.returncode == -signal.SIGKILL


async def test_missing_program_ends_the_connection_with_its_exit_code(caplog):
    # The exec wrapper starts, then cannot exec the program: exit code 127, said on stderr.
    with caplog.at_level("INFO", logger="roost.mcp.server.ghost"):
        async with open_stdio_transport("/nonexistent/program", name="ghost") as transport:
            with trio.fail_after(10):
                async for _ in transport.incoming:
                    pass
            assert transport.closed_reason == "the process exited with code 127"
    assert "cannot run '/nonexistent/program'" in caplog.text


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); look at its state.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except FileNotFoundError:
        return False


def test_killing_roost_with_sigkill_leaves_no_child():
    """A roost process holding a stdio MCP server is SIGKILLed: the server must die too."""
    holder = textwrap.dedent(
        """
        import sys, trio
        from roost.plugins.mcp.transports.stdio import open_stdio_transport
        async def main():
            code = "import sys; sys.stdin.read(); import time; time.sleep(3600)"
            async with open_stdio_transport(sys.executable, ["-c", code]) as t:
                print(t.pid, flush=True)
                await trio.sleep(3600)
        trio.run(main)
        """
    )
    roost = subprocess.Popen([sys.executable, "-c", holder], stdout=subprocess.PIPE, text=True)
    try:
        child_pid = int(roost.stdout.readline())
        assert _alive(child_pid)
        roost.kill()
        roost.wait(10)
        wait_until_sync(lambda: not _alive(child_pid), "the MCP server ended with roost")
    finally:
        if roost.poll() is None:
            roost.kill()
            roost.wait(10)


FLOOD = """import fcntl, sys
fcntl.fcntl(1, 1031, 1 << 20)  # F_SETPIPE_SZ: a pipe that always has data for the reader
line = (b'{"jsonrpc":"2.0","method":"notifications/message",'
        b'"params":{"level":"info","data":"x"}}\\n') * 512
while True:
    sys.stdout.buffer.write(line)
    sys.stdout.buffer.flush()
"""


@pytest.mark.timeout(120)
async def test_a_server_flooding_its_stdout_does_not_starve_other_tasks():
    # The reader uses Trio's receive_some, which checkpoints before every read: however
    # fast the server writes, a timer task keeps running. (A reader that never yields
    # freezes the loop; then not even fail_after fires and pytest's timeout ends the test.)
    received = 0

    def deliver(message):  # synchronous: no task hop that would yield for the reader
        nonlocal received
        received += 1

    async with open_stdio_transport(sys.executable, ["-c", FLOOD], name="flood") as transport:
        transport.deliver = deliver
        with trio.fail_after(60):
            await wait_until(lambda: received >= 10_000, "the flood under way", timeout=60)
            start, ticks = received, 0
            while ticks < 100:  # 100 timer wake-ups while the server floods
                await trio.sleep(0.001)  # a timer's wake-up: the subject
                ticks += 1
            await wait_until(lambda: received >= start + 100_000, "the flood went on", timeout=60)
    assert transport.skipped_lines == 0 and transport.oversized_lines == 0
