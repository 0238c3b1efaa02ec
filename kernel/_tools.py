"""Tool descriptors, calls, results and the namespaced registry."""

from __future__ import annotations

import functools
import json
import re
import string
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from ._errors import RecursionLimitExceeded, ToolNameCollision, ToolNotFound, is_mapping
from ._frozen import frozen_builder
from ._jsonrpc import make_encoder
from ._spans import NO_SPAN
from ._trace import TraceContext, new_call_id

if TYPE_CHECKING:  # pragma: no cover
    from ._api import KernelAPI

# MCP 2025-11-25: tool names SHOULD be 1-128 chars of A-Z a-z 0-9 _ - .
WIRE_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,128}$")
_NOT_WIRE = re.compile(r"[^a-z0-9_]")

TAINT_UNTRUSTED = "untrusted"

EMPTY_OBJECT_SCHEMA: Mapping[str, Any] = {"type": "object", "properties": {}}


def normalise_name(name: str) -> str:
    """Lowercase, ``-`` and any other character outside ``[a-z0-9_]`` become ``_``."""
    return _NOT_WIRE.sub("_", name.strip().lower())


def namespaced(server: str, tool: str) -> str:
    """The registry name of ``tool`` from MCP server ``server``: ``mcp_{server}_{tool}``."""
    return f"mcp_{normalise_name(server)}_{normalise_name(tool)}"


def agent_tool_name(agent: str) -> str:
    """The tool through which other agents ask ``agent``: ``agent_{name}``."""
    return f"agent_{normalise_name(agent)}"


@attrs.frozen
class ToolSpec:
    """The MCP ``Tool`` fields plus ``owner`` (``tools``, ``mcp:github``), whence policy
    patterns' ``qualified_name`` (``fs:read_file``); ``untrusted`` taints its results."""

    name: str
    description: str = ""
    input_schema: Mapping[str, Any] = attrs.field(factory=lambda: dict(EMPTY_OBJECT_SCHEMA))
    title: str | None = None
    output_schema: Mapping[str, Any] | None = None
    annotations: Mapping[str, Any] | None = None
    owner: str = "tools"
    original_name: str | None = None
    untrusted: bool = False
    timeout_s: float | None = None

    @property
    def qualified_name(self) -> str:
        return f"{self.owner}:{self.original_name or self.name}"

    def to_mcp(self) -> dict[str, Any]:
        """The MCP ``Tool`` object for ``tools/list``."""
        out: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "inputSchema": dict(self.input_schema),
        }
        if self.title:
            out["title"] = self.title
        if self.output_schema is not None:
            out["outputSchema"] = dict(self.output_schema)
        if self.annotations:
            out["annotations"] = dict(self.annotations)
        return out


@attrs.frozen
class ToolCall:
    """A request to run a tool, as the model or a peer made it."""

    name: str
    arguments: Mapping[str, Any] = attrs.field(factory=dict)
    id: str = attrs.field(factory=new_call_id)
    caller: str = ""
    trace: TraceContext | None = None
    # Undecodable model arguments: the call fails with this result (the model can correct it).
    arguments_error: str | None = None


@attrs.frozen
class ToolResult:
    """MCP-shaped result: content blocks, optional structured content, error flag, taint."""

    content: tuple[Mapping[str, Any], ...] = ()
    structured_content: Mapping[str, Any] | None = None
    is_error: bool = False
    taint: frozenset[str] = frozenset()

    @classmethod
    def text(cls, text: str, *, is_error: bool = False, taint: Iterable[str] = ()) -> ToolResult:
        return cls(({"type": "text", "text": text},), None, is_error, frozenset(taint))

    @classmethod
    def error(cls, message: str) -> ToolResult:
        return cls.text(message, is_error=True)

    def as_text(self) -> str:
        """All text content joined; other blocks summarised."""
        parts = []
        for block in self.content:
            if block.get("type") == "text":
                parts.append(str(block.get("text", "")))
            elif block.get("type") == "resource" and isinstance(block.get("resource"), Mapping):
                resource = block["resource"]
                if "text" in resource:
                    parts.append(str(resource["text"]))
                else:
                    parts.append(
                        f"[resource {resource.get('uri', '')} "
                        f"({resource.get('mimeType', 'binary')})]"
                    )
            else:
                parts.append(f"[{block.get('type', 'unknown')} content]")
        if not parts and self.structured_content is not None:
            parts.append(json.dumps(self.structured_content, ensure_ascii=False))
        return "\n".join(parts)

    @classmethod
    def from_mcp(cls, result: Mapping[str, Any]) -> ToolResult:
        """The ToolResult of an MCP ``CallToolResult`` (content blocks that are not objects
        are dropped); raises RecursionLimitExceeded for a call refused at the depth limit."""
        is_error = bool(result.get("isError", False))
        if is_error:
            tripped = RecursionLimitExceeded.from_mcp_result(result)
            if tripped is not None:
                raise tripped
        blocks = result.get("content") or ()
        for block in blocks:
            if not is_mapping(block):
                blocks = [b for b in blocks if is_mapping(b)]
                break
        structured = result.get("structuredContent")
        if structured is not None and not is_mapping(structured):
            structured = {"result": structured}
        return _tool_result(tuple(blocks), structured, is_error, frozenset())

    def with_taint(self, *labels: str) -> ToolResult:
        return attrs.evolve(self, taint=self.taint | frozenset(labels))

    def redacted(self, secrets: Iterable[str]) -> ToolResult:
        """This result with each of ``secrets`` replaced in its content and structured
        content (see ``redact``)."""
        try:
            content = redact(self.content, secrets)
            structured = redact(self.structured_content, secrets)
        except RecursionError:
            return ToolResult.error(
                "the tool's result is nested too deeply to check it for credentials"
            )
        if content is self.content and structured is self.structured_content:
            return self
        return _tool_result(content, structured, self.is_error, self.taint)

    def to_mcp(self) -> dict[str, Any]:
        """The MCP ``CallToolResult`` object."""
        out: dict[str, Any] = {"content": [dict(b) for b in self.content], "isError": self.is_error}
        if self.structured_content is not None:
            out["structuredContent"] = dict(self.structured_content)
        return out


_tool_result = frozen_builder(ToolResult)  # content, structured_content, is_error, taint

REDACTED = "[redacted]"
# The patterns ``redact`` looks for: of the literal forms, of the percent-encoded ones (if any).
_Found = tuple[re.Pattern[str], re.Pattern[str] | None]


@functools.lru_cache(maxsize=256)  # a tool's secrets are the same on every call
def _needles(
    secrets: tuple[str, ...],
) -> tuple[_Found | None, tuple[str, ...], re.Pattern[str] | None]:
    """The patterns of ``secrets`` (of 4 characters or more) in every form ``redact`` knows:
    literal, percent-encoded (None: no secret); each literal form as it reads inside a JSON
    string; and the pattern of their percent-encoded forms inside a JSON string (None: no
    secret has one)."""
    given = {s for s in secrets if len(s) >= 4}
    forms = set(given)
    encoded: list[tuple[list[str], str]] = []
    for secret in given:
        forms |= {_utf8(secret).decode("utf-8", "replace"), secret.replace("/", "\\/")}
        forms |= {json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1]}
        shown = repr(secret + "'\"")[1:-4]  # as Python's repr (a log's %r) writes it, "'" escaped
        forms |= {shown, shown.replace("\\'", "'")}
        if "\n" in secret:  # a PEM key, printed line by line: no single line holds it all
            forms |= {line for line in map(str.strip, secret.splitlines()) if len(line) >= 8}
        if pattern := _percent_encoded(secret):
            encoded.append(pattern)
    escaped = tuple(json.dumps(n, ensure_ascii=False)[1:-1] for n in forms)
    # Two patterns: in one trie a literal form's branch and a percent-encoded one's both take
    # a "/" as itself, and the first to match wins, however shorter (see _redact_text).
    literal = _trie_pattern([[re.escape(c) for c in n] for n in forms])
    found = None if literal is None else (literal, _trie_pattern([p[0] for p in encoded]))
    in_json = re.compile("|".join(p[1] for p in encoded)) if encoded else None
    return found, escaped, in_json


def _trie_pattern(forms: list[list[str]]) -> re.Pattern[str] | None:
    """One pattern matching any of ``forms`` (each a sequence of patterns, one a character;
    None: no form), the longest where several start at one place when no two parts at a fork
    match the same text (as of literal forms, a character each); shared beginnings are tried
    once, so a text is read in one pass however many forms there are."""
    trie: dict[str, dict] = {}
    for form in sorted(forms, key=len, reverse=True):  # a longer form's branch is tried first
        node = trie
        for part in form:
            node = node.setdefault(part, {})
        node[""] = {}

    def alternatives(node: dict[str, dict]) -> str:
        branches = []
        for part, rest in node.items():
            if part:
                chain = [part]  # a run without a fork, in a loop: a PEM key is a long one
                while len(rest) == 1 and "" not in rest:
                    ((part, rest),) = rest.items()
                    chain.append(part)
                branches.append("".join(chain) + alternatives(rest))
        if not branches:
            return ""
        either = branches[0] if len(branches) == 1 else f"(?:{'|'.join(branches)})"
        return f"(?:{either})?" if "" in node else either

    return re.compile(alternatives(trie)) if trie else None


def _utf8(text: str) -> bytes:
    """``text``'s bytes: a lone surrogate from the environment (an undecodable byte, kept by
    ``surrogateescape``) as that byte, any other surrogate as ``surrogatepass`` writes it."""
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a surrogate no byte maps to
        return text.encode("utf-8", "surrogatepass")


_KEPT_BY_EVERY_ENCODER = frozenset(string.ascii_letters + string.digits + "-._")


def _percent_encoded(secret: str) -> tuple[list[str], str] | None:
    """The pattern of ``secret`` percent-encoded by any encoder (each character past letters,
    digits and ``-._`` as itself or its UTF-8 bytes' ``%XX``, in either case; encoders
    differ on which they keep: ``/``, JavaScript's ``!'()*``), as text (one pattern a
    character) and inside a JSON string; None when every character is kept by every encoder."""
    if all(c in _KEPT_BY_EVERY_ENCODER for c in secret):
        return None
    as_text, in_json = [], []
    for char in secret:
        if char in _KEPT_BY_EVERY_ENCODER:
            as_text.append(re.escape(char))
            in_json.append(re.escape(char))
            continue
        hex_digits = "".join(f"%{b:02X}" for b in _utf8(char))
        escapes = "".join(f"[{c}{c.lower()}]" if c.isalpha() else re.escape(c) for c in hex_digits)
        # The escape first: "%" as itself would match the head of "%25" and end there.
        as_text.append(f"(?:{escapes}|{re.escape(char)})")
        json_char = json.dumps(char, ensure_ascii=False)[1:-1]
        in_json.append(f"(?:{escapes}|{re.escape(json_char)})")
    return as_text, "".join(in_json)


# The longest form ``redact`` finds of one character of a secret: an astral character
# JSON-escaped as a surrogate pair (``\\ud83d\\ude00``), or percent-encoded as 4 bytes.
_LONGEST_FORM_PER_CHAR = 12


def redacted_head(text: str | bytes, secrets: Iterable[str], limit: int) -> str:
    """The first ``limit`` characters of ``text`` (bytes read as UTF-8) once ``secrets`` are
    redacted (see ``redact``), reading only as far as that needs: a secret the cut goes
    through leaves no head behind."""
    secrets = tuple(secrets)
    margin = _LONGEST_FORM_PER_CHAR * max(map(len, secrets), default=0)
    end = limit + margin
    while True:
        head = text[:end]
        shown = redact(
            head.decode("utf-8", "replace") if isinstance(head, bytes) else head, secrets
        )
        # A secret cut at ``end`` starts within ``margin`` of the end of ``shown``; secrets
        # redacted before it may have shortened ``shown``, so read on until they have not.
        if end >= len(text) or len(shown) >= limit + margin:
            return shown[:limit]
        end *= 2


def _redact_text(text: str, found: _Found) -> str:
    """``text`` with each stretch a pattern of ``found`` matches (at every place one starts),
    overlapping ones as one, replaced by ``[redacted]``: two secrets that overlap leave no
    piece of either behind."""
    literal, percent = found
    matched: list[tuple[int, int]] = []
    # Without a "%", what a percent-encoded form matches is a secret as itself: a literal form.
    for pattern in (literal, percent) if percent is not None and "%" in text else (literal,):
        match = pattern.search(text)
        while match is not None:
            matched.append(match.span())
            match = pattern.search(text, match.start() + 1)
    if not matched:
        return text
    spans: list[list[int]] = []
    for start, end in sorted(matched):
        if spans and start < spans[-1][1]:
            spans[-1][1] = max(spans[-1][1], end)
        else:
            spans.append([start, end])
    pieces, kept = [], 0
    for start, end in spans:
        pieces += (text[kept:start], REDACTED)
        kept = end
    pieces.append(text[kept:])
    return "".join(pieces)


def _as_json(item: Any) -> Any:
    return dict(item) if isinstance(item, Mapping) else None  # what walk leaves: null


_encode = make_encoder(default=_as_json, allow_nan=True)


def redact(value: Any, secrets: Iterable[str]) -> Any:
    """``value`` with each of ``secrets`` (those of 4 characters or more) replaced by
    ``[redacted]`` in every string in it, keys included, at any depth, also as other text
    may hold it: JSON-escaped (``\\"``, ``\\uXXXX``, ``\\/``), as Python's ``repr`` writes
    it, percent-encoded (by any encoder: whichever characters, either case), with its
    undecodable bytes read as U+FFFD, and each line (of 8 characters or more) of one that
    spans lines; ``value`` itself when none occurs. Mappings come back as dicts, lists and
    tuples as their kind; nesting past Python's recursion limit raises ``RecursionError``."""
    found, escaped, encoded_in_json = _needles(tuple(secrets))
    if found is None:
        return value
    if not isinstance(value, str):
        # The usual answer holds none: JSON's C encoder says so far quicker than a walk.
        # Escaping is per character, so a string holding a secret holds it escaped.
        try:
            text = _encode(value)
        except (TypeError, ValueError):  # keys JSON cannot write, huge ints: walk it all
            text = None
        if (
            text is not None
            and not any(n in text for n in escaped)
            and not (encoded_in_json and encoded_in_json.search(text))
        ):
            return value

    def walk(item: Any) -> Any:
        if isinstance(item, str):
            return _redact_text(item, found)
        if isinstance(item, Mapping):
            pairs = [(walk(k), walk(v)) for k, v in item.items()]
            if all(a is k and b is v for (a, b), (k, v) in zip(pairs, item.items(), strict=True)):
                return item
            return dict(pairs)
        if isinstance(item, (list, tuple)):
            items = [walk(v) for v in item]
            if all(a is b for a, b in zip(items, item, strict=True)):
                return item
            return type(item)(items) if type(item) in (list, tuple) else items
        return item

    return walk(value)


@attrs.frozen
class ToolContext:
    """What a running tool may know about its caller and its sandbox."""

    agent: str
    workspace: Path
    sandbox: str = "sandbox"  # "sandbox" | "read-only" | "rwx"
    trace: TraceContext | None = None
    env_allowlist: tuple[str, ...] = ()
    timeout_s: float = 60.0
    max_output_chars: int = 50_000
    # The kernel, for a tool that reaches it (e.g. to ask an agent); None outside a kernel.
    kernel: KernelAPI | None = attrs.field(default=None, eq=False, repr=False)
    # The agent's ``Outputs`` (handed over beside its answer); None outside an agent's run.
    outputs: Any = attrs.field(default=None, eq=False, repr=False)
    # The call's ``Span`` (``NO_SPAN`` untraced): a tool reaching a peer ``set``s ``peer_url``.
    span: Any = attrs.field(default=NO_SPAN, eq=False, repr=False)


ToolHandler = Callable[[ToolCall, ToolContext], Awaitable[ToolResult]]


def _secrets(value: Iterable[str]) -> tuple[str, ...]:
    if isinstance(value, str):  # its characters would be taken for secrets, and ignored
        raise TypeError("Tool.secrets: expected a list of strings, got one string")
    secrets = tuple(value)
    for index, secret in enumerate(secrets):
        if not isinstance(secret, str):  # named by type only: it may be a credential
            raise TypeError(
                f"Tool.secrets[{index}]: expected a string, got {type(secret).__name__} "
                "(leave out a credential that is not set)"
            )
    return secrets


@attrs.frozen
class Tool:
    """A descriptor a plugin returns from ``roost_tools``: the spec and its async handler."""

    spec: ToolSpec
    handler: ToolHandler = attrs.field(eq=False, repr=False)
    # Credentials the tool sends to a peer (an API key, an Authorization header's value):
    # the kernel takes them out of the tool's results, so that a peer echoing one in an
    # error does not hand it to the model, the audit trail or the agent's callers.
    secrets: tuple[str, ...] = attrs.field(default=(), eq=False, repr=False, converter=_secrets)


class ToolRegistry:
    """Every tool the kernel knows, by registry name (``ToolSpec.original_name`` maps a
    namespaced name back to the one its provider knows it by)."""

    def __init__(self) -> None:
        self._tools: dict[str, Tool] = {}
        self.version = 0
        """Bumped on every change, so that views built from the registry can be cached."""

    def register(self, tool: Tool) -> None:
        name = tool.spec.name
        if not WIRE_NAME.fullmatch(name):
            raise ToolNameCollision(
                f"tool name {name!r} from {tool.spec.owner} is not a valid MCP tool name "
                "(1-128 characters of A-Z a-z 0-9 _ - .)"
            )
        existing = self._tools.get(name)
        if existing is not None:
            raise ToolNameCollision(
                f"tool {name!r} from {tool.spec.owner} collides with the one from "
                f"{existing.spec.owner} ({existing.spec.qualified_name}); rename one of them "
                "or disable a plugin"
            )
        self._tools[name] = tool
        self.version += 1

    def unregister(self, name: str) -> None:
        if self._tools.pop(name, None) is not None:
            self.version += 1

    def get(self, name: str) -> Tool:
        try:
            return self._tools[name]
        except KeyError:
            raise ToolNotFound(name, list(self._tools)) from None

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    def specs(self) -> list[ToolSpec]:
        return [t.spec for t in sorted(self._tools.values(), key=lambda t: t.spec.name)]
