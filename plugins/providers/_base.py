"""The thin async layer every HTTP provider shares, around a vendor's sans-I/O ``Wire``.

A ``Wire`` knows one vendor's format (request bodies, responses, stream events) and does
no I/O; ``HttpProvider`` sends what it builds through ``HttpClient`` and feeds it what
comes back, with the provider's settings (its name and secrets, for errors that quote the
vendor: ``ProviderSettings.excerpt``), applying the context guard first. A ``Vendor``
(wire, defaults, key) gives a vendor module its factory and its plugin hooks.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any, Protocol

import attrs
from roost.kernel import (
    Completion,
    CompletionRequest,
    ProviderDescriptor,
    StreamDelta,
    ToolCall,
    Usage,
    hookimpl,
    number_setting,
    redact_from_logs,
)

from ._http import (
    HttpClient,
    ProviderConfigError,
    ProviderResponseError,
    ProviderSettings,
    StreamInterrupted,
    check_config_providers,
    check_settings,
)

RESERVED_PARAMETERS = frozenset({"context_window"})
RESERVE_OUTPUT = 4096  # tokens kept free for the answer when the agent sets no max_tokens
MAX_QUOTED_ERROR = 1000  # characters of an error the vendor reported inside an answer


class Wire(Protocol):
    """One vendor's wire format, sans I/O: request bodies, responses, stream events."""

    stream_format: str  # "sse" | "ndjson"

    def url(self, base_url: str, model: str, *, stream: bool) -> str: ...

    def body(self, request: CompletionRequest, model: str, *, stream: bool) -> dict[str, Any]: ...

    def parse(self, data: Any, settings: ProviderSettings) -> Completion: ...

    def assembler(self, settings: ProviderSettings) -> Assembler: ...


@attrs.frozen
class PathWire:
    """A ``Wire`` without state: the request goes to ``path`` under the base URL."""

    path: str
    stream_format: str
    body: Callable[..., dict[str, Any]]
    parse: Callable[[Any, ProviderSettings], Completion]
    assembler: Callable[[ProviderSettings], Assembler]

    def url(self, base_url: str, model: str, *, stream: bool) -> str:
        return base_url + self.path


def completion(
    text: str, calls: Sequence[ToolCall], stop: str | None, usage: Usage, stops: Mapping[str, str]
) -> Completion:
    """A ``Completion``: ``tool_use`` when there are calls, else the vendor's ``stop`` mapped."""
    reason = "tool_use" if calls else stops.get(stop or "", "end_turn")
    return Completion(text, tuple(calls), reason, usage)


class Assembler:
    """Turns a vendor's stream events into text deltas (``feed``) and, at the end, one
    ``Completion`` (``finish``); a stream that ends before ``done`` is ``StreamInterrupted``."""

    end = ""  # what a complete stream ends with, for the error
    stops: Mapping[str, str] = {}

    def __init__(self, settings: ProviderSettings) -> None:
        self.settings = settings
        self.provider = settings.provider
        self.text: list[str] = []
        self.calls: list[ToolCall] = []
        self.stop: str | None = None
        self.usage = Usage()
        self.done = False

    def feed(self, event: Any) -> str:
        raise NotImplementedError

    def add(self, piece: str) -> str:
        if piece:
            self.text.append(piece)
        return piece

    def tool_calls(self) -> list[ToolCall]:
        return self.calls

    def finish(self) -> Completion:
        if not self.done:
            raise StreamInterrupted(
                f"{self.provider}: the stream ended before {self.end}; try again"
            )
        return completion("".join(self.text), self.tool_calls(), self.stop, self.usage, self.stops)


def parse_arguments(raw: Any, tool: str, settings: ProviderSettings) -> dict[str, Any]:
    """A tool call's arguments as an object (JSON text decoded, ``""`` is ``{}``); anything
    else raises a ``ProviderResponseError`` naming the tool."""
    provider = settings.provider
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}
    value = raw
    if isinstance(raw, str):
        try:
            value = json.loads(raw)
        except (ValueError, RecursionError) as exc:
            raise ProviderResponseError(
                f"{provider}: the model called tool {tool!r} with arguments that are not valid "
                f"JSON ({_json_problem(exc)}): {settings.excerpt(raw)!r}; ask again, or use a "
                "model that supports tool calling"
            ) from None
    if not isinstance(value, Mapping):
        raise ProviderResponseError(
            f"{provider}: the model called tool {tool!r} with arguments that are "
            f"{type(value).__name__}, not a JSON object"
        )
    return dict(value)


def make_tool_call(
    name: Any, raw: Any, settings: ProviderSettings, call_id: str | None = None
) -> ToolCall:
    """A ``ToolCall`` (a None name is ``""``); bad arguments set ``arguments_error``, so the
    call fails as a tool result the model can correct instead of ending the run."""
    name = str(name or "")
    ids = {"id": call_id} if call_id else {}
    try:
        return ToolCall(name, parse_arguments(raw, name, settings), **ids)
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
    """``expect_mapping``, refusing a vendor's ``error`` answer (OpenAI, Gemini, Ollama shape)."""
    data = expect_mapping(value, what, provider)
    if err := data.get("error"):
        message = err.get("message") if isinstance(err, Mapping) else err
        raise ProviderResponseError(f"{provider} reported an error: {message}")
    return data


def member(data: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    """``data[key]`` when it is a JSON object, else ``{}`` (an optional part, read leniently)."""
    value = data.get(key)
    return value if isinstance(value, Mapping) else {}


def add_turn(turns: list[dict[str, Any]], role: str, items: list[Any], key: str) -> None:
    """``items`` added to the last turn if it is ``role``'s (the APIs alternate), else a new one."""
    if turns and turns[-1]["role"] == role:
        turns[-1][key].extend(items)
    else:
        turns.append({"role": role, key: list(items)})


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


# ---- the context guard: keep a conversation inside the model's window ------------------

# Per-vendor defaults (tokens) when neither the agent nor roost.toml says otherwise.
DEFAULT_CONTEXT_WINDOWS = {
    "openai": 128_000,
    "openrouter": 128_000,
    "anthropic": 200_000,
    "gemini": 1_000_000,
    "ollama": 8_192,
}
CHARS_PER_TOKEN = 4  # a deliberately rough estimate; the margin below absorbs its error
SAFETY_MARGIN = 0.9
KEEP_HEAD_CHARS = 400
MARKER_PREFIX = "[tool output shortened by roost"
MARKER = MARKER_PREFIX + " to fit the context window: {removed} characters removed]"


def estimate_tokens(text: str) -> int:
    return (len(text) + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN


def request_tokens(request: CompletionRequest) -> int:
    """A rough token count of everything sent: system, messages, tool schemas."""
    total = estimate_tokens(request.system)
    for m in request.messages:
        total += 4 + estimate_tokens(m.content)
        for call in m.tool_calls:
            arguments = json.dumps(dict(call.arguments), default=str)
            total += estimate_tokens(call.name) + estimate_tokens(arguments)
    for spec in request.tools:
        schema = json.dumps(dict(spec.input_schema), default=str)
        total += estimate_tokens(spec.name + spec.description) + estimate_tokens(schema)
    return total


def context_window_for(provider: str, parameters: dict[str, Any], configured: int | None) -> int:
    """``parameters.context_window`` (agent) → ``context_window`` (roost.toml) → vendor default."""
    agent = number_setting(parameters.get("context_window"), integer=True)
    return agent or configured or DEFAULT_CONTEXT_WINDOWS.get(provider, 32_000)


def fit_context(
    request: CompletionRequest, *, context_window: int, reserve_output: int = 0
) -> CompletionRequest:
    """``request`` with its oldest tool outputs shortened first (head kept, marked) until it
    fits ``context_window * 0.9 - reserve_output`` estimated tokens; the newest tool output and
    every user and assistant message stay whole as long as possible. If it still does not fit,
    it comes back as short as it gets, and the vendor says the context is too long."""
    budget = int(context_window * SAFETY_MARGIN) - max(0, reserve_output)
    over = request_tokens(request) - budget
    if over <= 0:
        return request
    messages = list(request.messages)
    tool_indexes = [i for i, m in enumerate(messages) if m.role == "tool"]
    # Oldest first; the newest tool output is shortened last.
    for i in tool_indexes:
        if over <= 0:
            break
        shortened = shorten(messages[i].content, over * CHARS_PER_TOKEN)
        saved = estimate_tokens(messages[i].content) - estimate_tokens(shortened)
        if saved > 0:
            messages[i] = attrs.evolve(messages[i], content=shortened)
            over -= saved
    return attrs.evolve(request, messages=tuple(messages))


def shorten(text: str, remove_at_least: int) -> str:
    """``text`` cut by ``remove_at_least`` characters or fewer, head kept, with a marker;
    text already shortened, or too short to gain from it, comes back unchanged."""
    if MARKER_PREFIX in text:
        return text
    keep = max(0, min(KEEP_HEAD_CHARS, len(text) - remove_at_least))
    cut = text[:keep] + ("\n" if keep else "") + MARKER.format(removed=len(text) - keep)
    return cut if len(cut) < len(text) else text


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
        try:
            return self.wire.parse(data, self.settings)
        except ProviderResponseError as exc:
            raise self._quoted(exc) from None

    async def stream(self, request: CompletionRequest) -> AsyncIterator[StreamDelta]:
        request, model = self.prepare(request)
        url = self.wire.url(self.settings.base_url, model, stream=True)
        assembler = self.wire.assembler(self.settings)
        body = self.wire.body(request, model, stream=True)
        try:
            async for event in self.http.stream_events(url, body, self.wire.stream_format):
                text = assembler.feed(event)
                if text:
                    yield StreamDelta(text=text)
            completion = assembler.finish()
        except ProviderResponseError as exc:
            raise self._quoted(exc) from None
        yield StreamDelta(completion=completion)

    def _quoted(self, exc: ProviderResponseError) -> ProviderResponseError:
        """``exc`` again, its text (which may quote the vendor's error) redacted, then cut
        to ``MAX_QUOTED_ERROR`` characters."""
        return type(exc)(self.settings.excerpt(str(exc), MAX_QUOTED_ERROR))


def bearer(key: str | None) -> dict[str, str]:
    """``Authorization: Bearer <key>``, or no header without a key."""
    return {"authorization": f"Bearer {key}"} if key else {}


def sse_json(event: Any, settings: ProviderSettings) -> Any:
    """The JSON payload of an SSE event, or a clear error (quoting it, ``settings.excerpt``)
    if it is not JSON."""
    try:
        return json.loads(event.data)
    except (ValueError, RecursionError) as exc:
        raise ProviderResponseError(
            f"{settings.provider}: a stream event is not JSON ({_json_problem(exc)}): "
            f"{settings.excerpt(event.data)!r}"
        ) from None


def _json_problem(exc: BaseException) -> str:
    """Why ``json.loads`` refused a text, in a few words."""
    if isinstance(exc, json.JSONDecodeError):
        return f"{exc.msg} at character {exc.pos}"
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    return str(exc)  # e.g. an integer of more digits than int() reads


@attrs.frozen
class Vendor:
    """One HTTP vendor: its ``Wire`` (made per provider), defaults and key, its descriptor."""

    name: str
    wire: Callable[[], Wire]
    description: str
    example: str  # a model name, for the error without one
    base_url: str
    key_env: str | None  # required when set, unless base_url is overridden
    auth: Callable[[str | None], dict[str, str]] = bearer
    extra_headers: Mapping[str, str] = {}

    def create(
        self, model: Any, settings: Mapping[str, Any] | None = None, *, env: Any = None
    ) -> HttpProvider:
        """The provider for ``model`` and ``[providers.<name>]``; the key (from the environment)
        is required only with the vendor's own base URL (a local server may run without)."""
        if isinstance(model, Mapping):
            name, parameters = model.get("name"), model.get("parameters")
        else:
            name, parameters = getattr(model, "name", None), getattr(model, "parameters", None)
        if not isinstance(name, str) or not name.strip():
            raise ProviderConfigError(
                f"model.name: provider {self.name!r} needs a model name in agent.json "
                f"(e.g. {self.example!r})"
            )
        given = check_settings(self.name, settings)
        base_url = given.pop("base_url", self.base_url).rstrip("/")
        key_env = given.pop("api_key_env", self.key_env)
        key = (os.environ if env is None else env).get(key_env) if key_env else None
        key = key.strip() if key else None
        if self.key_env and not key and base_url == self.base_url.rstrip("/"):
            raise ProviderConfigError(
                f"provider {self.name!r} needs an API key: set {key_env} or choose another "
                "provider (model.provider in agent.json)"
            )
        headers = {**self.extra_headers, **given.pop("headers", {})}
        # What is left in ``given``: the numbers.
        checked = ProviderSettings(self.name, base_url, key_env, key, headers=headers, **given)
        redact_from_logs(checked.secrets)
        return HttpProvider(
            self.name,
            self.wire(),
            checked,
            self.auth(key),
            model=name.strip(),
            parameters=dict(parameters or {}),
        )


def vendor_hooks(*vendors: Vendor) -> tuple[Callable[..., None], Callable[[], list[Any]]]:
    """A vendor module's ``roost_check_config`` and ``roost_providers`` hooks."""

    @hookimpl
    def roost_check_config(config: Any) -> None:
        check_config_providers(config, *(v.name for v in vendors))

    @hookimpl
    def roost_providers() -> list[ProviderDescriptor]:
        return [
            ProviderDescriptor(
                v.name, v.create, v.description, requires_env=(v.key_env,) if v.key_env else ()
            )
            for v in vendors
        ]

    return roost_check_config, roost_providers
