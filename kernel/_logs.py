"""The process's log without its credentials: ``redact_from_logs``, ``redact_for_log``,
``RedactingFormatter`` and ``RedactingStreamHandler``."""

from __future__ import annotations

import contextlib
import io
import logging
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import re

# The credentials kept out of this process's log (one per process, like the log itself), and
# the patterns of all their forms, built when one is added.
_log_secrets: tuple[str, ...] = ()
_log_pattern: tuple[re.Pattern[str], re.Pattern[str] | None] | None = None


def redact_from_logs(secrets: Iterable[str]) -> None:
    """Have ``redact_for_log`` (so every ``RedactingFormatter``) replace ``secrets`` (as
    ``roost.kernel.redact`` finds them) in all it is given from now on, for the life of the
    process."""
    global _log_secrets, _log_pattern
    added = tuple(dict.fromkeys((*_log_secrets, *(s for s in secrets if s))))
    if added != _log_secrets:
        from ._tools import _needles

        _log_secrets, _log_pattern = added, _needles(added)[0]


# A record's ``extra`` when its message is ``redact_for_log``'s: ``RedactingFormatter`` writes
# it as it is (unless an exception or stack comes with it), so a line is redacted once.
REDACTED_FOR_LOG = {"redacted_for_log": True}


def redact_for_log(text: str | bytes, limit: int | None = None) -> str:
    """``text`` (bytes read as UTF-8) with each credential given to ``redact_from_logs``
    replaced, in every form ``redact`` knows: for what reaches the log's stream outside a
    ``RedactingFormatter``, or a message logged with ``extra=REDACTED_FOR_LOG``. With
    ``limit``: its first ``limit`` characters once redacted (see ``redacted_head``)."""
    from ._tools import _redact_text, redacted_head  # here: `roost version` stays quick

    if limit is not None:
        return redacted_head(text, _log_secrets, limit)
    text = text.decode("utf-8", "replace") if isinstance(text, bytes) else text
    return text if _log_pattern is None else _redact_text(text, _log_pattern)


class RedactingFormatter(logging.Formatter):
    """A ``logging.Formatter`` whose whole output (message, arguments, traceback, stack) has
    each credential given to ``redact_from_logs`` replaced, in every form ``redact`` knows."""

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        if record.exc_text or record.stack_info or not getattr(record, "redacted_for_log", 0):
            return redact_for_log(text)
        return text


class RedactingStreamHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """A ``logging.StreamHandler`` writing through a ``RedactingFormatter`` (of ``fmt``) whose
    report of a record it failed to write (``--- Logging error ---``: a traceback, the
    message and its arguments, on ``sys.stderr``) is redacted too."""

    def __init__(self, stream: io.TextIOBase | None = None, fmt: str | None = None) -> None:
        super().__init__(stream)
        self.setFormatter(RedactingFormatter(fmt))

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 - logging's name
        report = io.StringIO()
        with contextlib.redirect_stderr(report):
            super().handleError(record)
        if (text := report.getvalue()) and sys.stderr:
            with contextlib.suppress(OSError):  # as logging does: stderr itself may be gone
                sys.stderr.write(redact_for_log(text))
