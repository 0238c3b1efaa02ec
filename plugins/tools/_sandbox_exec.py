"""The process that runs a bash command for the ``bash`` tool: isolate, confine, run, reap.

    python -I -S _sandbox_exec.py [--parent PID] [--pidns] [--landlock [RULES]] -- CMD ...

RULES: ``--read DIR``, ``--write DIR``, ``--deny PATH`` (each repeatable), ``--no-files``
(leave files unconfined), ``--tcp`` with ``--connect PORT`` / ``--bind PORT`` (refuse
other TCP), ``--no-scope`` (let signals and abstract unix sockets out).

1. With ``--parent``, asks for a signal when that process dies (``PR_SET_PDEATHSIG``; it
   fires when the parent *thread* exits, so it only prompts a check, and the parent is
   also polled) and exits at once if the parent is already gone (it died before prctl).
   Becomes a child subreaper, so whatever the command leaves behind is re-parented here.
2. With ``--pidns``, the command runs in new PID and mount namespaces (and a user
   namespace when not root): an init process mounts a fresh ``/proc`` that shows only the
   command's own processes, so the command cannot see, signal or read any other process.
   When the command exits, init exits and the kernel kills everything left in the
   namespace at once.
3. Without namespaces, everything left behind is killed and reaped here: one ``/proc``
   scan per round, every process found killed, every child reaped (a setsid'd
   ``sleep 100 &`` included).
4. The command itself runs with the Landlock rules applied (``--landlock``; if they
   cannot be, it exits with 126 rather than run unconfined), without CAP_SYS_PTRACE in
   its bounding set, and with default signal handling.
5. On SIGTERM/SIGINT/SIGHUP (roost's timeout or cancellation) or when the parent is gone
   (roost was SIGKILLed), kills the whole tree at once and exits with 128 + the signal.

``--probe`` checks that the namespaces work here (exit 0) or says why not (exit 1).
Standard library only, run with ``-I -S`` so that it starts fast.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import select
import signal
import sys
from pathlib import Path

SANDBOX_EXIT_CODE = 126
EXEC_FAILED_EXIT_CODE = 127
USAGE_EXIT_CODE = 2
PR_SET_PDEATHSIG = 1
PR_CAPBSET_DROP = 24
PR_SET_CHILD_SUBREAPER = 36
CAP_SYS_PTRACE = 19
CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
MS_NOSUID, MS_NODEV, MS_NOEXEC = 2, 4, 8
MS_REC, MS_PRIVATE = 1 << 14, 1 << 18
PARENT_DEATH_SIGNAL = signal.SIGUSR1
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
WATCHED = {signal.SIGCHLD, PARENT_DEATH_SIGNAL, *STOP_SIGNALS}
PARENT_POLL_S = 0.5
_MAX_KILL_ROUNDS = 1000

_libc = ctypes.CDLL(None, use_errno=True)


def _prctl(option: int, value: int) -> bool:
    return _libc.prctl(ctypes.c_int(option), ctypes.c_ulong(value), 0, 0, 0) == 0


def _fail(message: str, code: int = SANDBOX_EXIT_CODE) -> int:
    os.write(2, f"roost sandbox: {message}\n".encode())
    return code


def _load_landlock():
    path = Path(__file__).with_name("_landlock.py")
    spec = importlib.util.spec_from_file_location("_roost_landlock", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


# ---- arguments -------------------------------------------------------------------------


class Options:
    def __init__(self) -> None:
        self.parent: int | None = None
        self.pidns = False
        self.landlock = False
        self.read: list[str] = []
        self.write: list[str] = []
        self.deny: list[str] = []
        self.files = True
        self.tcp = False
        self.connect: list[int] = []
        self.bind: list[int] = []
        self.scope = True
        self.command: list[str] = []


def parse(argv: list[str]) -> Options:
    opts, i = Options(), 0
    lists = {"--read": opts.read, "--write": opts.write, "--deny": opts.deny}
    ports = {"--connect": opts.connect, "--bind": opts.bind}
    flags = {"--pidns": "pidns", "--landlock": "landlock", "--tcp": "tcp"}
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            opts.command = argv[i + 1 :]
            if not opts.command:
                raise ValueError("no command after '--'")
            return opts
        if arg in flags:
            setattr(opts, flags[arg], True)
            i += 1
        elif arg == "--no-files":
            opts.files = False
            i += 1
        elif arg == "--no-scope":
            opts.scope = False
            i += 1
        elif arg in lists and i + 1 < len(argv):
            lists[arg].append(argv[i + 1])
            i += 2
        elif arg in ports and i + 1 < len(argv) and argv[i + 1].isdigit():
            ports[arg].append(int(argv[i + 1]))
            i += 2
        elif arg == "--parent" and i + 1 < len(argv) and argv[i + 1].isdigit():
            opts.parent = int(argv[i + 1])
            i += 2
        else:
            raise ValueError(f"unexpected argument {arg!r}")
    raise ValueError("missing '--' before the command")


# ---- processes -------------------------------------------------------------------------


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
    """SIGKILL every descendant and reap them all (orphans are re-parented to us as they
    appear); returns the wait status of each child reaped."""
    me = os.getpid()
    statuses: dict[int, int] = {}
    for _ in range(_MAX_KILL_ROUNDS):
        for pid in descendants(me):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
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


# ---- namespaces ------------------------------------------------------------------------


def enter_namespaces() -> str | None:
    """Unshare PID and mount namespaces (and a user namespace when not root) for our
    future children; None on success, else why not."""
    flags = CLONE_NEWPID | CLONE_NEWNS
    uid, gid = os.geteuid(), os.getegid()
    if uid != 0:
        flags |= CLONE_NEWUSER
    if _libc.unshare(ctypes.c_int(flags)) != 0:
        return f"unshare: {os.strerror(ctypes.get_errno())}"
    if uid != 0:
        try:
            for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
                with open(f"/proc/self/{name}", "w") as f:
                    f.write(text)
        except OSError as exc:
            return f"cannot map the user namespace: {exc.strerror or exc}"
    return None


def mount_private_proc() -> str | None:
    """In a new mount namespace: stop mounts propagating out, then a /proc of our own PID
    namespace. None on success, else why not."""
    _libc.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_void_p]
    if _libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        return f"cannot make mounts private: {os.strerror(ctypes.get_errno())}"
    if _libc.mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None) != 0:
        return f"cannot mount /proc: {os.strerror(ctypes.get_errno())}"
    return None


def probe() -> int:
    """Exit 0 if the PID namespace with its own /proc works here, else 1 and the reason."""
    why = enter_namespaces()
    if why is not None:
        return _fail(why, 1)
    pid = os.fork()
    if pid == 0:
        why = mount_private_proc()
        if why is None and os.getpid() == 1 and Path("/proc/1").exists() and not Path("/proc/2").exists():
            os._exit(0)
        os.write(2, f"roost sandbox: {why or 'the new /proc shows other processes'}\n".encode())
        os._exit(1)
    _, status = os.waitpid(pid, 0)
    return exit_code(status)


# ---- the command -----------------------------------------------------------------------


def exec_confined(opts: Options, original_mask: set) -> None:
    """Become the command: Landlock, no CAP_SYS_PTRACE, default signals. Never returns."""
    try:
        for signum in STOP_SIGNALS:
            signal.signal(signum, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, original_mask)
        if os.geteuid() == 0:
            # Root could otherwise read other processes' memory and environment.
            _prctl(PR_CAPBSET_DROP, CAP_SYS_PTRACE)
        if opts.landlock:
            landlock = _load_landlock()
            rules = landlock.Rules(
                read=tuple(opts.read),
                write=tuple(opts.write),
                deny=tuple(opts.deny),
                restrict_files=opts.files,
                restrict_tcp=opts.tcp,
                connect=tuple(opts.connect),
                bind=tuple(opts.bind),
                scope=opts.scope,
            )
            try:
                landlock.restrict_self(rules)
            except Exception as exc:  # fail closed: never run unconfined by accident
                os._exit(
                    _fail(f"Landlock could not be applied ({exc}); refusing to run the command unconfined")
                )
        os.execv(opts.command[0], opts.command)
    except BaseException as exc:
        os.write(2, f"roost sandbox: cannot run {opts.command[0]!r}: {exc}\n".encode())
    os._exit(EXEC_FAILED_EXIT_CODE)


def run_init(opts: Options, original_mask: set, outer_alive: int) -> int:
    """PID 1 of the new namespace: a private /proc, then the command; its status is ours.
    Returning ends the namespace: the kernel kills whatever is left in it."""
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    # If the supervisor died before prctl, nobody would tell us: its end of the pipe is shut.
    if select.select([outer_alive], [], [], 0)[0]:
        return SANDBOX_EXIT_CODE
    why = mount_private_proc()
    if why is not None:
        return _fail(f"{why}; refusing to run the command without its own /proc")
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


class Supervisor:
    """The waiting loop around the command (or its namespace's init), ``child``."""

    def __init__(self, child: int, parent: int | None) -> None:
        self.child = child
        self.parent = parent
        self.status: int | None = None

    def parent_gone(self) -> bool:
        return self.parent is not None and os.getppid() != self.parent

    def wait(self) -> tuple[str, int]:
        """("exited", 0) when the child exits, ("stop", signum) on a stop signal, or
        ("orphaned", SIGKILL) when the parent is gone."""
        while True:
            info = signal.sigtimedwait(WATCHED, PARENT_POLL_S)
            statuses: dict[int, int] = {}
            _reap_ready(statuses)
            if self.child in statuses:
                self.status = statuses[self.child]
                return "exited", 0
            if info is not None and info.si_signo in STOP_SIGNALS:
                return "stop", info.si_signo
            if self.parent_gone():
                return "orphaned", signal.SIGKILL


def main(argv: list[str] | None = None) -> int:
    """Run the command isolated, confined and supervised; return the exit status to use."""
    argv = sys.argv[1:] if argv is None else argv
    if argv == ["--probe"]:
        return probe()
    try:
        opts = parse(argv)
    except ValueError as exc:
        return _fail(
            f"{exc}; usage: [--parent PID] [--pidns] [--landlock [--read DIR] [--write DIR] "
            "[--deny PATH] [--no-files] [--tcp [--connect PORT] [--bind PORT]] [--no-scope]] "
            "-- COMMAND ...",
            USAGE_EXIT_CODE,
        )
    original_mask = signal.pthread_sigmask(signal.SIG_BLOCK, WATCHED)
    if opts.parent is not None:
        if not _prctl(PR_SET_PDEATHSIG, PARENT_DEATH_SIGNAL):
            return _fail(f"prctl(PR_SET_PDEATHSIG) failed: {os.strerror(ctypes.get_errno())}")
        if os.getppid() != opts.parent:
            return 128 + signal.SIGKILL  # the parent died before prctl could take effect
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    alive_r = alive_w = -1
    if opts.pidns:
        why = enter_namespaces()
        if why is not None:
            return _fail(f"{why}; refusing to run the command without its own PID namespace")
        alive_r, alive_w = os.pipe()
    child = os.fork()
    if child == 0:
        if opts.pidns:
            os.close(alive_w)
            os._exit(run_init(opts, original_mask, alive_r))
        exec_confined(opts, original_mask)
    if opts.pidns:
        os.close(alive_r)
    supervisor = Supervisor(child, opts.parent)
    outcome, signum = supervisor.wait()
    if outcome != "exited":
        try:
            os.kill(child, signal.SIGKILL)  # in a namespace, its init: that ends it all
        except ProcessLookupError:
            pass
    statuses = kill_tree()
    if supervisor.status is None:
        supervisor.status = statuses.get(child)
    if outcome != "exited":
        return 128 + signum
    return exit_code(supervisor.status) if supervisor.status is not None else SANDBOX_EXIT_CODE


if __name__ == "__main__":
    sys.exit(main())
