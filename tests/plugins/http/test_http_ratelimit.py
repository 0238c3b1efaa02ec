import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from roost.plugins.http import Gcra


def test_burst_is_allowed_at_once_then_refused_with_retry_after():
    limiter = Gcra(rate_per_s=2.0, burst=3)
    assert [limiter.check("a", 100.0)[0] for _ in range(3)] == [True, True, True]
    allowed, retry_after = limiter.check("a", 100.0)
    assert not allowed
    assert retry_after == pytest.approx(0.5)


def test_capacity_returns_at_the_sustained_rate():
    limiter = Gcra(rate_per_s=2.0, burst=1)
    assert limiter.check("a", 0.0) == (True, 0.0)
    assert limiter.check("a", 0.25)[0] is False
    assert limiter.check("a", 0.5)[0] is True
    assert limiter.check("a", 0.9)[0] is False
    assert limiter.check("a", 1.0)[0] is True


def test_refused_requests_are_not_counted():
    limiter = Gcra(rate_per_s=1.0, burst=1)
    assert limiter.check("a", 0.0)[0]
    for _ in range(100):
        assert not limiter.check("a", 0.5)[0]
    assert limiter.check("a", 1.0)[0]


def test_keys_are_independent():
    limiter = Gcra(rate_per_s=1.0, burst=1)
    assert limiter.check("a", 0.0)[0]
    assert not limiter.check("a", 0.0)[0]
    assert limiter.check("b", 0.0)[0]


def test_table_never_exceeds_max_keys():
    limiter = Gcra(rate_per_s=1.0, burst=5, max_keys=100)
    for i in range(10_000):
        limiter.check(f"client-{i}", 0.0)
    assert len(limiter) == 100


def test_idle_keys_are_dropped_when_room_is_needed():
    limiter = Gcra(rate_per_s=10.0, burst=2, max_keys=1000)
    for i in range(50):
        limiter.check(i, 0.0)
    assert len(limiter) == 50
    # Long after, every old key has expired; one new key sweeps them out.
    limiter.check("new", 1000.0)
    assert len(limiter) == 1


def test_eviction_prefers_the_least_recently_seen_key():
    limiter = Gcra(rate_per_s=1.0, burst=1, max_keys=2)
    limiter.check("old", 0.0)
    limiter.check("busy", 0.0)
    limiter.check("old", 0.1)  # refused, but "old" is now the most recently seen
    limiter.check("new", 0.2)  # table full: "busy" goes
    assert not limiter.check("old", 0.3)[0]  # "old" kept its debt
    assert limiter.check("busy", 0.3)[0]  # "busy" starts afresh


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"rate_per_s": 0, "burst": 1}, "rate_per_s"),
        ({"rate_per_s": -1.0, "burst": 1}, "rate_per_s"),
        ({"rate_per_s": float("inf"), "burst": 1}, "rate_per_s"),
        ({"rate_per_s": "5", "burst": 1}, "rate_per_s"),
        ({"rate_per_s": 1.0, "burst": 0}, "burst"),
        ({"rate_per_s": 1.0, "burst": 2.5}, "burst"),
        ({"rate_per_s": 1.0, "burst": 1, "max_keys": 0}, "max_keys"),
    ],
)
def test_bad_parameters_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        Gcra(**kwargs)


@settings(max_examples=200, deadline=None)
@given(
    rate=st.floats(min_value=0.5, max_value=50.0),
    burst=st.integers(min_value=1, max_value=20),
    gaps=st.lists(st.floats(min_value=0.0, max_value=0.5), min_size=1, max_size=200),
)
def test_never_allows_more_than_burst_plus_rate_times_elapsed(rate, burst, gaps):
    limiter = Gcra(rate, burst)
    now = 0.0
    allowed_times = []
    for gap in gaps:
        now += gap
        if limiter.check("k", now)[0]:
            allowed_times.append(now)
    # In any window [t0, t1] at most burst + rate * (t1 - t0) requests pass.
    for i, start in enumerate(allowed_times):
        for j in range(i, len(allowed_times)):
            passed = j - i + 1
            assert passed <= burst + rate * (allowed_times[j] - start) + 1e-6


# ---- who is limited: the checks in front of every route ----------------------------------------


def make_gate(**settings):
    from roost.plugins.http import DaemonState, HttpSettings

    http = HttpSettings(**settings)
    frozen_clock = 1000.0  # no time passes: only the burst is available
    limiter = Gcra(http.rate_limit_per_s, http.rate_limit_burst)
    return DaemonState(None, http, limiter, 1, "", clock=lambda: frozen_clock)


def answers(gate, addr, n, headers=None):
    out = []
    for _ in range(n):
        refusal, _ = gate.check("route", headers or {}, addr, None)
        out.append(200 if refusal is None else refusal.status)
    return out


def test_loopback_callers_are_not_limited_by_default_but_remote_callers_still_are():
    gate = make_gate()  # the defaults: 20/s, burst 40
    for local in ("127.0.0.1", "127.0.0.7", "::1", "::ffff:127.0.0.1"):
        assert answers(gate, local, 500) == [200] * 500, local
    for remote in ("203.0.113.9", "10.0.0.2", "::ffff:192.0.2.1", None):
        assert answers(gate, remote, 60) == [200] * 40 + [429] * 20, remote


def test_remote_failed_auth_is_still_limited_and_loopback_can_be_limited_on_request():
    keyed = make_gate(api_key="k" * 32)
    wrong = {"Authorization": "Bearer guess"}
    assert answers(keyed, "198.51.100.4", 45, wrong) == [401] * 40 + [429] * 5
    assert answers(keyed, "127.0.0.1", 45, wrong) == [401] * 45
    behind_a_proxy = make_gate(rate_limit_loopback=True)
    assert answers(behind_a_proxy, "127.0.0.1", 45) == [200] * 40 + [429] * 5


def test_rate_limit_loopback_is_read_and_checked_from_config():
    from roost.kernel import ConfigError, default_config
    from roost.plugins.http import HttpSettings

    assert HttpSettings.from_config(default_config().http).rate_limit_loopback is False
    assert (
        HttpSettings.from_config(
            default_config(http={"rate_limit_loopback": True}).http
        ).rate_limit_loopback
        is True
    )
    with pytest.raises(ConfigError, match="rate_limit_loopback"):
        default_config(http={"rate_limit_loopback": "yes"})
