"""A trace crossing two daemons over A2A (JSON-RPC on 127.0.0.1) is one tree: the calling
daemon's ``a2a_<name>`` tool call span is the parent of the serving daemon's ``a2a.server``
span, whose child is the served agent's run; a send the breaker refuses there is a marked
server span of its own."""

from __future__ import annotations

import trio
from a2a_helpers import write_agent
from roost.kernel import EventKind, SpanKind, TraceContext, default_config, open_kernel
from roost.plugins.http import open_daemon


def config(root, externals=()):
    return default_config(
        home=str(root / "home"),
        agents={"dirs": [str(root / "agents")], "bundled": False},
        http={"port": 0},
        a2a={"external_agents": list(externals)},
    )


async def until_server_span(events) -> list:
    """B's events up to the end of its ``a2a.server`` span (it ends once the task settled)."""
    seen = []
    with trio.fail_after(10):
        while not any(
            e.kind == EventKind.TRACE_SPAN_END and e.payload["kind"] == SpanKind.A2A_SERVER
            for e in seen
        ):
            seen.append(await events.receive())
    return seen


def drain(events) -> list:
    out = []
    while True:
        try:
            out.append(events.receive_nowait())
        except trio.WouldBlock:
            return out


def ends(events) -> list[dict]:
    return [e.payload for e in events if e.kind == EventKind.TRACE_SPAN_END]


async def test_an_a2a_hop_to_another_daemon_joins_the_two_trees(tmp_path):
    write_agent(tmp_path / "b" / "agents", "b1", [], default_reply="b1 got: {message}")
    forward = [
        {
            "match": ".",
            "steps": [{"tool": "a2a_b", "arguments": {"message": "{message}"}}],
            "reply": "{result}",
        }
    ]
    write_agent(tmp_path / "a" / "agents", "caller", forward, tools=["a2a_b"])
    async with (
        open_kernel(config(tmp_path / "b")) as b,
        open_daemon(b, graceful_timeout=1) as b_url,
    ):
        external = {"name": "b", "url": f"{b_url}/a2a/agents/b1"}
        async with open_kernel(config(tmp_path / "a", [external])) as a:
            with trio.fail_after(20):
                while "a2a_b" not in a.registry:
                    await trio.sleep(0.02)
            async with a.tap.subscribe(buffer=1000, kinds=("TRACE:",)) as a_events:
                async with b.tap.subscribe(buffer=1000, kinds=("TRACE:", "KERNEL:")) as b_events:
                    reply = await a.send("caller", "hello")
                    a_spans = ends(drain(a_events))
                    b_spans = ends(await until_server_span(b_events))
                    # the caller at depth 5: b1 would be the sixth, refused before any task
                    deep = TraceContext.new("x1").child("x2").child("x3").child("x4")
                    refused = await a.send("caller", "deeper", trace=deep)
                    a_refused = ends(drain(a_events))
                    b_seen = await until_server_span(b_events)

    assert reply.text == "b1 got: hello"
    (run,) = [s for s in a_spans if s["kind"] == SpanKind.AGENT]
    (hop,) = [s for s in a_spans if s["kind"] == SpanKind.TOOL]
    (served,) = [s for s in b_spans if s["kind"] == SpanKind.A2A_SERVER]
    (b1,) = [s for s in b_spans if s["kind"] == SpanKind.AGENT]
    # one trace: caller's run → its tool call → (daemon B) the A2A server → b1's run
    assert {s["trace_id"] for s in (run, hop, served, b1)} == {reply.trace_id}
    assert hop["parent_span_id"] == run["span_id"]
    assert served["parent_span_id"] == hop["span_id"]
    assert b1["parent_span_id"] == served["span_id"]
    assert (served["attributes"]["agent"], served["attributes"]["state"], served["status"]) == (
        "b1",
        "completed",
        "ok",
    )
    assert served["attributes"]["task_id"] and served["attributes"]["context_id"]
    attributes = hop["attributes"]
    assert (attributes["peer"], attributes["peer_name"]) == ("a2a", "b")
    assert (
        attributes["peer_url"].startswith(f"{b_url}/a2a/agents/b1")
        and attributes["peer_dashboard"] == b_url
    )

    assert "x1 → x2 → x3 → x4 → caller → b1" in refused.text
    b_refused = ends(b_seen)
    (served,) = [s for s in b_refused if s["kind"] == SpanKind.A2A_SERVER]
    (hop,) = [s for s in a_refused if s["kind"] == SpanKind.TOOL]
    assert not [s for s in b_refused if s["kind"] == SpanKind.AGENT]  # b1 never ran
    assert served["parent_span_id"] == hop["span_id"] and served["trace_id"] == deep.trace_id
    (mark,) = served["marks"]
    assert served["status"] == "error" and (mark["kind"], mark["depth"]) == ("breaker", 6)
    assert hop["status"] == "error" and "would reach depth 6" in hop["error"]
    (trip,) = [e for e in b_seen if e.kind == EventKind.KERNEL_BREAKER]
    assert trip.trace.span_id == hop["span_id"]  # refused at B's door: in the caller's span
