"""Which agent run a local HTTP caller belongs to, when it does not say.

A tool that starts processes for an agent's run (``bash``) registers the process it
started with the run's trace context (``ProcessTraces.register``). When a request reaches
the daemon over loopback TCP, the daemon can find the process at the other end on Linux:
the connection's two endpoints → the client socket's inode (``/proc/net/tcp`` and
``tcp6``) → a process holding that socket (``/proc/<pid>/fd``) among the descendants of a
registered process. A call from such a process then continues that run's trace even if
it sends no trace headers, or forged lower ones (``TraceContext.deepest`` of both).

Bounds: the table holds at most ``capacity`` processes (registering past it fails, the
tool does not run); a look-up visits at most ``MAX_PROCESSES`` processes and
``MAX_FDS`` descriptors, and when a registered process tree is bigger than that it
assumes the deepest running context rather than none. Look-ups run in a worker thread
(at most two at once), only for loopback peers and only while something is registered.

What it cannot know: a call relayed by a process outside the registered trees (another
daemon, a proxy, any service on the host that the child talks to), a call over a
non-loopback address, and anything on systems without Linux's ``/proc``. The registered
process must be a child subreaper (``bash``'s supervisor is) so that a process that
double-forks stays among its descendants.
"""

from __future__ import annotations

import ipaddress
import os
import struct
import sys
from collections.abc import Callable, Iterator
from typing import Any

import trio

from ._errors import RoostError
from ._trace import TraceContext, deepest

DEFAULT_CAPACITY = 1024
MAX_PROCESSES = 4096
MAX_FDS = 65536
_TCP_TABLES = ("/proc/net/tcp", "/proc/net/tcp6")

Endpoint = tuple[str, int]


class ProcessTraces:
    """Trace contexts of the processes tools run for agents, by pid (bounded).

    A look-up visits at most ``max_processes`` processes and ``max_fds`` descriptors."""

    def __init__(
        self,
        capacity: int = DEFAULT_CAPACITY,
        *,
        max_processes: int = MAX_PROCESSES,
        max_fds: int = MAX_FDS,
    ) -> None:
        self.capacity = capacity
        self.max_processes = max_processes
        self.max_fds = max_fds
        self._by_pid: dict[int, TraceContext] = {}
        self._limiter = trio.CapacityLimiter(2)

    def __len__(self) -> int:
        return len(self._by_pid)

    def register(self, pid: int, trace: TraceContext) -> Callable[[], None]:
        """Record that process ``pid`` (and everything it starts) runs within ``trace``;
        returns the function that forgets it (call it once the process tree is gone).
        Raises RoostError when ``capacity`` processes are registered already."""
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
        """The context of the registered run whose process is the client of the TCP
        connection from ``peer`` to ``local`` (``(host, port)`` each, as sockets and ASGI
        scopes give them); None when the peer is not on loopback, nothing is registered,
        no registered process tree holds the connection, or this is not Linux."""
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
            return deepest(*roots.values())
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
    """The inode of the client's socket of the TCP connection ``client`` → ``server`` in
    this network namespace (in any state: a client that half-closed still counts); None if
    there is none."""
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
    """The root among ``roots`` whose process tree (itself and its descendants) holds the
    client socket of ``client`` → ``server``; None if none does; -1 when the search went
    past ``max_processes`` / ``max_fds`` first. Blocking: run it in a thread."""
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
