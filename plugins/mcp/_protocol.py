"""Sans-I/O MCP protocol core shared by roost's MCP client and server: versions of both
eras, method names, ``_meta`` keys, error codes, HTTP header names, builders, validators.

* **handshake** (2024-11-05 … 2025-11-25): ``initialize`` negotiates the version once.
* **stateless** (2026-07-28): every request carries the version (and client capabilities)
  in ``_meta``, every result a ``resultType``; ``server/discover`` lists the versions and an
  unsupported one is answered ``UnsupportedProtocolVersion`` (-32022).

A server tells the eras apart per message with ``request_era``.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
from roost.kernel import InvalidTraceContext, TraceContext, is_mapping, jsonrpc

INVALID_PARAMS = jsonrpc.INVALID_PARAMS
JsonRpcError = jsonrpc.JsonRpcError
json_type = jsonrpc.json_type

# ---- versions ---------------------------------------------------------------------------

HANDSHAKE_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
"""Versions negotiated with ``initialize``, newest first."""
STATELESS_VERSIONS = ("2026-07-28",)
"""Versions declared per request in ``_meta``, newest first."""
SUPPORTED_VERSIONS = STATELESS_VERSIONS + HANDSHAKE_VERSIONS
"""Every version roost speaks, newest first (the order ``supported`` lists use)."""
LATEST_HANDSHAKE_VERSION = HANDSHAKE_VERSIONS[0]
LATEST_VERSION = STATELESS_VERSIONS[0]

ERA_HANDSHAKE = "handshake"
ERA_STATELESS = "stateless"


def is_stateless_version(version: str | None) -> bool:
    """True for 2026-07-28 and later-style versions roost speaks statelessly."""
    return version in STATELESS_VERSIONS


def negotiate_version(requested: Any) -> str:
    """The version to answer ``initialize`` with: the one asked if it is in
    ``HANDSHAKE_VERSIONS``, else the latest of those (the client may then disconnect)."""
    if isinstance(requested, str) and requested in HANDSHAKE_VERSIONS:
        return requested
    return LATEST_HANDSHAKE_VERSION


# ---- methods ----------------------------------------------------------------------------

INITIALIZE = "initialize"
INITIALIZED = "notifications/initialized"
PING = "ping"
DISCOVER = "server/discover"
TOOLS_LIST = "tools/list"
TOOLS_CALL = "tools/call"
RESOURCES_LIST = "resources/list"
RESOURCES_READ = "resources/read"
RESOURCES_TEMPLATES_LIST = "resources/templates/list"
RESOURCES_SUBSCRIBE = "resources/subscribe"
RESOURCES_UNSUBSCRIBE = "resources/unsubscribe"
PROMPTS_LIST = "prompts/list"
PROMPTS_GET = "prompts/get"
COMPLETION_COMPLETE = "completion/complete"
LOGGING_SET_LEVEL = "logging/setLevel"
SUBSCRIPTIONS_LISTEN = "subscriptions/listen"
SAMPLING_CREATE_MESSAGE = "sampling/createMessage"
ELICITATION_CREATE = "elicitation/create"
ROOTS_LIST = "roots/list"

NOTIFY_CANCELLED = "notifications/cancelled"
NOTIFY_PROGRESS = "notifications/progress"
NOTIFY_MESSAGE = "notifications/message"
NOTIFY_TOOLS_CHANGED = "notifications/tools/list_changed"
NOTIFY_RESOURCES_CHANGED = "notifications/resources/list_changed"
NOTIFY_PROMPTS_CHANGED = "notifications/prompts/list_changed"
NOTIFY_SUBSCRIPTIONS_ACK = "notifications/subscriptions/acknowledged"
LIST_CHANGES = {
    NOTIFY_TOOLS_CHANGED: "toolsListChanged",
    NOTIFY_RESOURCES_CHANGED: "resourcesListChanged",
    NOTIFY_PROMPTS_CHANGED: "promptsListChanged",
}
"""Each ``list_changed`` notification → its key in ``subscriptions/listen``'s params."""

HANDSHAKE_ONLY_METHODS = frozenset(
    {INITIALIZE, PING, LOGGING_SET_LEVEL, RESOURCES_SUBSCRIBE, RESOURCES_UNSUBSCRIBE}
)
"""Methods the 2026-07-28 revision removed (they still work in a handshake session)."""

# ---- _meta keys -------------------------------------------------------------------------

META = "_meta"
META_PROGRESS_TOKEN = "progressToken"
META_PROTOCOL_VERSION = "io.modelcontextprotocol/protocolVersion"
META_CLIENT_INFO = "io.modelcontextprotocol/clientInfo"
META_CLIENT_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
META_LOG_LEVEL = "io.modelcontextprotocol/logLevel"
META_SERVER_INFO = "io.modelcontextprotocol/serverInfo"
META_SUBSCRIPTION_ID = "io.modelcontextprotocol/subscriptionId"

RESULT_COMPLETE = "complete"
RESULT_INPUT_REQUIRED = "input_required"

# ---- error codes ------------------------------------------------------------------------

RESOURCE_NOT_FOUND_LEGACY = -32002
"""Resource not found up to 2025-11-25 (2026-07-28 uses -32602)."""
HEADER_MISMATCH = -32020
MISSING_REQUIRED_CLIENT_CAPABILITY = -32021
UNSUPPORTED_PROTOCOL_VERSION = -32022
RECURSION_LIMIT = jsonrpc.RECURSION_LIMIT
"""roost: the call chain would pass the depth limit (data names the path)."""

MODERN_ERROR_CODES = frozenset(
    {HEADER_MISMATCH, MISSING_REQUIRED_CLIENT_CAPABILITY, UNSUPPORTED_PROTOCOL_VERSION}
)
"""Errors only a 2026-07-28 server sends: seeing one identifies a modern server."""


def unsupported_version_error(requested: Any) -> JsonRpcError:
    """The ``UnsupportedProtocolVersion`` error (-32022) listing what roost speaks."""
    known = isinstance(requested, str)
    return JsonRpcError(
        UNSUPPORTED_PROTOCOL_VERSION,
        f"Unsupported protocol version {requested if known else json_type(requested)!r}; "
        f"this server speaks {', '.join(SUPPORTED_VERSIONS)}",
        {"supported": list(SUPPORTED_VERSIONS), "requested": requested if known else None},
    )


# ---- limits, names, HTTP headers --------------------------------------------------------

MAX_MESSAGE_BYTES = 10 * 1024 * 1024
"""The largest JSON-RPC message roost reads or writes on any MCP transport."""

_NOT_TOOL_CHAR = re.compile(r"[^A-Za-z0-9_.\-]")

HEADER_SESSION_ID = "Mcp-Session-Id"
HEADER_PROTOCOL_VERSION = "MCP-Protocol-Version"
HEADER_METHOD = "Mcp-Method"
HEADER_NAME = "Mcp-Name"
HEADER_LAST_EVENT_ID = "Last-Event-ID"
_B64_PREFIX = "=?base64?"
_B64_SUFFIX = "?="


NAMED_METHODS = {TOOLS_CALL: "name", PROMPTS_GET: "name", RESOURCES_READ: "uri"}
"""2026-07-28 methods whose target rides in the ``Mcp-Name`` header: the param it names."""


def request_headers(message: Mapping[str, Any]) -> dict[str, str]:
    """The ``Mcp-Method`` and ``Mcp-Name`` headers of a 2026-07-28 request over HTTP."""
    method = message.get("method")
    if not isinstance(method, str):
        return {}
    out = {HEADER_METHOD: method}
    key = NAMED_METHODS.get(method)
    params = message.get("params")
    if key is not None and isinstance(params, Mapping) and isinstance(params.get(key), str):
        out[HEADER_NAME] = encode_header_value(params[key])
    return out


def safe_tool_name(name: str) -> str:
    """``name`` with characters MCP does not allow replaced by ``_``, cut to 128."""
    cleaned = _NOT_TOOL_CHAR.sub("_", name)[:128]
    return cleaned or "_"


def encode_header_value(value: str) -> str:
    """A header-safe value: plain if visible ASCII without edge spaces, else base64 sentinel."""
    plain = (
        value == value.strip()
        and all(0x20 <= ord(c) <= 0x7E for c in value)
        and not (value.startswith(_B64_PREFIX) and value.endswith(_B64_SUFFIX))
    )
    if plain:
        return value
    return _B64_PREFIX + base64.b64encode(value.encode("utf-8")).decode("ascii") + _B64_SUFFIX


def decode_header_value(value: str) -> str | None:
    """Undo ``encode_header_value``; None if a base64 sentinel value is malformed."""
    if (
        value.startswith(_B64_PREFIX)
        and value.endswith(_B64_SUFFIX)
        and len(value) >= len(_B64_PREFIX) + len(_B64_SUFFIX)
    ):
        body = value[len(_B64_PREFIX) : len(value) - len(_B64_SUFFIX)]
        try:
            return base64.b64decode(body, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return None
    return value


# ---- per-request metadata ---------------------------------------------------------------


@attrs.frozen
class RequestMeta:
    """What a request's ``params._meta`` says about it (absent fields are None)."""

    protocol_version: str | None = None
    client_info: Mapping[str, Any] | None = None
    client_capabilities: Mapping[str, Any] | None = None
    log_level: str | None = None
    progress_token: str | int | None = None


# What a request without ``_meta`` reads as (most handshake-era requests): built once.
_NO_META = RequestMeta()


def read_request_meta(params: Any) -> RequestMeta:
    """Read ``params._meta`` (unknown keys ignored); -32602 naming a malformed field."""
    if params is None:
        return _NO_META
    if not is_mapping(params):
        raise JsonRpcError(INVALID_PARAMS, f"params: expected an object, got {json_type(params)}")
    meta = params.get(META)
    if meta is None:
        return _NO_META
    if not isinstance(meta, Mapping):
        raise JsonRpcError(
            INVALID_PARAMS, f"params._meta: expected an object, got {json_type(meta)}"
        )
    version = meta.get(META_PROTOCOL_VERSION)
    info = meta.get(META_CLIENT_INFO)
    caps = meta.get(META_CLIENT_CAPABILITIES)
    level = meta.get(META_LOG_LEVEL)
    token = meta.get(META_PROGRESS_TOKEN)
    field, expected = None, ""  # the first malformed field, and what it should be
    if version is not None and not isinstance(version, str):
        field = f"[{META_PROTOCOL_VERSION!r}]"
        expected = f"a version string such as {LATEST_VERSION!r}, got {json_type(version)}"
    elif info is not None and not isinstance(info, Mapping):
        field, expected = f"[{META_CLIENT_INFO!r}]", f"an object, got {json_type(info)}"
    elif caps is not None and not isinstance(caps, Mapping):
        field, expected = f"[{META_CLIENT_CAPABILITIES!r}]", f"an object, got {json_type(caps)}"
    elif level is not None and level not in LOG_LEVELS:
        field = f"[{META_LOG_LEVEL!r}]"
        expected = f"one of {', '.join(LOG_LEVELS)}, got {level!r}"
    elif token is not None and (isinstance(token, bool) or not isinstance(token, (str, int))):
        field, expected = ".progressToken", f"a string or an integer, got {json_type(token)}"
    if field is not None:
        raise JsonRpcError(INVALID_PARAMS, f"params._meta{field}: expected {expected}")
    return RequestMeta(version, info, caps, level, token)


def field_error(exc: Any) -> JsonRpcError:
    """-32602 for an ``InvalidInput`` or ``InvalidTraceContext``, naming its ``field``."""
    return JsonRpcError(INVALID_PARAMS, str(exc), {"field": exc.field})


def carry_trace(context: TraceContext | None, message: Any) -> None:
    """Put ``context`` into a ``tools/call``'s ``params._meta`` when it is deeper than the
    one there (the server reads ``_meta``; a forged lower depth in either never wins)."""
    params = message.get("params") if isinstance(message, dict) else None
    if context is not None and isinstance(params, dict):
        try:
            context.deepen_meta(params)
        except InvalidTraceContext:
            pass  # a malformed _meta depth: the server answers -32602 naming it


def request_era(params: Any) -> str:
    """``"stateless"`` if ``_meta`` declares a protocol version, else (never raising) handshake."""
    if is_mapping(params):
        meta = params.get(META)
        if meta is not None and is_mapping(meta) and META_PROTOCOL_VERSION in meta:
            return ERA_STATELESS
    return ERA_HANDSHAKE


def check_stateless_meta(meta: RequestMeta) -> None:
    """Require 2026-07-28's ``_meta``: a supported version (-32022), capabilities (-32602)."""
    if meta.protocol_version is None:
        raise JsonRpcError(
            INVALID_PARAMS,
            f"params._meta[{META_PROTOCOL_VERSION!r}]: required on every request at "
            f"{LATEST_VERSION}; or open a session with initialize",
        )
    if not is_stateless_version(meta.protocol_version):
        raise unsupported_version_error(meta.protocol_version)
    if meta.client_capabilities is None:
        raise JsonRpcError(
            INVALID_PARAMS,
            f"params._meta[{META_CLIENT_CAPABILITIES!r}]: required on every request at "
            f"{meta.protocol_version} (send {{}} when the client has none)",
        )


def stateless_meta(
    client_info: Mapping[str, Any],
    capabilities: Mapping[str, Any] | None = None,
    *,
    version: str = LATEST_VERSION,
    log_level: str | None = None,
    progress_token: str | int | None = None,
) -> dict[str, Any]:
    """The ``_meta`` a 2026-07-28 client puts on every request."""
    meta: dict[str, Any] = {
        META_PROTOCOL_VERSION: version,
        META_CLIENT_INFO: dict(client_info),
        META_CLIENT_CAPABILITIES: dict(capabilities or {}),
    }
    if log_level is not None:
        meta[META_LOG_LEVEL] = log_level
    if progress_token is not None:
        meta[META_PROGRESS_TOKEN] = progress_token
    return meta


def with_meta(params: Mapping[str, Any] | None, meta: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``params`` whose ``_meta`` has ``meta`` merged in."""
    out = dict(params or {})
    merged = dict(out.get(META) or {})
    merged.update(meta)
    out[META] = merged
    return out


# ---- builders ---------------------------------------------------------------------------

LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")


# How long a client may cache what roost answers, and for whom: not at all, only itself.
CACHE_FIELDS = {"ttlMs": 0, "cacheScope": "private"}


CACHEABLE_METHODS = frozenset(
    {TOOLS_LIST, PROMPTS_LIST, RESOURCES_LIST, RESOURCES_READ, RESOURCES_TEMPLATES_LIST}
)


def finish_stateless_result(
    method: str, result: Mapping[str, Any], server_info: Mapping[str, Any]
) -> dict[str, Any]:
    """Add what 2026-07-28 requires of every result: ``resultType`` (default complete),
    ``serverInfo`` in ``_meta``, and ``ttlMs``/``cacheScope`` on cacheable results."""
    out = dict(result)
    out.setdefault("resultType", RESULT_COMPLETE)
    meta = dict(out.get(META) or {})
    meta.setdefault(META_SERVER_INFO, dict(server_info))
    out[META] = meta
    if method in CACHEABLE_METHODS:
        for key, value in CACHE_FIELDS.items():
            out.setdefault(key, value)
    return out


def input_required_result(
    input_requests: Mapping[str, Mapping[str, Any]] | None, *, request_state: str | None = None
) -> dict[str, Any]:
    """A 2026-07-28 ``InputRequiredResult`` (MRTR): the client retries the request with
    ``inputResponses`` keyed like ``input_requests`` and echoes ``requestState``."""
    if not input_requests and request_state is None:
        raise ValueError("an input_required result needs input_requests or request_state")
    out: dict[str, Any] = {"resultType": RESULT_INPUT_REQUIRED}
    if input_requests:
        out["inputRequests"] = {k: dict(v) for k, v in input_requests.items()}
    if request_state is not None:
        out["requestState"] = request_state
    return out


def progress_params(
    token: str | int, progress: float, total: float | None = None, message: str | None = None
) -> dict[str, Any]:
    """``notifications/progress`` params."""
    out: dict[str, Any] = {"progressToken": token, "progress": progress}
    if total is not None:
        out["total"] = total
    if message:
        out["message"] = message
    return out


def log_level_allows(threshold: str | None, level: str) -> bool:
    """Whether a message at ``level`` passes a client's minimum ``threshold`` (None: off)."""
    if threshold is None or threshold not in LOG_LEVELS or level not in LOG_LEVELS:
        return False
    return LOG_LEVELS.index(level) >= LOG_LEVELS.index(threshold)


# ---- pagination -------------------------------------------------------------------------


def decode_cursor(cursor: Any) -> str:
    """The key a cursor points after; raises JsonRpcError(INVALID_PARAMS) if malformed."""
    problem = "params.cursor: not a cursor this server issued; omit it to start from the first page"
    if not isinstance(cursor, str) or not cursor or len(cursor) > 1024:
        raise JsonRpcError(INVALID_PARAMS, problem)
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        value = json.loads(raw.decode("utf-8"))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise JsonRpcError(INVALID_PARAMS, problem) from None
    if not isinstance(value, dict) or not isinstance(value.get("after"), str):
        raise JsonRpcError(INVALID_PARAMS, problem)
    return value["after"]


def paginate(
    items: Sequence[Mapping[str, Any]], cursor: Any, *, key: str = "name", page_size: int = 100
) -> tuple[list[Mapping[str, Any]], str | None]:
    """One page of ``items`` (sorted by ``key``) after ``cursor``, and the next cursor (None
    on the last page); keyed cursors stay valid when items come and go between pages."""
    ordered = sorted(items, key=lambda item: str(item.get(key, "")))
    start = 0
    if cursor is not None:
        after = decode_cursor(cursor)
        start = next(
            (i for i, item in enumerate(ordered) if str(item.get(key, "")) > after), len(ordered)
        )
    page = ordered[start : start + page_size]
    if not page or start + page_size >= len(ordered):
        return page, None
    raw = json.dumps({"after": str(page[-1].get(key, ""))}, separators=(",", ":"))
    return page, base64.urlsafe_b64encode(raw.encode("utf-8")).decode("ascii").rstrip("=")


def result_type(result: Any) -> str:
    """A result's ``resultType``; absent (pre-2026 servers) means complete."""
    if isinstance(result, Mapping):
        value = result.get("resultType")
        if isinstance(value, str):
            return value
    return RESULT_COMPLETE
