"""``[a2a]`` configuration: defaults, and every bad value named by its key."""

import pytest
from roost.kernel import ConfigError
from roost.plugins.a2a import A2ASettings, ExternalAgent


def test_defaults():
    s = A2ASettings.from_config({})
    assert (s.enabled, s.listen_path, s.push_notifications, s.max_tasks, s.external_agents) == (
        True,
        "/a2a",
        False,
        1000,
        (),
    )


def test_external_agents_are_read():
    s = A2ASettings.from_config(
        {"external_agents": [{"name": "far-away", "url": "https://agent.example/"}]}
    )
    assert s.external_agents == (ExternalAgent("far-away", "https://agent.example/"),)


@pytest.mark.parametrize(
    "raw,key",
    [
        ({"enabled": "yes"}, "a2a.enabled"),
        ({"listen_path": "a2a"}, "a2a.listen_path"),
        ({"api_key": "short"}, "a2a.api_key"),
        ({"max_tasks": 0}, "a2a.max_tasks"),
        ({"max_tasks": True}, "a2a.max_tasks"),
        ({"max_tasks": 2.0}, "a2a.max_tasks"),
        ({"max_tasks": 10**400}, "a2a.max_tasks"),
        ({"max_open_tasks_per_caller": 1001}, "a2a.max_open_tasks_per_caller"),
        ({"max_open_tasks_per_caller": False}, "a2a.max_open_tasks_per_caller"),
        ({"input_required_ttl_s": float("nan")}, "a2a.input_required_ttl_s"),
        ({"input_required_ttl_s": float("inf")}, "a2a.input_required_ttl_s"),
        ({"input_required_ttl_s": 10**400}, "a2a.input_required_ttl_s"),
        ({"input_required_ttl_s": True}, "a2a.input_required_ttl_s"),
        ({"input_required_ttl_s": 0.5}, "a2a.input_required_ttl_s"),
        ({"push_notifications": 1}, "a2a.push_notifications"),
        ({"bogus": 1}, "a2a.bogus"),
        ({"external_agents": {"name": "x"}}, "a2a.external_agents"),
        (
            {"external_agents": [{"name": "Bad Name", "url": "http://x"}]},
            "a2a.external_agents[0].name",
        ),
        ({"external_agents": [{"name": "x", "url": "ftp://x"}]}, "a2a.external_agents[0].url"),
        # "$" in a pattern also matched before a trailing line break
        ({"external_agents": [{"name": "b1\n", "url": "http://x"}]}, "a2a.external_agents[0].name"),
        (
            {"external_agents": [{"name": "x", "url": 5}]},
            "a2a.external_agents[0].url: expected an http:// or https:// URL, got 5",
        ),
        (
            {"external_agents": [{"name": "x", "url": "http://x", "extra": 1}]},
            "a2a.external_agents[0]: unknown key 'extra'",
        ),
        (
            {
                "external_agents": [
                    {"name": "x", "url": "http://a"},
                    {"name": "x", "url": "http://b"},
                ]
            },
            "a2a.external_agents[1].name",
        ),
    ],
)
def test_bad_values_name_the_key(raw, key):
    with pytest.raises(ConfigError) as err:
        A2ASettings.from_config(raw)
    assert str(err.value).startswith(key)


def test_a2a_disabled_mounts_no_routes(tmp_path):
    from a2a_helpers import make_config
    from roost.plugins.a2a import roost_http_routes, roost_services

    class K:
        config = make_config(tmp_path, a2a={"enabled": False})

    assert roost_http_routes(K()) == [] and roost_services(K()) == []


def test_numeric_settings_at_their_bounds_are_taken_as_given():
    s = A2ASettings.from_config(
        {"max_tasks": 10, "max_open_tasks_per_caller": 10, "input_required_ttl_s": 1}
    )
    assert (s.max_tasks, s.max_open_tasks_per_caller) == (10, 10)
    assert s.input_required_ttl_s == 1.0 and type(s.input_required_ttl_s) is float


def test_an_unknown_key_is_named_with_the_likely_one_and_every_valid_key():
    with pytest.raises(ConfigError) as err:
        A2ASettings.from_config({"api_kye": "0123456789abcdef"})
    text = str(err.value)
    assert text.startswith("a2a.api_kye: unknown key 'api_kye'")
    assert "did you mean 'api_key'?" in text
    assert "valid keys in [a2a]: enabled, listen_path, api_key" in text
    assert "external_agents" in text
