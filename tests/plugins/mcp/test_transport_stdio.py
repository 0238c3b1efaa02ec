"""The stdio client transport: framing, cleared environment, bounded shutdown, no orphans."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import trio
from roost.plugins.mcp.transports._base import TransportError
from roost.plugins.mcp.transports.stdio import (
    LineSplitter,
    check_command,
    child_environment,
    decode_line,
    open_stdio_transport,
)


def test_line_splitter_joins_chunks_and_drops_oversized_lines():
    splitter = LineSplitter(max_bytes=10)
    assert splitter.feed(b'{"a":') == []
    assert splitter.feed(b'1}\n{"b":2}\r\n\n') == [b'{"a":1}', b'{"b":2}']
    assert splitter.feed(b"x" * 8) == []
    assert splitter.feed(b"y" * 8) == []  # now over the cap: discarded up to the newline
    assert splitter.feed(b"zz\nok\n") == [b"ok"]
    assert splitter.oversized == 1
    assert splitter.feed(b"0123456789A\nfine\n") == [b"fine"]
    assert splitter.oversized == 2


def test_decode_line_accepts_only_objects():
    assert decode_line(b'{"jsonrpc":"2.0"}') == {"jsonrpc": "2.0"}
    assert decode_line(b"[1,2]") is None
    assert decode_line(b"not json") is None
    assert decode_line(b'"str"') is None


def test_decode_line_reads_what_json_loads_reads():
    import json

    lines = [
        b'{"a":"\xc3\xa9","b":[1,2.5,null,true]}',
        b'{"a": 1} ',  # trailing space
        b'{"a":1}{"b":2}',  # extra data: not one object
        b'{"a":NaN}',  # json.loads accepts NaN
        b'{"a":"\xff"}',  # not UTF-8
        '{"a":1}'.encode("utf-16-le"),  # json.loads detects UTF-16
        b"\xef\xbb\xbf" + b'{"a":1}',  # UTF-8 BOM
        b'{"a":"\\ud800"}',  # a lone surrogate escape
    ]
    for line in lines:
        try:
            expected = json.loads(line)
        except ValueError:
            expected = None
        expected = expected if isinstance(expected, dict) else None
        got = decode_line(line)
        assert repr(got) == repr(expected), line


def test_environment_is_cleared_except_path_home_and_listed():
    source = {"PATH": "/bin", "HOME": "/h", "SECRET": "s", "GITHUB_TOKEN": "t", "OTHER": "o"}
    assert child_environment(["GITHUB_TOKEN", "MISSING"], source) == {"PATH": "/bin", "HOME": "/h", "GITHUB_TOKEN": "t"}


@pytest.mark.parametrize("command", ["", "   ", "../evil", "/opt/../bin/sh", "bin/..x"])
def test_bad_commands_are_refused(command):
    with pytest.raises(TransportError, match="transport.command"):
        check_command(command)


async def test_child_sees_only_the_allowed_environment(monkeypatch):
    monkeypatch.setenv("ROOST_TEST_SECRET", "do-not-leak")
    monkeypatch.setenv("ROOST_TEST_ALLOWED", "fine")
    script = "import json,os,sys; sys.stdout.write(json.dumps({'env': dict(os.environ)}) + '\\n'); sys.stdout.flush(); sys.stdin.read()"
    async with open_stdio_transport(sys.executable, ["-c", script], env=["ROOST_TEST_ALLOWED"]) as transport:
        with trio.fail_after(10):
            message = await transport.incoming.receive()
    env = message["env"]
    assert env["ROOST_TEST_ALLOWED"] == "fine"
    assert "ROOST_TEST_SECRET" not in env
    assert set(env) - {"ROOST_TEST_ALLOWED", "PATH", "HOME", "LC_CTYPE"} == set()


async def test_stderr_goes_to_the_log(caplog):
    script = "import sys; sys.stderr.write('server says hi\\n'); sys.stderr.flush(); sys.stdin.read()"
    with caplog.at_level("INFO", logger="roost.mcp.server.noisy"):
        async with open_stdio_transport(sys.executable, ["-c", script], name="noisy"):
            with trio.fail_after(10):
                while "server says hi" not in caplog.text:
                    await trio.sleep(0.02)


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
            async with open_stdio_transport(sys.executable, ["-c", "import sys; sys.stdin.read(); import time; time.sleep(3600)"]) as t:
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
        deadline = time.monotonic() + 10
        while _alive(child_pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(child_pid), "the MCP server outlived roost"
    finally:
        if roost.poll() is None:
            roost.kill()
            roost.wait(10)
