"""An ASGI wrapper that keeps hypercorn's per-request queue moving after a response.

Hypercorn hands request-body chunks to the app through a small bounded queue. If the
app answers without reading the whole body (a 413, a 401 to a big POST, a 404), the
connection's reader blocks on that full queue forever, and the connection and its task
leak. This wrapper (1) marks such responses ``Connection: close`` so the server ends the
connection instead of waiting for the rest of the body, (2) after the app returns,
reads and discards what is still queued until the server reports the end, and (3) sends
the last message of a response shielded from the app's cancellation (see ``closing_send``).
"""

from __future__ import annotations

from typing import Any

import trio

DRAIN_DEADLINE_S = 30.0
WEBSOCKET_DRAIN_IDLE_S = 0.1
FINAL_SEND_DEADLINE_S = 30.0


def _has_body(scope: dict[str, Any]) -> bool:
    for name, value in scope.get("headers", ()):
        name = bytes(name).lower()
        if name == b"transfer-encoding":
            return True
        if name == b"content-length":
            return bytes(value).strip() not in (b"", b"0")
    return False


class DrainingApp:
    """Wrap ``app`` (any ASGI app); lifespan and everything else pass straight through."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        kind = scope.get("type")
        if kind not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        finished = False
        body_pending = kind == "http" and _has_body(scope)

        async def tracking_receive() -> Any:
            nonlocal finished, body_pending
            message = await receive()
            kind_ = message.get("type")
            if kind_ == "http.request" and not message.get("more_body", False):
                body_pending = False
            elif kind_ in ("http.disconnect", "websocket.disconnect"):
                finished = True
                body_pending = False
            return message

        async def closing_send(message: Any) -> None:
            kind_ = message.get("type")
            if kind_ == "http.response.start" and body_pending:
                headers = list(message.get("headers") or ())
                headers.append((b"connection", b"close"))
                message = {**message, "headers": headers}
            elif kind_ == "http.response.body" and not message.get("more_body", False):
                # Within this send hypercorn ends the request and then either arms the
                # connection's keep-alive idle timer or, for "Connection: close", closes the
                # connection. quart-trio cancels the request's tasks as soon as the server
                # reports the request done, which lands in the middle of that send: the
                # timer was never armed and the close never happened, so the connection
                # stayed open for good. Shielded (with a deadline), the send completes.
                with trio.CancelScope(shield=True) as scope:
                    scope.deadline = trio.current_time() + FINAL_SEND_DEADLINE_S
                    await send(message)
                return
            await send(message)

        try:
            await self.app(scope, tracking_receive, closing_send)
        finally:
            # Not shielded: if we are being cancelled the connection is torn down anyway.
            if kind == "http":
                with trio.move_on_after(DRAIN_DEADLINE_S):
                    while body_pending and not finished:
                        await tracking_receive()
            else:
                # A websocket peer should stop sending after our close frame; swallow
                # what is queued or still arriving, but do not hold shutdown hostage.
                while not finished:
                    with trio.move_on_after(WEBSOCKET_DRAIN_IDLE_S) as idle:
                        await tracking_receive()
                    if idle.cancelled_caught:
                        break
