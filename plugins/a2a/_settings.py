"""``[a2a]`` in roost.toml (a raw dict in the kernel config), checked with clear errors."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import attrs
from roost.kernel import ConfigError, header_table, number_setting, public_url, unknown_key

_NAME = re.compile(r"^[a-z0-9][a-z0-9_\-]{0,62}$")


@attrs.frozen
class ExternalAgent:
    """An A2A agent elsewhere, offered to local agents as the tool ``a2a_{name}``."""

    name: str
    url: str
    # Sent on every request (credentials).
    headers: Mapping[str, str] = attrs.field(factory=dict, repr=False)


@attrs.frozen
class A2ASettings:
    enabled: bool = True
    listen_path: str = "/a2a"
    api_key: str | None = attrs.field(default=None, repr=False)
    push_notifications: bool = False
    push_allow_private: bool = False
    max_tasks: int = 1000
    # Unfinished tasks one principal may hold; None: max(1, max_tasks // 10).
    max_open_tasks_per_caller: int | None = None
    input_required_ttl_s: float = 3600.0  # a task waiting for input this long expires
    default_agent: str | None = None
    external_agents: tuple[ExternalAgent, ...] = ()

    @property
    def open_tasks_per_caller(self) -> int:
        """``max_open_tasks_per_caller`` as it applies (by default a tenth of ``max_tasks``)."""
        if self.max_open_tasks_per_caller is not None:
            return self.max_open_tasks_per_caller
        return max(1, self.max_tasks // 10)

    @classmethod
    def from_config(cls, raw: Any) -> A2ASettings:
        """Read ``config.a2a``; a bad value raises ConfigError naming the key and the fix."""
        if raw is None:
            return cls()
        if not isinstance(raw, Mapping):
            raise ConfigError(
                f"a2a: expected a table ([a2a] in roost.toml), got {type(raw).__name__}"
            )
        keys = [field.name for field in attrs.fields(cls)]
        unknown = sorted(set(raw) - set(keys))
        if unknown:
            raise unknown_key(f"a2a.{unknown[0]}", str(unknown[0]), keys, "[a2a]")

        def flag(key: str, default: bool) -> bool:
            value = raw.get(key, default)
            if not isinstance(value, bool):
                raise ConfigError(f"a2a.{key}: expected true or false, got {value!r}")
            return value

        path = raw.get("listen_path", "/a2a")
        if not isinstance(path, str) or not re.fullmatch(r"(/[A-Za-z0-9_\-.]+)+", path):
            raise ConfigError(f"a2a.listen_path: expected a path such as '/a2a', got {path!r}")
        key = raw.get("api_key")
        if key is not None and (not isinstance(key, str) or len(key) < 8):
            raise ConfigError(
                "a2a.api_key: expected a string of at least 8 characters (or leave it out)"
            )
        max_tasks = raw.get("max_tasks", 1000)
        if number_setting(max_tasks, 1, 10_000_000, integer=True, closed=True) is None:
            raise ConfigError(
                f"a2a.max_tasks: expected an integer from 1 to 10000000, got {max_tasks!r}"
            )
        per_caller = raw.get("max_open_tasks_per_caller")
        if per_caller is not None and (
            number_setting(per_caller, 1, max_tasks, integer=True, closed=True) is None
        ):
            raise ConfigError(
                "a2a.max_open_tasks_per_caller: expected an integer from 1 to a2a.max_tasks "
                f"({max_tasks}), got {per_caller!r} (leave it out for a tenth of max_tasks)"
            )
        raw_ttl = raw.get("input_required_ttl_s", 3600.0)
        ttl = number_setting(raw_ttl, 1, 31_536_000, closed=True)
        if ttl is None:
            raise ConfigError(
                "a2a.input_required_ttl_s: expected seconds from 1 "
                f"to 31536000 (a year), got {raw_ttl!r}"
            )
        default_agent = raw.get("default_agent")
        if default_agent is not None and not isinstance(default_agent, str):
            raise ConfigError(f"a2a.default_agent: expected an agent name, got {default_agent!r}")
        externals_raw = raw.get("external_agents", [])
        if not isinstance(externals_raw, list):
            raise ConfigError(
                "a2a.external_agents: expected an array of tables "
                "([[a2a.external_agents]] name, url)"
            )
        externals: list[ExternalAgent] = []
        seen: set[str] = set()
        for i, item in enumerate(externals_raw):
            where = f"a2a.external_agents[{i}]"
            if not isinstance(item, Mapping):
                raise ConfigError(f"{where}: expected a table with name and url")
            valid = ("name", "url", "headers")
            extra = [k for k in item if k not in valid]
            if extra:
                raise unknown_key(where, str(extra[0]), valid, "[[a2a.external_agents]]")
            name, url = item.get("name"), item.get("url")
            if not isinstance(name, str) or not _NAME.fullmatch(name):
                raise ConfigError(
                    f"{where}.name: expected a lowercase name (letters, "
                    f"digits, _ or -), got {name!r}"
                )
            if name in seen:
                raise ConfigError(f"{where}.name: {name!r} is listed twice")
            if not isinstance(url, str) or not re.match(r"^https?://", url):
                shown = public_url(url) if isinstance(url, str) else url
                raise ConfigError(
                    f"{where}.url: expected an http:// or https:// URL, got {shown!r}"
                )
            headers = header_table(item.get("headers", {}), f"{where}.headers")
            seen.add(name)
            externals.append(ExternalAgent(name, url, headers))
        return cls(
            enabled=flag("enabled", True),
            listen_path=path,
            api_key=key,
            push_notifications=flag("push_notifications", False),
            push_allow_private=flag("push_allow_private", False),
            max_tasks=max_tasks,
            max_open_tasks_per_caller=per_caller,
            input_required_ttl_s=ttl,
            default_agent=default_agent,
            external_agents=tuple(externals),
        )
