"""What every HTTP provider shares: settings, API keys, errors, retries and streaming.

Keys come only from the environment (``api_key_env``); they are never logged and never
put into an error message (vendor messages are scrubbed of them too).
An answer is read up to ``MAX_ANSWER_BYTES`` (16 MiB; when streamed, per SSE event or
NDJSON line), an error body's first 64 KiB (``roost.plugins.http.client``).
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import AsyncIterator, Mapping
from typing import Any

import attrs
import httpx
import trio
from roost.kernel import (
    ConfigError,
    RoostError,
    header_table,
    json_type_name,
    jsonrpc,
    number_setting,
    redact,
    redacted_head,
    unknown_key,
)
from roost.plugins.http.client import (
    ResponseTooLarge,
    credential_values,
    http_error_text,
    read_body,
    read_error_body,
    retry_after_s,
    sse_events,
)

log = logging.getLogger("roost.providers")

RETRY_STATUSES = frozenset({408, 409, 425, 429, 500, 502, 503, 504, 529})
_MAX_ERROR_TEXT = 400
# A model's answer, or one SSE event or NDJSON line of its stream.
MAX_ANSWER_BYTES = 16 * 1024 * 1024
EXCERPT_CHARS = 200  # of a vendor's text an error quotes


class ProviderError(RoostError):
    """A model provider failed; the message says what happened and what to do."""

    code = "provider_error"


class ProviderConfigError(ProviderError, ConfigError):
    """``[providers.<name>]`` or the agent's model section is invalid, or a key is missing."""

    code = "provider_config"


class ProviderAuthError(ProviderError):
    code = "provider_auth"


class ProviderUnavailable(ProviderError):
    """The server could not be reached, kept failing, or timed out."""

    code = "provider_unavailable"


class ProviderRateLimited(ProviderUnavailable):
    code = "provider_rate_limited"


class ProviderResponseError(ProviderError):
    """The server answered something that is not what its API documents."""

    code = "provider_bad_response"


class StreamInterrupted(ProviderResponseError):
    """The stream ended before the vendor said it was complete."""

    code = "provider_stream_cut"


@attrs.frozen
class ProviderSettings:
    """``[providers.<name>]`` from roost.toml, checked, with the key read from the env."""

    provider: str
    base_url: str
    api_key_env: str | None
    api_key: str | None = attrs.field(default=None, repr=False)
    timeout_s: float = 120.0
    connect_timeout_s: float = 10.0
    max_retries: int = 3
    retry_backoff_s: float = 0.5
    max_retry_wait_s: float = 30.0
    context_window: int | None = None
    headers: Mapping[str, str] = attrs.field(factory=dict)

    @property
    def secrets(self) -> tuple[str, ...]:
        """The API key and the credentials among ``headers`` and in ``base_url`` (a
        gateway's password or ``?api_key=``): what an error text must not quote (``redact``
        also finds each as JSON and a URL may write it)."""
        return (self.api_key or "", *credential_values(self.headers, self.base_url))

    @property
    def shown_url(self) -> str:
        """``base_url`` as errors and the log show it: its credentials redacted."""
        return self.redact(self.base_url)

    def redact(self, text: str) -> str:
        """``text`` with ``secrets`` replaced."""
        return redact(text, self.secrets)

    def excerpt(self, text: str | bytes, limit: int = EXCERPT_CHARS) -> str:
        """The head of a vendor's ``text`` (bytes read as UTF-8) for an error to quote:
        ``secrets`` redacted first, then cut to ``limit`` characters (``…`` ending a cut),
        so a secret across the cut leaves no head. Only for errors: it costs a redaction."""
        shown = redacted_head(text, self.secrets, limit + 1)
        return shown if len(shown) <= limit else shown[: limit - 1] + "…"


_NUMBERS: dict[str, tuple[type, float, float]] = {
    "timeout_s": (float, 0.001, 3600.0),
    "connect_timeout_s": (float, 0.001, 600.0),
    "max_retries": (int, 0, 10),
    "retry_backoff_s": (float, 0.0, 60.0),
    "max_retry_wait_s": (float, 0.0, 600.0),
    "context_window": (int, 256, 100_000_000),
}
KNOWN_SETTINGS = ("base_url", "api_key_env", "headers", *_NUMBERS)


def check_settings(
    provider: str, raw: Mapping[str, Any] | None, *, known: tuple[str, ...] = KNOWN_SETTINGS
) -> dict[str, Any]:
    """The ``[providers.<provider>]`` settings given, checked (no defaults added, no key read);
    ProviderConfigError (a ConfigError) names the key and the fix."""
    raw = dict(raw or {})
    where = f"providers.{provider}"
    if "api_key" in raw:
        raise ProviderConfigError(
            f"{where}.api_key: keys are read only from the environment; remove api_key, "
            f"export the key and name its variable with api_key_env"
        )
    if unknown := [k for k in raw if k not in known]:
        raise ProviderConfigError(str(unknown_key(where, str(unknown[0]), known, f"[{where}]")))
    out: dict[str, Any] = {}
    for name, expected, valid in (
        ("base_url", "an http:// or https:// URL", lambda v: v.startswith(("http://", "https://"))),
        ("api_key_env", "the name of an environment variable", lambda v: bool(v.strip())),
    ):
        if name in raw:
            value = raw[name]
            if not isinstance(value, str) or not valid(value):
                raise ProviderConfigError(
                    f"{where}.{name}: expected {expected}, got {_shown(value)}"
                )
            out[name] = value
    if "headers" in raw:
        try:
            out["headers"] = header_table(raw["headers"], f"{where}.headers")
        except ConfigError as exc:
            raise ProviderConfigError(str(exc)) from None
    for name, (kind, low, high) in _NUMBERS.items():
        if name in raw:
            out[name] = number_setting(raw[name], low, high, integer=kind is int, closed=True)
            if out[name] is None:
                raise ProviderConfigError(
                    f"{where}.{name}: expected {'an integer' if kind is int else 'a number'} "
                    f"from {low:g} to {high:g}, got {_shown(raw[name])}"
                )
    return out


def check_config_providers(
    config: Any, *providers: str, known: tuple[str, ...] = KNOWN_SETTINGS
) -> None:
    """``roost_check_config`` for a provider plugin: check its ``[providers.<name>]`` tables."""
    tables = getattr(config, "providers", None)
    if not isinstance(tables, Mapping):
        return
    for provider in providers:
        if provider in tables:
            check_settings(provider, tables[provider], known=known)


def _shown(value: Any) -> str:
    return (
        f"{value!r}"
        if isinstance(value, (str, int, float)) and not isinstance(value, bool)
        else json_type_name(value)
    )


def backoff_s(settings: ProviderSettings, attempt: int, server_wait: float | None) -> float:
    """How long to wait before retry ``attempt`` (1-based), never past ``max_retry_wait_s``."""
    if server_wait is not None:
        return min(server_wait, settings.max_retry_wait_s)
    base = settings.retry_backoff_s * (2 ** (attempt - 1))
    return min(base * (0.5 + random.random() / 2), settings.max_retry_wait_s)


def _ndjson_value(line: bytes | jsonrpc.Oversize, settings: ProviderSettings) -> Any:
    """The JSON value of one NDJSON line; ValueError saying what is wrong with it."""
    if isinstance(line, jsonrpc.Oversize):
        raise ValueError(f"a line of the stream is over the limit of {line.limit} bytes")
    try:
        return json.loads(line)
    except ValueError as exc:
        raise ValueError(
            f"a line of the stream is not JSON ({exc}): {settings.excerpt(line)!r}"
        ) from None


class HttpClient:
    """POSTs JSON to one vendor with bounded retries; streams SSE or NDJSON responses."""

    def __init__(self, settings: ProviderSettings, auth_headers: Mapping[str, str]) -> None:
        self.settings = settings
        self._auth = dict(auth_headers)

    def _client(self) -> httpx.AsyncClient:
        s = self.settings
        return httpx.AsyncClient(
            timeout=httpx.Timeout(s.timeout_s, connect=s.connect_timeout_s),
            headers={"content-type": "application/json", **s.headers, **self._auth},
            follow_redirects=False,
            trust_env=False,
        )

    async def post_json(self, url: str, body: Mapping[str, Any]) -> Any:
        """POST ``body``; the decoded JSON answer, or a ``ProviderError`` saying why not."""
        async with self._client() as client:
            _, raw = await self._send(client, url, body, stream=False)
        try:
            return json.loads(raw)
        except ValueError as exc:
            s = self.settings
            raise ProviderResponseError(
                f"{s.provider} answered with malformed JSON ({exc}); "
                f"the server at {s.shown_url} may not speak this API: {s.excerpt(raw)!r}"
            ) from None

    async def stream_events(
        self, url: str, body: Mapping[str, Any], stream_format: str
    ) -> AsyncIterator[Any]:
        """POST ``body``, yield SSE events or decoded NDJSON lines; retried only before the first
        byte, a connection lost after raises ``StreamInterrupted``; cancelling closes it."""
        provider = self.settings.provider
        async with self._client() as client:
            response, _ = await self._send(client, url, body, stream=True)
            try:
                if stream_format == "sse":
                    async for event in sse_events(response, max_bytes=MAX_ANSWER_BYTES):
                        if event.data:  # not an id or retry alone (httpx-sse hands those over too)
                            yield event
                else:
                    lines = jsonrpc.LineFramer(MAX_ANSWER_BYTES)
                    async for chunk in response.aiter_bytes():
                        for line in lines.feed(chunk):
                            yield _ndjson_value(line, self.settings)
            except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
                raise StreamInterrupted(
                    f"{provider}: the connection was lost in the middle of the "
                    f"stream ({type(exc).__name__}); try again"
                ) from None
            except httpx.TimeoutException:
                raise ProviderUnavailable(
                    f"{provider}: the stream stalled for more than "
                    f"{self.settings.timeout_s:g}s (raise timeout_s in [providers.{provider}])"
                ) from None
            except ValueError as exc:  # not JSON, or over MAX_ANSWER_BYTES
                raise ProviderResponseError(
                    f"{provider}: malformed stream from {self.settings.shown_url}: {exc}"
                ) from None
            finally:
                await response.aclose()

    async def _send(
        self, client: httpx.AsyncClient, url: str, body: Mapping[str, Any], *, stream: bool
    ) -> tuple[httpx.Response, bytes]:
        """POST ``body`` with bounded retries: the open response (``stream``), else the closed one
        and its body (over ``MAX_ANSWER_BYTES``: a ``ProviderResponseError`` at once)."""
        s = self.settings
        payload = json.dumps(body, ensure_ascii=False).encode("utf-8")
        attempts = s.max_retries + 1
        last = ""
        for attempt in range(1, attempts + 1):
            wait: float | None = None
            try:
                with trio.fail_after(s.timeout_s + s.connect_timeout_s):
                    request = client.build_request("POST", url, content=payload)
                    response = await client.send(request, stream=True)
                    if response.status_code < 400:
                        if stream:
                            return response, b""
                        try:
                            return response, await read_body(response, MAX_ANSWER_BYTES)
                        finally:
                            await response.aclose()
                    error_body = await read_error_body(response)
                    await response.aclose()
            except ResponseTooLarge as exc:
                raise ProviderResponseError(f"{s.provider}: {s.redact(str(exc))}") from None
            except httpx.ConnectError as exc:
                last = f"could not connect to {s.shown_url} ({_reason(exc, s)})"
            except (httpx.TimeoutException, trio.TooSlowError):
                last = f"no answer from {s.shown_url} within {s.timeout_s:g}s"
            except httpx.RemoteProtocolError as exc:
                last = f"{s.shown_url} closed the connection ({_reason(exc, s)})"
            else:
                status = response.status_code
                # Redacted before the text is cut (a key across the cut would leave its
                # head), and after (a JSON message may spell the key with escapes).
                said = s.redact(error_body.decode("utf-8", "replace")).encode()
                message = s.redact(http_error_text(said, _MAX_ERROR_TEXT))
                if status in (401, 403):
                    env = s.api_key_env or "the API key variable"
                    missing = "" if s.api_key else f" ({env} is not set)"
                    raise ProviderAuthError(
                        f"{s.provider} rejected the request with HTTP {status}: "
                        f"check {env}{missing}"
                        + (f" — the server said: {message}" if message else "")
                    )
                if status not in RETRY_STATUSES:
                    raise ProviderResponseError(
                        f"{s.provider} answered HTTP {status}: {message or 'no details'}"
                    )
                last = f"HTTP {status}" + (f": {message}" if message else "")
                wait = retry_after_s(response.headers)
                if status == 429 and attempt == attempts:
                    raise ProviderRateLimited(
                        f"{s.provider} kept answering HTTP 429 (rate limited) after {attempts} "
                        f"attempts: {message or 'too many requests'}; wait and try again, or raise "
                        f"max_retries in [providers.{s.provider}]"
                    )
            if attempt < attempts:
                delay = backoff_s(s, attempt, wait)
                log.warning(
                    "%s: %s; retry %d/%d in %.1fs", s.provider, last, attempt, s.max_retries, delay
                )
                await trio.sleep(delay)
        raise ProviderUnavailable(f"{s.provider}: {last} (gave up after {attempts} attempts)")


def _reason(exc: BaseException, settings: ProviderSettings) -> str:
    if _refused(exc):
        return "connection refused; is the server running?"
    return settings.excerpt(str(exc) or type(exc).__name__)


def _refused(exc: BaseException | None, depth: int = 0) -> bool:
    """Whether a connection refusal is anywhere in ``exc``'s causes (trio nests them)."""
    if exc is None or depth > 8:
        return False
    if isinstance(exc, ConnectionRefusedError) or "refused" in str(exc).lower():
        return True
    if isinstance(exc, BaseExceptionGroup) and any(_refused(e, depth + 1) for e in exc.exceptions):
        return True
    return _refused(exc.__cause__, depth + 1) or _refused(exc.__context__, depth + 1)
