"""Item 10: nothing a caller sends can hang the daemon's threads or its shutdown.

A FIFO given to ``read`` or ``grep`` used to block a worker thread forever; 40 of them
exhausted Trio's thread limiter, every file tool and ``bash`` hung daemon-wide, and
SIGTERM no longer stopped ``roost run``. Now non-regular files are refused without
blocking, each agent's file work has its own thread limiter, and a thread that is stuck
anyway is abandoned on cancellation.
"""

from __future__ import annotations

import functools
import os
import signal
import threading
import time

import trio
from roost.kernel import ToolCall, ToolContext
from security_targets import SHUTDOWN_TIMEOUT_S, Daemon, open_kernel_target
from waiting import wait_until

FLOOD = 50  # more than Trio's default thread limit (40)


async def test_a_fifo_flood_neither_hangs_the_daemon_nor_stops_sigterm(tmp_path):
    daemon = Daemon(tmp_path).start()
    try:
        fifo = daemon.workspace("attacker") / "pipe"
        os.mkfifo(fifo)
        answers = []

        async def one(i: int) -> None:
            tool, args = (
                ("read", {"path": "pipe"}) if i % 2 else ("grep", {"pattern": "x", "path": "pipe"})
            )
            answers.append(await daemon.call("attacker", tool, args))

        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                for i in range(FLOOD):
                    nursery.start_soon(one, i)
            assert all(a.is_error and "named pipe (FIFO)" in a.text for a in answers), answers[:3]
            # Every tool still works for everyone: a file tool, bash, another agent.
            (daemon.workspace("attacker") / "ok.txt").write_text("still fine\n")
            assert "still fine" in (await daemon.call("attacker", "read", {"path": "ok.txt"})).text
            assert (
                "bash-ok" in (await daemon.call("victim", "bash", {"command": "echo bash-ok"})).text
            )
        started = time.monotonic()
        daemon.proc.send_signal(signal.SIGTERM)
        await trio.to_thread.run_sync(functools.partial(daemon.proc.wait, timeout=60))  # its exit
        took = time.monotonic() - started
        assert daemon.proc.returncode == 0, daemon.proc.stderr.read().decode()[-2000:]
        assert took < SHUTDOWN_TIMEOUT_S + 2, f"shutdown took {took:.1f} s"
    finally:
        if daemon.alive():
            try:  # on a build where readers are stuck, free them so the daemon can go
                for _ in range(FLOOD):
                    os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                pass
        daemon.stop()


async def test_one_agents_stuck_threads_do_not_starve_another_agent(tmp_path, monkeypatch):
    from roost.plugins.tools._sandbox import FILE_THREADS_PER_AGENT, agent_thread, thread_limiter

    opener, _, _ = open_kernel_target(tmp_path, monkeypatch)
    release = threading.Event()
    async with opener as kernel:
        (kernel.workspace_for(kernel.agents["victim"]) / "f.txt").write_text("victim can read\n")
        stuck = ToolContext(agent="attacker", workspace=tmp_path, kernel=kernel)
        try:
            with trio.fail_after(20):
                async with trio.open_nursery() as nursery:
                    for _ in range(FILE_THREADS_PER_AGENT * 3):
                        nursery.start_soon(agent_thread, stuck, release.wait)
                    limiter = thread_limiter("attacker")
                    await wait_until(
                        lambda: limiter.borrowed_tokens == FILE_THREADS_PER_AGENT,
                        "every slot of attacker's limiter taken",
                    )
                    result = await kernel.call_tool(
                        "victim", ToolCall(name="read", arguments={"path": "f.txt"})
                    )
                    assert "victim can read" in result.as_text()
                    # The stuck ones are abandoned on cancellation: nothing waits for them.
                    nursery.cancel_scope.cancel()
        finally:
            release.set()
