"""Bearer-token and Origin checks (pure functions; the app applies them)."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Mapping
from urllib.parse import urlsplit

LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})


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
