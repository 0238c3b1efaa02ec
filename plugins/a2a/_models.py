"""A2A data shapes: frozen attrs models of the 1.0 wire format, and converters to and from
the 0.3 shape (``kind`` fields, lowercase states) and the seed's 0.1 shape (``type`` parts,
``sessionId``).

Inside roost every object is a 1.0 model; ``*_from_json(obj, dialect)`` reads any of the
three shapes (raising ``A2AError`` -32602 that names the field) and ``*.to_json(dialect)``
writes one, or the 0.3 HTTP+JSON binding's proto JSON (``REST03``). Timestamps are ISO
8601 UTC with milliseconds, as the spec asks.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import attrs
from roost.kernel import HTTP_HEADER_VALUE, OutputPart, is_mapping, jsonrpc, uuid7
from roost.kernel import json_type_name as _jtype

V1 = "1.0"
V03 = "0.3"
V01 = "0.1"
# The 0.3 HTTP+JSON binding (its ``/v1/`` paths) speaks the 0.3 proto's JSON: 1.0's shapes
# but for a few (file and data parts, ``content``, ``final``, push configs; see _rest03).
REST03 = "0.3-rest"
_BARE_EVENTS = frozenset({V03, V01})  # stream events not wrapped as {"statusUpdate": ...}

# Operation → its JSON-RPC method in 1.0 and in 0.3 (0.1 adds its own send and stream).
_METHOD_NAMES = {
    "send": ("SendMessage", "message/send"),
    "stream": ("SendStreamingMessage", "message/stream"),
    "get": ("GetTask", "tasks/get"),
    "list": ("ListTasks", "tasks/list"),
    "cancel": ("CancelTask", "tasks/cancel"),
    "subscribe": ("SubscribeToTask", "tasks/resubscribe"),
    "push_set": ("CreateTaskPushNotificationConfig", "tasks/pushNotificationConfig/set"),
    "push_get": ("GetTaskPushNotificationConfig", "tasks/pushNotificationConfig/get"),
    "push_list": ("ListTaskPushNotificationConfigs", "tasks/pushNotificationConfig/list"),
    "push_delete": ("DeleteTaskPushNotificationConfig", "tasks/pushNotificationConfig/delete"),
    "card": ("GetExtendedAgentCard", "agent/getAuthenticatedExtendedCard"),
}
V1_METHODS = {v1: op for op, (v1, _) in _METHOD_NAMES.items()}  # JSON-RPC method → operation
V03_METHODS = {v03: op for op, (_, v03) in _METHOD_NAMES.items()}
V01_METHODS = {"tasks/send": "send", "tasks/sendSubscribe": "stream"}

# -- error codes (A2A 1.0 section 5.4 / JSON-RPC 2.0) --------------------------------------
PARSE_ERROR = jsonrpc.PARSE_ERROR
INVALID_REQUEST = jsonrpc.INVALID_REQUEST
METHOD_NOT_FOUND = jsonrpc.METHOD_NOT_FOUND
INVALID_PARAMS = jsonrpc.INVALID_PARAMS
INTERNAL_ERROR = jsonrpc.INTERNAL_ERROR
TASK_NOT_FOUND = -32001
TASK_NOT_CANCELABLE = -32002
PUSH_NOT_SUPPORTED = -32003
UNSUPPORTED_OPERATION = -32004
CONTENT_TYPE_NOT_SUPPORTED = -32005
INVALID_AGENT_RESPONSE = -32006
EXTENDED_CARD_NOT_CONFIGURED = -32007
EXTENSION_SUPPORT_REQUIRED = -32008
VERSION_NOT_SUPPORTED = -32009
# roost's own (JSON-RPC leaves -32000..-32099 to implementations): the depth breaker refused
# the call; the same code MCP uses for it.
RECURSION_LIMIT = jsonrpc.RECURSION_LIMIT
# A caller holds a2a.max_open_tasks_per_caller unfinished tasks: JSON-RPC's server error,
# as the daemon's own 429s on JSON-RPC routes; HTTP+JSON 429.
TOO_MANY_OPEN_TASKS = jsonrpc.SERVER_ERROR

_REASONS = {
    PARSE_ERROR: ("PARSE_ERROR", 400, "INVALID_ARGUMENT"),
    INVALID_REQUEST: ("INVALID_REQUEST", 400, "INVALID_ARGUMENT"),
    METHOD_NOT_FOUND: ("METHOD_NOT_FOUND", 404, "NOT_FOUND"),
    INVALID_PARAMS: ("INVALID_PARAMS", 400, "INVALID_ARGUMENT"),
    INTERNAL_ERROR: ("INTERNAL_ERROR", 500, "INTERNAL"),
    TASK_NOT_FOUND: ("TASK_NOT_FOUND", 404, "NOT_FOUND"),
    TASK_NOT_CANCELABLE: ("TASK_NOT_CANCELABLE", 409, "FAILED_PRECONDITION"),
    PUSH_NOT_SUPPORTED: ("PUSH_NOTIFICATION_NOT_SUPPORTED", 400, "UNIMPLEMENTED"),
    UNSUPPORTED_OPERATION: ("UNSUPPORTED_OPERATION", 400, "FAILED_PRECONDITION"),
    CONTENT_TYPE_NOT_SUPPORTED: ("CONTENT_TYPE_NOT_SUPPORTED", 415, "INVALID_ARGUMENT"),
    INVALID_AGENT_RESPONSE: ("INVALID_AGENT_RESPONSE", 502, "INTERNAL"),
    EXTENDED_CARD_NOT_CONFIGURED: (
        "EXTENDED_AGENT_CARD_NOT_CONFIGURED",
        400,
        "FAILED_PRECONDITION",
    ),
    EXTENSION_SUPPORT_REQUIRED: ("EXTENSION_SUPPORT_REQUIRED", 400, "FAILED_PRECONDITION"),
    VERSION_NOT_SUPPORTED: ("VERSION_NOT_SUPPORTED", 400, "FAILED_PRECONDITION"),
    RECURSION_LIMIT: ("RECURSION_LIMIT", 508, "RESOURCE_EXHAUSTED"),
    TOO_MANY_OPEN_TASKS: ("TOO_MANY_OPEN_TASKS", 429, "RESOURCE_EXHAUSTED"),
}


class A2AError(Exception):
    """An A2A protocol error: a JSON-RPC code, a message that says how to fix it, and for
    invalid params the offending fields (``[(field, problem), ...]``)."""

    rpc_id: Any = None  # the id of the JSON-RPC request it answers, once that was read
    dialect: str = V1  # the dialect of the JSON-RPC method it answers, once that was read

    def __init__(
        self,
        code: int,
        message: str,
        *,
        fields: Sequence[tuple[str, str]] = (),
        unavailable: bool = False,
        jsonrpc_status: int = 200,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.fields = tuple(fields)
        # A passing condition (storage failed, the agent is stopped): HTTP 503 UNAVAILABLE.
        self.unavailable = unavailable
        # The HTTP status of a JSON-RPC response carrying it: 200, unless the daemon answers
        # the condition with its own status on every binding (an unavailable agent: 503).
        self.jsonrpc_status = jsonrpc_status
        # The ErrorInfo reason (``TASK_NOT_FOUND``, ``UNAVAILABLE``, ...), the HTTP status and
        # the google.rpc code name of the HTTP+JSON binding.
        self.reason, self.http_status, self.status_name = (
            ("UNAVAILABLE", 503, "UNAVAILABLE")
            if unavailable
            else _REASONS.get(code, ("ERROR", 500, "INTERNAL"))
        )

    def details(self) -> list[dict[str, Any]]:
        """``google.rpc`` detail objects, as the 1.0 bindings carry them."""
        info: dict[str, Any] = {
            "@type": "type.googleapis.com/google.rpc.ErrorInfo",
            "reason": self.reason,
            "domain": "a2a-protocol.org",
            "metadata": {},
        }
        if not self.fields:
            return [info]
        info["metadata"] = {"errors": [{"field": f, "message": m} for f, m in self.fields]}
        violations = [{"field": f, "description": m} for f, m in self.fields]
        bad_request = "type.googleapis.com/google.rpc.BadRequest"
        return [info, {"@type": bad_request, "fieldViolations": violations}]

    def jsonrpc_error(self, dialect: str = V1) -> dict[str, Any]:
        """The ``error`` member of a JSON-RPC response."""
        out: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.code not in (PARSE_ERROR, METHOD_NOT_FOUND):
            if dialect == V1:
                out["data"] = self.details()
            elif self.fields:
                out["data"] = {"fields": [{"field": f, "message": m} for f, m in self.fields]}
        return out

    def rest_error(self) -> dict[str, Any]:
        """The body of an HTTP+JSON error response (google.rpc.Status shape)."""
        return {
            "error": {
                "code": self.http_status,
                "status": self.status_name,
                "message": self.message,
                "details": self.details(),
            }
        }

    def __repr__(self) -> str:
        return f"A2AError({self.code}, {self.message!r})"


def invalid(field: str, problem: str) -> A2AError:
    """A -32602 error naming ``field``."""
    return A2AError(INVALID_PARAMS, f"{field}: {problem}", fields=[(field, problem)])


def unavailable(message: str) -> A2AError:
    """-32603 (HTTP 503): the request could not be served now, e.g. storage failed (the
    message says why) or the agent is stopped; nothing of it was kept."""
    return A2AError(INTERNAL_ERROR, message, unavailable=True)


def push_not_supported() -> A2AError:
    """-32003: this server has push notifications off."""
    return A2AError(
        PUSH_NOT_SUPPORTED,
        "Push notifications are not supported: set a2a.push_notifications = true in roost.toml",
    )


SUBMITTED = "TASK_STATE_SUBMITTED"
WORKING = "TASK_STATE_WORKING"
INPUT_REQUIRED = "TASK_STATE_INPUT_REQUIRED"
AUTH_REQUIRED = "TASK_STATE_AUTH_REQUIRED"
COMPLETED = "TASK_STATE_COMPLETED"
CANCELED = "TASK_STATE_CANCELED"
FAILED = "TASK_STATE_FAILED"
REJECTED = "TASK_STATE_REJECTED"
TERMINAL_STATES = frozenset({COMPLETED, CANCELED, FAILED, REJECTED})
INTERRUPTED_STATES = frozenset({INPUT_REQUIRED, AUTH_REQUIRED})
SETTLED_STATES = TERMINAL_STATES | INTERRUPTED_STATES  # a run ends in one of them
_STATE_TO_OLD = {  # the 0.3 names: TASK_STATE_INPUT_REQUIRED → input-required, ...
    s: s.removeprefix("TASK_STATE_").lower().replace("_", "-")
    for s in (SUBMITTED, WORKING, *SETTLED_STATES)
} | {"TASK_STATE_UNSPECIFIED": "unknown"}
_OLD_TO_STATE = {v: k for k, v in _STATE_TO_OLD.items()} | {"cancelled": CANCELED}
ROLE_USER = "ROLE_USER"
ROLE_AGENT = "ROLE_AGENT"
_ROLE_TO_OLD = {ROLE_USER: "user", ROLE_AGENT: "agent"}
_OLD_TO_ROLE = {"user": ROLE_USER, "agent": ROLE_AGENT}


def state_from_json(value: Any, field: str = "state") -> str:
    """A task state in any dialect → the 1.0 enum name."""
    if isinstance(value, str):
        if value in _STATE_TO_OLD:
            return value
        if value.lower() in _OLD_TO_STATE:
            return _OLD_TO_STATE[value.lower()]
    raise invalid(field, f"unknown task state {value!r}; use e.g. TASK_STATE_WORKING or 'working'")


def state_to_json(state: str, dialect: str) -> str:
    if dialect == V1:
        return state
    if dialect == REST03:
        return "TASK_STATE_CANCELLED" if state == CANCELED else state
    return _STATE_TO_OLD.get(state, "unknown")


def now_iso() -> str:
    """Now as ISO 8601 UTC with milliseconds (``2026-01-02T03:04:05.678Z``)."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


# Time-ordered (version 7) UUIDs as text: task and context ids made one after another sort
# in that order, so the task store's indexes grow at their end (see kernel/_ids.py).
new_id = uuid7


def _obj(value: Any, field: str) -> Mapping[str, Any]:
    if not is_mapping(value):
        raise invalid(field, f"must be an object, got {_jtype(value)}")
    return value


def _opt_str(obj: Mapping[str, Any], key: str, field: str, *, max_len: int = 1024) -> str | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise invalid(field, f"must be a string, got {_jtype(value)}")
    if len(value) > max_len:
        raise invalid(field, f"must be at most {max_len} characters")
    return value


def _opt_meta(obj: Mapping[str, Any], key: str, field: str) -> Mapping[str, Any] | None:
    value = obj.get(key)
    return None if value is None else dict(_obj(value, field))


def _str_list(obj: Mapping[str, Any], key: str, field: str) -> tuple[str, ...]:
    value = obj.get(key)
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise invalid(field, "must be an array of strings")
    return tuple(value)


def _drop_none(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


@attrs.frozen
class Part:
    """One piece of content: exactly one of ``text``, ``raw`` (bytes, base64 on the wire),
    ``url`` (a file by reference) or ``data`` (any JSON value)."""

    text: str | None = None
    raw: bytes | None = None
    url: str | None = None
    data: Any = None
    has_data: bool = False
    filename: str | None = None
    media_type: str | None = None
    metadata: Mapping[str, Any] | None = None

    @property
    def kind(self) -> str:
        if self.text is not None:
            return "text"
        if self.has_data:
            return "data"
        return "file"

    def to_json(self, dialect: str = V1) -> dict[str, Any]:
        if dialect == V1:
            out: dict[str, Any] = {}
            if self.text is not None:
                out["text"] = self.text
            elif self.raw is not None:
                out["raw"] = base64.b64encode(self.raw).decode("ascii")
            elif self.url is not None:
                out["url"] = self.url
            else:
                out["data"] = self.data
            if self.metadata is not None:
                out["metadata"] = dict(self.metadata)
            if self.filename is not None:
                out["filename"] = self.filename
            if self.media_type is not None:
                out["mediaType"] = self.media_type
            return out
        rest = dialect == REST03  # no kind tag; fileWithBytes/fileWithUri; data in data
        out = {} if rest else {"kind" if dialect == V03 else "type": self.kind}
        if self.text is not None:
            out["text"] = self.text
        elif self.has_data:
            # 0.3's and 0.1's data must be an object (1.0 takes any JSON value): wrap the rest
            data = self.data if isinstance(self.data, Mapping) else {"value": self.data}
            out["data"] = {"data": data} if rest else data
        else:
            file: dict[str, Any] = {}
            if self.raw is not None:
                file["fileWithBytes" if rest else "bytes"] = base64.b64encode(self.raw).decode()
            else:
                file["fileWithUri" if rest else "uri"] = self.url
            if self.media_type is not None:
                file["mimeType"] = self.media_type
            if self.filename is not None:
                file["name"] = self.filename
            out["file"] = file
        if self.metadata is not None:
            out["metadata"] = dict(self.metadata)
        return out

    def as_text(self) -> str:
        """How this part reaches an agent (whose input is text): text as is, data as JSON,
        a file with its name, media type and content (base64) or URL — nothing dropped."""
        if self.text is not None:
            return self.text
        if self.has_data:
            return "```json\n" + json.dumps(self.data, ensure_ascii=False, indent=2) + "\n```"
        label = ", ".join(x for x in (self.filename, self.media_type) if x)
        label = f" ({label})" if label else ""
        if self.raw is not None:
            return f"[file{label}, base64]\n{base64.b64encode(self.raw).decode('ascii')}"
        return f"[file{label}] {self.url}"

    def summary(self) -> str:
        """How this part reads to a person (the CLI) or a model given a task's outcome:
        like ``as_text``, but a file's bytes are only counted."""
        if self.text is not None or self.has_data:
            return self.as_text()
        head = f"[{self.file_label()}]"
        return head if self.raw is not None else f"{head} {self.url}"

    def file_label(self) -> str:
        """A file part named for people and models: ``file <name> (<media type>, <n> bytes)``."""
        size = f"{len(self.raw)} bytes" if self.raw is not None else None
        label = ", ".join(x for x in (self.media_type, size) if x)
        return " ".join(x for x in ("file", self.filename, f"({label})" if label else None) if x)

    @classmethod
    def from_output(cls, part: OutputPart) -> Part:
        """An agent's output part (the ``artifact`` tool) as an A2A part."""
        return cls(**attrs.asdict(part, recurse=False))

    def to_output(self) -> OutputPart:
        """This part as an output an asking agent's run can hand on (``from_output`` back)."""
        return OutputPart(**{f.name: getattr(self, f.name) for f in attrs.fields(OutputPart)})


_URLSAFE_B64 = re.compile(r"[A-Za-z0-9_-]*={0,2}")


def _b64(value: Any, field: str) -> bytes:
    if not isinstance(value, str):
        raise invalid(field, f"must be a base64 string, got {_jtype(value)}")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        pass
    # The URL-safe alphabet (proto3 JSON accepts it), unpadded too — but nothing else:
    # the decoder itself would silently skip stray characters.
    if not _URLSAFE_B64.fullmatch(value):
        raise invalid(field, "is not valid base64")
    try:
        return base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))
    except (binascii.Error, ValueError):
        raise invalid(field, "is not valid base64") from None


def part_from_json(value: Any, field: str = "part") -> Part:
    """Read a part in the 1.0, 0.3 or 0.1 shape."""
    obj = _obj(value, field)
    meta = _opt_meta(obj, "metadata", f"{field}.metadata")
    tag = obj.get("kind", obj.get("type"))
    if tag is not None and tag not in ("text", "file", "data"):
        raise invalid(f"{field}.kind", f"unknown part kind {tag!r}; use text, file or data")
    if tag == "file" or (tag is None and is_mapping(obj.get("file"))):
        file = _obj(obj.get("file"), f"{field}.file")
        name = _opt_str(file, "name", f"{field}.file.name")
        mime = _opt_str(file, "mimeType", f"{field}.file.mimeType")
        if file.get("bytes") is not None:
            raw = _b64(file["bytes"], f"{field}.file.bytes")
            return Part(raw=raw, filename=name, media_type=mime, metadata=meta)
        uri = _opt_str(file, "uri", f"{field}.file.uri", max_len=8192)
        if not uri:
            raise invalid(f"{field}.file", "needs 'bytes' (base64) or 'uri'")
        return Part(url=uri, filename=name, media_type=mime, metadata=meta)
    filename = _opt_str(obj, "filename", f"{field}.filename")
    media = _opt_str(obj, "mediaType", f"{field}.mediaType")
    present = [k for k in ("text", "raw", "url", "data") if k in obj and obj[k] is not None]
    if tag == "text" and "text" not in present:
        raise invalid(f"{field}.text", "a text part needs a 'text' string")
    if tag == "data" and "data" not in present:
        raise invalid(f"{field}.data", "a data part needs 'data'")
    if not present:
        raise invalid(field, "a part needs exactly one of text, raw, url or data")
    if len(present) > 1:
        raise invalid(
            field, f"a part has exactly one of text, raw, url or data; got {', '.join(present)}"
        )
    key = present[0]
    if key == "text":
        text = obj["text"]
        if not isinstance(text, str):
            raise invalid(f"{field}.text", f"must be a string, got {_jtype(text)}")
        return Part(text=text, filename=filename or None, media_type=media or None, metadata=meta)
    if key == "raw":
        raw = _b64(obj["raw"], f"{field}.raw")
        return Part(raw=raw, filename=filename, media_type=media, metadata=meta)
    if key == "url":
        url = _opt_str(obj, "url", f"{field}.url", max_len=8192)
        return Part(url=url, filename=filename, media_type=media, metadata=meta)
    return Part(data=obj["data"], has_data=True, filename=filename, media_type=media, metadata=meta)


def _parts(value: Any, field: str, *, required: bool) -> tuple[Part, ...]:
    if value is None:
        if required:
            raise invalid(field, "is required: a list with at least one part")
        return ()
    if not isinstance(value, list):
        raise invalid(field, f"must be an array of parts, got {_jtype(value)}")
    if required and not value:
        raise invalid(field, "must contain at least one part")
    return tuple(part_from_json(p, f"{field}[{i}]") for i, p in enumerate(value))


@attrs.frozen
class Message:
    """One turn of a conversation."""

    message_id: str
    role: str
    parts: tuple[Part, ...]
    context_id: str | None = None
    task_id: str | None = None
    metadata: Mapping[str, Any] | None = None
    extensions: tuple[str, ...] = ()
    reference_task_ids: tuple[str, ...] = ()

    def text(self) -> str:
        """The message as the text an agent reads."""
        return "\n".join(p.as_text() for p in self.parts)

    def to_json(self, dialect: str = V1) -> dict[str, Any]:
        if dialect == V01:
            old = {"role": _ROLE_TO_OLD[self.role], "parts": [p.to_json(V01) for p in self.parts]}
            return old if self.metadata is None else {**old, "metadata": dict(self.metadata)}
        out: dict[str, Any] = {"messageId": self.message_id}
        if self.context_id:
            out["contextId"] = self.context_id
        if self.task_id:
            out["taskId"] = self.task_id
        out["role"] = self.role if dialect in (V1, REST03) else _ROLE_TO_OLD[self.role]
        out["parts"] = [p.to_json(dialect) for p in self.parts]
        if self.metadata is not None:
            out["metadata"] = dict(self.metadata)
        if self.extensions:
            out["extensions"] = list(self.extensions)
        if self.reference_task_ids:
            out["referenceTaskIds"] = list(self.reference_task_ids)
        if dialect == V03:
            out["kind"] = "message"
        elif dialect == REST03:
            out["content"] = out.pop("parts")
        return out


def message_from_json(value: Any, field: str = "message", *, dialect: str = V1) -> Message:
    """Read a message (any dialect). Every problem found is reported, each naming its field."""
    if not is_mapping(value):
        raise A2AError(
            INVALID_PARAMS,
            f"{field}: must be an object with messageId, role and parts, got {_jtype(value)}",
            fields=[
                (f"{field}.messageId", "Field is required."),
                (f"{field}.role", "Field is required."),
                (f"{field}.parts", "Field must contain at least one element."),
            ],
        )
    problems: list[tuple[str, str]] = []
    message_id = value.get("messageId")
    if message_id is None and dialect == V01:
        message_id = new_id()
    if message_id is None:
        problems.append((f"{field}.messageId", "Field is required."))
    elif not isinstance(message_id, str) or not message_id or len(message_id) > 256:
        problems.append(
            (f"{field}.messageId", "must be a non-empty string of at most 256 characters")
        )
    role_raw = value.get("role")
    role = None
    if role_raw is None:
        problems.append((f"{field}.role", "Field is required."))
    elif isinstance(role_raw, str) and role_raw in _ROLE_TO_OLD:
        role = role_raw
    elif isinstance(role_raw, str) and role_raw.lower() in _OLD_TO_ROLE:
        role = _OLD_TO_ROLE[role_raw.lower()]
    else:
        problems.append(
            (f"{field}.role", f"unknown role {str(role_raw)[:80]!r}; use ROLE_USER or ROLE_AGENT")
        )
    raw_parts = value.get("parts", value.get("content"))
    parts: tuple[Part, ...] = ()
    if raw_parts is None or raw_parts == []:
        problems.append((f"{field}.parts", "Field must contain at least one element."))
    else:
        try:
            parts = _parts(raw_parts, f"{field}.parts", required=True)
        except A2AError as exc:
            problems.extend(exc.fields)
    if problems:
        summary = "; ".join(f"{f}: {m}" for f, m in problems)
        raise A2AError(INVALID_PARAMS, f"Validation failed: {summary}", fields=problems)
    return Message(
        message_id=message_id,
        role=role,  # type: ignore[arg-type]
        parts=parts,
        context_id=_opt_str(value, "contextId", f"{field}.contextId", max_len=256) or None,
        task_id=_opt_str(value, "taskId", f"{field}.taskId", max_len=256) or None,
        metadata=_opt_meta(value, "metadata", f"{field}.metadata"),
        extensions=_str_list(value, "extensions", f"{field}.extensions"),
        reference_task_ids=_str_list(value, "referenceTaskIds", f"{field}.referenceTaskIds"),
    )


@attrs.frozen
class Artifact:
    """An output of a task."""

    artifact_id: str
    parts: tuple[Part, ...]
    name: str | None = None
    description: str | None = None
    metadata: Mapping[str, Any] | None = None

    def to_json(self, dialect: str = V1, *, index: int = 0) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if dialect != V01:
            out["artifactId"] = self.artifact_id
        if self.name is not None:
            out["name"] = self.name
        if self.description is not None:
            out["description"] = self.description
        out["parts"] = [p.to_json(dialect) for p in self.parts]
        if self.metadata is not None:
            out["metadata"] = dict(self.metadata)
        if dialect == V01:
            out["index"] = index
        return out


def artifact_from_json(value: Any, field: str = "artifact") -> Artifact:
    obj = _obj(value, field)
    return Artifact(
        artifact_id=_opt_str(obj, "artifactId", f"{field}.artifactId") or new_id(),
        parts=_parts(obj.get("parts"), f"{field}.parts", required=False),
        name=_opt_str(obj, "name", f"{field}.name"),
        description=_opt_str(obj, "description", f"{field}.description", max_len=8192),
        metadata=_opt_meta(obj, "metadata", f"{field}.metadata"),
    )


@attrs.frozen
class TaskStatus:
    state: str
    message: Message | None = None
    timestamp: str | None = None

    def to_json(self, dialect: str = V1) -> dict[str, Any]:
        out: dict[str, Any] = {"state": state_to_json(self.state, dialect)}
        if self.message is not None:
            out["message"] = self.message.to_json(dialect)
        if self.timestamp is not None:
            out["timestamp"] = self.timestamp
        return out


def status_from_json(value: Any, field: str = "status") -> TaskStatus:
    obj = _obj(value, field)
    msg = obj.get("message")
    return TaskStatus(
        state=state_from_json(obj.get("state"), f"{field}.state"),
        message=message_from_json(
            msg, f"{field}.message", dialect=V01 if "messageId" not in (msg or {}) else V1
        )
        if isinstance(msg, Mapping)
        else None,
        timestamp=_opt_str(obj, "timestamp", f"{field}.timestamp"),
    )


@attrs.frozen
class Task:
    """A unit of work an agent carries out for a client."""

    id: str
    context_id: str
    status: TaskStatus
    artifacts: tuple[Artifact, ...] = ()
    history: tuple[Message, ...] = ()
    metadata: Mapping[str, Any] | None = None

    @property
    def terminal(self) -> bool:
        return self.status.state in TERMINAL_STATES

    def moved_to(
        self, state: str, text: str | None = None, artifacts: tuple[Artifact, ...] = ()
    ) -> Task:
        """This task in ``state`` with ``artifacts`` added, the agent's ``text`` (if any) its
        status message and last in its history (``attrs.evolve`` without its field walk)."""
        history, message = self.history, None
        if text is not None:
            message = agent_message(text, context_id=self.context_id, task_id=self.id)
            history = (*history, message)
        status = TaskStatus(state, message, now_iso())
        return Task(
            self.id, self.context_id, status, self.artifacts + artifacts, history, self.metadata
        )

    def to_json(
        self,
        dialect: str = V1,
        *,
        history_length: int | None = None,
        include_artifacts: bool = True,
    ) -> dict[str, Any]:
        history = self.history
        if history_length is not None:
            history = history[len(history) - history_length :] if history_length > 0 else ()
        out: dict[str, Any] = {"id": self.id}
        if dialect == V01:
            out["sessionId"] = self.context_id
        else:
            out["contextId"] = self.context_id
        out["status"] = self.status.to_json(dialect)
        if self.artifacts and include_artifacts:
            out["artifacts"] = [a.to_json(dialect, index=i) for i, a in enumerate(self.artifacts)]
        if history:
            out["history"] = [m.to_json(dialect) for m in history]
        if self.metadata is not None:
            out["metadata"] = dict(self.metadata)
        if dialect == V03:
            out["kind"] = "task"
        return out


def task_from_json(value: Any, field: str = "task") -> Task:
    """Read a task in any dialect (used by the client and the store)."""
    obj = _obj(value, field)
    tid = _opt_str(obj, "id", f"{field}.id", max_len=256)
    if not tid:
        raise invalid(f"{field}.id", "is required")
    history = obj.get("history") or []
    if not isinstance(history, list):
        raise invalid(f"{field}.history", "must be an array of messages")
    artifacts = obj.get("artifacts") or []
    if not isinstance(artifacts, list):
        raise invalid(f"{field}.artifacts", "must be an array of artifacts")
    return Task(
        id=tid,
        context_id=obj.get("contextId") or obj.get("sessionId") or "",
        status=status_from_json(
            obj.get("status") or {"state": "TASK_STATE_UNSPECIFIED"}, f"{field}.status"
        ),
        artifacts=tuple(
            artifact_from_json(a, f"{field}.artifacts[{i}]") for i, a in enumerate(artifacts)
        ),
        history=tuple(
            message_from_json(
                m,
                f"{field}.history[{i}]",
                dialect=V1 if isinstance(m, Mapping) and "messageId" in m else V01,
            )
            for i, m in enumerate(history)
        ),
        metadata=_opt_meta(obj, "metadata", f"{field}.metadata"),
    )


@attrs.frozen
class StatusUpdate:
    task_id: str
    context_id: str
    status: TaskStatus
    metadata: Mapping[str, Any] | None = None

    @property
    def final(self) -> bool:
        return self.status.state in SETTLED_STATES

    def to_json(self, dialect: str = V1) -> dict[str, Any]:
        if dialect == V01:
            return {"id": self.task_id, "status": self.status.to_json(V01), "final": self.final}
        out: dict[str, Any] = {"taskId": self.task_id, "contextId": self.context_id}
        out["status"] = self.status.to_json(dialect)
        if self.metadata is not None:
            out["metadata"] = dict(self.metadata)
        if dialect == V03:
            out["kind"] = "status-update"
        if dialect != V1:
            out["final"] = self.final
        return out


@attrs.frozen
class ArtifactUpdate:
    task_id: str
    context_id: str
    artifact: Artifact
    append: bool = False
    last_chunk: bool = False

    def to_json(self, dialect: str = V1) -> dict[str, Any]:
        if dialect == V01:
            art = self.artifact.to_json(V01)
            art["append"] = self.append
            art["lastChunk"] = self.last_chunk
            return {"id": self.task_id, "artifact": art}
        out: dict[str, Any] = {
            "taskId": self.task_id,
            "contextId": self.context_id,
            "artifact": self.artifact.to_json(dialect),
        }
        if dialect == V03:
            out["kind"] = "artifact-update"
        if dialect == V03 or self.append:  # 0.3 always says both; the rest only when true
            out["append"] = self.append
        if dialect == V03 or self.last_chunk:
            out["lastChunk"] = self.last_chunk
        return out


Event = Task | Message | StatusUpdate | ArtifactUpdate
_EVENT_KEYS = {
    Task: "task",
    Message: "message",
    StatusUpdate: "statusUpdate",
    ArtifactUpdate: "artifactUpdate",
}


def event_to_json(event: Event, dialect: str = V1) -> dict[str, Any]:
    """A stream event: wrapped (``{"statusUpdate": ...}``) in 1.0, bare with ``kind`` in 0.3."""
    body = event.to_json(dialect)
    return body if dialect in _BARE_EVENTS else {_EVENT_KEYS[type(event)]: body}


def event_from_json(value: Any) -> Event:
    """Read a stream event in the 1.0 (wrapped) or 0.3 (``kind``) shape."""
    obj = _obj(value, "event")
    if "task" in obj and isinstance(obj["task"], Mapping):
        return task_from_json(obj["task"])
    if "message" in obj and isinstance(obj["message"], Mapping) and "messageId" in obj["message"]:
        return message_from_json(obj["message"])
    if "statusUpdate" in obj:
        return _update(obj["statusUpdate"], "statusUpdate")
    if "artifactUpdate" in obj:
        return _update(obj["artifactUpdate"], "artifactUpdate")
    kind = obj.get("kind")
    if kind == "task" or ("status" in obj and "id" in obj and "taskId" not in obj):
        return task_from_json(obj)
    if kind == "message":
        return message_from_json(obj)
    if kind == "status-update" or "status" in obj:
        return _update(obj, "statusUpdate")
    if kind == "artifact-update" or "artifact" in obj:
        return _update(obj, "artifactUpdate")
    raise invalid("event", f"unrecognised stream event with keys {sorted(obj)[:8]}")


def _update(value: Any, key: str) -> StatusUpdate | ArtifactUpdate:
    """A ``statusUpdate`` or an ``artifactUpdate`` (``key``), its ids in any dialect's names."""
    obj = _obj(value, key)
    task_id = str(obj.get("taskId") or obj.get("id") or "")
    context_id = str(obj.get("contextId") or "")
    if key == "statusUpdate":
        status = status_from_json(obj.get("status"), "statusUpdate.status")
        meta = _opt_meta(obj, "metadata", "statusUpdate.metadata")
        return StatusUpdate(task_id, context_id, status, meta)
    artifact = artifact_from_json(obj.get("artifact"), "artifactUpdate.artifact")
    append, last_chunk = bool(obj.get("append", False)), bool(obj.get("lastChunk", False))
    return ArtifactUpdate(task_id, context_id, artifact, append, last_chunk)


@attrs.frozen
class PushConfig:
    """Where to POST a task's updates; ``auth_scheme``/``credentials`` become the
    ``Authorization`` header, ``token`` the ``X-A2A-Notification-Token`` header."""

    task_id: str
    id: str
    url: str
    token: str | None = attrs.field(default=None, repr=False)
    auth_scheme: str | None = None
    credentials: str | None = attrs.field(default=None, repr=False)

    def to_json(self, dialect: str = V1, *, credentials: bool = False) -> dict[str, Any]:
        """The config in ``dialect``'s shape; its ``authentication.credentials`` only with
        ``credentials`` (to store it): a secret, never sent back to a client."""
        auth = None
        if self.auth_scheme:  # 0.3 names a list of schemes
            scheme = (
                {"scheme": self.auth_scheme} if dialect == V1 else {"schemes": [self.auth_scheme]}
            )
            auth = _drop_none({**scheme, "credentials": self.credentials if credentials else None})
        inner = _drop_none(
            {"id": self.id, "url": self.url, "token": self.token, "authentication": auth}
        )
        if dialect == V1:
            return {"taskId": self.task_id, **inner}
        if dialect == REST03:  # a resource, named by its path
            name = f"tasks/{self.task_id}/pushNotificationConfigs/{self.id}"
            return {"name": name, "pushNotificationConfig": inner}
        return {"taskId": self.task_id, "pushNotificationConfig": inner}


def _header_value(
    obj: Mapping[str, Any], key: str, field: str, header: str, *, check: bool
) -> str | None:
    """``obj[key]``, a secret sent as the ``header`` header: never quoted in the error."""
    value = _opt_str(obj, key, field, max_len=4096)
    if check and value and not HTTP_HEADER_VALUE.fullmatch(value):
        raise invalid(
            field,
            f"must be printable ASCII without spaces at either end: it is sent as the "
            f"{header} header of every notification",
        )
    return value


def push_config_from_json(
    value: Any, field: str = "params", *, task_id: str | None = None, stored: bool = False
) -> PushConfig:
    """Read a push config: the 1.0 flat shape or the 0.3 ``pushNotificationConfig`` wrapper;
    ``stored``: as the task store holds it (an earlier version did not check its headers)."""
    obj = _obj(value, field)
    inner = obj.get("pushNotificationConfig")
    inner_field = field
    if isinstance(inner, Mapping):
        inner_field = f"{field}.pushNotificationConfig"
    else:
        inner = obj
    tid = task_id or _opt_str(obj, "taskId", f"{field}.taskId", max_len=256)
    if not tid:
        raise invalid(f"{field}.taskId", "is required: the task whose updates to push")
    url = _opt_str(inner, "url", f"{inner_field}.url", max_len=2048)
    if not url:
        raise invalid(f"{inner_field}.url", "is required: the webhook URL to POST updates to")
    scheme = credentials = None
    auth = inner.get("authentication")
    if auth is not None:
        auth = _obj(auth, f"{inner_field}.authentication")
        scheme = auth.get("scheme")
        if scheme is None and isinstance(auth.get("schemes"), list) and auth["schemes"]:
            scheme = auth["schemes"][0]
        if not isinstance(scheme, str) or not scheme:
            raise invalid(
                f"{inner_field}.authentication.scheme", "must be a scheme such as 'Bearer'"
            )
        credentials = _header_value(
            auth,
            "credentials",
            f"{inner_field}.authentication.credentials",
            "Authorization",
            check=not stored,
        )
    return PushConfig(
        task_id=tid,
        id=_opt_str(inner, "id", f"{inner_field}.id", max_len=256) or new_id(),
        url=url,
        token=_header_value(
            inner, "token", f"{inner_field}.token", "X-A2A-Notification-Token", check=not stored
        ),
        auth_scheme=scheme,
        credentials=credentials,
    )


def agent_message(text: str, *, context_id: str, task_id: str) -> Message:
    """A message from the agent holding ``text``."""
    return Message(new_id(), ROLE_AGENT, (Part(text=text),), context_id=context_id, task_id=task_id)
