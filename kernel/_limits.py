"""The open-file limit: raised for the daemon, restored for the processes it starts.

A soft ``RLIMIT_NOFILE`` of 1,024 is too low for a thousand callers (``accept()`` fails);
``roost run`` raises it to the hard limit. Children inherit limits, so a child (``bash``, an
MCP stdio server) gets the operator's soft limit back, for programs that still use
``select()`` or size tables by it.
"""

from __future__ import annotations

# The operator's soft limit, set when raise_open_file_limit raised it (None: unchanged).
_operator_soft: int | None = None

# What the soft limit is raised to when the hard limit is unlimited (Linux's nr_open default).
_UNLIMITED_CAP = 1 << 20


def raise_open_file_limit() -> tuple[int, int] | None:
    """Raise the soft open-file limit to the hard one: ``(before, after)``, or None when
    there is nothing to raise. For a process that is the daemon's alone."""
    global _operator_soft
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        target = _UNLIMITED_CAP if hard == resource.RLIM_INFINITY else hard
        if soft == resource.RLIM_INFINITY or soft >= target:
            return None
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ImportError, OSError, ValueError):  # not POSIX, or a limit we may not set
        return None
    if _operator_soft is None:
        _operator_soft = soft
    return soft, target


def child_open_file_limit() -> int | None:
    """The soft open-file limit a child process should run with (the operator's, from
    before ``raise_open_file_limit``), or None when roost did not change it."""
    return _operator_soft
