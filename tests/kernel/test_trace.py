"""TraceContext: ids, the depth breaker, and carrying the context in _meta and headers."""

from __future__ import annotations

import re
import time

import pytest
from roost.kernel import DEFAULT_MAX_DEPTH, RecursionLimitExceeded, TraceContext
from roost.kernel._trace import (
    HEADER_DEPTH,
    HEADER_OPENSTARRY,
    HEADER_PATH,
    HEADER_TRACE_ID,
    META_DEPTH,
    META_MAX_DEPTH,
    META_PATH,
    META_TRACEPARENT,
)

TRACEPARENT = re.compile(r"^00-[0-9a-f]{32}-[0-9a-f]{16}-01$")


def chain(*hops: str, max_depth: int = DEFAULT_MAX_DEPTH) -> TraceContext:
    ctx = TraceContext.new(hops[0], max_depth=max_depth)
    for hop in hops[1:]:
        ctx = ctx.child(hop)
    return ctx


def test_new_trace_starts_at_depth_one():
    ctx = TraceContext.new("A")
    assert ctx.depth == 1 and ctx.path == ("A",) and ctx.max_depth == 5
    assert re.fullmatch(r"[0-9a-f]{32}", ctx.trace_id) and ctx.trace_id != "0" * 32
    assert re.fullmatch(r"[0-9a-f]{16}", ctx.span_id)
    assert ctx.parent_span_id is None
    assert TRACEPARENT.match(ctx.traceparent)
    assert TraceContext.new("A").trace_id != ctx.trace_id


def test_child_extends_the_chain_with_a_new_span():
    parent = TraceContext.new("A")
    child = parent.child("B")
    assert child.trace_id == parent.trace_id
    assert child.span_id != parent.span_id and child.parent_span_id == parent.span_id
    assert child.depth == 2 and child.path == ("A", "B")
    assert child.path_text() == "A → B"
    assert parent.path == ("A",)  # immutable


def test_five_agents_pass_and_the_sixth_is_refused_naming_the_path():
    ctx = chain("A", "B", "C", "D", "E")
    assert ctx.depth == 5
    with pytest.raises(RecursionLimitExceeded) as info:
        ctx.child("F")
    error = info.value
    assert "A → B → C → D → E → F" in str(error)
    assert error.path == ("A", "B", "C", "D", "E", "F") and error.max_depth == 5
    assert error.to_dict()["path"] == ["A", "B", "C", "D", "E", "F"]
    assert error.to_dict()["code"] == "recursion_limit"


def test_the_stricter_limit_applies():
    ctx = chain("A", "B")
    with pytest.raises(RecursionLimitExceeded, match="limit of 2"):
        ctx.child("C", max_depth=2)
    looser = ctx.child("C", max_depth=50)  # a looser callee limit does not loosen the trace
    assert looser.max_depth == 5
    assert chain("A", max_depth=1).max_depth == 1
    with pytest.raises(RecursionLimitExceeded):
        chain("A", max_depth=1).child("B")


def test_meta_round_trip_keeps_trace_depth_path_and_limit():
    sender = chain("A", "B", max_depth=4)
    received = TraceContext.from_meta(sender.to_meta())
    assert received is not None
    assert received.trace_id == sender.trace_id
    assert received.span_id == sender.span_id  # the caller's span: call child() to enter
    assert (received.depth, received.path, received.max_depth) == (2, ("A", "B"), 4)
    assert received.child("C").depth == 3


def test_inject_meta_keeps_other_keys_and_does_not_mutate_the_original():
    ctx = TraceContext.new("A")
    original_meta = {"progressToken": 7}
    params = {"name": "x", "_meta": original_meta}
    out = ctx.inject_meta(params)
    assert out is params
    assert params["_meta"]["progressToken"] == 7
    assert params["_meta"][META_TRACEPARENT] == ctx.traceparent
    assert original_meta == {"progressToken": 7}
    bad = {"_meta": "not a mapping"}
    ctx.inject_meta(bad)
    assert bad["_meta"][META_DEPTH] == 1


@pytest.mark.parametrize("meta", [None, {}, {"other": 1}, "text", [1, 2], 5])
def test_from_meta_without_a_trace_is_none(meta):
    assert TraceContext.from_meta(meta) is None


def test_a2a_metadata_aliases():
    ctx = chain("A", "B")
    assert TraceContext.from_metadata(ctx.to_metadata()).path == ("A", "B")


@pytest.mark.parametrize(
    ("meta", "depth"),
    [
        ({META_DEPTH: 1, META_PATH: ["A", "B", "C"]}, 3),  # a lower depth never wins
        ({META_DEPTH: "4"}, 4),
        ({META_DEPTH: " 04 "}, 4),
        ({META_DEPTH: "", META_PATH: ["A", "B"]}, 2),  # empty: absent (the path counts)
        ({META_DEPTH: 7}, 7),
        ({META_PATH: "not a list", META_DEPTH: 2}, 2),
    ],
)
def test_a_depth_below_the_path_never_lowers_the_count(meta, depth):
    ctx = TraceContext.from_meta(meta)
    assert ctx is not None and ctx.depth == depth
    assert len(ctx.path) == depth


@pytest.mark.parametrize(
    "depth",
    ["abc", True, -4, "-1", 2.0, "1e3", "0x10", "+3", "²", "١٢", "1_0", [3], {}, 10**9, "9" * 5000],
)
def test_a_malformed_depth_is_refused_naming_its_carrier(depth):
    # Regression (issue 15): a bad depth was ignored, i.e. read as "no depth", which
    # restarted the count at 1 unless a path came with it; a huge one was cut to 10,000.
    from roost.kernel import InvalidTraceContext

    with pytest.raises(InvalidTraceContext) as info:
        TraceContext.from_meta({META_DEPTH: depth, META_PATH: ["A", "B"]}, field="params._meta")
    assert info.value.field == f'params._meta["{META_DEPTH}"]'
    assert str(info.value).startswith(info.value.field + ": expected the caller's call depth")
    assert info.value.to_dict()["code"] == "invalid_trace_context"
    with pytest.raises(InvalidTraceContext) as info:
        TraceContext.from_headers(
            {HEADER_DEPTH: str(depth)} if not isinstance(depth, str) else {HEADER_DEPTH: depth}
        )
    assert info.value.field == "X-Roost-Trace-Depth"


def test_an_inbound_depth_past_the_limit_is_refused_on_the_next_hop():
    ctx = TraceContext.from_meta({META_DEPTH: 7})
    with pytest.raises(RecursionLimitExceeded):
        ctx.child("X")


@pytest.mark.parametrize("depth", [10_000, 999_999, 10**9 - 1, "999999999", "0000999999"])
def test_a_huge_depth_trips_and_the_error_names_the_real_depth(depth):
    # Regression (issue 15): "X-Roost-Trace-Depth: 999999" tripped with "would reach depth 2".
    claimed = int(depth)
    for ctx in (
        TraceContext.from_meta({META_DEPTH: depth, META_PATH: ["A"]}),
        TraceContext.from_headers({HEADER_DEPTH: str(depth)}),
        TraceContext.from_env({"ROOST_TRACE_DEPTH": str(depth)}),
    ):
        assert ctx is not None and ctx.depth == claimed
        with pytest.raises(RecursionLimitExceeded) as info:
            ctx.child("B")
        assert f"would reach depth {claimed + 1}, past the limit of 5" in str(info.value)
        assert info.value.depth == claimed + 1 and info.value.to_dict()["depth"] == claimed + 1
        with pytest.raises(RecursionLimitExceeded, match=f"depth {claimed + 1},"):
            ctx.check_hop("B")


@pytest.mark.parametrize("depth", [" ", ""])
def test_an_empty_depth_header_counts_as_absent(depth):
    # What `curl -H "X-Roost-Trace-Depth: $ROOST_TRACE_DEPTH"` sends outside an agent's run.
    ctx = TraceContext.from_headers({HEADER_DEPTH: depth, HEADER_PATH: "A,B"})
    assert ctx is not None and ctx.depth == 2
    assert TraceContext.from_headers({HEADER_DEPTH: depth, HEADER_PATH: depth}) is None


def test_max_depth_from_the_wire():
    ctx = TraceContext.from_meta({META_DEPTH: 1, META_PATH: ["A"], META_MAX_DEPTH: 3})
    assert ctx.max_depth == 3
    assert TraceContext.from_meta({META_DEPTH: 1, META_MAX_DEPTH: "0003"}).max_depth == 3
    hostile = ("١٢", "²", "+3", " 3", "1_0", "-1", "1e1", "9" * 5000, "", 10_000, 3.0)
    for bad in (0, -1, "x", True, None, *hostile):
        ctx = TraceContext.from_meta({META_DEPTH: 1, META_MAX_DEPTH: bad})
        assert ctx.max_depth == DEFAULT_MAX_DEPTH


def test_bad_traceparent_is_ignored_not_trusted():
    for value in (
        "garbage",
        "00-" + "0" * 32 + "-" + "1" * 16 + "-01",
        "00-" + "1" * 32 + "-" + "0" * 16 + "-01",
        "00-" + "g" * 32 + "-" + "1" * 16 + "-01",
        42,
    ):
        ctx = TraceContext.from_meta({META_TRACEPARENT: value, META_DEPTH: 2})
        assert ctx is not None and ctx.depth == 2
        assert ctx.trace_id != "0" * 32 and ctx.trace_id != "1" * 32


def test_path_is_bounded():
    ctx = TraceContext.from_meta({META_PATH: [f"hop{i}" for i in range(1000)]})
    assert len(ctx.path) == 64
    long_hop = TraceContext.from_meta({META_PATH: ["x" * 10_000]})
    assert len(long_hop.path[0]) == 128
    assert TraceContext.from_meta({META_DEPTH: 500}).path == ("?",)


def test_headers_round_trip():
    sender = chain("A", "B", "C")
    headers = sender.to_headers()
    assert headers[HEADER_TRACE_ID] == sender.trace_id
    received = TraceContext.from_headers(headers)
    assert (received.trace_id, received.span_id) == (sender.trace_id, sender.span_id)
    assert received.depth == 3 and received.path == ("A", "B", "C")


def test_headers_are_case_insensitive_and_accept_openstarry():
    tid = "0123456789abcdef0123456789abcdef"
    ctx = TraceContext.from_headers({"x-roost-trace-depth": "2", "X-ROOST-TRACE-ID": tid.upper()})
    assert ctx.trace_id == tid and ctx.depth == 2
    dashed = "01234567-89ab-cdef-0123-456789abcdef"
    ctx = TraceContext.from_headers({HEADER_OPENSTARRY: dashed})
    assert ctx.trace_id == tid and ctx.depth == 1
    assert TraceContext.from_headers({HEADER_OPENSTARRY: "not-hex"}) is None
    assert TraceContext.from_headers({"content-type": "text/plain"}) is None


def test_traceparent_header_wins_over_trace_id_header():
    sender = TraceContext.new("A")
    ctx = TraceContext.from_headers({"traceparent": sender.traceparent, HEADER_TRACE_ID: "f" * 32})
    assert ctx.trace_id == sender.trace_id


def test_trace_span_and_call_ids_are_well_formed_unique_and_differ_in_a_forked_child():
    import os

    from roost.kernel._trace import _new_span_id, _new_trace_id, new_call_id

    traces = {_new_trace_id() for _ in range(10_000)}
    spans = {_new_span_id() for _ in range(10_000)}
    assert len(traces) == len(spans) == 10_000
    assert all(len(t) == 32 and int(t, 16) for t in traces)
    assert all(len(s) == 16 and int(s, 16) for s in spans)
    assert new_call_id().startswith("call_") and len(new_call_id()) == 21
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child reseeds at fork: its next id is not the parent's next id
        os.write(write, _new_trace_id().encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    child = os.read(read, 64).decode()
    os.close(read)
    assert len(child) == 32 and child != _new_trace_id()


def test_check_hop_refuses_exactly_the_hops_child_refuses():
    for depth in range(1, 7):
        for limit in (None, 2, 5, 9):
            ctx = TraceContext.new("a", max_depth=5)
            for i in range(depth - 1):
                try:
                    ctx = ctx.child(f"h{i}", max_depth=9)
                except RecursionLimitExceeded:
                    break
            try:
                ctx.child("next", max_depth=limit)
                child_error = None
            except RecursionLimitExceeded as exc:
                child_error = (exc.path, exc.max_depth)
            try:
                ctx.check_hop("next", max_depth=limit)
                check_error = None
            except RecursionLimitExceeded as exc:
                check_error = (exc.path, exc.max_depth)
            assert check_error == child_error


def test_new_trace_ids_start_with_the_time_so_the_audit_index_grows_at_its_end():
    before = int(time.time())
    ids = [TraceContext.new("a").trace_id for _ in range(1000)] + [
        TraceContext.new("a").span_id for _ in range(3)
    ]
    after = int(time.time())
    traces = ids[:1000]
    assert len(set(traces)) == 1000 and all(re.fullmatch(r"[0-9a-f]{32}", t) for t in traces)
    assert all(before <= int(t[:8], 16) <= after for t in traces)
    assert len({t[8:] for t in traces}) == 1000  # 96 random bits after the time


def test_ids_made_on_many_threads_at_once_never_repeat():
    # The random pool is handed out without a lock: no two ids may share a chunk.
    import threading

    from roost.kernel._trace import _new_span_id, _random_hex

    made: list[list[str]] = [[] for _ in range(4)]
    start = threading.Barrier(len(made))

    def draw(out: list[str]) -> None:
        start.wait()
        for _ in range(20_000):
            out.append(_random_hex())
        out.append(_new_span_id())

    threads = [threading.Thread(target=draw, args=(out,)) for out in made]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    ids = [i for out in made for i in out]
    assert len(set(ids)) == len(ids) == 4 * 20_001
    assert all(re.fullmatch(r"[0-9a-f]{16}", i) for i in ids)


# ---- the fast paths: ids, reading a context written by to_meta, frozen builders ------------


def test_the_random_pool_never_hands_out_an_all_zero_span_id(monkeypatch):
    from roost.kernel import _trace

    # Every other 8-byte chunk of this "random" batch is zero.
    batch = (bytes(8) + bytes(range(1, 9))) * (_trace._RANDOM_BATCH // 16)
    monkeypatch.setattr(_trace.os, "urandom", lambda n: batch[:n])
    monkeypatch.setattr(_trace, "_random_chunks", iter(()))
    drawn = [_trace._random_hex() for _ in range(_trace._RANDOM_BATCH // 16)]
    assert set(drawn) == {"0102030405060708"}
    assert _trace._new_span_id() == "0102030405060708"  # the next batch, the same way


def test_a_callers_unsampled_flag_is_kept_on_every_hop_and_sent_on():
    unsampled = "00-" + "a" * 32 + "-" + "b" * 16 + "-00"
    carriers = [
        TraceContext.from_headers({"traceparent": unsampled}),
        TraceContext.from_meta({META_TRACEPARENT: unsampled}),
        TraceContext.from_env({"TRACEPARENT": unsampled}),
        TraceContext.from_meta(
            {META_TRACEPARENT: unsampled, META_DEPTH: 1, META_PATH: ["x"], META_MAX_DEPTH: 5}
        ).child("c", max_depth=5),
        TraceContext.from_meta({META_TRACEPARENT: unsampled.upper().replace("X", "x")}).child(
            "c", max_depth=5
        ),
    ]
    for ctx in carriers:
        assert ctx.trace_id == "a" * 32 and not ctx.sampled
        for hop in (ctx.child("d"), ctx.nested(), ctx.child("d").nested().child("e")):
            assert not hop.sampled and hop.traceparent.endswith("-00")
            assert TraceContext.from_meta(hop.to_meta()).child("f", max_depth=9).sampled is False
            assert TraceContext.from_headers(hop.to_headers()).sampled is False
    # sampled, another flag only, or no valid traceparent: sampled (W3C: ignore what is bad)
    for flags in ("01", "03", "02", "0b"):
        ctx = TraceContext.from_headers(
            {"traceparent": "00-" + "a" * 32 + "-" + "b" * 16 + "-" + flags}
        )
        assert ctx.sampled is (flags != "02")
    assert TraceContext.from_headers(
        {"traceparent": "00-" + "0" * 32 + "-" + "b" * 16 + "-00", HEADER_DEPTH: "1"}
    ).sampled
    assert TraceContext.new("a").sampled and TraceContext.root().sampled


# ---- issue 15: carriers combined, the environment carrier --------------------------------


def test_deepest_takes_the_deeper_carrier_whole_and_the_strictest_limit():
    shallow = chain("A", max_depth=9)
    deep = chain("X", "Y", "Z")
    assert TraceContext.deepest(shallow, deep) is deep
    assert TraceContext.deepest(None, shallow, None) is shallow
    assert TraceContext.deepest() is None and TraceContext.deepest(None) is None
    tie = chain("P", "Q", "R", max_depth=7)
    assert TraceContext.deepest(tie, deep).trace_id == tie.trace_id  # a tie: the first listed
    assert TraceContext.deepest(tie, deep).max_depth == 5  # the strictest limit
    assert TraceContext.deepest(deep, tie).trace_id == deep.trace_id
    strict = chain("A", max_depth=2)
    merged = TraceContext.deepest(deep, strict)
    assert (merged.trace_id, merged.path, merged.max_depth) == (deep.trace_id, deep.path, 2)


def test_a_forged_lower_depth_in_one_carrier_never_resets_the_chain():
    deep = chain("A", "B", "C", "D", "E")
    params = {"name": "message", "_meta": {META_DEPTH: 0, "progressToken": 3}}
    deep.deepen_meta(params)  # the headers say 5, _meta says 0: 5 wins
    assert params["_meta"][META_DEPTH] == 5 and params["_meta"]["progressToken"] == 3
    with pytest.raises(RecursionLimitExceeded, match="depth 6"):
        TraceContext.from_meta(params["_meta"]).child("F", max_depth=5)
    deeper = {"_meta": chain("A", "B", "C", "D", "E").to_meta()}
    kept = dict(deeper["_meta"])
    chain("A").deepen_meta(deeper)  # the headers say 1, _meta says 5: _meta stays
    assert deeper["_meta"] == kept
    empty: dict = {}
    deep.deepen_meta(empty)
    assert TraceContext.from_meta(empty["_meta"]).depth == 5


def test_environment_round_trip_for_a_child_process():
    sender = chain("A", "B")
    env = sender.to_env()
    assert env == {
        "TRACEPARENT": sender.traceparent,
        "ROOST_TRACE_DEPTH": "2",
        "ROOST_TRACE_PATH": "A,B",
    }
    got = TraceContext.from_env({**env, "PATH": "/bin"})
    assert (got.trace_id, got.span_id, got.depth, got.path) == (
        sender.trace_id,
        sender.span_id,
        2,
        ("A", "B"),
    )
    assert TraceContext.from_env({"PATH": "/bin"}) is None
    assert TraceContext.from_env({"ROOST_TRACE_DEPTH": "", "ROOST_TRACE_PATH": ""}) is None
    from roost.kernel import InvalidTraceContext

    with pytest.raises(InvalidTraceContext, match="^ROOST_TRACE_DEPTH: "):
        TraceContext.from_env({"ROOST_TRACE_DEPTH": "-3"})
    # the headers a tool author's curl sends from that environment continue the chain
    headers = {
        "traceparent": env["TRACEPARENT"],
        HEADER_DEPTH: env["ROOST_TRACE_DEPTH"],
        HEADER_PATH: env["ROOST_TRACE_PATH"],
    }
    assert TraceContext.from_headers(headers).child("C").path == ("A", "B", "C")


def test_a_trip_travels_as_an_mcp_tool_error_and_back():
    with pytest.raises(RecursionLimitExceeded) as info:
        TraceContext.from_headers({HEADER_DEPTH: "999999"}).child("w")
    result = info.value.to_mcp_result()
    assert result["isError"] is True and "would reach depth 1000000" in result["content"][0]["text"]
    back = RecursionLimitExceeded.from_mcp_result(result)
    assert (back.path, back.max_depth, back.depth) == (info.value.path, 5, 1_000_000)
    assert str(back) == str(info.value)
    assert RecursionLimitExceeded.from_mcp_result({"isError": True, "content": []}) is None
    assert RecursionLimitExceeded.from_mcp_result({**result, "isError": False}) is None
    assert RecursionLimitExceeded.from_mcp_result("junk") is None
