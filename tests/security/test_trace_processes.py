"""``ProcessTraces``: from a loopback TCP peer to the agent run whose process tree holds it
(issue 15 item 5), with real processes, real sockets and Linux's ``/proc``."""

from __future__ import annotations

import socket
import sys

import pytest
import trio
from roost.kernel import ProcessTraces, RoostError, TraceContext

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads Linux's /proc")

# A grandchild (bash forks it: the command is not bash's last) that connects and waits.
CLIENT = (
    "{python} -c 'import socket,sys; s=socket.create_connection((sys.argv[1], "
    "int(sys.argv[2]))); s.recv(1)' {host} {port}; true"
)


def chain(*hops: str) -> TraceContext:
    ctx = TraceContext.new(hops[0])
    for hop in hops[1:]:
        ctx = ctx.child(hop)
    return ctx


async def _connection_from(
    process_command: str, listener: socket.socket
) -> tuple[trio.Process, socket.socket, tuple]:
    host, port = listener.getsockname()[:2]
    process = await trio.lowlevel.open_process(
        ["bash", "-c", process_command.format(python=sys.executable, host=host, port=port)]
    )
    listener.setblocking(False)
    with trio.fail_after(10):
        await trio.lowlevel.wait_readable(listener)  # a connection is waiting
    conn, peer = listener.accept()
    return process, conn, peer


async def _finish(process: trio.Process, conn: socket.socket) -> None:
    conn.setblocking(True)
    conn.sendall(b"x")
    conn.close()
    with trio.fail_after(10):
        await process.wait()


@pytest.mark.parametrize("family", [socket.AF_INET, socket.AF_INET6])
async def test_a_registered_process_trees_connection_maps_to_its_run(family):
    host = "127.0.0.1" if family == socket.AF_INET else "::1"
    with socket.socket(family) as listener:
        listener.bind((host, 0))
        listener.listen()
        traces = ProcessTraces()
        run = chain("a", "b", "c")
        process, conn, peer = await _connection_from(CLIENT, listener)
        try:
            local = conn.getsockname()
            assert await traces.caller_of(peer, local) is None  # nothing registered yet
            release = traces.register(process.pid, run)
            other = traces.register(2**22 + 7, chain("x"))  # a pid that holds nothing of it
            assert len(traces) == 2
            assert await traces.caller_of(peer, local) is run
            assert await traces.caller_of(("10.0.0.1", peer[1]), local) is None  # not loopback
            assert await traces.caller_of(None, local) is None
            release()
            assert await traces.caller_of(peer, local) is None  # other trees do not hold it
            other()
            assert len(traces) == 0
        finally:
            await _finish(process, conn)


async def test_a_connection_from_outside_every_registered_tree_is_nobodys():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        traces = ProcessTraces()
        sleeper = await trio.lowlevel.open_process(["sleep", "30"])
        traces.register(sleeper.pid, chain("a", "b", "c", "d", "e"))
        try:
            mine = socket.create_connection(listener.getsockname())  # this process: not registered
            conn, peer = listener.accept()
            with mine, conn:
                assert await traces.caller_of(peer, conn.getsockname()) is None
        finally:
            sleeper.kill()
            await sleeper.wait()


async def test_a_tree_past_the_bounds_counts_as_the_deepest_running_run():
    # A command that forks more processes than a look-up visits cannot hide in the crowd.
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        traces = ProcessTraces()
        process, conn, peer = await _connection_from(CLIENT, listener)
        try:
            deep = chain("a", "b", "c", "d")
            traces.register(process.pid, chain("a"))
            traces.register(2**22 + 9, deep)
            traces.max_processes = 1
            assert await traces.caller_of(peer, conn.getsockname()) == deep
            traces.max_processes, traces.max_fds = 4096, 1
            assert await traces.caller_of(peer, conn.getsockname()) == deep
        finally:
            await _finish(process, conn)


def test_the_table_is_bounded_and_a_full_table_refuses_to_register():
    traces = ProcessTraces(capacity=2)
    first = traces.register(101, chain("a"))
    traces.register(102, chain("b"))
    with pytest.raises(RoostError, match="too many tool processes"):
        traces.register(103, chain("c"))
    traces.register(102, chain("b", "c"))  # re-registering a pid takes no room
    first()
    first()  # idempotent
    traces.register(103, chain("c"))
    assert len(traces) == 2


async def test_the_bash_tool_registers_its_command_and_gives_it_the_runs_context(tmp_path):
    # The environment a command gets, and the registration while it runs.
    from roost.plugins.tools._bash import run_command

    traces = ProcessTraces()
    run = chain("a", "b")
    seen: list[int] = []

    def track(pid: int):
        seen.append(len(traces))
        release = traces.register(pid, run)
        seen.append(len(traces))
        return release

    result = await run_command(
        ["bash", "-c", 'echo "$TRACEPARENT $ROOST_TRACE_DEPTH $ROOST_TRACE_PATH"'],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", **run.to_env()},
        timeout_s=10,
        max_chars=1000,
        track=track,
    )
    assert result["stdout"].split() == [run.traceparent, "2", "a,b"]
    assert seen == [0, 1] and len(traces) == 0  # registered while it ran, released after


async def test_an_agents_bash_gets_its_runs_trace_context_in_its_environment(tmp_path):
    import json

    from roost.kernel import ToolCall, default_config, open_kernel

    agent = tmp_path / "agents" / "sh" / "agent.json"
    agent.parent.mkdir(parents=True)
    agent.write_text(
        json.dumps(
            {
                "name": "sh",
                "description": "sh",
                "model": {"provider": "scripted", "name": "rules"},
                "capabilities": {"tools": ["bash"]},
            }
        )
    )
    config = default_config(
        home=str(tmp_path / "home"), agents={"dirs": [str(tmp_path / "agents")], "bundled": False}
    )
    run = chain("a", "sh")
    command = 'echo "$TRACEPARENT $ROOST_TRACE_DEPTH $ROOST_TRACE_PATH"'
    async with open_kernel(config) as kernel:
        async with kernel.tap.subscribe(kinds=("TRACE:SPAN_END",)) as spans:
            call = ToolCall("bash", {"command": command}, caller="sh", trace=run)
            result = await kernel.call_tool("sh", call)
            span = spans.receive_nowait().payload
        fresh = await kernel.call_tool("sh", ToolCall("bash", {"command": command}, caller="sh"))
        assert len(kernel.process_traces) == 0
    # the bash call's own span, a child of the run's: what a client in the command continues
    assert span["parent_span_id"] == run.span_id and span["name"] == "bash"
    assert result.as_text().split()[:3] == [f"00-{run.trace_id}-{span['span_id']}-01", "2", "a,sh"]
    # a call outside any run (no trace) starts one at the agent, never at depth 0
    assert fresh.as_text().split()[1:3] == ["1", "sh"]
