"""A real kernel and daemon on 127.0.0.1 with named API keys, for the principal tests
(issue 15, items 12 and 15).

The ``recall`` agent answers with every user message of its conversation so far
("heard: a | b"), so a test sees at once whose history a session holds; a message that
starts with "ask" makes it ask a question (the A2A task stays open, input-required). The
``waiter`` agent answers "wait" only once ``release()`` is called (a request in flight)."""

from __future__ import annotations

import json
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio
from roost.kernel import (
    Completion,
    ProviderDescriptor,
    StreamDelta,
    default_config,
    hookimpl,
    open_kernel,
)

KEYS = {"alice": "alice-key-0123456789", "bob": "bob-key-0123456789", "ops": "ops-key-0123456789"}
ENV = {name: f"ROOST_TEST_KEY_{name.upper()}" for name in KEYS}
V1 = {"A2A-Version": "1.0"}

_waiting: dict[str, trio.Event] = {}


def bearer(name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[name]}"}


def release() -> None:
    """Let every ``waiter`` run waiting so far (and later) answer."""
    if "release" in _waiting:
        _waiting["release"].set()


async def waiter_started() -> None:
    """Return once a ``waiter`` run is waiting for ``release()``."""
    await _waiting["started"].wait()


class Recall:
    name = "recall"

    def _answer(self, request: Any) -> Completion:
        said = [m.content for m in request.messages if m.role == "user"]
        if said[-1].startswith("ask"):
            return Completion(text="what do you want?", stop_reason="input_required")
        return Completion(text="heard: " + " | ".join(said))

    async def complete(self, request: Any) -> Completion:
        return self._answer(request)

    async def stream(self, request: Any):
        yield StreamDelta(completion=self._answer(request))


class Waiter:
    name = "waiter"

    async def complete(self, request: Any) -> Completion:
        text = request.messages[-1].content
        if text == "wait":
            _waiting["started"].set()
            with trio.fail_after(60):
                await _waiting["release"].wait()
        return Completion(text=f"done: {text}")

    async def stream(self, request: Any):
        yield StreamDelta(completion=await self.complete(request))


class TestProviders:
    @hookimpl
    def roost_providers(self):
        return [
            ProviderDescriptor("recall", lambda model, settings: Recall()),
            ProviderDescriptor("waiter", lambda model, settings: Waiter()),
        ]


def _write_agent(directory: Path, name: str, provider: str) -> None:
    path = directory / name / "agent.json"
    path.parent.mkdir(parents=True)
    path.write_text(
        json.dumps(
            {
                "name": name,
                "description": f"{name} (principal test agent)",
                "version": "0.1.0",
                "model": {"provider": provider, "name": "test"},
                "a2a": {"enabled": True},
            }
        )
    )


def make_config(tmp_path: Path, *, keys: bool = True, api_key: str | None = None, **http: Any):
    """Agents ``recall`` and ``waiter``; with ``keys``, principals alice, bob and ops
    (admin), their keys read from the environment (see ``set_key_env``)."""
    agents = tmp_path / "agents"
    if not agents.exists():
        _write_agent(agents, "recall", "recall")
        _write_agent(agents, "waiter", "waiter")
    settings: dict[str, Any] = {
        "port": 0,
        "rate_limit_per_s": 100000,
        "rate_limit_burst": 100000,
        **http,
    }
    if keys:
        settings["keys"] = {
            "alice": {"key_env": ENV["alice"]},
            "bob": {"key_env": ENV["bob"]},
            "ops": {"key_env": ENV["ops"], "admin": True},
        }
    if api_key is not None:
        settings["api_key"] = api_key
    return default_config(
        home=str(tmp_path / "home"),
        agents={"dirs": [str(agents)], "bundled": False},
        http=settings,
        a2a={"default_agent": "recall", "push_notifications": True},
    )


def set_key_env(monkeypatch: Any) -> None:
    for name, key in KEYS.items():
        monkeypatch.setenv(ENV[name], key)


@asynccontextmanager
async def serve(config):
    from roost.plugins.http import open_daemon

    _waiting.update(started=trio.Event(), release=trio.Event())
    async with open_kernel(config, plugins=[TestProviders()]) as kernel:
        async with open_daemon(kernel, graceful_timeout=1) as url:
            yield kernel, url
    release()
