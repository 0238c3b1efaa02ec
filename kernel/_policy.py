"""Tool-call policy: capabilities, exposure, argument validation, truncation, loop guard, taint.

Pure and synchronous, called around each tool call. Patterns (capabilities, exposure,
timeout overrides) are case-sensitive ``fnmatch`` globs on a tool's registry name
(``read``) or its plugin-qualified name (``tools:bash``, ``mcp:github:create_issue``).
"""

from __future__ import annotations

import collections
import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from fnmatch import fnmatchcase
from functools import reduce
from typing import TYPE_CHECKING, Any

import attrs

if TYPE_CHECKING:
    import jsonschema

from ._errors import (
    ConfigError,
    LoopDetected,
    TaintViolation,
    ToolArgumentsInvalid,
    ToolDenied,
    ToolError,
    _join,
    _positive_int,
    _shown,
    is_mapping,
    json_pointer,
    number_setting,
)
from ._errors import json_type_name as _json_type
from ._tools import ToolCall, ToolResult, ToolSpec

TRUNCATION_MARKER = "\n[output truncated]"
DEFAULT_MAX_OUTPUT_CHARS = 50_000
DEFAULT_TOOL_TIMEOUT_S = 60.0
TAINT_POLICIES = ("block", "warn", "allow")
DEFAULT_TAINT_SINKS = ("bash", "write", "edit")
SOURCE_LABEL_PREFIX = "source:"
_SCAN_CHUNK = 65_536  # characters of an argument indexed at a time by TaintTracker


class ToolSchemaInvalid(ToolError, code="tool_schema_invalid"):
    """A tool's own ``inputSchema`` is not a valid JSON Schema: a bug in the tool's provider."""


# ---- Pattern matching shared by capabilities, exposure and timeout overrides ---------------


def _patterns(field: str) -> Any:
    def convert(value: Any) -> tuple[str, ...]:
        if value is None:
            return ()
        if isinstance(value, str):
            raise ConfigError(
                f"{field}: expected a list of glob patterns, got the string {value!r}; "
                f'write it as ["{value}"]'
            )
        out = []
        for i, item in enumerate(value):
            if not isinstance(item, str) or not item.strip():
                raise ConfigError(
                    f"{field}[{i}]: expected a non-empty glob pattern string such as 'read' or "
                    f"'mcp:github:*', got {item!r}"
                )
            out.append(item.strip())
        return tuple(out)

    return attrs.field(default=(), converter=convert)


def matches(spec: ToolSpec, pattern: str) -> bool:
    """True when ``pattern`` matches the registry name or the qualified name of ``spec``."""
    return fnmatchcase(spec.name, pattern) or fnmatchcase(spec.qualified_name, pattern)


def _any_match(spec: ToolSpec, patterns: Iterable[str]) -> bool:
    return any(matches(spec, p) for p in patterns)


def _names(spec: ToolSpec) -> str:
    if spec.qualified_name == spec.name:
        return repr(spec.name)
    return f"{spec.name!r} ({spec.qualified_name})"


# ---- Capabilities and exposure -------------------------------------------------------------


@attrs.frozen
class Capabilities:
    """Which tools an agent may call: glob patterns; empty allows nothing, ``"*"`` all."""

    patterns: tuple[str, ...] = _patterns("capabilities.tools")
    agent: str = ""  # only used in error messages

    def allows(self, spec: ToolSpec) -> bool:
        """True when some pattern matches the tool's registry or qualified name."""
        return _any_match(spec, self.patterns)

    def check(self, spec: ToolSpec, *, agent: str = "") -> None:
        """Raise ``ToolDenied`` unless the tool is allowed, saying how to allow it."""
        if self.allows(spec):
            return
        agent = agent or self.agent
        who = f"agent {agent!r}" if agent else "this agent"
        allowed = ", ".join(repr(p) for p in self.patterns) if self.patterns else "nothing"
        raise ToolDenied(
            f"{who} may not call tool {_names(spec)}: its capabilities.tools allows {allowed}; "
            f"add {spec.name!r} (or a pattern such as '{spec.owner}:*') to "
            '"capabilities": {"tools": [...]} in its agent.json'
        )


@attrs.frozen
class Exposure:
    """Which tools an agent offers to others over MCP/A2A: deny by default, private wins."""

    expose: tuple[str, ...] = _patterns("expose_tools")
    private: tuple[str, ...] = _patterns("private_tools")

    def is_exposed(self, spec: ToolSpec) -> bool:
        """True when an ``expose`` pattern matches and no ``private`` pattern does."""
        return not _any_match(spec, self.private) and _any_match(spec, self.expose)


# ---- Argument validation -------------------------------------------------------------------

_VALIDATOR_CACHE_SIZE = 512
_validators: collections.OrderedDict[str, jsonschema.Draft202012Validator] = (
    collections.OrderedDict()
)
_MAX_REPORTED_ERRORS = 3
_MAX_ERROR_MESSAGE = 300


def _validator_for(spec: ToolSpec) -> jsonschema.Draft202012Validator:
    """The (cached) validator of ``spec``'s schema; ToolSchemaInvalid if it is no schema."""
    schema = spec.input_schema
    key = json.dumps(schema, sort_keys=True, default=repr)
    cached = _validators.get(key)
    if cached is not None:
        _validators.move_to_end(key)
        return cached
    if not isinstance(schema, Mapping):
        what = f"an invalid inputSchema: expected a JSON object, got {type(schema).__name__}"
        raise _schema_invalid(spec, what)
    import jsonschema  # here, not at the top: slow to import, and most starts never need it

    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        what = f"an invalid inputSchema at {json_pointer(exc.absolute_path)}: {_clip(exc.message)}"
        raise _schema_invalid(spec, what) from None
    validator = jsonschema.Draft202012Validator(schema)
    _validators[key] = validator
    if len(_validators) > _VALIDATOR_CACHE_SIZE:
        _validators.popitem(last=False)
    return validator


def _schema_invalid(spec: ToolSpec, what: str) -> ToolSchemaInvalid:
    return ToolSchemaInvalid(
        f"tool {_names(spec)} has {what}; this is a bug in {spec.owner!r}, not in your arguments"
    )


def _clip(text: str, limit: int = _MAX_ERROR_MESSAGE) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def argument_check(spec: ToolSpec) -> Callable[[Any], bool] | None:
    """Its validator's ``is_valid`` (False: ``validate_arguments`` says why); None: bad schema."""
    try:
        return _validator_for(spec).is_valid
    except ToolSchemaInvalid:
        return None


def validate_arguments(spec: ToolSpec, arguments: Any) -> None:
    """Check ``arguments`` against ``spec.input_schema``: ``ToolArgumentsInvalid`` naming
    the path of up to three problems; ``ToolSchemaInvalid`` if the schema is broken."""
    if not is_mapping(arguments):
        raise ToolArgumentsInvalid(
            f"arguments of tool {spec.name!r} must be a JSON object, got "
            f"{_json_type(arguments)}; pass the parameters by name as in its inputSchema"
        )
    validator = _validator_for(spec)
    import referencing.exceptions  # loaded with jsonschema by _validator_for

    try:
        errors = sorted(
            validator.iter_errors(arguments),
            key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path)), e.message),
        )
    except referencing.exceptions.Unresolvable as exc:
        what = f"an inputSchema with an unresolvable reference ({exc})"
        raise _schema_invalid(spec, what) from None
    except Exception as exc:  # a schema the metaschema accepts can still fail to apply
        why = f"{type(exc).__name__}: {_clip(str(exc))}"
        raise _schema_invalid(spec, f"an inputSchema that cannot be applied ({why})") from None
    if not errors:
        return
    shown = errors[:_MAX_REPORTED_ERRORS]
    lines = [f"{reduce(_join, e.absolute_path, 'arguments')}: {_clip(e.message)}" for e in shown]
    more = len(errors) - len(shown)
    if more:
        lines.append(f"(and {more} more)")
    raise ToolArgumentsInvalid(
        f"invalid arguments for tool {spec.name!r}: "
        + "; ".join(lines)
        + " — fix them to match the tool's inputSchema"
    )


# ---- Truncation ----------------------------------------------------------------------------


def _check_limit(limit: Any) -> int:
    if number_setting(limit, integer=True, closed=True) is None:
        raise ValueError(f"limit: expected a non-negative integer of characters, got {limit!r}")
    return limit


def truncate(text: str, limit: int = DEFAULT_MAX_OUTPUT_CHARS) -> str:
    """``text`` cut to at most ``limit`` characters, marker (``TRUNCATION_MARKER``) included."""
    limit = _check_limit(limit)
    if len(text) <= limit:
        return text
    keep = max(0, limit - len(TRUNCATION_MARKER))
    return text[:keep] + TRUNCATION_MARKER


def truncate_result(result: ToolResult, limit: int = DEFAULT_MAX_OUTPUT_CHARS) -> ToolResult:
    """``result`` with its text blocks cut to ``limit`` characters in all: the block that
    crosses it is cut and marked, later text dropped; other blocks are kept."""
    limit = _check_limit(limit)
    total = 0
    for block in result.content:
        if block.get("type") == "text":
            total += len(str(block.get("text", "")))
    if total <= limit:
        return result
    remaining = limit
    out: list[Mapping[str, Any]] = []
    cut = False
    for block in result.content:
        if block.get("type") != "text":
            out.append(block)
        elif not cut:
            text = str(block.get("text", ""))
            if len(text) <= remaining:
                out.append(block)
                remaining -= len(text)
            else:
                out.append({**block, "text": truncate(text, remaining)})
                cut = True
    return attrs.evolve(result, content=tuple(out))


# ---- Loop guard ----------------------------------------------------------------------------


def canonical_arguments(arguments: Any) -> str:
    """Canonical JSON of ``arguments`` (sorted keys, no spaces) for comparing calls."""
    return json.dumps(
        arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=repr
    )


class LoopGuard:
    """Stops a conversation repeating a call (name, canonical arguments) over ``max_repeats``
    times in a row or over ``max_in_window`` (default ``2 * max_repeats``: A, B, A, B cycles)
    in the last ``window``. Refused calls count too, so retrying one stays refused."""

    def __init__(
        self, max_repeats: int = 3, *, window: int = 12, max_in_window: int | None = None
    ) -> None:
        self.max_repeats = _positive_int(max_repeats, "loop guard max_repeats")
        self.window = max(_positive_int(window, "loop guard window"), max_repeats + 1)
        self.max_in_window = _positive_int(
            2 * max_repeats if max_in_window is None else max_in_window,
            "loop guard max_in_window",
        )
        self._recent: collections.deque[tuple[str, str]] = collections.deque(maxlen=self.window)

    def check(self, call: ToolCall) -> None:
        """Record ``call``; raise ``LoopDetected`` if it repeats too often."""
        key = (call.name, canonical_arguments(call.arguments))
        in_a_row = 0
        for previous in reversed(self._recent):
            if previous != key:
                break
            in_a_row += 1
        in_window = self._recent.count(key)
        self._recent.append(key)
        shown = _clip(key[1], 120)
        if in_a_row + 1 > self.max_repeats:
            raise LoopDetected(
                f"tool {call.name!r} was called {in_a_row + 1} times in a row with the same "
                f"arguments {shown} (limit {self.max_repeats}); the result will not change — "
                "use the result you already have, change the arguments, or answer the user"
            )
        if in_window + 1 > self.max_in_window:
            raise LoopDetected(
                f"tool {call.name!r} was called {in_window + 1} times with the same arguments "
                f"{shown} within the last {len(self._recent)} calls (limit {self.max_in_window}); "
                "this looks like a loop — use the results you have or try a different approach"
            )

    def reset(self) -> None:
        """Forget the history (e.g. when a new user turn starts)."""
        self._recent.clear()


def check_ping_pong(path: Sequence[str], max_alternations: int = 2) -> None:
    """Raise ``LoopDetected`` when ``path`` (the trace path, the agent about to be called
    last) ends in more than ``max_alternations`` steps of ``x, y, x, y``: with 2, ``A, B, A``
    passes and ``A, B, A, B`` is refused; ``A, B, C, A`` is left to the depth limit."""
    _positive_int(max_alternations, "max_alternations")
    hops = tuple(path)
    if len(hops) < 2 or hops[-1] == hops[-2]:
        return
    length = 2
    while length < len(hops) and hops[-length - 1] == hops[-length + 1]:
        length += 1
    alternations = length - 1
    if alternations > max_alternations:
        a, b = hops[-2], hops[-1]
        raise LoopDetected(
            f"agents {a!r} and {b!r} are calling each other back and forth "
            f"({alternations} alternations, limit {max_alternations}): "
            + " → ".join(hops[-length:])
            + f"; answer from what you have instead of asking {b!r} again"
        )


# ---- Taint tracking ------------------------------------------------------------------------


@attrs.frozen
class _TaintSource:
    text: str
    labels: frozenset[str]
    source: str
    call_id: str
    hashes: frozenset[int]  # hashes of sampled windows of ``text`` (see TaintTracker)


@attrs.frozen
class TaintMatch:
    """Where tainted data was found: the argument, the copied excerpt and its source."""

    argument: str
    excerpt: str
    labels: frozenset[str]
    source: str
    call_id: str


class TaintTracker:
    """Remembers text of tainted results and spots it passed on unchanged: a run of
    ``min_match`` characters (not only whitespace), or a whole short result of at least
    ``min_short_value``. Windows are indexed every ``step`` characters (a copied run of
    ``min_match + step - 1`` is always found); the newest ``max_chars`` are kept."""

    def __init__(
        self,
        *,
        min_match: int = 12,
        min_short_value: int = 6,
        step: int = 4,
        max_chars: int = 1_000_000,
    ) -> None:
        self.min_match = _positive_int(min_match, "taint tracker min_match")
        self.min_short_value = _positive_int(min_short_value, "taint tracker min_short_value")
        self.step = min(_positive_int(step, "taint tracker step"), min_match)
        self.max_chars = _positive_int(max_chars, "taint tracker max_chars")
        self._sources: collections.deque[_TaintSource] = collections.deque()
        self._chars = 0

    def __len__(self) -> int:
        return len(self._sources)

    def observe(self, result: ToolResult, *, source: str = "", call_id: str = "") -> None:
        """Record ``result`` if it carries taint labels; ``source`` names where it came from."""
        if not result.taint:
            return
        text = result.as_text()
        if not text.strip():
            return
        text = text[: self.max_chars]
        k = self.min_match
        hashes = frozenset(
            hash(text[i : i + k])
            for i in range(0, max(0, len(text) - k + 1), self.step)
            if not text[i : i + k].isspace()
        )
        labels = frozenset(result.taint)
        if not source:
            # The kernel labels results ``source:<qualified tool name>``; use that as the name.
            named = sorted(x.split(":", 1)[1] for x in labels if x.startswith(SOURCE_LABEL_PREFIX))
            source = ", ".join(named) or "a tool"
        self._sources.append(_TaintSource(text, labels, source, call_id, hashes))
        self._chars += len(text)
        while self._chars > self.max_chars and len(self._sources) > 1:
            self._chars -= len(self._sources.popleft().text)

    def _find(self, text: str, sources: Iterable[_TaintSource]) -> tuple[_TaintSource, str] | None:
        if not isinstance(text, str) or not text:
            return None
        sources = tuple(sources)
        k = self.min_match
        for src in sources:
            short = src.text.strip()
            if len(short) < k and len(short) >= self.min_short_value and short in text:
                return src, short
        long_sources = [src for src in sources if len(src.text.strip()) >= k]
        if not long_sources:
            return None
        # Chunks overlap by k - 1 characters so no window is missed; memory stays bounded.
        for chunk_start in range(0, max(1, len(text) - k + 1), _SCAN_CHUNK):
            chunk_end = min(len(text), chunk_start + _SCAN_CHUNK + k - 1)
            positions: dict[int, int] = {}
            for i in range(chunk_start, chunk_end - k + 1):
                positions.setdefault(hash(text[i : i + k]), i)
            for src in long_sources:
                for i in sorted(positions[h] for h in src.hashes.intersection(positions)):
                    window = text[i : i + k]
                    if window in src.text and not window.isspace():
                        return src, _extend(text, i, k, src.text)
        return None

    def taint_of(self, text: str) -> frozenset[str]:
        """The union of labels of every recorded source that ``text`` copies from."""
        labels: set[str] = set()
        for src in list(self._sources):
            if not src.labels <= labels and self._find(text, (src,)) is not None:
                labels |= src.labels
        return frozenset(labels)

    def matches(self, arguments: Any) -> Iterator[TaintMatch]:
        """Every string in ``arguments`` (nested too) that copies recorded tainted data."""
        for where, value in _strings(arguments, ""):
            found = self._find(value, self._sources)
            if found is not None:
                src, excerpt = found
                yield TaintMatch(where or "arguments", excerpt, src.labels, src.source, src.call_id)

    def check(
        self,
        call: ToolCall,
        *,
        sinks: Sequence[str] = DEFAULT_TAINT_SINKS,
        policy: str = "block",
    ) -> str | None:
        """If ``call`` is a sink (a glob in ``sinks``) and copies tainted data: ``block``
        raises ``TaintViolation``, ``warn`` returns the warning; else None."""
        if policy not in TAINT_POLICIES:
            raise ConfigError(
                f"taint.policy: expected one of {', '.join(TAINT_POLICIES)}, got {policy!r}"
            )
        if policy == "allow" or not any(fnmatchcase(call.name, s) for s in sinks):
            return None
        match = next(self.matches(call.arguments), None)
        if match is None:
            return None
        kinds = sorted(x for x in match.labels if not x.startswith(SOURCE_LABEL_PREFIX))
        labels = ", ".join(kinds) or "untrusted"
        origin = f"{match.source} result" + (f" of call {match.call_id}" if match.call_id else "")
        excerpt = _clip(match.excerpt, 80)
        message = (
            f"argument {match.argument!r} of {call.name} contains unchanged data from an "
            f"{labels} source ({origin}): {excerpt!r}; "
        )
        if policy == "block":
            raise TaintViolation(
                message + "the policy taint.policy=block refuses this — review the data and "
                "write the command yourself, or set taint.policy to 'warn' or 'allow'"
            )
        return message + "allowed because taint.policy=warn"

    def clear(self) -> None:
        """Forget every recorded source."""
        self._sources.clear()
        self._chars = 0


def _extend(text: str, start: int, k: int, source: str) -> str:
    """Grow the match ``text[start:start+k]`` both ways while it still occurs in ``source``."""

    def grow(lo: int, hi: int, direction: int) -> tuple[int, int]:
        step = 64
        while step:
            if direction > 0:
                nxt_lo, nxt_hi = lo, min(len(text), hi + step)
            else:
                nxt_lo, nxt_hi = max(0, lo - step), hi
            if (nxt_lo, nxt_hi) != (lo, hi) and text[nxt_lo:nxt_hi] in source:
                lo, hi = nxt_lo, nxt_hi
            else:
                step //= 2
        return lo, hi

    lo, hi = grow(start, start + k, +1)
    lo, hi = grow(lo, hi, -1)
    return text[lo:hi]


def _strings(value: Any, where: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        yield where, value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _strings(item, f"{where}.{key}" if where else str(key))
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _strings(item, f"{where}[{i}]")


# ---- Timeouts ------------------------------------------------------------------------------


def _seconds(value: Any, field: str) -> float:
    if (seconds := number_setting(value)) is None:
        raise ConfigError(
            f"{field}: expected a positive, finite number of seconds, got {_shown(value)}"
        )
    return seconds


def resolve_timeout(
    spec: ToolSpec,
    agent_default: float = DEFAULT_TOOL_TIMEOUT_S,
    overrides: Mapping[str, float] | None = None,
) -> float:
    """The timeout of a call to ``spec``: an override for its exact name, else the longest
    matching glob override, else the tool's ``timeout_s``, else ``agent_default``."""
    overrides = overrides or {}
    for key in (spec.name, spec.qualified_name):
        if key in overrides:
            return _seconds(overrides[key], f"tool timeout override {key!r}")
    globbed = (k for k in overrides if any(c in k for c in "*?[") and matches(spec, k))
    longest = max(globbed, key=len, default=None)  # the first of the longest
    if longest is not None:
        return _seconds(overrides[longest], f"tool timeout override {longest!r}")
    if spec.timeout_s is not None:
        return _seconds(spec.timeout_s, f"timeout_s of tool {spec.name!r}")
    return _seconds(agent_default, "default tool timeout")
