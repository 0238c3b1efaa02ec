"""The one handler type of plugin routes: ``async handler(PlainRequest, **path_args) ->
PlainResponse``, called once the daemon's checks passed, with the body read.

``PlainResponse.body`` is bytes, or an async iterable of bytes streamed as it comes (closed
when the client goes away). A handler that should stop when its client goes away awaits
``request.disconnected()`` beside its work (``request.unless_gone``).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterable, Awaitable, Callable, Iterable, Mapping
from typing import Any
from urllib.parse import parse_qsl

import attrs
import trio


class Headers:
    """Request headers: ``get`` is case-insensitive (first value wins), ``items`` keeps all."""

    __slots__ = ("_first", "_items")

    def __init__(self, items: list[tuple[str, str]]) -> None:
        self._items = items
        first: dict[str, str] = {}
        for name, value in items:
            first.setdefault(name.lower(), value)
        self._first = first

    @classmethod
    def from_asgi(cls, raw: Iterable[tuple[bytes, bytes]]) -> Headers:
        """The headers of an ASGI scope (names lowercased, latin-1)."""
        return cls(
            [(bytes(n).decode("latin-1").lower(), bytes(v).decode("latin-1")) for n, v in raw]
        )

    def get(self, name: str, default: str | None = None) -> str | None:
        return self._first.get(name.lower(), default)

    def __getitem__(self, name: str) -> str:
        return self._first[name.lower()]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._first

    def items(self) -> list[tuple[str, str]]:
        return list(self._items)

    def __iter__(self):
        return iter(self._first)

    def __len__(self) -> int:
        return len(self._first)

    def __repr__(self) -> str:
        return f"Headers({[n for n, _ in self._items]!r})"


def _header_pairs(
    headers: Mapping[str, str] | Iterable[tuple[str, str]],
) -> tuple[tuple[str, str], ...]:
    items = headers.items() if isinstance(headers, Mapping) else headers
    return tuple((str(name), str(value)) for name, value in items)


@attrs.frozen
class PlainResponse:
    """An answer: ``status``, ``body`` (bytes, or an async iterable of bytes to stream),
    content type (empty: none) and extra headers (a mapping or ``(name, value)`` pairs)."""

    status: int
    body: bytes | AsyncIterable[bytes] = b""
    content_type: str = "application/json"
    headers: tuple[tuple[str, str], ...] = attrs.field(default=(), converter=_header_pairs)

    @classmethod
    def json(
        cls,
        data: Any,
        status: int = 200,
        *,
        content_type: str = "application/json",
        headers: Mapping[str, str] | Iterable[tuple[str, str]] = (),
    ) -> PlainResponse:
        """``data`` as UTF-8 JSON, a lone surrogate (UTF-8 cannot carry it) as its escape."""
        text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str)
        body = text.encode("utf-8", "backslashreplace")
        return cls(status, body, content_type, headers)  # type: ignore[arg-type]


@attrs.define(eq=False)
class PlainRequest:
    """One HTTP request, body read: ``headers.get`` is case-insensitive, ``args`` the query
    (first value per name), ``path`` as routed (no trailing slash), ``base_url`` the public
    base URL for links (``http.public_url``, else the address reached; never ``Host``),
    ``principal`` who sent it (a ``Principal``; None on a public route without a valid key)."""

    method: str
    path: str
    headers: Any
    body: bytes = attrs.field(repr=False)
    _query: bytes = attrs.field(default=b"", kw_only=True, repr=False)
    remote_addr: str | None = attrs.field(default=None, kw_only=True)
    base_url: str = attrs.field(default="http://127.0.0.1", kw_only=True)
    principal: Any = attrs.field(default=None, kw_only=True)
    _receive: Callable[[], Awaitable[Mapping[str, Any]]] | None = attrs.field(
        default=None, kw_only=True, repr=False
    )
    gone: bool = attrs.field(default=False, init=False)  # the client went away
    _args: Mapping[str, str] | None = attrs.field(default=None, init=False, repr=False)

    @property
    def args(self) -> Mapping[str, str]:
        if self._args is None:
            args: dict[str, str] = {}
            if self._query:
                for name, value in parse_qsl(self._query.decode("latin-1"), keep_blank_values=True):
                    args.setdefault(name, value)
            self._args = args
        return self._args

    async def disconnected(self) -> None:
        """Return once the client has gone away (never, for a request made in-process)."""
        while not self.gone:
            if self._receive is None:
                await trio.sleep_forever()
            elif (await self._receive())["type"] == "http.disconnect":  # type: ignore[misc]
                self.gone = True

    async def unless_gone(self, work: Callable[[], Awaitable[Any]]) -> tuple[bool, Any]:
        """``(True, await work())``; ``(False, None)`` if the client goes first, cancelling it."""
        answered, result = False, None
        async with trio.open_nursery() as nursery:

            async def cancel_when_gone() -> None:
                await self.disconnected()
                nursery.cancel_scope.cancel()

            nursery.start_soon(cancel_when_gone)
            result = await work()
            answered = True
            nursery.cancel_scope.cancel()
        return answered, result
