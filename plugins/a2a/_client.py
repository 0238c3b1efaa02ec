"""An A2A client: discover an agent (1.0, 0.3 or 0.1 card), send, stream, get, cancel,
subscribe and poll — whichever protocol the agent speaks.

Every URL is checked against SSRF rules (after DNS) and connected to at the approved
address; requests time out after 30 s (streams: between events). HTTP 429/503 is retried
after ``Retry-After`` (bounded); any other HTTP error fails at once with the server's
message. Answers are read up to a cap (card 1 MiB, answer or SSE event
``MAX_ANSWER_BYTES``, error 64 KiB); past it the call fails naming the limit and the URL.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urljoin, urlsplit, urlunsplit

import attrs
import httpx
import trio
from roost.kernel import AddressPins, TraceContext, UrlRefused, public_url, roost_version
from roost.plugins.http.client import (
    ERROR_BODY_BYTES,
    PinnedTransport,
    ResponseTooLarge,
    http_error_text,
    http_retry_wait,
    http_status_line,
    read_body,
    read_error_body,
    remaining_s,
    retry_after_s,
    sse_events,
)

from . import _models as m

log = logging.getLogger("roost.a2a.client")

DEFAULT_TIMEOUT_S = 30.0
CARD_PATH = "/.well-known/agent-card.json"
LEGACY_CARD_PATH = "/.well-known/agent.json"
MAX_CARD_BYTES = 1_048_576
_CARD_HEADERS = {"A2A-Version": "1.0", "Accept": "application/json"}
# A JSON-RPC answer or one SSE event: a task with its files (16 MiB, base64) and history.
MAX_ANSWER_BYTES = 32 * 1024 * 1024


USER_AGENT = f"roost/{roost_version()} A2A"
# Operation → JSON-RPC method, per protocol (the server's tables, turned around).
_METHODS = {
    m.V1: {op: method for method, op in m.V1_METHODS.items()},
    m.V03: {op: method for method, op in m.V03_METHODS.items()},
    m.V01: {op: method for method, op in {**m.V03_METHODS, **m.V01_METHODS}.items()},
}


class A2AClientError(m.A2AError):
    """The remote agent could not be reached or answered something unusable.
    ``peer_status`` is the HTTP status of a refused request (None otherwise)."""

    def __init__(
        self, code: int, message: str, *, peer_status: int | None = None, data: Any = None
    ) -> None:
        super().__init__(code, message)
        self.peer_status = peer_status
        self.data = data


def _unusable(message: str) -> A2AClientError:
    """The agent answered something this client cannot use (-32006)."""
    return A2AClientError(m.INVALID_AGENT_RESPONSE, message)


def _refused(status: int, body: bytes, url: str) -> A2AClientError:
    """HTTP ``status`` >= 400 with the server's message (a JSON-RPC error's code, data kept)."""
    code, data = m.INTERNAL_ERROR, None
    try:
        value = json.loads(body[:ERROR_BODY_BYTES]) if body else None
    except (ValueError, RecursionError):
        value = None
    error = value.get("error") if isinstance(value, Mapping) else None
    if (
        isinstance(error, Mapping)
        and type(error.get("code")) is int
        and isinstance(error.get("message"), str)
    ):
        code, data = error["code"], error.get("data")
    text = http_error_text(body)
    return A2AClientError(
        code,
        f"{public_url(url)} answered {http_status_line(status)}" + (f": {text}" if text else ""),
        peer_status=status,
        data=data,
    )


@attrs.frozen
class AgentInfo:
    """What ``discover`` learned: the protocol the agent speaks and where to reach it."""

    name: str
    description: str
    version: str
    protocol: str  # "1.0", "0.3" or "0.1"
    jsonrpc_url: str | None
    rest_url: str | None
    streaming: bool
    skills: tuple[Mapping[str, Any], ...]
    card: Mapping[str, Any] = attrs.field(repr=False)


def parse_card(card: Any, card_url: str) -> AgentInfo:
    """Classify and read a 1.0, 0.3 or 0.1 agent card."""
    if not isinstance(card, Mapping):
        raise _unusable(f"the agent card at {public_url(card_url)} is not a JSON object")
    name = card.get("name")
    if not isinstance(name, str) or not name:
        raise _unusable(f"the agent card at {public_url(card_url)} has no name")
    caps = card.get("capabilities") if isinstance(card.get("capabilities"), Mapping) else {}
    skills = tuple(s for s in card.get("skills") or () if isinstance(s, Mapping))
    interfaces = card.get("supportedInterfaces")
    jsonrpc_url = rest_url = None
    if isinstance(interfaces, list) and interfaces:
        for iface in interfaces:
            if not isinstance(iface, Mapping):
                continue
            binding = str(iface.get("protocolBinding", "")).upper()
            version = str(iface.get("protocolVersion", "1.0"))
            url = iface.get("url")
            if not isinstance(url, str) or not version.startswith("1."):
                continue
            if binding == "JSONRPC" and jsonrpc_url is None:
                jsonrpc_url = url
            elif binding == "HTTP+JSON" and rest_url is None:
                rest_url = url
        protocol = m.V03 if jsonrpc_url is None and rest_url is None else m.V1
    else:
        version = str(card.get("protocolVersion") or "")
        protocol = m.V03 if version.startswith("0.3") or "preferredTransport" in card else m.V01
    if protocol != m.V1:  # a 0.3 or 0.1 card, or a 1.0 one naming no 1.x interface
        jsonrpc_url = card.get("url") if isinstance(card.get("url"), str) else None
    if jsonrpc_url is None and rest_url is None:
        raise _unusable(
            f"the agent card at {public_url(card_url)} names no endpoint "
            "(url or supportedInterfaces)"
        )
    return AgentInfo(
        name=name,
        description=str(card.get("description") or ""),
        version=str(card.get("version") or ""),
        protocol=protocol,
        jsonrpc_url=urljoin(card_url, jsonrpc_url) if jsonrpc_url else None,
        rest_url=urljoin(card_url, rest_url) if rest_url else None,
        streaming=bool(caps.get("streaming", False)),
        skills=skills,
        card=dict(card),
    )


class A2AClient:
    """Talks to remote A2A agents. Use as ``async with A2AClient() as client:``."""

    def __init__(
        self,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        headers: Mapping[str, str] | None = None,
        allow_private: bool = False,
        allow_loopback: bool = False,
        resolver: Any = None,
    ) -> None:
        self.timeout = timeout
        # Each request goes to an address the SSRF check approved for its origin: httpx
        # would look the name up again, and a rebinding name could then answer privately.
        self._pins = AddressPins(
            allow_private=allow_private, allow_loopback=allow_loopback, resolver=resolver
        )
        self._http = httpx.AsyncClient(
            transport=PinnedTransport(self._pins, transport),
            timeout=timeout,
            headers={"User-Agent": USER_AGENT, **dict(headers or {})},
            follow_redirects=False,
        )
        self._ids = 0

    async def __aenter__(self) -> A2AClient:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _check(self, url: str) -> None:
        try:
            await self._pins.addresses(url)
        except UrlRefused as exc:
            raise A2AClientError(
                m.INVALID_PARAMS, f"refusing to contact {public_url(url) or 'this URL'}: {exc}"
            ) from None

    async def discover(self, url: str) -> AgentInfo:
        """Fetch the agent card: ``url`` itself if it ends in ``.json``, else the 1.0 path,
        then the legacy ``/.well-known/agent.json``."""
        await self._check(url)  # a URL urlsplit cannot read is refused here, naming it
        parts = urlsplit(url)
        if parts.path.rstrip("/").endswith(".json"):
            candidates = [url]
        else:  # the card's path after the URL's own; its query (a key, say) stays
            base = parts.path.rstrip("/")
            candidates = [
                urlunsplit(parts._replace(path=base + path))
                for path in (CARD_PATH, LEGACY_CARD_PATH)
            ]
        last = ""
        for candidate in candidates:  # on url's origin, checked above
            status, body = await self._send_with_retries(
                "GET", candidate, MAX_CARD_BYTES, "the agent card", headers=_CARD_HEADERS
            )
            if status == 404:
                last = f"{public_url(candidate)}: 404"
                continue
            if status >= 400:
                raise _refused(status, body, candidate)
            if status != 200:
                raise _unusable(f"{public_url(candidate)} answered {http_status_line(status)}")
            try:
                card = json.loads(body)
            except (ValueError, RecursionError):
                raise _unusable(f"the agent card at {public_url(candidate)} is not JSON") from None
            return parse_card(card, candidate)
        raise _unusable(f"no agent card found ({last}); is {public_url(url)} an A2A agent?")

    async def _agent(self, agent: AgentInfo | str) -> AgentInfo:
        return agent if isinstance(agent, AgentInfo) else await self.discover(agent)

    async def _request(
        self, agent: AgentInfo, op: str, params: dict[str, Any], trace: TraceContext | None
    ) -> tuple[str, dict[str, Any], dict[str, str]]:
        """The JSON-RPC endpoint of ``agent`` (checked), and the body and headers of ``op``."""
        url = agent.jsonrpc_url
        if url is None:
            raise A2AClientError(
                m.UNSUPPORTED_OPERATION, f"agent {agent.name} offers no JSON-RPC endpoint"
            )
        await self._check(url)
        self._ids += 1
        method = _METHODS[agent.protocol][op]
        body = {"jsonrpc": "2.0", "id": self._ids, "method": method, "params": params}
        headers = {"Content-Type": "application/json"}
        if agent.protocol == m.V1:
            headers["A2A-Version"] = "1.0"
        if trace is not None:
            headers.update(trace.to_headers())
        return url, body, headers

    async def _call(
        self, agent: AgentInfo, op: str, params: dict[str, Any], trace: TraceContext | None = None
    ) -> Any:
        url, body, headers = await self._request(agent, op, params, trace)
        status, answer = await self._send_with_retries(
            "POST", url, MAX_ANSWER_BYTES, "the JSON-RPC answer", json=body, headers=headers
        )
        return _result(status, answer, url)

    async def _send_with_retries(
        self, method: str, url: str, limit: int, what: str, **kwargs: Any
    ) -> tuple[int, bytes]:
        """One request's status and body (a success's at most ``limit`` bytes, named ``what``)."""
        failed = f"cannot reach {public_url(url)}"
        async with self._response(method, url, failed, **kwargs) as (response, body):
            if response.status_code < 400:
                body = await read_body(response, limit, what=what)
            return response.status_code, body

    @asynccontextmanager
    async def _response(
        self, method: str, url: str, failed: str, **kwargs: Any
    ) -> AsyncIterator[tuple[httpx.Response, bytes]]:
        """The answer to one request, retried on HTTP 429/503 (``http_retry_wait``): a
        success open for the block to read, or an error with its first 64 KiB. Failing to
        talk to ``url`` raises ``A2AClientError`` starting with ``failed``."""
        deadline = trio.current_time() + self.timeout
        retries = 0
        while True:
            try:
                async with self._http.stream(method, url, **kwargs) as response:
                    if response.status_code < 400:
                        yield response, b""
                        return
                    body = await read_error_body(response)
            except httpx.HTTPError as exc:
                reason = f"{failed}: {type(exc).__name__}: {exc}"
                raise A2AClientError(m.INTERNAL_ERROR, reason) from None
            except ResponseTooLarge as exc:
                raise _unusable(str(exc)) from None
            status = response.status_code
            wait = http_retry_wait(
                status, retry_after_s(response.headers), retries, remaining_s(deadline)
            )
            if wait is None:
                yield response, body
                return
            retries += 1
            log.info(
                "%s answered HTTP %d; retry %d in %.1f s", public_url(url), status, retries, wait
            )
            await trio.sleep(wait)

    @staticmethod
    def _send_params(
        agent: AgentInfo,
        message: str | m.Message,
        context_id: str | None,
        task_id: str | None,
        metadata: Mapping[str, Any] | None,
        trace: TraceContext | None,
        return_immediately: bool | None,
    ) -> dict[str, Any]:
        """The params of a send in ``agent``'s protocol (``return_immediately`` None: a
        stream's); ``metadata`` and the trace join the message's."""
        if isinstance(message, str):
            message = m.Message(m.new_id(), m.ROLE_USER, (m.Part(text=message),))
        meta = {**(message.metadata or {}), **(metadata or {})}
        if trace is not None:
            meta.update(trace.to_meta())
        message = attrs.evolve(
            message,
            context_id=context_id or message.context_id,
            task_id=(task_id or message.task_id) if agent.protocol != m.V01 else None,
            metadata=meta or None,
        )
        params: dict[str, Any] = {"message": message.to_json(agent.protocol)}
        if agent.protocol == m.V01:
            params["id"] = task_id or m.new_id()
            if context_id:
                params["sessionId"] = context_id
        elif return_immediately is not None:
            if agent.protocol == m.V1:
                params["configuration"] = {"returnImmediately": return_immediately}
            else:
                params["configuration"] = {"blocking": not return_immediately}
        return params

    async def send(
        self,
        agent: AgentInfo | str,
        message: str | m.Message,
        *,
        context_id: str | None = None,
        task_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        trace: TraceContext | None = None,
        return_immediately: bool = False,
    ) -> m.Task | m.Message:
        """Send a message; returns the task (or a direct message reply)."""
        info = await self._agent(agent)
        params = self._send_params(
            info, message, context_id, task_id, metadata, trace, return_immediately
        )
        result = await self._call(info, "send", params, trace)
        if isinstance(result, Mapping):  # a direct message reply, 1.0 or 0.3
            if isinstance(result.get("message"), Mapping) and "task" not in result:
                return m.message_from_json(result["message"])
            if result.get("kind") == "message":
                return m.message_from_json(result)
        return _as_task(result)

    async def get(
        self, agent: AgentInfo | str, task_id: str, *, history_length: int | None = None
    ) -> m.Task:
        info = await self._agent(agent)
        params: dict[str, Any] = {"id": task_id}
        if history_length is not None:
            params["historyLength"] = history_length
        return _as_task(await self._call(info, "get", params))

    async def cancel(self, agent: AgentInfo | str, task_id: str) -> m.Task:
        info = await self._agent(agent)
        return _as_task(await self._call(info, "cancel", {"id": task_id}))

    async def wait(
        self,
        agent: AgentInfo | str,
        task_id: str,
        *,
        timeout: float = 300.0,
        first_delay: float = 0.2,
        max_delay: float = 5.0,
    ) -> m.Task:
        """Poll ``GetTask`` with exponential backoff until the task finishes or asks for input."""
        info = await self._agent(agent)
        delay = first_delay
        with trio.fail_after(timeout):
            while True:
                task = await self.get(info, task_id)
                if task.status.state in m.SETTLED_STATES:
                    return task
                await trio.sleep(delay)
                delay = min(delay * 2, max_delay)

    async def stream(
        self,
        agent: AgentInfo | str,
        message: str | m.Message,
        *,
        context_id: str | None = None,
        task_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        trace: TraceContext | None = None,
    ) -> AsyncIterator[m.Event]:
        """Send a message and yield the task's events as they come (SSE)."""
        info = await self._agent(agent)
        params = self._send_params(info, message, context_id, task_id, metadata, trace, None)
        async for event in self._stream(info, "stream", params, trace):
            yield event

    async def subscribe(self, agent: AgentInfo | str, task_id: str) -> AsyncIterator[m.Event]:
        """Follow a running task (it first comes as it stands, then every change)."""
        info = await self._agent(agent)
        async for event in self._stream(info, "subscribe", {"id": task_id}, None):
            yield event

    async def _stream(
        self, info: AgentInfo, op: str, params: dict[str, Any], trace: TraceContext | None
    ) -> AsyncIterator[m.Event]:
        url, body, headers = await self._request(info, op, params, trace)
        headers["Accept"] = "text/event-stream"
        failed = f"stream from {public_url(url)} failed"
        answer = self._response("POST", url, failed, json=body, headers=headers)
        async with answer as (response, error):
            if response.status_code >= 400:
                raise _refused(response.status_code, error, url)
            async for event in _events(response, url, info):
                yield event


async def _events(response: httpx.Response, url: str, info: AgentInfo) -> AsyncIterator[m.Event]:
    """The events of a streamed answer (or the result of a plain JSON answer)."""
    if "text/event-stream" not in response.headers.get("content-type", ""):
        body = await read_body(response, MAX_ANSWER_BYTES, what="the JSON-RPC answer")
        yield _event(_result(response.status_code, body, url), info)
        return
    async for event in sse_events(response, max_bytes=MAX_ANSWER_BYTES):
        if not event.data:  # an id or retry alone
            continue
        try:
            envelope = json.loads(event.data)
        except (ValueError, RecursionError):
            raise _unusable(f"{public_url(url)} sent an event that is not JSON") from None
        if isinstance(envelope, Mapping) and "error" in envelope:
            raise _rpc_error(envelope["error"])
        result = envelope.get("result", envelope) if isinstance(envelope, Mapping) else envelope
        yield _event(result, info)


def _rpc_error(error: Any) -> A2AClientError:
    if not isinstance(error, Mapping):
        return _unusable(f"malformed error: {str(error)[:200]}")
    code = error.get("code") if isinstance(error.get("code"), int) else m.INTERNAL_ERROR
    return A2AClientError(code, str(error.get("message", "error")), data=error.get("data"))


def _result(status: int, body: bytes, url: str) -> Any:
    """The ``result`` of a JSON-RPC answer (HTTP ``status`` with ``body``), or the error."""
    if status >= 400:
        raise _refused(status, body, url)
    try:
        envelope = json.loads(body)
    except (ValueError, RecursionError):
        raise _unusable(
            f"{public_url(url)} answered HTTP {status} with a body that is not JSON"
        ) from None
    if not isinstance(envelope, Mapping):
        raise _unusable(
            f"{public_url(url)} answered with a JSON {type(envelope).__name__}, not an object"
        )
    if "error" in envelope:
        raise _rpc_error(envelope["error"])
    if "result" not in envelope:
        raise _unusable(f"{public_url(url)} answered HTTP {status} without a result")
    return envelope["result"]


def _event(result: Any, info: AgentInfo) -> m.Event:
    try:
        if (
            info.protocol == m.V01
            and isinstance(result, Mapping)
            and "id" in result
            and "taskId" not in result
        ):
            if "artifact" in result:
                return m.event_from_json({"artifactUpdate": {**result, "taskId": result["id"]}})
            if "status" in result and "sessionId" not in result:
                return m.event_from_json({"statusUpdate": {**result, "taskId": result["id"]}})
        return m.event_from_json(result)
    except m.A2AError as exc:
        raise _unusable(f"the agent sent an unreadable event: {exc}") from None


def _as_task(result: Any) -> m.Task:
    if isinstance(result, Mapping) and isinstance(result.get("task"), Mapping):
        result = result["task"]
    try:
        return m.task_from_json(result)
    except m.A2AError as exc:
        raise _unusable(f"the agent answered with an unreadable task: {exc}") from None


async def discover(url: str, **client_options: Any) -> AgentInfo:
    """Fetch and read the agent card at ``url`` (1.0 path, then the legacy path)."""
    async with A2AClient(**client_options) as client:
        return await client.discover(url)


def task_text(task: m.Task | m.Message) -> str:
    """A task's artifacts as text (a file's bytes only counted), else its status message."""
    if isinstance(task, m.Message):
        return task.text()
    pieces = [p.summary() for a in task.artifacts for p in a.parts]
    if not pieces and task.status.message is not None:
        pieces = [task.status.message.text()]
    return "\n".join(pieces)
