import email.utils
import json
import time

import pytest
from roost.plugins.http.client import http_retry_wait, retry_after_s
from roost.plugins.mcp.transports.sse import http_error_message


@pytest.mark.parametrize(
    "value", ["١٢", "²", "+7", " 7", "7.5", "1e3", "1_0", "-5", "inf", "nan", "9" * 400]
)
@pytest.mark.parametrize("name", ["Retry-After", "retry-after-ms"])
def test_a_retry_after_not_in_ascii_digits_is_ignored(name, value):
    # Regression: float() read "١٢" as 12, "+7" as 7, "inf" as an endless wait and "nan" as 0;
    # RFC 9110's delay-seconds is 1*DIGIT (ASCII), so these are no delay the server asked for.
    assert retry_after_s({name: value}) is None


def test_a_huge_retry_after_is_read_and_never_waited_for():
    # A delay past every cap is the server's answer; the callers' caps refuse to wait it out.
    long = retry_after_s({"Retry-After": "99999999"})
    assert long == 99_999_999
    assert http_retry_wait(429, long, 0, 3600.0) is None
    assert http_retry_wait(429, retry_after_s({"Retry-After": "2"}), 0, 3600.0) is not None


@pytest.mark.parametrize("forever", ["2147483647", "9223372036854775807"])
@pytest.mark.parametrize(("name", "scale"), [("Retry-After", 1), ("retry-after-ms", 1000)])
def test_a_retry_after_of_a_max_int_is_a_long_wait_not_an_unsaid_one(forever, name, scale):
    # Regression: past 10**9 s the number was ignored, as if the server had said nothing: told
    # to wait Java's Integer.MAX_VALUE (or Long's) seconds, roost retried in 0.5 s, 8 times.
    assert retry_after_s({name: forever}) == int(forever) / scale
    assert http_retry_wait(429, retry_after_s({name: forever}), 0, 3600.0) is None


def test_retry_after_in_seconds_milliseconds_and_http_dates():
    assert retry_after_s({"Retry-After": "7"}) == 7
    assert retry_after_s({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert retry_after_s({"retry-after-ms": "١", "Retry-After": "9"}) == 9
    date = email.utils.formatdate(1_000_030, usegmt=True)
    assert retry_after_s({"Retry-After": date}, now=1_000_000) == pytest.approx(30)
    assert retry_after_s({"Retry-After": "soon"}) is None and retry_after_s({}) is None
    assert retry_after_s({"Retry-After": "Mon, 01 Jan 99999 00:00:00 GMT"}) is None


@pytest.mark.parametrize(
    "date",
    [
        "Mon, 99999999999999999999 Jan 2020 00:00:00 GMT",
        "Mon, 01 Jan 2020 99999999999:00:00 GMT",
        "Mon, 01 Jan 2020 00:00:00 +99999999999999999",
        "Mon, ٠١ Jan 2030 00:00:00 GMT",
    ],
)
def test_a_retry_after_date_that_overflows_or_is_not_ascii_is_ignored(date):
    # Regression: a day, hour or zone past a C int raised OverflowError out of the provider
    # call; a date in other digits was read as one.
    assert retry_after_s({"Retry-After": date}, now=0) is None


@pytest.fixture(params=["JST-9", "EST+5"])
def local_zone(request, monkeypatch):
    """The process in a time zone other than UTC (POSIX TZ: no zone files needed)."""
    monkeypatch.setenv("TZ", request.param)
    time.tzset()
    yield request.param
    monkeypatch.undo()
    time.tzset()


@pytest.mark.parametrize(
    "date",
    [
        "Mon Jan 12 13:47:10 1970",  # asctime's form (RFC 9110: a recipient must read it)
        email.utils.formatdate(1_000_030),  # "-0000": a zone not given
    ],
)
def test_a_retry_after_date_without_a_zone_is_gmt_whatever_the_local_zone(local_zone, date):
    # Regression: such a date came back without a zone and was read in the machine's: 30 s
    # ahead was 0 in Tokyo and 5 hours in New York; and year 9999's last day in Tokyo (past
    # datetime's range once made UTC) raised ValueError out of the provider call.
    assert retry_after_s({"Retry-After": date}, now=1_000_000) == pytest.approx(30)
    for last in ("Fri Dec 31 23:59:59 9999", "Fri, 31 Dec 9999 23:59:59 -0000"):
        assert retry_after_s({"Retry-After": last}, now=0) == pytest.approx(253402300799)


@pytest.mark.parametrize("told", [float("nan"), -5.0, -1e308, True, float("inf")])
def test_a_retry_after_that_is_no_delay_is_waited_as_unsaid(told):
    # Regression: an MCP server's 429 whose JSON-RPC error data said "retryAfter": NaN (or -5)
    # reached trio.sleep through http_retry_wait, which raised ValueError out of the call.
    error = {"code": -32000, "message": "slow down", "data": {"retryAfter": told}}
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "error": error}).encode()
    data = http_error_message(1, 429, body)["error"]["data"]  # the MCP client retries on this
    wait = http_retry_wait(429, data["retryAfter"], 0, 60.0)
    assert wait is not None and 0.5 <= wait <= 0.65  # the first unsaid wait: 0.5 s + jitter
