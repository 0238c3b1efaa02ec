"""The daemon's settings, read and checked once from ``config.http``."""

from __future__ import annotations

import hmac
import math
import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import attrs
from roost.kernel import ConfigError, number_setting

from ._auth import (
    LOCAL,
    LOOPBACK_HOSTS,
    Principal,
    host_name,
    key_digest,
    normalise_origin,
    resolve_api_key,
    resolve_keys,
    split_host,
)

DEFAULT_KEEP_ALIVE_S = 5.0


@attrs.frozen
class HttpSettings:
    """What the HTTP layer enforces; ``api_key`` is out of ``repr``, never logged. ``keys``:
    ``(sha256, principal)`` per key (default: ``api_key`` as ``default``); none: no auth."""

    api_key: str | None = attrs.field(default=None, repr=False)
    api_key_source: str = "off"
    rate_limit_per_s: float = 20.0
    rate_limit_burst: int = 40
    max_body_bytes: int = 1_048_576
    allowed_origins: tuple[str, ...] = ()
    # False: peers on this host (loopback) are not rate limited; the limit is for the others.
    rate_limit_loopback: bool = False
    # Names (lowercase, no port) served besides loopback and the address reached; "*": any.
    allowed_hosts: tuple[str, ...] = ()
    # The base URL links are built from (cards' interface URLs); None: the bound address.
    public_url: str | None = None
    # A connection with no request under way (its first head included) closes after this.
    keep_alive_s: float = DEFAULT_KEEP_ALIVE_S
    keys: tuple[tuple[bytes, Principal], ...] = attrs.field(
        default=attrs.Factory(lambda s: resolve_keys(None, {}, s.api_key), takes_self=True),
        repr=False,
    )

    @property
    def trusted_hosts(self) -> frozenset[str]:
        """Host names always served: loopback names, ``allowed_hosts`` and ``public_url``'s host."""
        names = set(LOOPBACK_HOSTS) | set(self.allowed_hosts)
        if self.public_url is not None:
            names.add(host_name(urlsplit(self.public_url).netloc) or "")
        return frozenset(names - {""})

    def principal_for(self, token: str | None) -> Principal | None:
        """``token``'s principal (constant time over all keys), ``local`` without keys, or None."""
        if not self.keys:
            return LOCAL
        if token is None:
            return None
        digest = key_digest(token)
        found = None
        for expected, principal in self.keys:
            if hmac.compare_digest(expected, digest):
                found = principal
        return found

    @classmethod
    def from_config(cls, http_config: object, env: Mapping[str, str] | None = None) -> HttpSettings:
        """Read ``config.http``; a bad value raises ConfigError naming the field and the fix."""
        env = os.environ if env is None else env
        key, source = resolve_api_key(http_config, env)
        numbers = {name: _number(http_config, name) for name in _NUMBERS}
        loopback = getattr(http_config, "rate_limit_loopback", False)
        if not isinstance(loopback, bool):
            raise ConfigError(
                f"http.rate_limit_loopback must be true or false, got {loopback!r}; set it to true "
                "under [http] in roost.toml to rate limit callers on this host too (e.g. behind a "
                "reverse proxy on the same host)"
            )
        origins = _entries(
            http_config,
            "allowed_origins",
            lambda origin: origin if normalise_origin(origin) is not None else None,
            "look like 'https://example.com' or 'http://host:port' (or '*')",
        )
        hosts = _entries(
            http_config,
            "allowed_hosts",
            _host_entry,
            "be a host name or IP address without scheme or port (e.g. 'roost.example.com' "
            "or '192.168.1.5'), or '*'",
        )
        keys = resolve_keys(http_config, env, key)
        if named := [p.name for _, p in keys if p.name != "default"]:
            default = source + " (principal default); " if key is not None else ""
            source = default + "[http.keys]: " + ", ".join(named)
        return cls(
            api_key=key,
            api_key_source=source,
            allowed_origins=origins,
            rate_limit_loopback=loopback,
            allowed_hosts=hosts,
            public_url=_public_url(getattr(http_config, "public_url", None)),
            **numbers,
            keys=keys,
        )


# Each number: its default (an int: an integer setting), its bounds (above 0, or from a
# positive lower bound) and what it must be. An error's example is the default as written in
# roost.toml: a float format would turn 1048576 into 1.04858e+06, which an integer refuses.
# A keep-alive below 0.1 s closes a connection before its first request can arrive.
_NUMBERS: dict[str, tuple[float, float, float, str]] = {
    "rate_limit_per_s": (20.0, 0, math.inf, "a positive number (requests per second)"),
    "rate_limit_burst": (40, 0, math.inf, "an integer of at least 1"),
    "max_body_bytes": (1_048_576, 0, math.inf, "a positive integer (bytes)"),
    "keep_alive_s": (DEFAULT_KEEP_ALIVE_S, 0.1, 3600, "a number of seconds from 0.1 to 3600"),
}


def _number(http_config: object, name: str) -> Any:
    """``http.<name>`` (its default when unset), checked; a ConfigError names it and an example."""
    default, low, high, what = _NUMBERS[name]
    value = getattr(http_config, name, None)
    if value is None:
        return default
    integer = isinstance(default, int)
    checked = number_setting(value, low, high, integer=integer, closed=low > 0)
    if checked is None:
        example = default if integer else f"{default:g}"
        raise ConfigError(
            f"http.{name} must be {what}, got {value!r}; "
            f"set e.g. {name} = {example} under [http] in roost.toml"
        )
    return checked


def _host_entry(entry: str) -> str | None:
    parsed = split_host(entry) or split_host(f"[{entry.strip()}]")  # or a bare IPv6 address
    return parsed[0] if parsed is not None and not parsed[1] else None


def _entries(http_config: object, name: str, parse: Any, what: str) -> tuple[str, ...]:
    """``http.<name>``: a string or a list of them, each ``"*"`` or as ``parse`` makes it
    (None: a ConfigError naming the entry and ``what`` it must be)."""
    raw = getattr(http_config, name, ()) or ()
    out: list[str] = []
    for i, entry in enumerate((raw,) if isinstance(raw, str) else raw):
        value = entry if entry == "*" else parse(entry) if isinstance(entry, str) else None
        if value is None:
            raise ConfigError(f"http.{name}[{i}] must {what}, got {entry!r}")
        out.append(value)
    return tuple(out)


def _public_url(raw: object) -> str | None:
    if raw is None:
        return None
    problem = None
    if not isinstance(raw, str):
        problem = "it is not a string"
    else:
        try:
            parts = urlsplit(raw.strip())
            parts.port  # noqa: B018 - raises ValueError for a bad port
        except ValueError:
            parts = None
        if (
            parts is None
            or parts.scheme not in ("http", "https")
            or host_name(parts.netloc) is None
        ):
            problem = "it is not an http:// or https:// URL with a host"
        elif parts.query or parts.fragment:
            problem = "it has a query or a fragment"
    if problem is not None:
        raise ConfigError(
            f"http.public_url must be the URL clients reach the daemon at, such as "
            f"'https://roost.example.com' or 'http://192.168.1.5:8470' ({problem}), got {raw!r}"
        )
    return raw.strip().rstrip("/")  # type: ignore[union-attr]
