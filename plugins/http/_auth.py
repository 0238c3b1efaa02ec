"""Bearer-token, Origin and Host checks, and principals (pure functions).

A *principal* is the name of the API key a request presented: ``http.api_key`` is
``default``, each ``[http.keys.<name>]`` is ``<name>``; with no key every caller is
``local``. Tasks and sessions belong to the principal that made them.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import ipaddress
import os
import re
import stat
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

import attrs
from roost.kernel import ConfigError, InvalidInput, parse_int, redact_from_logs

LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})
DEFAULT = "default"
MAX_KEY_FILE_BYTES = 4096


@attrs.frozen
class Principal:
    """Who a request comes from. ``admin`` principals may read ``/api/events``."""

    name: str
    admin: bool = False

    @property
    def keyed(self) -> bool:
        """False for ``local``, a keyless daemon's one principal (everyone on the host)."""
        return self.name != LOCAL.name


LOCAL = Principal("local", admin=True)
"""Every caller of a daemon without keys: one principal, so scoping needs keys."""


def principal_of(request: Any) -> Principal | None:
    """The principal of ``request`` (plain or Quart's); None on a public route without a key."""
    principal = getattr(request, "principal", None)
    return principal if isinstance(principal, Principal) else None


def key_digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()


def read_key_file(path: str, field: str) -> str:
    """The key in ``path``: a regular file of yours that nobody else may read or write
    (mode 0600 or stricter). ConfigError naming ``field`` and the fix otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise ConfigError(
            f"{field}: cannot open {path}: {exc.strerror or exc}; "
            "point it at a file holding the key"
        ) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError(
                f"{field}: {path} is not a regular file; put the key in a plain file (chmod 600)"
            )
        if info.st_mode & 0o077:
            raise ConfigError(
                f"{field}: {path} may be read by others (mode {stat.S_IMODE(info.st_mode):04o}); "
                f"run: chmod 600 {path}"
            )
        if hasattr(os, "getuid") and info.st_uid != os.getuid():
            raise ConfigError(
                f"{field}: {path} belongs to another user; the key file "
                "must be yours (chown it, chmod 600)"
            )
        data = os.read(fd, MAX_KEY_FILE_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_KEY_FILE_BYTES:
        raise ConfigError(
            f"{field}: {path} is larger than {MAX_KEY_FILE_BYTES} bytes; it must hold just the key"
        )
    try:
        key = data.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise ConfigError(f"{field}: {path} is not UTF-8 text; it must hold just the key") from None
    if not key:
        raise ConfigError(f"{field}: {path} is empty; write the key into it")
    return key


def resolve_keys(
    http_config: object, env: Mapping[str, str], api_key: str | None
) -> tuple[tuple[bytes, Principal], ...]:
    """``(sha256, principal)`` per accepted key: ``api_key`` as ``default`` (an admin), then each
    ``[http.keys.<name>]`` from its variable or file; ConfigError if unreadable or repeated.
    Each key is kept out of the log (``redact_from_logs``), as ``resolve_api_key``'s is."""
    out: list[tuple[bytes, Principal]] = []
    if api_key is not None:
        out.append((key_digest(api_key), Principal(DEFAULT, admin=True)))
    for entry in getattr(http_config, "keys", ()) or ():
        field = f"http.keys.{entry.name}"
        if any(principal.name == entry.name for _, principal in out):
            raise ConfigError(
                f"{field}: the principal {entry.name!r} is already the one of http.api_key "
                "(ROOST_API_KEY or the variable named by http.api_key_env); "
                "give this key another name"
            )
        if entry.key_env:
            key = env.get(entry.key_env, "").strip()
            if not key:
                raise ConfigError(
                    f"{field}.key_env: the environment variable {entry.key_env} is not set "
                    f"(or blank); export it with {entry.name}'s key, or remove [{field}]"
                )
        else:
            key = read_key_file(entry.key_file, f"{field}.key_file")
        redact_from_logs((key,))
        digest = key_digest(key)
        for other, principal in out:
            if hmac.compare_digest(other, digest):
                raise ConfigError(
                    f"{field}: its key is the same as {principal.name!r}'s; "
                    "every principal needs its own key"
                )
        out.append((digest, Principal(entry.name, admin=entry.admin)))
    return tuple(out)


# A DNS name (or IPv4 address) as the URL layer below Quart takes it: labels of 1-63
# characters, 253 in all. An empty label ("evil..example") or a longer one is malformed.
_HOST_NAME = re.compile(r"[a-z0-9_-]{1,63}(?:\.[a-z0-9_-]{1,63})*")
_MAX_HOST_NAME = 253


def _is_port(text: str) -> bool:
    try:
        parse_int(text, "port", 0, 65535)
    except InvalidInput:
        return False
    return True


def resolve_api_key(http_config: object, env: Mapping[str, str]) -> tuple[str | None, str]:
    """``(the API key, where it came from)``: ``http.api_key``, else the variable named by
    ``http.api_key_env`` (blank is unset); ``(None, "off")`` when there is none. The key is
    kept out of the log (``redact_from_logs``)."""
    key = getattr(http_config, "api_key", None)
    if isinstance(key, str) and key.strip():
        key, source = key.strip(), "http.api_key, from roost.toml or the environment"
    elif (env_name := getattr(http_config, "api_key_env", None)) and env.get(env_name, "").strip():
        key, source = env[env_name].strip(), f"environment variable {env_name}"
    else:
        return None, "off"
    redact_from_logs((key,))
    return key, source


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, else None."""
    scheme, _, token = (authorization or "").strip().partition(" ")
    return (token.strip() or None) if scheme.lower() == "bearer" else None


def tokens_match(presented: str | None, expected: str) -> bool:
    """Constant-time comparison (hashing first so the length does not leak either)."""
    return presented is not None and hmac.compare_digest(
        key_digest(presented), key_digest(expected)
    )


WEBSOCKET_PROTOCOL = "roost"
"""The websocket subprotocol a page asks for (the one the daemon accepts, never echoing a key)."""
BEARER_PROTOCOL = "roost.bearer."


def subprotocol_token(header: str | None) -> str | None:
    """The key a page sent as the websocket subprotocol ``roost.bearer.<unpadded base64url>``
    (a page cannot set ``Authorization`` on a websocket, and ``?token=`` may be logged)."""
    if not header:
        return None
    for item in header.split(","):
        item = item.strip()
        if item.startswith(BEARER_PROTOCOL):
            encoded = item[len(BEARER_PROTOCOL) :]
            try:
                key = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode("utf-8")
            except (ValueError, UnicodeDecodeError):
                return None
            return key or None
    return None


def token_fingerprint(token: str) -> str:
    """A short, non-reversible name for a token (for rate-limit keys; never log the token)."""
    return key_digest(token).hex()[:16]


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
    """Whether a request with this ``Origin`` may proceed: none (not a browser), loopback on any
    port, listed ones (``"*"``: all); not the rest, ``null`` included (rebinding, cross-site)."""
    if origin is None:
        return True
    allowed = list(allowed_origins)
    if "*" in allowed:
        return True
    normal = normalise_origin(origin)
    if normal is None:
        return False
    host = urlsplit(normal).hostname
    return host in LOOPBACK_HOSTS or any(normalise_origin(a) == normal for a in allowed)


def split_host(value: str) -> tuple[str, str] | None:
    """``(name, port)`` of a ``Host`` value like ``Example.com:8470`` or ``[::1]``: name lowercase,
    unbracketed, no trailing dot, port ``""`` if absent. None if malformed (user info, a path, a
    bare IPv6, non-ASCII, an empty or 64+ character label, a name over 253, a port over 65535)."""
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        name, rest = value[1:end], value[end + 1 :]
        if end < 0 or (rest and not (rest[:1] == ":" and _is_port(rest[1:]))):
            return None
        try:
            name = str(ipaddress.IPv6Address(name))
        except ValueError:
            return None
        return name, rest[1:]
    name, sep, port = value.rpartition(":")
    if not sep:
        name, port = value, ""
    elif not _is_port(port):
        return None
    name = name[:-1] if name.endswith(".") else name
    return (name, port) if len(name) <= _MAX_HOST_NAME and _HOST_NAME.fullmatch(name) else None


def host_name(value: str) -> str | None:
    """The name part of a ``Host`` header value (see ``split_host``); None when malformed."""
    parsed = split_host(value)
    return None if parsed is None else parsed[0]


def ip_of(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The IP address ``text`` names (zone dropped, IPv4-mapped IPv6 as IPv4), else None."""
    try:
        ip = ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return None
    return getattr(ip, "ipv4_mapped", None) or ip


@functools.lru_cache(maxsize=512)
def host_allowed(host: str | None, local_addr: str | None, trusted: frozenset[str]) -> bool:
    """Whether a request naming ``host`` may be served: the guard against DNS rebinding (a
    page on an attacker's name, now resolving here, reading the API; a GET has no Origin to
    check). Allowed: no or an empty header (not a browser), a ``trusted`` name (``"*"``: any)
    on any port, and the IP the connection reached (an IP literal cannot be rebound); never a
    malformed value (see ``split_host``)."""
    if host is None or not host.strip():
        return True
    name = host_name(host)
    if name is None:
        return False
    if "*" in trusted or name in trusted:
        return True
    ip = ip_of(name) if local_addr is not None and "%" not in name else None
    return ip is not None and ip == ip_of(local_addr)  # type: ignore[arg-type]
