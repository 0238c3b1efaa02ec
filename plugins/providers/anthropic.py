"""Anthropic Messages API over httpx: ``system`` apart, ``tool_use`` / ``tool_result`` blocks."""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any

from roost.kernel import Completion, CompletionRequest, Message, ToolCall, Usage

from ._base import (
    Assembler,
    PathWire,
    Vendor,
    add_turn,
    completion,
    expect_mapping,
    make_tool_call,
    member,
    passthrough_parameters,
    sse_json,
    vendor_hooks,
)
from ._http import ProviderResponseError, ProviderSettings

ANTHROPIC_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 4096

_STOP = {
    "end_turn": "end_turn",
    "stop_sequence": "end_turn",
    "tool_use": "tool_use",
    "max_tokens": "max_tokens",
}


def to_anthropic_messages(messages: tuple[Message, ...]) -> list[dict[str, Any]]:
    """roost messages as Messages-API turns: tool results become a user turn of
    ``tool_result`` blocks; consecutive turns of one role are merged (the API alternates)."""
    turns: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "tool":
            block: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": m.tool_call_id or "",
                "content": m.content,
            }
            if m.is_error:
                block["is_error"] = True
            add_turn(turns, "user", [block], "content")
        elif m.role == "assistant":
            blocks: list[dict[str, Any]] = (
                [{"type": "text", "text": m.content}] if m.content else []
            )
            blocks += [
                {"type": "tool_use", "id": c.id, "name": c.name, "input": dict(c.arguments)}
                for c in m.tool_calls
            ]
            if blocks:  # the API refuses empty assistant turns
                add_turn(turns, "assistant", blocks, "content")
        else:
            add_turn(turns, "user", [{"type": "text", "text": m.content}], "content")
    # A turn that is a single text block is sent as a plain string, as the docs write it.
    for turn in turns:
        blocks = turn["content"]
        if len(blocks) == 1 and blocks[0]["type"] == "text":
            turn["content"] = blocks[0]["text"]
    return turns


def build_body(request: CompletionRequest, model: str, *, stream: bool) -> dict[str, Any]:
    """The ``POST /v1/messages`` body; ``max_tokens`` defaults to 4096."""
    params = passthrough_parameters(request.parameters)
    body: dict[str, Any] = {"max_tokens": params.pop("max_tokens", DEFAULT_MAX_TOKENS)}
    body["messages"] = to_anthropic_messages(request.messages)
    body["model"] = model
    if request.system:
        body["system"] = request.system
    if request.tools:
        body["tools"] = [
            {"name": t.name, "description": t.description, "input_schema": dict(t.input_schema)}
            for t in request.tools
        ]
    body.update(params)
    if stream:
        body["stream"] = True
    return body


def parse_usage(data: Any, prior: Usage = Usage()) -> Usage:
    if not isinstance(data, Mapping):
        return prior
    inputs = sum(
        int(data.get(k) or 0)
        for k in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
    )
    return Usage(
        inputs or prior.input_tokens, int(data.get("output_tokens") or 0) or prior.output_tokens
    )


def _raise_if_error(data: Mapping[str, Any]) -> None:
    if data.get("type") == "error":
        err = member(data, "error")
        raise ProviderResponseError(
            f"anthropic reported {err.get('type', 'an error')}: {err.get('message', '')}"
        )


def parse_message(data: Any, settings: ProviderSettings) -> Completion:
    """A Messages-API ``message`` object as a roost ``Completion``."""
    data = expect_mapping(data, "the response", "anthropic")
    _raise_if_error(data)
    content = data.get("content")
    if not isinstance(content, list):
        raise ProviderResponseError("anthropic: the response has no content list")
    text, calls = [], []
    for i, block in enumerate(content):
        block = expect_mapping(block, f"content[{i}]", "anthropic")
        if block.get("type") == "text":
            text.append(str(block.get("text", "")))
        elif block.get("type") == "tool_use":
            call_id = str(block["id"]) if block.get("id") else None
            calls.append(make_tool_call(block.get("name"), block.get("input"), settings, call_id))
    stop = str(data.get("stop_reason"))
    return completion("".join(text), calls, stop, parse_usage(data.get("usage")), _STOP)


class MessagesStreamAssembler(Assembler):
    """Assembles ``message_start`` … ``message_stop``; ``input_json_delta`` pieces are joined."""

    end, stops = "message_stop", _STOP

    def __init__(self, settings: ProviderSettings) -> None:
        super().__init__(settings)
        self._blocks: dict[int, dict[str, Any]] = {}

    def feed(self, event: Any) -> str:
        data = expect_mapping(sse_json(event, self.settings), "a stream event", "anthropic")
        _raise_if_error(data)
        kind = data.get("type")
        if kind == "message_start":
            message = member(data, "message")
            self.usage = parse_usage(message.get("usage"), self.usage)
        elif kind == "content_block_start":
            block = member(data, "content_block")
            entry = {
                "type": block.get("type"),
                "id": block.get("id"),
                "name": block.get("name"),
                "json": "",
            }
            self._blocks[int(data.get("index", len(self._blocks)))] = entry
            if block.get("type") == "text" and block.get("text"):
                return self.add(str(block["text"]))
        elif kind == "content_block_delta":
            delta = member(data, "delta")
            if delta.get("type") == "text_delta":
                return self.add(str(delta.get("text", "")))
            if delta.get("type") == "input_json_delta":
                entry = self._blocks.setdefault(
                    int(data.get("index", 0)),
                    {"type": "tool_use", "id": None, "name": "", "json": ""},
                )
                entry["json"] += str(delta.get("partial_json", ""))
        elif kind == "message_delta":
            delta = member(data, "delta")
            if delta.get("stop_reason"):
                self.stop = str(delta["stop_reason"])
            self.usage = parse_usage(data.get("usage"), self.usage)
        elif kind == "message_stop":
            self.done = True
        return ""

    def tool_calls(self) -> list[ToolCall]:
        return [
            make_tool_call(b["name"], b["json"], self.settings, str(b["id"]) if b["id"] else None)
            for _, b in sorted(self._blocks.items())
            if b["type"] == "tool_use"
        ]


def _auth(key: str | None) -> dict[str, str]:
    return {"anthropic-version": ANTHROPIC_VERSION, **({"x-api-key": key} if key else {})}


ANTHROPIC = Vendor(
    "anthropic",
    partial(PathWire, "/v1/messages", "sse", build_body, parse_message, MessagesStreamAssembler),
    "Anthropic Messages API (Claude)",
    example="claude-sonnet-4-5",
    base_url="https://api.anthropic.com",
    key_env="ANTHROPIC_API_KEY",
    auth=_auth,
)
create_anthropic = ANTHROPIC.create
roost_check_config, roost_providers = vendor_hooks(ANTHROPIC)
