"""``roost.toml`` → a frozen ``RoostConfig``, with environment overrides and clear errors.

Lookup: ``--config``, else ``$ROOST_CONFIG``, else ``./roost.toml``, else the defaults; then
``ROOST_HOME``, ``ROOST_HOST``, ``ROOST_PORT``, ``ROOST_API_KEY`` (or ``http.api_key_env``'s
variable) and ``ROOST_MAX_DEPTH`` override. Named API keys (``[http.keys.<name>]``) name
where their secret is, never the secret. A bad value is a ``ConfigError`` naming the key,
what was expected and where the value came from.
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import json
import math
import os
import re
import tomllib
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs
import cattrs

from ._errors import ConfigError, InvalidInput, number_setting, parse_int
from ._paths import HOME_ENV, database_path, read_text, resolve_data_dir
from ._trace import DEFAULT_MAX_DEPTH

CONFIG_FILENAME = "roost.toml"
CONFIG_ENV = "ROOST_CONFIG"
HOST_ENV = "ROOST_HOST"
PORT_ENV = "ROOST_PORT"
API_KEY_ENV = "ROOST_API_KEY"
MAX_DEPTH_ENV = "ROOST_MAX_DEPTH"
MAX_CONFIG_BYTES = 1_048_576

_SECRET_WORDS = ("key", "token", "secret", "password", "authorization", "credential")


# ---- value checks ----------------------------------------------------------------------


@attrs.define
class _Bad(Exception):
    """A value failed its check; the caller words the error. For a part of the value (a
    list item, a key's table), ``suffix`` names it (``[2]``), ``what`` says what it should
    be and ``value`` is the part."""

    suffix: str = ""
    what: str | None = None
    value: Any = None


_NOT_SHOWN = object()  # stands for a value an error must not repeat (a misplaced secret)


def _got(value: Any) -> str:
    if value is _NOT_SHOWN:
        return "a value (not shown)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        text = json.dumps(value, ensure_ascii=False)
        return text if len(text) <= 60 else text[:57] + "…"
    return f"a {type(value).__name__}"


@attrs.frozen
class _Check:
    """A setting's check: ``test`` returns the value to keep or raises ``_Bad``; ``what``
    says what was expected; with ``integer``, an environment override is read as one."""

    what: str
    test: Callable[[Any], Any]
    integer: bool = False


def _number(value: Any, **bounds: Any) -> Any:
    checked = number_setting(value, **bounds)
    if checked is None:
        raise _Bad
    return checked


def _int(low: int, high: float = math.inf, note: str = "") -> _Check:
    bounds = f"{low}-{high}" if high != math.inf else f"≥ {low}"
    test = functools.partial(_number, low=low, high=high, integer=True, closed=True)
    return _Check(f"an integer {bounds}{note}", test, integer=True)


def _boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise _Bad
    return value


_FLOAT = _Check("a number > 0", _number)
_BOOL = _Check("true or false", _boolean)


def _str(
    what: str = "a non-empty string", pattern: str | None = None, choices: tuple[str, ...] = ()
) -> _Check:
    def test(value: Any) -> str:
        if not isinstance(value, str) or not value.strip():
            raise _Bad
        if pattern is not None and not re.fullmatch(pattern, value):
            raise _Bad
        if choices and value not in choices:
            raise _Bad
        return value

    if choices:
        what = "one of " + ", ".join(json.dumps(c) for c in choices)
    return _Check(what, test)


def _part(check: _Check, value: Any, suffix: str) -> Any:
    """``check`` applied to ``value``, a part of a setting that ``suffix`` names."""
    try:
        return check.test(value)
    except _Bad:
        raise _Bad(suffix, check.what, value) from None


def _str_list(item: _Check | None = None, what: str = "an array of strings") -> _Check:
    item = item or _str()

    def test(value: Any) -> tuple[str, ...]:
        if not isinstance(value, list):
            raise _Bad
        return tuple(_part(item, entry, f"[{index}]") for index, entry in enumerate(value))

    return _Check(what, test)


_ENV_NAME = _str("an environment variable name", r"[A-Za-z_][A-Za-z0-9_]*")
_PRINCIPAL_NAME = r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}"
DEFAULT_PRINCIPAL = "default"  # the principal of http.api_key (ROOST_API_KEY)
LOCAL_PRINCIPAL = "local"  # every caller when no key is configured
_KEY_FIELDS = ("key_env", "key_file", "admin")
_ONE_SOURCE = (
    'a table with exactly one of key_env = "VARIABLE" or '
    'key_file = "path" (and optionally admin = true)'
)


def _keys(value: Any) -> tuple[dict[str, Any], ...]:
    """``[http.keys.<name>]`` tables: each names where its principal's key is."""
    if not isinstance(value, dict):
        raise _Bad
    out = []
    for name, entry in value.items():
        if name == LOCAL_PRINCIPAL:
            what = f"a name other than {name!r} (the principal of a daemon without keys)"
            raise _Bad(f".{name}", what, name)
        if not re.fullmatch(_PRINCIPAL_NAME, name):
            raise _Bad(
                f".{name}",
                "a principal name: 1-64 letters, digits, '_', '.', '@' or '-', "
                "starting with a letter or digit",
                name,
            )
        if not isinstance(entry, dict):
            raise _Bad(f".{name}", _ONE_SOURCE, entry)
        for field in entry:
            if field not in _KEY_FIELDS:
                why = (
                    "key_env or key_file (a secret never goes in roost.toml: put it "
                    "in an environment variable or a file only you can read, chmod 600)"
                    if field in ("key", "api_key", "secret", "token", "value")
                    else f"only {', '.join(_KEY_FIELDS)}"
                )
                raise _Bad(f".{name}.{field}", why, _NOT_SHOWN)
        sources = [f for f in ("key_env", "key_file") if f in entry]
        if len(sources) != 1:
            raise _Bad(f".{name}", _ONE_SOURCE, entry)
        source = sources[0]
        check = _ENV_NAME if source == "key_env" else _str("a file path")
        out.append(
            {
                "name": name,
                source: _part(check, entry[source], f".{name}.{source}"),
                "admin": _part(_BOOL, entry.get("admin", False), f".{name}.admin"),
            }
        )
    return tuple(out)


_KEYS = _Check('a table of named keys, e.g. [http.keys.alice] with key_env = "ALICE_KEY"', _keys)
_AGENT_NAME = _str(
    "an agent name (lowercase letters, digits, '_' or '-')", r"[a-z][a-z0-9_-]{0,62}"
)


def _check(check: Any, **kwargs: Any) -> Any:
    """An attrs field whose value ``check`` validates (used for files and the environment)."""
    return attrs.field(metadata={"check": check}, **kwargs)


def _redacted(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {
            k: "***" if any(w in str(k).lower() for w in _SECRET_WORDS) else _redacted(v)
            for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return type(value)(_redacted(v) for v in value)
    return value


def _redacting_repr(value: Any) -> str:
    return repr(_redacted(value))


# ---- the sections ----------------------------------------------------------------------


@attrs.frozen
class AgentsConfig:
    """``[agents]``: where manifests live, and the agent used when none is named."""

    dirs: tuple[str, ...] = _check(_str_list(what="an array of directory paths"), default=())
    bundled: bool = _check(_BOOL, default=True)
    default: str | None = _check(_AGENT_NAME, default=None)


@attrs.frozen
class KernelConfig:
    """``[kernel]``: call depth, mailboxes, deadlines and the loop guard."""

    max_depth: int = _check(_int(1, 64), default=DEFAULT_MAX_DEPTH)
    mailbox_size: int = _check(_int(1, 100_000), default=64)
    ask_timeout_s: float = _check(_FLOAT, default=300.0)
    shutdown_timeout_s: float = _check(_FLOAT, default=10.0)
    # An agent that crashed past its restart budget starts again this long after it stopped.
    restart_cooldown_s: float = _check(_FLOAT, default=60.0)
    agent_concurrency: int = _check(_int(1, 10_000), default=8)
    loop_guard_repeats: int = _check(_int(2, 1000), default=3)


@attrs.frozen
class ApiKeyConfig:
    """``[http.keys.<name>]``: one principal's key, read at start from the variable
    ``key_env`` or the file ``key_file`` (mode 0600); ``admin`` may read ``/api/events``."""

    name: str
    key_env: str | None = None
    key_file: str | None = None
    admin: bool = False


@attrs.frozen
class HttpConfig:
    """``[http]``: the daemon's address, auth and request limits. The key is never shown."""

    host: str = _check(_str("a host name or IP address"), default="127.0.0.1")
    port: int = _check(_int(0, 65535, " (0 picks a free port)"), default=8470)
    api_key: str | None = _check(_str(), default=None, repr=False)
    api_key_env: str = _check(_ENV_NAME, default=API_KEY_ENV)
    keys: tuple[ApiKeyConfig, ...] = _check(_KEYS, default=())
    # MCP Streamable HTTP sessions: closed after this long without a request (none in flight
    # and no GET stream open); each caller (principal, or address without keys) holds at most
    # this many, its oldest idle one making room for a new one.
    mcp_session_idle_s: float = _check(_FLOAT, default=600.0)
    mcp_sessions_per_caller: int = _check(_int(1, 100_000), default=100)
    rate_limit_per_s: float = _check(_FLOAT, default=20.0)
    rate_limit_burst: int = _check(_int(1, 1_000_000), default=40)
    max_body_bytes: int = _check(_int(1024, 1 << 30), default=1_048_576)
    allowed_origins: tuple[str, ...] = _check(_str_list(), default=())
    rate_limit_loopback: bool = _check(_BOOL, default=False)
    # Host names requests may use besides localhost and the bound address (DNS rebinding).
    allowed_hosts: tuple[str, ...] = _check(_str_list(), default=())
    # The URL clients reach the daemon at (links in agent cards); default: the bound address.
    public_url: str | None = _check(_str("an http:// or https:// URL"), default=None)
    keep_alive_s: float = _check(_FLOAT, default=5.0)
    # The spans of this many recent traces are kept in memory for the dashboard and
    # GET /api/traces; 0 keeps none (spans are then recorded only while someone watches).
    trace_history: int = _check(_int(0, 10_000), default=100)

    @property
    def host_principal(self) -> str:
        """Who in-process callers (and sessions from before principals) are: ``default``
        (``api_key``'s principal) when that key is set, else ``local``."""
        return DEFAULT_PRINCIPAL if self.api_key else LOCAL_PRINCIPAL


@attrs.frozen
class ToolsConfig:
    """``[tools]``: default tool timeout and output caps, child env, outbound network."""

    timeout_s: float = _check(_FLOAT, default=60.0)
    max_output_chars: int = _check(_int(100), default=50_000)
    bash_timeout_s: float = _check(_FLOAT, default=120.0)
    bash_max_output_chars: int = _check(_int(100), default=30_000)
    env_allowlist: tuple[str, ...] = _check(
        _str_list(_ENV_NAME, "an array of environment variable names"), default=()
    )
    allow_private_network: bool = _check(_BOOL, default=False)


@attrs.frozen
class TaintConfig:
    """``[taint]``: what happens when untrusted data reaches a sink tool."""

    policy: str = _check(_str(choices=("block", "warn", "allow")), default="block")
    sinks: tuple[str, ...] = _check(_str_list(), default=("bash", "write", "edit"))


@attrs.frozen
class PluginsConfig:
    """``[plugins]``: entry-point names of plugins not to load."""

    disabled: tuple[str, ...] = _check(_str_list(), default=())


@attrs.frozen
class StoreConfig:
    """``[store]``: ``synchronous = "normal"``: a commit survives roost being killed, not a
    power loss; ``"full"``: each group commit is fsynced first, surviving a power loss."""

    synchronous: str = _check(_str(choices=("normal", "full")), default="normal")


@attrs.frozen
class RoostConfig:
    """The whole configuration; ``source``: its file (None: defaults). ``providers``,
    ``mcp_servers``, ``a2a`` and ``telemetry`` stay plain data, checked by the plugins that
    read them; secrets in them are hidden from ``repr``."""

    home: Path
    agents: AgentsConfig = attrs.field(factory=AgentsConfig)
    kernel: KernelConfig = attrs.field(factory=KernelConfig)
    http: HttpConfig = attrs.field(factory=HttpConfig)
    tools: ToolsConfig = attrs.field(factory=ToolsConfig)
    taint: TaintConfig = attrs.field(factory=TaintConfig)
    plugins: PluginsConfig = attrs.field(factory=PluginsConfig)
    store: StoreConfig = attrs.field(factory=StoreConfig)
    providers: Mapping[str, Mapping[str, Any]] = attrs.field(factory=dict, repr=_redacting_repr)
    mcp_servers: tuple[Mapping[str, Any], ...] = attrs.field(default=(), repr=_redacting_repr)
    a2a: Mapping[str, Any] = attrs.field(factory=dict, repr=_redacting_repr)
    telemetry: Mapping[str, Any] = attrs.field(factory=dict, repr=_redacting_repr)
    source: Path | None = None

    @property
    def where(self) -> str:
        """How messages name this configuration: the file's path, else ``roost.toml``."""
        return CONFIG_FILENAME if self.source is None else str(self.source)

    @property
    def database_path(self) -> Path:
        """The SQLite database in the data directory."""
        return database_path(self.home)

    def as_dict(self, *, redact: bool = True) -> dict[str, Any]:
        """A TOML/JSON-ready view; with ``redact`` (the default) secrets show as ``***``."""
        out = _converter.unstructure(self)
        out["home"] = str(self.home)
        out["source"] = None if self.source is None else str(self.source)
        if redact:
            if out["http"]["api_key"] is not None:
                out["http"]["api_key"] = "***"
            for key in _PLAIN:
                out[key] = _redacted(out[key])
        return out


# What the file's top level holds, read from RoostConfig's fields: the sections checked here
# (an attrs class each), and the plain data plugins check (hidden from repr).
_SECTIONS: dict[str, type] = {
    f.name: f.default.factory
    for f in attrs.fields(RoostConfig)
    if isinstance(f.default, attrs.Factory) and attrs.has(f.default.factory)
}
_PLAIN = tuple(f.name for f in attrs.fields(RoostConfig) if f.repr is _redacting_repr)
_TOP_LEVEL = ("home", *_SECTIONS, *_PLAIN)

_converter = cattrs.Converter()
_converter.register_unstructure_hook(Path, str)


# ---- building --------------------------------------------------------------------------


HTTP_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
"""An HTTP token (RFC 9110): what a header name is made of (use ``fullmatch``)."""
HTTP_HEADER_VALUE = re.compile(r"(?:[\x21-\x7e](?:[\x20-\x7e]*[\x21-\x7e])?)?")
"""A header value httpx and h11 send as given (use ``fullmatch``): visible ASCII, spaces only
between (no line break, tab or other control character, nothing ASCII cannot encode)."""


def header_table(value: object, where: str) -> dict[str, str]:
    """``value`` checked as a table of HTTP header names to visible ASCII (a line break would
    start another header); else ConfigError naming ``where``."""
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str)
        and HTTP_TOKEN.fullmatch(k)
        and isinstance(v, str)
        and HTTP_HEADER_VALUE.fullmatch(v)
        for k, v in value.items()
    ):
        raise ConfigError(
            f"{where}: expected a table of header names to string values of visible ASCII "
            "text without tabs, line breaks or spaces at either end, "
            'e.g. { Authorization = "Bearer <key>" }'
        )
    return dict(value)


def unknown_key(where: str, key: str, valid: Iterable[str], table: str) -> ConfigError:
    """The error for ``key`` (dotted from ``where`` when nested) in ``table``, whose keys
    are ``valid``: it names the key, the likely one and every valid key."""
    valid = list(valid)
    close = difflib.get_close_matches(key.rsplit(".", 1)[-1], valid, n=1)
    hint = f" — did you mean {close[0]!r}?" if close else " —"
    return ConfigError(
        f"{where}: unknown key {key!r}{hint} valid keys in {table}: {', '.join(valid) or 'none'}"
    )


def _checked(field: attrs.Attribute, value: Any, key: str, where: str) -> Any:
    check = field.metadata["check"]
    try:
        return check.test(value)
    except _Bad as bad:
        what = check.what
        if bad.what is not None:
            key, what, value = key + bad.suffix, bad.what, bad.value
        raise ConfigError(f"{where}: {key}: expected {what}, got {_got(value)}") from None


def _table(value: Any, key: str, where: str, header: str = "") -> Any:
    """``value`` if it is a TOML table, else the error naming ``key`` and its ``header``."""
    if not isinstance(value, dict):
        header = header or f"[{key}]"
        raise ConfigError(f"{where}: {key}: expected a table ({header}), got {_got(value)}")
    return value


def _section(cls: type, name: str, table: Any, where: str) -> Any:
    _table(table, name, where)
    fields = {f.name: f for f in attrs.fields(cls)}
    values = {}
    for key, value in table.items():
        if key not in fields:
            raise unknown_key(where, f"{name}.{key}", fields, f"[{name}]")
        values[key] = _checked(fields[key], value, f"{name}.{key}", where)
    return _converter.structure(values, cls)


def _plain(name: str, value: Any, where: str) -> Any:
    if name == "mcp_servers":
        if not isinstance(value, list):
            raise ConfigError(
                f"{where}: mcp_servers: expected an array of tables ([[mcp_servers]]), "
                f"got {_got(value)}"
            )
        for index, item in enumerate(value):
            _table(item, f"mcp_servers[{index}]", where, "[[mcp_servers]]")
        return tuple(value)
    _table(value, name, where)
    if name == "providers":
        for provider, settings in value.items():
            _table(settings, f"providers.{provider}", where)
    return value


def _resolve_dir(text: str, base_dir: Path) -> Path:
    path = Path(text).expanduser()
    return path if path.is_absolute() else base_dir / path


def _build(
    data: Mapping[str, Any], where: str, base_dir: Path, env: Mapping[str, str]
) -> RoostConfig:
    values: dict[str, Any] = {}
    for key, value in data.items():
        if key == "home":
            if not isinstance(value, (str, Path)) or not str(value).strip():
                raise ConfigError(f"{where}: home: expected a directory path, got {_got(value)}")
            values["home"] = _resolve_dir(str(value), base_dir)
        elif key in _SECTIONS:
            values[key] = _section(_SECTIONS[key], key, value, where)
        elif key in _PLAIN:
            values[key] = _plain(key, value, where)
        else:
            raise unknown_key(where, key, _TOP_LEVEL, "the top level")
    if "agents" in values:
        dirs = tuple(str(_resolve_dir(d, base_dir)) for d in values["agents"].dirs)
        values["agents"] = attrs.evolve(values["agents"], dirs=dirs)
    if "http" in values and values["http"].keys:
        keys = tuple(
            attrs.evolve(k, key_file=str(_resolve_dir(k.key_file, base_dir))) if k.key_file else k
            for k in values["http"].keys
        )
        values["http"] = attrs.evolve(values["http"], keys=keys)
    values.setdefault("home", resolve_data_dir(env))
    return RoostConfig(**values)


def _env_override(
    config: RoostConfig, env: Mapping[str, str], name: str, section: str, key: str
) -> RoostConfig:
    raw = env.get(name, "").strip()
    if not raw:
        return config
    current = getattr(config, section)
    field = attrs.fields_dict(type(current))[key]
    check = field.metadata["check"]
    if check.integer:
        with contextlib.suppress(InvalidInput):  # else the check says what it expected
            raw = parse_int(raw, name, -(10**18), 10**18)
    value = _checked(field, raw, f"{section}.{key}", f"environment variable {name}")
    return attrs.evolve(config, **{section: attrs.evolve(current, **{key: value})})


def _apply_env(config: RoostConfig, env: Mapping[str, str]) -> RoostConfig:
    if env.get(HOME_ENV, "").strip():
        config = attrs.evolve(config, home=resolve_data_dir(env))
    config = _env_override(config, env, HOST_ENV, "http", "host")
    config = _env_override(config, env, PORT_ENV, "http", "port")
    config = _env_override(config, env, MAX_DEPTH_ENV, "kernel", "max_depth")
    # The variable named by http.api_key_env is the more specific choice; ROOST_API_KEY next.
    for name in dict.fromkeys((config.http.api_key_env, API_KEY_ENV)):
        if env.get(name, "").strip():
            return _env_override(config, env, name, "http", "api_key")
    return config


def _read_config_file(path: Path) -> dict[str, Any]:
    try:
        text = read_text(path, MAX_CONFIG_BYTES)
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a directory; expected a {CONFIG_FILENAME} file") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the file: {exc.strerror or exc}") from exc
    except ValueError as exc:  # too large, or not UTF-8
        raise ConfigError(f"{path}: {exc}") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    except ValueError:  # Python reads no integer of more than 4,300 digits
        raise ConfigError(
            f"{path}: invalid TOML: an integer of more than 4,300 digits; write a smaller one"
        ) from None
    except RecursionError:
        raise ConfigError(f"{path}: invalid TOML: nested too deeply") from None


def find_config_file(
    path: str | Path | None = None, *, env: Mapping[str, str] = os.environ, cwd: Path | None = None
) -> Path | None:
    """The config file to use, or None for defaults; ``ConfigError`` if a named one is
    missing."""
    here = cwd or Path.cwd()
    if path is not None:
        origin, chosen = "--config", Path(path)
    elif env.get(CONFIG_ENV, "").strip():
        origin, chosen = f"${CONFIG_ENV}", Path(env[CONFIG_ENV].strip())
    else:
        candidate = here / CONFIG_FILENAME
        return candidate if candidate.is_file() else None
    chosen = _resolve_dir(str(chosen), here)
    if not chosen.exists():
        raise ConfigError(f"config file {chosen} (from {origin}) does not exist; check the path")
    return chosen


def load_config(
    path: str | Path | None = None,
    *,
    env: Mapping[str, str] = os.environ,
    cwd: Path | None = None,
) -> RoostConfig:
    """Load ``roost.toml`` (see the module doc); its relative paths are from its folder."""
    file = find_config_file(path, env=env, cwd=cwd)
    if file is None:
        config = _build({}, "defaults", cwd or Path.cwd(), env)
    else:
        data = _read_config_file(file)
        config = attrs.evolve(_build(data, str(file), file.parent.absolute(), env), source=file)
    return _apply_env(config, env)


def default_config(*, env: Mapping[str, str] = os.environ, **overrides: Any) -> RoostConfig:
    """The defaults (no file, only ``$ROOST_HOME``), with ``overrides``: ``home``, and
    sections as objects (``http=HttpConfig(port=0)``) or checked dicts (``http={"port": 0}``)."""
    plain = {k: v for k, v in overrides.items() if not attrs.has(type(v))}
    built = _build(plain, "default_config()", Path.cwd(), env)
    ready = {k: v for k, v in overrides.items() if attrs.has(type(v))}
    for key, value in ready.items():
        if key not in _SECTIONS or not isinstance(value, _SECTIONS[key]):
            raise ConfigError(
                f"default_config(): {key}: expected one of the section objects for "
                f"{', '.join(_SECTIONS)}, got {type(value).__name__}"
            )
    return attrs.evolve(built, **ready)
