"""Server-neutral request and response values for route handlers that need no Quart.

A plugin route's ``fast_handler`` receives a ``PlainRequest`` from the daemon's fast lane;
the same handler code can serve its quart view through ``PlainRequest.from_quart`` and
``PlainResponse.to_quart``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qsl

import attrs


@attrs.frozen
class PlainResponse:
    """A complete response: ``status``, ``body`` bytes, content type and extra headers."""

    status: int
    body: bytes
    content_type: str = "application/json"
    headers: tuple[tuple[str, str], ...] = ()

    def to_quart(self) -> Any:
        """The same response as a quart ``Response``."""
        from quart import Response

        return Response(self.body, status=self.status, content_type=self.content_type, headers=list(self.headers))


class PlainRequest:
    """One HTTP request with its body read: ``headers.get`` is case-insensitive, ``args``
    is the query string (first value of each name), ``base_url`` the daemon's public base
    URL (``http.public_url``, else the address the connection reached; never the ``Host``
    header) to build links from."""

    __slots__ = ("method", "path", "headers", "body", "remote_addr", "base_url", "_query", "_args")

    def __init__(
        self,
        method: str,
        path: str,
        headers: Any,
        body: bytes,
        *,
        query: bytes = b"",
        args: Mapping[str, str] | None = None,
        remote_addr: str | None = None,
        base_url: str = "http://127.0.0.1",
    ) -> None:
        self.method = method
        self.path = path
        self.headers = headers
        self.body = body
        self.remote_addr = remote_addr
        self._query = query
        self._args = args
        self.base_url = base_url

    @property
    def args(self) -> Mapping[str, str]:
        if self._args is None:
            args: dict[str, str] = {}
            if self._query:
                for name, value in parse_qsl(self._query.decode("latin-1"), keep_blank_values=True):
                    args.setdefault(name, value)
            self._args = args
        return self._args

    @classmethod
    async def from_quart(cls, request: Any) -> PlainRequest:
        """The current quart request, body read (its route's body cap applies)."""
        from quart import current_app

        from ._common import connection_base_url

        state = current_app.extensions.get("roost")
        return cls(
            request.method,
            request.path,
            request.headers,
            await request.get_data(cache=False),
            args=request.args,
            remote_addr=request.remote_addr,
            base_url=connection_base_url(getattr(state, "public_url", None), request.server),
        )
