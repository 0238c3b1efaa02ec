"""roost.plugins.cli — the ``roost`` command line (``roost --help`` lists the commands).

A thin layer: every command calls a kernel or plugin API. Importing this package loads
only the standard library, so start-up stays fast.
"""

from ._main import build_parser, dispatch, main

__all__ = ["build_parser", "dispatch", "main"]
