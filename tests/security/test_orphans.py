"""Item 14: nothing bash starts outlives its call, its supervisor, or roost itself.

SIGKILL of the daemon while bash runs used to leave the supervisor, bash and its children
running under PID 1; and a command that left ~2,100 processes behind was reaped one
/proc scan per process, so it was reported as timed out (a command now runs at most
``limits.bash_processes``, 512 by default, so 400 are left here). Marked processes are
found by a unique ``sleep`` argument in their command line.
"""

from __future__ import annotations

import os
import secrets
import signal
import time

import pytest
import trio
from roost.kernel import ToolCall
from security_targets import Daemon, marked, open_kernel_target
from waiting import wait_until

# Under the default limits.bash_processes (512): the point is reaping many at once.
MANY = 400


def _mark() -> str:
    return f"1000.{secrets.randbelow(10**9):09d}"


async def test_sigkilled_daemon_leaves_no_bash_process_behind(tmp_path):
    daemon = Daemon(tmp_path).start()
    mark = _mark()
    try:
        async with trio.open_nursery() as nursery:

            async def call() -> None:
                try:
                    await daemon.call(
                        "attacker", "bash", {"command": f"sleep {mark} & sleep {mark}"}
                    )
                except Exception:  # the daemon is killed under it
                    pass

            nursery.start_soon(call)
            # Both sleeps (and bash and its supervisor, whose argv holds the mark) run.
            await wait_until(lambda: len(marked(mark)) >= 3, "bash started its sleeps", timeout=30)
            daemon.proc.send_signal(signal.SIGKILL)
            daemon.proc.wait(timeout=10)
            await wait_until(
                lambda: not marked(mark), lambda: f"no process outlived the daemon: {marked(mark)}"
            )
            nursery.cancel_scope.cancel()
    finally:
        for pid in marked(mark):  # on a failing build, do not leave them to the next test
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        daemon.stop()


@pytest.mark.parametrize("pidns", [True, False], ids=["pid-namespace", "no-namespace"])
async def test_a_command_leaving_thousands_of_processes_is_reaped_at_once(
    tmp_path, monkeypatch, pidns
):
    from roost.plugins.tools import _bash

    if pidns and not _bash.namespaces_status()[0]:
        pytest.skip(f"no PID namespace here: {_bash.namespaces_status()[1]}")
    if not pidns:
        monkeypatch.setattr(_bash, "namespaces_status", lambda: (False, "the test turned it off"))
    opener, _, _ = open_kernel_target(tmp_path, monkeypatch)
    mark = _mark()
    async with opener as kernel:
        started = time.monotonic()
        with trio.fail_after(60):
            result = await kernel.call_tool(
                "attacker",
                ToolCall(
                    name="bash",
                    arguments={
                        "command": f"for i in $(seq {MANY}); do sleep {mark} & done; echo spawned",
                        "timeout": 30,
                    },
                ),
            )
        took = time.monotonic() - started
    assert "spawned" in result.as_text(), result.as_text()
    assert not result.is_error and result.structured_content["timed_out"] is False, result.as_text()
    await wait_until(lambda: not marked(mark), lambda: f"none left behind: {len(marked(mark))} are")
    assert took < 20, f"the call took {took:.1f} s"
