import pytest
from http_fakes import FakeHttpConfig
from roost.plugins.http import bearer_token, origin_allowed, resolve_api_key, tokens_match


@pytest.mark.parametrize(
    ("header", "token"),
    [
        ("Bearer abc", "abc"),
        ("bearer   abc  ", "abc"),
        ("Basic abc", None),
        ("Bearer", None),
        ("Bearer ", None),
        ("", None),
        (None, None),
    ],
)
def test_bearer_token_parsing(header, token):
    assert bearer_token(header) == token


def test_tokens_match_only_the_exact_key():
    assert tokens_match("s3cret", "s3cret")
    assert not tokens_match("s3cre", "s3cret")
    assert not tokens_match("s3cret ", "s3cret")
    assert not tokens_match(None, "s3cret")
    assert not tokens_match("\udcff", "s3cret")  # odd input is refused, not a crash


def test_config_key_wins_over_environment():
    key, source = resolve_api_key(
        FakeHttpConfig(api_key="from-config", api_key_env="K"), {"K": "from-env"}
    )
    assert (key, source) == ("from-config", "http.api_key, from roost.toml or the environment")


def test_environment_key_is_used_and_blank_counts_as_unset():
    assert resolve_api_key(FakeHttpConfig(api_key_env="K"), {"K": " env-key "}) == (
        "env-key",
        "environment variable K",
    )
    assert resolve_api_key(FakeHttpConfig(api_key="  ", api_key_env="K"), {"K": ""}) == (
        None,
        "off",
    )
    assert resolve_api_key(FakeHttpConfig(api_key_env=""), {"": "x"}) == (None, "off")


@pytest.mark.parametrize(
    ("origin", "allowed", "ok"),
    [
        (None, (), True),
        ("http://localhost:3000", (), True),
        ("http://127.0.0.1:8470", (), True),
        ("http://[::1]:8470", (), True),
        ("https://LOCALHOST", (), True),
        ("http://evil.example", (), False),
        ("http://localhost.evil.example", (), False),
        ("http://127.0.0.1.evil.example", (), False),
        ("null", (), False),
        ("file://", (), False),
        ("http://[bad", (), False),
        ("https://app.example", ("https://app.example",), True),
        ("https://app.example", ("https://app.example/",), True),
        ("https://APP.example:443", ("https://app.example:443",), True),
        ("http://app.example", ("https://app.example",), False),
        ("https://app.example:8443", ("https://app.example",), False),
        ("https://anything.example", ("*",), True),
    ],
)
def test_origin_check(origin, allowed, ok):
    assert origin_allowed(origin, allowed) is ok
