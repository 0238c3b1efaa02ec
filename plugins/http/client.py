"""roost as an HTTP client (httpx), shared by A2A, push deliveries, MCP HTTP and providers.

Every answer from a peer is streamed and read up to a byte cap (``read_body``,
``read_error_body``, ``sse_events``): whatever a peer sends or announces, roost holds at most
the cap. Also: HTTP error text, ``Retry-After`` and the 429/503 retry rule, and
``PinnedTransport``. Here rather than in the kernel, which stays free of HTTP libraries.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import email.utils
import http
import json
import math
import random
import re
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any
from urllib.parse import unquote, unquote_plus, urlsplit

import httpx
import httpx_sse
import trio
from roost.kernel import AddressPins, InvalidInput, number_setting, parse_int, pin_url, public_url

ERROR_BODY_BYTES = 64 * 1024  # of an error response, read at most this much
HTTP_RETRY_STATUSES = frozenset({429, 503})
MAX_HTTP_RETRIES = 8
MAX_HTTP_RETRY_WAIT_S = 30.0
_TAGS = re.compile(r"<(script|style)\b.*?</\1\s*>|<[^>]*>", re.IGNORECASE | re.DOTALL)
_SPACE = re.compile(r"\s+")
# Header and environment variable names whose values are credentials.
_CREDENTIAL_NAME = re.compile(
    r"auth|key|token|secret|passw|cookie|session|credential|signature", re.I
)
# A shorter value under such a name is a setting (SESSION_TIMEOUT=3600): redacting it would
# mangle every answer that says it.
_MIN_CREDENTIAL = 8


class ResponseTooLarge(ValueError):
    """An answer (or event) over ``limit`` bytes, the rest unread; ``peer``: URL, no query."""

    def __init__(self, what: str, peer: str, limit: int) -> None:
        self.what, self.peer, self.limit = what, peer, limit
        super().__init__(
            f"{what} from {peer} is over the limit of {limit} bytes "
            f"({size_text(limit)}); roost read no further"
        )


def size_text(n: int) -> str:
    """``16 MiB``, ``64 KiB`` or ``123 bytes``."""
    for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} bytes"


def peer_of(response: httpx.Response) -> str:
    """The URL ``response`` answers, without user info, query or fragment (secrets)."""
    try:
        url = response.request.url
    except RuntimeError:
        return "the peer"
    return public_url(str(url))


async def read_body(response: httpx.Response, limit: int, *, what: str = "the answer") -> bytes:
    """The body of a streamed ``response`` (decoded: compressed bodies count at their real
    size); ``ResponseTooLarge`` as soon as more than ``limit`` bytes are announced or come."""
    declared = response.headers.get("content-length")  # h11 and h2 take ASCII digits only
    try:
        announced = 0 if declared is None else parse_int(declared, "Content-Length", 0, 10**20)
    except InvalidInput:  # more digits than h11's 20 (h2 takes any): over every cap
        announced = math.inf
    if announced > limit:
        raise ResponseTooLarge(what, peer_of(response), limit)
    body = bytearray()
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) > limit:
            raise ResponseTooLarge(what, peer_of(response), limit)
    return bytes(body)


async def read_error_body(response: httpx.Response, limit: int = ERROR_BODY_BYTES) -> bytes:
    """At most the first ``limit`` bytes of an error body (a broken connection ends it)."""
    body = bytearray()
    with contextlib.suppress(httpx.HTTPError):  # what arrived is enough to say what went wrong
        async for chunk in response.aiter_bytes():
            body += chunk
            if len(body) >= limit:
                break
    return bytes(body[:limit])


async def sse_events(
    response: httpx.Response, *, max_bytes: int
) -> AsyncIterator[httpx_sse.ServerSentEvent]:
    """``response``'s SSE events as they arrive; ``ResponseTooLarge`` for one over ``max_bytes``."""
    unfinished = 0  # bytes read since the last complete event

    async def counted() -> AsyncIterator[bytes]:
        nonlocal unfinished
        async for chunk in response.aiter_bytes():
            unfinished += len(chunk)
            if unfinished > max_bytes:
                raise ResponseTooLarge("an SSE event", peer_of(response), max_bytes)
            yield chunk

    # The caller chose SSE: decode it whatever content type the server named (SSE is UTF-8).
    bounded = httpx.Response(200, headers={"content-type": "text/event-stream"}, content=counted())
    async with contextlib.aclosing(httpx_sse.EventSource(bounded).aiter_sse()) as events:
        async for event in events:
            unfinished = 0
            yield event


def http_status_line(status: int) -> str:
    """``HTTP 401 Unauthorized`` (the number alone for a status without a standard phrase)."""
    try:
        return f"HTTP {status} {http.HTTPStatus(status).phrase}"
    except ValueError:
        return f"HTTP {status}"


def http_error_text(body: bytes, limit: int = 300) -> str:
    """The server's words in an error body: a JSON error's message (JSON-RPC, roost's REST
    shape, AIP-193, model vendors'), else the text with HTML tags dropped; cut short."""
    if not body:
        return ""
    text = body[:ERROR_BODY_BYTES].decode("utf-8", "replace")
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        value = None
    if isinstance(value, list) and value and isinstance(value[0], Mapping):
        value = value[0]  # Gemini wraps its error in a list
    if isinstance(value, Mapping):
        error = value.get("error")
        for candidate in (
            error.get("message") if isinstance(error, Mapping) else error,
            value.get("message"),
            value.get("detail"),
        ):
            if isinstance(candidate, str) and candidate.strip():
                text = candidate
                break
    else:
        text = _TAGS.sub(" ", text)
    text = _SPACE.sub(" ", text).strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def credential_values(named: Mapping[str, str], url: str | None = None) -> tuple[str, ...]:
    """The values in ``named`` (HTTP headers, environment variables) whose names say they
    are credentials (``Authorization``, ``X-Api-Key``, ``GITHUB_TOKEN``...), each also
    without its scheme (``Bearer <token>`` gives the token too; ``Basic <token>`` also the
    password in it), and those ``url`` carries (its user info's password, also as the Basic
    credentials made of it; query parameters so named, as written and decoded), of 8
    characters or more: what a peer must not echo back to the model (``Tool.secrets``,
    ``roost.kernel.redact``)."""
    out: list[str] = []
    for name, value in named.items():
        if _CREDENTIAL_NAME.search(name) and value:
            out.append(value)
            scheme, _, token = value.partition(" ")
            if token.strip() and scheme.isalpha():
                out.append(token.strip())
                if scheme.lower() == "basic":  # a peer may quote the password it decodes
                    out += _basic_password(token.strip())
    try:
        parts = urlsplit(url or "")
        password = parts.password
    except ValueError:  # not a URL: it carries nothing
        parts, password = urlsplit(""), None
    if password:
        user, password = unquote(parts.username or ""), unquote(password)
        out += [
            password,
            base64.b64encode(f"{user}:{password}".encode("utf-8", "surrogatepass")).decode(),
        ]
    for pair in parts.query.split("&"):
        name, _, value = pair.partition("=")
        if value and _CREDENTIAL_NAME.search(unquote_plus(name)):
            out += [value, unquote_plus(value)]
    return tuple(v for v in out if len(v) >= _MIN_CREDENTIAL)


def _basic_password(token: str) -> list[str]:
    """The password in Basic credentials ``token`` (base64 of ``user:password``), if any."""
    try:
        decoded = base64.b64decode(token, validate=True).decode("utf-8", "surrogateescape")
    except ValueError:  # not base64 (binascii.Error is a ValueError)
        return []
    _, colon, password = decoded.partition(":")
    return [password] if colon and password else []


def retry_after_s(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """Seconds the server asked us to wait (``retry-after-ms``, ``Retry-After`` seconds or date);
    None if it did not say so in ASCII digits (RFC 9110's ``1*DIGIT``), up to 10**19 s (past a
    64-bit "forever"), or a date.
    """
    lowered = {k.lower(): v for k, v in headers.items()}
    for name, scale in (("retry-after-ms", 1000), ("retry-after", 1)):
        with contextlib.suppress(KeyError, InvalidInput):
            return parse_int(lowered[name], name, 0, 10**19 * scale) / scale
    value = lowered.get("retry-after")
    if not value or not value.isascii():
        return None
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, OverflowError):  # a day or zone past a C int overflows
        return None
    if when.tzinfo is None:  # asctime's form or "-0000": an HTTP date is GMT, not local time
        when = when.replace(tzinfo=datetime.UTC)
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def http_retry_wait(status: int, retry_after: Any, retries: int, remaining: float) -> float | None:
    """Seconds to wait before retrying HTTP ``status`` (429, 503: ``retry_after`` if a finite
    number of seconds, else 0.5 s doubling), or None: not retried, too many retries, or past
    ``remaining`` or the cap."""
    if status not in HTTP_RETRY_STATUSES or retries >= MAX_HTTP_RETRIES:
        return None
    # An MCP server's error data may say "retryAfter": NaN, -5 or true: none is a delay.
    told = number_setting(retry_after, 0, closed=True)
    wait = min(0.5 * 2**retries, 8.0) if told is None else told
    # Callers told the same Retry-After would all come back in the same instant.
    wait += random.uniform(0.0, 0.05 + 0.2 * wait)
    return None if wait > MAX_HTTP_RETRY_WAIT_S or wait >= remaining else wait


def remaining_s(deadline: float) -> float:
    """Seconds until ``deadline`` (``trio.current_time()``) or the cancel scope's, if sooner."""
    return min(deadline, trio.current_effective_deadline()) - trio.current_time()


class PinnedTransport(httpx.AsyncBaseTransport):
    """An httpx transport sending each request to an address ``pins`` approved for its origin,
    the name kept in ``Host`` and TLS SNI. Otherwise httpx would resolve the name again, and a
    DNS-rebinding name could answer the check with a public address and the connect with a
    private one."""

    def __init__(self, pins: AddressPins, inner: httpx.AsyncBaseTransport | None = None) -> None:
        self.pins = pins
        self._inner = inner or httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        addresses = await self.pins.addresses(str(request.url))
        last_error: Exception | None = None
        for address in addresses:
            target = pin_url(str(request.url), address)
            headers = request.headers.copy()
            headers["Host"] = target.host_header
            extensions = dict(request.extensions)
            if target.sni_hostname:
                extensions["sni_hostname"] = target.sni_hostname
            pinned = httpx.Request(
                request.method,
                target.url,
                headers=headers,
                stream=request.stream,
                extensions=extensions,
            )
            try:
                return await self._inner.handle_async_request(pinned)
            except httpx.ConnectError as exc:
                last_error = exc
        raise httpx.ConnectError(
            f"could not connect to any checked address of {request.url.host}: {last_error}",
            request=request,
        )

    async def aclose(self) -> None:
        await self._inner.aclose()
