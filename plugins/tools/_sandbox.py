"""The file-access model of an agent (``file_access(ctx)``), and the plugin's settings.

Read and write: its workspace and ``files.write``; read: ``files.read``; bash also its
``$TMPDIR`` and the system trees (``SYSTEM_READ_ROOTS`` minus ``SYSTEM_DENY``). roost's data
directory, other agents' workspaces, roost.toml, the key files it names and the agents'
manifests are carved out of any root containing them. Modes:
``sandbox``, ``read-only``, ``rwx`` (README.md, "Built-in tools and the sandbox"). The file
tools enforce it (a path checked lexically, never a symlink resolved, then opened beneath
its root by ``_beneath``); for bash, Landlock does (``FileAccess.landlock_args``).
"""

from __future__ import annotations

import atexit
import glob as globlib
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import trio
from roost.kernel import (
    ConfigError,
    SandboxError,
    ToolArgumentsInvalid,
    ToolContext,
    ToolSpec,
    number_setting,
)

SANDBOX_MODES = ("sandbox", "read-only", "rwx")
# What bash may read beyond the agent's own roots: programs, libraries, configuration.
SYSTEM_READ_ROOTS = (
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt", "/etc",
    "/proc", "/sys/devices/system/cpu", "/nix/store",
)  # fmt: skip
# Secrets under those roots that bash may not read even so.
SYSTEM_DENY = (
    "/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-", "/etc/sudoers",
    "/etc/sudoers.d", "/etc/ssl/private", "/etc/security/opasswd", "/etc/ssh/ssh_host_*_key",
)  # fmt: skip
READ_GRANT = "files.read"
WRITE_GRANT = "files.write"

# Threads one agent's file tools may hold: one stuck in the OS starves only its own agent.
FILE_THREADS_PER_AGENT = 4

_fallback_temp: Path | None = None
_limiters: trio.lowlevel.RunVar = trio.lowlevel.RunVar("roost_tools_limiters")


def workspace_of(ctx: ToolContext) -> Path:
    """The agent's workspace as an absolute, resolved path."""
    return Path(os.path.realpath(os.path.abspath(os.fspath(ctx.workspace))))


def _real(path: Path | str) -> Path:
    return Path(os.path.realpath(os.path.abspath(os.path.expanduser(os.fspath(path)))))


def data_home(ctx: ToolContext) -> Path | None:
    """roost's data directory when the call runs in a kernel, else None."""
    return _real(ctx.kernel.config.home) if ctx.kernel is not None else None


def temp_dir_of(ctx: ToolContext) -> Path:
    """Bash's ``$TMPDIR`` (0700): ``<data dir>/tmp/<agent>``; outside a kernel, ``<agent>`` under
    one private directory per process. Each command gets a private tmpfs mounted there where
    namespaces work, else uses this directory itself."""
    global _fallback_temp
    if (home := data_home(ctx)) is not None:
        base = home / "tmp"
    else:
        if _fallback_temp is None or not _fallback_temp.is_dir():
            _fallback_temp = Path(os.path.realpath(tempfile.mkdtemp(prefix="roost-tmp-")))
            atexit.register(shutil.rmtree, _fallback_temp, ignore_errors=True)
        base = _fallback_temp
    path = base / ctx.agent
    if not path.is_dir():
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


def thread_limiter(agent: str) -> trio.CapacityLimiter:
    """The calling agent's own thread limiter (one per agent per Trio run)."""
    try:
        table = _limiters.get()
    except LookupError:
        table = {}
        _limiters.set(table)
    limiter = table.get(agent)
    if limiter is None:
        limiter = table[agent] = trio.CapacityLimiter(FILE_THREADS_PER_AGENT)
    return limiter


async def agent_thread(ctx: ToolContext, fn: Any) -> Any:
    """``fn()`` in a worker thread under the agent's limiter, abandoned when cancelled."""
    return await trio.to_thread.run_sync(
        fn, limiter=thread_limiter(ctx.agent), abandon_on_cancel=True
    )


def path_argument(arguments: Any, *, default: str | None = None) -> str:
    """The ``path`` argument (a string, as the schema says), checked for what it cannot say."""
    value = arguments.get("path", default)
    if not value.strip():
        raise ToolArgumentsInvalid(f"arguments.path: expected a non-empty path, got {value!r}")
    if "\0" in value:
        raise ToolArgumentsInvalid("arguments.path: a path cannot contain a NUL character")
    return value


def string_arg(description: str) -> dict[str, Any]:
    """A non-empty string argument's schema."""
    return {"type": "string", "minLength": 1, "description": description}


def text_arg(description: str) -> dict[str, Any]:
    """A string argument's schema (empty allowed)."""
    return {"type": "string", "description": description}


def int_arg(description: str, minimum: int, maximum: int | None = None) -> dict[str, Any]:
    """An integer argument's schema (no ``maximum``: unbounded above)."""
    bounds = {"minimum": minimum} if maximum is None else {"minimum": minimum, "maximum": maximum}
    return {"type": "integer", **bounds, "description": description}


def flag_arg(description: str) -> dict[str, Any]:
    """A boolean argument's schema."""
    return {"type": "boolean", "description": description}


def tool_spec(
    *,
    name: str,
    title: str,
    description: str,
    properties: dict[str, Any],
    required: Sequence[str] = (),
    output_schema: dict[str, Any] | None = None,
    untrusted: bool = False,
    timeout_s: float | None = None,
    **hints: bool,
) -> ToolSpec:
    """A built-in tool's spec: arguments ``properties`` (no others), ``required`` among them;
    the annotations repeat the title and add ``hints`` (``openWorldHint`` false unless given)."""
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = list(required)
    schema["additionalProperties"] = False
    return ToolSpec(
        name=name,
        title=title,
        description=description,
        input_schema=schema,
        output_schema=output_schema,
        annotations={"title": title, "openWorldHint": False, **hints},
        untrusted=untrusted,
        timeout_s=timeout_s,
    )


def _inside(path: Path, root: Path) -> bool:
    return path == root or path.is_relative_to(root)


@attrs.frozen
class Located:
    """A checked path: open ``rel`` beneath ``root`` (``follow``: symlinks allowed, rwx)."""

    root: Path
    rel: str
    path: Path
    follow: bool = False


@attrs.frozen
class FileAccess:
    """What one agent may read and write (see the module docstring)."""

    agent: str
    mode: str
    workspace: Path
    temp: Path
    read: tuple[Path, ...] = ()
    write: tuple[Path, ...] = ()
    deny: tuple[tuple[Path, str], ...] = ()  # (path, what it is)

    def locate(self, raw: str, *, write: bool = False) -> Located:
        """Where ``raw`` lies; ``SandboxError`` names the manifest field that would allow it."""
        verb, grant = ("write", WRITE_GRANT) if write else ("read", READ_GRANT)
        if write and self.mode == "read-only":
            raise SandboxError(
                f"cannot write {raw!r}: agent {self.agent!r} runs in read-only mode, which "
                'refuses every write; set "sandbox": "sandbox" (its workspace) or "rwx" in its '
                "agent.json to allow writes"
            )
        path = Path(os.path.normpath(self.workspace / raw))
        if self.mode == "rwx":
            return Located(Path("/"), os.path.relpath(path, "/"), path, follow=True)
        # (a directory or file the agent may use, what names it in messages)
        roots = [
            (self.workspace, "its workspace"),
            *(() if write else ((p, READ_GRANT) for p in self.read)),
            *((p, WRITE_GRANT) for p in self.write),
        ]
        inside = [r for r in roots if _inside(path, r[0])]
        if not inside:
            granted = [str(p) for p, what in roots if what in (READ_GRANT, WRITE_GRANT)]
            also = f" and {', '.join(granted)}" if granted else ""
            raise SandboxError(
                f"cannot {verb} {raw!r}: {path} is outside what agent {self.agent!r} may "
                f"{verb} — its workspace {self.workspace}{also}; "
                f'to allow it, add "{path}" (or a directory above it) to "{grant}" in its '
                "agent.json"
            )
        root, through = max(inside, key=lambda r: len(r[0].parts))
        for denied, what in sorted(self.deny, key=lambda d: -len(d[0].parts)):
            if denied != root and _inside(denied, root) and _inside(path, denied):
                raise SandboxError(
                    f"cannot {verb} {raw!r}: {path} is inside {what} ({denied}), which agent "
                    f"{self.agent!r} may not {verb} through {through} {root}; only an "
                    f'entry in "{grant}" naming a path inside it would allow that'
                )
        return Located(root, os.path.relpath(path, root), path)

    def denied_below(self, located: Located) -> frozenset[str]:
        """The denied paths below ``located``, relative to it (walks do not enter them)."""
        if located.follow:
            return frozenset()
        return frozenset(
            os.path.relpath(d, located.path)
            for d, _ in self.deny
            if d != located.path and _inside(d, located.path)
        )

    def bash_path(self, path: str) -> str:
        """``PATH`` minus dirs bash may not read: one there fails (EACCES) before later matches."""
        if self.mode == "rwx":
            return path
        roots = [_real(p) for p in SYSTEM_READ_ROOTS]
        roots += [self.workspace, self.temp, *self.read, *self.write]
        kept = [
            d
            for d in path.split(":")
            if os.path.isabs(d) and any(_inside(_real(d), r) for r in roots)
        ]
        return ":".join(dict.fromkeys(kept))

    def landlock_args(self) -> list[str]:
        """The ``_sandbox_exec`` rule arguments that confine bash to this model."""
        if self.mode == "rwx":
            return ["--no-files"]
        read = [str(_real(p)) for p in SYSTEM_READ_ROOTS if os.path.exists(p)]
        resolv = _real("/etc/resolv.conf")  # often a symlink into /run
        if resolv.exists():
            read.append(str(resolv))
        read += [str(p) for p in self.read]
        write = [str(self.temp)]
        agent_roots = [str(self.workspace), *(str(p) for p in self.write)]
        (read if self.mode == "read-only" else write).extend(agent_roots)
        deny = [str(d) for d, _ in self.deny]
        for pattern in SYSTEM_DENY:
            deny += [str(_real(p)) for p in globlib.glob(pattern)]
        args: list[str] = []
        for flag, paths in (("--read", read), ("--write", write), ("--deny", deny)):
            for p in dict.fromkeys(paths):
                args += [flag, p]
        return args


_CARVES = "roost.tools.agent_carves"  # kernel.extensions: the last _agent_carves, by its key


def _agent_carves(ctx: ToolContext, home: Path) -> Sequence[tuple[str, Path, str]]:
    """``(skipped for, real path, what)``: each agent's workspace (skipped for that agent)
    and each manifest (skipped for none: its MCP servers' or A2A peers' headers may hold
    keys, and edited it would change the agent's grants). Resolved once per kernel until an
    agent, a workspace, a manifest path or ``home`` changes, not on every call: at 10,000
    agents that is 20,000 ``realpath``s. A path through a symlink is resolved on every call:
    an agent that may write beside that symlink may swap it. (Without one, the directories
    leading to the path are carved out of every root holding them: none may be swapped.)"""
    agents = ctx.kernel.agents
    key = (
        home,
        tuple(
            (name, getattr(manifest, "workspace", None), getattr(manifest, "path", None))
            for name, manifest in agents.items()
        ),
    )
    cache = getattr(ctx.kernel, "extensions", None)
    if cache is None or (found := cache.get(_CARVES)) is None or found[0] != key:
        paths: list[tuple[str, Path | str, str]] = []
        for name, other in agents.items():
            if hasattr(other, "workspace_dir"):
                paths.append((name, other.workspace_dir(home), f"agent {name!r}'s workspace"))
            if (path := getattr(other, "path", None)) is not None:
                paths.append(("", path, f"agent {name!r}'s manifest"))  # its own too
        carves = [(name, _real(path), what) for name, path, what in paths]
        swappable = tuple(
            (i, paths[i][1])
            for i, (_, real, _) in enumerate(carves)
            if str(real) != os.path.abspath(os.path.expanduser(paths[i][1]))
        )
        found = (key, tuple(carves), swappable)
        if cache is not None:
            cache[_CARVES] = found
    carves = found[1]
    if found[2]:
        carves = list(carves)
        for i, path in found[2]:
            carves[i] = (carves[i][0], _real(path), carves[i][2])
    return carves


def file_access(ctx: ToolContext) -> FileAccess:
    """The file-access model of the calling agent (from its manifest when in a kernel)."""
    mode = ctx.sandbox
    if mode not in SANDBOX_MODES:
        raise SandboxError(
            f"unknown sandbox mode {mode!r} for agent {ctx.agent!r}; "
            f"use one of {', '.join(SANDBOX_MODES)} in its agent.json"
        )
    workspace = workspace_of(ctx)
    temp = temp_dir_of(ctx)
    agents = ctx.kernel.agents if ctx.kernel is not None else {}
    manifest = agents.get(ctx.agent)
    files = getattr(manifest, "files", None)
    read = tuple(_real(p) for p in getattr(files, "read", ()))
    write = tuple(_real(p) for p in getattr(files, "write", ()))
    deny: list[tuple[Path, str]] = []
    if (home := data_home(ctx)) is not None:
        deny.append((home, "roost's data directory"))
        deny += [(path, what) for name, path, what in _agent_carves(ctx, home) if name != ctx.agent]
        # roost.toml may hold http.api_key; key files hold the principals' keys.
        config = ctx.kernel.config
        if (source := getattr(config, "source", None)) is not None:
            deny.append((_real(source), "roost's configuration file"))
        for key in getattr(getattr(config, "http", None), "keys", ()):
            if key.key_file:
                deny.append((_real(key.key_file), f"the key file of principal {key.name!r}"))
    return FileAccess(ctx.agent, mode, workspace, temp, read, write, tuple(deny))


def _number(section: Any, name: str, default: float) -> Any:
    value = getattr(section, name, None)
    if value is None:
        return default
    integer = isinstance(default, int)  # the field's default says which kind it is
    whole = integer and isinstance(value, float) and value.is_integer()
    checked = number_setting(int(value) if whole else value, integer=integer)
    if checked is None:
        kind = "a positive integer" if integer else "a positive number"
        raise ConfigError(f"tools.{name}: expected {kind}, got {value!r}")
    return checked


@attrs.frozen
class ToolsSettings:
    """The ``[tools]`` settings the built-in tools use (see ``from_config``)."""

    timeout_s: float = 60.0
    max_output_chars: int = 50_000
    bash_timeout_s: float = 120.0
    bash_max_output_chars: int = 30_000
    env_allowlist: tuple[str, ...] = ()
    allow_private_network: bool = False
    web_max_bytes: int = 5_000_000
    web_timeout_s: float = 30.0

    @classmethod
    def from_config(cls, config: Any) -> ToolsSettings:
        """Read ``config.tools`` defensively: missing fields take defaults, bad ones raise."""
        section = getattr(config, "tools", None)
        allowlist = getattr(section, "env_allowlist", None)
        if allowlist is None:
            allowlist = ()
        if isinstance(allowlist, str) or not all(
            isinstance(x, str) and x.strip() for x in allowlist
        ):
            raise ConfigError(
                f"tools.env_allowlist: expected a list of environment variable names, "
                f"got {allowlist!r}"
            )
        private = getattr(section, "allow_private_network", False)
        if not isinstance(private, bool):
            raise ConfigError(
                f"tools.allow_private_network: expected true or false, got {private!r}"
            )
        numbers = {
            f.name: _number(section, f.name, f.default)
            for f in attrs.fields(cls)
            if type(f.default) in (int, float)
        }
        return cls(
            env_allowlist=tuple(x.strip() for x in allowlist),
            allow_private_network=private,
            **numbers,
        )
