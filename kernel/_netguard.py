"""SSRF guard: decide whether an outbound URL may be fetched, by its resolved addresses.

Decided on parsed and resolved IP addresses, never on URL substrings: legacy IPv4 spellings
(``2130706433``, ``0x7f.1``) are parsed as ``inet_aton`` does, IPv6 forms embedding IPv4
(mapped, 6to4, NAT64) are judged by that address (local-use NAT64 is private whatever it
wraps), and every resolved address must pass.
Callers connect to a checked address (``pin_url``; ``AddressPins`` remembers them per
origin), so a second DNS answer cannot differ from the checked one.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Awaitable, Callable, Iterable
from urllib.parse import urlsplit, urlunsplit

import attrs
import trio

from ._errors import SandboxError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Awaitable[Iterable[str | IPAddress]]]

DEFAULT_ALLOW_HINT = "tools.allow_private_network = true in roost.toml"
RESOLVE_TIMEOUT_S = 10.0
ALLOWED_SCHEMES = ("http", "https")

# Cloud instance-metadata endpoints. Never allowed, whatever the settings.
METADATA_HOSTNAMES = frozenset(
    {
        "metadata.google.internal",
        "metadata.goog",
        "metadata",
        "instance-data",
        "instance-data.ec2.internal",
    }
)
METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",  # AWS, GCP, Azure, OpenStack, DigitalOcean, Oracle
        "169.254.170.2",  # AWS ECS task metadata
        "100.100.100.200",  # Alibaba Cloud
        "168.63.129.16",  # Azure wire server
        "fd00:ec2::254",  # AWS over IPv6
    )
)


def _nets(*cidrs: str) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    return tuple(map(ipaddress.ip_network, cidrs))


# (rule name, what it forbids, its networks), checked in this order after the metadata rule.
_RULES = (
    ("unspecified", "an unspecified address", _nets("0.0.0.0/8", "::/128")),
    ("loopback", "a loopback address", _nets("127.0.0.0/8", "::1/128")),
    ("link-local", "a link-local address", _nets("169.254.0.0/16", "fe80::/10")),
    ("multicast", "a multicast address", _nets("224.0.0.0/4", "ff00::/8")),
    (
        "private",
        "a private-network address",
        _nets(
            "10.0.0.0/8",
            "172.16.0.0/12",
            "192.168.0.0/16",
            "100.64.0.0/10",  # carrier-grade NAT
            "fc00::/7",  # unique local
            "fec0::/10",  # deprecated site-local
        ),
    ),
    (
        "reserved",
        "a reserved or documentation address",
        _nets(
            "192.0.0.0/24",  # IETF protocol assignments
            "192.0.2.0/24",  # documentation
            "198.18.0.0/15",  # benchmarking
            "198.51.100.0/24",  # documentation
            "203.0.113.0/24",  # documentation
            "240.0.0.0/4",  # reserved, includes 255.255.255.255
            "::/8",  # reserved, includes IPv4-compatible addresses
            "100::/64",  # discard-only
            "2001:db8::/32",  # documentation
            "2001::/23",  # IETF protocol assignments (Teredo, ORCHID, ...)
        ),
    ),
)

_NAT64 = _nets("64:ff9b::/96", "64:ff9b:1::/48")
_LOCAL_NAT64 = _NAT64[1]
_IPV4_CHARS = frozenset("0123456789abcdefxABCDEFX.")

_RULE_TEXT = {"metadata": "a cloud instance-metadata endpoint"}
_RULE_TEXT.update((rule, text) for rule, text, _ in _RULES)


class UrlRefused(SandboxError, code="url_refused"):
    """An outbound URL was refused: bad scheme, unresolvable, or a forbidden address."""

    def __init__(
        self, url: str, reason: str, *, address: str | None = None, rule: str | None = None
    ) -> None:
        self.url = url
        self.address = address
        self.rule = rule
        super().__init__(f"refused to fetch {public_url(url) or 'an invalid URL'!r}: {reason}")

    def to_dict(self) -> dict:
        shown = public_url(self.url)
        return {**super().to_dict(), "url": shown, "address": self.address, "rule": self.rule}


def public_url(url: str) -> str:
    """``url`` without user info, query or fragment, which may hold secrets: what may be
    shown, logged or exported; "" for what is not a URL."""
    if not isinstance(url, str):
        return ""
    try:
        parts = urlsplit(url)
    except ValueError:
        return ""
    return urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2], parts.path, "", ""))


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if any(ip in net for net in _NAT64):  # disjoint from the mapped and 6to4 ranges
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return ip.ipv4_mapped or ip.sixtofour  # an address is true, even 0.0.0.0


def classify_address(ip: str | IPAddress) -> str | None:
    """The rule forbidding ``ip`` (``metadata``, ``loopback``, ``private``, …); None if public."""
    if isinstance(ip, str):
        ip = ipaddress.ip_address(ip.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.scope_id:
            ip = ipaddress.IPv6Address(ip.compressed.split("%", 1)[0])
        embedded = _embedded_ipv4(ip)
        if embedded is not None:
            rule = classify_address(embedded)
            if rule is None and ip in _LOCAL_NAT64:
                # Local-use NAT64 (RFC 8215) is not globally reachable, and its prefix may be
                # /48 to /96, so the IPv4 address may sit elsewhere in it (RFC 6052).
                return "private"
            return rule
    if ip in METADATA_ADDRESSES:
        return "metadata"
    for rule, _, networks in _RULES:
        if any(ip.version == net.version and ip in net for net in networks):
            return rule
    return None


def parse_ipv4_literal(host: str) -> ipaddress.IPv4Address | None:
    """``host`` read as ``inet_aton`` (and so the resolver) reads IPv4: 1-4 parts, decimal,
    octal or hex, the last filling the rest (``127.1``, ``0x7f.1``); else None."""
    host = host[:-1] if host.endswith(".") else host
    # inet_aton ignores what follows a space; an address holds nothing but these.
    if not host or not set(host) <= _IPV4_CHARS:
        return None
    try:
        return ipaddress.IPv4Address(socket.inet_aton(host))
    except OSError:
        return None


def _literal_address(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    if "%" in host:  # IPv6 with a zone id
        try:
            return ipaddress.ip_address(host.split("%", 1)[0])
        except ValueError:
            return None
    return parse_ipv4_literal(host)


async def _system_resolver(host: str, port: int) -> list[str]:
    infos = await trio.socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [info[4][0] for info in infos]


async def check_url(
    url: str,
    *,
    allow_private: bool = False,
    allow_loopback: bool = False,
    resolver: Resolver | None = None,
    allow_hint: str = DEFAULT_ALLOW_HINT,
) -> list[IPAddress]:
    """The addresses ``url``'s host resolves to; ``UrlRefused`` for a scheme other than
    http(s), an unresolvable host, or ANY forbidden address (private and loopback ones
    unless allowed; ``allow_hint`` names the setting that allows them)."""
    if not isinstance(url, str) or not url.strip():
        raise UrlRefused(str(url), "expected an absolute http:// or https:// URL")
    try:
        parts = urlsplit(url.strip())
        host = parts.hostname
        port = parts.port
    except ValueError as exc:
        raise UrlRefused(url, f"malformed URL ({exc})") from None
    scheme = parts.scheme.lower()
    if scheme not in ALLOWED_SCHEMES:
        shown = f"{scheme!r}" if scheme else "no scheme"
        raise UrlRefused(url, f"{shown} is not allowed; only http and https URLs can be fetched")
    if not host:
        raise UrlRefused(url, "the URL has no host")
    host = host.rstrip(".") or host
    if port is None:
        port = 443 if scheme == "https" else 80
    if host in METADATA_HOSTNAMES:
        raise UrlRefused(
            url,
            f"{host!r} is a cloud instance-metadata host, which is never allowed",
            rule="metadata",
        )

    literal = _literal_address(host)
    if literal is not None:
        raw: Iterable[str | IPAddress] = [literal]
    else:
        resolve = resolver or _system_resolver
        try:
            with trio.fail_after(RESOLVE_TIMEOUT_S):
                raw = await resolve(host, port)
        except trio.TooSlowError:
            raise UrlRefused(
                url, f"resolving {host!r} took longer than {RESOLVE_TIMEOUT_S:g} s"
            ) from None
        except (OSError, UnicodeError) as exc:
            raise UrlRefused(url, f"could not resolve host {host!r} ({exc})") from None

    addresses = list(
        dict.fromkeys(
            ipaddress.ip_address(item.split("%", 1)[0]) if isinstance(item, str) else item
            for item in raw
        )
    )
    if not addresses:
        raise UrlRefused(url, f"host {host!r} resolved to no addresses")

    # The rules a caller may lift (the rest are never allowed), and whether it did.
    allowed = {"private": allow_private, "loopback": allow_loopback}
    for ip in addresses:
        rule = classify_address(ip)
        if rule is None or allowed.get(rule):
            continue
        if literal is None:
            subject = f"{host!r} resolves to {ip}, which"
        elif host != str(ip):
            subject = f"{host!r} (the address {ip})"
        else:
            subject = f"the address {ip}"
        fix = f"; to allow it, set {allow_hint}" if rule in allowed else "; this is never allowed"
        raise UrlRefused(
            url,
            f"{subject} is {_RULE_TEXT[rule]} (rule {rule!r}){fix}",
            address=str(ip),
            rule=rule,
        )
    return addresses


# ---- pinning ------------------------------------------------------------------------------


@attrs.frozen
class PinnedTarget:
    """Where to connect for a checked URL: ``url`` names the address; send ``host_header`` as
    ``Host`` and, for https, ``sni_hostname`` as the TLS server name (so the certificate is
    still verified against the original name)."""

    url: str
    host_header: str
    sni_hostname: str | None


def pin_url(url: str, address: str | IPAddress) -> PinnedTarget:
    """``url`` rewritten to connect to ``address`` (one that ``check_url`` returned)."""
    ip = ipaddress.ip_address(address) if isinstance(address, str) else address
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port
    netloc = f"[{ip}]" if ip.version == 6 else str(ip)
    shown = f"[{host}]" if ":" in host else host
    if port is not None:
        netloc += f":{port}"
        shown += f":{port}"
    pinned = urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, ""))
    sni = host if parts.scheme.lower() == "https" and _literal_address(host) is None else None
    return PinnedTarget(pinned, shown, sni)


@attrs.define(kw_only=True, eq=False)
class AddressPins:
    """``check_url`` once per origin, its approved addresses reused: one per connection,
    so a rebinding name cannot switch to a forbidden address mid-connection."""

    allow_private: bool = False
    allow_loopback: bool = False
    resolver: Resolver | None = None
    allow_hint: str = DEFAULT_ALLOW_HINT
    _pins: dict[tuple[str, str, int], list[IPAddress]] = attrs.field(factory=dict, init=False)
    _lock: trio.Lock = attrs.field(factory=trio.Lock, init=False)

    async def addresses(self, url: str) -> list[IPAddress]:
        """The approved addresses of ``url``'s origin; raises ``UrlRefused``."""
        try:  # the origin: (scheme, host, port), default ports filled in
            parts = urlsplit(url)
            scheme = parts.scheme.lower()
            port = parts.port or (443 if scheme == "https" else 80)
            key = (scheme, (parts.hostname or "").rstrip("."), port)
        except ValueError as exc:  # a bad port, an unclosed IPv6 bracket
            raise UrlRefused(url, f"malformed URL ({exc})") from None
        async with self._lock:
            pinned = self._pins.get(key)
            if pinned is None:
                pinned = await check_url(
                    url,
                    allow_private=self.allow_private,
                    allow_loopback=self.allow_loopback,
                    resolver=self.resolver,
                    allow_hint=self.allow_hint,
                )
                self._pins[key] = pinned
            return list(pinned)
