"""roost.plugins.cli — the ``roost`` command line: every command calls a kernel or plugin
API; importing it loads only the standard library, so start-up stays fast.
"""

from ._main import build_parser, dispatch, main

__all__ = ["build_parser", "dispatch", "main"]
