"""Ollama ``/api/chat`` over httpx: OpenAI-like tools without call ids, NDJSON streaming.

Sampling parameters go into ``options`` (``max_tokens`` becomes ``num_predict``);
``keep_alive``, ``format`` and ``think`` stay at the top level. No key is needed for a
local server; ``api_key_env`` (e.g. ``OLLAMA_API_KEY``) adds a bearer token for hosted ones.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from roost.kernel import (
    Completion,
    CompletionRequest,
    Message,
    ProviderDescriptor,
    ToolCall,
    Usage,
    hookimpl,
)

from ._base import (
    HttpProvider,
    bearer,
    expect_answer,
    expect_mapping,
    function_tools,
    http_provider,
    make_tool_call,
    passthrough_parameters,
)
from ._http import (
    StreamInterrupted,
    check_config_providers,
)

OLLAMA_BASE_URL = "http://localhost:11434"
TOP_LEVEL = frozenset({"keep_alive", "format", "think"})


def to_ollama_messages(system: str, messages: tuple[Message, ...]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    for m in messages:
        if m.role == "tool":
            out.append({"role": "tool", "content": m.content, "tool_name": m.name or ""})
        elif m.role == "assistant":
            entry: dict[str, Any] = {"role": "assistant"}
            if m.content or not m.tool_calls:
                entry["content"] = m.content
            if m.tool_calls:
                entry["tool_calls"] = [
                    {"function": {"name": c.name, "arguments": dict(c.arguments)}}
                    for c in m.tool_calls
                ]
            out.append(entry)
        else:
            out.append({"role": "user", "content": m.content})
    return out


def build_body(request: CompletionRequest, model: str, *, stream: bool) -> dict[str, Any]:
    """The ``POST /api/chat`` body; ``stream`` is always explicit (Ollama streams by default)."""
    params = passthrough_parameters(request.parameters)
    body: dict[str, Any] = {
        "model": model,
        "messages": to_ollama_messages(request.system, request.messages),
    }
    if request.tools:
        body["tools"] = function_tools(request)
    body["stream"] = stream
    options = {k: v for k, v in params.items() if k not in TOP_LEVEL}
    if "max_tokens" in options:
        options.setdefault("num_predict", options.pop("max_tokens"))
    if options:
        body["options"] = options
    body.update({k: v for k, v in params.items() if k in TOP_LEVEL})
    return body


def _calls(message: Mapping[str, Any]) -> list[ToolCall]:
    calls = []
    for i, raw in enumerate(message.get("tool_calls") or ()):
        fn = expect_mapping(
            expect_mapping(raw, f"message.tool_calls[{i}]", "ollama").get("function"),
            f"message.tool_calls[{i}].function",
            "ollama",
        )
        name = str(fn.get("name") or "")
        # Ollama gives no call id; roost makes one so results pair with their calls.
        calls.append(
            make_tool_call(name, fn.get("arguments"), "ollama", "call_" + uuid.uuid4().hex[:16])
        )
    return calls


def _usage(data: Mapping[str, Any]) -> Usage:
    return Usage(int(data.get("prompt_eval_count") or 0), int(data.get("eval_count") or 0))


def _stop(data: Mapping[str, Any], calls: list[ToolCall]) -> str:
    if calls:
        return "tool_use"
    return "max_tokens" if data.get("done_reason") == "length" else "end_turn"


def parse_response(data: Any) -> Completion:
    """A non-streamed ``/api/chat`` answer as a roost ``Completion``."""
    data = expect_answer(data, "the response", "ollama")
    message = expect_mapping(data.get("message"), "message", "ollama")
    calls = _calls(message)
    return Completion(
        str(message.get("content") or ""), tuple(calls), _stop(data, calls), _usage(data)
    )


class ChatStreamAssembler:
    """Assembles NDJSON chunks; the last one has ``done: true`` and the token counts."""

    def __init__(self) -> None:
        self._text: list[str] = []
        self._calls: list[ToolCall] = []
        self._final: Mapping[str, Any] | None = None

    def feed(self, event: Any) -> str:
        data = expect_answer(event, "the response", "ollama")
        message = data.get("message") if isinstance(data.get("message"), Mapping) else {}
        self._calls += _calls(message)
        piece = str(message.get("content") or "")
        if piece:
            self._text.append(piece)
        if data.get("done"):
            self._final = data
        return piece

    def finish(self) -> Completion:
        if self._final is None:
            raise StreamInterrupted(
                "ollama: the stream ended before a chunk with done=true; try again"
            )
        return Completion(
            "".join(self._text),
            tuple(self._calls),
            _stop(self._final, self._calls),
            _usage(self._final),
        )


class OllamaWire:
    """The ``/api/chat`` wire format (a ``Wire``)."""

    stream_format = "ndjson"
    body = staticmethod(build_body)
    parse = staticmethod(parse_response)
    assembler = ChatStreamAssembler

    def url(self, base_url: str, model: str, *, stream: bool) -> str:
        return f"{base_url}/api/chat"


def create_ollama(
    model: Any, settings: Mapping[str, Any] | None = None, *, env: Mapping[str, str] | None = None
) -> HttpProvider:
    """Factory for ``model.provider = "ollama"`` (no key needed locally)."""
    return http_provider(
        "ollama",
        OllamaWire(),
        model,
        settings,
        example="llama3.2",
        base_url=OLLAMA_BASE_URL,
        key_env=None,
        auth=bearer,
        env=env,
    )


@hookimpl
def roost_check_config(config: Any) -> None:
    check_config_providers(config, "ollama")


@hookimpl
def roost_providers() -> list[ProviderDescriptor]:
    return [ProviderDescriptor("ollama", create_ollama, "Ollama /api/chat (local models, no key)")]
