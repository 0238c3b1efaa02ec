"""Ollama ``/api/chat`` over httpx: OpenAI-like tools without call ids, NDJSON streaming.

Sampling parameters go into ``options`` (``max_tokens`` becomes ``num_predict``);
``keep_alive``, ``format`` and ``think`` stay at the top level. No key is needed for a
local server; ``api_key_env`` (e.g. ``OLLAMA_API_KEY``) adds a bearer token for hosted ones.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from functools import partial
from typing import Any

from roost.kernel import Completion, CompletionRequest, Message, ToolCall, Usage

from ._base import (
    Assembler,
    PathWire,
    Vendor,
    completion,
    expect_answer,
    expect_mapping,
    function_tools,
    make_tool_call,
    member,
    passthrough_parameters,
    vendor_hooks,
)
from ._http import ProviderSettings

TOP_LEVEL = frozenset({"keep_alive", "format", "think"})
_STOP = {"length": "max_tokens"}


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


def _calls(message: Mapping[str, Any], settings: ProviderSettings) -> list[ToolCall]:
    calls = []
    for i, raw in enumerate(message.get("tool_calls") or ()):
        raw = expect_mapping(raw, f"message.tool_calls[{i}]", "ollama")
        fn = expect_mapping(raw.get("function"), f"message.tool_calls[{i}].function", "ollama")
        # Ollama gives no call id; roost makes one so results pair with their calls.
        call_id = "call_" + uuid.uuid4().hex[:16]
        calls.append(make_tool_call(fn.get("name"), fn.get("arguments"), settings, call_id))
    return calls


def _usage(data: Mapping[str, Any]) -> Usage:
    return Usage(int(data.get("prompt_eval_count") or 0), int(data.get("eval_count") or 0))


def parse_response(data: Any, settings: ProviderSettings) -> Completion:
    """A non-streamed ``/api/chat`` answer as a roost ``Completion``."""
    data = expect_answer(data, "the response", "ollama")
    message = expect_mapping(data.get("message"), "message", "ollama")
    text = str(message.get("content") or "")
    return completion(text, _calls(message, settings), _reason(data), _usage(data), _STOP)


def _reason(data: Mapping[str, Any]) -> str:
    return str(data.get("done_reason") or "")


class ChatStreamAssembler(Assembler):
    """Assembles NDJSON chunks; the last one has ``done: true`` and the token counts."""

    end, stops = "a chunk with done=true", _STOP

    def feed(self, event: Any) -> str:
        data = expect_answer(event, "the response", "ollama")
        message = member(data, "message")
        self.calls += _calls(message, self.settings)
        if data.get("done"):
            self.stop, self.usage, self.done = _reason(data), _usage(data), True
        return self.add(str(message.get("content") or ""))


OLLAMA = Vendor(
    "ollama",
    partial(PathWire, "/api/chat", "ndjson", build_body, parse_response, ChatStreamAssembler),
    "Ollama /api/chat (local models, no key)",
    example="llama3.2",
    base_url="http://localhost:11434",
    key_env=None,
)
create_ollama = OLLAMA.create
roost_check_config, roost_providers = vendor_hooks(OLLAMA)
