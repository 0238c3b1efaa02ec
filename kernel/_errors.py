"""The errors roost raises. Every message says what went wrong and how to fix it."""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from functools import reduce
from typing import Any


def is_mapping(value: Any) -> bool:
    """``isinstance(value, Mapping)``, quick for a plain dict (the ABC check is slower)."""
    return value.__class__ is dict or isinstance(value, Mapping)


def json_type(value: Any) -> str:
    """The JSON name of a Python value's type (for error messages): "string", "integer", …"""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, Mapping):
        return "object"
    if isinstance(value, (list, tuple)):
        return "array"
    return type(value).__name__


def json_type_name(value: object) -> str:
    """How a value reads in an error message about JSON input: "a string", "an array", …"""
    name = json_type(value)
    if name in ("integer", "number"):
        return "a number"
    if name in ("boolean", "string"):
        return f"a {name}"
    return f"an {name}" if name in ("array", "object") else name


def json_pointer(parts: Iterable[Any]) -> str:
    """The JSON Pointer (RFC 6901) of a path of keys and indexes: ``/a/0/b``; ``/`` for none."""
    escaped = [str(p).replace("~", "~0").replace("/", "~1") for p in parts]
    return "/" + "/".join(escaped) if escaped else "/"


# Where an MCP tool result's ``_meta`` carries roost's error object (``RoostError.to_dict``).
META_ERROR = "io.roost/error"


class RoostError(Exception):
    """Base class of every error roost raises on purpose; ``code``: its stable name."""

    code = "roost_error"

    def __init_subclass__(cls, code: str = "", **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if code:
            cls.code = code

    def to_dict(self) -> dict:
        return {"code": self.code, "message": str(self)}


class ConfigError(RoostError, code="config_error"):
    """``roost.toml`` (or an environment override) is invalid."""


def _positive_int(value: Any, field: str, error: type[Exception] = ConfigError) -> int:
    if number_setting(value, 1, integer=True, closed=True) is None:
        raise error(f"{field}: expected a positive integer, got {_shown(value)}")
    return value


class ManifestError(RoostError, code="manifest_error"):
    """An ``agent.json`` is invalid. Names the file, the JSON pointer and what was expected."""

    def __init__(self, file: str, pointer: str, expected: str) -> None:
        self.file = file
        self.pointer = pointer or "/"
        self.expected = expected
        super().__init__(f"{file}: at {self.pointer}: {expected}")

    def to_dict(self) -> dict:
        return {**super().to_dict(), "file": self.file, "pointer": self.pointer}


class PluginError(RoostError, code="plugin_error"):
    """A plugin failed to import or register."""


class AgentNotFound(RoostError, code="agent_not_found"):
    def __init__(self, name: str, known: Sequence[str] = ()) -> None:
        self.name = name
        hint = f"; known agents: {', '.join(sorted(known))}" if known else ""
        super().__init__(f"unknown agent {name!r}{hint}")


class AgentUnavailable(RoostError, code="agent_unavailable"):
    """The agent is configured but cannot answer (e.g. its provider's API key is missing);
    the HTTP API answers 503."""

    def __init__(self, name: str, reason: str) -> None:
        self.name = name
        self.reason = reason
        super().__init__(f"agent {name!r} is unavailable: {reason}")

    def to_dict(self) -> dict:
        return {**super().to_dict(), "agent": self.name, "reason": self.reason}


class ToolError(RoostError, code="tool_error"):
    """Base of tool-call failures; these become ``is_error`` results, never crashes."""


class ToolNotFound(ToolError, code="tool_not_found"):
    """No tool of that name; ``hint`` ("" or "; did you mean …?") names the likely one."""

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
                return (
                    f"; did you mean {candidate}? (an agent's tool is agent_<its "
                    "name, lowercase, '-' → '_'>)"
                )
            return f"; did you mean {candidate}?"
    close = difflib.get_close_matches(name, known, n=3)
    return f"; did you mean {', '.join(close)}?" if close else ""


class ToolNameCollision(ToolError, code="tool_name_collision"): ...


class ToolDenied(ToolError, code="tool_denied"):
    """The caller lacks the capability, or the tool is not exposed on this surface."""


class ToolArgumentsInvalid(ToolError, code="invalid_arguments"): ...


class ToolTimeout(ToolError, code="tool_timeout"): ...


class TaintViolation(ToolError, code="taint_violation"): ...


class LoopDetected(ToolError, code="loop_detected"): ...


class RecursionLimitExceeded(ToolError, code="recursion_limit"):
    """A call chain would pass ``max_depth``. Names the whole path."""

    def __init__(self, path: Sequence[str], max_depth: int, depth: int | None = None) -> None:
        self.path = tuple(path)
        self.max_depth = max_depth
        # The refused hop's depth: the caller's claimed depth + 1, which may be far more than
        # the hops named in ``path`` (a caller says "depth 999999").
        self.depth = max(depth or 0, len(self.path))
        super().__init__(
            f"call chain would reach depth {self.depth}, past the limit of {max_depth}: "
            + " → ".join(self.path)
        )

    def to_dict(self) -> dict:
        return {
            **super().to_dict(),
            "path": list(self.path),
            "max_depth": self.max_depth,
            "depth": self.depth,
        }

    def to_mcp_result(self) -> dict:
        """The refused call's ``CallToolResult``: a tool execution error (``isError``), so that
        the calling model reads why and stops, with ``to_dict()`` under
        ``_meta["io.roost/error"]`` for programs."""
        return {
            "content": [{"type": "text", "text": str(self)}],
            "isError": True,
            "_meta": {META_ERROR: self.to_dict()},
        }

    @classmethod
    def from_mcp_result(cls, result: Any) -> RecursionLimitExceeded | None:
        """The error ``to_mcp_result`` describes; None for any other result."""
        meta = result.get("_meta") if is_mapping(result) and result.get("isError") else None
        data = meta.get(META_ERROR) if is_mapping(meta) else None
        if is_mapping(data) and data.get("code") == cls.code:
            return cls.from_dict(data)
        return None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RecursionLimitExceeded:
        """The error a peer described with ``to_dict()`` (MCP error data, result ``_meta``)."""
        path = data.get("path")
        hops = [str(hop) for hop in path[:64]] if isinstance(path, list) else []

        def count(key: str) -> int:
            value = data.get(key)
            return (
                value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
            )

        return cls(hops, count("max_depth"), count("depth"))


class InvalidTraceContext(RoostError, code="invalid_trace_context"):
    """A trace carrier (header, ``_meta``, metadata, environment) holds a depth that is not
    a whole number from 0 to 999,999,999; ``field`` names it."""

    def __init__(self, field: str, value: Any) -> None:
        self.field = field
        self.problem = (
            "expected the caller's call depth, a whole number from 0 to 999999999, "
            f"got {_shown(value)}; "
            "send the depth your own caller gave you (or omit it to start a trace)"
        )
        super().__init__(f"{field}: {self.problem}")

    def to_dict(self) -> dict:
        return {**super().to_dict(), "field": self.field}


class SandboxError(ToolError, code="sandbox_violation"):
    """A path or command would leave the agent's sandbox."""


class ActorError(RoostError, code="actor_error"): ...


class ActorCrashed(ActorError, code="actor_crashed"):
    """The actor's handler raised while processing this request; ``__cause__`` is the error."""


class ActorStopped(ActorError, code="actor_stopped"):
    """The actor is stopped (shutdown, or it exhausted its restart budget)."""


class AskTimeout(ActorError, code="ask_timeout"): ...


class MailboxFull(ActorError, code="mailbox_full"):
    """An actor's mailbox stayed full past the sender's deadline (the actor is overloaded)."""


class InvalidInput(RoostError, code="invalid_input"):
    """Input that could be neither stored nor sent back as JSON; ``field`` names where it
    sits (``message.parts[0].text``), ``problem`` what is wrong."""

    def __init__(self, field: str, problem: str) -> None:
        self.field = field or "value"
        self.problem = problem
        super().__init__(f"{self.field}: {problem}")

    def to_dict(self) -> dict:
        return {**super().to_dict(), "field": self.field}


class InvalidText(InvalidInput, code="invalid_text"):
    """Input holds a lone surrogate (JSON's ``"\\ud800"`` decodes to one), which no UTF-8
    encoder takes: it could be neither stored nor sent on."""

    def __init__(self, field: str, char: str) -> None:
        self.char = char
        super().__init__(
            field, f"contains a lone surrogate (U+{ord(char):04X}); send valid Unicode"
        )


class InvalidNumber(InvalidInput, code="invalid_number"):
    """Input holds NaN or an infinity (``1e400`` decodes to one): stored, it would be served
    back as text no JSON parser takes."""

    def __init__(self, field: str, value: float) -> None:
        self.value = value
        shown = "NaN" if value != value else ("Infinity" if value > 0 else "-Infinity")
        super().__init__(
            field,
            f"is {shown}, which JSON cannot carry (a NaN or Infinity literal, or a number beyond "
            "the range of a 64-bit float such as 1e400); send a finite number, "
            "or the value as a string",
        )


class SessionConflict(RoostError, code="session_conflict"):
    """A caller's ``session_id`` names another agent's session (a session stays with its agent)."""

    def __init__(self, session_id: str, agent: str, owner_agent: str) -> None:
        self.field = "session_id"
        self.session_id = session_id
        self.agent = agent
        self.owner_agent = owner_agent
        super().__init__(
            f"session {session_id!r} belongs to agent {owner_agent!r}, not {agent!r}: a session "
            "(over A2A, a contextId) stays with the agent it began with; send it to "
            f"{owner_agent!r}, or start a new one (omit session_id / contextId)"
        )

    def to_dict(self) -> dict:
        return {**super().to_dict(), "field": self.field}


_FLOAT_MAX = sys.float_info.max


def number_setting(
    value: Any,
    low: float = 0,
    high: float = math.inf,
    *,
    integer: bool = False,
    closed: bool = False,
) -> Any:
    """``value`` as a numeric setting, else None: an int (with ``integer``) or a finite number,
    never a bool, above ``low`` (or equal to it, with ``closed``) and at most ``high``; a float
    unless ``integer``."""
    kind = value.__class__  # a plain int (or float) skips the isinstance checks
    if kind is not int and (integer or kind is not float):
        if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)):
            return None
    # Compared, never converted first: float() or math.isfinite() of an int past the largest
    # float raises OverflowError (and nan fails every comparison).
    top = high if integer or high < _FLOAT_MAX else _FLOAT_MAX
    if not (low <= value if closed else low < value) or not value <= top:
        return None
    return value if integer else float(value)


def parse_int(value: Any, field: str, low: int, high: int) -> int:
    """``value``, an int (never a bool) or its text, as an int from ``low`` to ``high``; else
    ``InvalidInput`` naming ``field``. Text is ASCII digits only (no "١٢", "²", "+", "_",
    spaces or exponent), after a "-" only when ``low`` is negative; leading zeros are fine,
    and text longer than the bounds is refused before ``int()`` reads it."""
    if value.__class__ is int and low <= value <= high:
        return value
    number, text = value, isinstance(value, str)
    if text:
        negative = low < 0 and value[:1] == "-"
        digits = value[1:] if negative else value
        if digits.isascii() and digits.isdigit():
            digits = digits.lstrip("0") or "0"
            if len(digits) <= len(str(max(-low, high))):
                number = -int(digits) if negative else int(digits)
    if isinstance(number, int) and not isinstance(number, bool) and low <= number <= high:
        return int(number)
    how = (" in ASCII digits" + (" (- before a negative one)" if low < 0 else "")) if text else ""
    raise InvalidInput(field, f"expected an integer from {low} to {high}{how}, got {_shown(value)}")


def _shown(value: Any) -> str:
    """``repr(value)`` in at most 40 characters, for a message (an int past 4,300 digits has
    no repr)."""
    if isinstance(value, int) and abs(value).bit_length() > 4096:
        return "an integer of over 1,000 digits"
    text = repr(value[:41] if isinstance(value, str) else value)
    return text if len(text) <= 40 else text[:39] + "…"


def _lone_surrogate(text: str) -> str | None:
    """The first lone surrogate in ``text``, else None (quick for ASCII and valid text)."""
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return text[exc.start]
    return None


def escape_lone_surrogates(text: str) -> str:
    """``text`` as UTF-8 can carry it: each lone surrogate (JSON "\\ud800" decodes to one;
    no UTF-8 encoder takes it) as its backslash escape; other text as it is."""
    if _lone_surrogate(text) is None:
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _join(where: str, key: Any) -> str:
    if isinstance(key, int):
        return f"{where}[{key}]"
    return f"{where}.{key}" if where else str(key)


def _probe(raw: bytes | bytearray | memoryview | str) -> bytes | bytearray:
    if isinstance(raw, str):
        return raw.encode("utf-8", "surrogatepass")
    return raw if isinstance(raw, (bytes, bytearray)) else bytes(raw)


def _has_surrogate_escape(probe: bytes | bytearray) -> bool:
    # A lone surrogate can only come from a \uD800-\uDFFF escape (its raw bytes are not UTF-8).
    return b"\\ud" in probe or b"\\uD" in probe


# What JSON text holds when it may decode to a non-finite float (≥ 10**309: integer digits plus
# exponent ≥ 309): NaN / Infinity, 210 digits in a row, or a number token (at the start or after
# ":", "," or "[") with a 3-digit or longer exponent; not text in strings (a traceparent's "5e3").
_MAYBE_NON_FINITE = re.compile(
    rb"NaN|Infinity|[0-9]{210}|(?:^|[:,\[])[ \t\r\n]*-?[0-9]+(?:\.[0-9]+)?[eE][-+]?[0-9]{3}"
)


def check_text(
    value: Any, field: str = "", *, raw: bytes | bytearray | memoryview | str | None = None
) -> None:
    """``InvalidText`` naming the field if a string anywhere in ``value`` (keys too) holds a
    lone surrogate; ``raw``, its JSON text, spares the walk when it has no ``\\ud``."""
    if raw is not None and not _has_surrogate_escape(_probe(raw)):
        return
    _walk(value, field, numbers=False)


def check_json_input(
    value: Any, field: str = "", *, raw: bytes | bytearray | memoryview | str | None = None
) -> None:
    """Every JSON entry's check (REST, MCP, A2A): ``InvalidText`` (a lone surrogate) or
    ``InvalidNumber`` (NaN, an infinity) naming the first such field; ``raw``, the JSON text,
    spares the walk when it can hold neither."""
    if raw is not None:
        probe = _probe(raw)
        if not _has_surrogate_escape(probe) and _MAYBE_NON_FINITE.search(probe) is None:
            return
    _walk(value, field, numbers=True)


def _walk(value: Any, field: str, *, numbers: bool) -> None:
    # Depth first in document order, and iterative, so nesting as deep as the JSON decoder
    # allows is fine: ``reading`` holds the open containers' (key, child) iterators, ``keys``
    # the place of the value at hand, spelt out only for the value that is refused.
    reading: list[Iterator[tuple[Any, Any]]] = []
    keys: list[Any] = []
    item = value
    while True:
        if isinstance(item, str):
            if not item.isascii() and (bad := _lone_surrogate(item)) is not None:
                raise InvalidText(reduce(_join, keys, field), bad)
        elif isinstance(item, (list, tuple)):
            reading.append(enumerate(item))
            keys.append(None)
        elif is_mapping(item):
            for key in item:
                if isinstance(key, str) and not key.isascii():
                    if (bad := _lone_surrogate(key)) is not None:
                        where = reduce(_join, keys, field)
                        raise InvalidText(f"{where} (a key)" if where else "a key", bad)
            reading.append(iter(item.items()))
            keys.append(None)
        elif numbers and isinstance(item, float) and not math.isfinite(item):
            raise InvalidNumber(reduce(_join, keys, field), item)
        while reading:  # the next value: the innermost open container's next child that is not
            for key, item in reading[-1]:  # ASCII text or an integer (most are: none is refused)
                if not ((item.__class__ is str and item.isascii()) or item.__class__ is int):
                    keys[-1] = key
                    break
            else:
                reading.pop()
                keys.pop()
                continue
            break
        else:
            return
