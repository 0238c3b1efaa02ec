"""Push notifications: POST each task event to the webhooks configured for the task.

Deliveries go through a bounded queue (full: dropped and logged, a task never waits on a
slow webhook) to a few workers, each retried a bounded number of times with backoff. The URL
is checked against SSRF rules (after DNS) when the config is set and for every delivery,
which connects only to the addresses that check approved (``PinnedTransport``), on every
retry: a DNS-rebinding name cannot pass the check with a public address and connect to
127.0.0.1. Redirects are not followed; the webhook's status is its whole answer.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import attrs
import httpx
import trio
from roost.kernel import AddressPins, Resolver, UrlRefused, public_url, redact
from roost.plugins.http.client import PinnedTransport

from . import _models as m

log = logging.getLogger("roost.a2a.push")

QUEUE_SIZE = 256
WORKERS = 4
ALLOW_HINT = "a2a.push_allow_private in roost.toml"


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

    def __init__(
        self,
        store: Any,
        settings: PushSettings | None = None,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        resolver: Resolver | None = None,
    ) -> None:
        """``transport``: what pinned connections go through (tests; by default a fresh one
        per delivery); ``resolver``: how webhook hosts are looked up (default: DNS)."""
        self.store = store
        self.settings = settings or PushSettings()
        self.resolver = resolver
        self._send, self._receive = trio.open_memory_channel[Delivery](QUEUE_SIZE)
        self._transport = transport
        self._tls: Any = None  # one TLS context for every delivery's transport (made on first use)
        self.delivered = 0
        self.failed = 0

    def _pins(self) -> AddressPins:
        """A fresh set of pins under this dispatcher's SSRF rules."""
        return AddressPins(
            allow_private=self.settings.allow_private,
            allow_loopback=self.settings.allow_loopback,
            resolver=self.resolver,
            allow_hint=ALLOW_HINT,
        )

    async def check_url(self, url: str, *, field: str) -> None:
        """-32602 naming ``field`` if ``url`` may not receive notifications."""
        try:
            await self._pins().addresses(url)
        except UrlRefused as exc:
            raise m.invalid(field, f"webhook URL refused: {exc}") from None

    async def configs(self, task_id: str) -> list[m.PushConfig]:
        """The push configs stored for ``task_id`` (as ``TaskManager.set_push`` stores them)."""
        stored = await self.store.push_configs(task_id)
        return [m.push_config_from_json(data, stored=True) for data in stored]

    async def notify(self, live: Any, event: m.Event) -> None:
        """Queue ``event`` for every webhook of ``live``'s task (never blocks on delivery)."""
        if live.push is None:
            live.push = await self.configs(live.task.id)
        if not live.push:
            return
        dialect = m.V03 if live.dialect in (m.V03, m.V01) else m.V1
        body = m.event_to_json(event, dialect)
        for config in live.push:
            try:
                self._send.send_nowait(Delivery(config, body))
            except trio.WouldBlock:
                log.warning(
                    "push queue full: dropped a notification for task %s to %s",
                    config.task_id,
                    public_url(config.url),  # its query may carry the client's token
                )

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Deliver queued notifications, ``WORKERS`` at a time, until cancelled."""
        async with trio.open_nursery() as nursery:
            for _ in range(WORKERS):
                nursery.start_soon(self._worker)
            task_status.started()

    async def _worker(self) -> None:
        async for delivery in self._receive:
            await self.deliver(delivery)

    async def deliver(self, delivery: Delivery) -> bool:
        """POST one notification, retrying with backoff; True once a 2xx came back."""
        config = delivery.config
        headers = {"Content-Type": "application/json"}
        if config.auth_scheme:
            headers["Authorization"] = f"{config.auth_scheme} {config.credentials or ''}".strip()
        if config.token:
            headers["X-A2A-Notification-Token"] = config.token
        payload = json.dumps(delivery.body, ensure_ascii=False).encode()
        pins = self._pins()
        inner = self._transport
        if inner is None:
            if self._tls is None:
                self._tls = httpx.create_ssl_context()
            inner = httpx.AsyncHTTPTransport(verify=self._tls)
        client = httpx.AsyncClient(
            timeout=self.settings.timeout_s,
            transport=PinnedTransport(pins, inner),
            follow_redirects=False,
            trust_env=False,
        )
        delay = self.settings.backoff_s
        try:
            for attempt in range(1, self.settings.retries + 1):
                try:
                    # Checked on the first attempt, pinned for the rest.
                    await pins.addresses(config.url)
                    # The status is the whole answer: the body, however long, is never read.
                    async with client.stream(
                        "POST", config.url, content=payload, headers=headers
                    ) as response:
                        status = response.status_code
                    if 200 <= status < 300:
                        self.delivered += 1
                        return True
                    problem = f"HTTP {status}"
                except UrlRefused as exc:
                    log.warning("push to %s refused: %s", public_url(config.url), exc)
                    break
                except (httpx.HTTPError, UnicodeError) as exc:
                    # The error may quote a header: the client's token, the credentials.
                    said = redact(str(exc), (config.token or "", config.credentials or ""))
                    problem = f"{type(exc).__name__}: {said}"
                log.info(
                    "push to %s failed (attempt %d): %s", public_url(config.url), attempt, problem
                )
                if attempt < self.settings.retries:
                    await trio.sleep(delay)
                    delay *= 2
            self.failed += 1
            return False
        finally:
            if self._transport is None:  # a transport given to the dispatcher outlives the delivery
                with trio.CancelScope(shield=True):
                    await client.aclose()
