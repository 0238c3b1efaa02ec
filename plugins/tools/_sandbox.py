"""Path confinement for the file tools, and the plugin's settings.

Sandbox modes (``ToolContext.sandbox``):

- ``sandbox``: reads anywhere; writes only inside the workspace and the temp dir.
- ``read-only``: reads anywhere; every write is refused.
- ``rwx``: no confinement.

Paths are resolved (symlinks and ``..``) before the check, so a symlink inside the
workspace that points outside it is refused like the outside path itself.
"""

from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path
from typing import Any

import attrs
from roost.kernel import ConfigError, SandboxError, ToolArgumentsInvalid, ToolContext

SANDBOX_MODES = ("sandbox", "read-only", "rwx")


def temp_roots() -> tuple[Path, ...]:
    """The temp directories writes are allowed in (``tempfile.gettempdir()``, resolved)."""
    return (Path(os.path.realpath(tempfile.gettempdir())),)


def workspace_of(ctx: ToolContext) -> Path:
    """The agent's workspace as an absolute, resolved path."""
    return Path(os.path.realpath(os.path.abspath(os.fspath(ctx.workspace))))


def path_argument(arguments: Any, name: str = "path", *, default: str | None = None) -> str:
    """The string argument ``name`` (a path), checked; raises a clear error otherwise."""
    value = arguments.get(name, default) if hasattr(arguments, "get") else default
    if value is None:
        raise ToolArgumentsInvalid(f"arguments.{name}: required; give a file path")
    if not isinstance(value, str) or not value.strip():
        raise ToolArgumentsInvalid(
            f"arguments.{name}: expected a non-empty path string, got {value!r}"
        )
    if "\0" in value:
        raise ToolArgumentsInvalid(f"arguments.{name}: a path cannot contain a NUL character")
    return value


def resolve(raw: str, ctx: ToolContext) -> Path:
    """``raw`` made absolute (relative to the workspace) with symlinks and ``..`` resolved."""
    path = Path(raw)
    if not path.is_absolute():
        path = workspace_of(ctx) / path
    return Path(os.path.realpath(path))


def _inside(path: Path, root: Path) -> bool:
    return path == root or path.is_relative_to(root)


def check_mode(ctx: ToolContext) -> str:
    mode = ctx.sandbox
    if mode not in SANDBOX_MODES:
        raise SandboxError(
            f"unknown sandbox mode {mode!r} for agent {ctx.agent!r}; "
            f"use one of {', '.join(SANDBOX_MODES)} in its agent.json"
        )
    return mode


def writable_path(raw: str, ctx: ToolContext) -> Path:
    """Resolve ``raw`` for writing, or raise ``SandboxError`` saying which mode permits it."""
    mode = check_mode(ctx)
    if mode == "read-only":
        raise SandboxError(
            f"cannot write {raw!r}: agent {ctx.agent!r} runs in read-only mode, which refuses "
            'every write; set "sandbox": "sandbox" (workspace and temp dir) or "rwx" in its '
            "agent.json to allow writes"
        )
    resolved = resolve(raw, ctx)
    if mode == "rwx":
        return resolved
    workspace = workspace_of(ctx)
    roots = (workspace, *temp_roots())
    if any(_inside(resolved, root) for root in roots):
        return resolved
    lexical = Path(os.path.normpath(Path(raw) if Path(raw).is_absolute() else workspace / raw))
    via = " through a symlink" if any(_inside(lexical, r) for r in roots) else ""
    raise SandboxError(
        f"cannot write {raw!r}: it resolves{via} to {resolved}, outside the workspace "
        f"{workspace} and the temp dir {roots[1]}; in sandbox mode writes must stay inside "
        'those — write there instead, or set "sandbox": "rwx" in the agent.json to allow it'
    )


# --------------------------------------------------------------------------------------
# Settings
# --------------------------------------------------------------------------------------


def _number(section: Any, name: str, default: float, *, integer: bool = False) -> Any:
    value = getattr(section, name, None) if section is not None else None
    if value is None:
        return default
    bad = isinstance(value, bool) or not isinstance(value, (int, float))
    if not bad:
        bad = not math.isfinite(value) or value <= 0 or (integer and value != int(value))
    if bad:
        kind = "a positive integer" if integer else "a positive number"
        raise ConfigError(f"tools.{name}: expected {kind}, got {value!r}")
    return int(value) if integer else float(value)


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
        section = getattr(config, "tools", None) if config is not None else None
        allowlist = getattr(section, "env_allowlist", None) if section is not None else None
        if allowlist is None:
            allowlist = ()
        if isinstance(allowlist, str) or not all(
            isinstance(x, str) and x.strip() for x in allowlist
        ):
            raise ConfigError(
                f"tools.env_allowlist: expected a list of environment variable names, "
                f"got {allowlist!r}"
            )
        private = getattr(section, "allow_private_network", False) if section is not None else False
        if not isinstance(private, bool):
            raise ConfigError(
                f"tools.allow_private_network: expected true or false, got {private!r}"
            )
        return cls(
            timeout_s=_number(section, "timeout_s", 60.0),
            max_output_chars=_number(section, "max_output_chars", 50_000, integer=True),
            bash_timeout_s=_number(section, "bash_timeout_s", 120.0),
            bash_max_output_chars=_number(section, "bash_max_output_chars", 30_000, integer=True),
            env_allowlist=tuple(x.strip() for x in allowlist),
            allow_private_network=private,
            web_max_bytes=_number(section, "web_max_bytes", 5_000_000, integer=True),
            web_timeout_s=_number(section, "web_timeout_s", 30.0),
        )
