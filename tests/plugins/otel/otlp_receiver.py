"""A small OTLP/HTTP traces receiver on 127.0.0.1 for the tests: h11 parses each request,
``opentelemetry-proto`` decodes its ``ExportTraceServiceRequest``, and every span lands in
``spans`` as a plain dict (ids in hex, the resource's ``service.name`` beside it).

``trickle=True`` makes it a receiver that never finishes an answer: it sends the status line
and then one header byte every ``TRICKLE_S``, for as long as the client stays.
"""

from __future__ import annotations

from typing import Any

import h11
import trio
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

TRICKLE_S = 0.2
MAX_BODY = 32 * 1024 * 1024


def _value(v: Any) -> Any:
    which = v.WhichOneof("value")
    if which == "array_value":
        return [_value(x) for x in v.array_value.values]
    if which == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in v.kvlist_value.values}
    return getattr(v, which) if which else None


def _attributes(items: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in items}


class OtlpReceiver:
    """Collects exported spans; ``await nursery.start(receiver.serve)`` gives its URL."""

    def __init__(self, *, trickle: bool = False) -> None:
        self.trickle = trickle
        self.spans: list[dict[str, Any]] = []
        self.requests: list[dict[str, Any]] = []  # method, target, headers of each request
        self._changed = trio.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1/traces"

    async def serve(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        task_status.started(self.url)
        await trio.serve_listeners(self._connection, listeners)

    async def wait_for(self, predicate: Any, *, timeout: float = 20.0) -> Any:
        """Until ``predicate(self)`` is truthy (checked after each request); its value."""
        with trio.fail_after(timeout):
            while not (value := predicate(self)):
                await self._changed.wait()
            return value

    async def _connection(self, stream: trio.SocketStream) -> None:
        try:
            await self._exchange(stream)
        except (trio.BrokenResourceError, trio.ClosedResourceError, h11.RemoteProtocolError):
            pass  # the client left (or gave up on a trickled answer)

    async def _exchange(self, stream: trio.SocketStream) -> None:
        conn = h11.Connection(h11.SERVER)
        async with stream:
            while True:
                request, body = await self._read_request(conn, stream)
                if request is None:
                    return
                self._record(request, body)
                if self.trickle:
                    await self._trickle(stream)
                    return
                answer = ExportTraceServiceResponse().SerializeToString()
                headers = [
                    ("content-type", "application/x-protobuf"),
                    ("content-length", str(len(answer))),
                ]
                await stream.send_all(conn.send(h11.Response(status_code=200, headers=headers)))
                await stream.send_all(
                    conn.send(h11.Data(data=answer)) + conn.send(h11.EndOfMessage())
                )
                if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                    return
                conn.start_next_cycle()

    async def _read_request(
        self, conn: h11.Connection, stream: trio.SocketStream
    ) -> tuple[Any, bytes]:
        request, body = None, b""
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                data = await stream.receive_some(65536)
                conn.receive_data(data)  # b"" is the peer's end
                continue
            if isinstance(event, h11.Request):
                request = event
            elif isinstance(event, h11.Data):
                body += event.data
                assert len(body) <= MAX_BODY, "an OTLP request over 32 MiB"
            elif isinstance(event, h11.EndOfMessage):
                return request, body
            elif isinstance(event, (h11.ConnectionClosed, h11.PAUSED)) or event is None:
                return None, b""

    def _record(self, request: h11.Request, body: bytes) -> None:
        headers = {k.decode().lower(): v.decode() for k, v in request.headers}
        self.requests.append(
            {
                "method": request.method.decode(),
                "target": request.target.decode(),
                "headers": headers,
            }
        )
        message = ExportTraceServiceRequest()
        message.ParseFromString(body)
        for resource_spans in message.resource_spans:
            resource = _attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    self.spans.append(
                        {
                            "service": resource.get("service.name"),
                            "scope": scope_spans.scope.name,
                            "trace_id": span.trace_id.hex(),
                            "span_id": span.span_id.hex(),
                            "parent_span_id": span.parent_span_id.hex() or None,
                            "name": span.name,
                            "kind": span.kind,  # the proto's enum: 1 internal, 2 server, 3 client
                            "start": span.start_time_unix_nano,
                            "end": span.end_time_unix_nano,
                            "status": span.status.code,  # 0 unset, 1 ok, 2 error
                            "status_message": span.status.message,
                            "attributes": _attributes(span.attributes),
                            "events": [(e.name, _attributes(e.attributes)) for e in span.events],
                        }
                    )
        self._changed.set()
        self._changed = trio.Event()

    async def _trickle(self, stream: trio.SocketStream) -> None:
        await stream.send_all(b"HTTP/1.1 200 OK\r\n")
        with trio.move_on_after(120):  # the client leaves long before
            while True:
                await trio.sleep(TRICKLE_S)
                await stream.send_all(b"X")
