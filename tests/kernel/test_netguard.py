"""SSRF guard: address classification, legacy IPv4 forms, and URL checks after DNS."""

from __future__ import annotations

import ipaddress
import socket

import pytest
from roost.kernel import SandboxError, UrlRefused, check_url, classify_address, public_url
from roost.kernel._netguard import AddressPins, parse_ipv4_literal, pin_url


@pytest.mark.parametrize(
    ("address", "rule"),
    [
        ("8.8.8.8", None),
        ("1.1.1.1", None),
        ("2606:4700:4700::1111", None),
        ("2001:4860:4860::8888", None),
        ("169.254.169.254", "metadata"),
        ("169.254.170.2", "metadata"),
        ("100.100.100.200", "metadata"),
        ("168.63.129.16", "metadata"),
        ("fd00:ec2::254", "metadata"),
        ("::ffff:169.254.169.254", "metadata"),
        ("169.254.1.1", "link-local"),
        ("fe80::1", "link-local"),
        ("fe80::1%eth0", "link-local"),
        ("febf::1", "link-local"),
        ("127.0.0.1", "loopback"),
        ("127.255.255.254", "loopback"),
        ("::1", "loopback"),
        ("::ffff:127.0.0.1", "loopback"),
        ("2002:7f00:1::", "loopback"),  # 6to4 wrapping 127.0.0.1
        ("0.0.0.0", "unspecified"),
        ("0.1.2.3", "unspecified"),
        ("::", "unspecified"),
        ("10.0.0.1", "private"),
        ("172.16.0.1", "private"),
        ("172.31.255.255", "private"),
        ("172.32.0.1", None),
        ("192.168.1.1", "private"),
        ("100.64.0.1", "private"),
        ("100.127.255.255", "private"),
        ("100.128.0.1", None),
        ("fc00::1", "private"),
        ("fd12:3456::1", "private"),
        ("::ffff:10.1.2.3", "private"),
        ("64:ff9b::a00:1", "private"),  # NAT64 of 10.0.0.1
        ("64:ff9b:1::7f00:1", "loopback"),  # local-use NAT64 (RFC 8215) of 127.0.0.1
        ("64:ff9b:1::a9fe:a9fe", "metadata"),
        ("64:ff9b::808:808", None),  # well-known NAT64 of a public address
        # Regression: read as a /96 prefix, a /48 prefix's address of 127.0.0.1 (RFC 6052
        # bits 48-63 and 72-87) was public; local-use NAT64 is never globally reachable.
        ("64:ff9b:1:7f00:0:100:808:808", "private"),
        ("64:ff9b:1::808:808", "private"),
        # Each form wrapping 0.0.0.0 (an IPv4Address that is still taken as found):
        ("::ffff:0.0.0.0", "unspecified"),
        ("2002::", "unspecified"),
        ("64:ff9b::", "unspecified"),
        ("64:ff9b:1::", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("239.255.255.250", "multicast"),
        ("ff02::1", "multicast"),
        ("240.0.0.1", "reserved"),
        ("255.255.255.255", "reserved"),
        ("192.0.2.10", "reserved"),
        ("198.18.0.1", "reserved"),
        ("2001:db8::1", "reserved"),
        ("::1.2.3.4", "reserved"),  # deprecated IPv4-compatible form
    ],
)
def test_classify_address(address, rule):
    assert classify_address(address) == rule
    if "%" not in address:
        assert classify_address(ipaddress.ip_address(address)) == rule


@pytest.mark.parametrize(
    ("host", "address"),
    [
        ("127.0.0.1", "127.0.0.1"),
        ("2130706433", "127.0.0.1"),
        ("0x7f.1", "127.0.0.1"),
        ("0x7f000001", "127.0.0.1"),
        ("0177.0.0.1", "127.0.0.1"),
        ("127.1", "127.0.0.1"),
        ("10.1", "10.0.0.1"),
        ("192.168.257", "192.168.1.1"),
        ("0xa9.0xfe.0xa9.0xfe", "169.254.169.254"),
        ("1.2.3.4.", "1.2.3.4"),
        ("256.1.1.1", None),
        ("1.2.3.4.5", None),
        ("4294967296", None),
        ("example.com", None),
        ("08.0.0.1", None),  # not valid octal: a name, not an address
        ("", None),
    ],
)
def test_legacy_ipv4_forms_are_parsed_like_inet_aton(host, address):
    parsed = parse_ipv4_literal(host)
    assert (str(parsed) if parsed else None) == address


def _resolver_reads(host: str) -> str | None:
    """The IPv4 address the system resolver reads ``host`` as (what a client would connect
    to), without asking DNS; None if it reads no address there."""
    try:
        infos = socket.getaddrinfo(
            host, 80, socket.AF_INET, socket.SOCK_STREAM, 0, socket.AI_NUMERICHOST
        )
    except (OSError, UnicodeError):
        return None
    return infos[0][4][0]


# Spellings of addresses, and near misses, the resolver reads as an address or as none.
_IPV4_SPELLINGS = (
    *("127.0.0.1", "127.1", "0x7f.1", "0X7F.0.0.1", "0177.0.0.1", "0177.1", "2130706433"),
    *("017700000001", "0x7f000001", "127.0.0.01", "127.000.000.001", "0127.0.0.1", "0.1"),
    *("0x7f.0x0.0x0.0x1", "127.0.0.0x1", "0x00000000007f.1", "127.65536", "0", "00", "0x0"),
    *("169.254.43518", "0xa9fea9fe", "2852039166", "0251.0376.0251.0376", "10.1", "0xa.1"),
    *("192.168.257", "192.11010049", "0300.0250.0.1", "4294967295", "100.64.0.1"),
    *("0x", "0x.0x.0x.0x", "127.0x.0.1", "4294967296", "0x100000000", "1.16777216"),
    *("127.0.65536", "127.0.0.256", "256.0.0.1", "08.0.0.1", "09", "0x7g.1", "1e2", "a.b"),
    *("+127.0.0.1", "-1", "127.-1", "0b1", "1_0.0.0.1", "1.2.3.4.5", "127..1", "cafe"),
    *("127.0.0.1 x", " 127.0.0.1", "127.0.0.1\t", "9999999999999999999999"),
)


@pytest.mark.parametrize("host", _IPV4_SPELLINGS)
def test_ipv4_literals_are_read_as_the_resolver_reads_them(host):
    # An independent oracle: parse_ipv4_literal wraps inet_aton, so comparing it with
    # inet_aton proves nothing; the resolver is what a client would connect through.
    parsed = parse_ipv4_literal(host)
    assert (str(parsed) if parsed else None) == _resolver_reads(host)


@pytest.mark.parametrize(
    "host",
    [
        h
        for h in (*_IPV4_SPELLINGS, "127.1.", "0x7f.1..", "\uff11\uff12\uff17.0.0.1")
        if _resolver_reads(h.rstrip(".")) and classify_address(_resolver_reads(h.rstrip(".")))
    ],
)
async def test_every_spelling_of_a_forbidden_address_is_refused(host):
    # The system resolver, not a fake: the address refused is the one it would connect to
    # (fullwidth digits reach it as ASCII, through IDNA).
    address = _resolver_reads(host.rstrip("."))
    with pytest.raises(UrlRefused) as info:
        await check_url(f"http://{host}/")
    assert info.value.address == address and info.value.rule == classify_address(address)


def fake_resolver(table):
    calls = []

    async def resolve(host, port):
        calls.append((host, port))
        if host not in table:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return table[host]

    resolve.calls = calls
    return resolve


async def test_public_host_passes_and_returns_its_addresses():
    resolve = fake_resolver(
        {"example.com": ["93.184.216.34", "2606:2800:220:1::", "93.184.216.34"]}
    )
    addresses = await check_url("https://example.com/page?q=1", resolver=resolve)
    assert [str(a) for a in addresses] == ["93.184.216.34", "2606:2800:220:1::"]
    assert resolve.calls == [("example.com", 443)]


async def test_one_private_address_among_public_ones_is_refused():
    resolve = fake_resolver({"mixed.test": ["93.184.216.34", "10.0.0.5"]})
    with pytest.raises(UrlRefused) as info:
        await check_url("http://mixed.test:8080/", resolver=resolve)
    err = info.value
    assert err.rule == "private" and err.address == "10.0.0.5"
    message = str(err)
    assert "http://mixed.test:8080/" in message
    assert "'mixed.test' resolves to 10.0.0.5" in message
    assert "tools.allow_private_network = true" in message
    assert resolve.calls == [("mixed.test", 8080)]


async def test_private_and_loopback_can_be_allowed_separately():
    resolve = fake_resolver({"lan.test": ["192.168.1.10"], "local.test": ["127.0.0.1"]})
    assert await check_url("http://lan.test/", allow_private=True, resolver=resolve)
    with pytest.raises(UrlRefused, match="loopback"):
        await check_url("http://local.test/", allow_private=True, resolver=resolve)
    assert await check_url("http://local.test/", allow_loopback=True, resolver=resolve)


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data/",
        "http://[fd00:ec2::254]/",
        "http://100.100.100.200/",
        "http://[::ffff:169.254.169.254]/",
        "http://0xa9.0xfe.0xa9.0xfe/",
        "http://2852039166/",  # 169.254.169.254 as one decimal number
        "http://metadata.google.internal/computeMetadata/v1/",
        "http://METADATA.google.internal./",
        "http://[fe80::1]/",
        "http://224.0.0.1/",
        "http://0.0.0.0:8000/",
    ],
)
async def test_never_allowed_even_with_every_allowance(url):
    resolve = fake_resolver({})
    with pytest.raises(UrlRefused) as info:
        await check_url(url, allow_private=True, allow_loopback=True, resolver=resolve)
    assert "never allowed" in str(info.value)
    assert resolve.calls == []  # decided on the literal or the name, not by asking DNS


async def test_metadata_by_resolution_is_refused():
    resolve = fake_resolver({"innocent.test": ["169.254.169.254"]})
    with pytest.raises(UrlRefused) as info:
        await check_url("http://innocent.test/", allow_private=True, resolver=resolve)
    assert info.value.rule == "metadata"


@pytest.mark.parametrize(
    "url",
    [
        "http://2130706433/",
        "http://0x7f.1/",
        "http://0177.0.0.1/",
        "http://127.1/",
        "http://[::1]/",
    ],
)
async def test_loopback_spellings_are_judged_by_the_parsed_address(url):
    with pytest.raises(UrlRefused) as info:
        await check_url(url, resolver=fake_resolver({}))
    assert info.value.rule == "loopback"
    assert info.value.address in ("127.0.0.1", "::1")


@pytest.mark.parametrize(
    ("url", "needle"),
    [
        ("file:///etc/passwd", "'file' is not allowed"),
        ("gopher://example.com/", "'gopher' is not allowed"),
        ("ftp://example.com/", "'ftp' is not allowed"),
        ("example.com/path", "no scheme"),
        ("http:///path", "has no host"),
        ("http://example.com:99999/", "malformed URL"),
        ("", "expected an absolute"),
    ],
)
async def test_bad_urls_are_refused_clearly(url, needle):
    with pytest.raises(UrlRefused, match=needle):
        await check_url(url, resolver=fake_resolver({"example.com": ["93.184.216.34"]}))


async def test_unresolvable_and_empty_answers_are_refused():
    with pytest.raises(UrlRefused, match="could not resolve host 'nowhere.test'"):
        await check_url("http://nowhere.test/", resolver=fake_resolver({}))
    with pytest.raises(UrlRefused, match="resolved to no addresses"):
        await check_url("http://empty.test/", resolver=fake_resolver({"empty.test": []}))


async def test_custom_allow_hint_is_named():
    with pytest.raises(UrlRefused, match=r"set mcp_servers\[0\].allow_private = true"):
        await check_url(
            "http://10.0.0.1/",
            resolver=fake_resolver({}),
            allow_hint="mcp_servers[0].allow_private = true",
        )


async def test_system_resolver_localhost_is_loopback():
    with pytest.raises(UrlRefused) as info:
        await check_url("http://localhost:1/")
    assert info.value.rule == "loopback"
    assert await check_url("http://localhost:1/", allow_loopback=True)


def test_url_refused_is_a_sandbox_error_with_details():
    err = UrlRefused("http://x/", "because", address="10.0.0.1", rule="private")
    assert isinstance(err, SandboxError)
    assert err.to_dict()["rule"] == "private" and err.code == "url_refused"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://user:s3cret@example.com/a/b?key=s3cret#s3cret", "https://example.com/a/b"),
        ("http://127.0.0.1:8470/mcp", "http://127.0.0.1:8470/mcp"),
        ("http://[::1]:1/x?token=s3cret", "http://[::1]:1/x"),
        ("example.com/path?key=s3cret", "example.com/path"),
        ("http://[unclosed/?key=s3cret", ""),  # no URL: nothing of it is shown
        (None, ""),
    ],
)
def test_public_url_drops_credentials_query_and_fragment(url, shown):
    assert public_url(url) == shown


def test_url_refused_never_shows_credentials():
    err = UrlRefused("https://u:s3cret@example.com/?key=s3cret", "because")
    assert "s3cret" not in str(err) and "s3cret" not in repr(err.to_dict())
    assert "example.com" in str(err)
    assert "an invalid URL" in str(UrlRefused("http://[s3cret", "because"))


# ---- pinning -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url, address, pinned, host_header, sni",
    [
        (
            "https://example.com/a?b=1#frag",
            "93.184.216.34",
            "https://93.184.216.34/a?b=1",
            "example.com",
            "example.com",
        ),
        (
            "http://example.com:8080",
            "93.184.216.34",
            "http://93.184.216.34:8080/",
            "example.com:8080",
            None,
        ),
        (
            "https://example.com:8443/x",
            "2606:2800::1",
            "https://[2606:2800::1]:8443/x",
            "example.com:8443",
            "example.com",
        ),
        (
            "https://[2606:2800::1]/x",
            "2606:2800::1",
            "https://[2606:2800::1]/x",
            "[2606:2800::1]",
            None,
        ),
        (
            "https://93.184.216.34/",
            "93.184.216.34",
            "https://93.184.216.34/",
            "93.184.216.34",
            None,
        ),
    ],
)
def test_pin_url_connects_to_the_address_and_keeps_the_name(url, address, pinned, host_header, sni):
    target = pin_url(url, address)
    assert (target.url, target.host_header, target.sni_hostname) == (pinned, host_header, sni)
    assert pin_url(url, ipaddress.ip_address(address)) == target


async def test_address_pins_resolve_each_origin_once():
    calls = []

    async def rebinding(host, port):
        calls.append((host, port))
        return ["93.184.216.34"] if len(calls) == 1 else ["169.254.169.254"]

    pins = AddressPins(resolver=rebinding)
    first = await pins.addresses("https://api.example.com/mcp")
    again = await pins.addresses("https://API.example.com:443/other?x=1")
    assert first == again == [ipaddress.ip_address("93.184.216.34")]
    assert calls == [("api.example.com", 443)]
    with pytest.raises(UrlRefused) as info:  # another origin is checked on its own
        await pins.addresses("http://api.example.com/mcp")
    assert info.value.rule == "metadata"


@pytest.mark.parametrize("url", ["http://example.com:99999/h", "http://[::1/h", "http://h:port/"])
async def test_address_pins_refuse_a_malformed_url_as_check_url_does(url):
    # Regression: the origin was read before check_url ran, so urlsplit's ValueError
    # escaped (an A2A webhook URL with a bad port crashed SendMessage).
    with pytest.raises(UrlRefused) as pinned:
        await AddressPins().addresses(url)
    with pytest.raises(UrlRefused) as checked:
        await check_url(url)
    assert str(pinned.value) == str(checked.value) and "malformed URL" in str(pinned.value)


async def test_address_pins_remember_nothing_refused():
    answers = iter([["10.0.0.5"], ["93.184.216.34"]])

    async def resolver(host, port):
        return next(answers)

    pins = AddressPins(resolver=resolver, allow_hint="allow_local = true")
    with pytest.raises(UrlRefused) as info:
        await pins.addresses("http://svc.example/mcp")
    assert info.value.rule == "private" and "allow_local = true" in str(info.value)
    assert await pins.addresses("http://svc.example/mcp") == [ipaddress.ip_address("93.184.216.34")]


def test_address_pins_are_hashable_and_equal_only_to_themselves():
    # AddressPins is an attrs class (d380a5e): attrs' default eq would make it unhashable.
    a, b = AddressPins(), AddressPins()
    assert a != b and len({a, b, a}) == 2
