"""A trace crossing two daemons over MCP (Streamable HTTP on 127.0.0.1) is one tree: the
calling daemon's tool call span is the parent of the serving daemon's ``mcp.server`` span,
whose child is the served agent's run — and a hop the breaker refuses there is marked on
both sides."""

from __future__ import annotations

import trio
from roost.kernel import (
    EventKind,
    SpanKind,
    TraceContext,
    default_config,
    open_kernel,
    parse_manifest,
)
from roost.plugins.http import open_daemon


def agent(name, *, tools=(), forward=None, reply="{message}"):
    rules = []
    if forward:
        rules.append(
            {
                "match": ".",
                "steps": [{"tool": forward, "arguments": {"message": "{message}"}}],
                "reply": "{result}",
            }
        )
    return parse_manifest(
        {
            "name": name,
            "description": f"test agent {name}",
            "model": {"provider": "scripted", "script": {"rules": rules, "default_reply": reply}},
            "capabilities": {"tools": list(tools)},
        }
    )


def config(home, **extra):
    return default_config(home=str(home), agents={"bundled": False}, http={"port": 0}, **extra)


def spans_of(events) -> list[dict]:
    out = []
    while True:
        try:
            event = events.receive_nowait()
        except trio.WouldBlock:
            return out
        if event.kind == EventKind.TRACE_SPAN_END:
            out.append(event.payload)


async def wait_for_tool(kernel, name):
    with trio.fail_after(20):
        while name not in kernel.registry:
            await trio.sleep(0.02)


async def until_server_span(events) -> list:
    """B's events up to the end of its ``mcp.server`` span (it ends after the reply left)."""
    seen = []
    with trio.fail_after(10):
        while not any(
            e.kind == EventKind.TRACE_SPAN_END and e.payload["kind"] == SpanKind.MCP_SERVER
            for e in seen
        ):
            seen.append(await events.receive())
    return seen


def ends(events) -> list[dict]:
    return [e.payload for e in events if e.kind == EventKind.TRACE_SPAN_END]


async def test_an_mcp_hop_to_another_daemon_joins_the_two_trees_and_the_breaker_marks_both(
    tmp_path,
):
    async with open_kernel(
        config(tmp_path / "b"), agents=[agent("b1", reply="b1 got: {message}")]
    ) as b:
        async with open_daemon(b, graceful_timeout=1) as b_url:
            server = {
                "name": "b",
                "timeout_secs": 20,
                "allow_local": True,
                "transport": {"type": "http", "url": f"{b_url}/agents/b1/mcp"},
            }
            a_config = config(tmp_path / "a", mcp_servers=[server])
            caller = agent("caller", tools=["mcp_b_*"], forward="mcp_b_message")
            async with open_kernel(a_config, agents=[caller]) as a:
                await wait_for_tool(a, "mcp_b_message")
                async with a.tap.subscribe(buffer=1000, kinds=("TRACE:",)) as a_events:
                    async with b.tap.subscribe(
                        buffer=1000, kinds=("TRACE:", "KERNEL:")
                    ) as b_events:
                        reply = await a.send("caller", "hello")
                        a_spans = spans_of(a_events)
                        b_spans = ends(await until_server_span(b_events))
                        # the caller at depth 5: b1 would be the sixth
                        deep = TraceContext.new("x1").child("x2").child("x3").child("x4")
                        refused = await a.send("caller", "deeper", trace=deep)
                        a_refused = spans_of(a_events)
                        b_seen = await until_server_span(b_events)
    b_refused = ends(b_seen)
    b_trips = [e for e in b_seen if e.kind == EventKind.KERNEL_BREAKER]

    assert reply.text == "b1 got: hello"
    (run,) = [s for s in a_spans if s["kind"] == SpanKind.AGENT]
    (hop,) = [s for s in a_spans if s["kind"] == SpanKind.TOOL]
    (served,) = [s for s in b_spans if s["kind"] == SpanKind.MCP_SERVER]
    (b1,) = [s for s in b_spans if s["kind"] == SpanKind.AGENT]
    # one trace: caller's run → its tool call → (daemon B) the MCP server → b1's run
    assert {s["trace_id"] for s in (run, hop, served, b1)} == {reply.trace_id}
    assert hop["parent_span_id"] == run["span_id"]
    assert served["parent_span_id"] == hop["span_id"]
    assert b1["parent_span_id"] == served["span_id"]
    assert (served["name"], served["attributes"]["agent"], served["status"]) == (
        "tools/call message",
        "b1",
        "ok",
    )
    attributes = hop["attributes"]
    assert (attributes["peer"], attributes["peer_name"], attributes["peer_tool"]) == (
        "mcp",
        "b",
        "message",
    )
    assert (
        attributes["peer_url"] == f"{b_url}/agents/b1/mcp" and attributes["peer_dashboard"] == b_url
    )

    # refused in B at depth 6: B's server span and A's tool call both say so, in red
    assert "x1 → x2 → x3 → x4 → caller → b1" in refused.text
    (served,) = [s for s in b_refused if s["kind"] == SpanKind.MCP_SERVER]
    (hop,) = [s for s in a_refused if s["kind"] == SpanKind.TOOL]
    assert not [s for s in b_refused if s["kind"] == SpanKind.AGENT]  # b1 never ran
    for span in (served, hop):
        (mark,) = span["marks"]
        assert span["status"] == "error" and (mark["kind"], mark["depth"]) == ("breaker", 6)
    assert served["parent_span_id"] == hop["span_id"] and served["trace_id"] == deep.trace_id
    assert [t.trace.span_id for t in b_trips] == [served["span_id"]]


async def test_a_peer_url_holding_credentials_is_recorded_without_them(tmp_path):
    # An MCP server's URL may carry its key (user info, a query parameter): the spans of
    # calls to it go to the dashboard, the event stream and an OpenTelemetry collector
    # (url.full), which must not receive the key.
    async with open_kernel(config(tmp_path / "b"), agents=[agent("b1")]) as b:
        async with open_daemon(b, graceful_timeout=1) as b_url:
            secret_url = b_url.replace("http://", "http://bob:s3cret@") + "/agents/b1/mcp"
            server = {
                "name": "b",
                "timeout_secs": 20,
                "allow_local": True,
                "transport": {"type": "http", "url": secret_url + "?api_key=s3cret"},
            }
            a_config = config(tmp_path / "a", mcp_servers=[server])
            caller = agent("caller", tools=["mcp_b_*"], forward="mcp_b_message")
            async with open_kernel(a_config, agents=[caller]) as a:
                await wait_for_tool(a, "mcp_b_message")
                async with a.tap.subscribe(buffer=1000, kinds=("TRACE:",)) as a_events:
                    reply = await a.send("caller", "hello")
                    a_spans = spans_of(a_events)
    assert reply.text == "hello"
    (hop,) = [s for s in a_spans if s["kind"] == SpanKind.TOOL]
    attributes = hop["attributes"]
    assert attributes["peer_url"] == f"{b_url}/agents/b1/mcp"
    assert attributes["peer_dashboard"] == b_url
    assert "s3cret" not in repr(a_spans)
