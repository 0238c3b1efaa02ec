"""Push notifications: POST each task event to the webhooks configured for the task.

Deliveries go through a bounded queue (full → the delivery is dropped and logged, the task
never waits on a slow webhook) to a few workers; each delivery is retried a bounded number
of times with exponential backoff. The URL is checked against SSRF rules (metadata,
link-local, private and loopback addresses, after DNS) when the config is set and again
before every delivery. ``Authorization: <scheme> <credentials>`` and
``X-A2A-Notification-Token`` carry what the client configured.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import attrs
import httpx
import trio
from roost.kernel import UrlRefused, check_url

from . import _models as m

log = logging.getLogger("roost.a2a.push")

QUEUE_SIZE = 256
WORKERS = 4


@attrs.frozen
class PushSettings:
    """Delivery settings: ``allow_private``/``allow_loopback`` lift the SSRF rules (tests)."""

    retries: int = 3
    backoff_s: float = 0.5
    timeout_s: float = 10.0
    allow_private: bool = False
    allow_loopback: bool = False


@attrs.frozen
class Delivery:
    config: m.PushConfig
    body: dict[str, Any]


class PushDispatcher:
    """Delivers task events to webhooks; run ``run()`` in a nursery, then ``notify()``."""

    def __init__(self, store: Any, settings: PushSettings | None = None, *, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.store = store
        self.settings = settings or PushSettings()
        self._send, self._receive = trio.open_memory_channel[Delivery](QUEUE_SIZE)
        self._transport = transport
        self.delivered = 0
        self.failed = 0
        self.dropped = 0

    async def check_url(self, url: str, *, field: str) -> None:
        """-32602 naming ``field`` if ``url`` may not receive notifications."""
        try:
            await check_url(
                url,
                allow_private=self.settings.allow_private,
                allow_loopback=self.settings.allow_loopback,
                allow_hint="a2a.push_allow_private in roost.toml",
            )
        except UrlRefused as exc:
            raise m.invalid(field, f"webhook URL refused: {exc}") from None

    async def notify(self, live: Any, event: m.Event) -> None:
        """Queue ``event`` for every webhook of ``live``'s task (never blocks on delivery)."""
        if live.push is None:
            from ._tasks import _push_from_row

            live.push = [_push_from_row(d) for d in await self.store.push_configs(live.task.id)]
        if not live.push:
            return
        dialect = m.V1 if live.dialect == m.V1 else m.V03
        body = m.event_to_json(event, dialect)
        for config in live.push:
            try:
                self._send.send_nowait(Delivery(config, body))
            except trio.WouldBlock:
                self.dropped += 1
                log.warning("push queue full: dropped a notification for task %s to %s", config.task_id, config.url)

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Deliver queued notifications until cancelled."""
        async with httpx.AsyncClient(timeout=self.settings.timeout_s, transport=self._transport, follow_redirects=False) as client:
            limiter = trio.Semaphore(WORKERS)
            async with trio.open_nursery() as nursery:
                task_status.started()
                async for delivery in self._receive:
                    await limiter.acquire()
                    nursery.start_soon(self._deliver_released, client, delivery, limiter)

    async def _deliver_released(self, client: httpx.AsyncClient, delivery: Delivery, limiter: trio.Semaphore) -> None:
        try:
            await self.deliver(client, delivery)
        finally:
            limiter.release()

    async def deliver(self, client: httpx.AsyncClient, delivery: Delivery) -> bool:
        """POST one notification, retrying with backoff; True once a 2xx came back."""
        config = delivery.config
        headers = {"Content-Type": "application/json"}
        if config.auth_scheme:
            headers["Authorization"] = f"{config.auth_scheme} {config.credentials or ''}".strip()
        if config.token:
            headers["X-A2A-Notification-Token"] = config.token
        payload = json.dumps(delivery.body, ensure_ascii=False).encode()
        delay = self.settings.backoff_s
        for attempt in range(1, self.settings.retries + 1):
            try:
                await self.check_url(config.url, field="url")
                response = await client.post(config.url, content=payload, headers=headers)
                if 200 <= response.status_code < 300:
                    self.delivered += 1
                    return True
                problem = f"HTTP {response.status_code}"
            except m.A2AError as exc:
                log.warning("push to %s refused: %s", config.url, exc)
                break
            except httpx.HTTPError as exc:
                problem = f"{type(exc).__name__}: {exc}"
            log.info("push to %s failed (attempt %d): %s", config.url, attempt, problem)
            if attempt < self.settings.retries:
                await trio.sleep(delay)
                delay *= 2
        self.failed += 1
        return False
