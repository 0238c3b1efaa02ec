"""The ``otel`` service: every finished span of the kernel, exported over OTLP/HTTP.

It follows ``TRACE:SPAN_END`` on a bounded tap subscription (a slow export makes the tap
drop and count, never the kernel wait), turns records into ``ReadableSpan``s with roost's
own ids, and exports batches in a worker thread, one at a time, each bounded by
``telemetry.timeout_s`` (then abandoned and counted as failed). Imported only when
``[telemetry]`` is enabled: this is where OpenTelemetry is loaded.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import trio
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import TraceIdRatioBased
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.util.re import parse_env_headers
from roost.kernel import (
    EventKind,
    KernelAPI,
    escape_lone_surrogates,
    redact_from_logs,
    roost_version,
)
from roost.kernel import SpanKind as RoostKind
from roost.plugins.http.client import credential_values

from . import TelemetrySettings

log = logging.getLogger("roost.otel")

BUFFER = 4096  # finished spans that may wait while an export runs (more are dropped, counted)
MAX_BATCH = 512  # spans per export request
BATCH_WAIT_S = 0.2  # after a first span, how long to gather more before exporting
EXTENSION = "roost.otel"  # kernel.extensions key of the running export's ``ExportStats``

_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_SERVER_KINDS = (RoostKind.MCP_SERVER, RoostKind.A2A_SERVER)
# roost's provider names → ``gen_ai.provider.name`` values of the semantic conventions.
_GENAI_PROVIDER = {"gemini": "gcp.gemini"}
_IN_PROCESS_PROVIDERS = ("scripted",)  # model calls that never leave the process


@attrs.define
class ExportStats:
    """What the export has done so far (spans): ``kernel.extensions["roost.otel"]``."""

    exported: int = 0
    failed: int = 0  # handed to the exporter, which reported failure or timed out
    dropped: int = 0  # never handed over: the tap's buffer was full
    sampled_out: int = 0  # left out by the caller's traceparent flags or ``telemetry.sampling``
    batches: int = 0  # export calls that returned (either way)


def exporter_for(settings: TelemetrySettings) -> SpanExporter:
    """The OTLP/HTTP (protobuf) exporter ``[telemetry]`` describes."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    # The exporter also sends OTEL_EXPORTER_OTLP_[TRACES_]HEADERS (a key kept out of roost.toml).
    headers = dict(settings.headers) if settings.headers else None
    redact_from_logs(credential_values(settings.headers, settings.endpoint))
    for variable in ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS"):
        redact_from_logs(
            credential_values(parse_env_headers(os.environ.get(variable, ""), liberal=True))
        )
    return OTLPSpanExporter(endpoint=settings.endpoint, headers=headers, timeout=settings.timeout_s)


class SpanExport:
    """``run(kernel, task_status=...)`` exports ``kernel``'s spans to ``exporter`` (by default
    the OTLP/HTTP one of ``settings``) until cancelled."""

    def __init__(self, settings: TelemetrySettings, exporter: SpanExporter | None = None) -> None:
        self.settings = settings
        self.exporter = exporter if exporter is not None else exporter_for(settings)
        self.stats = ExportStats()
        self._translate = Translator(settings.service_name)
        self._sampler = TraceIdRatioBased(settings.sampling)
        # One export at a time: an export abandoned at its deadline holds this until its
        # thread ends, so the next waits for it (at most until its own deadline).
        self._one_export = trio.CapacityLimiter(1)

    async def run(self, kernel: KernelAPI, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        kernel.extensions[EXTENSION] = self.stats
        async with kernel.tap.subscribe(buffer=BUFFER, kinds=(EventKind.TRACE_SPAN_END,)) as events:
            task_status.started()
            try:
                async for event in events:
                    records = self._take(event, [])
                    with trio.move_on_after(BATCH_WAIT_S):
                        while len(records) < MAX_BATCH:
                            self._take(await events.receive(), records)
                    await self._export(records, trio.current_time() + self.settings.timeout_s)
            finally:
                deadline = trio.current_time() + self.settings.timeout_s
                # The flush bounds its waits by ``deadline``; the scope's later one is a backstop
                # (Trio cancels the outermost scope, which would skip the flush's accounting).
                with trio.CancelScope(shield=True, deadline=deadline + 1.0):
                    await self._flush(events, deadline)
                # Not in a thread: it only sets flags and closes idle connections, and must run
                # even when the flush used all of the time (a running export ends by itself).
                self.exporter.shutdown()

    def _take(self, event: Any, records: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        if event.kind == EventKind.TAP_DROPPED:
            lost = event.payload.get("dropped", 0)
            self.stats.dropped += lost
            log.warning("telemetry: %d spans dropped: the exporter is slower than the kernel", lost)
            return records
        record = event.payload
        trace = event.trace
        try:
            # Left out by the caller (its traceparent's flags), else by the ratio.
            sampled = (trace is None or trace.sampled) and self._sampler.should_sample(
                None, int(record["trace_id"], 16), record["name"]
            ).decision.is_sampled()
        except (KeyError, TypeError, ValueError):
            sampled = False  # not a span record
        if sampled:
            records.append(record)
        else:
            self.stats.sampled_out += 1
        return records

    async def _export(self, records: Sequence[Mapping[str, Any]], deadline: float) -> None:
        if not records:
            return
        done = None
        with trio.move_on_at(deadline):
            done = await trio.to_thread.run_sync(
                self._export_now, records, abandon_on_cancel=True, limiter=self._one_export
            )
        if done is None:  # timed out (or a previous export still holds the exporter)
            self.stats.failed += len(records)
            log.warning(
                "telemetry: an export of %d spans to %s did not end within %g s",
                len(records),
                self.settings.endpoint or type(self.exporter).__name__,
                self.settings.timeout_s,
            )
            return
        result, count = done
        self.stats.batches += 1
        if result is SpanExportResult.SUCCESS:
            self.stats.exported += count
        else:
            self.stats.failed += count
            log.warning("telemetry: exporting %d spans to %s failed", count, self.settings.endpoint)

    def _export_now(self, records: Sequence[Mapping[str, Any]]) -> tuple[SpanExportResult, int]:
        """In the worker thread: translate and export; (the exporter's result, spans)."""
        spans = []
        for record in records:
            try:
                spans.append(self._translate(record))
            except Exception:  # a record the kernel would never publish; keep the rest
                log.exception("telemetry: span record not exported: %r", record)
        return self.exporter.export(spans), len(spans)

    async def _flush(self, events: trio.MemoryReceiveChannel[Any], deadline: float) -> None:
        """Export the spans that have ended, by ``deadline``."""
        records: list[Mapping[str, Any]] = []
        with contextlib.suppress(trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
            while True:
                self._take(events.receive_nowait(), records)
        for start in range(0, len(records), MAX_BATCH):
            await self._export(records[start : start + MAX_BATCH], deadline)


class Translator:
    """A span record of the kernel (``TRACE:SPAN_END``'s payload) → a ``ReadableSpan``."""

    def __init__(self, service_name: str) -> None:
        version = roost_version()
        self.resource = Resource.create({"service.name": service_name, "service.version": version})
        self.scope = InstrumentationScope("roost", version)

    def __call__(self, record: Mapping[str, Any]) -> ReadableSpan:
        trace_id = int(record["trace_id"], 16)
        kind = record["kind"]
        attributes = record.get("attributes") or {}
        parent = None
        if record.get("parent_span_id"):
            # A server hop's parent is the caller's span, in another process.
            parent = SpanContext(
                trace_id, int(record["parent_span_id"], 16), kind in _SERVER_KINDS, _SAMPLED
            )
        error = record.get("error")
        status = Status(StatusCode.UNSET)  # OK is for an operator to say, not instrumentation
        if record.get("status") == "error":
            status = Status(StatusCode.ERROR, escape_lone_surrogates(str(error or "error")))
        name, otel_kind, semconv = _convention(kind, str(record.get("name", kind)), attributes)
        name = escape_lone_surrogates(name)
        values = {f"roost.{k}": v for k, v in attributes.items()}
        values["roost.kind"] = kind
        values.update(semconv)
        if status.status_code is StatusCode.ERROR:
            values["error.type"] = "cancelled" if error == "cancelled" else "_OTHER"
        events = [_mark_event(mark) for mark in record.get("marks") or ()]
        return ReadableSpan(
            name=name,
            context=SpanContext(trace_id, int(record["span_id"], 16), False, _SAMPLED),
            parent=parent,
            resource=self.resource,
            attributes=_attributes(values),
            events=events,
            kind=otel_kind,
            status=status,
            start_time=_nanos(record["start"]),
            end_time=_nanos(record["end"]),
            instrumentation_scope=self.scope,
        )


def _convention(kind: str, name: str, a: Mapping[str, Any]) -> tuple[str, SpanKind, dict[str, Any]]:
    """A span's OpenTelemetry name, kind and semantic-convention attributes (GenAI for agents,
    model and tool calls; MCP for ``tools/call`` served and sent)."""
    out: dict[str, Any] = {}
    if kind == RoostKind.MODEL:
        model = a.get("model") or ""
        out["gen_ai.operation.name"] = "chat"
        _genai_model(out, a)
        if a.get("stop_reason"):
            out["gen_ai.response.finish_reasons"] = [str(a["stop_reason"])]
        # A call to a model is a client hop, unless the model runs in this process.
        local = a.get("provider") in _IN_PROCESS_PROVIDERS
        return f"chat {model}".strip(), SpanKind.INTERNAL if local else SpanKind.CLIENT, out
    if kind == RoostKind.AGENT:
        out["gen_ai.operation.name"] = "invoke_agent"
        out["gen_ai.agent.name"] = a.get("agent") or name
        if a.get("session_id"):
            out["gen_ai.conversation.id"] = a["session_id"]
        _genai_model(out, a)
        return f"invoke_agent {out['gen_ai.agent.name']}", SpanKind.INTERNAL, out
    if kind == RoostKind.TOOL:
        out["gen_ai.operation.name"] = "execute_tool"
        out["gen_ai.tool.name"] = name
        if a.get("call_id"):
            out["gen_ai.tool.call.id"] = a["call_id"]
        if not a.get("peer"):
            return f"execute_tool {name}", SpanKind.INTERNAL, out
        if a.get("peer_url"):
            out["url.full"] = a["peer_url"]
        if a["peer"] == "mcp":
            out["mcp.method.name"] = "tools/call"
            return f"tools/call {a.get('peer_tool') or name}", SpanKind.CLIENT, out
        return f"execute_tool {name}", SpanKind.CLIENT, out
    if kind == RoostKind.MCP_SERVER:
        out["mcp.method.name"] = "tools/call"
        if a.get("tool"):
            out["gen_ai.tool.name"] = a["tool"]
        return name, SpanKind.SERVER, out
    if kind == RoostKind.A2A_SERVER:
        return name, SpanKind.SERVER, out
    return name, SpanKind.INTERNAL, out


def _genai_model(out: dict[str, Any], a: Mapping[str, Any]) -> None:
    if provider := a.get("provider"):
        out["gen_ai.provider.name"] = _GENAI_PROVIDER.get(provider, provider)
        out["gen_ai.system"] = out["gen_ai.provider.name"]  # its name before semconv 1.37
    if a.get("model"):
        out["gen_ai.request.model"] = a["model"]
    for key in ("input_tokens", "output_tokens"):
        if isinstance(a.get(key), int):
            out[f"gen_ai.usage.{key}"] = a[key]


def _mark_event(mark: Mapping[str, Any]) -> Event:
    """A mark (breaker, taint, loop_guard) → the span event ``roost.<kind>``."""
    fields = {f"roost.{k}": v for k, v in mark.items() if k not in ("kind", "ts")}
    ts = mark.get("ts")
    return Event(
        f"roost.{mark.get('kind', 'mark')}",
        _attributes(fields),
        _nanos(ts) if isinstance(ts, (int, float)) else None,
    )


def _nanos(seconds: float) -> int:
    return int(seconds * 1_000_000_000)


def _attributes(values: Mapping[str, Any]) -> dict[str, Any]:
    """OpenTelemetry attribute values: None left out, a list of one scalar type a tuple,
    anything else JSON text; lone surrogates escaped (protobuf would refuse the batch)."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        if value is None:
            continue
        if isinstance(value, str):
            out[key] = escape_lone_surrogates(value)
        elif isinstance(value, (bool, int, float)):
            out[key] = value
        elif (
            isinstance(value, (list, tuple))
            and value
            and all(isinstance(v, (str, bool, int, float)) for v in value)
            and len({type(v) for v in value}) == 1
        ):
            out[key] = tuple(escape_lone_surrogates(v) if isinstance(v, str) else v for v in value)
        else:
            out[key] = escape_lone_surrogates(json.dumps(value, default=str, ensure_ascii=False))
    return out
