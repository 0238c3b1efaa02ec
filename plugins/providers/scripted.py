"""The offline ``scripted`` provider: a deterministic model driven by rules in agent.json.

A rule (``model.script.rules[]``) matches the user's message with a regex and then:
runs ``steps`` (one tool call per step, or ``{"parallel": [...]}`` for several at once),
answers with the ``reply`` template, or asks the user a question (``ask``: the task waits
for input; the user's next message is ``{answer}``). Templates may use ``{message}``,
``{answer}``, ``{result}`` (the last tool result), ``{results}`` (all, one per line),
``{result[N]}`` and ``{agent}``. No rule matching → ``default_reply``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from roost.kernel import (
    Completion,
    CompletionRequest,
    Message,
    ProviderDescriptor,
    StreamDelta,
    ToolCall,
    Usage,
    hookimpl,
)

_PLACEHOLDER = re.compile(r"\{(message|answer|results|result(?:\[([0-9]{1,9})\])?|agent)\}")
DEFAULT_REPLY = "{message}"


class ScriptedProvider:
    """A ``Provider`` whose answers come from rules, for offline runs, demos and tests."""

    name = "scripted"

    def __init__(self, script: Mapping[str, Any] | None) -> None:
        script = script or {}
        self._rules = [_Rule(r) for r in script.get("rules", ()) if isinstance(r, Mapping)]
        self._default = str(script.get("default_reply", DEFAULT_REPLY))
        self._asks = any(rule.ask for rule in self._rules)

    async def complete(self, request: CompletionRequest) -> Completion:
        return self._decide(request)

    async def stream(self, request: CompletionRequest) -> AsyncIterator[StreamDelta]:
        completion = self._decide(request)
        for piece in re.findall(r"\S+\s*", completion.text):
            yield StreamDelta(text=piece)
        yield StreamDelta(completion=completion)

    def _decide(self, request: CompletionRequest) -> Completion:
        messages = request.messages
        user_index = _last_index(messages, "user")
        if user_index is None:
            return _answer(self._default, {"message": "", "agent": request.agent}, request)
        user_text = messages[user_index].content
        results: list[str] = []  # the tool results since the user's message
        steps_done = 0  # and the steps (turns with tool calls) taken
        for m in messages[user_index + 1 :]:
            if m.role == "tool":
                results.append(m.content)
            elif m.role == "assistant" and m.tool_calls:
                steps_done += 1

        values: dict[str, Any] = {
            "message": user_text,
            "answer": "",
            "agent": request.agent,
            "results": results,
        }
        rule = self._answered_rule(messages, user_index) if self._asks else None
        if rule is not None:
            values["message"] = rule[1]
            values["answer"] = user_text
            rule = rule[0]
        else:
            for rule in self._rules:
                if rule.matches(user_text):
                    break
            else:
                return _answer(self._default, values, request)
            if rule.ask and steps_done == 0:
                text = _render(rule.ask, values)
                return Completion(
                    text=text, stop_reason="input_required", usage=_usage(request, text)
                )

        if steps_done < len(rule.steps):
            calls = tuple(
                ToolCall(
                    name=step["tool"], arguments=_render_value(step.get("arguments", {}), values)
                )
                for step in rule.steps[steps_done]
            )
            return Completion(tool_calls=calls, stop_reason="tool_use", usage=_usage(request, ""))
        return _answer(rule.reply or self._default, values, request)

    def _answered_rule(
        self, messages: Sequence[Message], user_index: int
    ) -> tuple[_Rule, str] | None:
        """The rule whose question was the assistant's last word before this message, if any."""
        prev = _last_index(messages[:user_index], "assistant")
        if prev is None or messages[prev].tool_calls:
            return None
        asked = messages[prev].content
        origin = _last_index(messages[:prev], "user")
        if origin is None:
            return None
        original = messages[origin].content
        for rule in self._rules:
            if (
                rule.ask
                and rule.matches(original)
                and _render(rule.ask, {"message": original}) == asked
            ):
                return rule, original
        return None


class _Rule:
    def __init__(self, raw: Mapping[str, Any]) -> None:
        self.pattern = re.compile(str(raw.get("match", "")))
        self.reply = raw.get("reply")
        self.ask = raw.get("ask")
        self.steps: list[list[Mapping[str, Any]]] = []
        for step in raw.get("steps", ()):
            if isinstance(step, Mapping) and "parallel" in step:
                self.steps.append([s for s in step["parallel"] if isinstance(s, Mapping)])
            elif isinstance(step, Mapping) and "tool" in step:
                self.steps.append([step])

    def matches(self, text: str) -> bool:
        return bool(self.pattern.search(text))


def _last_index(messages: Sequence[Message], role: str) -> int | None:
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].role == role:
            return i
    return None


@functools.lru_cache(maxsize=1024)
def _template_parts(template: str) -> tuple[str | None, ...]:
    """``template`` split at its placeholders: text, then (name, index, text) per placeholder."""
    return tuple(_PLACEHOLDER.split(template))


def _render(template: str, values: Mapping[str, Any]) -> str:
    parts = _template_parts(template)
    if len(parts) == 1:
        return template
    results = values.get("results") or []
    out = [parts[0]]
    for i in range(1, len(parts), 3):
        key, index = parts[i], parts[i + 1]
        if key == "results":
            out.append("\n".join(results))
        elif key == "result":
            out.append(results[-1] if results else "")
        elif index is not None:
            n = int(index)
            out.append(results[n] if n < len(results) else "")
        else:
            out.append(str(values.get(key, "")))
        out.append(parts[i + 2])
    return "".join(out)


def _render_value(value: Any, values: Mapping[str, Any]) -> Any:
    if isinstance(value, str):
        return _render(value, values)
    if isinstance(value, Mapping):
        return {k: _render_value(v, values) for k, v in value.items()}
    if isinstance(value, list):
        return [_render_value(v, values) for v in value]
    return value


def _usage(request: CompletionRequest, text: str) -> Usage:
    words_in = len(request.system.split())
    for m in request.messages:
        words_in += len(m.content.split())
    return Usage(words_in, len(text.split()))  # (input_tokens, output_tokens)


def _answer(template: str, values: Mapping[str, Any], request: CompletionRequest) -> Completion:
    text = _render(template, values)
    return Completion(text, (), "end_turn", _usage(request, text))


def script_as_dict(script: Any) -> Mapping[str, Any] | None:
    """The manifest's typed ``ModelScript`` (or a plain dict) as the dict the rules read."""
    if script is None or isinstance(script, Mapping):
        return script
    rules = []
    for rule in script.rules:
        steps = []
        for step in rule.steps:
            calls = [{"tool": c.tool, "arguments": dict(c.arguments)} for c in step.calls]
            steps.append({"parallel": calls} if step.parallel or len(calls) > 1 else calls[0])
        rules.append({"match": rule.match, "steps": steps, "reply": rule.reply, "ask": rule.ask})
    out: dict[str, Any] = {"rules": rules}
    if script.default_reply is not None:
        out["default_reply"] = script.default_reply
    return out


def create_provider(model: Any, settings: Mapping[str, Any] | None = None) -> ScriptedProvider:
    """Factory used by the kernel: ``model`` is the manifest's model section."""
    script = model.get("script") if isinstance(model, Mapping) else getattr(model, "script", None)
    return ScriptedProvider(script_as_dict(script))


@hookimpl
def roost_check_config(config: Any) -> None:
    from ._http import check_config_providers

    check_config_providers(config, "scripted", known=())  # the script is in agent.json


@hookimpl
def roost_providers() -> list[ProviderDescriptor]:
    return [
        ProviderDescriptor(
            name="scripted",
            factory=create_provider,
            description="offline, deterministic rules from agent.json (model.script)",
        )
    ]
