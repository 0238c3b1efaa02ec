"""roost.plugins.tools — the built-in tools: bash, read, write, edit, list, glob, grep, web_fetch.

Registered through the ``roost.plugins`` entry point ``tools``, exactly like a third-party
plugin. Settings come from ``[tools]`` in ``roost.toml`` (``ToolsSettings.from_config``);
``landlock_status()`` tells whether bash is confined, ``file_access(ctx)`` what an agent's file
tools and bash may touch.
"""

from __future__ import annotations

from typing import Any

from roost.kernel import Tool, hookimpl

from ._artifact import artifact_tool
from ._bash import bash_tool, child_environment, protect_process, warn_if_unconfined
from ._fs import fs_tools
from ._landlock import LandlockStatus, landlock_status
from ._sandbox import SANDBOX_MODES, FileAccess, ToolsSettings, file_access
from ._web import html_to_text, web_fetch_tool

TOOL_NAMES = ("bash", "read", "write", "edit", "list", "glob", "grep", "web_fetch", "artifact")


def build_tools(settings: ToolsSettings | None = None) -> list[Tool]:
    """Every built-in tool descriptor, configured by ``settings`` (defaults if None)."""
    settings = settings or ToolsSettings()
    return [bash_tool(settings), *fs_tools(), web_fetch_tool(settings), artifact_tool()]


@hookimpl
def roost_tools(config: Any) -> list[Tool]:
    """The built-in tools, from ``config.tools`` (``config`` may be None). The process becomes
    non-dumpable first: its environment holds the API keys, no child may read or ptrace it."""
    protect_process()
    warn_if_unconfined()
    return build_tools(ToolsSettings.from_config(config))


__all__ = [
    "SANDBOX_MODES",
    "TOOL_NAMES",
    "FileAccess",
    "LandlockStatus",
    "ToolsSettings",
    "build_tools",
    "child_environment",
    "file_access",
    "html_to_text",
    "landlock_status",
    "roost_tools",
]
