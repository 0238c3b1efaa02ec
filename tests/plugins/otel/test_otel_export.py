"""The ``otel`` service on one daemon, exported to the SDK's in-memory exporter: a bundled
coordinator → worker → reviewer run is one OpenTelemetry trace with roost's ids and parent
links, model calls carry the GenAI attributes, and a refused hop is an error with a mark."""

from __future__ import annotations

import logging
import threading

import trio
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from roost.kernel import RedactingFormatter, default_config, open_kernel
from roost.plugins.otel import TelemetrySettings
from roost.plugins.otel import _export as otel_export
from roost.plugins.otel._export import SpanExport, Translator, exporter_for
from waiting import wait_until


def hexid(value: int, digits: int = 16) -> str:
    return f"{value:0{digits}x}"


def by_id(spans) -> dict[str, object]:
    return {hexid(s.context.span_id): s for s in spans}


def parent_of(span) -> str | None:
    return None if span.parent is None else hexid(span.parent.span_id)


async def export_run(tmp_path, message: str, settings=None):
    """``message`` to the bundled coordinator with the export running; (reply, spans)."""
    exporter = InMemorySpanExporter()
    export = SpanExport(settings or TelemetrySettings(enabled=True), exporter)
    async with open_kernel(default_config(home=str(tmp_path / "home"))) as kernel:
        async with trio.open_nursery() as nursery:
            await nursery.start(export.run, kernel)
            reply = await kernel.send("coordinator", message)

            def root_exported():
                return [
                    s
                    for s in exporter.get_finished_spans()
                    if s.parent is None and hexid(s.context.trace_id, 32) == reply.trace_id
                ]

            def accounted():  # the exporter has the spans before the export's count does
                return export.stats.exported == len(exporter.get_finished_spans())

            await wait_until(root_exported, "the coordinator's run exported")
            await wait_until(accounted, "the export counted")
            nursery.cancel_scope.cancel()
    return reply, export, exporter.get_finished_spans()


async def test_a_run_across_three_agents_is_one_trace_with_its_parent_links(tmp_path):
    reply, export, spans = await export_run(tmp_path, "Write a haiku")
    assert not reply.is_error
    assert {hexid(s.context.trace_id, 32) for s in spans} == {reply.trace_id}
    spans_by_id = by_id(spans)
    # every span but the root hangs off one exported here
    (root,) = [s for s in spans if s.parent is None]
    assert all(parent_of(s) in spans_by_id for s in spans if s is not root)

    def only(name):
        (span,) = [s for s in spans if s.name == name]
        return span

    coordinator = only("invoke_agent coordinator")
    ask_worker = only("execute_tool agent_worker")
    worker = only("invoke_agent worker")
    ask_reviewer = only("execute_tool agent_reviewer")
    reviewer = only("invoke_agent reviewer")
    assert coordinator is root
    assert parent_of(ask_worker) == hexid(coordinator.context.span_id)
    assert parent_of(worker) == hexid(ask_worker.context.span_id)
    assert parent_of(ask_reviewer) == hexid(worker.context.span_id)
    assert parent_of(reviewer) == hexid(ask_reviewer.context.span_id)
    for span in (coordinator, worker, reviewer, ask_worker, ask_reviewer):
        assert span.kind is SpanKind.INTERNAL  # in-host, not a hop to a peer
        assert span.status.status_code is StatusCode.UNSET
        assert span.start_time <= span.end_time
    assert (
        coordinator.start_time
        <= ask_worker.start_time
        <= ask_worker.end_time
        <= coordinator.end_time
    )
    assert coordinator.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert coordinator.attributes["gen_ai.agent.name"] == "coordinator"
    assert coordinator.attributes["gen_ai.conversation.id"] == reply.session_id
    assert ask_worker.attributes["gen_ai.tool.name"] == "agent_worker"
    assert ask_worker.attributes["roost.outcome"] == "ok"
    assert coordinator.resource.attributes["service.name"] == "roost"
    assert coordinator.instrumentation_scope.name == "roost"

    models = [s for s in spans if s.attributes.get("roost.kind") == "model"]
    assert {parent_of(m) for m in models} == {
        hexid(a.context.span_id) for a in (coordinator, worker, reviewer)
    }
    for model in models:
        a = model.attributes
        assert a["gen_ai.operation.name"] == "chat" and model.name == "chat rules"
        assert (a["gen_ai.provider.name"], a["gen_ai.system"], a["gen_ai.request.model"]) == (
            "scripted",
            "scripted",
            "rules",
        )
        assert (a["gen_ai.usage.input_tokens"], a["gen_ai.usage.output_tokens"]) == (
            a["roost.input_tokens"],
            a["roost.output_tokens"],
        )
        assert a["gen_ai.response.finish_reasons"] == (a["roost.stop_reason"],)
        assert model.kind is SpanKind.INTERNAL  # the scripted model runs in this process
    assert sum(m.attributes["gen_ai.usage.input_tokens"] for m in models) > 0
    assert export.stats.exported == len(spans) and not export.stats.failed


async def test_a_hop_the_breaker_refuses_is_an_error_span_with_a_breaker_event(tmp_path):
    reply, _, spans = await export_run(tmp_path, "runaway")
    assert "would reach depth 6" in reply.text
    (refused,) = [s for s in spans if s.status.status_code is StatusCode.ERROR]
    assert refused.name == "execute_tool agent_reviewer"
    assert "would reach depth 6" in refused.status.description
    assert refused.attributes["error.type"] == "_OTHER"
    assert refused.attributes["roost.outcome"] == "denied"
    (event,) = refused.events
    assert event.name == "roost.breaker"
    assert (event.attributes["roost.depth"], event.attributes["roost.max_depth"]) == (6, 5)
    assert event.attributes["roost.path"][-1] == "reviewer"
    assert refused.start_time <= event.timestamp <= refused.end_time


async def test_sampling_zero_exports_no_span_and_counts_them(tmp_path):
    exporter = InMemorySpanExporter()
    export = SpanExport(TelemetrySettings(enabled=True, sampling=0.0), exporter)
    async with open_kernel(default_config(home=str(tmp_path / "home"))) as kernel:
        async with trio.open_nursery() as nursery:
            await nursery.start(export.run, kernel)
            async with kernel.tap.subscribe(kinds=("TRACE:SPAN_END",)) as ends:
                await kernel.send("coordinator", "Write a haiku")
                ended = 0
                while True:
                    try:
                        ends.receive_nowait()
                        ended += 1
                    except trio.WouldBlock:
                        break
            await wait_until(lambda: export.stats.sampled_out >= ended, "every span sampled out")
            nursery.cancel_scope.cancel()
    assert ended > 5 and exporter.get_finished_spans() == ()
    assert export.stats.exported == 0


def test_sampling_decides_by_trace_id_alone_so_daemons_agree():
    # Two daemons with the same ratio keep or drop the same traces, whatever the span.
    a = SpanExport(TelemetrySettings(enabled=True, sampling=0.5), InMemorySpanExporter())
    b = SpanExport(TelemetrySettings(enabled=True, sampling=0.5), InMemorySpanExporter())

    class End:
        kind = "TRACE:SPAN_END"
        trace = None

        def __init__(self, trace_id, name):
            self.payload = {"trace_id": trace_id, "name": name}

    kept_a, kept_b = [], []
    for i in range(400):
        trace_id = f"{i * 0x9E3779B97F4A7C15 % (1 << 128):032x}"
        a._take(End(trace_id, "invoke_agent a"), kept_a)
        b._take(End(trace_id, "tools/call message"), kept_b)
    assert [r["trace_id"] for r in kept_a] == [r["trace_id"] for r in kept_b]
    assert 120 < len(kept_a) < 280


def record(kind, name, attributes, **more):
    base = {
        "trace_id": "6a1b2c3d" + "0" * 23 + "1",
        "span_id": "00000000000000a1",
        "parent_span_id": "00000000000000b2",
        "kind": kind,
        "name": name,
        "start": 1_700_000_000.0,
        "end": 1_700_000_000.5,
        "duration_ms": 500.0,
        "status": "ok",
        "error": None,
        "attributes": attributes,
        "marks": [],
    }
    return {**base, **more}


def test_span_kinds_follow_where_the_work_goes():
    translate = Translator("svc")
    model = translate(
        record(
            "model",
            "gemini gemini-2.5-flash",
            {
                "provider": "gemini",
                "model": "gemini-2.5-flash",
                "input_tokens": 3,
                "output_tokens": 4,
            },
        )
    )
    assert model.kind is SpanKind.CLIENT and model.name == "chat gemini-2.5-flash"
    assert model.attributes["gen_ai.provider.name"] == "gcp.gemini"
    mcp_hop = translate(
        record(
            "tool",
            "mcp_b_message",
            {
                "peer": "mcp",
                "peer_name": "b",
                "peer_tool": "message",
                "peer_url": "http://127.0.0.1:1/mcp",
            },
        )
    )
    assert mcp_hop.kind is SpanKind.CLIENT and mcp_hop.name == "tools/call message"
    assert (mcp_hop.attributes["mcp.method.name"], mcp_hop.attributes["url.full"]) == (
        "tools/call",
        "http://127.0.0.1:1/mcp",
    )
    served = translate(
        record("mcp.server", "tools/call message", {"tool": "message", "principal": "local"})
    )
    assert served.kind is SpanKind.SERVER and served.parent.is_remote
    assert served.attributes["gen_ai.tool.name"] == "message"
    a2a = translate(record("a2a.server", "A2A b1", {"task_id": "t", "state": "completed"}))
    assert a2a.kind is SpanKind.SERVER and a2a.attributes["roost.state"] == "completed"
    # values OpenTelemetry cannot carry as they are: a table becomes JSON, None is left out
    odd = translate(record("tool", "x", {"table": {"a": 1}, "none": None, "mixed": [1, "a"]}))
    assert odd.attributes["roost.table"] == '{"a": 1}' and "roost.none" not in odd.attributes
    assert odd.attributes["roost.mixed"] == '[1, "a"]'
    cancelled = translate(record("agent", "a", {"agent": "a"}, status="error", error="cancelled"))
    assert cancelled.status.status_code is StatusCode.ERROR
    assert cancelled.attributes["error.type"] == "cancelled"
    assert (cancelled.start_time, cancelled.end_time) == (
        1_700_000_000_000_000_000,
        1_700_000_000_500_000_000,
    )


class BlockedExporter(InMemorySpanExporter):
    """An exporter whose exports wait until ``release`` is set (at most 20 s)."""

    def __init__(self):
        super().__init__()
        self.release = threading.Event()
        self.waiting = threading.Event()

    def export(self, spans):
        self.waiting.set()
        self.release.wait(20)
        return super().export(spans)


async def test_a_stuck_exporter_never_holds_the_kernel_and_what_overflows_is_counted(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(otel_export, "BUFFER", 4)
    exporter = BlockedExporter()
    export = SpanExport(TelemetrySettings(enabled=True, timeout_s=30), exporter)
    async with open_kernel(default_config(home=str(tmp_path / "home"))) as kernel:
        async with kernel.tap.subscribe(buffer=1000, kinds=("TRACE:SPAN_END",)) as all_ends:
            async with trio.open_nursery() as nursery:
                await nursery.start(export.run, kernel)
                await kernel.send("coordinator", "Write a haiku")
                await wait_until(exporter.waiting.is_set, "an export under way")
                # While it hangs, runs go on at full speed; their spans overflow the buffer.
                with trio.fail_after(10):
                    for _ in range(3):
                        assert not (await kernel.send("coordinator", "Write a haiku")).is_error
                exporter.release.set()
                # the next span to reach the export brings the count of those lost
                await kernel.send("coordinator", "Write a haiku")
                await wait_until(lambda: export.stats.dropped > 0, "the overflow counted")
                nursery.cancel_scope.cancel()
            ended = len([e async for e in _drain(all_ends)])
    assert ended > 40  # four runs of the three agents
    exported = len(exporter.get_finished_spans())
    assert 0 < exported == export.stats.exported
    assert exported + export.stats.dropped <= ended and not export.stats.failed


async def _drain(channel):
    while True:
        try:
            yield channel.receive_nowait()
        except trio.WouldBlock:
            return


class CountingExporter(BlockedExporter):
    """A ``BlockedExporter`` that records how many of its exports ever ran at once."""

    def __init__(self):
        super().__init__()
        self._lock = threading.Lock()
        self.running = self.most_at_once = self.calls = 0

    def export(self, spans):
        with self._lock:
            self.calls += 1
            self.running += 1
            self.most_at_once = max(self.most_at_once, self.running)
        try:
            return super().export(spans)
        finally:
            with self._lock:
                self.running -= 1


async def test_an_abandoned_export_keeps_the_next_waiting_never_beside_it(tmp_path):
    # Each export is abandoned at timeout_s; the exporter is not thread-safe, so the next one
    # must wait for the abandoned one to end (and fail at its own deadline if it does not),
    # and the flush at shutdown must not wait past its deadline either.
    exporter = CountingExporter()
    export = SpanExport(TelemetrySettings(enabled=True, timeout_s=0.5), exporter)
    async with open_kernel(default_config(home=str(tmp_path / "home"))) as kernel:
        async with trio.open_nursery() as nursery:
            await nursery.start(export.run, kernel)
            await kernel.send("coordinator", "Write a haiku")
            await wait_until(exporter.waiting.is_set, "an export under way")
            await wait_until(lambda: export.stats.failed > 0, "the stuck export abandoned")
            await kernel.send("coordinator", "Write a haiku")
            failed = export.stats.failed
            await wait_until(lambda: export.stats.failed > failed, "the next one given up too")
            assert exporter.calls == 1  # the next never reached the exporter
            exporter.release.set()
            await kernel.send("coordinator", "Write a haiku")
            await wait_until(lambda: export.stats.exported > 0, "exports resumed")
            exporter.release.clear()
            exporter.waiting.clear()
            await kernel.send("coordinator", "Write a haiku")
            await wait_until(exporter.waiting.is_set, "another export stuck")
            stopping = trio.current_time()
            nursery.cancel_scope.cancel()
        took = trio.current_time() - stopping  # the flush gives up at its deadline
        exporter.release.set()
    assert took < 0.5 + 1.0, f"the shutdown waited {took:.2f} s for a stuck export"
    assert exporter.most_at_once == 1
    assert export.stats.batches >= 1 and export.stats.failed > failed


def test_the_exporters_credentials_are_kept_out_of_the_daemons_log():
    # The OTLP collector's key, quoted by the SDK's or roost's own log line, is redacted.
    url = "http://127.0.0.1:4318/v1/traces?api_key=otlp-query-456"
    table = {"endpoint": url, "headers": {"Authorization": "Bearer otlp-secret-123"}}
    exporter_for(TelemetrySettings.from_config(table))  # what the service builds at start
    said = ("401 for otlp-secret-123 at " + url,)
    record = logging.LogRecord("opentelemetry", logging.WARNING, __file__, 1, "%s", said, None)
    line = RedactingFormatter().format(record)
    assert "otlp-secret" not in line and "otlp-query" not in line
    assert line == "401 for [redacted] at http://127.0.0.1:4318/v1/traces?api_key=[redacted]"


def test_the_exporters_credentials_from_the_environment_are_kept_out_of_the_log(monkeypatch):
    # Regression: only [telemetry] headers were handed to redact_from_logs, while the README
    # recommends $OTEL_EXPORTER_OTLP_HEADERS to keep the key out of roost.toml, and the
    # exporter sends those headers (URL-encoded there) with every export.
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "Authorization=Bearer%20otlp-env-secret-789")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "x-api-key=otlp-traces-key-012")
    exporter_for(TelemetrySettings.from_config({"endpoint": "http://127.0.0.1:4318/v1/traces"}))
    said = ("401: bad key otlp-env-secret-789 / otlp-traces-key-012",)
    record = logging.LogRecord("opentelemetry", logging.WARNING, __file__, 1, "%s", said, None)
    assert RedactingFormatter().format(record) == "401: bad key [redacted] / [redacted]"
