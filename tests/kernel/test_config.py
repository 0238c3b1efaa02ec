"""roost.toml loading, environment overrides, error wording; data paths."""

from __future__ import annotations

import stat
from pathlib import Path

import platformdirs
import pytest
from roost.kernel import (
    ConfigError,
    HttpConfig,
    KernelConfig,
    RoostConfig,
    data_dir,
    default_config,
    find_config_file,
    header_table,
    load_config,
    number_setting,
    resolve_data_dir,
)


def write(directory: Path, text: str, name: str = "roost.toml") -> Path:
    path = directory / name
    path.write_text(text)
    return path


def load(directory: Path, text: str, env=None) -> RoostConfig:
    write(directory, text)
    return load_config(cwd=directory, env=env or {})


def failure(directory: Path, text: str, env=None) -> str:
    with pytest.raises(ConfigError) as info:
        load(directory, text, env)
    return str(info.value)


# ---- lookup ----------------------------------------------------------------------------


def test_no_file_gives_defaults(tmp_path):
    config = load_config(cwd=tmp_path, env={})
    assert config.source is None
    assert config.home == Path(platformdirs.user_data_dir("roost", appauthor=False)).absolute()
    assert config.kernel == KernelConfig()
    assert config.kernel.max_depth == 5
    assert config.http.host == "127.0.0.1" and config.http.port == 8470
    assert config.http.api_key is None
    assert config.tools.timeout_s == 60.0 and config.tools.max_output_chars == 50_000
    assert config.taint.policy == "block" and config.taint.sinks == ("bash", "write", "edit")
    assert config.agents.bundled is True and config.agents.dirs == ()
    assert config.providers == {} and config.mcp_servers == () and config.a2a == {}


def test_file_in_cwd_is_used(tmp_path):
    path = write(tmp_path, "[http]\nport = 9001\n")
    config = load_config(cwd=tmp_path, env={})
    assert config.source == path and config.http.port == 9001


def test_roost_config_env_beats_cwd_and_explicit_path_beats_both(tmp_path):
    write(tmp_path, "[http]\nport = 1001\n")
    other = write(tmp_path, "[http]\nport = 1002\n", "other.toml")
    third = write(tmp_path, "[http]\nport = 1003\n", "third.toml")
    env = {"ROOST_CONFIG": str(other)}
    assert load_config(cwd=tmp_path, env=env).http.port == 1002
    assert load_config(third, cwd=tmp_path, env=env).http.port == 1003
    assert load_config("third.toml", cwd=tmp_path, env={}).source == third


def test_explicit_path_that_does_not_exist_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match=r"missing\.toml \(from --config\) does not exist"):
        load_config(tmp_path / "missing.toml", env={})
    with pytest.raises(ConfigError, match=r"from \$ROOST_CONFIG"):
        load_config(cwd=tmp_path, env={"ROOST_CONFIG": str(tmp_path / "missing.toml")})


def test_find_config_file_returns_none_without_a_file(tmp_path):
    assert find_config_file(cwd=tmp_path, env={}) is None


def test_config_path_that_is_a_directory(tmp_path):
    with pytest.raises(ConfigError, match="is a directory"):
        load_config(tmp_path, env={})


def test_full_file_round_trip(tmp_path):
    config = load(
        tmp_path,
        """
home = "data"

[agents]
dirs = ["agents", "/abs/agents"]
bundled = false
default = "worker"

[kernel]
max_depth = 3
mailbox_size = 16
ask_timeout_s = 5
shutdown_timeout_s = 2.5
agent_concurrency = 2
loop_guard_repeats = 4

[http]
host = "0.0.0.0"
port = 0
api_key_env = "MY_KEY"
rate_limit_per_s = 5.5
rate_limit_burst = 10
max_body_bytes = 2048
allowed_origins = ["http://localhost:3000"]

[tools]
timeout_s = 30
max_output_chars = 1000
bash_timeout_s = 10
bash_max_output_chars = 500
env_allowlist = ["LANG", "TERM"]
allow_private_network = true

[taint]
policy = "warn"
sinks = ["bash"]

[plugins]
disabled = ["http"]

[providers.openai]
base_url = "https://openrouter.ai/api/v1"

[[mcp_servers]]
name = "github"
transport = { type = "stdio", command = "npx" }

[a2a]
peers = ["http://127.0.0.1:9000"]
""",
    )
    assert config.home == tmp_path / "data"
    assert config.agents.dirs == (str(tmp_path / "agents"), "/abs/agents")
    assert config.agents.bundled is False and config.agents.default == "worker"
    assert config.kernel.max_depth == 3 and config.kernel.ask_timeout_s == 5.0
    assert isinstance(config.kernel.ask_timeout_s, float)
    assert config.http.port == 0 and config.http.allowed_origins == ("http://localhost:3000",)
    assert config.tools.env_allowlist == ("LANG", "TERM") and config.tools.allow_private_network
    assert config.taint.policy == "warn" and config.plugins.disabled == ("http",)
    assert config.providers["openai"]["base_url"].startswith("https://")
    assert config.mcp_servers[0]["name"] == "github"
    assert config.a2a == {"peers": ["http://127.0.0.1:9000"]}
    assert config.database_path == tmp_path / "data" / "roost.db"


# ---- errors ----------------------------------------------------------------------------


def test_unknown_key_in_a_section_suggests_and_lists(tmp_path):
    message = failure(tmp_path, "[http]\nprot = 80\n")
    assert message.startswith(str(tmp_path / "roost.toml") + ": unknown key 'http.prot'")
    assert "did you mean 'port'?" in message
    assert "valid keys in [http]: host, port, api_key, api_key_env" in message


def test_unknown_top_level_key(tmp_path):
    message = failure(tmp_path, "[htpp]\nport = 1\n")
    assert "unknown key 'htpp' — did you mean 'http'?" in message
    assert "valid keys in the top level: home, agents" in message


def test_unknown_key_without_close_match(tmp_path):
    message = failure(tmp_path, "[kernel]\nzzz = 1\n")
    assert "unknown key 'kernel.zzz' — valid keys in [kernel]:" in message


def test_bad_port_names_key_expectation_and_file(tmp_path):
    message = failure(tmp_path, '[http]\nport = "eighty"\n')
    assert message == (
        f"{tmp_path / 'roost.toml'}: http.port: expected an integer 0-65535 "
        '(0 picks a free port), got "eighty"'
    )
    assert "got 70000" in failure(tmp_path, "[http]\nport = 70000\n")


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("[kernel]\nmax_depth = true", "kernel.max_depth: expected an integer 1-64, got true"),
        ("[kernel]\nmax_depth = 0", "kernel.max_depth: expected an integer 1-64, got 0"),
        ("[kernel]\nask_timeout_s = -1", "kernel.ask_timeout_s: expected a number > 0, got -1"),
        ("[kernel]\nask_timeout_s = nan", "kernel.ask_timeout_s: expected a number > 0, got nan"),
        ("[kernel]\nask_timeout_s = inf", "got inf"),
        ("[agents]\nbundled = 1", "agents.bundled: expected true or false, got 1"),
        ('[agents]\ndirs = "agents"', "agents.dirs: expected an array of directory paths"),
        ('[agents]\ndefault = "Bad Name"', "agents.default: expected an agent name"),
        ('[taint]\npolicy = "ignore"', 'taint.policy: expected one of "block", "warn", "allow"'),
        ('[http]\nhost = ""', "http.host: expected a host name or IP address"),
        ('[http]\napi_key_env = "1X"', "http.api_key_env: expected an environment variable name"),
        (
            '[tools]\nenv_allowlist = ["OK", "NOT OK"]',
            'tools.env_allowlist[1]: expected an environment variable name, got "NOT OK"',
        ),
        ("[plugins]\ndisabled = [1]", "plugins.disabled[0]: expected a non-empty string, got 1"),
        ("http = 3", "http: expected a table ([http]), got 3"),
        ("home = 3", "home: expected a directory path, got 3"),
        ("mcp_servers = 3", "mcp_servers: expected an array of tables ([[mcp_servers]]), got 3"),
        ("mcp_servers = [1]", "mcp_servers[0]: expected a table ([[mcp_servers]]), got 1"),
        (
            '[providers]\nopenai = "key"',
            'providers.openai: expected a table ([providers.openai]), got "key"',
        ),
        ("a2a = [1]", "a2a: expected a table ([a2a]), got an array"),
    ],
)
def test_bad_values(tmp_path, text, fragment):
    assert fragment in failure(tmp_path, text + "\n")


def test_a_seconds_setting_past_the_largest_float_is_refused_not_a_crash(tmp_path):
    # Regression: a TOML integer of 310 digits passed the "> 0" check and float() of it
    # raised OverflowError out of load_config instead of a ConfigError naming the key.
    huge = "1" + "0" * 309
    message = failure(tmp_path, f"[kernel]\nask_timeout_s = {huge}\n")
    assert f"kernel.ask_timeout_s: expected a number > 0, got {huge}" in message
    assert load(tmp_path, "[http]\nkeep_alive_s = 1e308\n").http.keep_alive_s == 1e308


@pytest.mark.parametrize(
    ("value", "bounds", "expected"),
    [
        (5, {}, 5.0),
        (5, {"integer": True}, 5),
        (True, {"integer": True}, None),  # a bool is never a number, though True == 1
        (False, {"closed": True}, None),
        (2.0, {"integer": True}, None),  # a whole float is no integer setting
        ("5", {}, None),
        (None, {}, None),
        (0, {}, None),  # low is excluded unless closed
        (0, {"closed": True}, 0.0),
        (-0.0, {}, None),
        (5e-324, {}, 5e-324),
        (100, {"low": 100, "integer": True}, None),
        (100, {"low": 100, "integer": True, "closed": True}, 100),
        (3600, {"high": 3600}, 3600.0),  # high is always included
        (3600.5, {"high": 3600}, None),
        (float("inf"), {}, None),
        (float("-inf"), {}, None),
        (float("nan"), {"closed": True}, None),
        (1e308, {}, 1e308),
        # past the largest float: refused, not an OverflowError
        pytest.param(2**1024, {}, None, id="2**1024"),
        pytest.param(10**5000, {}, None, id="10**5000"),
        pytest.param(10**5000, {"integer": True}, 10**5000, id="10**5000-integer"),
        (2**63, {"integer": True, "high": 2**63 - 1}, None),
    ],
)
def test_number_setting_refuses_bools_non_finite_and_out_of_bounds_values(value, bounds, expected):
    got = number_setting(value, **bounds)
    assert got == expected
    assert type(got) is type(expected)


def test_invalid_toml_names_file_and_line(tmp_path):
    message = failure(tmp_path, "[http]\nport = \n")
    assert message.startswith(str(tmp_path / "roost.toml") + ": invalid TOML:")
    assert "line 2" in message


def test_non_utf8_file(tmp_path):
    (tmp_path / "roost.toml").write_bytes(b"home = '\xff'\n")
    with pytest.raises(ConfigError, match="not valid UTF-8"):
        load_config(cwd=tmp_path, env={})


# ---- environment -----------------------------------------------------------------------


def test_environment_overrides_the_file(tmp_path):
    write(
        tmp_path,
        'home = "from-file"\n[http]\nhost = "10.0.0.1"\nport = 1\n[kernel]\nmax_depth = 9\n',
    )
    env = {
        "ROOST_HOME": str(tmp_path / "env-home"),
        "ROOST_HOST": "127.0.0.2",
        "ROOST_PORT": "8123",
        "ROOST_MAX_DEPTH": "4",
        "ROOST_API_KEY": "s3cret",
    }
    config = load_config(cwd=tmp_path, env=env)
    assert config.home == tmp_path / "env-home"
    assert config.http.host == "127.0.0.2" and config.http.port == 8123
    assert config.kernel.max_depth == 4
    assert config.http.api_key == "s3cret"


def test_empty_environment_values_are_ignored(tmp_path):
    config = load_config(cwd=tmp_path, env={"ROOST_PORT": " ", "ROOST_API_KEY": ""})
    assert config.http.port == 8470 and config.http.api_key is None


def test_bad_environment_value_names_the_variable(tmp_path):
    with pytest.raises(ConfigError) as info:
        load_config(cwd=tmp_path, env={"ROOST_PORT": "eighty"})
    assert str(info.value) == (
        "environment variable ROOST_PORT: http.port: expected an integer 0-65535 "
        '(0 picks a free port), got "eighty"'
    )
    with pytest.raises(ConfigError, match="ROOST_MAX_DEPTH: kernel.max_depth"):
        load_config(cwd=tmp_path, env={"ROOST_MAX_DEPTH": "99"})


@pytest.mark.parametrize("port", ["٨٠٨٠", "²", "+80", "8_0", "1e3", "-1", "0x50", "9" * 5000])
def test_an_environment_number_not_in_ascii_digits_names_the_variable(tmp_path, port):
    # Regression: the pattern \d took Arabic-Indic digits ("٨٠٨٠" was port 8080), and a sign.
    with pytest.raises(ConfigError) as info:
        load_config(cwd=tmp_path, env={"ROOST_PORT": port})
    message = str(info.value)
    assert message.startswith("environment variable ROOST_PORT: http.port: expected an integer")
    assert len(message) < 200
    assert load_config(cwd=tmp_path, env={"ROOST_PORT": " 0080 "}).http.port == 80


def test_api_key_from_the_variable_named_in_the_file(tmp_path):
    write(tmp_path, '[http]\napi_key = "from-file"\napi_key_env = "SERVICE_TOKEN"\n')
    assert load_config(cwd=tmp_path, env={}).http.api_key == "from-file"
    env = {"SERVICE_TOKEN": "from-named", "ROOST_API_KEY": "from-roost"}
    assert load_config(cwd=tmp_path, env=env).http.api_key == "from-named"
    assert load_config(cwd=tmp_path, env={"ROOST_API_KEY": "r"}).http.api_key == "r"


def test_api_key_never_appears_in_repr(tmp_path):
    write(tmp_path, '[http]\napi_key = "file-key-123"\n[providers.openai]\napi_key = "sk-999"\n')
    config = load_config(cwd=tmp_path, env={"ROOST_API_KEY": "env-key-456"})
    assert config.http.api_key == "env-key-456"
    for text in (repr(config), str(config), repr(config.http), repr(config.as_dict())):
        assert "env-key-456" not in text and "sk-999" not in text and "file-key-123" not in text
    assert config.as_dict()["http"]["api_key"] == "***"
    assert config.as_dict(redact=False)["providers"]["openai"]["api_key"] == "sk-999"


# ---- default_config --------------------------------------------------------------------


def test_default_config_takes_home_and_sections(tmp_path):
    config = default_config(home=tmp_path, http={"port": 0}, kernel=KernelConfig(max_depth=2))
    assert config.home == tmp_path and config.http.port == 0 and config.kernel.max_depth == 2
    assert config.source is None


def test_default_config_home_from_env_and_ignores_other_env(tmp_path):
    config = default_config(env={"ROOST_HOME": str(tmp_path), "ROOST_PORT": "1"})
    assert config.home == tmp_path and config.http.port == 8470


def test_default_config_checks_overrides(tmp_path):
    with pytest.raises(ConfigError, match="http.port"):
        default_config(home=tmp_path, http={"port": "x"})
    with pytest.raises(ConfigError, match="unknown key 'htp'"):
        default_config(home=tmp_path, htp={})
    with pytest.raises(ConfigError, match="section objects"):
        default_config(home=tmp_path, kernel=HttpConfig())


# ---- data paths ------------------------------------------------------------------------


def test_data_dir_is_created_private(tmp_path):
    home = tmp_path / "a" / "roost-home"
    assert resolve_data_dir({"ROOST_HOME": str(home)}) == home
    assert not home.exists()
    assert data_dir({"ROOST_HOME": str(home)}) == home
    assert home.is_dir() and stat.S_IMODE(home.stat().st_mode) == 0o700


def test_data_dir_defaults_to_platform_dir():
    expected = Path(platformdirs.user_data_dir("roost", appauthor=False)).absolute()
    assert resolve_data_dir({}) == expected


def test_data_dir_that_is_a_file_is_an_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ConfigError, match=r"ROOST_HOME.*not a directory"):
        data_dir({"ROOST_HOME": str(blocker)})


def test_an_integer_of_over_4300_digits_is_an_error_not_a_crash(tmp_path):
    # Regression: tomllib raises a bare ValueError (not TOMLDecodeError) for it, and
    # `roost` exited with "unexpected ValueError" naming no file.
    message = failure(tmp_path, "[kernel]\nask_timeout_s = 1" + "0" * 4400 + "\n")
    assert message.startswith(str(tmp_path / "roost.toml") + ": invalid TOML: an integer")


def test_deeply_nested_toml_is_an_error_not_a_crash(tmp_path):
    assert "nested too deeply" in failure(tmp_path, "a = " + "[" * 100_000 + "]" * 100_000)


def test_store_durability_names_its_choices(tmp_path):
    message = failure(tmp_path, '[store]\nsynchronous = "fsync"\n')
    assert "store.synchronous" in message and '"normal", "full"' in message


async def test_store_full_sync_reaches_the_database(tmp_path):
    from roost.kernel import open_kernel

    config = default_config(home=tmp_path, store={"synchronous": "full"}, agents={"bundled": False})
    async with open_kernel(config) as kernel:
        mode = await kernel.store.read(
            "probe", lambda c: c.execute("PRAGMA synchronous").fetchone()[0]
        )
    assert config.store.synchronous == "full" and mode == 2


@pytest.mark.parametrize(
    "value",
    [
        {"X-Key": "a\r\nX-Injected: 1"},  # a line break would start another header
        {"X-Key": "a\nb"},
        {"X-Key\n": "a"},  # a name's trailing line break is no token character either
        {"X-Key": "clé"},  # httpx encodes header values as ASCII: it would fail at request
        {"X-Key": "\ud800"},
        {"X-Key": "a\x00b"},
        # h11 refuses a value with a space or tab at either end: it failed at the request
        {"X-Key": " Bearer k"},
        {"X-Key": "Bearer k "},
        {"X-Key": "a\tb"},
        {"a b": "c"},  # not an HTTP token
        {"": "c"},
        {"X-Key": 1},
        ["X-Key", "v"],
        "X-Key: v",
    ],
)
def test_header_table_refuses_what_is_no_header_naming_the_key(value):
    with pytest.raises(ConfigError, match=r"^peer\.headers: expected a table of header names"):
        header_table(value, "peer.headers")


def test_header_table_keeps_valid_headers():
    headers = {"Authorization": "Bearer k", "X-Trace_ok.1": ""}
    assert header_table(headers, "peer.headers") == headers
