"""Which agent run a local HTTP caller belongs to, when it does not say.

A tool that starts processes for a run (``bash``) registers them with the run's trace
context. For a loopback TCP request on Linux, the daemon finds the client socket's inode
(``/proc/net/tcp``, ``tcp6``) and a process holding it (``/proc/<pid>/fd``) among a
registered process's descendants; the call then continues that run's trace even with no or
forged lower trace headers (the deepest of both wins).

Bounds: at most ``capacity`` registered processes; a look-up (in a worker thread, two at
once) visits at most ``MAX_PROCESSES`` processes and ``MAX_FDS`` descriptors, past which it
assumes the deepest running context. Blind to relays outside the registered trees, to
non-loopback calls and without ``/proc``; the registered process must be a child subreaper,
so that double-forked processes stay its descendants.
"""

from __future__ import annotations

import ipaddress
import os
import struct
import sys
from collections.abc import Callable, Iterator
from typing import Any

import attrs
import trio

from ._errors import RoostError
from ._trace import TraceContext

DEFAULT_CAPACITY = 1024
MAX_PROCESSES = 4096
MAX_FDS = 65536
_TCP_TABLES = ("/proc/net/tcp", "/proc/net/tcp6")

Endpoint = tuple[str, int]


@attrs.define(eq=False)
class ProcessTraces:
    """Trace contexts of the processes tools run for agents, by pid (bounded)."""

    capacity: int = DEFAULT_CAPACITY
    max_processes: int = attrs.field(default=MAX_PROCESSES, kw_only=True)
    max_fds: int = attrs.field(default=MAX_FDS, kw_only=True)
    _by_pid: dict[int, TraceContext] = attrs.field(factory=dict, init=False)
    _limiter: trio.CapacityLimiter = attrs.field(
        factory=lambda: trio.CapacityLimiter(2), init=False
    )

    def __len__(self) -> int:
        return len(self._by_pid)

    def register(self, pid: int, trace: TraceContext) -> Callable[[], None]:
        """Record that process ``pid`` and its descendants run within ``trace``; returns the
        function that forgets it. RoostError past ``capacity``."""
        if len(self._by_pid) >= self.capacity and pid not in self._by_pid:
            raise RoostError(
                f"too many tool processes running at once ({self.capacity}); wait for some "
                "to finish and retry"
            )
        self._by_pid[pid] = trace

        def release() -> None:
            if self._by_pid.get(pid) is trace:
                del self._by_pid[pid]

        return release

    async def caller_of(self, peer: Any, local: Any) -> TraceContext | None:
        """The context of the registered run whose process is the client of the TCP connection
        ``peer`` → ``local`` (``(host, port)`` each), else None."""
        if not self._by_pid or not sys.platform.startswith("linux"):
            return None
        client, server = _endpoint(peer), _endpoint(local)
        if client is None or server is None or not _is_loopback(client[0]):
            return None
        roots = dict(self._by_pid)
        found = await trio.to_thread.run_sync(
            find_owner,
            client,
            server,
            tuple(roots),
            self.max_processes,
            self.max_fds,
            limiter=self._limiter,
        )
        if found is None:
            return None
        if found == -1:  # past the bounds: assume the deepest running context, never none
            return TraceContext.deepest(*roots.values())
        return roots.get(found)


def _endpoint(value: Any) -> Endpoint | None:
    if not isinstance(value, (tuple, list)) or len(value) < 2:
        return None
    host, port = value[0], value[1]
    if not isinstance(host, str) or not isinstance(port, int):
        return None
    return host.split("%", 1)[0], port


def _ip(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return None
    mapped = getattr(ip, "ipv4_mapped", None)
    return mapped or ip


def _is_loopback(host: str) -> bool:
    ip = _ip(host)
    return ip is not None and ip.is_loopback


def _hex_forms(host: str, port: int) -> set[str]:
    """How ``/proc/net/tcp`` and ``tcp6`` write the endpoint (``0100007F:1F90``: the address
    in host byte order, 32 bits at a time): an IPv4 address in both tables' forms."""
    ip = _ip(host)
    if ip is None:
        return set()
    tail = f":{port:04X}"
    words = [ip.packed] if ip.version == 4 else []
    words.append(ipaddress.IPv6Address(f"::ffff:{ip}").packed if ip.version == 4 else ip.packed)
    return {
        "".join(f"{struct.unpack('=I', raw[i : i + 4])[0]:08X}" for i in range(0, len(raw), 4))
        + tail
        for raw in words
    }


def socket_inode(client: Endpoint, server: Endpoint) -> int | None:
    """The inode of the client socket of ``client`` → ``server`` (in any state), or None."""
    want_client, want_server = _hex_forms(*client), _hex_forms(*server)
    if not want_client or not want_server:
        return None
    for table in _TCP_TABLES:
        try:
            with open(table, encoding="ascii", errors="replace") as f:
                next(f, None)  # the header line
                for line in f:
                    fields = line.split()
                    if (
                        len(fields) < 10
                        or fields[1] not in want_client
                        or fields[2] not in want_server
                    ):
                        continue
                    if fields[9].isdigit() and int(fields[9]):  # 0: a socket already closed
                        return int(fields[9])
        except OSError:
            continue
    return None


def _children(pid: int) -> Iterator[int]:
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", encoding="ascii") as f:
                text = f.read()
        except OSError:
            continue
        for child in text.split():
            if child.isdigit():
                yield int(child)


class _Budget(Exception):
    pass


def _holds(pid: int, link: str, budget: list[int]) -> bool:
    """Whether process ``pid`` has a descriptor whose link reads ``link``."""
    try:
        entries = os.scandir(f"/proc/{pid}/fd")
    except OSError:
        return False
    with entries:
        for entry in entries:
            budget[0] -= 1
            if budget[0] < 0:
                raise _Budget
            try:
                if os.readlink(entry.path) == link:
                    return True
            except OSError:
                continue
    return False


def find_owner(
    client: Endpoint,
    server: Endpoint,
    roots: tuple[int, ...],
    max_processes: int = MAX_PROCESSES,
    max_fds: int = MAX_FDS,
) -> int | None:
    """The root among ``roots`` whose process tree holds the client socket of ``client`` →
    ``server``; None if none; -1 past the bounds. Blocking: run it in a thread."""
    inode = socket_inode(client, server)
    if inode is None:
        return None
    link = f"socket:[{inode}]"
    processes = max_processes
    budget = [max_fds]
    try:
        for root in roots:
            stack = [root]
            seen: set[int] = set()
            while stack:
                pid = stack.pop()
                if pid in seen:
                    continue
                seen.add(pid)
                processes -= 1
                if processes < 0:
                    return -1
                if _holds(pid, link, budget):
                    return root
                stack.extend(_children(pid))
    except _Budget:
        return -1
    return None
