"""What every HTTP request of the daemon goes through, whichever server parsed it.

Plain functions, no Quart: the quart app's ``before_request``/``after_request``/error
handlers and the fast lane (``_fastlane``) both call them, so a request meets the same
Origin check, bearer auth, GCRA rate limit, body caps, headers and error shapes either way.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Hashable, Mapping
from typing import Any

import attrs
from roost.kernel import (
    ActorStopped,
    AgentNotFound,
    AskTimeout,
    LoopDetected,
    RecursionLimitExceeded,
    RoostError,
    SandboxError,
    StoreError,
    TaintViolation,
    ToolArgumentsInvalid,
    ToolDenied,
    ToolNotFound,
    ToolTimeout,
)

from ._auth import bearer_token, origin_allowed, token_fingerprint, tokens_match
from ._settings import HttpSettings

log = logging.getLogger("roost.http")

# Checked in order; the first matching class decides the status.
_STATUS_BY_ERROR: tuple[tuple[type[RoostError], int], ...] = (
    (AgentNotFound, 404),
    (ToolNotFound, 404),
    (ToolArgumentsInvalid, 400),
    (ToolDenied, 403),
    (SandboxError, 403),
    (TaintViolation, 403),
    (RecursionLimitExceeded, 508),
    (LoopDetected, 508),
    (AskTimeout, 504),
    (ToolTimeout, 504),
    (ActorStopped, 503),
    (StoreError, 503),  # storage failed (e.g. the disk is full): nothing was kept
)

# Errors the kernel may add without exporting the class.
_STATUS_BY_CODE = {"mailbox_full": 503}

CORS_HEADERS = {
    "Access-Control-Allow-Headers": (
        "Authorization, Content-Type, traceparent, X-Roost-Trace-Id, "
        "X-Roost-Trace-Depth, X-Roost-Trace-Path"
    ),
    "Access-Control-Allow-Methods": "GET, POST, OPTIONS",
    "Access-Control-Expose-Headers": "Retry-After, X-Roost-Trace-Id",
    "Vary": "Origin",
}


class InvalidRequest(RoostError):
    """The request is malformed; ``field`` names the part to fix (400)."""

    code = "invalid_request"

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(message)

    def to_dict(self) -> dict:
        return {**super().to_dict(), "field": self.field}


def status_for(error: RoostError) -> int:
    """The HTTP status for a roost error (500 for anything not listed)."""
    if isinstance(error, InvalidRequest):
        return 400
    for cls, status in _STATUS_BY_ERROR:
        if isinstance(error, cls):
            return status
    return _STATUS_BY_CODE.get(error.code, 500)


@attrs.frozen
class Refusal:
    """An error answer: ``{"error": error}`` with ``status`` and extra ``headers``."""

    status: int
    error: Mapping[str, Any]
    headers: Mapping[str, str] = attrs.field(factory=dict)

    def body(self) -> bytes:
        return error_body(self.error)


def error_body(error: Mapping[str, Any]) -> bytes:
    """``{"error": {...}}`` as UTF-8 JSON."""
    return json.dumps({"error": dict(error)}, ensure_ascii=False, default=str).encode()


def rate_limited(retry_after: float) -> Refusal:
    seconds = max(1, math.ceil(retry_after))
    return Refusal(
        429,
        {
            "code": "rate_limited",
            "message": f"too many requests; retry after {seconds} s "
            "(limits: http.rate_limit_per_s and http.rate_limit_burst in roost.toml)",
        },
        {"Retry-After": str(seconds)},
    )


def too_large(settings: HttpSettings, limit: int, path: str) -> Refusal:
    """413 naming the limit and where it is set."""
    where = "http.max_body_bytes in roost.toml" if limit == settings.max_body_bytes else f"the limit of {path}"
    return Refusal(
        413,
        {
            "code": "body_too_large",
            "message": f"request body is larger than the limit of {limit} bytes ({where})",
            "limit_bytes": limit,
        },
    )


def internal_error() -> Refusal:
    return Refusal(500, {"code": "internal_error", "message": "internal error; the daemon log has the details"})


def refusal_for(exc: RoostError, path: str) -> Refusal:
    """The answer to a ``RoostError`` raised by a handler (logged when it is a 5xx)."""
    status = status_for(exc)
    if status >= 500:
        log.warning("request %s failed: %s", path, exc)
    return Refusal(status, exc.to_dict())


@attrs.frozen
class Gate:
    """The checks in front of every route: Origin, bearer auth, rate limit, declared size.

    ``public``/``unlimited``/``capped`` are the endpoints without auth, without rate limit,
    and with their own body cap (they render their own 413 when the body is read)."""

    settings: HttpSettings
    limiter: Any
    clock: Callable[[], float]
    public: set[str]
    unlimited: set[str]
    capped: Mapping[str, int]

    def check(
        self,
        endpoint: str | None,
        headers: Any,
        remote_addr: str | None,
        content_length: int | None,
        *,
        is_websocket: bool = False,
        is_preflight: bool = False,
        query_token: Callable[[], str | None] | None = None,
    ) -> tuple[Refusal | None, Hashable | None]:
        """``(refusal or None, the rate-limit key charged or None)``."""
        settings = self.settings
        origin = headers.get("Origin")
        if origin is not None and not origin_allowed(origin, settings.allowed_origins):
            return (
                Refusal(
                    403,
                    {
                        "code": "origin_forbidden",
                        "message": f"requests from origin {origin!r} are not allowed; add it to "
                        "http.allowed_origins in roost.toml to let a browser page on it call roost",
                    },
                ),
                None,
            )
        public = endpoint in self.public or is_preflight
        rate_key: Hashable = ("addr", str(remote_addr or "?"))
        if settings.api_key is not None and not public:
            token = bearer_token(headers.get("Authorization"))
            if token is None and is_websocket and query_token is not None:
                token = query_token() or None
            if not tokens_match(token, settings.api_key):
                refused = self._limit(rate_key)  # failed attempts count too: no free guessing
                if refused is not None:
                    return refused, None
                reason = "missing" if token is None else "wrong"
                return (
                    Refusal(
                        401,
                        {
                            "code": "unauthorized",
                            "message": f"bearer token {reason}; send 'Authorization: Bearer <key>' "
                            "with the key from http.api_key or the variable named by http.api_key_env"
                            + (" (browsers may pass ?token=<key> on websockets)" if is_websocket else ""),
                        },
                        {"WWW-Authenticate": 'Bearer realm="roost"'},
                    ),
                    rate_key,
                )
            rate_key = ("token", token_fingerprint(token))  # type: ignore[arg-type]
        charged = None
        if endpoint not in self.unlimited:
            refused = self._limit(rate_key)
            if refused is not None:
                return refused, None
            charged = rate_key
        # A route with its own cap reads its body and may render the 413 itself (MCP
        # answers with a JSON-RPC error); the body buffer refuses the excess either way.
        if not is_websocket and endpoint not in self.capped:
            if content_length is not None and content_length > settings.max_body_bytes:
                return too_large(settings, settings.max_body_bytes, ""), charged
        return None, charged

    def _limit(self, key: Hashable) -> Refusal | None:
        allowed, retry_after = self.limiter.check(key, self.clock())
        return None if allowed else rate_limited(retry_after)


def common_headers(settings: HttpSettings, origin: str | None) -> list[tuple[str, str, bool]]:
    """``(name, value, replace)`` for every response: set when absent (or always when
    ``replace``); CORS headers only for an allowed ``Origin``."""
    out = [("X-Content-Type-Options", "nosniff", False), ("Cache-Control", "no-store", False)]
    if origin is not None and origin_allowed(origin, settings.allowed_origins):
        out.append(("Access-Control-Allow-Origin", origin, True))
        out.extend((name, value, False) for name, value in CORS_HEADERS.items())
    return out
