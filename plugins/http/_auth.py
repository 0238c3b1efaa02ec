"""Bearer-token and Origin checks (pure functions; the app applies them)."""

from __future__ import annotations

import functools
import hashlib
import hmac
import ipaddress
import re
from collections.abc import Iterable, Mapping
from urllib.parse import urlsplit

LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})
_HOST_NAME = re.compile(r"[a-z0-9_-]+(?:\.[a-z0-9_-]+)*")
_PORT = re.compile(r"[0-9]{1,5}")


def resolve_api_key(http_config: object, env: Mapping[str, str]) -> tuple[str | None, str]:
    """The API key the daemon requires, and where it came from (never the key itself).

    ``http.api_key`` in the config wins; otherwise the environment variable named by
    ``http.api_key_env``. Blank values count as unset. Returns ``(None, "off")`` when no
    key is configured.
    """
    key = getattr(http_config, "api_key", None)
    if isinstance(key, str) and key.strip():
        return key.strip(), "http.api_key, from roost.toml or the environment"
    env_name = getattr(http_config, "api_key_env", None) or ""
    if env_name:
        value = env.get(env_name, "")
        if value.strip():
            return value.strip(), f"environment variable {env_name}"
    return None, "off"


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, else None."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    token = token.strip()
    return token or None


def tokens_match(presented: str | None, expected: str) -> bool:
    """Constant-time comparison (hashing first so the length does not leak either)."""
    if presented is None:
        return False
    a = hashlib.sha256(presented.encode("utf-8", "surrogatepass")).digest()
    b = hashlib.sha256(expected.encode("utf-8", "surrogatepass")).digest()
    return hmac.compare_digest(a, b)


def token_fingerprint(token: str) -> str:
    """A short, non-reversible name for a token (for rate-limit keys; never log the token)."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def normalise_origin(origin: str) -> str | None:
    """``scheme://host[:port]`` in lowercase, without a trailing slash; None if malformed."""
    try:
        parts = urlsplit(origin.strip())
        host = parts.hostname
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not host:
        return None
    if ":" in host:
        host = f"[{host}]"
    return f"{parts.scheme}://{host}" + (f":{port}" if port is not None else "")


def origin_allowed(origin: str | None, allowed_origins: Iterable[str]) -> bool:
    """Whether a request carrying this ``Origin`` header may proceed.

    No header (a non-browser client) is allowed; so are loopback origins (``localhost``,
    ``127.0.0.1``, ``[::1]`` on any port) and any listed origin (``"*"`` allows all).
    Everything else, including ``null``, is refused: this blocks DNS-rebinding and
    cross-site requests from a browser.
    """
    if origin is None:
        return True
    allowed = list(allowed_origins)
    if "*" in allowed:
        return True
    normal = normalise_origin(origin)
    if normal is None:
        return False
    host = urlsplit(normal).hostname
    if host in LOOPBACK_HOSTS:
        return True
    return any(normalise_origin(a) == normal for a in allowed)


def split_host(value: str) -> tuple[str, str] | None:
    """``(name, port)`` of a ``Host`` header value such as ``Example.com:8470`` or
    ``[::1]``: the name lowercase, without brackets or a trailing dot; the port ``""`` when
    absent. None when malformed (user info, a path, a bare IPv6 address, a non-ASCII name)."""
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        name, rest = value[1:end], value[end + 1 :]
        if end < 0 or (rest and not (rest[:1] == ":" and _PORT.fullmatch(rest[1:]))):
            return None
        try:
            name = str(ipaddress.IPv6Address(name))
        except ValueError:
            return None
        return name, rest[1:]
    name, sep, port = value.rpartition(":")
    if not sep:
        name, port = value, ""
    elif not _PORT.fullmatch(port):
        return None
    name = name[:-1] if name.endswith(".") else name
    return (name, port) if _HOST_NAME.fullmatch(name) else None


def host_name(value: str) -> str | None:
    """The name part of a ``Host`` header value (see ``split_host``); None when malformed."""
    parsed = split_host(value)
    return None if parsed is None else parsed[0]


def _same_address(name: str, address: str) -> bool:
    try:
        a = ipaddress.ip_address(name)
        b = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    a = getattr(a, "ipv4_mapped", None) or a
    b = getattr(b, "ipv4_mapped", None) or b
    return a == b


@functools.lru_cache(maxsize=512)
def host_allowed(host: str | None, local_addr: str | None, trusted: frozenset[str]) -> bool:
    """Whether a request naming ``host`` (its ``Host`` header) may be served: the guard
    against DNS rebinding, where a browser page on an attacker's name that now resolves to
    this host reads the API in the page's own origin (no ``Origin`` header on a GET).

    Allowed: no header (not a browser: browsers always send one), a name in ``trusted``
    (the loopback names, ``http.allowed_hosts``, ``http.public_url``'s host; ``"*"`` allows
    all) with any port, and the IP address the connection reached (``local_addr``): an IP
    literal involves no DNS, so it cannot be rebound. Any other name is refused."""
    if host is None:
        return True
    if "*" in trusted:
        return True
    name = host_name(host)
    if name is None:
        return False
    return name in trusted or (local_addr is not None and _same_address(name, local_addr))
