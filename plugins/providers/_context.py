"""The context guard: keep a conversation inside the model's window.

When the estimated size nears the window, the oldest tool outputs are shortened first
(head kept, a marker says how much was cut); the newest tool output and every user and
assistant message are kept whole as long as possible. Pure functions, no I/O.
"""

from __future__ import annotations

import json
from typing import Any

import attrs
from roost.kernel import CompletionRequest

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
            total += estimate_tokens(call.name) + estimate_tokens(
                json.dumps(dict(call.arguments), default=str)
            )
    for spec in request.tools:
        total += estimate_tokens(spec.name + spec.description) + estimate_tokens(
            json.dumps(dict(spec.input_schema), default=str)
        )
    return total


def context_window_for(provider: str, parameters: dict[str, Any], configured: int | None) -> int:
    """``parameters.context_window`` (agent) → ``context_window`` (roost.toml) → vendor default."""
    value = parameters.get("context_window")
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return configured or DEFAULT_CONTEXT_WINDOWS.get(provider, 32_000)


def fit_context(
    request: CompletionRequest, *, context_window: int, reserve_output: int = 0
) -> CompletionRequest:
    """``request`` with its oldest tool outputs shortened until it fits the budget.

    The budget is ``context_window * 0.9 - reserve_output`` tokens (estimated). If even
    shortening every tool output does not fit, the request is returned as shortened as it
    can be; the vendor then says the context is too long, which is the honest answer.
    """
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
    """``text`` cut by up to ``remove_at_least`` characters (keeping its head), with a marker.

    Text already shortened, or too short to gain from it, comes back unchanged.
    """
    if MARKER_PREFIX in text:
        return text
    keep = max(0, min(KEEP_HEAD_CHARS, len(text) - remove_at_least))
    cut = text[:keep] + ("\n" if keep else "") + MARKER.format(removed=len(text) - keep)
    return cut if len(cut) < len(text) else text
