"""Boot: ``async with open_kernel(config) as kernel:``.

Plugins → configuration check → store → tools and providers → agents (manifests, their
``agent_<name>`` tools, providers, one actor each) → plugin services → ``KERNEL:STARTED``.
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import trio

from ._agent import AgentRuntime
from ._errors import ConfigError, RoostError, ToolNameCollision
from ._events import Event, EventKind
from ._hookspecs import ProviderDescriptor, ServiceDescriptor
from ._kernel import Kernel
from ._plugins import PluginFailure, PluginManager
from ._tools import Tool

log = logging.getLogger("roost.kernel")


@asynccontextmanager
async def open_kernel(
    config: Any = None,
    *,
    agents: Sequence[Any] = (),
    plugins: Sequence[Any] = (),
    load_entry_points: bool = True,
) -> AsyncIterator[Kernel]:
    """Boot a kernel, with in-memory manifests ``agents`` and plugin objects ``plugins``
    beside the configured ones; leaving the block shuts it down within the deadline."""
    from ._actor import RestartPolicy, open_actor_system
    from ._config import load_config
    from ._manifest import load_agents, tool_pattern_warnings
    from ._paths import database_path, ensure_private_dir
    from ._store import open_store

    if config is None:
        config = load_config()

    pm = PluginManager()
    if load_entry_points:
        pm.load_entry_points(disabled=config.plugins.disabled)
    for i, plugin in enumerate(plugins):
        pm.register_named(getattr(plugin, "__name__", f"plugin-{i}"), plugin)
    provider_results = pm.call_each("roost_providers")
    _check_config(pm, config, provider_results)  # a bad setting stops the boot here
    home = ensure_private_dir(Path(config.home))

    async with open_store(
        database_path(home),
        synchronous=config.store.synchronous,
        legacy_owner=config.http.host_principal,
    ) as store:
        async with open_actor_system(shutdown_timeout_s=config.kernel.shutdown_timeout_s) as actors:
            kernel = Kernel(config, pm, store, actors)
            for failure in pm.failures:
                kernel.publish(
                    Event(EventKind.KERNEL_PLUGIN_ERROR, "kernel", payload=attrs.asdict(failure))
                )
            tools = pm.call_each("roost_tools", config=config)
            for tool in _descriptors(
                kernel, tools, "roost_tools", Tool, ", expected roost.kernel.Tool"
            ):
                try:
                    kernel.registry.register(tool)
                except ToolNameCollision as exc:
                    _plugin_failure(kernel, tool.spec.owner, str(exc))
            for desc in _descriptors(
                kernel, provider_results, "roost_providers", ProviderDescriptor
            ):
                kernel.providers.setdefault(desc.name, desc)

            found, errors = load_agents(
                [Path(d) for d in config.agents.dirs],
                include_bundled=config.agents.bundled,
                config_file=config.where,
            )
            kernel.manifest_errors.extend(errors)
            for err in errors:
                log.error("agent manifest skipped: %s", err)
            for manifest in agents:
                found[manifest.name] = manifest
            kernel.agents = dict(sorted(found.items()))
            for name in kernel.agents:
                _add_agent_tool(kernel, name)
            specs = kernel.registry.specs()
            for manifest in kernel.agents.values():
                kernel.load_warnings += tool_pattern_warnings(manifest, specs)
            for warning in kernel.load_warnings:
                log.warning("%s", warning)
            for name, manifest in kernel.agents.items():
                try:
                    provider = _create_provider(kernel, manifest.model)
                    tiers = _create_tiers(kernel, manifest.model)
                except Exception as exc:
                    kernel.agent_errors[name] = str(exc)
                    log.error("agent %s is unavailable: %s", name, exc)
                    continue
                runtime = AgentRuntime(kernel, name, provider, tiers=tiers)
                kernel._runtimes[name] = runtime
                actors.spawn(
                    name,
                    lambda runtime=runtime: runtime,
                    mailbox_size=config.kernel.mailbox_size,
                    concurrency=max(
                        config.kernel.agent_concurrency, manifest.limits.max_concurrent_messages
                    ),
                    # The kernel cancels an agent's run whenever its caller stops waiting
                    # anyway, so the run may as well execute in the caller's task.
                    direct_asks=True,
                    restart=RestartPolicy(cooldown_s=config.kernel.restart_cooldown_s),
                )
            body_error: Exception | None = None
            async with trio.open_nursery() as services:
                await _start_services(kernel, services)
                kernel.publish(
                    Event(
                        EventKind.KERNEL_STARTED,
                        "kernel",
                        payload={"agents": list(kernel.agents), "tools": len(kernel.registry)},
                    )
                )
                pm.call_each("roost_kernel_started", kernel=kernel)  # a plugin raising is recorded
                try:
                    yield kernel
                except Exception as exc:
                    # Re-raised below as itself, not wrapped in the services nursery's group.
                    body_error = exc
                finally:
                    pm.call_each("roost_kernel_stopping", kernel=kernel)
                    kernel.publish(Event(EventKind.KERNEL_STOPPING, "kernel"))
                    services.cancel_scope.cancel()
            if body_error is not None:
                raise body_error


def _check_config(
    pm: PluginManager, config: Any, provider_results: list[tuple[str, list[Any]]]
) -> None:
    """One ``ConfigError`` with every problem the plugins find (``roost_check_config``) and
    every ``[providers.<name>]`` naming no installed or disabled provider."""
    where = config.where
    problems: list[str] = []
    # A broken check (any other exception) is the plugin's failure, not the config's.
    for _name, found in pm.call_each("roost_check_config", answers=(ConfigError,), config=config):
        for exc in (e for e in found if isinstance(e, ConfigError)):
            text = str(exc)
            problems.append(text if text.startswith(where) else f"{where}: {text}")
    descs = (d for _, found in provider_results for d in found)
    installed = sorted({d.name for d in descs if isinstance(d, ProviderDescriptor)})
    for section in config.providers:
        if section not in installed and section not in config.plugins.disabled:
            close = difflib.get_close_matches(section, installed, n=1)
            hint = f" — did you mean [providers.{close[0]}]?" if close else ";"
            problems.append(
                f"{where}: [providers.{section}]: no installed provider is called {section!r}"
                f"{hint} installed providers: {', '.join(installed) or 'none'}"
            )
    if len(problems) == 1:
        raise ConfigError(problems[0])
    if problems:
        raise ConfigError(
            f"{len(problems)} problems in the configuration:\n  " + "\n  ".join(problems)
        )


async def _start_services(kernel: Kernel, nursery: trio.Nursery) -> None:
    services = kernel.plugins.call_each("roost_services", kernel=kernel)
    for desc in _descriptors(kernel, services, "roost_services", ServiceDescriptor):
        with trio.move_on_after(desc.start_timeout_s) as scope:
            await nursery.start(_run_service, kernel, desc)
        if scope.cancelled_caught:
            _service_failed(kernel, desc.name, f"did not start within {desc.start_timeout_s:g} s")


async def _run_service(
    kernel: Kernel, desc: ServiceDescriptor, *, task_status=trio.TASK_STATUS_IGNORED
) -> None:
    started = False

    class _Status:
        def started(self, value: Any = None) -> None:
            nonlocal started
            started = True
            task_status.started(value)

    try:
        await desc.run(kernel, task_status=_Status())
    except Exception as exc:  # a failing service is reported; the kernel stays up
        log.exception("service %s failed", desc.name)
        _service_failed(kernel, desc.name, f"{type(exc).__name__}: {exc}")
    if not started:
        task_status.started(None)


def _service_failed(kernel: Kernel, name: str, error: str) -> None:
    kernel.service_errors[name] = error
    kernel.publish(
        Event(EventKind.KERNEL_SERVICE_ERROR, "kernel", payload={"service": name, "error": error})
    )


def _descriptors(
    kernel: Kernel, results: list[tuple[str, list[Any]]], hook: str, kind: type, hint: str = ""
) -> Iterator[Any]:
    """Each result of ``hook`` that is a ``kind``; any other is its plugin's failure."""
    for plugin, found in results:
        for desc in found:
            if isinstance(desc, kind):
                yield desc
            else:
                _plugin_failure(kernel, plugin, f"{hook} returned {type(desc).__name__}{hint}")


def _add_agent_tool(kernel: Kernel, target: str) -> None:
    """Register ``agent_<target>``, the tool through which agents ask ``target``."""
    tool = kernel._agent_tool(target)
    try:
        kernel.registry.register(tool)
    except ToolNameCollision as exc:
        _plugin_failure(kernel, "agents", str(exc))
    else:
        kernel._agent_tools[tool.spec.name] = tool


def _plugin_failure(kernel: Kernel, name: str, error: str) -> None:
    kernel.plugins.failures.append(PluginFailure(name, "register", error))
    log.error("plugin %s: %s", name, error)
    kernel.publish(
        Event(EventKind.KERNEL_PLUGIN_ERROR, "kernel", payload={"plugin": name, "error": error})
    )


def _create_provider(kernel: Kernel, model: Any) -> Any:
    """The provider for ``model`` (a ``ModelConfig``)."""
    name = model.provider
    descriptor = kernel.providers.get(name)
    if descriptor is None:
        known = ", ".join(sorted(kernel.providers)) or "none"
        raise RoostError(
            f"model.provider {name!r} is not installed (installed providers: {known}); "
            "install its plugin or choose another provider in agent.json"
        )
    return descriptor.factory(model, dict(kernel.config.providers.get(name, {})))


def _create_tiers(kernel: Kernel, model: Any) -> tuple[Any, Any] | None:
    """(fast, complex) providers when ``model`` names both tiers, else None."""
    if model.fast is None or model.complex is None:
        return None
    return tuple(_create_provider(kernel, model.for_tier(t)) for t in ("fast", "complex"))
