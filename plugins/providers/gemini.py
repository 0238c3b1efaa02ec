"""Google Gemini ``generateContent`` / ``streamGenerateContent?alt=sse`` over httpx.

The assistant is role ``model``; tool calls are ``functionCall`` parts and results go back
as ``functionResponse`` parts; the system prompt is ``systemInstruction``. Tool schemas are
sent as ``parametersJsonSchema`` (full JSON Schema, as MCP tools use). Thought signatures
Gemini attaches to function calls are kept (bounded, per provider) and sent back with them.
"""

from __future__ import annotations

import re
import uuid
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from roost.kernel import Completion, CompletionRequest, Message, ToolCall, Usage

from ._base import (
    Assembler,
    Vendor,
    add_turn,
    completion,
    expect_answer,
    expect_mapping,
    make_tool_call,
    member,
    passthrough_parameters,
    sse_json,
    vendor_hooks,
)
from ._http import ProviderResponseError, ProviderSettings

API_VERSION = "v1beta"
LOCAL_ID_PREFIX = "roost_fc_"
_MAX_SIGNATURES = 1024
_RENAMED = {"max_tokens": "maxOutputTokens", "stop": "stopSequences"}
_STOP = {"STOP": "end_turn", "MAX_TOKENS": "max_tokens"}


class GeminiWire:
    """The Gemini REST format, sans I/O; remembers thought signatures by call id."""

    stream_format = "sse"

    def __init__(self) -> None:
        self.signatures: OrderedDict[str, str] = OrderedDict()

    def url(self, base_url: str, model: str, *, stream: bool) -> str:
        if stream:
            return f"{base_url}/{API_VERSION}/models/{model}:streamGenerateContent?alt=sse"
        return f"{base_url}/{API_VERSION}/models/{model}:generateContent"

    def contents(self, messages: tuple[Message, ...]) -> list[dict[str, Any]]:
        turns: list[dict[str, Any]] = []
        for m in messages:
            if m.role == "tool":
                response = {"error": m.content} if m.is_error else {"result": m.content}
                part: dict[str, Any] = {
                    "functionResponse": {"name": m.name or "", "response": response}
                }
                if m.tool_call_id and not m.tool_call_id.startswith(LOCAL_ID_PREFIX):
                    part["functionResponse"]["id"] = m.tool_call_id
                add_turn(turns, "user", [part], "parts")
            elif m.role == "assistant":
                if m.content:
                    add_turn(turns, "model", [{"text": m.content}], "parts")
                for c in m.tool_calls:
                    call: dict[str, Any] = {"name": c.name, "args": dict(c.arguments)}
                    if not c.id.startswith(LOCAL_ID_PREFIX):
                        call["id"] = c.id
                    fc: dict[str, Any] = {"functionCall": call}
                    if c.id in self.signatures:
                        fc["thoughtSignature"] = self.signatures[c.id]
                    add_turn(turns, "model", [fc], "parts")
            else:
                add_turn(turns, "user", [{"text": m.content}], "parts")
        return turns

    def body(self, request: CompletionRequest, model: str, *, stream: bool) -> dict[str, Any]:
        body: dict[str, Any] = {"contents": self.contents(request.messages)}
        if request.system:
            body["systemInstruction"] = {"parts": [{"text": request.system}], "role": "user"}
        if request.tools:
            declarations = [
                {
                    "name": t.name,
                    "description": t.description,
                    "parametersJsonSchema": dict(t.input_schema),
                }
                for t in request.tools
            ]
            body["tools"] = [{"functionDeclarations": declarations}]
        config = {
            _RENAMED.get(k) or re.sub(r"_([a-z])", lambda m: m.group(1).upper(), k): v
            for k, v in passthrough_parameters(request.parameters).items()
        }
        if config:
            body["generationConfig"] = config
        return body

    def _parts(
        self, data: Any, settings: ProviderSettings
    ) -> tuple[list[str], list[ToolCall], str | None, Usage | None]:
        data = expect_answer(data, "the response", "gemini")
        usage = None
        meta = data.get("usageMetadata")
        if isinstance(meta, Mapping):
            usage = Usage(
                int(meta.get("promptTokenCount") or 0),
                int(meta.get("candidatesTokenCount") or 0)
                + int(meta.get("thoughtsTokenCount") or 0),
            )
        candidates = data.get("candidates")
        if not candidates:
            feedback = data.get("promptFeedback")
            if isinstance(feedback, Mapping) and feedback.get("blockReason"):
                raise ProviderResponseError(f"gemini blocked the prompt: {feedback['blockReason']}")
            return [], [], None, usage
        candidate = expect_mapping(candidates[0], "candidates[0]", "gemini")
        content = member(candidate, "content")
        texts, calls = [], []
        for i, part in enumerate(content.get("parts") or ()):
            part = expect_mapping(part, f"candidates[0].content.parts[{i}]", "gemini")
            if "functionCall" in part:
                fc = expect_mapping(part["functionCall"], f"parts[{i}].functionCall", "gemini")
                call_id = str(fc.get("id") or LOCAL_ID_PREFIX + uuid.uuid4().hex[:16])
                calls.append(make_tool_call(fc.get("name"), fc.get("args"), settings, call_id))
                if part.get("thoughtSignature"):  # kept to send back with the call; bounded
                    self.signatures[call_id] = str(part["thoughtSignature"])
                    while len(self.signatures) > _MAX_SIGNATURES:
                        self.signatures.popitem(last=False)
            elif isinstance(part.get("text"), str) and not part.get("thought"):
                texts.append(part["text"])
        finish = candidate.get("finishReason")
        return texts, calls, str(finish) if finish else None, usage

    def parse(self, data: Any, settings: ProviderSettings) -> Completion:
        texts, calls, finish, usage = self._parts(data, settings)
        if finish is None and not texts and not calls:
            raise ProviderResponseError("gemini: the response has no candidates")
        return completion("".join(texts), calls, finish, usage or Usage(), _STOP)

    def assembler(self, settings: ProviderSettings) -> GeminiStreamAssembler:
        return GeminiStreamAssembler(self, settings)


class GeminiStreamAssembler(Assembler):
    """Each SSE event is a whole ``GenerateContentResponse`` chunk; a ``finishReason`` ends it."""

    end, stops = "a finishReason", _STOP

    def __init__(self, wire: GeminiWire, settings: ProviderSettings) -> None:
        super().__init__(settings)
        self._wire = wire

    def feed(self, event: Any) -> str:
        texts, calls, finish, usage = self._wire._parts(
            sse_json(event, self.settings), self.settings
        )
        self.calls += calls
        if usage is not None:
            self.usage = usage
        if finish:
            self.stop, self.done = finish, True
        return self.add("".join(texts))


GEMINI = Vendor(
    "gemini",
    GeminiWire,
    "Google Gemini generateContent",
    example="gemini-2.5-flash",
    base_url="https://generativelanguage.googleapis.com",
    key_env="GEMINI_API_KEY",
    auth=lambda key: {"x-goog-api-key": key} if key else {},
)
create_gemini = GEMINI.create
roost_check_config, roost_providers = vendor_hooks(GEMINI)
