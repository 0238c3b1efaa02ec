"""The thin async layer every HTTP provider shares, around a vendor's sans-I/O ``Wire``.

A ``Wire`` knows one vendor's format (request bodies, responses, stream events) and does
no I/O; ``HttpProvider`` sends what it builds through ``HttpClient`` and feeds it what
comes back, applying the context guard first.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, Protocol

import attrs
from roost.kernel import Completion, CompletionRequest, StreamDelta, ToolCall

from ._context import context_window_for, fit_context
from ._http import (
    HttpClient,
    ProviderResponseError,
    ProviderSettings,
    load_settings,
    model_name,
    model_parameters,
)

RESERVED_PARAMETERS = frozenset({"context_window"})
RESERVE_OUTPUT = 4096  # tokens kept free for the answer when the agent sets no max_tokens


class StreamAssembler(Protocol):
    """Turns a vendor's stream events into text deltas and, at the end, one ``Completion``."""

    def feed(self, event: Any) -> str:
        """Take one decoded event; return the text it adds (maybe ``""``)."""

    def finish(self) -> Completion:
        """The whole completion; raises ``StreamInterrupted`` if the stream was incomplete."""


class Wire(Protocol):
    """One vendor's wire format, sans I/O."""

    stream_format: str  # "sse" | "ndjson"

    def url(self, base_url: str, model: str, *, stream: bool) -> str: ...

    def body(self, request: CompletionRequest, model: str, *, stream: bool) -> dict[str, Any]: ...

    def parse(self, data: Any) -> Completion: ...

    def assembler(self) -> StreamAssembler: ...


def parse_arguments(raw: Any, tool: str, provider: str) -> dict[str, Any]:
    """A tool call's arguments as an object: JSON text is decoded, ``""`` is ``{}``.

    Arguments that are not a JSON object raise a ``ProviderResponseError`` naming the tool.
    """
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}
    value = raw
    if isinstance(raw, str):
        try:
            value = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ProviderResponseError(
                f"{provider}: the model called tool {tool!r} with arguments that are not valid "
                f"JSON ({exc.msg} at character {exc.pos}): {raw[:200]!r}; ask again, or use a "
                "model that supports tool calling"
            ) from None
    if not isinstance(value, Mapping):
        raise ProviderResponseError(
            f"{provider}: the model called tool {tool!r} with arguments that are "
            f"{type(value).__name__}, not a JSON object"
        )
    return dict(value)


def make_tool_call(name: str, raw: Any, provider: str, call_id: str | None = None) -> ToolCall:
    """A ``ToolCall`` from the model's raw arguments. Arguments that do not decode to a JSON
    object do not end the run: the call carries ``arguments_error`` and fails as a tool
    result, so the model can correct itself."""
    ids = {"id": call_id} if call_id else {}
    try:
        return ToolCall(name, parse_arguments(raw, name, provider), **ids)
    except ProviderResponseError as exc:
        return ToolCall(name, {}, arguments_error=str(exc), **ids)


def expect_mapping(value: Any, what: str, provider: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ProviderResponseError(
            f"{provider}: {what} is not a JSON object as the API documents; "
            f"got {type(value).__name__}"
        )
    return value


def expect_answer(value: Any, what: str, provider: str) -> Mapping[str, Any]:
    """``expect_mapping``, and a ``ProviderResponseError`` if the object is the vendor's
    ``error`` answer (the OpenAI, Gemini and Ollama shape)."""
    data = expect_mapping(value, what, provider)
    err = data.get("error")
    if err:
        message = err.get("message") if isinstance(err, Mapping) else err
        raise ProviderResponseError(f"{provider} reported an error: {message}")
    return data


def function_tools(request: CompletionRequest) -> list[dict[str, Any]]:
    """The request's tools as OpenAI-style ``function`` declarations (OpenAI, Ollama)."""
    return [
        {
            "type": "function",
            "function": {
                "name": t.name,
                "description": t.description,
                "parameters": dict(t.input_schema),
            },
        }
        for t in request.tools
    ]


def passthrough_parameters(parameters: Mapping[str, Any]) -> dict[str, Any]:
    """Agent parameters meant for the vendor (roost's own, like ``context_window``, removed)."""
    return {k: v for k, v in parameters.items() if k not in RESERVED_PARAMETERS}


class HttpProvider:
    """A ``Provider`` over HTTP: ``complete`` posts once, ``stream`` reads SSE or NDJSON."""

    def __init__(
        self,
        name: str,
        wire: Wire,
        settings: ProviderSettings,
        auth_headers: Mapping[str, str],
        *,
        model: str,
        parameters: Mapping[str, Any] | None = None,
    ) -> None:
        self.name = name
        self.wire = wire
        self.settings = settings
        self.model = model
        self.parameters = dict(parameters or {})
        self.http = HttpClient(settings, auth_headers)

    def prepare(self, request: CompletionRequest) -> tuple[CompletionRequest, str]:
        """Merge the default parameters, pick the model and apply the context guard."""
        parameters = {**self.parameters, **dict(request.parameters or {})}
        model = request.model or self.model
        request = attrs.evolve(request, parameters=parameters, model=model)
        window = context_window_for(self.name, parameters, self.settings.context_window)
        reserve = parameters.get("max_tokens") or parameters.get("max_completion_tokens")
        if not isinstance(reserve, int) or isinstance(reserve, bool):
            reserve = RESERVE_OUTPUT
        return fit_context(
            request, context_window=window, reserve_output=min(reserve, window // 4)
        ), model

    async def complete(self, request: CompletionRequest) -> Completion:
        request, model = self.prepare(request)
        url = self.wire.url(self.settings.base_url, model, stream=False)
        data = await self.http.post_json(url, self.wire.body(request, model, stream=False))
        return self.wire.parse(data)

    async def stream(self, request: CompletionRequest) -> AsyncIterator[StreamDelta]:
        request, model = self.prepare(request)
        url = self.wire.url(self.settings.base_url, model, stream=True)
        assembler = self.wire.assembler()
        body = self.wire.body(request, model, stream=True)
        async for event in self.http.stream_events(url, body, self.wire.stream_format):
            text = assembler.feed(event)
            if text:
                yield StreamDelta(text=text)
        yield StreamDelta(completion=assembler.finish())


def http_provider(
    provider: str,
    wire: Wire,
    model: Any,
    settings: Mapping[str, Any] | None,
    *,
    example: str,
    base_url: str,
    key_env: str | None,
    auth: Callable[[str | None], dict[str, str]],
    env: Mapping[str, str] | None = None,
    extra_headers: Mapping[str, str] | None = None,
) -> HttpProvider:
    """A vendor's factory: ``model.name`` (``example`` in the error without one) and
    ``[providers.<provider>]`` checked, the key read from ``key_env`` (required when there
    is one, unless ``base_url`` is overridden) and turned into headers by ``auth``."""
    name = model_name(provider, model, example)
    checked = load_settings(
        provider,
        settings,
        default_base_url=base_url,
        default_key_env=key_env,
        key_required=key_env is not None,
        env=env,
        extra_headers=extra_headers,
    )
    return HttpProvider(
        provider,
        wire,
        checked,
        auth(checked.api_key),
        model=name,
        parameters=model_parameters(model),
    )


def bearer(key: str | None) -> dict[str, str]:
    """``Authorization: Bearer <key>``, or no header without a key."""
    return {"authorization": f"Bearer {key}"} if key else {}


def sse_json(event: Any, provider: str) -> Any:
    """The JSON payload of an SSE event, or a clear error if it is not JSON."""
    try:
        return json.loads(event.data)
    except json.JSONDecodeError as exc:
        raise ProviderResponseError(
            f"{provider}: a stream event is not JSON ({exc.msg}): {event.data[:200]!r}"
        ) from None
