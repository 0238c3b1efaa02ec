"""The process's log without its credentials: ``redact_from_logs`` and ``RedactingFormatter``."""

from __future__ import annotations

import logging
from collections.abc import Iterable

# The credentials kept out of this process's log (one per process, like the log itself).
_log_secrets: tuple[str, ...] = ()


def redact_from_logs(secrets: Iterable[str]) -> None:
    """Have every ``RedactingFormatter`` replace ``secrets`` (as ``roost.kernel.redact`` finds
    them) in each line it writes from now on, for the life of the process."""
    global _log_secrets
    _log_secrets = tuple(dict.fromkeys((*_log_secrets, *(s for s in secrets if s))))


class RedactingFormatter(logging.Formatter):
    """A ``logging.Formatter`` whose whole output (message, arguments, traceback, stack) has
    each credential given to ``redact_from_logs`` replaced, in every form ``redact`` knows."""

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        if not _log_secrets:
            return text
        from ._tools import redact  # here: `roost version` logs nothing and stays quick

        return redact(text, _log_secrets)
