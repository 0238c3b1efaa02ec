"""The ``otel`` service as configured in ``[telemetry]``, exporting over OTLP/HTTP to a real
receiver on 127.0.0.1 (h11 + opentelemetry-proto, ``otlp_receiver``): a request that an
OpenTelemetry-instrumented client starts on daemon A, whose agent asks an agent of daemon B
over A2A or MCP, is one trace with the right parent links; a trickling receiver does not
hold the shutdown past ``timeout_s``; sampling 0 sends nothing."""

from __future__ import annotations

import os
from contextlib import asynccontextmanager

import httpx
import pytest
import trio
from otlp_receiver import OtlpReceiver
from roost.kernel import default_config, open_kernel, parse_manifest
from roost.plugins.http import open_daemon
from roost.plugins.otel._export import EXTENSION
from waiting import wait_until

INTERNAL, SERVER, CLIENT = 1, 2, 3  # the OTLP proto's SpanKind
ERROR = 2  # its StatusCode


def agent(name, *, tools=(), forward=None, reply="{message}"):
    rules = []
    if forward:
        steps = [{"tool": forward, "arguments": {"message": "{message}"}}]
        rules.append({"match": ".", "steps": steps, "reply": "{result}"})
    return parse_manifest(
        {
            "name": name,
            "description": f"test agent {name}",
            "model": {"provider": "scripted", "script": {"rules": rules, "default_reply": reply}},
            "capabilities": {"tools": list(tools)},
            "a2a": {"enabled": True},
        }
    )


def config(home, telemetry, **extra):
    return default_config(
        home=str(home), agents={"bundled": False}, http={"port": 0}, telemetry=telemetry, **extra
    )


def caller_traceparent() -> tuple[str, str, str]:
    """What an OpenTelemetry-instrumented client sends: (traceparent, trace id, span id)."""
    trace_id, span_id = os.urandom(16).hex(), os.urandom(8).hex()
    return f"00-{trace_id}-{span_id}-01", trace_id, span_id


@asynccontextmanager
async def two_daemons(tmp_path, protocol, endpoint):
    """Daemon A, whose agent ``caller`` asks daemon B's ``b1`` over ``protocol``, both
    exporting to ``endpoint``: yields (A's URL, B's URL, A, B)."""

    def telemetry(service):
        return {"endpoint": endpoint, "service_name": service, "timeout_s": 5}

    b_config = config(tmp_path / "b", telemetry("roost-b"))
    async with (
        open_kernel(b_config, agents=[agent("b1", reply="b1 got: {message}")]) as b,
        open_daemon(b, graceful_timeout=1) as b_url,
    ):
        if protocol == "a2a":
            peer = {"name": "b", "url": f"{b_url}/a2a/agents/b1"}
            extra, tool = {"a2a": {"external_agents": [peer]}}, "a2a_b"
        else:
            server = {
                "name": "b",
                "allow_local": True,
                "transport": {"type": "http", "url": f"{b_url}/agents/b1/mcp"},
            }
            extra, tool = {"mcp_servers": [server]}, "mcp_b_message"
        a_config = config(tmp_path / "a", telemetry("roost-a"), **extra)
        caller = agent("caller", tools=[tool], forward=tool)
        async with (
            open_kernel(a_config, agents=[caller]) as a,
            open_daemon(a, graceful_timeout=1) as a_url,
        ):
            await wait_until(lambda: tool in a.registry, f"{tool} registered", timeout=20)
            yield a_url, b_url, a, b


async def ask_caller(a_url, traceparent):
    """``hello`` to A's ``caller`` over its REST API with a client's ``traceparent``."""
    async with httpx.AsyncClient(timeout=20) as http:
        answer = await http.post(
            f"{a_url}/api/agents/caller/message",
            json={"message": "hello"},
            headers={"traceparent": traceparent},
        )
    assert answer.status_code == 200, answer.text
    assert answer.json()["reply"] == "b1 got: hello"
    return answer.json()


@pytest.mark.parametrize("protocol", ["a2a", "mcp"])
async def test_a_chain_across_two_daemons_is_one_exported_trace_under_the_callers_span(
    tmp_path, protocol
):
    receiver = OtlpReceiver()
    async with trio.open_nursery() as nursery:
        endpoint = await nursery.start(receiver.serve)
        async with two_daemons(tmp_path, protocol, endpoint) as (a_url, b_url, _, _):
            traceparent, trace_id, client_span = caller_traceparent()
            assert (await ask_caller(a_url, traceparent))["trace_id"] == trace_id

            def both_runs(r):
                runs = {(s["service"], s["name"]) for s in r.spans if s["trace_id"] == trace_id}
                return {("roost-a", "invoke_agent caller"), ("roost-b", "invoke_agent b1")} <= runs

            await receiver.wait_for(both_runs)
        nursery.cancel_scope.cancel()

    spans = [s for s in receiver.spans if s["trace_id"] == trace_id]
    ids = {s["span_id"] for s in spans}
    assert len(ids) == len(spans)  # each span exported once
    # one trace: every span hangs off another of it, or off the client's span
    assert all(s["parent_span_id"] in ids for s in spans if s["parent_span_id"] != client_span)

    def only(service, name):
        (span,) = [s for s in spans if (s["service"], s["name"]) == (service, name)]
        return span

    run = only("roost-a", "invoke_agent caller")
    hop_name = "execute_tool a2a_b" if protocol == "a2a" else "tools/call message"
    hop = only("roost-a", hop_name)
    served_name = "A2A b1" if protocol == "a2a" else "tools/call message"
    served = only("roost-b", served_name)
    b1 = only("roost-b", "invoke_agent b1")
    assert run["parent_span_id"] == client_span  # the caller's span is the root's parent
    assert [s for s in spans if s["parent_span_id"] == client_span] == [run]
    assert (hop["parent_span_id"], hop["kind"]) == (run["span_id"], CLIENT)
    assert (served["parent_span_id"], served["kind"]) == (hop["span_id"], SERVER)
    assert (b1["parent_span_id"], b1["kind"]) == (served["span_id"], INTERNAL)
    assert hop["attributes"]["roost.peer"] == protocol
    assert hop["attributes"]["url.full"].startswith(b_url)
    assert run["start"] <= hop["start"] <= served["start"] <= b1["start"] <= b1["end"]
    assert served["end"] <= hop["end"] <= run["end"]
    assert {s["scope"] for s in spans} == {"roost"}
    assert receiver.requests[0]["headers"]["content-type"] == "application/x-protobuf"
    assert receiver.requests[0]["target"] == "/v1/traces"


async def test_a_trace_its_caller_left_unsampled_is_exported_by_neither_daemon(tmp_path):
    receiver = OtlpReceiver()
    async with trio.open_nursery() as nursery:
        endpoint = await nursery.start(receiver.serve)
        async with two_daemons(tmp_path, "a2a", endpoint) as (a_url, _, a, b):
            traceparent, trace_id, _ = caller_traceparent()
            await ask_caller(a_url, traceparent[:-2] + "00")  # flags 00: not sampled
            a_stats, b_stats = a.extensions[EXTENSION], b.extensions[EXTENSION]
            # A: the run, its two model calls and the hop; B: the server span, the run and
            # its model call — every one left out on both sides
            await wait_until(lambda: a_stats.sampled_out >= 4 and b_stats.sampled_out >= 3)
            # a sampled request after it is exported, so the export itself works
            sampled, sampled_id, _ = caller_traceparent()
            await ask_caller(a_url, sampled)
            await receiver.wait_for(
                lambda r: (
                    {s["service"] for s in r.spans if s["trace_id"] == sampled_id}
                    == {"roost-a", "roost-b"}
                )
            )
        nursery.cancel_scope.cancel()
    assert not [s for s in receiver.spans if s["trace_id"] == trace_id]


async def test_a_trickling_receiver_does_not_hold_the_shutdown_past_timeout_s(tmp_path):
    receiver = OtlpReceiver(trickle=True)
    timeout_s = 1.0
    async with trio.open_nursery() as nursery:
        endpoint = await nursery.start(receiver.serve)
        telemetry = {"endpoint": endpoint, "timeout_s": timeout_s}
        kernel_config = config(tmp_path, telemetry)
        async with open_kernel(kernel_config, agents=[agent("a1")]) as kernel:
            await kernel.send("a1", "one")
            await receiver.wait_for(lambda r: r.requests)  # an export is stuck in the trickle
            await kernel.send("a1", "two")  # ends while it is: left for the flush at shutdown
            stats = kernel.extensions[EXTENSION]
            leaving = trio.current_time()
        took = trio.current_time() - leaving
        nursery.cancel_scope.cancel()
    # the flush waits for the stuck export at most timeout_s, then gives up; shutting the
    # rest of the kernel down takes well under a second
    assert took < timeout_s + 1.0, f"shutdown took {took:.2f} s"
    assert stats.exported == 0 and stats.failed >= 2


async def test_sampling_zero_sends_nothing_to_the_receiver(tmp_path):
    receiver = OtlpReceiver()
    async with trio.open_nursery() as nursery:
        endpoint = await nursery.start(receiver.serve)
        kernel_config = config(tmp_path, {"endpoint": endpoint, "sampling": 0})
        async with open_kernel(
            kernel_config, agents=[agent("a1", tools=["agent_a2"], forward="agent_a2"), agent("a2")]
        ) as kernel:
            reply = await kernel.send("a1", "hello")
            stats = kernel.extensions[EXTENSION]
            # the runs of a1 and a2, a1's ask and both model calls
            await wait_until(lambda: stats.sampled_out >= 5, "every span sampled out")
        nursery.cancel_scope.cancel()
    assert reply.text == "hello"
    assert receiver.requests == [] and stats.exported == 0


@pytest.mark.parametrize("from_env", [False, True])
async def test_headers_reach_the_collector_from_the_table_or_the_environment(
    tmp_path, monkeypatch, from_env
):
    receiver = OtlpReceiver()
    telemetry = {}
    if from_env:  # OpenTelemetry's own variable: a key that stays out of roost.toml
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-collector-key=from%20env")
    else:
        telemetry["headers"] = {"X-Collector-Key": "from table"}
    async with trio.open_nursery() as nursery:
        telemetry["endpoint"] = await nursery.start(receiver.serve)
        async with open_kernel(config(tmp_path, telemetry), agents=[agent("a1")]) as kernel:
            await kernel.send("a1", "hello")
            await receiver.wait_for(lambda r: r.requests)
        nursery.cancel_scope.cancel()
    expected = "from env" if from_env else "from table"
    assert receiver.requests[0]["headers"]["x-collector-key"] == expected


async def test_a_span_holding_a_lone_surrogate_does_not_fail_the_batch_it_is_in(tmp_path):
    # A model named a tool "rea\ud800" (the six characters \ud800 in its JSON): its span's
    # name holds a lone surrogate, which protobuf cannot encode. The exporter refused the
    # whole batch, so every span exported with it (anyone's, up to 512) was lost.
    from roost.kernel import RoostError

    script = {"rules": [{"match": ".", "steps": [{"tool": "rea\ud800", "arguments": {}}]}]}
    evil = parse_manifest(
        {
            "name": "evil",
            "description": "calls a tool whose name no tool has",
            "model": {"provider": "scripted", "script": script},
            "capabilities": {"tools": ["read"]},
        }
    )
    receiver = OtlpReceiver()
    async with trio.open_nursery() as nursery:
        endpoint = await nursery.start(receiver.serve)
        kernel_config = config(tmp_path, {"endpoint": endpoint})
        async with open_kernel(kernel_config, agents=[evil, agent("good")]) as kernel:
            stats = kernel.extensions[EXTENSION]
            async with trio.open_nursery() as both:  # ended together: exported together

                async def run_evil():
                    try:
                        await kernel.send("evil", "go")
                    except RoostError:
                        pass  # whether such a run can be stored is not this test's business

                both.start_soon(run_evil)
                both.start_soon(kernel.send, "good", "hello")
            await wait_until(lambda: stats.exported + stats.failed >= 6, "both runs exported")
        nursery.cancel_scope.cancel()
    names = {s["name"] for s in receiver.spans}
    assert {"invoke_agent good", "invoke_agent evil", "execute_tool rea\\ud800"} <= names
    assert stats.failed == 0
