"""The errors roost raises. Every message says what went wrong and how to fix it."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any


def is_mapping(value: Any) -> bool:
    """``isinstance(value, Mapping)``, quick for a plain dict (the ABC check is slower)."""
    return value.__class__ is dict or isinstance(value, Mapping)


def json_type_name(value: object) -> str:
    """How a value reads in an error message about JSON input: "a string", "an array", …"""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (list, tuple)):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


class RoostError(Exception):
    """Base class of every error roost raises on purpose.

    ``code`` is a stable, machine-readable name (used in API and JSON-RPC error data).
    """

    code = "roost_error"

    def to_dict(self) -> dict:
        return {"code": self.code, "message": str(self)}


class ConfigError(RoostError):
    """``roost.toml`` (or an environment override) is invalid."""

    code = "config_error"


class ManifestError(RoostError):
    """An ``agent.json`` is invalid. Names the file, the JSON pointer and what was expected."""

    code = "manifest_error"

    def __init__(self, file: str, pointer: str, expected: str) -> None:
        self.file = file
        self.pointer = pointer or "/"
        self.expected = expected
        super().__init__(f"{file}: at {self.pointer}: {expected}")

    def to_dict(self) -> dict:
        return {**super().to_dict(), "file": self.file, "pointer": self.pointer}


class PluginError(RoostError):
    """A plugin failed to import or register."""

    code = "plugin_error"


class AgentNotFound(RoostError):
    code = "agent_not_found"

    def __init__(self, name: str, known: Sequence[str] = ()) -> None:
        self.name = name
        hint = f"; known agents: {', '.join(sorted(known))}" if known else ""
        super().__init__(f"unknown agent {name!r}{hint}")


class AgentUnavailable(RoostError):
    """The agent is configured but cannot answer (e.g. its provider's API key is missing);
    the HTTP API answers 503."""

    code = "agent_unavailable"

    def __init__(self, name: str, reason: str) -> None:
        self.name = name
        self.reason = reason
        super().__init__(f"agent {name!r} is unavailable: {reason}")

    def to_dict(self) -> dict:
        return {**super().to_dict(), "agent": self.name, "reason": self.reason}


class ToolError(RoostError):
    """Base of tool-call failures; these become ``is_error`` results, never crashes."""

    code = "tool_error"


class ToolNotFound(ToolError):
    """No tool of that name. ``hint`` ("" or "; did you mean …?") names the likely one:
    for an agent asked by another spelling (``roost_agent_x``, ``agent_code-reviewer``),
    its one name ``agent_<name>``."""

    code = "tool_not_found"

    def __init__(self, name: str, known: Iterable[str] = ()) -> None:
        self.name = name
        self.hint = _tool_hint(name, list(known))
        super().__init__(f"unknown tool {name!r}{self.hint}")


_AGENT_SPELLING = re.compile(r"^(?:roost[_\-.])?agent[_\-.](.+)$", re.IGNORECASE)


def _tool_hint(name: str, known: list[str]) -> str:
    import difflib

    from ._tools import agent_tool_name, normalise_name

    if not isinstance(name, str):
        return ""
    spelled = _AGENT_SPELLING.match(name.strip())
    for candidate in (
        agent_tool_name(spelled.group(1)) if spelled else None,
        agent_tool_name(name),  # the agent's own name
        normalise_name(name),
    ):
        if candidate is not None and candidate != name and candidate in known:
            if candidate.startswith("agent_"):
                return f"; did you mean {candidate}? (an agent's tool is agent_<its name, lowercase, '-' → '_'>)"
            return f"; did you mean {candidate}?"
    close = difflib.get_close_matches(name, known, n=3)
    return f"; did you mean {', '.join(close)}?" if close else ""


class ToolNameCollision(ToolError):
    code = "tool_name_collision"


class ToolDenied(ToolError):
    """The caller lacks the capability, or the tool is not exposed on this surface."""

    code = "tool_denied"


class ToolArgumentsInvalid(ToolError):
    code = "invalid_arguments"


class ToolTimeout(ToolError):
    code = "tool_timeout"


class TaintViolation(ToolError):
    code = "taint_violation"


class LoopDetected(ToolError):
    code = "loop_detected"


class RecursionLimitExceeded(ToolError):
    """A call chain would pass ``max_depth``. Names the whole path."""

    code = "recursion_limit"

    def __init__(self, path: Sequence[str], max_depth: int) -> None:
        self.path = tuple(path)
        self.max_depth = max_depth
        super().__init__(
            f"call chain would reach depth {len(self.path)}, past the limit of {max_depth}: "
            + " → ".join(self.path)
        )

    def to_dict(self) -> dict:
        return {**super().to_dict(), "path": list(self.path), "max_depth": self.max_depth}


class SandboxError(ToolError):
    """A path or command would leave the agent's sandbox."""

    code = "sandbox_violation"


class ActorError(RoostError):
    code = "actor_error"


class ActorCrashed(ActorError):
    """The actor's handler raised while processing this request; ``__cause__`` is the error."""

    code = "actor_crashed"


class ActorStopped(ActorError):
    """The actor is stopped (shutdown, or it exhausted its restart budget)."""

    code = "actor_stopped"


class AskTimeout(ActorError):
    code = "ask_timeout"


class MailboxFull(ActorError):
    """An actor's mailbox stayed full past the sender's deadline (the actor is overloaded)."""

    code = "mailbox_full"
