"""The process that runs a bash command for the ``bash`` tool: isolate, confine, run, reap.

Its arguments are ``main``'s usage text plus ``--nofile N``. It dies with its ``--parent``
(``PR_SET_PDEATHSIG`` fires when the parent *thread* exits, so it only prompts a check; the parent
is also polled), is a child subreaper with ``oom_score_adj`` 1000, and with ``--pidns`` runs the
command under an init of new PID and mount namespaces (a user namespace when not root) with its own
``/proc``, ``--netns``, ``--tmp`` and a ``pid_max`` cap; without them it kills and reaps whatever
the command left. The command gets no capabilities, Landlock, rlimits, the socket filter and
default signals, or exits 126 rather than run less confined. On SIGTERM/SIGINT/SIGHUP or when the
parent is gone it kills the whole tree and exits 128 + the signal. Standard library only, run with
``-I -S`` to start fast. README.md, "Built-in tools and the sandbox", says what each part enforces.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import importlib.util
import os
import resource
import select
import signal
import struct
import sys
from pathlib import Path

SANDBOX_EXIT_CODE = 126
EXEC_FAILED_EXIT_CODE = 127
USAGE_EXIT_CODE = 2
PR_SET_PDEATHSIG = 1
PR_CAPBSET_READ = 23
PR_CAPBSET_DROP = 24
PR_SET_SECUREBITS = 28
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
CAP_SETPCAP = 8
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
# NOROOT, NO_SETUID_FIXUP, KEEP_CAPS off and NO_CAP_AMBIENT_RAISE, each locked: uid 0
# gains no capability on exec or setuid, and none can be raised again.
SECURE_BITS = 0x01 | 0x02 | 0x04 | 0x08 | 0x20 | 0x40 | 0x80
CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_NOSUID, MS_NODEV, MS_NOEXEC = 2, 4, 8
MS_REC, MS_PRIVATE = 1 << 14, 1 << 18
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
OOM_SCORE_ADJ = 1000
# Once PIDs wrap, the kernel reuses them from 300 up: pid_max = N + 300 leaves room for N.
RESERVED_PIDS = 300
PARENT_DEATH_SIGNAL = signal.SIGUSR1
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
WATCHED = {signal.SIGCHLD, PARENT_DEATH_SIGNAL, *STOP_SIGNALS}
PARENT_POLL_S = 0.5
_MAX_KILL_ROUNDS = 1000

_libc = ctypes.CDLL(None, use_errno=True)


def _prctl(option: int, value: int) -> bool:
    return _libc.prctl(ctypes.c_int(option), ctypes.c_ulong(value), 0, 0, 0) == 0


# Linux 6.14 made pid_max per PID namespace; before, root in a namespace set the host's.
try:
    _release = os.uname().release.split("-", 1)[0].split(".")
    PER_NAMESPACE_PID_MAX = (int(_release[0]), int(_release[1])) >= (6, 14)
except (ValueError, IndexError):
    PER_NAMESPACE_PID_MAX = False


def _fail(message: str, code: int = SANDBOX_EXIT_CODE) -> int:
    os.write(2, f"roost sandbox: {message}\n".encode())
    return code


def _abort(message: str) -> None:
    """In the child, before exec: exit at once with ``SANDBOX_EXIT_CODE``, saying why."""
    os._exit(_fail(message))


def _load(name: str):
    """A sibling module by file (this process runs with ``-I -S``, not as a package)."""
    path = Path(__file__).with_name(f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"_roost{name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


class Options:
    """The command line, parsed (``parse``); also the rules ``_landlock.restrict_self`` reads."""

    parent: int | None = None
    tmp: str | None = None
    pidns = netns = landlock = tcp = sockets = False
    userns = False  # set by main: the namespaces include a user namespace
    files = scope = True
    tmp_mb = memory_mb = processes = 0
    nofile = 0  # the soft open-file limit to restore (0: leave it)

    def __init__(self) -> None:
        self.read: list[str] = []
        self.write: list[str] = []
        self.deny: list[str] = []
        self.connect: list[int] = []
        self.bind: list[int] = []
        self.command: list[str] = []


_SWITCHES = {
    "--pidns": ("pidns", True), "--landlock": ("landlock", True), "--tcp": ("tcp", True),
    "--netns": ("netns", True), "--sockets": ("sockets", True), "--no-files": ("files", False),
    "--no-scope": ("scope", False),
}  # fmt: skip
_NUMBERS = {"--memory": "memory_mb", "--processes": "processes", "--nofile": "nofile"}


def parse(argv: list[str]) -> Options:
    opts, rest = Options(), list(argv)
    while rest:
        arg = rest.pop(0)
        if arg == "--":
            opts.command = rest
            if not opts.command:
                raise ValueError("no command after '--'")
            if (opts.netns or opts.tmp) and not opts.pidns:
                raise ValueError("--netns and --tmp need --pidns")
            return opts
        number = int(rest[0]) if rest and rest[0].isdigit() else -1
        if arg in _SWITCHES:
            setattr(opts, *_SWITCHES[arg])
        elif arg in ("--read", "--write", "--deny") and rest:
            getattr(opts, arg[2:]).append(rest.pop(0))
        elif arg in ("--connect", "--bind") and number >= 0:
            getattr(opts, arg[2:]).append(int(rest.pop(0)))
        elif arg == "--parent" and number >= 0:
            opts.parent = int(rest.pop(0))
        elif arg in _NUMBERS and number > 0:
            setattr(opts, _NUMBERS[arg], int(rest.pop(0)))
        elif arg == "--tmp" and len(rest) > 1 and rest[1].isdigit() and int(rest[1]) > 0:
            opts.tmp, opts.tmp_mb = rest.pop(0), int(rest.pop(0))
        else:
            raise ValueError(f"unexpected argument {arg!r}")
    raise ValueError("missing '--' before the command")


def _parent_map() -> dict[int, list[int]]:
    """parent pid -> child pids, from one scan of /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat.rsplit(b")", 1)[-1].split()
        if len(fields) > 1:
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    return children


def descendants(root: int) -> list[int]:
    """Every process below ``root``."""
    tree = _parent_map()
    out: list[int] = []
    pending = list(tree.get(root, ()))
    while pending:
        pid = pending.pop()
        out.append(pid)
        pending.extend(tree.get(pid, ()))
    return out


def _reap_ready(statuses: dict[int, int]) -> bool:
    """Reap every child that has exited; False once we have no children left."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return False
        if pid == 0:
            return True
        statuses[pid] = status


def kill_tree() -> dict[int, int]:
    """SIGKILL and reap every descendant (orphans re-parent to us); child pid -> status."""
    me = os.getpid()
    statuses: dict[int, int] = {}
    for _ in range(_MAX_KILL_ROUNDS):
        for pid in descendants(me):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        try:
            pid, status = os.waitpid(-1, 0)  # a killed child dies promptly
        except ChildProcessError:
            break
        statuses[pid] = status
        if not _reap_ready(statuses):
            break
    return statuses


def exit_code(status: int) -> int:
    code = os.waitstatus_to_exitcode(status)
    return code if code >= 0 else 128 - code


class _Refused(Exception):
    """A part of the isolation could not be set up; the message says which, and why."""


def _check(ok: bool, what: str) -> None:
    if not ok:
        raise _Refused(f"{what}: {os.strerror(ctypes.get_errno())}")


def _write(path: str, text: str, what: str) -> None:
    try:
        with open(path, "w") as f:
            f.write(text)
    except OSError as exc:
        raise _Refused(f"{what}: {exc.strerror or exc}") from None


def loopback_up() -> None:
    """Bring up ``lo`` in our (new) network namespace."""
    fd = _libc.socket(2, 2, 0)  # AF_INET, SOCK_DGRAM: any socket of the namespace will do
    _check(fd >= 0, "socket")
    try:
        request = bytearray(struct.pack("16sH22x", b"lo", 0))
        fcntl.ioctl(fd, SIOCGIFFLAGS, request)
        flags = struct.unpack_from("H", request, 16)[0] | IFF_UP
        struct.pack_into("H", request, 16, flags)
        fcntl.ioctl(fd, SIOCSIFFLAGS, request)
    except OSError as exc:
        raise _Refused(f"cannot bring up lo: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def enter_namespaces(*, netns: bool = False) -> None:
    """Unshare PID, mount (user when not root, net with ``netns``) namespaces for children."""
    flags = CLONE_NEWPID | CLONE_NEWNS | (CLONE_NEWNET if netns else 0)
    uid, gid = os.geteuid(), os.getegid()
    if uid != 0:
        flags |= CLONE_NEWUSER
    _check(_libc.unshare(ctypes.c_int(flags)) == 0, "unshare")
    if uid != 0:
        for name, text in (
            ("setgroups", "deny"),
            ("uid_map", f"{uid} {uid} 1"),
            ("gid_map", f"{gid} {gid} 1"),
        ):
            _write(f"/proc/self/{name}", text, "cannot map the user namespace")
    if netns:
        loopback_up()


def _mount(
    source: bytes, target: bytes, fstype: bytes | None, flags: int, data: bytes | None
) -> bool:
    _libc.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_char_p]
    return _libc.mount(source, target, fstype, flags, data) == 0


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def drop_capabilities() -> None:
    """Leave this process (and what it executes) no capability at all, root or not."""
    header, data = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0), (_CapData * 2)()
    _check(_libc.capget(ctypes.byref(header), data) == 0, "capget")
    if data[0].effective >> CAP_SETPCAP & 1:  # root, or a user namespace of our own
        _check(_prctl(PR_SET_SECUREBITS, SECURE_BITS), "prctl(PR_SET_SECUREBITS)")
        cap = 0
        while _libc.prctl(ctypes.c_int(PR_CAPBSET_READ), ctypes.c_ulong(cap), 0, 0, 0) >= 0:
            _check(_prctl(PR_CAPBSET_DROP, cap), f"prctl(PR_CAPBSET_DROP, {cap})")
            cap += 1
    _libc.prctl(ctypes.c_int(PR_CAP_AMBIENT), ctypes.c_ulong(PR_CAP_AMBIENT_CLEAR_ALL), 0, 0, 0)
    _check(_libc.capset(ctypes.byref(header), (_CapData * 2)()) == 0, "capset")
    _check(_prctl(PR_SET_NO_NEW_PRIVS, 1), "prctl(PR_SET_NO_NEW_PRIVS)")


def exec_confined(opts: Options, original_mask: set) -> None:
    """Become the command, confined (see the module docstring). Never returns."""
    try:
        for signum in STOP_SIGNALS:
            signal.signal(signum, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, original_mask)
        try:
            drop_capabilities()
        except _Refused as exc:
            _abort(f"cannot drop capabilities ({exc}); refusing to run the command with them")
        seccomp = _load("_seccomp") if opts.sockets else None  # before Landlock hides it
        if opts.landlock:
            landlock = _load("_landlock")
            try:
                landlock.restrict_self(opts)
            except Exception as exc:  # fail closed: never run unconfined by accident
                _abort(
                    f"Landlock could not be applied ({exc}); refusing to run the command unconfined"
                )
        try:
            if seccomp is not None:
                seccomp.install(own_netns=opts.netns)
            if opts.processes and opts.userns:  # RLIMIT_NPROC never binds uid 0 of the host
                resource.setrlimit(resource.RLIMIT_NPROC, (opts.processes, opts.processes))
            if opts.nofile:
                hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
                resource.setrlimit(resource.RLIMIT_NOFILE, (opts.nofile, hard))
            if opts.memory_mb:  # last: this process allocates nothing more before exec
                limit = opts.memory_mb << 20
                resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        except (OSError, ValueError, OverflowError) as exc:  # a limit past the C type's range
            _abort(
                f"the socket filter or the resource limits could not be applied ({exc}); "
                "refusing to run the command without them"
            )
        os.execv(opts.command[0], opts.command)
    except BaseException as exc:
        os.write(2, f"roost sandbox: cannot run {opts.command[0]!r}: {exc}\n".encode())
    os._exit(EXEC_FAILED_EXIT_CODE)


def run_init(opts: Options, original_mask: set, outer_alive: int) -> int:
    """PID 1 of the new namespaces: private /proc, tmp and PID cap, then the command; returning
    ends the namespace (the kernel kills whatever is left in it)."""
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    # If the supervisor died before prctl, nobody would tell us: its end of the pipe is shut.
    if select.select([outer_alive], [], [], 0)[0]:
        return SANDBOX_EXIT_CODE
    try:
        # Stop mounts propagating out of the new mount namespace, then our own /proc.
        _check(_mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "cannot make mounts private")
        proc_flags = MS_NOSUID | MS_NODEV | MS_NOEXEC
        _check(_mount(b"proc", b"/proc", b"proc", proc_flags, None), "cannot mount /proc")
        if opts.tmp:  # a private tmpfs of at most tmp_mb MiB
            options = f"size={opts.tmp_mb}m,mode=0700".encode()
            tmp = os.fsencode(opts.tmp)
            mounted = _mount(b"tmpfs", tmp, b"tmpfs", MS_NOSUID | MS_NODEV, options)
            _check(mounted, f"cannot mount a tmpfs on {opts.tmp}")
        if opts.processes and PER_NAMESPACE_PID_MAX:  # else only the command's RLIMIT_NPROC
            pid_max = str(opts.processes + RESERVED_PIDS)
            _write("/proc/sys/kernel/pid_max", pid_max, "cannot set the namespace's pid_max")
    except _Refused as exc:
        return _fail(f"{exc}; refusing to run the command without its own namespaces")
    pid = os.fork()
    if pid == 0:
        exec_confined(opts, original_mask)
    while True:
        try:
            done, status = os.waitpid(-1, 0)
        except ChildProcessError:
            return SANDBOX_EXIT_CODE
        if done == pid:
            return exit_code(status)


def wait_for(child: int, parent: int | None) -> tuple[str, int, int | None]:
    """Wait for ``child`` (the command or its init): ``("exited", 0, status)``, ``("stop",
    signum, None)`` on a stop signal, or ``("orphaned", SIGKILL, None)`` if the parent died."""
    while True:
        info = signal.sigtimedwait(WATCHED, PARENT_POLL_S)
        statuses: dict[int, int] = {}
        _reap_ready(statuses)
        if child in statuses:
            return "exited", 0, statuses[child]
        if info is not None and info.si_signo in STOP_SIGNALS:
            return "stop", info.si_signo, None
        if parent is not None and os.getppid() != parent:
            return "orphaned", signal.SIGKILL, None


def main(argv: list[str] | None = None) -> int:
    """Run the command isolated, confined and supervised; return the exit status to use."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        opts = parse(argv)
    except ValueError as exc:
        return _fail(
            f"{exc}; usage: [--parent PID] [--pidns [--netns] [--tmp DIR MB]] [--memory MB] "
            "[--processes N] [--sockets] [--landlock [--read DIR] [--write DIR] [--deny PATH] "
            "[--no-files] [--tcp [--connect PORT] [--bind PORT]] [--no-scope]] -- COMMAND ...",
            USAGE_EXIT_CODE,
        )
    original_mask = signal.pthread_sigmask(signal.SIG_BLOCK, WATCHED)
    if opts.parent is not None:
        if not _prctl(PR_SET_PDEATHSIG, PARENT_DEATH_SIGNAL):
            return _fail(f"prctl(PR_SET_PDEATHSIG) failed: {os.strerror(ctypes.get_errno())}")
        if os.getppid() != opts.parent:
            return 128 + signal.SIGKILL  # the parent died before prctl could take effect
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    try:
        _write("/proc/self/oom_score_adj", str(OOM_SCORE_ADJ), "cannot set oom_score_adj")
    except _Refused as exc:
        return _fail(str(exc))
    alive_r = alive_w = -1
    if opts.pidns:
        opts.userns = os.geteuid() != 0
        try:
            enter_namespaces(netns=opts.netns)
        except _Refused as exc:
            return _fail(f"{exc}; refusing to run the command without its own namespaces")
        alive_r, alive_w = os.pipe()
    child = os.fork()
    if child == 0:
        if opts.pidns:
            os.close(alive_w)
            os._exit(run_init(opts, original_mask, alive_r))
        exec_confined(opts, original_mask)
    if opts.pidns:
        os.close(alive_r)
    outcome, signum, status = wait_for(child, opts.parent)
    if outcome != "exited":
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)  # in a namespace, its init: that ends it all
    kill_tree()
    return 128 + signum if status is None else exit_code(status)  # status: only when exited


if __name__ == "__main__":
    sys.exit(main())
