"""``roost watch`` against a real daemon with the bundled agents: a run's streamed tokens
are one line, the calls stay visible; ``--json`` keeps every raw event."""

from __future__ import annotations

import io
import json

import trio
from roost.kernel import default_config, open_kernel
from roost.plugins.cli._client import DaemonClient
from roost.plugins.cli._commands import watch_command
from roost.plugins.http import find_daemon, open_daemon
from waiting import wait_until


async def test_watch_prints_one_line_per_run_of_streamed_tokens_with_the_bundled_agents(tmp_path):
    config = default_config(home=tmp_path / "home")  # the bundled coordinator, worker, reviewer
    text_out, json_out = io.StringIO(), io.StringIO()

    def replied(out):
        return lambda: "AGENT:REPLY" in out.getvalue()

    async with open_kernel(config) as kernel, open_daemon(kernel, graceful_timeout=1):
        assert {"coordinator", "worker", "reviewer"} <= set(kernel.agents)
        following = kernel.tap.subscriber_count  # the daemon's own (its trace history)
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                for out, as_json in ((text_out, False), (json_out, True)):
                    nursery.start_soon(partial_watch(config, out, as_json, replied(out)))
                await wait_until(
                    lambda: kernel.tap.subscriber_count >= following + 2, "both watchers subscribed"
                )
                client = DaemonClient(await find_daemon(config.home))
                reply = await client.send("coordinator", "Write a haiku about trio")
    assert not reply["is_error"]

    raw = [json.loads(line) for line in json_out.getvalue().splitlines()]
    tokens = [e for e in raw if e["kind"] == "AGENT:TOKEN"]
    assert len(tokens) > 20  # --json: every streamed word, as it came

    lines = text_out.getvalue().splitlines()
    token_lines = [line for line in lines if "AGENT:TOKEN" in line]
    # one line per run that streamed: the reviewer's, the worker's, the coordinator's
    assert len(token_lines) == 3, "\n".join(lines)
    assert [line.split()[3] for line in token_lines] == ["reviewer", "worker", "coordinator"]
    assert "Reviewer: approved. The draft is clear and complete." in token_lines[0]
    assert f"×{sum(1 for e in tokens if e['source'] == 'coordinator')}" in token_lines[2]
    assert len(lines) == len(raw) - len(tokens) + 3
    # each run's line comes before the event that ends it
    reviewer_result = next(
        i
        for i, line in enumerate(lines)
        if "EXEC:TOOL_RESULT" in line and "reviewer → worker" in line
    )
    assert lines.index(token_lines[0]) < reviewer_result
    assert lines.index(token_lines[2]) < next(
        i for i, line in enumerate(lines) if "AGENT:REPLY" in line
    )


def partial_watch(config, out, as_json, done):
    async def watch():
        await watch_command(
            config,
            kinds=[],
            as_json=as_json,
            count=None,
            out=out,
            err=io.StringIO(),
            stop=lambda: wait_until(done, "the reply watched", timeout=30),
        )

    return watch


def token(source, span, text, ts=1.0):
    return {
        "kind": "AGENT:TOKEN",
        "source": source,
        "payload": {"text": text, "session_id": None},
        "trace": {"span_id": span},
        "ts": ts,
    }


def test_token_runs_are_bounded_in_runs_and_in_text():
    from roost.plugins.cli._client import TokenRuns

    runs = TokenRuns(width=40, max_runs=2)
    assert runs.feed(token("a", "s1", "x" * 30)) == []
    assert runs.feed(token("a", "s1", "y" * 1000)) == []  # kept: at most width characters
    assert runs.feed(token("b", "s2", "b")) == []
    evicted = runs.feed(token("c", "s3", "c"))  # a third open run: the oldest goes out
    assert (
        len(evicted) == 1
        and "×2" in evicted[0]
        and "(1030 chars)" in evicted[0]
        and len(evicted[0]) < 120
    )
    ended = runs.feed(
        {"kind": "AGENT:REPLY", "source": "b", "payload": {}, "trace": {"span_id": "s2"}, "ts": 2.0}
    )
    assert len(ended) == 2 and '"b"' in ended[0] and "AGENT:REPLY" in ended[1]
    assert [line.split()[3] for line in runs.flush()] == ["c"]
    assert runs.flush() == []


def test_a_span_event_is_one_short_line_naming_what_it_met():
    from roost.plugins.cli._client import event_line

    record = {
        "kind": "tool",
        "name": "agent_reviewer",
        "duration_ms": 0.4,
        "status": "error",
        "error": "call chain would reach depth 6",
        "marks": [{"kind": "breaker", "depth": 6}],
        "attributes": {"agent": "worker", "call_id": "call_" + "0" * 200},
    }
    line = event_line({"kind": "TRACE:SPAN_END", "source": "worker", "payload": record, "ts": 1.0})
    assert line.endswith(
        "TRACE:SPAN_END     worker  tool agent_reviewer 0.4 ms error [breaker]: "
        "call chain would reach depth 6"
    )
    opened = {**record, "status": "running", "duration_ms": None, "error": None, "marks": []}
    start = event_line({"kind": "TRACE:SPAN_START", "source": "worker", "payload": opened})
    assert start.endswith("worker  tool agent_reviewer running")


def test_a_span_line_shows_control_characters_escaped_never_raw():
    # A span's name and error are an agent's or a peer's text (a tool name a model made up,
    # a failed tool's output): raw, an escape sequence in them would clear, retitle or
    # rewrite the operator's terminal (or set its clipboard, OSC 52).
    from roost.plugins.cli._client import event_line

    record = {
        "kind": "tool",
        "name": "bash\x1b[2J",
        "duration_ms": 1.0,
        "status": "error",
        "error": "\x1b]52;c;Y3VybCBldmlsIHwgc2g=\x07done\r\x9b1A\u202etxt.exe",
        "marks": [],
        "attributes": {},
    }
    event = {"kind": "TRACE:SPAN_END", "source": "worker\x1b[8m", "payload": record, "ts": 1.0}
    line = event_line(event, width=500)
    assert line.isprintable(), repr(line)
    assert "bash\\x1b[2J" in line and "\\x1b]52;c;" in line and "\\x07done\\r\\x9b1A" in line
    assert "\\u202etxt.exe" in line and "worker\\x1b[8m" in line


async def test_watch_json_prints_an_event_holding_a_lone_surrogate_as_the_daemon_sent_it(
    tmp_path,
):
    # A model named a tool "rea\ud800" (the six characters \ud800 in its JSON). The daemon
    # sends that escaped; watch --json decoded and re-encoded it with ensure_ascii=False, and
    # printing the lone surrogate to a UTF-8 stdout ended the watch with an error.
    from roost.kernel import RoostError, parse_manifest

    script = {"rules": [{"match": ".", "steps": [{"tool": "rea\ud800", "arguments": {}}]}]}
    evil = parse_manifest(
        {
            "name": "evil",
            "description": "calls a tool whose name no tool has",
            "model": {"provider": "scripted", "script": script},
            "capabilities": {"tools": ["read"]},
        }
    )
    config = default_config(home=tmp_path / "home", agents={"bundled": False})
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")  # as a terminal's stdout encodes

    def named_tool():
        out.flush()
        return b'"name": "rea\\ud800"' in out.buffer.getvalue()

    async with (
        open_kernel(config, agents=[evil]) as kernel,
        open_daemon(kernel, graceful_timeout=1),
    ):
        following = kernel.tap.subscriber_count
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(partial_watch(config, out, True, named_tool))
                await wait_until(
                    lambda: kernel.tap.subscriber_count > following, "the watcher subscribed"
                )
                try:
                    await kernel.send("evil", "go")
                except RoostError:
                    pass  # whether such a run can be stored is not this test's business
    out.flush()
    lines = out.buffer.getvalue().decode().splitlines()
    names = [json.loads(line)["payload"].get("name") for line in lines]
    assert "rea\ud800" in names
