"""The Host check (DNS-rebinding guard), public URLs and the connection settings."""

import json

import httpx
import pytest
import trio
from http_fakes import FakeHttpConfig
from roost.kernel import ConfigError, default_config, open_kernel
from roost.plugins.http import HttpSettings, open_daemon, origin_allowed
from roost.plugins.http._auth import LOOPBACK_HOSTS, host_allowed, split_host
from roost.plugins.http._common import connection_base_url, daemon_public_url

TRUSTED = LOOPBACK_HOSTS | {"roost.example.com"}


@pytest.mark.parametrize(
    "host,local,allowed",
    [
        (None, "127.0.0.1", True),  # no Host: not a browser
        ("localhost", "127.0.0.1", True),
        ("LocalHost.:8470", "127.0.0.1", True),
        ("127.0.0.1:1", "127.0.0.1", True),
        ("[::1]:8470", "::1", True),
        ("[0:0:0:0:0:0:0:1]", "127.0.0.1", True),
        ("roost.example.com:443", "127.0.0.1", True),
        ("192.168.1.5:8470", "192.168.1.5", True),  # the address the connection reached
        ("192.168.1.5", "::ffff:192.168.1.5", True),
        ("192.168.1.6", "192.168.1.5", False),
        ("evil.example", "127.0.0.1", False),
        ("evil.example:8470", "127.0.0.1", False),
        ("localhost.evil.example", "127.0.0.1", False),
        ("roost.example.com.evil.example", "127.0.0.1", False),
        ("user@localhost", "127.0.0.1", False),
        ("localhost/x", "127.0.0.1", False),
        ("localhost:http", "127.0.0.1", False),
        ("::1", "::1", False),  # an IPv6 address must be bracketed in Host
        ("", "127.0.0.1", True),  # an empty Host is no Host (Quart fills in "" for HTTP/1.0)
        ("évil.example", "127.0.0.1", False),
        ("evil..example", "127.0.0.1", False),  # an empty label: Werkzeug's IDNA refuses it
        ("localhost..", "127.0.0.1", False),
        ("a" * 64 + ".example", "127.0.0.1", False),  # a label over 63 characters
    ],
)
def test_host_allowed(host, local, allowed):
    assert host_allowed(host, local, frozenset(TRUSTED)) is allowed


def test_a_star_allows_every_host_name_but_never_a_malformed_one():
    assert host_allowed("anything.example", None, frozenset({"*"}))
    for malformed in ("evil..example", "a" * 64, ".".join(["a" * 63] * 4), "user@localhost", "x/y"):
        assert not host_allowed(malformed, None, frozenset({"*"})), malformed


def test_split_host():
    assert split_host("Example.COM.:8470") == ("example.com", "8470")
    assert split_host("[::1]") == ("::1", "")
    assert split_host("[::1]x") is None


def test_a_host_header_port_past_65535_is_malformed():
    assert split_host("localhost:65535") == ("localhost", "65535")
    for bad in ("localhost:99999", "localhost:65536", "[::1]:99999", "localhost:123456"):
        assert split_host(bad) is None, bad
        assert not host_allowed(bad, "127.0.0.1", frozenset(TRUSTED)), bad


@pytest.mark.parametrize("port", ["+80", "١٢", "²", "8_0", " 80", "-1", "0x50", "9" * 5000])
def test_a_port_not_in_ascii_digits_is_malformed_in_host_and_origin(port):
    # int() reads "١٢", "+80", "8_0" and " 80" as ports; the guard must not, nor crash on
    # 5,000 digits (past int()'s limit): a Host or Origin so written is refused, loopback too.
    for host in (f"localhost:{port}", f"[::1]:{port}"):
        assert split_host(host) is None, host
        assert not host_allowed(host, "127.0.0.1", frozenset(TRUSTED)), host
    assert not origin_allowed(f"http://localhost:{port}", ())


def test_a_host_port_with_leading_zeros_is_a_port():
    # RFC 3986's port is *DIGIT: "0000080" is port 80 (urlsplit reads an Origin's so too).
    assert split_host("localhost:0000080") == ("localhost", "0000080")
    assert host_allowed("localhost:0000080", "127.0.0.1", frozenset(TRUSTED))


def settings(**http):
    return HttpSettings.from_config(FakeHttpConfig(**http), env={})


def test_allowed_hosts_and_public_url_are_checked_and_normalised():
    s = settings(
        allowed_hosts=("Roost.Example.com", "192.168.1.5", "::1", "[fe80::1]", "*"),
        public_url="https://Pub.example/base/",
    )
    assert s.allowed_hosts == ("roost.example.com", "192.168.1.5", "::1", "fe80::1", "*")
    assert s.public_url == "https://Pub.example/base"
    assert "pub.example" in s.trusted_hosts and "localhost" in s.trusted_hosts
    for bad in ("https://roost.example.com", "roost.example.com:8470", "a b", "", "x/y"):
        with pytest.raises(ConfigError, match=r"http\.allowed_hosts\[0\]"):
            settings(allowed_hosts=(bad,))
    for bad in (
        "roost.example.com",
        "ftp://x",
        "http://",
        "http://x?q=1",
        "http://a@b",
        "http://x:99999",
    ):
        with pytest.raises(ConfigError, match=r"http\.public_url"):
            settings(public_url=bad)


def test_connection_settings_are_checked():
    assert settings(keep_alive_s=2).keep_alive_s == 2.0
    assert settings(keep_alive_s=0.1).keep_alive_s == 0.1
    # Regression: 5e-324 was taken, and every connection closed before its first request.
    for bad in (0, -1, 7200, float("nan"), True, "5", 5e-324, 0.09):
        with pytest.raises(ConfigError, match=r"http\.keep_alive_s"):
            settings(keep_alive_s=bad)


def test_public_urls_never_come_from_the_host_header():
    assert daemon_public_url(None, "127.0.0.1", 8470) == "http://127.0.0.1:8470"
    assert daemon_public_url(None, "::1", 8470) == "http://[::1]:8470"
    assert daemon_public_url("https://pub.example", "0.0.0.0", 8470) == "https://pub.example"
    # Bound to every interface without http.public_url: the address each connection reached.
    assert daemon_public_url(None, "0.0.0.0", 8470) is None
    assert connection_base_url(None, ("192.168.1.5", 8470)) == "http://192.168.1.5:8470"
    assert connection_base_url(None, ("fe80::1", 8470, 0, 2)) == "http://[fe80::1]:8470"


@pytest.fixture
def a2a_config(tmp_path):
    agent = tmp_path / "agents" / "echo" / "agent.json"
    agent.parent.mkdir(parents=True)
    agent.write_text(
        json.dumps(
            {
                "name": "echo",
                "description": "echo",
                "model": {
                    "provider": "scripted",
                    "script": {"rules": [], "default_reply": "{message}"},
                },
                "a2a": {"enabled": True},
            }
        )
    )

    def make(**http):
        return default_config(
            env={},
            home=str(tmp_path / "home"),
            agents={"dirs": [str(tmp_path / "agents")], "bundled": False},
            http={"port": 0, **http},
        )

    return make


def card_urls(card: dict) -> list[str]:
    return [card["url"]] + [i["url"] for i in card.get("supportedInterfaces", [])]


async def test_card_urls_use_http_public_url(a2a_config):
    config = a2a_config(public_url="https://roost.example.com/base")
    async with open_kernel(config) as kernel, open_daemon(kernel, graceful_timeout=1) as url:
        async with httpx.AsyncClient(base_url=url, timeout=10) as http:
            with trio.fail_after(10):
                plain = await http.get(
                    "/a2a/agents/echo/.well-known/agent-card.json", headers={"Host": "localhost:1"}
                )
                expect = await http.get(
                    "/a2a/agents/echo/.well-known/agent-card.json",
                    headers={"Host": "localhost:1", "Expect": "100-continue"},
                )
                public = await http.get("/a2a/agents", headers={"Host": "roost.example.com"})
                forged = await http.get("/a2a/agents", headers={"Host": "evil.example"})
    for answer in (plain, expect):
        assert answer.status_code == 200, answer.text
        assert all(
            u.startswith("https://roost.example.com/base/a2a/agents/echo/")
            for u in card_urls(answer.json())
        )
    assert public.status_code == 200  # public_url's host is served
    assert forged.status_code == 421 and forged.json()["error"]["code"] == 421


async def test_card_urls_default_to_the_bound_address(a2a_config):
    async with open_kernel(a2a_config()) as kernel, open_daemon(kernel, graceful_timeout=1) as url:
        async with httpx.AsyncClient(base_url=url, timeout=10) as http:
            with trio.fail_after(10):
                plain = await http.get(
                    "/.well-known/agent-card.json", headers={"Host": "localhost:1"}
                )
                expect = await http.get(
                    "/.well-known/agent-card.json",
                    headers={"Host": "localhost:1", "Expect": "100-continue"},
                )
    for answer in (plain, expect):
        assert answer.status_code == 200, answer.text
        assert all(u.startswith(f"{url}/a2a/") for u in card_urls(answer.json())), card_urls(
            answer.json()
        )


def test_daemon_json_names_a_loopback_address_for_a_wildcard_bind():
    from roost.plugins.http._common import loopback_for

    assert loopback_for("0.0.0.0") == "127.0.0.1"
    assert loopback_for("::") == "::1"
    assert loopback_for("192.168.1.5") == "192.168.1.5"
