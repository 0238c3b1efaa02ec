"""Where roost keeps its data: ``ROOST_HOME``, else the platform's user data directory."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import platformdirs

from ._errors import ConfigError

HOME_ENV = "ROOST_HOME"
DATABASE_FILENAME = "roost.db"
WORKSPACES_DIRNAME = "workspaces"


def resolve_data_dir(env: Mapping[str, str] = os.environ) -> Path:
    """The data directory (absolute), without creating it."""
    configured = env.get(HOME_ENV, "").strip()
    if configured:
        return Path(configured).expanduser().absolute()
    return Path(platformdirs.user_data_dir("roost", appauthor=False)).absolute()


def ensure_private_dir(path: Path, *, source: str = "data directory") -> Path:
    """Create ``path`` (and parents), the last with mode 0700; ConfigError naming it if it fails."""
    if path.is_dir():
        return path
    if path.exists():
        raise ConfigError(f"{source} {path} exists but is not a directory; point it elsewhere")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.mkdir(mode=0o700, exist_ok=True)
        path.chmod(0o700)  # mkdir's mode is filtered by the umask
    except OSError as exc:
        raise ConfigError(f"cannot create {source} {path}: {exc.strerror or exc}") from exc
    return path


def data_dir(env: Mapping[str, str] = os.environ) -> Path:
    """roost's data directory (see ``resolve_data_dir``), created with mode 0700."""
    source = f"data directory (${HOME_ENV})" if env.get(HOME_ENV, "").strip() else "data directory"
    return ensure_private_dir(resolve_data_dir(env), source=source)


def database_path(home: Path) -> Path:
    """The default SQLite database inside data directory ``home``."""
    return home / DATABASE_FILENAME


def workspaces_dir(home: Path) -> Path:
    """Where agents without an explicit ``workspace`` get theirs (``<home>/workspaces``)."""
    return home / WORKSPACES_DIRNAME


def read_text(path: Path, limit: int) -> str:
    """Read a UTF-8 file of at most ``limit`` bytes (raises OSError / ValueError)."""
    with path.open("rb") as handle:
        # Its size, plus a byte to see the end: read(limit + 1) allocates the limit per file.
        want = min(os.fstat(handle.fileno()).st_size, limit) + 1
        raw = handle.read(want)
        if len(raw) == want:  # longer than its size said (growing, a pipe, /proc): read on
            raw += handle.read(limit + 1 - len(raw))
    if len(raw) > limit:
        raise ValueError(f"file is larger than {limit} bytes")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ValueError(f"not valid UTF-8 text (byte {exc.start})") from None
