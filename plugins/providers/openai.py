"""OpenAI Chat Completions (and OpenRouter, and any OpenAI-compatible server) over httpx.

``[providers.openai] base_url`` points it at vLLM, LM Studio, llama.cpp's server, …; with a custom
``base_url`` the key is optional. OpenRouter is the same wire format at its own URL with its
attribution headers (``[providers.openrouter] referer/title`` via ``headers``).
"""

from __future__ import annotations

import json
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
    passthrough_parameters,
    sse_json,
    vendor_hooks,
)
from ._http import ProviderResponseError, ProviderSettings

_FINISH = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
}


def to_openai_messages(system: str, messages: tuple[Message, ...]) -> list[dict[str, Any]]:
    """roost messages in Chat Completions form (system first, tool results as ``tool``)."""
    out: list[dict[str, Any]] = []
    if system:
        out.append({"role": "system", "content": system})
    for m in messages:
        if m.role == "tool":
            out.append({"role": "tool", "tool_call_id": m.tool_call_id or "", "content": m.content})
        elif m.role == "assistant":
            entry: dict[str, Any] = {"role": "assistant", "content": m.content or None}
            if m.tool_calls:
                entry["tool_calls"] = [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {
                            "name": c.name,
                            "arguments": json.dumps(dict(c.arguments), ensure_ascii=False),
                        },
                    }
                    for c in m.tool_calls
                ]
            elif not m.content:
                entry["content"] = ""
            out.append(entry)
        else:
            out.append({"role": "user", "content": m.content})
    return out


def build_body(request: CompletionRequest, model: str, *, stream: bool) -> dict[str, Any]:
    """The ``POST /chat/completions`` body; no ``tools`` key when the agent has none."""
    body: dict[str, Any] = {
        "messages": to_openai_messages(request.system, request.messages),
        "model": model,
    }
    body.update(passthrough_parameters(request.parameters))
    if tools := function_tools(request):
        body["tools"] = tools
    if stream:
        body["stream"] = True
        body.setdefault("stream_options", {"include_usage": True})
    return body


def parse_usage(data: Any) -> Usage:
    if not isinstance(data, Mapping):
        return Usage()
    return Usage(int(data.get("prompt_tokens") or 0), int(data.get("completion_tokens") or 0))


def parse_completion(data: Any, settings: ProviderSettings) -> Completion:
    """A ``chat.completion`` object as a roost ``Completion``."""
    provider = settings.provider
    data = expect_answer(data, "the response", provider)
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        raise ProviderResponseError(
            f"{provider}: the response has no choices: {settings.excerpt(json.dumps(data))}"
        )
    choice = expect_mapping(choices[0], "choices[0]", provider)
    message = expect_mapping(choice.get("message"), "choices[0].message", provider)
    calls = []
    for i, raw in enumerate(message.get("tool_calls") or ()):
        where = f"choices[0].message.tool_calls[{i}]"
        raw = expect_mapping(raw, where, provider)
        fn = expect_mapping(raw.get("function"), f"{where}.function", provider)
        calls.append(make_tool_call(fn.get("name"), fn.get("arguments"), settings, raw.get("id")))
    text = str(message.get("content") or "")
    finish = str(choice.get("finish_reason") or "stop")
    return completion(text, calls, finish, parse_usage(data.get("usage")), _FINISH)


class ChatStreamAssembler(Assembler):
    """Assembles ``chat.completion.chunk`` events; tool-call fragments are joined by index."""

    end = "the model finished (no finish_reason, no [DONE])"
    stops = _FINISH

    def __init__(self, settings: ProviderSettings) -> None:
        super().__init__(settings)
        self._calls: dict[int, dict[str, Any]] = {}

    def feed(self, event: Any) -> str:
        if event.data.strip() == "[DONE]":
            self.done = True
            return ""
        chunk = expect_answer(sse_json(event, self.settings), "a stream chunk", self.provider)
        if chunk.get("usage"):
            self.usage = parse_usage(chunk["usage"])
        text = ""
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, Mapping) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            if isinstance(delta, Mapping):
                if isinstance(delta.get("content"), str):
                    text += delta["content"]
                for frag in delta.get("tool_calls") or ():
                    if isinstance(frag, Mapping):
                        self._fragment(frag)
            if choice.get("finish_reason"):
                self.stop = str(choice["finish_reason"])
                self.done = True
        return self.add(text)

    def _fragment(self, frag: Mapping[str, Any]) -> None:
        index = frag.get("index", len(self._calls))
        call = self._calls.setdefault(index, {"id": None, "name": "", "arguments": ""})
        if frag.get("id"):
            call["id"] = frag["id"]
        fn = frag.get("function") or {}
        if isinstance(fn, Mapping):
            if fn.get("name"):
                call["name"] += fn["name"]
            if isinstance(fn.get("arguments"), str):
                call["arguments"] += fn["arguments"]
            elif isinstance(fn.get("arguments"), Mapping):  # some compatible servers send an object
                call["arguments"] = json.dumps(fn["arguments"])

    def tool_calls(self) -> list[ToolCall]:
        return [
            make_tool_call(c["name"], c["arguments"], self.settings, c["id"] or None)
            for _, c in sorted(self._calls.items())
        ]


# The Chat Completions wire format (its errors name the provider its settings are for).
chat_completions_wire = partial(
    PathWire, "/chat/completions", "sse", build_body, parse_completion, ChatStreamAssembler
)


OPENAI = Vendor(
    "openai",
    chat_completions_wire,
    "OpenAI Chat Completions, or any compatible server via base_url",
    example="gpt-4o-mini",
    base_url="https://api.openai.com/v1",
    key_env="OPENAI_API_KEY",
)
OPENROUTER = Vendor(
    "openrouter",
    chat_completions_wire,
    "OpenRouter (OpenAI format, many vendors' models)",
    example="openai/gpt-4o-mini",
    base_url="https://openrouter.ai/api/v1",
    key_env="OPENROUTER_API_KEY",
    extra_headers={"HTTP-Referer": "https://github.com/roost-agents/roost", "X-Title": "roost"},
)
create_openai, create_openrouter = OPENAI.create, OPENROUTER.create
roost_check_config, roost_providers = vendor_hooks(OPENAI, OPENROUTER)
