"""The daemon's settings, read and checked once from ``config.http``."""

from __future__ import annotations

import hmac
import math
import os
from collections.abc import Mapping

import attrs
from roost.kernel import ConfigError

from ._auth import LOCAL, Principal, key_digest, normalise_origin, resolve_api_key, resolve_keys

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8470


def _keys_of(settings: HttpSettings) -> tuple[tuple[bytes, Principal], ...]:
    if settings.api_key is None:
        return ()
    return ((key_digest(settings.api_key), Principal("default", admin=True)),)


@attrs.frozen
class HttpSettings:
    """What the HTTP layer enforces. ``api_key`` is kept out of ``repr`` so it is never logged.

    ``keys``: ``(sha256 of a key, its principal)`` for every key accepted (by default just
    ``api_key``, as ``default``); none means no auth, every caller being ``local``."""

    api_key: str | None = attrs.field(default=None, repr=False)
    api_key_source: str = "off"
    rate_limit_per_s: float = 20.0
    rate_limit_burst: int = 40
    max_body_bytes: int = 1_048_576
    allowed_origins: tuple[str, ...] = ()
    # False: peers on this host (loopback) are not rate limited; the limit is for the others.
    rate_limit_loopback: bool = False
    keys: tuple[tuple[bytes, Principal], ...] = attrs.field(
        default=attrs.Factory(_keys_of, takes_self=True), repr=False
    )

    def principal_for(self, token: str | None) -> Principal | None:
        """The principal whose key ``token`` is (constant time over all keys); ``local``
        when no key is configured; None when the token matches no key."""
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
        rate = getattr(http_config, "rate_limit_per_s", 20.0)
        if (
            isinstance(rate, bool)
            or not isinstance(rate, (int, float))
            or not math.isfinite(rate)
            or rate <= 0
        ):
            raise ConfigError(
                f"http.rate_limit_per_s must be a positive number (requests per second), got {rate!r}; "
                "set e.g. rate_limit_per_s = 20 under [http] in roost.toml"
            )
        burst = getattr(http_config, "rate_limit_burst", 40)
        if isinstance(burst, bool) or not isinstance(burst, int) or burst < 1:
            raise ConfigError(
                f"http.rate_limit_burst must be an integer of at least 1, got {burst!r}; "
                "set e.g. rate_limit_burst = 40 under [http] in roost.toml"
            )
        max_body = getattr(http_config, "max_body_bytes", 1_048_576)
        if isinstance(max_body, bool) or not isinstance(max_body, int) or max_body < 1:
            raise ConfigError(
                f"http.max_body_bytes must be a positive integer (bytes), got {max_body!r}; "
                "set e.g. max_body_bytes = 1048576 under [http] in roost.toml"
            )
        loopback = getattr(http_config, "rate_limit_loopback", False)
        if not isinstance(loopback, bool):
            raise ConfigError(
                f"http.rate_limit_loopback must be true or false, got {loopback!r}; set it to true "
                "under [http] in roost.toml to rate limit callers on this host too (e.g. behind a "
                "reverse proxy on the same host)"
            )
        raw_origins = getattr(http_config, "allowed_origins", ()) or ()
        if isinstance(raw_origins, str):
            raw_origins = (raw_origins,)
        origins: list[str] = []
        for i, origin in enumerate(raw_origins):
            if origin == "*":
                origins.append(origin)
                continue
            if not isinstance(origin, str) or normalise_origin(origin) is None:
                raise ConfigError(
                    f"http.allowed_origins[{i}] must look like 'https://example.com' or "
                    f"'http://host:port' (or '*'), got {origin!r}"
                )
            origins.append(origin)
        keys = resolve_keys(http_config, env, key)
        named = [p.name for _, p in keys if p.name != "default"]
        if named:
            source = (source + " (principal default); " if key is not None else "") + "[http.keys]: " + ", ".join(named)
        return cls(
            api_key=key,
            api_key_source=source,
            rate_limit_per_s=float(rate),
            rate_limit_burst=burst,
            max_body_bytes=max_body,
            allowed_origins=tuple(origins),
            rate_limit_loopback=loopback,
            keys=keys,
        )
