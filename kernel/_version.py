"""The installed roost's version, for banners, cards, user agents and telemetry."""

from __future__ import annotations

import functools
from importlib import metadata


@functools.cache
def roost_version() -> str:
    """The installed ``roost`` distribution's version ("0+unknown" in a bare checkout)."""
    try:
        return metadata.version("roost")
    except metadata.PackageNotFoundError:  # pragma: no cover - a bare checkout
        return "0+unknown"
