"""``redact`` and ``ToolResult.redacted``: credentials out of whatever a peer answered."""

from __future__ import annotations

import base64
import types
from urllib.parse import quote

import pytest
from roost.kernel import Tool, ToolResult, ToolSpec, redact, redacted_head
from roost.plugins.http.client import credential_values


def test_every_string_at_any_depth_keys_included_is_redacted():
    value = {"a": ["x tok-secret y", ("tok-secret",)], "tok-secret": {"n": 1, "b": None}}
    assert redact(value, ["tok-secret"]) == {
        "a": ["x [redacted] y", ("[redacted]",)],
        "[redacted]": {"n": 1, "b": None},
    }


def test_a_value_without_a_secret_comes_back_itself():
    value = {"a": ["x", ("y",)], "b": 1}
    assert redact(value, ["tok-secret"]) is value
    result = ToolResult.text("nothing here")
    assert result.redacted(["tok-secret"]) is result


def test_the_longer_of_two_overlapping_secrets_goes_whole():
    # Shorter first would leave "[redacted]-extra" behind the longer one's tail.
    assert redact("k: abcd-extra", ["abcd", "abcd-extra"]) == "k: [redacted]"


def test_two_secrets_that_overlap_leave_no_piece_of_either():
    # One after the other, the first replaced took the second's head: its tail stayed.
    assert redact("k: abcd-1234-wxyz.", ["abcd-1234", "1234-wxyz"]) == "k: [redacted]."
    assert redact("k: 1234-wxyz-abcd", ["wxyz-abcd", "1234-wxyz"]) == "k: [redacted]"


@pytest.mark.parametrize("secret", ["", "abc"])
def test_a_secret_too_short_to_be_one_is_left_alone(secret):
    # Replacing "abc" would mangle ordinary text without hiding a credential.
    assert redact("abc def", [secret]) == "abc def"


def test_a_result_nested_too_deep_to_check_becomes_an_error_not_a_crash():
    deep: list = ["tok-secret"]
    for _ in range(100_000):
        deep = [deep]
    result = ToolResult(({"type": "text", "text": "x"},), {"deep": deep})
    redacted = result.redacted(["tok-secret"])
    assert redacted.is_error and "too deeply" in redacted.as_text()


def test_a_tool_keeps_its_secrets_out_of_its_repr():
    async def handler(call, ctx):
        raise AssertionError

    tool = Tool(ToolSpec("t", "d", owner="test"), handler, secrets=["tok-secret"])
    assert tool.secrets == ("tok-secret",) and "tok-secret" not in repr(tool)


def test_credential_values_are_those_named_so_with_and_without_their_scheme():
    named = {
        "Authorization": "Bearer tok-123456",
        "X-Api-Key": "key-123456",
        "GITHUB_TOKEN": "ghp_123456",
        "Cookie": "sid=abc123",
        "X-Tenant": "acme-corp",
        "ROOST_MODE": "verbose",
    }
    assert credential_values(named) == (
        "Bearer tok-123456",
        "tok-123456",
        "key-123456",
        "ghp_123456",
        "sid=abc123",
    )


def test_one_string_for_secrets_is_refused_not_split_into_characters():
    async def handler(call, ctx):
        raise AssertionError

    with pytest.raises(TypeError, match="Tool.secrets"):
        Tool(ToolSpec("t", "d", owner="test"), handler, secrets="tok-secret")


def test_credential_values_of_a_url_are_its_password_and_its_keys_not_other_parameters():
    url = "https://bob:p%40ss-word@host/mcp?api_key=a%2Fb%2Bcdef&page=2&access_token=tok+en12"
    basic = base64.b64encode(b"bob:p@ss-word").decode()
    assert credential_values({}, url) == (
        "p@ss-word",
        basic,
        "a%2Fb%2Bcdef",
        "a/b+cdef",
        "tok+en12",
        "tok en12",
    )
    assert credential_values({}, "https://host/mcp?page=2") == ()
    assert credential_values({}, "http://[::1") == credential_values({}, None) == ()


def test_a_secret_is_redacted_also_as_json_and_a_url_may_write_it():
    # A peer quoting its request as PHP's JSON does ("\/") or in a link (percent-encoded).
    text = 'said {"k": "tok\\/0123+abc="}, retry at /cb?t=tok%2F0123%2Babc%3D'
    assert redact(text, ["tok/0123+abc="]) == 'said {"k": "[redacted]"}, retry at /cb?t=[redacted]'


def test_a_secret_in_a_mapping_of_any_kind_or_under_an_odd_value_is_found():
    # What JSON does not write as itself (another Mapping, a set, a tuple key) is still checked.
    found = redact(
        {"m": types.MappingProxyType({"k": "tok-secret"}), "s": {1}, ("t",): ["tok-secret"]},
        ["tok-secret"],
    )
    assert found == {"m": {"k": "[redacted]"}, "s": {1}, ("t",): ["[redacted]"]}
    escaped = 'a "quoted\\ tok-se"cret\n'
    assert redact({"v": escaped}, ['tok-se"cret']) == {"v": 'a "quoted\\ [redacted]\n'}


@pytest.mark.parametrize("secret", [None, b"tok-secret", ["tok-secret"]])
def test_a_secret_that_is_not_a_string_is_refused_when_the_tool_is_made(secret):
    # Regression: Tool(..., secrets=[os.environ.get("UNSET")]) was taken, and every call of
    # the tool then crashed in the kernel (len(None)) instead of answering.
    async def handler(call, ctx):
        raise AssertionError

    with pytest.raises(TypeError, match=r"Tool.secrets\[1\]: expected a string") as info:
        Tool(ToolSpec("t", "d", owner="test"), handler, secrets=["tok-other", secret])
    assert "tok-secret" not in str(info.value) and "tok-other" not in str(info.value)


def test_a_short_setting_under_a_credential_like_name_is_not_taken_for_one():
    # Regression: TOKENIZERS_PARALLELISM=false (set for many Hugging Face based servers),
    # AUTH_MODE=none or SESSION_TIMEOUT=3600 made every "false", "none" or "3600" in the
    # server's answers read "[redacted]". A credential is 8 characters or more.
    named = {
        "TOKENIZERS_PARALLELISM": "false",
        "AUTH_MODE": "none",
        "SESSION_TIMEOUT": "3600",
        "X-Api-Key": "k-123456",
        "Authorization": "Bearer short",
    }
    assert credential_values(named, "https://u:pw@host/?token=abc") == (
        "k-123456",
        "Bearer short",
        base64.b64encode(b"u:pw").decode(),
    )


def test_a_secret_holding_a_lone_surrogate_is_redacted_not_a_crash():
    # Regression: an environment value of undecodable bytes reads as lone surrogates, and
    # making its percent-encoded form raised UnicodeEncodeError on every call of the tool.
    secret = "tok-\udcff-secret-123"
    assert redact({"a": "x"}, [secret]) == {"a": "x"}
    assert redact({"a": f"said {secret}!", "b": "\ud800"}, [secret]) == {
        "a": "said [redacted]!",
        "b": "\ud800",
    }
    result = ToolResult.text(f"echo {secret}").redacted([secret])
    assert result.as_text() == "echo [redacted]"


def test_credential_values_of_a_url_whose_password_holds_a_lone_surrogate():
    # Regression: the Basic credentials made of such a password raised UnicodeEncodeError.
    found = credential_values({}, "http://user:pass\ud800word-123@host/")
    assert "pass\ud800word-123" in found and len(found) == 2


def test_a_secret_is_found_json_escaped_and_as_its_undecodable_bytes_read():
    # A peer quoting it in a JSON text ("\"", "\\", "\u00e9"), and a text decoded with
    # "replace" (a byte that is not UTF-8 reads U+FFFD, while the environment kept it as a
    # lone surrogate): each form once only in the stdio transport, now in every redaction.
    quoted = 'pa"ss\\wörd-123'
    assert redact('{"k": "pa\\"ss\\\\w\\u00f6rd-123"}', [quoted]) == '{"k": "[redacted]"}'
    assert redact('{"k": "pa\\"ss\\\\wörd-123"}', [quoted]) == '{"k": "[redacted]"}'
    odd = b"tok\xffen-abcdefgh".decode("utf-8", "surrogateescape")
    assert redact("odd: tok\ufffden-abcdefgh!", [odd]) == "odd: [redacted]!"
    assert redact("/cb?t=tok%FFen-abcdefgh", [odd]) == "/cb?t=[redacted]"


def test_each_line_of_a_secret_spanning_lines_is_found_alone():
    # A PEM key printed (or echoed) line by line: no single line holds all of it.
    pem = "-----BEGIN KEY-----\nQUJDREVGR0hJSktMTU5PUFFSU1RVVldY\nWVphYmNk\nshort\n-----END KEY-"
    said = redact(["QUJDREVGR0hJSktMTU5PUFFSU1RVVldY", "WVphYmNk\r", "short"], [pem])
    assert said == ["[redacted]", "[redacted]\r", "short"]  # a line under 8: a word, left


@pytest.mark.parametrize(
    "written",
    [
        "sk-ab%2fcd%2bef%3dgh%2112",  # lower-case hex (.NET's HttpUtility.UrlEncode)
        "sk-ab/cd%2Bef%3Dgh%2112",  # Python's quote() with its default safe="/"
        "sk-ab%2Fcd%2Bef%3Dgh!12",  # JavaScript's encodeURIComponent keeps !'()*
        "sk-ab%2Fcd+ef%3dgh!12",  # any mix of the two, in either case
    ],
)
def test_a_secret_percent_encoded_by_any_encoder_is_found(written):
    # Regression: only Python's quote(safe="") form was a needle; a Node MCP server logging a
    # URL built with encodeURIComponent, or a .NET one's lower-case escapes, kept the key.
    said = {"log": f"GET /v1?key={written}&n=1"}
    assert redact(said, ["sk-ab/cd+ef=gh!12"]) == {"log": "GET /v1?key=[redacted]&n=1"}
    assert redact(f"GET /v1?key={written}", ["sk-ab/cd+ef=gh!12"]) == "GET /v1?key=[redacted]"
    assert redact('GET "sk-ab%2fcd"', ["sk-ab/cd+ef=gh!12"]) == 'GET "sk-ab%2fcd"'


def test_a_secret_another_begins_with_goes_whole_however_its_tail_is_encoded():
    # Regression: the pattern's branch of the shorter one (its "/" as itself) matched first and
    # won, so the longer one written by Python's quote() (which keeps "/") kept its tail:
    # "key=[redacted]%2Bef%3Dgh%2112".
    longer = "sk-ab/cd+ef=gh!12"
    secrets = ["sk-ab/cd", longer]
    assert redact(f"GET /v1?key={quote(longer)}&n=1", secrets) == "GET /v1?key=[redacted]&n=1"
    said = {"log": f"key={quote(longer)}"}
    assert redact(said, secrets) == {"log": "key=[redacted]"}


def test_a_secret_ending_in_a_percent_sign_leaves_no_piece_of_its_escape():
    # Regression: "%" matched the secret's last character as itself before "%25" was tried,
    # leaving "25" behind it: "key=[redacted]25&n=1".
    secret = "tok-1234%"
    assert redact(f"key={quote(secret)}&n=1", [secret]) == "key=[redacted]&n=1"
    assert redact({"k": f"key={quote(secret)}"}, [secret]) == {"k": "key=[redacted]"}


def test_a_secret_percent_encoded_with_its_quote_and_non_ascii_in_a_json_text_is_found():
    # The quick check reads the value as JSON: its '"' there reads '\"', the percent form not.
    secret = 'pa"ss/wörd-123'
    for written in ('pa\\"ss%2fw%c3%b6rd-123', "pa%22ss/w%C3%B6rd-123"):
        assert redact({"u": written.replace('\\"', '"')}, [secret]) == {"u": "[redacted]"}


def test_the_password_inside_a_basic_authorization_header_is_a_credential_too():
    # Regression: only the header and its base64 token were taken; a peer answering "wrong
    # password s3cret-pass for bob" (it decodes the header) kept the password.
    token = base64.b64encode(b"bob:s3cret-pass").decode()
    found = credential_values({"Authorization": f"Basic {token}"})
    assert found == (f"Basic {token}", token, "s3cret-pass")
    said = redact("wrong password s3cret-pass for bob", found)
    assert said == "wrong password [redacted] for bob"
    # Not base64, or no ":" in it: the token alone, as before.
    assert credential_values({"Authorization": "Basic not-base64!!"}) == (
        "Basic not-base64!!",
        "not-base64!!",
    )


def test_redacted_head_leaves_no_head_of_a_secret_the_cut_goes_through():
    key = "sk-live-0123456789abcdef"
    text = "x" * 190 + key + " tail"
    assert redacted_head(text, [key], 200) == "x" * 190 + "[redacted]"
    # Each earlier copy shortens the text once redacted: the cut still lands past every one.
    repeated = (key + " ") * 200
    head = redacted_head(repeated, [key], 1000)
    assert len(head) == 1000 and key[:8] not in head
    assert redacted_head(b"\xff" * 3 + key.encode(), [key], 20) == "\ufffd" * 3 + "[redacted]"
    assert redacted_head("short", [], 3) == "sho"
