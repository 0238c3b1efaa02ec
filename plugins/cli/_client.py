"""Talking to a running daemon: find it through ``<home>/daemon.json``, then use its API."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import quote, urlencode

import httpx
import trio
from roost.kernel import RoostError
from roost.plugins.http import DaemonInfo, daemon_http_client

REQUEST_TIMEOUT_S = 30.0
DEFAULT_SEND_TIMEOUT_S = 600.0


class DaemonError(RoostError):
    """The daemon answered with an error (its code and message are kept)."""

    code = "daemon_error"

    def __init__(self, status: int, code: str, message: str) -> None:
        self.status = status
        self.code = code  # type: ignore[misc]
        super().__init__(message)


class DaemonUnreachable(ConnectionError):
    """No answer from the daemon's address."""


def _error_from(response: httpx.Response) -> DaemonError:
    try:
        error = response.json()["error"]
        code, message = str(error["code"]), str(error["message"])
    except (ValueError, KeyError, TypeError):
        code, message = "http_error", f"HTTP {response.status_code}: {response.text[:200]}"
    if response.status_code == 401:
        message = (
            "the daemon requires an API key: set the variable named by http.api_key_env "
            "(ROOST_API_KEY by default) or http.api_key in roost.toml"
        )
    return DaemonError(response.status_code, code, message)


class DaemonClient:
    """A thin async client for the daemon's REST API and event stream."""

    def __init__(self, info: DaemonInfo, api_key: str | None = None) -> None:
        self.info = info
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}

    async def _request(
        self, method: str, path: str, *, timeout: float = REQUEST_TIMEOUT_S, **kwargs: Any
    ) -> Any:
        try:
            async with daemon_http_client(
                self.info.url, base_url=self.info.url, headers=self._headers, timeout=timeout
            ) as client:
                response = await client.request(method, path, **kwargs)
        except httpx.TimeoutException:
            raise DaemonUnreachable(
                f"the daemon at {self.info.url} did not answer within {timeout:g} s"
            ) from None
        except httpx.HTTPError as exc:
            raise DaemonUnreachable(f"cannot reach the daemon at {self.info.url}: {exc}") from None
        if response.status_code >= 400:
            raise _error_from(response)
        try:
            return response.json()
        except ValueError:
            raise DaemonError(
                response.status_code, "bad_response", "the daemon sent invalid JSON"
            ) from None

    async def agents(self) -> list[dict[str, Any]]:
        """``GET /api/agents``."""
        return (await self._request("GET", "/api/agents"))["agents"]

    async def peers(self) -> list[dict[str, Any]]:
        """MCP servers and A2A agents with their state (``kind``: "mcp" or "a2a"); a disabled
        plugin adds none."""
        out: list[dict[str, Any]] = []
        for path, key, kind in (
            ("/api/mcp/servers", "configured", "mcp"),
            ("/api/a2a/external_agents", "external_agents", "a2a"),
        ):
            try:
                body = await self._request("GET", path)
            except DaemonError as exc:
                if exc.status == 404:
                    continue
                raise
            out.extend({**item, "kind": kind} for item in body.get(key) or ())
        return out

    async def tools(self, agent: str | None = None) -> list[dict[str, Any]]:
        """``GET /api/tools[?agent=NAME]``."""
        params = {"agent": agent} if agent is not None else None
        return (await self._request("GET", "/api/tools", params=params))["tools"]

    async def send(
        self,
        agent: str,
        message: str,
        *,
        session_id: str | None = None,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """``POST /api/agents/{agent}/message``; waits up to ``timeout`` (default 600 s)."""
        options = {"session_id": session_id, "timeout": timeout}
        body = {"message": message, **{k: v for k, v in options.items() if v is not None}}
        wait = (timeout or DEFAULT_SEND_TIMEOUT_S) + 5.0
        path = f"/api/agents/{quote(agent, safe='')}/message"
        return await self._request("POST", path, json=body, timeout=wait)

    @asynccontextmanager
    async def events(self, kinds: Sequence[str] = ()) -> AsyncIterator[Any]:
        """A trio-websocket connection to ``/api/events`` (optionally filtered by kinds)."""
        from trio_websocket import ConnectionRejected, HandshakeError, open_websocket_url

        query = "?" + urlencode({"kinds": ",".join(kinds)}) if kinds else ""
        url = self.info.url.replace("http://", "ws://", 1) + "/api/events"
        headers = [(k.encode(), v.encode()) for k, v in self._headers.items()]
        try:
            async with open_websocket_url(
                url + query, extra_headers=headers, connect_timeout=5, disconnect_timeout=2
            ) as ws:
                yield ws
        except ConnectionRejected as exc:
            raise _error_from(httpx.Response(exc.status_code, content=exc.body or b"")) from None
        except (HandshakeError, OSError, trio.TooSlowError) as exc:
            raise DaemonUnreachable(f"cannot open the event stream at {url}: {exc}") from None


def _clock(ts: Any) -> str:
    import time

    if not isinstance(ts, (int, float)):
        return "--:--:--.---"
    return time.strftime("%H:%M:%S", time.localtime(ts)) + f".{int((ts % 1) * 1000):03d}"


def event_line(event: Mapping[str, Any], *, width: int = 160) -> str:
    """One human-readable line for an event dict (as the daemon streams it)."""
    route = str(event.get("source") or "?")
    if event.get("target"):
        route += f" → {event['target']}"
    payload = event.get("payload")
    if str(event.get("kind", "")).startswith("TRACE:SPAN") and isinstance(payload, Mapping):
        detail = span_summary(payload)
    else:
        empty = payload in (None, {}, [])
        detail = "" if empty else json.dumps(payload, ensure_ascii=False, default=str)
    if len(detail) > width:
        detail = detail[: width - 1] + "…"
    line = f"{_clock(event.get('ts'))}  {event.get('kind', '?'):<18} {route}  {detail}"
    return _printable(line.rstrip())


def _printable(text: str) -> str:
    """``text`` with unprintable characters escaped: an agent's or peer's text could hold
    sequences that clear, retitle or rewrite the operator's terminal."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)


def span_summary(span: Mapping[str, Any]) -> str:
    """A span record in a few words: kind, name, duration, status and marks."""
    text = f"{span.get('kind', '?')} {span.get('name', '?')}"
    if isinstance(span.get("duration_ms"), (int, float)):
        text += f" {span['duration_ms']:.1f} ms"
    text += f" {span.get('status', '?')}"
    if marks := [m.get("kind") for m in span.get("marks") or () if isinstance(m, Mapping)]:
        text += " [" + ", ".join(str(m) for m in marks) + "]"
    if span.get("error"):
        text += f": {span['error']}"
    return text


TOKEN_KIND = "AGENT:TOKEN"


class TokenRuns:
    """Coalesces ``AGENT:TOKEN`` events into a ``width``-char line per run (same source and span),
    printed on another event of it, past ``max_runs`` open (oldest first), or at ``flush()``."""

    def __init__(self, *, width: int = 160, max_runs: int = 64) -> None:
        self.width = width
        self.max_runs = max_runs
        self._runs: dict[tuple[str, str], dict[str, Any]] = {}

    @staticmethod
    def _span(event: Mapping[str, Any]) -> str:
        trace = event.get("trace")
        span = trace.get("span_id") if isinstance(trace, Mapping) else None
        if span:
            return str(span)
        payload = event.get("payload")
        return str(payload.get("session_id") if isinstance(payload, Mapping) else "")

    def feed(self, event: Mapping[str, Any]) -> list[str]:
        """The lines to print now for ``event`` (none while a run's tokens accumulate)."""
        source, span = str(event.get("source") or "?"), self._span(event)
        if event.get("kind") != TOKEN_KIND:
            done = [k for k in self._runs if k[0] == source or (span and k[1] == span)]
            ended = [self._line(self._runs.pop(k)) for k in done]
            return [*ended, event_line(event, width=self.width)]
        payload = event.get("payload")
        text = str(payload.get("text", "")) if isinstance(payload, Mapping) else ""
        lines = []
        key = (source, span)
        run = self._runs.get(key)
        if run is None:
            if len(self._runs) >= self.max_runs:
                lines.append(self._line(self._runs.pop(next(iter(self._runs)))))
            run = self._runs[key] = {
                "ts": event.get("ts"),
                "source": source,
                "count": 0,
                "chars": 0,
                "text": "",
            }
        run["count"] += 1
        run["chars"] += len(text)
        if len(run["text"]) <= self.width:
            run["text"] = (run["text"] + text)[: self.width + 1]
        return lines

    def flush(self) -> list[str]:
        """The lines of every run still open (at the end of the watch)."""
        lines = [self._line(run) for run in self._runs.values()]
        self._runs.clear()
        return lines

    def _line(self, run: Mapping[str, Any]) -> str:
        text = json.dumps(run["text"], ensure_ascii=False)
        if len(text) > self.width:
            text = text[: self.width - 1] + f"… ({run['chars']} chars)"
        kind = f"{TOKEN_KIND} ×{run['count']}"
        return _printable(f"{_clock(run['ts'])}  {kind:<18} {run['source']}  {text}")
