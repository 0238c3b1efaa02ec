"""The stdio server supervisor: no process a server starts outlives it, or roost.

Every test here runs real processes and looks at /proc; waits are bounded.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from roost.plugins.mcp.transports.stdio import wrapped_command
from waiting import wait_until_sync

RAW = str(Path(__file__).parents[2] / "fixtures" / "mcp" / "raw_server.py")
SUPERVISOR = str(Path(wrapped_command("x", [])[3]))

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="needs Linux prctl and /proc"
)


def running(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(") ", 1)[1][0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def in_proc(pid: int) -> bool:
    return os.path.exists(f"/proc/{pid}")


def children_of(pid: int) -> list[int]:
    """Children of any thread of ``pid`` (trio forks from worker threads)."""
    out = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/stat") as f:
                    if int(f.read().rsplit(") ", 1)[1].split()[1]) == pid:
                        out.append(int(entry.name))
            except (OSError, IndexError, ValueError):
                continue
    return out


# A launcher like `npx`: starts the real server as a child (sharing its stdio) and a
# helper that escapes into its own session, records the pids, and waits.
LAUNCHER = textwrap.dedent(
    """
    import json, os, subprocess, sys
    server = subprocess.Popen([sys.executable, sys.argv[1], "legacy"])
    escapee = subprocess.Popen(["sleep", "600"], start_new_session=True,
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    with open(os.environ["ROOST_TEST_PIDS"], "w") as f:
        json.dump({"launcher": os.getpid(), "server": server.pid, "escapee": escapee.pid}, f)
    sys.exit(server.wait())
    """
)

ROOST = textwrap.dedent(
    """
    import sys, trio
    from roost.kernel import default_config
    from roost.kernel import open_kernel

    async def main():
        server = {"name": "npx", "timeout_secs": 10, "env": ["ROOST_TEST_PIDS"],
                  "transport": {"type": "stdio", "command": sys.executable, "args": sys.argv[2:]}}
        config = default_config(home=sys.argv[1], agents={"bundled": False}, mcp_servers=[server])
        async with open_kernel(config, agents=[]) as kernel:
            with trio.fail_after(30):
                while "mcp_npx_alpha" not in kernel.registry:
                    await trio.sleep(0.05)
            print("ready", flush=True)
            await trio.sleep(3600)

    trio.run(main)
    """
)


def test_sigkilled_roost_leaves_no_server_grandchild_or_escaped_helper(tmp_path):
    launcher = tmp_path / "launcher.py"
    launcher.write_text(LAUNCHER)
    pid_file = tmp_path / "pids.json"
    env = {**os.environ, "ROOST_TEST_PIDS": str(pid_file)}
    roost = subprocess.Popen(
        [sys.executable, "-c", ROOST, str(tmp_path / "home"), str(launcher), RAW],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    pids: dict[str, int] = {}
    try:
        assert roost.stdout.readline().strip() == "ready"
        pids = json.loads(pid_file.read_text())
        supervisors = [p for p in children_of(roost.pid) if running(p)]
        assert len(supervisors) == 1, supervisors
        pids["supervisor"] = supervisors[0]
        assert all(running(pid) for pid in pids.values()), pids
        roost.send_signal(signal.SIGKILL)
        roost.wait(10)
        # The supervisor reaps every descendant, so they leave /proc entirely; the
        # supervisor itself is reaped by whoever inherits it (here maybe never: PID 1).
        descendants = [pids["launcher"], pids["server"], pids["escapee"]]
        wait_until_sync(
            lambda: not any(in_proc(pid) for pid in descendants),
            lambda: (
                "descendants gone; left: "
                f"{ {name: pid for name, pid in pids.items() if in_proc(pid)} }"
            ),
        )
        wait_until_sync(lambda: not running(pids["supervisor"]), "the supervisor ended")
    finally:
        if roost.poll() is None:
            roost.kill()
            roost.wait(10)
        for pid in pids.values():
            if running(pid):
                os.kill(pid, signal.SIGKILL)


def start_supervised(script: str, **popen: object) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-I",
            "-S",
            SUPERVISOR,
            str(os.getpid()),
            "--",
            sys.executable,
            "-c",
            script,
        ],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
        **popen,
    )


LEAVES_A_HELPER = textwrap.dedent(
    """
    import subprocess, sys
    helper = subprocess.Popen(["sleep", "600"], start_new_session=True, stdout=subprocess.DEVNULL)
    print(helper.pid, flush=True)
    sys.stdin.read()
    sys.exit(3)
    """
)


def test_server_exit_kills_what_it_left_and_passes_on_its_status():
    supervised = start_supervised(LEAVES_A_HELPER, stdin=subprocess.PIPE)
    try:
        helper = int(supervised.stdout.readline())
        assert running(helper)
        supervised.stdin.close()  # roost's first shutdown step: the server sees EOF
        assert supervised.wait(10) == 3
        wait_until_sync(lambda: not in_proc(helper), "the helper reaped")
    finally:
        if supervised.poll() is None:
            supervised.kill()
            supervised.wait(10)


STUBBORN = textwrap.dedent(
    """
    import signal, subprocess, sys, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    helper = subprocess.Popen(["sleep", "600"], stdout=subprocess.DEVNULL)
    print(helper.pid, flush=True)
    while True:
        time.sleep(1)
    """
)


def test_sigterm_ends_a_server_that_ignores_it_within_the_grace():
    supervised = start_supervised(STUBBORN)
    try:
        helper = int(supervised.stdout.readline())
        server = [p for p in children_of(supervised.pid) if running(p)]
        assert len(server) == 1
        supervised.send_signal(signal.SIGTERM)
        code = supervised.wait(10)
        assert code == 128 + signal.SIGKILL  # the server ignored SIGTERM, so it was killed
        assert not in_proc(server[0])
        wait_until_sync(lambda: not in_proc(helper), "the helper reaped")
    finally:
        if supervised.poll() is None:
            supervised.kill()
            supervised.wait(10)


def test_server_survives_the_exit_of_the_thread_that_started_it():
    # Regression: trio starts processes from a worker thread that exits when idle, and
    # PR_SET_PDEATHSIG fires on the parent *thread's* exit: the old wrapper's SIGKILL
    # then killed every stdio MCP server about ten seconds after it started.
    started: list[subprocess.Popen] = []
    thread = threading.Thread(
        target=lambda: started.append(
            start_supervised("import sys; sys.stdin.read()", stdin=subprocess.PIPE)
        )
    )
    thread.start()
    thread.join()
    supervised = started[0]
    try:
        wait_until_sync(
            lambda: any(running(p) for p in children_of(supervised.pid)),
            "the server started",
            timeout=5,
        )
        # Nothing may happen: give the supervisor two parent polls (PARENT_POLL_S) and the
        # (already delivered) death signal to wrongly kill it. This wait is the subject.
        time.sleep(1.0)
        assert supervised.poll() is None
        assert any(running(p) for p in children_of(supervised.pid))
        supervised.stdin.close()
        assert supervised.wait(10) == 0
    finally:
        if supervised.poll() is None:
            supervised.kill()
            supervised.wait(10)


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["12", "sleep"],
        ["abc", "--", "sleep"],
        ["12", "--"],
        ["12", "--nofile", "x", "--", "sleep"],
    ],
)
def test_bad_arguments_are_a_usage_error(argv):
    done = subprocess.run(
        [sys.executable, "-I", "-S", SUPERVISOR, *argv], capture_output=True, text=True, timeout=10
    )
    assert done.returncode == 2
    assert "usage: _pdeathsig.py PPID [--nofile SOFT] -- COMMAND" in done.stderr
